"""The daemon's operator-facing events: each is one log line and one call to every listener.

One seam for both outputs, so a log line and a metric can never disagree
about what happened: the daemon, its servers and its registrar emit an
:class:`Event`; the log formatter (:mod:`deviceplugin.observe.logs`) renders
its name and fields as ``key=value`` or JSON; listeners (the metrics, the
allocation resolver) match on its type. The classes below are the catalogue:
an event that is not one of them cannot be emitted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import ClassVar

log = logging.getLogger("deviceplugin.events")


@dataclass(frozen=True)
class Event:
    """A name for the ``event`` log field, a level, and a message built from the fields alone."""

    name: ClassVar[str]
    level: ClassVar[int] = logging.INFO
    #: Emitted inside ``except``: the line carries the exception's traceback (as ``log.exception`` did).
    traceback: ClassVar[bool] = False

    @property
    def message(self) -> str:
        raise NotImplementedError

    def fields(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class Starting(Event):
    """Logged once the start went through (a failed start stays one line): which release is running, so a log says it without a shell on the node."""

    name: ClassVar[str] = "starting"
    version: str
    python: str
    machine: str

    @property
    def message(self) -> str:
        return f"cmk-deviceplugin {self.version} starting (Python {self.python}, {self.machine})"


@dataclass(frozen=True)
class Serving(Event):
    name: ClassVar[str] = "serving"
    resource: str
    socket: str
    devices: int
    healthy: int

    @property
    def message(self) -> str:
        return f"serving {self.resource} on {self.socket}: {self.devices} devices, {self.healthy} healthy"


@dataclass(frozen=True)
class Registered(Event):
    name: ClassVar[str] = "registered"
    resource: str
    endpoint: str
    preferred_allocation: bool

    @property
    def message(self) -> str:
        preferred = "on" if self.preferred_allocation else "off"
        return f"registered {self.resource} with the kubelet (endpoint {self.endpoint}, preferred allocation {preferred})"


@dataclass(frozen=True)
class RegisterFailed(Event):
    """Once per outage, not once per retry."""

    name: ClassVar[str] = "register_failed"
    level: ClassVar[int] = logging.WARNING
    resource: str
    kubelet_socket: str
    code: str
    details: str
    max_delay: float

    @property
    def message(self) -> str:
        return (f"cannot register {self.resource} at {self.kubelet_socket} ({self.code}: {self.details}); "
                f"retrying with backoff up to {self.max_delay:.0f} s")


@dataclass(frozen=True)
class KubeletRestart(Event):
    """Once per new ``kubelet.sock``: the servers restart for other reasons too (:class:`ServingAgain`)."""

    name: ClassVar[str] = "kubelet_restart"
    servers: int

    @property
    def message(self) -> str:
        return f"kubelet restart seen: a new kubelet.sock; {self.servers} servers running"


@dataclass(frozen=True)
class ServingAgain(Event):
    """The servers stop; once ``kubelet.sock`` accepts, they serve anew and register again. ``reason`` says why.

    Not a count of kubelet restarts (:class:`KubeletRestart` is): a socket of ours removed by
    hand, or the plugin directory re-made, serve anew too.
    """

    name: ClassVar[str] = "serving_again"
    servers: int
    reason: str

    @property
    def message(self) -> str:
        return (f"stopping {self.servers} servers; serving anew and registering again once kubelet.sock accepts: "
                f"{self.reason}")


@dataclass(frozen=True)
class HealthChanged(Event):
    name: ClassVar[str] = "health_changed"
    pool: str
    resource: str
    device: str
    cpus: str
    healthy: bool

    @property
    def message(self) -> str:
        state = "Healthy" if self.healthy else "Unhealthy (a CPU is offline)"
        return f"health: {self.resource} {self.device} is now {state}"


@dataclass(frozen=True)
class Allocated(Event):
    """The kubelet's Allocate request names no pod or container; :class:`AllocationResolved` adds them later.

    ``devices`` names each device once, however often the request repeated it.
    """

    name: ClassVar[str] = "allocated"
    pool: str
    resource: str
    devices: tuple[str, ...]
    cpus: str
    seconds: float

    @property
    def message(self) -> str:
        return f"allocated {self.resource} {','.join(self.devices)}: CPUs {self.cpus}"


@dataclass(frozen=True)
class AllocateRefused(Event):
    """``devices`` holds the first few of the ``requested`` IDs (``deviceplugin.model.shown``), not all of them."""

    name: ClassVar[str] = "allocate_refused"
    level: ClassVar[int] = logging.WARNING
    pool: str
    resource: str
    devices: tuple[str, ...]
    requested: int
    error: str
    seconds: float

    @property
    def message(self) -> str:
        return f"refused allocation: {self.error}"


@dataclass(frozen=True)
class PreferredAllocation(Event):
    """``available`` and ``must_include`` are the pool's devices among those asked, each once: what the policy used."""

    name: ClassVar[str] = "preferred_allocation"
    level: ClassVar[int] = logging.DEBUG
    pool: str
    resource: str
    available: tuple[str, ...]
    must_include: tuple[str, ...]
    size: int
    chosen: tuple[str, ...]
    seconds: float

    @property
    def message(self) -> str:
        return f"preferred {' '.join(self.chosen)} for {self.resource}"


