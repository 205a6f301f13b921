"""The supervisor: plans the pools once, serves each as a device plugin, and reacts to events.

Like Intel's device plugin framework, the concrete part produces a snapshot
device tree (:func:`deviceplugin.model.devices.device_tree`) and the supervisor
diffs it against what it serves. The set of resources is fixed by the plan
made at start (device IDs must not move under the kubelet's checkpoint), so
later snapshots differ only in health: the supervisor pushes them to the
running servers, which stream them to the kubelet.

Every event goes through one queue and one thread, coalesced in batches, so
a burst (the kubelet deleting four sockets, then creating ``kubelet.sock``;
several sysfs files changing for one CPU) costs one reaction:

- CPU changed: re-read the topology, rebuild the tree, push what changed.
- kubelet restarted (one of our sockets gone, or ``kubelet.sock`` created
  while a pool is still registered with an older one): stop every server
  (their streams end first), serve anew, register again. A new
  ``kubelet.sock`` that no pool has registered with yet only cuts the
  registrar's backoff short, so one kubelet restart (sockets deleted, then
  ``kubelet.sock`` created) costs exactly one re-registration per pool.
"""

from __future__ import annotations

import logging
import queue
import threading
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from api.constants import (
    DEVICE_PLUGIN_DIR,
    KUBELET_SOCKET_NAME,
    validate_device_id,
    validate_resource_name,
)
from deviceplugin.errors import CmkError
from deviceplugin.events import Events, HealthChanged, KubeletRestart, Serving
from deviceplugin.host import cdi
from deviceplugin.host.install import DEFAULT_INSTALL_DIR
from deviceplugin.host.sysfs import discover
from deviceplugin.host.watchers import PluginDirWatcher, cpu_watcher
from deviceplugin.kubelet.registration import Registrar, Registration, socket_identity
from deviceplugin.kubelet.server import (
    PoolServer,
    Preference,
    list_message_problem,
    options_message,
    socket_path_problem,
)
from deviceplugin.model.devices import DeviceTree, device_tree, health_changes
from deviceplugin.model.plan import PlanOptions, PoolPlan, plan_pools
from pinner.cpulist import format_cpu_list

log = logging.getLogger(__name__)

class Wake(Enum):
    """What the supervisor's queue carries; a deleted socket carries its name as :class:`SocketGone`."""

    CPUS = "a CPU changed"
    KUBELET_SOCKET = "kubelet.sock created"
    STOP = "stop"


@dataclass(frozen=True)
class SocketGone:
    name: str


_Item = Wake | SocketGone


@dataclass(frozen=True, kw_only=True)
class DaemonSettings:
    kubelet_dir: Path = Path(DEVICE_PLUGIN_DIR)
    sysfs_root: Path = Path("/sys")
    procfs_root: Path = Path("/proc")
    install_dir: str = str(DEFAULT_INSTALL_DIR)
    plan: PlanOptions = field(default_factory=PlanOptions)
    #: Where to write the CDI spec whose hook confines containers; None: no CDI (the CLI defaults to on).
    cdi_dir: Path | None = None
    #: Mark the CDI devices of whole exclusive cores, so the hook removes the CFS quota of containers holding only them.
    unthrottle_exclusive: bool = True
    #: Where the node-wide hook's infra record lives (the install dir); None: not written (the CLI defaults to on).
    infra_record_dir: Path | None = None


def socket_name(resource: str) -> str:
    """``cmk.intel.com/exclusive-cores`` -> ``cmk-exclusive-cores.sock``: stable, so a restart replaces it."""
    return f"cmk-{resource.rpartition('/')[2]}.sock"


def _check_tree(tree: DeviceTree, kubelet_dir: Path) -> None:
    """Every name, ID, socket path and ListAndWatch message fits the protocol, before anything is served."""
    for resource, devices in tree.items():
        problems = [validate_resource_name(resource)] + [validate_device_id(i) for i in devices.devices]
        problems += [socket_path_problem(kubelet_dir / socket_name(resource)), list_message_problem(devices)]
        problem = next((p for p in problems if p), None)
        if problem:
            raise CmkError(problem)


