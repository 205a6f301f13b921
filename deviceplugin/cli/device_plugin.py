"""``cmk device-plugin``: the node daemon a DaemonSet runs.

Plans the pools with exactly ``cmk describe``'s flags (plus ``--config FILE``
carrying them as YAML), serves each non-empty pool as its own kubelet device
plugin, and runs until SIGTERM/SIGINT, then removes its sockets and exits 0.

Around the daemon, each optional and each undone on the way out: Prometheus
metrics on ``--metrics-address``, the NFD feature file (``--no-nfd`` turns it
off), and the allocation resolver naming the pod behind each Allocate.
"""

from __future__ import annotations

import argparse
import gc
import logging
import signal
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

from api.constants import DEVICE_PLUGIN_DIR
from deviceplugin.cli.configfile import KEYS, apply_config, defer_defaults, load_config
from deviceplugin.cli.flags import (
    _address,
    add_plan_arguments,
    add_pod_resources_argument,
    add_root_arguments,
    host_dir,
    plan_options,
)
from deviceplugin.errors import CmkError
from deviceplugin.host.cdi import DEFAULT_CDI_DIR
from deviceplugin.host.install import DEFAULT_INSTALL_DIR
from deviceplugin.observe.logs import FORMATS

if TYPE_CHECKING:
    from deviceplugin.daemon import Daemon
    from deviceplugin.events import Events


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from deviceplugin.host.nfd import DEFAULT_FEATURES_DIR

    add_root_arguments(parser)
    add_plan_arguments(parser)
    group = parser.add_argument_group("daemon")
    group.add_argument("--kubelet-dir", type=Path, default=Path(DEVICE_PLUGIN_DIR), metavar="DIR",
                       help=f"the kubelet's device-plugin directory (default: {DEVICE_PLUGIN_DIR})")
    group.add_argument("--install-dir", type=host_dir, default=str(DEFAULT_INSTALL_DIR), metavar="DIR",
                       help="host directory holding the pinner (cmk install --install-dir), mounted "
                            f"read-only at /opt/bin in every container (default: {DEFAULT_INSTALL_DIR})")
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
                       help="YAML file with these flags as keys, all but --config, --log-level and --log-format "
                            "(e.g. num-exclusive-cores: 4); "
                            "flags given on the command line win")
    group.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"),
                       help="logging threshold (default: INFO)")
    observe = parser.add_argument_group("observability")
    observe.add_argument("--log-format", choices=FORMATS, default="text",
                         help="one line per event: text (key=value) or json (default: text)")
    observe.add_argument("--metrics-address", type=_address, metavar="HOST:PORT",
                         help="serve Prometheus metrics at http://HOST:PORT/metrics (default: off)")
    add_pod_resources_argument(observe, "read for the allocated-devices metric and to name the pod "
                                        "behind each allocation in the log")
    observe.add_argument("--nfd-features-dir", type=Path, default=DEFAULT_FEATURES_DIR, metavar="DIR",
                         help=f"write Node Feature Discovery labels to DIR/cmk.intel.com "
                              f"(default: {DEFAULT_FEATURES_DIR})")
    observe.add_argument("--nfd", action=argparse.BooleanOptionalAction, default=True,
                         help="write the Node Feature Discovery feature file (default: on)")
    defer_defaults(parser, (dest for dest, _ in KEYS.values()))


def run(args: argparse.Namespace) -> int:
    from deviceplugin.observe import logs as logfmt

    logfmt.configure(args.log_level, args.log_format)
    try:
        return _serve(args)
    except CmkError as err:
        if args.log_format != "json":
            raise  # the CLI prints its usual one line
        # A log shipper parsing JSON gets the error as one JSON line, not a stray text line.
        from deviceplugin.events import Events

        Events().emit("config_error", str(err), level=logging.ERROR, error=str(err))
        return err.exit_code


def _serve(args: argparse.Namespace) -> int:
    from deviceplugin.daemon import Daemon, DaemonSettings
    from deviceplugin.events import Events

    apply_config(args, load_config(args.config) if args.config else {})
    settings = DaemonSettings(kubelet_dir=args.kubelet_dir, sysfs_root=args.sysfs_root,
                              procfs_root=args.procfs_root, install_dir=str(args.install_dir),
                              plan=plan_options(args), cdi_dir=args.cdi_dir if args.cdi else None)
    events = Events()
    daemon = Daemon(settings, events=events)  # plans now: a bad plan fails here, before anything is served

    # SIGTERM/SIGINT are blocked before the first thread starts (every thread inherits the mask) and
    # taken with sigwait: a Python handler setting an Event the main thread waits on could deadlock
    # on the Event's lock if the signal landed inside wait(), and a signal delivered to a gRPC or
    # watcher thread would kill the process without cleanup. One arriving during start waits here.
    stop_signals = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
    try:
        with ExitStack() as cleanup:
            _observe(daemon, events, args, cleanup)
            cleanup.callback(daemon.stop)
            daemon.start()
            if args.nfd:  # labels say what is served: written once serving has started
                _write_nfd(daemon, events, args.nfd_features_dir, cleanup)
            # The topology, plan and device tree live as long as the process: keep the cyclic
            # collector from re-scanning them, so its pauses stay out of Allocate's latency.
            gc.freeze()
            signal.sigwait(stop_signals)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, stop_signals)
    return 0


def _observe(daemon: Daemon, events: Events, args: argparse.Namespace, cleanup: ExitStack) -> None:
    """Start the resolver and metrics before serving, so the first registrations count; undo on ``cleanup``."""
    from deviceplugin.observe.resolver import AllocationResolver

    resolver = AllocationResolver(events, args.pod_resources_socket)
    events.listen(resolver.on_event)
    resolver.start()
    cleanup.callback(resolver.stop)
    if args.metrics_address is not None:
        from deviceplugin.model.cpustats import places
        from deviceplugin.observe.cpumetrics import CpuCollector
        from deviceplugin.observe.metrics import Metrics, PoolCollector, serve_metrics

        cpu_stats = CpuCollector(procfs_root=args.procfs_root, places=places(daemon.topology, daemon.plan))
        collector = PoolCollector(tree=lambda: daemon.tree, plan=daemon.plan,
                                  registered=daemon.registered_resources, pod_resources=args.pod_resources_socket,
                                  cpu_stats=cpu_stats)
        metrics = Metrics(collector, daemon.tree)
        events.listen(metrics.on_event)
        host, port = cleanup.enter_context(serve_metrics(metrics.registry, *args.metrics_address))
        events.emit("metrics_serving", f"serving metrics at http://{host}:{port}/metrics",
                    address=f"{host}:{port}")


def _write_nfd(daemon: Daemon, events: Events, directory: Path, cleanup: ExitStack) -> None:
    from deviceplugin.host.nfd import feature_labels, remove_features, write_features

    labels = feature_labels(daemon.topology, daemon.plan)
    path = write_features(directory, labels)

    def remove() -> None:
        try:
            remove_features(path)
        except OSError as err:  # shutting down anyway: say so, still exit 0 as a rollout expects
            events.emit("nfd_remove_failed", f"cannot remove {path}: {err.strerror}", level=logging.WARNING,
                        path=str(path), error=err.strerror)
            return
        events.emit("nfd_removed", f"removed {path}", path=str(path))

    cleanup.callback(remove)
    events.emit("nfd_written", f"wrote NFD labels to {path}", path=str(path),
                labels=[f"{k}={v}" for k, v in labels.items()])