@dataclass(frozen=True)
class PreferredAllocationRefused(Event):
    name: ClassVar[str] = "preferred_allocation_refused"
    level: ClassVar[int] = logging.WARNING
    pool: str
    resource: str
    error: str
    seconds: float

    @property
    def message(self) -> str:
        return f"refused preferred allocation: {self.error}"


@dataclass(frozen=True)
class AllocationResolved(Event):
    name: ClassVar[str] = "allocation_resolved"
    pool: str
    resource: str
    devices: tuple[str, ...]
    cpus: str
    namespace: str
    pod: str
    container: str

    @property
    def message(self) -> str:
        return (f"{self.resource} {','.join(self.devices)} (CPUs {self.cpus}) held by "
                f"{self.namespace}/{self.pod} container {self.container}")


@dataclass(frozen=True)
class MetricsServing(Event):
    name: ClassVar[str] = "metrics_serving"
    address: str

    @property
    def message(self) -> str:
        return f"serving metrics at http://{self.address}/metrics"


@dataclass(frozen=True)
class NfdWritten(Event):
    name: ClassVar[str] = "nfd_written"
    path: str
    labels: tuple[str, ...]

    @property
    def message(self) -> str:
        return f"wrote NFD labels to {self.path}"


@dataclass(frozen=True)
class NfdExpiring(Event):
    """At stop: the labels stay until ``expiry`` (a rollout's next daemon rewrites them first: no flapping)."""

    name: ClassVar[str] = "nfd_expiring"
    path: str
    expiry: str

    @property
    def message(self) -> str:
        return f"kept {self.path} with NFD expiry {self.expiry}: the next daemon rewrites it, else NFD drops it then"


@dataclass(frozen=True)
class NfdExpiryFailed(Event):
    name: ClassVar[str] = "nfd_expiry_failed"
    level: ClassVar[int] = logging.WARNING
    path: str
    error: str

    @property
    def message(self) -> str:
        return f"cannot mark {self.path} expiring: {self.error}; its labels stay until the file is removed"


@dataclass(frozen=True)
class ConfigError(Event):
    name: ClassVar[str] = "config_error"
    level: ClassVar[int] = logging.ERROR
    error: str

    @property
    def message(self) -> str:
        return self.error


@dataclass(frozen=True)
class StreamLost(Event):
    """The kubelet ended a pool's ListAndWatch stream and will not dial back: registering it again."""

    name: ClassVar[str] = "stream_lost"
    resource: str

    @property
    def message(self) -> str:
        return (f"the kubelet ended the ListAndWatch stream of {self.resource} "
                "and will not dial back: registering it again")


@dataclass(frozen=True)
class StreamReplaced(Event):
    """A newer ListAndWatch stream ended an older one: a server serves only its newest stream.

    Seen once across a re-registration; seen again and again, something other
    than the kubelet opens streams, and the pool is not the kubelet's while one lasts.
    """

    name: ClassVar[str] = "stream_replaced"
    level: ClassVar[int] = logging.WARNING
    resource: str
    stream: int
    newer: int

    @property
    def message(self) -> str:
        return (f"ListAndWatch stream {self.stream} of {self.resource} ended: stream {self.newer} replaced it "
                "(the kubelet holds one per plugin)")


@dataclass(frozen=True)
class PluginDirReplaced(Event):
    name: ClassVar[str] = "plugin_dir_replaced"
    directory: str

    @property
    def message(self) -> str:
        return f"{self.directory} was deleted and created again: locking, watching and serving the new one"


@dataclass(frozen=True)
class CoreWithheld(Event):
    """A core the kubelet still holds under another ID or pool is kept out of every pool."""

    name: ClassVar[str] = "core_withheld"
    level: ClassVar[int] = logging.WARNING
    core: str
    pool: str
    resource: str
    device: str
    reason: str

    @property
    def message(self) -> str:
        return (f"core {{{self.core}}} withheld from {self.pool}: {self.resource} {self.device} is still "
                f"held ({self.reason}); it rejoins {self.pool} once the kubelet frees it")


