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
import signal
from contextlib import ExitStack
from datetime import UTC
from pathlib import Path
from typing import TYPE_CHECKING

from api.constants import DEVICE_PLUGIN_DIR
from deviceplugin.cli.configfile import (
    ActiveConfig,
    apply_config,
    apply_config_file,
    at_edge,
    defer_defaults,
)
from deviceplugin.cli.flags import DAEMON_FLAGS, add_flags, plan_options
from deviceplugin.errors import CmkError
from deviceplugin.events import EventLog
from deviceplugin.host.cdi import DEFAULT_CDI_DIR
from deviceplugin.host.installedpinner import DEFAULT_INSTALL_DIR
from deviceplugin.host.nfd import DEFAULT_FEATURES_DIR
from deviceplugin.model.modes import ServingMode
from deviceplugin.model.plan import PlanOptions

events = EventLog(__name__)

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from deviceplugin.daemon import Daemon
    from deviceplugin.daemon.draserving import DraLink


def add_arguments(parser: argparse.ArgumentParser) -> None:
    defer_defaults(parser, add_flags(parser, *DAEMON_FLAGS))


def run(args: argparse.Namespace) -> int:
    from deviceplugin.observe import logs as logfmt

    # No cyclic collection until the start is done (:func:`_serve` freezes what it made, then turns the
    # collector back on): the start accumulates what lives as long as the process (modules, topology,
    # plan, devices), and the collector re-scanning it as it grew took 60-80 ms of a start on 8,192
    # CPUs to find some 500 objects of garbage, which the freeze now keeps instead.
    collecting = gc.isenabled()
    gc.disable()
    try:
        logfmt.configure(args.log_level, args.log_format)
        return _serve(args, collect=collecting)
    except CmkError as err:
        if args.log_format != "json":
            raise  # the CLI prints its usual one line
        # A log shipper parsing JSON gets the error as one JSON line, not a stray text line.
        events.error("config_error", str(err), error=str(err))
        return err.exit_code
    finally:
        if collecting:
            gc.enable()


def _daemon(args: argparse.Namespace) -> tuple[Daemon, ActiveConfig | None]:
    """The daemon of the config, or, when the config or its plan is bad, of the last plan served.

    The running daemon is gone already (a rollout stops it first), so refusing
    to start would take every pool off the node: the last good plan keeps them
    while the error line, ``cmk_config_fallback`` and the readiness probe
    (``cmk probe --require-good-config``, halting the rollout) say what is wrong.
    """
    from deviceplugin.daemon import Daemon, DaemonSettings
    from deviceplugin.host import lastgood
    from deviceplugin.host.sysfs import discover
    from deviceplugin.model.node import plan_node

    def make(plan: PlanOptions, problem: str | None) -> Daemon:
        settings = DaemonSettings(kubelet_dir=args.kubelet_dir, sysfs_root=args.sysfs_root,
                                  procfs_root=args.procfs_root, install_dir=str(args.install_dir),
                                  plan=plan, cdi_dir=args.cdi_dir if args.cdi else None,
                                  pod_resources_socket=args.pod_resources_socket, config_problem=problem,
                                  unthrottle_exclusive=args.unthrottle_exclusive,
                                  irq_steering=args.irq_steering, irq_dir=args.irq_dir,
                                  infra_record_dir=Path(args.install_dir) if args.infra_record else None,
                                  mode=args.mode, plugins_registry_dir=args.plugins_registry_dir,
                                  plugins_dir=args.plugins_dir)
        topology = discover(args.sysfs_root, args.procfs_root, later_threads_on_demand=True)
        node = plan_node(topology, plan)  # a bad plan fails here, unserved
        return Daemon(settings, node=node, dra=_dra_link(args) if args.mode is ServingMode.DRA else None)

    try:
        active = apply_config_file(args)
        return make(plan_options(args), None), active
    except CmkError as refused:
        err = at_edge(refused, args)  # the plan names a setting: say it as the flag or key it came from
        apply_config(args, {})  # whatever the file could not set: the command line, else the defaults
        last = lastgood.load(args.kubelet_dir)
        if last is None:
            raise err from None
        try:
            daemon = make(last, str(err))
        except CmkError:
            raise err from None
        source = f"--config {args.config} and the flags" if args.config else "the flags"
        last_good = lastgood.path_in(args.kubelet_dir)
        events.error("config_refused", f"refused {source}: {err}; serving the last good plan from {last_good} instead: "
                     "fix the config and roll out again", source=source, error=str(err), last_good=str(last_good))
        return daemon, None


