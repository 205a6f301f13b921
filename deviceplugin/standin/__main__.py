"""``python -m deviceplugin.standin --plugin-dir DIR``: run the stand-in by hand until SIGTERM or Ctrl-C.

For trying a device plugin without a cluster: it logs every registration
and every capacity change, nothing else.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path

from deviceplugin.errors import CmkError
from deviceplugin.model.cpulist import parse_cpu_list
from deviceplugin.standin.standin import Kubelet, KubeletOptions
from deviceplugin.standin.topologymanager import TopologyPolicy


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deviceplugin.standin", description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--plugin-dir", type=Path, required=True, help="device plugin directory to serve kubelet.sock in")
    parser.add_argument("--pod-resources-socket", type=Path, help="also serve the pod resources API on this socket")
    parser.add_argument("--grace-period", type=float, default=300.0, help="seconds a resource keeps its capacity after its stream ends")
    parser.add_argument("--topology-manager-policy", type=TopologyPolicy, choices=list(TopologyPolicy),
                        default=TopologyPolicy.NONE, help="the kubelet's Topology Manager policy, container scope (default: none)")
    parser.add_argument("--numa-nodes", type=parse_cpu_list, default=frozenset({0}), metavar="LIST",
                        help="the node's NUMA node ids, as a list like 0-1 (default: 0)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    # As the daemon does: blocked before the first thread starts (threads inherit the mask) and taken with
    # sigwait. A handler setting an Event could deadlock on the Event's lock when the signal landed inside
    # wait(), which left the stand-in ignoring SIGTERM about one run in twenty.
    stop_signals = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
    try:
        try:
            kubelet = Kubelet(args.plugin_dir, KubeletOptions(
                pod_resources_socket=args.pod_resources_socket, grace_period=args.grace_period,
                topology_policy=args.topology_manager_policy, numa_nodes=sorted(args.numa_nodes)))
            kubelet.start()
        except (CmkError, OSError) as error:
            print(f"kubelet stand-in: {error}", file=sys.stderr)
            return 2
        signal.sigwait(stop_signals)
        kubelet.stop()
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, stop_signals)
    return 0


if __name__ == "__main__":
    sys.exit(main())
