"""The supervisor: plans the pools once, serves each as a device plugin, and reacts to events.

Why it works this way: ``docs/design/daemon.md``.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
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
from deviceplugin.events import (
    CoreReleased,
    CpuManagerStatic,
    CpuManagerUnknown,
    Events,
    HealthChanged,
    KubeletRestart,
    PluginDirReplaced,
    Serving,
    ServingAgain,
    StreamLost,
)
from deviceplugin.host import cdi
from deviceplugin.host.install import DEFAULT_INSTALL_DIR
from deviceplugin.host.nodelock import NodeLock
from deviceplugin.host.sysfs import discover, online_cpus
from deviceplugin.host.watchers import CpuWatcher, PluginDirWatcher, cpu_watcher
from deviceplugin.kubelet.registration import Registrar, Registration, socket_identity
from deviceplugin.kubelet.server import (
    PoolServer,
    Preference,
    list_message_problem,
    options_message,
    socket_path_problem,
)
from deviceplugin.model.cdispec import kept_cpus
from deviceplugin.model.devices import (
    DeviceTree,
    core_device_ids,
    device_tree,
    health_changes,
)
from deviceplugin.model.plan import (
    RESOURCE_NAMES,
    PlanOptions,
    PoolPlan,
    plan_pools,
)
from deviceplugin.model.topology import Core
from deviceplugin.model.withheld import Withheld, learn_holds
from pinner.cpulist import format_cpu_list

log = logging.getLogger(__name__)

class Wake(Enum):
    """What the supervisor's queue carries; a deleted socket carries its name as :class:`SocketGone`."""

    CPUS = "a CPU changed"
    KUBELET_SOCKET = "kubelet.sock created"
    STREAM = "a ListAndWatch stream ended"
    TICK = "the plugin directory check is due"
    HELD = "the pod resources re-read is due"
    STOP = "stop"


@dataclass(frozen=True)
class SocketGone:
    name: str


_Item = Wake | SocketGone

#: How often the supervisor checks that the plugin directory is still the one it watches.
DIR_CHECK_SECONDS = 1.0


