"""The supervisor: serves a node plan it is given, each pool as a device plugin, and reacts to events.

It plans nothing: :func:`deviceplugin.model.node.plan_node` made the plan
(``Daemon`` discovers and plans only when handed none), :mod:`.serving` runs
the servers, :mod:`.held` learns held cores, :mod:`.nodefiles` writes the node
files. What is left here is the life cycle and one event loop.
Why it works this way: ``docs/design/daemon.md``.
"""

from __future__ import annotations

import threading

from api.constants import KUBELET_SOCKET_NAME
from deviceplugin.daemon import nodefiles
from deviceplugin.daemon.cpumanager import CpuManager
from deviceplugin.daemon.draserving import DraLink, DraServing, LeftoverClaims
from deviceplugin.daemon.held import HeldCores
from deviceplugin.daemon.irqsteerer import IrqSteering
from deviceplugin.daemon.serving import PoolServers
from deviceplugin.daemon.settings import DaemonSettings, check_tree
from deviceplugin.daemon.wakes import HandedOut, Item, SocketGone, Wake, Wakes
from deviceplugin.errors import CmkError, os_reason
from deviceplugin.events import Allocation, EventLog, Observer, Observers
from deviceplugin.host.irqs import record_exists as irq_record_exists
from deviceplugin.host.nodelock import NodeLock
from deviceplugin.host.sysfs import discover, online_cpus
from deviceplugin.host.watchers import CpuWatcher, PluginDirWatcher, cpu_watcher
from deviceplugin.model.cpulist import format_cpu_list, parse_cpu_list
from deviceplugin.model.devices import DeviceTree, health_changes
from deviceplugin.model.irqsteer import held_cpus, housekeeping
from deviceplugin.model.modes import ServingMode
from deviceplugin.model.node import NodePlan, plan_node
from deviceplugin.model.plan import RESOURCE_NAMES, Pool
from deviceplugin.model.topology import Core
from deviceplugin.model.withheld import Withheld
from deviceplugin.protocol.registration import kubelet_listens, socket_identity
from deviceplugin.protocol.server import PoolServer, Preference

events = EventLog(__name__)