def _dra_link(args: argparse.Namespace) -> DraLink:
    """DRA mode's API server side: the node's slices published, its claims read, with the pod's account."""
    from deviceplugin.cli.configfile import node_name
    from deviceplugin.daemon.draserving import DraLink
    from deviceplugin.host.claimapi import ApiClaimSource
    from deviceplugin.host.kubeapi import KubeApi, in_cluster
    from deviceplugin.host.sliceapi import publish

    node = node_name(args.node_name)
    if node is None or not in_cluster():
        raise CmkError("--mode dra publishes ResourceSlices through the API server: run it in the DaemonSet's pod "
                       "(it needs the pod's service account and $NODE_NAME or --node-name), or use --mode device-plugin")
    api = KubeApi()
    return DraLink(node_name=node, publish=lambda slices_at: publish(api, node, slices_at).wrote,
                   claims=ApiClaimSource(api), held=_device_plugin_holdings(args.pod_resources_socket))


def _device_plugin_holdings(socket: Path) -> Callable[[], Mapping[str, frozenset[str]] | None]:
    """What containers hold through the device plugins (resource -> IDs), read from pod resources; None: unknown."""
    from deviceplugin.model.plan import RESOURCE_NAMES
    from deviceplugin.protocol.podresources import Unavailable, read_assignments

    def held() -> Mapping[str, frozenset[str]] | None:
        try:
            assignments = read_assignments(socket, resources=RESOURCE_NAMES.values(), allocatable=False)
        except Unavailable as err:
            events.warning("held_unknown", f"cannot learn which devices device plugins' containers hold ({err}): "
                           "keeping out what the last read named (nothing before the first)", reason=str(err))
            return None
        return {resource: assignments.held(resource) for resource in RESOURCE_NAMES.values()}

    return held


def _remember_plan(daemon: Daemon) -> None:
    from deviceplugin.host import lastgood

    if daemon.settings.config_problem is not None:
        return
    try:
        lastgood.save(daemon.settings.kubelet_dir, daemon.settings.plan)
    except OSError as err:
        directory, error = daemon.settings.kubelet_dir, err.strerror or str(err)
        events.warning("last_good_plan_unsaved", f"cannot remember the plan in {directory}: {error}; a later bad config "
                       "would then stop the pools", directory=str(directory), error=error)


def shared_host_paths(args: argparse.Namespace) -> tuple[str, ...]:
    """The host-wide paths a daemon with a non-default ``--kubelet-dir`` still writes at their defaults. Pure.

    Not derived from ``--kubelet-dir``: the runtime reads the CDI directory and the hook its infra
    record where they are, whatever directory the daemon's sockets are in.
    """
    if args.kubelet_dir == Path(DEVICE_PLUGIN_DIR):
        return ()
    writes = [(args.cdi, "cdi-dir", args.cdi_dir, DEFAULT_CDI_DIR, "CDI spec", "--no-cdi"),
              (args.infra_record, "install-dir", Path(args.install_dir), DEFAULT_INSTALL_DIR,
               "node-wide hook's infra record", "--no-infra-record"),
              (args.nfd, "nfd-features-dir", args.nfd_features_dir, DEFAULT_FEATURES_DIR, "NFD feature file",
               "--no-nfd")]
    return tuple(f"{what} in {path} (--{flag} DIR or {off})"
                 for on, flag, path, default, what, off in writes if on and Path(path) == Path(default))