@dataclass(frozen=True)
class IrqsSteered(Event):
    """Device IRQs moved off the held CPUs (or given back once none are held), or irqbalance told to."""

    name: ClassVar[str] = "irqs_steered"
    cpus: str
    moved: int
    narrowed: int
    via: str = ""

    @property
    def message(self) -> str:
        held = f"held CPUs {self.cpus}" if self.cpus else "no held CPUs"
        if self.via:
            return f"asked irqbalance ({self.via}) to keep device interrupts off {held}"
        return f"wrote {self.moved} IRQ masks for {held}; {self.narrowed} stay narrowed"


@dataclass(frozen=True)
class IrqUnmovable(Event):
    """Once per IRQ for the daemon's life: a managed or per-CPU IRQ refuses every write, so it is not retried."""

    name: ClassVar[str] = "irq_unmovable"
    level: ClassVar[int] = logging.WARNING
    irq: str
    cpus: str
    error: str

    @property
    def message(self) -> str:
        return (f"IRQ {self.irq} cannot be pointed at CPUs {self.cpus} ({self.error}): the kernel manages it "
                "or /proc/irq is read-only here; it is left as it is and not tried again")


@dataclass(frozen=True)
class IrqRecordProblem(Event):
    name: ClassVar[str] = "irq_record_problem"
    level: ClassVar[int] = logging.WARNING
    reason: str

    @property
    def message(self) -> str:
        return self.reason


@dataclass(frozen=True)
class CoreReleased(Event):
    name: ClassVar[str] = "core_released"
    core: str
    pool: str

    @property
    def message(self) -> str:
        return f"core {{{self.core}}} is free at the kubelet: back in {self.pool}"


@dataclass(frozen=True)
class NfdKept(Event):
    """Not the file this daemon wrote (another daemon's, since): left alone."""

    name: ClassVar[str] = "nfd_kept"
    path: str

    @property
    def message(self) -> str:
        return f"left {self.path} alone: it is not the file this daemon wrote"


@dataclass(frozen=True)
class CpuManagerStatic(Event):
    """The kubelet's static CPU manager pins CPUs itself: the exclusive pools are not served (``problem`` says why)."""

    name: ClassVar[str] = "cpu_manager_static"
    level: ClassVar[int] = logging.ERROR
    problem: str
    refused: tuple[str, ...]

    @property
    def message(self) -> str:
        return f"not serving {', '.join(self.refused)}: {self.problem}"


@dataclass(frozen=True)
class CpuManagerUnknown(Event):
    """The kubelet's CPU manager policy could not be read: the exclusive pools are served, and why."""

    name: ClassVar[str] = "cpu_manager_unknown"
    level: ClassVar[int] = logging.WARNING
    reason: str

    @property
    def message(self) -> str:
        return (f"cannot tell the kubelet's CPU manager policy ({self.reason}): serving the exclusive pools, "
                "which needs the kubelet's cpuManagerPolicy: none")


@dataclass(frozen=True)
class HostPathsShared(Event):
    """A daemon with its own ``--kubelet-dir`` (by hand, a test) still writes these host-wide default paths."""

    name: ClassVar[str] = "host_paths_shared"
    level: ClassVar[int] = logging.WARNING
    kubelet_dir: str
    paths: tuple[str, ...]

    @property
    def message(self) -> str:
        return (f"--kubelet-dir {self.kubelet_dir} is not the kubelet's, yet this daemon writes the host's "
                f"{'; '.join(self.paths)}: give those flags too (or turn each off) to keep it off them")


@dataclass(frozen=True)
class ConfigActive(Event):
    """Which section of ``--config`` this node took and its generation (``cmk_config_info``, ``cmk describe``)."""

    name: ClassVar[str] = "config_active"
    level: ClassVar[int] = logging.INFO
    path: str
    section: str
    generation: str
    node: str

    @property
    def message(self) -> str:
        node = f" for node {self.node}" if self.node else ""
        return f"config {self.path}: section {self.section}{node}, generation {self.generation}"


@dataclass(frozen=True)
class ConfigRefused(Event):
    """The config or its plan is bad: the daemon serves the last good plan instead (``cmk_config_fallback``)."""

    name: ClassVar[str] = "config_refused"
    level: ClassVar[int] = logging.ERROR
    source: str
    error: str
    last_good: str

    @property
    def message(self) -> str:
        return (f"refused {self.source}: {self.error}; serving the last good plan from {self.last_good} "
                "instead: fix the config and roll out again")