class Daemon:
    """Checks its plan at construction (so a bad one fails before anything is served); :meth:`start` serves."""

    def __init__(self, settings: DaemonSettings, *, node: NodePlan | None = None,
                 prefer: Preference | None = None, dra: DraLink | None = None) -> None:
        if prefer is None:
            from deviceplugin.model.policy import prefer as policy

            prefer = policy
        if node is None:
            node = plan_node(discover(settings.sysfs_root, settings.procfs_root, later_threads_on_demand=True),
                             settings.plan)
        self.settings = settings
        #: Who acts on registrations, allocations and IRQ steering (metrics, the resolver): add before :meth:`start`.
        self.observers = Observers()
        self.node = node
        self.topology, self.plan, self.tree = node.topology, node.plan, node.tree
        #: the first tree's ListAndWatch messages, as the check sized them: its servers send these
        self._checked = (self.tree, check_tree(self.tree, settings.kubelet_dir))
        self.kubelet_socket = settings.kubelet_dir / KUBELET_SOCKET_NAME
        self._kubelet_seen = self.kubelet_socket.exists()  # a kubelet.sock created after this one: a restart
        self._wakes = Wakes()
        self._pools: PoolServers | DraServing
        #: device-plugin mode: claims a DRA mode before left prepared (their cores stay out); None: none
        self._leftover: LeftoverClaims | None = None
        self._claimed: frozenset[Core] = frozenset()
        if settings.mode is ServingMode.DRA:
            if dra is None:
                raise CmkError("--mode dra needs the node's name and the API server: run it in the DaemonSet's pod "
                               "(docs/user/dra.md), or use --mode device-plugin")
            self._pools = DraServing(settings, self.tree, self.topology.isolated, dra, recheck=settings.held_recheck)
        else:
            self._leftover = LeftoverClaims.found(settings, self.tree, lambda: self._wakes.put(Wake.HELD))
            self._pools = PoolServers(settings.kubelet_dir, self.kubelet_socket, install_dir=settings.install_dir,
                                      prefer=prefer, cdi=settings.cdi_dir is not None,
                                      config_ok=settings.config_problem is None, observer=self.observers,
                                      on_stream_lost=lambda: self._wakes.put(Wake.STREAM))
        self._held = HeldCores(settings.pod_resources_socket, settings.kubelet_dir,
                               recheck=settings.held_recheck)
        self._cpu_manager = CpuManager(settings.pod_resources_socket, recheck=settings.held_recheck)
        self._irqs: IrqSteering | None = None
        if settings.irq_steering or irq_record_exists(settings.kubelet_dir):  # steering off: the masks go back
            self._irqs = IrqSteering(irq_dir=settings.irq_dir, record_dir=settings.kubelet_dir,
                                     irqbalance_dir=settings.irqbalance_dir, recheck=settings.held_recheck,
                                     observer=self.observers)
            self.observers.add(_HandOut(settings.irq_steering, self._wakes))
        self._thread = threading.Thread(target=self._loop, name="cmk-supervisor", daemon=True)
        self._watchers: list[PluginDirWatcher | CpuWatcher] = []
        self._dir_watcher: PluginDirWatcher | None = None
        self._lock = NodeLock(settings.kubelet_dir)
        self._dir_identity: tuple[int, int] | None = None
        self._online = self.topology.online
        #: Servers stopped after a kubelet restart: none is bound until the new kubelet.sock accepts (:meth:`_restart`).
        self._awaiting_kubelet = False

    # --- life cycle -----------------------------------------------------------------------

    def start(self) -> None:
        settings = self.settings
        try:
            settings.kubelet_dir.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise CmkError(f"cannot use --kubelet-dir {settings.kubelet_dir}: {os_reason(err)}") from None
        self._lock.acquire()  # before any file is written or removed: a second daemon stops here
        self._dir_identity = socket_identity(settings.kubelet_dir)
        for note in self.plan.notes:
            events.info("plan_note", f"plan: {note}", note=note)
        if settings.cdi_dir is not None:  # before serving: an Allocate answer may name its devices at once
            nodefiles.write_cdi_spec(settings.cdi_dir, settings.install_dir, self.plan, self.tree,
                                     core_ids=self.node.core_ids,
                                     unthrottle_exclusive=settings.unthrottle_exclusive)
        if settings.infra_record_dir is not None:
            nodefiles.write_infra_record(settings.infra_record_dir, self.plan)
        # Watch before serving: a kubelet starting between the two would delete our new sockets unseen,
        # and the pools would stay unserved (each Register then finds its socket gone and stops).
        self._start_watcher(self._plugin_dir_watcher())
        if self._leftover is not None:
            self._leftover.start()
        self._serve()
        self._start_watcher(cpu_watcher(settings.sysfs_root, lambda: self._wakes.put(Wake.CPUS)))
        self._wakes.put(Wake.CPUS)  # a CPU that changed before the watcher started
        self._thread.start()

    def _plugin_dir_watcher(self) -> PluginDirWatcher:
        watcher = PluginDirWatcher(self.settings.kubelet_dir, kubelet_socket_name=KUBELET_SOCKET_NAME,
                                   on_kubelet=lambda: self._wakes.put(Wake.KUBELET_SOCKET),
                                   on_deleted=lambda name: self._wakes.put(SocketGone(name)))
        self._dir_watcher = watcher
        return watcher

    def _start_watcher(self, watcher: PluginDirWatcher | CpuWatcher) -> None:
        try:
            watcher.start()
        except OSError as err:  # e.g. EMFILE: uid 0 shares its inotify instances with the whole node
            raise CmkError(f"cannot watch for kubelet restarts and CPU hotplug: {os_reason(err)} "
                           "(raise the sysctl fs.inotify.max_user_instances)") from None
        self._watchers.append(watcher)  # stop() stops only what started

    def stop(self) -> None:
        """Stop reacting, end every stream, stop serving and remove our sockets; the CDI spec stays."""
        if self._thread.is_alive():
            self._wakes.put(Wake.STOP)
            self._thread.join()
        for watcher in self._watchers:
            watcher.stop()
        self._watchers.clear()
        served = len(self._pools.servers)
        self._pools.stop(wait=False)  # exiting: no new server of ours will bind the sockets
        if self._leftover is not None:
            self._leftover.stop()
        if served:
            events.info("serving_stopped", f"stopped serving {served} pools; sockets removed", pools=served)
        self._lock.release()

    @property
    def servers(self) -> dict[str, PoolServer]:
        return dict(self._pools.servers)

    @property
    def withheld(self) -> tuple[Withheld, ...]:
        return self._held.withheld

    @property
    def refused(self) -> frozenset[str]:
        """Resources not served because the kubelet's static CPU manager pins CPUs itself."""
        return self._cpu_manager.refused

    @property
    def registered(self) -> bool:
        """Every pool registered with the kubelet currently listening, which holds its stream."""
        return self.registered_resources() == frozenset(self.tree) - self.refused

    def registered_resources(self) -> frozenset[str]:
        """Resources registered with the kubelet now listening whose stream it holds (``cmk_pool_registered``)."""
        return self._pools.registered_resources()

    # --- events ---------------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            batch = self._wakes.batch(self._due())
            if Wake.STOP in batch:
                return
            try:
                if Wake.HELD in batch:
                    self._learn_held()
                elif self._irqs is not None and (handed := [i.cpus for i in batch if isinstance(i, HandedOut)]):
                    self._irqs.handed_out(frozenset().union(*handed))
                    self._irqs.update(None, self._housekeeping())
                if Wake.CPUS in batch:
                    self._refresh()
                self._count_kubelet(batch)
                if self._plugin_dir_replaced():
                    self._rewatch()
                    self._restart("the plugin directory was replaced")
                elif not self._awaiting_kubelet and (reason := self._kubelet_gone(batch)):
                    self._restart(reason)
                if self._awaiting_kubelet:
                    self._serve_once_the_kubelet_listens(just_created=Wake.KUBELET_SOCKET in batch)
                self._pools.register_lost()  # after a restart: the lost streams were the old servers'
                if not self._awaiting_kubelet and self._cpu_manager.none_now():
                    self._pools.stop()  # the refused pools' kubelet is back at policy none: serve them all
                    self._serve()
            except Exception:  # noqa: BLE001 - the daemon must outlive any single bad event; the line logs the traceback
                wakes = sorted(map(str, batch))
                events.exception("event_failed", f"handling {wakes} failed; waiting for the next event",
                                 wakes=tuple(wakes))

    def _plugin_dir_replaced(self) -> bool:
        """The directory we watch and lock is gone and a new one is in its place (hostPath re-made)."""
        current = socket_identity(self.settings.kubelet_dir)
        return current is not None and current != self._dir_identity

    def _rewatch(self) -> None:
        """Watch and lock the new directory; the sockets and the lock file went with the old one."""
        directory = self.settings.kubelet_dir
        events.info("plugin_dir_replaced", f"{directory} was deleted and created again: locking, watching and serving "
                    "the new one", directory=str(directory))
        self._dir_identity = socket_identity(self.settings.kubelet_dir)
        if self._dir_watcher is not None:
            self._dir_watcher.stop()
            self._watchers.remove(self._dir_watcher)
        self._start_watcher(self._plugin_dir_watcher())
        self._lock.release()
        self._lock.acquire()

    def _serve(self) -> None:
        self._learn_held()  # before any device is advertised: a held core must not look free
        tree, wires = self._checked
        self._pools.serve(self.tree, refused=self._cpu_manager.refusals(self.tree),
                          wires=wires if tree is self.tree else {})

    def _kubelet_gone(self, batch: set[Item]) -> str:
        """Why the pools may be tied to a kubelet that is gone (a socket of ours removed, a new kubelet.sock), or ""."""
        gone = {item.name for item in batch if isinstance(item, SocketGone)}
        created = Wake.KUBELET_SOCKET in batch
        return self._pools.kubelet_restarted(gone, created) if gone or created else ""

    def _restart(self, reason: str) -> None:
        """Stop every server now; :meth:`_serve_once_the_kubelet_listens` serves anew.

        Not at once: a starting kubelet unlinks every socket in the directory
        and only then listens on a new ``kubelet.sock``, so the first socket of
        ours to go comes while its sweep still runs (it would unlink sockets
        bound now as well) and while nothing listens but, perhaps, the file
        the dead kubelet left: pod resources unread, every Register refused.
        """
        servers = len(self._pools.servers)
        events.info("serving_again", f"stopping {servers} servers; serving anew and registering again once "
                    f"kubelet.sock accepts: {reason}", servers=servers, reason=reason)
        self._pools.stop()
        self._awaiting_kubelet = True

    def _serve_once_the_kubelet_listens(self, *, just_created: bool) -> None:
        """Serve and register again once ``kubelet.sock`` accepts connections; until then, every wake asks again.

        A socket of ours removed while the same kubelet still listens (by
        hand, say) is served again at once: its ``kubelet.sock`` accepts.
        """
        if kubelet_listens(self.kubelet_socket, just_created=just_created):
            self._awaiting_kubelet = False
            self._serve()

    def _count_kubelet(self, batch: set[Item]) -> None:
        """A kubelet.sock created after one was there is a kubelet restart: counted once, whatever it removed."""
        if Wake.KUBELET_SOCKET in batch:
            if self._kubelet_seen:
                servers = len(self._pools.servers)
                events.info("kubelet_restart", f"kubelet restart seen: a new kubelet.sock; {servers} servers running",
                            servers=servers)
                self.observers.kubelet_restarted()
            self._kubelet_seen = True

    def _learn_held(self) -> None:
        withheld = self._held.learn(self.plan)
        claimed = self._learn_claimed()
        if withheld is not None or claimed:
            self._push(self.node.tree_now(self._online, self._held.cores | self._claimed), self._online)
        if self._irqs is not None:
            self._irqs.update(self._steered_held(), self._housekeeping())

    def _learn_claimed(self) -> bool:
        """Keep the cores leftover DRA claims hold out; True when that set changed. The last one gone: stop its driver."""
        leftover = self._leftover
        if leftover is None:
            return False
        cpus = leftover.claimed()
        # by CPUs, not names: the plan may name (or pool) those cores otherwise since the claims were prepared
        claimed = frozenset(core for core in self.node.core_ids if cpus and core.cpus & cpus)
        changed, self._claimed = claimed != self._claimed, claimed
        if cpus is None:
            leftover.stop()
            self._leftover = None
            events.info("dra_claims_gone", "the last claim DRA mode prepared is unprepared: its driver is deregistered")
        return changed

    def _due(self) -> float | None:
        """When pod resources are next read: to give back a withheld core, or for IRQ steering's round."""
        dues = [self._held.due(), self._irqs.due() if self._irqs is not None else None]
        return min((due for due in dues if due is not None), default=None)

    def _steered_held(self) -> frozenset[int] | None:
        """The CPUs containers hold in the IRQ-steered pools, by the last read of pod resources (None: unread)."""
        held = self._held.held
        resources = [RESOURCE_NAMES[pool] for pool in self.settings.irq_steering]
        return None if held is None else held_cpus(self.tree, held, resources)

    def _housekeeping(self) -> frozenset[int]:
        steered = frozenset().union(*(self.plan.cpus(pool) for pool in self.settings.irq_steering))
        return housekeeping(self._online, steered)

    def _refresh(self) -> None:
        try:
            online = online_cpus(self.settings.sysfs_root)  # the plan is fixed: only health can change
        except CmkError as err:  # a sysfs file caught mid-change: the next event re-reads
            events.warning("cpus_unread", f"re-reading CPUs failed: {err}", reason=str(err))
            return
        if online == self._online:  # the tree is of these CPUs already (the start's own check lands here)
            return
        self._push(self.node.tree_now(online, self._held.cores | self._claimed), online)

    def _push(self, new: DeviceTree, online: frozenset[int]) -> None:
        """Serve ``new``: changed snapshots go to their servers (health changes are logged)."""
        for resource, devices in new.items():
            old = self.tree[resource]
            if devices == old:
                continue
            for device_id, healthy in health_changes(old, devices):
                cpus = format_cpu_list(devices.devices[device_id].cpus)
                state = "Healthy" if healthy else "Unhealthy (a CPU is offline)"
                events.info("health_changed", f"health: {resource} {device_id} is now {state}", pool=str(devices.pool),
                            resource=resource, device=device_id, cpus=cpus, healthy=healthy)
            self._pools.update(resource, devices)
        self.tree = new
        self._checked = (new, {})  # the first tree's messages are of no use now: its servers made their own
        self._online = online


class _HandOut(Observer):
    """IRQ steering's wake (from a server thread): CPUs of a steered pool just given out are cleared at once."""

    def __init__(self, steered: frozenset[Pool], wakes: Wakes) -> None:
        self._steered, self._wakes = steered, wakes

    def allocated(self, allocation: Allocation, seconds: float) -> None:
        if allocation.pool in self._steered:
            self._wakes.put(HandedOut(parse_cpu_list(allocation.cpus)))