def _serve(args: argparse.Namespace, *, collect: bool = True) -> int:
    """Serve until SIGTERM/SIGINT; ``collect``: turn the cyclic collector back on once started."""
    from deviceplugin import build_info
    from deviceplugin.host import malloc

    malloc.tune()  # before the first thread: arenas are made per thread
    daemon, active = _daemon(args)

    # SIGTERM/SIGINT are blocked before the first thread starts (every thread inherits the mask) and
    # taken with sigwait: a Python handler setting an Event the main thread waits on could deadlock
    # on the Event's lock if the signal landed inside wait(), and a signal delivered to a gRPC or
    # watcher thread would kill the process without cleanup. One arriving during start waits here.
    stop_signals = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
    try:
        with ExitStack() as cleanup:
            _observe(daemon, args, cleanup, active)
            cleanup.callback(daemon.stop)
            daemon.start()
            # only once the start went through: a failed start stays a single line
            info = build_info()
            events.info("starting", f"cmk-deviceplugin {info['version']} starting (Python {info['python']}, "
                        f"{info['machine']})", **info)
            shared = shared_host_paths(args)
            if shared:
                events.warning("host_paths_shared", f"--kubelet-dir {args.kubelet_dir} is not the kubelet's, yet this "
                               f"daemon writes the host's {'; '.join(shared)}: give those flags too (or turn each off) "
                               "to keep it off them", kubelet_dir=str(args.kubelet_dir), paths=shared)
            if active is not None:
                for_node = f" for node {active.node}" if active.node else ""
                events.info("config_active", f"config {args.config}: section {active.section}{for_node}, generation "
                            f"{active.generation}", path=str(args.config), section=active.section,
                            generation=active.generation, node=active.node or "")
            _remember_plan(daemon)  # only now: a plan that served, on this node
            if args.nfd:  # labels say what is served: written once serving has started
                _write_nfd(daemon, args.nfd_features_dir, cleanup)
            if args.untaint_node:
                _untaint(daemon, args, cleanup)
            if args.mode is ServingMode.DEVICE_PLUGIN:
                _delete_slices(args)
            # The topology, plan and device tree live as long as the process: keep the cyclic
            # collector from re-scanning them, so its pauses stay out of Allocate's latency.
            gc.freeze()
            if collect:
                gc.enable()
            signal.sigwait(stop_signals)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, stop_signals)
    return 0


def _observe(daemon: Daemon, args: argparse.Namespace, cleanup: ExitStack, active: ActiveConfig | None) -> None:
    """Start the resolver and metrics before serving, so the first registrations count; undo on ``cleanup``."""
    from deviceplugin.observe.resolver import AllocationResolver

    resolver = AllocationResolver(args.pod_resources_socket)
    daemon.observers.add(resolver)
    resolver.start()
    cleanup.callback(resolver.stop)
    if args.metrics_address is not None:
        from deviceplugin.model.confinement import exclusive_cpus
        from deviceplugin.model.cpustats import places
        from deviceplugin.observe.cgroupmetrics import UnconfinedCollector
        from deviceplugin.observe.cpumetrics import CpuCollector
        from deviceplugin.observe.metrics import Metrics, PoolCollector, serve_metrics

        cpu_stats = CpuCollector(procfs_root=args.procfs_root, places=places(daemon.topology, daemon.plan),
                                 per_cpu=args.per_cpu_metrics)
        from deviceplugin.model.resourceslices import driver_devices

        collector = PoolCollector(tree=lambda: daemon.tree, plan=daemon.plan,
                                  dra=driver_devices(daemon.tree) if args.mode is ServingMode.DRA else None,
                                  registered=daemon.registered_resources, pod_resources=args.pod_resources_socket,
                                  cpu_stats=cpu_stats, confinement=UnconfinedCollector(
                                      sysfs_root=args.sysfs_root, exclusive=exclusive_cpus(daemon.plan),
                                      rescan_seconds=args.cgroup_scan_seconds))
        metrics = Metrics(collector, daemon.tree, config_fallback=daemon.settings.config_problem is not None,
                          config=None if active is None else (active.section, active.generation))
        daemon.observers.add(metrics)
        host, port = cleanup.enter_context(serve_metrics(metrics, *args.metrics_address))
        events.info("metrics_serving", f"serving metrics at http://{host}:{port}/metrics", address=f"{host}:{port}")