class Daemon:
    """Plans at construction (so a bad plan fails before anything is served); :meth:`start` serves."""

    def __init__(self, settings: DaemonSettings, *, prefer: Preference | None = None,
                 events: Events | None = None) -> None:
        if prefer is None:
            from deviceplugin.model.policy import preferred_allocation

            prefer = preferred_allocation
        self.settings = settings
        self.events = events or Events()
        self._prefer: Preference = prefer
        self.topology = topology = discover(settings.sysfs_root, settings.procfs_root)
        self.plan: PoolPlan = plan_pools(topology, settings.plan)
        self.tree: DeviceTree = device_tree(self.plan, topology.online)
        _check_tree(self.tree, settings.kubelet_dir)
        self.kubelet_socket = settings.kubelet_dir / KUBELET_SOCKET_NAME
        self._servers: dict[str, PoolServer] = {}
        self._registrar: Registrar | None = None
        self._events: queue.Queue[_Item] = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name="cmk-supervisor", daemon=True)
        self._watchers: list = []
        self._cdi_written = False

    # --- life cycle -----------------------------------------------------------------------

    def start(self) -> None:
        try:
            self.settings.kubelet_dir.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise CmkError(f"cannot use --kubelet-dir {self.settings.kubelet_dir}: {err.strerror}") from None
        for note in self.plan.notes:
            log.info("plan: %s", note)
        self._write_cdi_spec()  # before serving: an Allocate answer may name its devices at once
        self._write_infra_record()
        self._serve()
        watchers = [
            PluginDirWatcher(self.settings.kubelet_dir, kubelet_socket_name=KUBELET_SOCKET_NAME,
                             on_kubelet=lambda: self._events.put(Wake.KUBELET_SOCKET),
                             on_deleted=lambda name: self._events.put(SocketGone(name))),
            cpu_watcher(self.settings.sysfs_root, lambda: self._events.put(Wake.CPUS)),
        ]
        for watcher in watchers:
            try:
                watcher.start()
            except OSError as err:  # e.g. EMFILE: uid 0 shares its inotify instances with the whole node
                raise CmkError(f"cannot watch for kubelet restarts and CPU hotplug: {err.strerror} "
                               "(raise the sysctl fs.inotify.max_user_instances)") from None
            self._watchers.append(watcher)  # stop() stops only what started
        self._events.put(Wake.CPUS)  # a CPU that changed before the watcher started
        self._thread.start()

    def stop(self) -> None:
        """Stop reacting, end every stream, stop serving and remove our sockets."""
        if self._thread.is_alive():
            self._events.put(Wake.STOP)
            self._thread.join()
        for watcher in self._watchers:
            watcher.stop()
        served = len(self._servers)
        self._stop_serving()
        if served:
            log.info("stopped serving %d pools; sockets removed", served)
        self._remove_cdi_spec()

    @property
    def servers(self) -> dict[str, PoolServer]:
        return dict(self._servers)

    @property
    def registered(self) -> bool:
        """Every pool registered with the kubelet currently listening (for tests and the demo)."""
        registrar = self._registrar
        return registrar is not None and registrar.done and self._registered_with_current_kubelet(registrar)

    def registered_resources(self) -> frozenset[str]:
        """Resources registered with the kubelet currently listening (the metrics' registered gauge)."""
        registrar, current = self._registrar, socket_identity(self.kubelet_socket)
        if registrar is None or current is None:
            return frozenset()
        return frozenset(r for r, identity in registrar.registered_with().items() if identity == current)

    # --- CDI ------------------------------------------------------------------------------

    def _write_cdi_spec(self) -> None:
        """One CDI device per core and per slot pool: the plan fixes them, so hotplug never rewrites it."""
        if self.settings.cdi_dir is None:
            return
        exclusive = cdi.exclusive_devices(self.tree) if self.settings.unthrottle_exclusive else frozenset()
        spec = cdi.build_spec(cdi.spec_devices(self.tree), cdi.hook_path(self.settings.install_dir), exclusive)
        path = cdi.write_spec(spec, self.settings.cdi_dir)
        self._cdi_written = True
        log.info("CDI spec %s: %d devices (%s), hook %s", path, len(spec["devices"]),
                 ", ".join(d["name"] for d in spec["devices"]), cdi.hook_path(self.settings.install_dir))

    def _write_infra_record(self) -> None:
        """The infra CPUs for the node-wide hook, rewritten only if the plan changed them; kept at exit.

        ``cmk install`` (the DaemonSet's init container) wrote it from the same plan, so the daemon's
        read-only mount of the install dir normally needs no write; if it cannot, the node-wide hook
        keeps the older record, which the warning names.
        """
        if self.settings.infra_record_dir is None:
            return
        from deviceplugin.host import nodewide
        from deviceplugin.model.plan import Pool

        infra = self.plan.cpus(Pool.INFRA)
        path = nodewide.record_path(self.settings.infra_record_dir)
        try:
            written = nodewide.write_record(self.settings.infra_record_dir, infra)
        except OSError as err:
            log.warning("cannot write the node-wide hook's infra record %s: %s: containers holding no pool "
                        "keep the CPUs of the record as it is (run cmk install with this plan)", path, err.strerror)
            return
        log.info("infra record %s: %s (%s)", path, format_cpu_list(infra), "written" if written else "unchanged")

    def _remove_cdi_spec(self) -> None:
        if self.settings.cdi_dir is None or not self._cdi_written:
            return
        try:
            cdi.remove_spec(self.settings.cdi_dir)
        except CmkError as err:  # shutting down anyway: say so, do not mask why we stopped
            log.warning("%s", err)
            return
        self._cdi_written = False
        log.info("CDI spec removed from %s", self.settings.cdi_dir)

    # --- serving --------------------------------------------------------------------------

    def _serve(self) -> None:
        registrations = []
        for resource, devices in self.tree.items():
            server = PoolServer(devices, socket_path=self.settings.kubelet_dir / socket_name(resource),
                                install_dir=self.settings.install_dir, prefer=self._prefer,
                                cdi=self.settings.cdi_dir is not None, events=self.events)
            server.start()
            self._servers[resource] = server
            registrations.append(Registration(resource, server.socket_path.name, options_message(devices)))
            self.events.emit(Serving(resource, str(server.socket_path), len(devices.devices), devices.healthy))
        self._registrar = Registrar(self.kubelet_socket, registrations, self.events)
        self._registrar.start()

    def _stop_serving(self) -> None:
        if self._registrar is not None:
            self._registrar.cancel(wait=False)  # a Register in flight fails once its server is gone
        stopped = [server.stop() for server in self._servers.values()]
        for done in stopped:
            done.wait()
        for server in self._servers.values():
            server.remove_socket()
        self._servers.clear()

    def _registered_with_current_kubelet(self, registrar: Registrar) -> bool:
        current = socket_identity(self.kubelet_socket)
        return current is not None and all(i == current for i in registrar.registered_with().values())

    # --- events ---------------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            batch: set[_Item] = {self._events.get()}
            while True:
                try:
                    batch.add(self._events.get_nowait())
                except queue.Empty:
                    break
            if Wake.STOP in batch:
                return
            try:
                if Wake.CPUS in batch:
                    self._refresh()
                if (Wake.KUBELET_SOCKET in batch or any(isinstance(i, SocketGone) for i in batch)) \
                        and self._kubelet_restarted(batch):
                    self._restart()
            except Exception:  # the daemon must outlive any single bad event
                log.exception("handling %s failed; waiting for the next event", sorted(map(str, batch)))

    def _kubelet_restarted(self, batch: set[_Item]) -> bool:
        """True when a pool may still be tied to a kubelet that is gone; else at most retry now."""
        ours = {server.socket_path.name: server for server in self._servers.values()}
        gone = {item.name for item in batch if isinstance(item, SocketGone)}
        if any(name in ours and not ours[name].socket_is_mine() for name in gone):
            return True
        current = socket_identity(self.kubelet_socket)
        registrar = self._registrar
        if Wake.KUBELET_SOCKET not in batch or current is None or registrar is None:
            return False
        if any(identity != current for identity in registrar.registered_with().values()):
            return True  # registered with the previous kubelet: its streams must end first
        registrar.retry_now()  # nothing tied to an old kubelet: just stop waiting out the backoff
        return False

    def _restart(self) -> None:
        self.events.emit(KubeletRestart(len(self._servers)))
        self._stop_serving()
        self._serve()

    def _refresh(self) -> None:
        try:
            topology = discover(self.settings.sysfs_root, self.settings.procfs_root)
        except CmkError as err:  # a sysfs file caught mid-change: the next event re-reads
            log.warning("re-reading CPUs failed: %s", err)
            return
        new = device_tree(self.plan, topology.online)
        for resource, devices in new.items():
            old = self.tree[resource]
            if devices == old:
                continue
            for device_id, healthy in health_changes(old, devices):
                cpus = format_cpu_list(devices.devices[device_id].cpus)
                self.events.emit(HealthChanged(str(devices.pool), resource, device_id, cpus, healthy))
            self._servers[resource].update(devices)
        self.tree = new
