"""``cmk device-plugin``: the node daemon a DaemonSet runs.

Plans the pools with exactly ``cmk describe``'s flags (plus ``--config FILE``
carrying them as YAML), serves each non-empty pool as its own kubelet device
plugin, and runs until SIGTERM/SIGINT, then removes its sockets and exits 0.
"""

from __future__ import annotations

import argparse
import gc
import logging
import signal
import threading
from pathlib import Path

from api.constants import DEVICE_PLUGIN_DIR
from deviceplugin.cdi import DEFAULT_CDI_DIR
from deviceplugin.config import KEYS, apply_config, defer_defaults, load_config
from deviceplugin.options import add_plan_arguments, add_root_arguments, plan_options


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_root_arguments(parser)
    add_plan_arguments(parser)
    group = parser.add_argument_group("daemon")
    group.add_argument("--kubelet-dir", type=Path, default=Path(DEVICE_PLUGIN_DIR), metavar="DIR",
                       help=f"the kubelet's device-plugin directory (default: {DEVICE_PLUGIN_DIR})")
    group.add_argument("--install-dir", default="/opt/bin", metavar="DIR",
                       help="host directory holding the pinner (cmk install --install-dir), mounted "
                            "read-only at /opt/bin in every container (default: /opt/bin)")
    group.add_argument("--cdi", action=argparse.BooleanOptionalAction, default=True,
                       help="write a CDI spec and name its device in every Allocate answer, so the "
                            "container runtime's hook confines each container to its CPUs (cgroup cpuset "
                            "and affinity) even if it never runs cmk isolate. Needs kubelet 1.28+ "
                            "(DevicePluginCDIDevices: beta and on in 1.29, GA in 1.31) and containerd 1.7+ "
                            "with enable_cdi, or CRI-O 1.23+; older ones ignore it (default: on)")
    group.add_argument("--cdi-dir", type=Path, default=DEFAULT_CDI_DIR, metavar="DIR",
                       help="the runtime's CDI spec directory the spec is written into at start and "
                            f"removed from at exit (default: {DEFAULT_CDI_DIR})")
    group.add_argument("--config", type=Path, metavar="FILE",
                       help="YAML file with any of these flags as keys (e.g. num-exclusive-cores: 4); "
                            "flags given on the command line win")
    group.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"),
                       help="logging threshold (default: INFO)")
    defer_defaults(parser, (dest for dest, _ in KEYS.values()))


def run(args: argparse.Namespace) -> int:
    from deviceplugin.daemon import Daemon, DaemonSettings

    apply_config(args, load_config(args.config) if args.config else {})
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = DaemonSettings(kubelet_dir=args.kubelet_dir, sysfs_root=args.sysfs_root,
                              procfs_root=args.procfs_root, install_dir=str(args.install_dir),
                              plan=plan_options(args), cdi_dir=args.cdi_dir if args.cdi else None)
    daemon = Daemon(settings)  # plans now: a bad plan fails here, before anything is served

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    try:
        daemon.start()
        # The topology, plan and device tree live as long as the process: keep the cyclic
        # collector from re-scanning them, so its pauses stay out of Allocate's latency.
        gc.freeze()
        stop.wait()
    finally:
        daemon.stop()
    return 0