def _untaint(daemon: Daemon, args: argparse.Namespace, cleanup: ExitStack) -> None:
    """Remove the node's pools-not-ready taint once the pools are registered, in a pod that knows its node."""
    from deviceplugin.cli.configfile import node_name
    from deviceplugin.daemon.untaint import Untaint
    from deviceplugin.host.nodeapi import in_cluster, remove_pools_not_ready

    node = node_name(args.node_name)
    if not in_cluster() or node is None:
        return  # not in a pod with a token and a node name: no node of ours to untaint
    untaint = Untaint(node, lambda: daemon.registered, remove_pools_not_ready)
    untaint.start()
    cleanup.callback(untaint.stop)


def _delete_slices(args: argparse.Namespace) -> None:
    """A node leaving DRA mode: delete its ResourceSlices (in a thread: the start never waits on the API server).

    Never both names on one node: a slice left would let the scheduler place a claim on cores the
    device plugins give out. Tried only where DRA mode ran (its driver directory is in ``--plugins-dir``).
    """
    import threading

    from deviceplugin.cli.configfile import node_name
    from deviceplugin.host.kubeapi import KubeApi, in_cluster
    from deviceplugin.host.sliceapi import delete_all
    from deviceplugin.model.resourceslices import DRIVER_NAME

    node = node_name(args.node_name)
    if node is None or not in_cluster() or not (args.plugins_dir / DRIVER_NAME).exists():
        return  # not in a pod, or DRA mode never ran here: nothing to clean, and no refusal to log

    def delete() -> None:
        try:
            deleted = delete_all(KubeApi(), node)
        except Exception as err:  # noqa: BLE001 - the API server's refusal or absence: say it; the next start tries again
            events.warning("slices_undeleted", f"cannot delete the ResourceSlices of node {node} a DRA mode left: {err}",
                           node=node, error=str(err))
            return
        if deleted:
            events.info("slices_deleted", f"deleted the {deleted} ResourceSlices of node {node} a DRA mode left",
                        node=node, slices=deleted)

    threading.Thread(target=delete, name="cmk-delete-slices", daemon=True).start()


def _write_nfd(daemon: Daemon, directory: Path, cleanup: ExitStack) -> None:
    from datetime import datetime

    from deviceplugin.host.nfd import (
        expire_features,
        feature_labels,
        file_identity,
        write_features,
    )

    labels = feature_labels(daemon.topology, daemon.plan)
    path = write_features(directory, labels)
    written = file_identity(path)

    def expire() -> None:
        try:
            expiry = expire_features(path, written, labels, datetime.now(UTC))
        except OSError as err:  # shutting down anyway: say so, still exit 0 as a rollout expects
            error = err.strerror or str(err)
            events.warning("nfd_expiry_failed", f"cannot mark {path} expiring: {error}; its labels stay until the file "
                           "is removed", path=str(path), error=error)
            return
        if expiry is None:
            events.info("nfd_kept", f"left {path} alone: it is not the file this daemon wrote", path=str(path))
        else:
            events.info("nfd_expiring", f"kept {path} with NFD expiry {expiry.isoformat()}: the next daemon rewrites it, "
                        "else NFD drops it then", path=str(path), expiry=expiry.isoformat())

    cleanup.callback(expire)
    events.info("nfd_written", f"wrote NFD labels to {path}", path=str(path),
                labels=tuple(f"{k}={v}" for k, v in labels.items()))