@dataclass(frozen=True)
class LastGoodPlanUnsaved(Event):
    name: ClassVar[str] = "last_good_plan_unsaved"
    level: ClassVar[int] = logging.WARNING
    directory: str
    error: str

    @property
    def message(self) -> str:
        return (f"cannot remember the plan in {self.directory}: {self.error}; "
                "a later bad config would then stop the pools")


@dataclass(frozen=True)
class PlanNote(Event):
    """Something the planner decided that the operator should know (isolated cores left out, CMK's fallback)."""

    name: ClassVar[str] = "plan_note"
    note: str

    @property
    def message(self) -> str:
        return f"plan: {self.note}"


@dataclass(frozen=True)
class ServingStopped(Event):
    name: ClassVar[str] = "serving_stopped"
    pools: int

    @property
    def message(self) -> str:
        return f"stopped serving {self.pools} pools; sockets removed"


@dataclass(frozen=True)
class CdiSpecWritten(Event):
    name: ClassVar[str] = "cdi_spec_written"
    path: str
    devices: tuple[str, ...]
    hook: str

    @property
    def message(self) -> str:
        return (f"CDI spec {self.path}: {len(self.devices)} devices ({', '.join(self.devices)}), "
                f"hook {self.hook} (kept when the daemon stops)")


@dataclass(frozen=True)
class InfraRecordWritten(Event):
    name: ClassVar[str] = "infra_record_written"
    path: str
    cpus: str
    changed: bool

    @property
    def message(self) -> str:
        return f"infra record {self.path}: {self.cpus} ({'written' if self.changed else 'unchanged'})"


@dataclass(frozen=True)
class InfraRecordUnwritten(Event):
    """The daemon's read-only mount of the install dir: the node-wide hook keeps the older record."""

    name: ClassVar[str] = "infra_record_unwritten"
    level: ClassVar[int] = logging.WARNING
    path: str
    reason: str

    @property
    def message(self) -> str:
        return (f"cannot write the node-wide hook's infra record {self.path}: {self.reason}: containers holding "
                "no pool keep the CPUs of the record as it is (run cmk install with this plan)")


@dataclass(frozen=True)
class CpusUnread(Event):
    """A sysfs file caught mid-change: the next event re-reads."""

    name: ClassVar[str] = "cpus_unread"
    level: ClassVar[int] = logging.WARNING
    reason: str

    @property
    def message(self) -> str:
        return f"re-reading CPUs failed: {self.reason}"


@dataclass(frozen=True)
class HeldUnknown(Event):
    """Pod resources unreachable: what was withheld stays so."""

    name: ClassVar[str] = "held_unknown"
    level: ClassVar[int] = logging.WARNING
    reason: str

    @property
    def message(self) -> str:
        return (f"cannot learn which devices are held ({self.reason}): cores the kubelet holds under other IDs "
                "or pools may be advertised as free")


@dataclass(frozen=True)
class SlotRecordUnread(Event):
    name: ClassVar[str] = "slot_record_unread"
    level: ClassVar[int] = logging.WARNING
    reason: str

    @property
    def message(self) -> str:
        return self.reason


@dataclass(frozen=True)
class SlotRecordUnwritten(Event):
    name: ClassVar[str] = "slot_record_unwritten"
    level: ClassVar[int] = logging.WARNING
    reason: str

    @property
    def message(self) -> str:
        return self.reason


@dataclass(frozen=True)
class EventFailed(Event):
    """The daemon outlives any single bad event: this line carries the traceback, the loop goes on."""

    name: ClassVar[str] = "event_failed"
    level: ClassVar[int] = logging.ERROR
    traceback: ClassVar[bool] = True
    wakes: tuple[str, ...]

    @property
    def message(self) -> str:
        return f"handling {list(self.wakes)} failed; waiting for the next event"


#: Called in the emitting thread, so it must be quick; match on the event's type.
Listener = Callable[[Event], None]


class Events:
    """Per daemon (not global), so two daemons in one test process keep their own listeners."""

    def __init__(self) -> None:
        self._listeners: list[Listener] = []

    def listen(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def emit(self, event: Event) -> None:
        log.log(event.level, event.message, exc_info=event.traceback, extra={"event": event.name, "fields": event.fields()})
        for listener in self._listeners:
            try:
                listener(event)
            except Exception:  # a broken listener must not fail an Allocate
                log.exception("event listener failed on %s", event.name)