@dataclass(frozen=True, kw_only=True)
class DaemonSettings:
    kubelet_dir: Path = Path(DEVICE_PLUGIN_DIR)
    sysfs_root: Path = Path("/sys")
    procfs_root: Path = Path("/proc")
    install_dir: str = str(DEFAULT_INSTALL_DIR)
    plan: PlanOptions = field(default_factory=PlanOptions)
    #: Where to write the CDI spec whose hook confines containers; None: no CDI (the CLI defaults to on).
    cdi_dir: Path | None = None
    #: The kubelet's pod resources socket, read before serving to learn which devices are held; None: not read.
    pod_resources_socket: Path | None = None
    #: Seconds between re-reads of pod resources while a core is withheld (to put it back once freed) or a pool
    #: refused under the kubelet's static CPU manager (to serve it once the policy is none).
    held_recheck: float = 10.0
    #: Why the config was refused, when ``plan`` is the last good one instead (health says NOT_SERVING).
    config_problem: str | None = None
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
            from deviceplugin.model.policy import prefer as policy

            prefer = policy
        self.settings = settings
        self.events = events or Events()
        self._prefer: Preference = prefer
        self.topology = topology = discover(settings.sysfs_root, settings.procfs_root, later_threads_on_demand=True)
        self.plan: PoolPlan = plan_pools(topology, settings.plan)
        self.tree: DeviceTree = device_tree(self.plan, topology.online)
        _check_tree(self.tree, settings.kubelet_dir)
        self.kubelet_socket = settings.kubelet_dir / KUBELET_SOCKET_NAME
        self._servers: dict[str, PoolServer] = {}
        self._registrar: Registrar | None = None
        self._kubelet_seen = self.kubelet_socket.exists()  # a kubelet.sock created after this one: a restart
        self._events: queue.Queue[_Item] = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name="cmk-supervisor", daemon=True)
        self._watchers: list[PluginDirWatcher | CpuWatcher] = []
        self._dir_watcher: PluginDirWatcher | None = None
        self._lock = NodeLock(settings.kubelet_dir)
        self._dir_identity: tuple[int, int] | None = None
        self._lost: list[tuple[PoolServer, int]] = []
        self._lost_lock = threading.Lock()
        self.withheld: tuple[Withheld, ...] = ()
        self._held_due = 0.0
        self._online = topology.online
        self._slots_before: dict[str, frozenset[int]] | None = None
        self._slots_held_at_start: dict[str, frozenset[str]] | None = None
        #: Resources not served because the kubelet's static CPU manager pins CPUs itself (checked at each serve).
        self.refused: frozenset[str] = frozenset()
        self._cpu_manager_due = 0.0

    # --- life cycle -----------------------------------------------------------------------

    def start(self) -> None:
        try:
            self.settings.kubelet_dir.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise CmkError(f"cannot use --kubelet-dir {self.settings.kubelet_dir}: {err.strerror}") from None
        self._lock.acquire()  # before any file is written or removed: a second daemon stops here
        self._dir_identity = socket_identity(self.settings.kubelet_dir)
        for note in self.plan.notes:
            log.info("plan: %s", note)
        self._write_cdi_spec()  # before serving: an Allocate answer may name its devices at once
        self._write_infra_record()
        # Watch before serving: a kubelet starting between the two would delete our new sockets unseen,
        # and the pools would stay unserved (each Register then finds its socket gone and stops).
        self._start_watcher(self._plugin_dir_watcher())
        self._serve()
        self._start_watcher(cpu_watcher(self.settings.sysfs_root, lambda: self._events.put(Wake.CPUS)))
        self._events.put(Wake.CPUS)  # a CPU that changed before the watcher started
        self._thread.start()

    def _plugin_dir_watcher(self) -> PluginDirWatcher:
        watcher = PluginDirWatcher(self.settings.kubelet_dir, kubelet_socket_name=KUBELET_SOCKET_NAME,
                                   on_kubelet=lambda: self._events.put(Wake.KUBELET_SOCKET),
                                   on_deleted=lambda name: self._events.put(SocketGone(name)))
        self._dir_watcher = watcher
        return watcher

    def _start_watcher(self, watcher: PluginDirWatcher | CpuWatcher) -> None:
        try:
            watcher.start()
        except OSError as err:  # e.g. EMFILE: uid 0 shares its inotify instances with the whole node
            raise CmkError(f"cannot watch for kubelet restarts and CPU hotplug: {err.strerror} "
                           "(raise the sysctl fs.inotify.max_user_instances)") from None
        self._watchers.append(watcher)  # stop() stops only what started

    def stop(self) -> None:
        """Stop reacting, end every stream, stop serving and remove our sockets; the CDI spec stays."""
        if self._thread.is_alive():
            self._events.put(Wake.STOP)
            self._thread.join()
        for watcher in self._watchers:
            watcher.stop()
        self._watchers.clear()
        served = len(self._servers)
        self._stop_serving(wait=False)  # exiting: no new server of ours will bind the sockets
        if served:
            log.info("stopped serving %d pools; sockets removed", served)
        self._lock.release()

    @property
    def servers(self) -> dict[str, PoolServer]:
        return dict(self._servers)

    @property
    def registered(self) -> bool:
        """Every pool registered with the kubelet currently listening, which holds its stream."""
        return self.registered_resources() == frozenset(self.tree) - self.refused

    def registered_resources(self) -> frozenset[str]:
        """Resources registered with the kubelet now listening whose stream it holds (``cmk_pool_registered``).

        A registration alone is not enough: the kubelet may have ended the
        stream since, and then allocatable is 0 however long ago it registered.
        """
        registrar, current, servers = self._registrar, socket_identity(self.kubelet_socket), self.servers
        if registrar is None or current is None:
            return frozenset()
        return frozenset(r for r, identity in registrar.registered_with().items()
                         if identity == current and r in servers and servers[r].streaming)

    # --- CDI ------------------------------------------------------------------------------

    def _write_cdi_spec(self) -> None:
        """A device per core of the node and per slot pool, and every device the spec on disk had (its CPUs only).

        Served or not: a checkpointed answer may name a core or pool this plan
        moved or dropped. The plan fixes them, so hotplug never rewrites it; it
        is kept when the daemon stops.
        """
        if self.settings.cdi_dir is None:
            return
        cores = {name: core.cpus for core, name in core_device_ids(self.plan.all_cores).items()}
        exclusive = cdi.exclusive_devices(self.tree) if self.settings.unthrottle_exclusive else frozenset()
        devices = cdi.spec_devices(self.tree, cores)
        on_disk = cdi.read_spec(self.settings.cdi_dir)
        devices |= kept_cpus(on_disk, cdi.KIND, devices)  # rebuilt with our hook
        spec = cdi.build_spec(devices, cdi.hook_path(self.settings.install_dir), exclusive)
        path = cdi.write_spec(spec, self.settings.cdi_dir, on_disk=on_disk)
        log.info("CDI spec %s: %d devices (%s), hook %s (kept when the daemon stops)", path, len(spec["devices"]),
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

    # --- serving --------------------------------------------------------------------------

    def _serve(self) -> None:
        self._learn_held()  # before any device is advertised: a held core must not look free
        self.refused = self._cpu_manager_refusals()
        registrations = []
        for resource, devices in self.tree.items():
            if resource in self.refused:
                continue
            server = PoolServer(devices, socket_path=self.settings.kubelet_dir / socket_name(resource),
                                install_dir=self.settings.install_dir, prefer=self._prefer,
                                cdi=self.settings.cdi_dir is not None, events=self.events,
                                on_stream_lost=self._stream_lost,
                                config_ok=self.settings.config_problem is None)
            server.start()
            self._servers[resource] = server
            registrations.append(Registration(resource, server.socket_path.name, options_message(devices)))
            self.events.emit(Serving(resource, str(server.socket_path), len(devices.devices), devices.healthy))
        servers = dict(self._servers)
        self._registrar = Registrar(self.kubelet_socket, registrations, self.events,
                                    served=lambda resource: servers[resource].socket_is_mine(),
                                    outage=self._registrar is not None and self._registrar.outage)
        self._registrar.start()

    def _stop_serving(self, *, wait: bool = True) -> None:
        """Let a Register already sent finish (``wait``), end the streams, stop the servers.

        A Register in flight when the servers are replaced would otherwise
        have the kubelet dial the new server at the same socket path: a second
        client of one pool whose late end then disconnects the new one.
        """
        if self._registrar is not None:
            self._registrar.cancel(wait=wait)
        stopped = [server.stop() for server in self._servers.values()]
        for done in stopped:
            done.wait()
        for server in self._servers.values():
            server.remove_socket()
        self._servers.clear()

    def _stream_lost(self, server: PoolServer, stream: int) -> None:
        """From a server's worker thread: the kubelet ended ``stream`` (its number on that server)."""
        with self._lost_lock:
            self._lost.append((server, stream))
        self._events.put(Wake.STREAM)

    # --- events ---------------------------------------------------------------------------

    def _next_event(self) -> _Item:
        """The next event; a tick at least every :data:`DIR_CHECK_SECONDS` (the plugin directory check)
        and, while a core is withheld, a re-read of pod resources every ``held_recheck`` s."""
        if self.withheld and time.monotonic() >= self._held_due:
            return Wake.HELD
        timeout = DIR_CHECK_SECONDS
        if self.withheld:
            timeout = min(timeout, max(0.0, self._held_due - time.monotonic()))
        try:
            return self._events.get(timeout=timeout)
        except queue.Empty:
            return Wake.TICK

    def _loop(self) -> None:
        while True:
            batch: set[_Item] = {self._next_event()}
            while True:
                try:
                    batch.add(self._events.get_nowait())
                except queue.Empty:
                    break
            if Wake.STOP in batch:
                return
            try:
                if Wake.HELD in batch:
                    self._learn_held()
                if Wake.CPUS in batch:
                    self._refresh()
                self._count_kubelet(batch)
                if self._plugin_dir_replaced():
                    self._rewatch()
                    self._restart("the plugin directory was replaced")
                elif (Wake.KUBELET_SOCKET in batch or any(isinstance(i, SocketGone) for i in batch)) \
                        and (reason := self._kubelet_restarted(batch)):
                    self._restart(reason)
                self._register_lost_pools()  # after a restart: the lost streams were the old servers'
                self._recheck_cpu_manager()
            except Exception:  # the daemon must outlive any single bad event
                log.exception("handling %s failed; waiting for the next event", sorted(map(str, batch)))

    def _kubelet_restarted(self, batch: set[_Item]) -> str:
        """Why a pool may still be tied to a kubelet that is gone (serve anew), or "" (at most retry now)."""
        ours = {server.socket_path.name: server for server in self._servers.values()}
        gone = {item.name for item in batch if isinstance(item, SocketGone)}
        if any(name in ours and not ours[name].socket_is_mine() for name in gone):
            return "a plugin socket of ours was removed"
        current = socket_identity(self.kubelet_socket)
        registrar = self._registrar
        if Wake.KUBELET_SOCKET not in batch or current is None or registrar is None:
            return ""
        if any(identity != current for identity in registrar.registered_with().values()):
            return "registered with a kubelet that is gone"  # its streams must end first
        registrar.retry_now()  # nothing tied to an old kubelet: just stop waiting out the backoff
        return ""

    def _register_lost_pools(self) -> None:
        with self._lost_lock:
            lost, self._lost = self._lost, []
        registrar = self._registrar
        for server, stream in lost:
            if registrar is None or self._servers.get(server.resource) is not server:
                continue  # a server we replaced since
            if server.opened != stream or server.streaming:
                continue  # the kubelet opened a newer stream: registered already
            if registrar.again(server.resource):
                self.events.emit(StreamLost(server.resource))

    def _plugin_dir_replaced(self) -> bool:
        """The directory we watch and lock is gone and a new one is in its place (hostPath re-made)."""
        current = socket_identity(self.settings.kubelet_dir)
        return current is not None and current != self._dir_identity

    def _rewatch(self) -> None:
        """Watch and lock the new directory; the sockets and the lock file went with the old one."""
        self.events.emit(PluginDirReplaced(str(self.settings.kubelet_dir)))
        self._dir_identity = socket_identity(self.settings.kubelet_dir)
        if self._dir_watcher is not None:
            self._dir_watcher.stop()
            self._watchers.remove(self._dir_watcher)
        self._start_watcher(self._plugin_dir_watcher())
        self._lock.release()
        self._lock.acquire()

    def _restart(self, reason: str) -> None:
        self.events.emit(ServingAgain(len(self._servers), reason))
        self._stop_serving()
        self._serve()

    def _count_kubelet(self, batch: set[_Item]) -> None:
        """A kubelet.sock created after one was there is a kubelet restart: counted once, whatever it removed."""
        if Wake.KUBELET_SOCKET in batch:
            if self._kubelet_seen:
                self.events.emit(KubeletRestart(len(self._servers)))
            self._kubelet_seen = True

    def _refresh(self) -> None:
        try:
            online = online_cpus(self.settings.sysfs_root)  # the plan is fixed: only health can change
        except CmkError as err:  # a sysfs file caught mid-change: the next event re-reads
            log.warning("re-reading CPUs failed: %s", err)
            return
        if online == self._online:  # the tree is of these CPUs already (the start's own check lands here)
            return
        self._push(device_tree(self.plan, online, self._withheld_cores()), online)

    def _push(self, new: DeviceTree, online: frozenset[int]) -> None:
        """Serve ``new``: changed snapshots go to their servers (health changes are logged)."""
        for resource, devices in new.items():
            old = self.tree[resource]
            if devices == old:
                continue
            for device_id, healthy in health_changes(old, devices):
                cpus = format_cpu_list(devices.devices[device_id].cpus)
                self.events.emit(HealthChanged(str(devices.pool), resource, device_id, cpus, healthy))
            if resource in self._servers:
                self._servers[resource].update(devices)
        self.tree = new
        self._online = online

    # --- the kubelet's CPU manager ---------------------------------------------------------

    def _cpu_manager_refusals(self) -> frozenset[str]:
        """The exclusive pools' resources when the kubelet's static CPU manager pins CPUs itself, else none.

        Read at every serve (start, kubelet restart: a policy change restarts the kubelet). Unreadable:
        the last answer stands (at start: served), and a line says why.
        """
        socket = self.settings.pod_resources_socket
        if socket is None:
            return self.refused
        from deviceplugin.kubelet.podresources import Unavailable, kubelet_cpus
        from deviceplugin.model.assignments import cpu_manager_problem
        from deviceplugin.model.plan import CORE_POOLS

        try:
            problem = cpu_manager_problem(kubelet_cpus(socket))
        except Unavailable as err:
            if not self.refused:
                self.events.emit(CpuManagerUnknown(str(err)))
            return self.refused
        if problem is None:
            return frozenset()
        refused = frozenset(resource for resource, devices in self.tree.items() if devices.pool in CORE_POOLS)
        if refused:
            self.events.emit(CpuManagerStatic(problem, tuple(sorted(refused))))
        return refused

    def _recheck_cpu_manager(self) -> None:
        """While pools are refused, re-read the policy every ``held_recheck`` s; serve them all once it is none.

        The kubelet's pod resources socket may come up after its ``kubelet.sock``, so the check at the
        re-registration of a kubelet restarted with policy ``none`` can miss it.
        """
        socket = self.settings.pod_resources_socket
        if not self.refused or socket is None or time.monotonic() < self._cpu_manager_due:
            return
        self._cpu_manager_due = time.monotonic() + self.settings.held_recheck
        from deviceplugin.kubelet.podresources import Unavailable, kubelet_cpus

        try:
            static = bool(kubelet_cpus(socket))
        except Unavailable:
            return
        if not static:
            self._stop_serving()
            self._serve()

    # --- held devices ---------------------------------------------------------------------

    def _withheld_cores(self) -> frozenset[Core]:
        return frozenset(w.core for w in self.withheld)

    def _learn_held(self) -> None:
        """Read which devices containers hold; withhold (or release) cores, push, and keep the slot record.

        Pod resources unreachable: one warning, and what was withheld stays so.
        """
        socket = self.settings.pod_resources_socket
        if socket is None:
            return
        self._held_due = time.monotonic() + self.settings.held_recheck
        from deviceplugin.host.slotrecord import read_record, write_record
        from deviceplugin.kubelet.podresources import Unavailable, read_assignments

        if self._slots_before is None:
            try:
                self._slots_before = read_record(self.settings.kubelet_dir) or {}
            except CmkError as err:
                log.warning("%s", err)
                self._slots_before = {}
        try:
            assignments = read_assignments(socket, resources=RESOURCE_NAMES.values(), allocatable=False)
        except Unavailable as err:
            log.warning("cannot learn which devices are held (%s): cores the kubelet holds under other IDs "
                        "or pools may be advertised as free", err)
            return
        held = {resource: assignments.held(resource) for resource in RESOURCE_NAMES.values()}
        if self._slots_held_at_start is None:
            self._slots_held_at_start = held
        holds = learn_holds(self.plan, held, self._slots_before, self._slots_held_at_start)
        old = {w.core: w for w in self.withheld}
        new = {w.core: w for w in holds.withheld}
        for core in new.keys() - old.keys():
            self.events.emit(new[core].event())
        for core in old.keys() - new.keys():
            self.events.emit(CoreReleased(format_cpu_list(core.cpus), str(old[core].planned)))
        self.withheld = holds.withheld
        if new.keys() != old.keys():
            self._push(device_tree(self.plan, self._online, self._withheld_cores()), self._online)
        try:
            write_record(self.settings.kubelet_dir, holds.record)
        except CmkError as err:
            log.warning("%s", err)
