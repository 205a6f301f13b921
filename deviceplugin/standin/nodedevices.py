"""What the kubelet's device manager knows about each extended resource: devices, health, capacity.

Pure bookkeeping (no gRPC, no clock of its own: callers pass ``now``), so
the capacity rules of ``docs/design/kubelet-contract.md`` are unit-tested with literal
values. The rules mirror the kubelet's ``GetCapacity``:

- capacity = healthy + unhealthy devices, allocatable = healthy;
- a health string other than exactly ``Healthy`` is unhealthy;
- every ListAndWatch message replaces the resource's whole device set;
- when the stream ends every device turns unhealthy, the endpoint is
  "stopped" (allocations fail) and, after a grace period without a new
  registration, the resource drops out: capacity reads 0;
- a kubelet restart forgets every device (the checkpoint keeps only the
  resource names), so capacity reads 0 until the plugin registers again.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from api.constants import HEALTHY, UNHEALTHY


@dataclass(frozen=True)
class Device:
    """One device as the last ListAndWatch snapshot described it."""

    id: str
    health: str
    numa_nodes: tuple[int, ...] = ()
    #: A TopologyInfo was sent but named no node: "no node" for allocation, yet it makes the
    #: device vanish from GetAllocatableResources and counts as "has topology" for reuse.
    empty_topology: bool = False

    @property
    def has_topology(self) -> bool:
        """Whether the message carried a TopologyInfo at all (nil versus empty)."""
        return bool(self.numa_nodes) or self.empty_topology

    @property
    def healthy(self) -> bool:
        # The kubelet compares against the exact string; "healthy" or "OK" count as unhealthy.
        return self.health == HEALTHY


@dataclass
class _Resource:
    devices: dict[str, Device] = field(default_factory=dict)
    stopped_at: float | None = None  # None while the endpoint is live

    def expired(self, now: float, grace_period: float) -> bool:
        return self.stopped_at is not None and now - self.stopped_at >= grace_period


class NodeDevices:
    """Per-resource device sets and endpoint liveness; not thread-safe (the stand-in locks around it)."""

    def __init__(self, grace_period: float) -> None:
        self._grace_period = grace_period
        self._resources: dict[str, _Resource] = {}

    def registered(self, resource: str) -> None:
        """A plugin registered: its endpoint is live again; old devices stay until its first snapshot."""
        self._resources.setdefault(resource, _Resource()).stopped_at = None

    def snapshot(self, resource: str, devices: Iterable[Device]) -> list[str]:
        """Replace the resource's devices; returns the protocol problems found (duplicate IDs).

        The kubelet accepts duplicates silently but then counts one ID both
        healthy and unhealthy; the stand-in keeps the last one and reports
        the duplicate so tests can insist on none.
        """
        state = self._resources.setdefault(resource, _Resource())
        fresh: dict[str, Device] = {}
        problems = []
        for device in devices:
            if device.id in fresh:
                problems.append(f"{resource}: device ID {device.id!r} appears twice in one ListAndWatch snapshot")
            fresh[device.id] = device
        state.devices = fresh
        return problems

    def stream_ended(self, resource: str, now: float) -> None:
        """The kubelet's PluginDisconnected: every device unhealthy, endpoint stopped, grace timer starts."""
        state = self._resources.get(resource)
        if state is None:
            return
        state.devices = {i: replace(d, health=UNHEALTHY) for i, d in state.devices.items()}
        state.stopped_at = now

    def kubelet_restarted(self, now: float) -> None:
        """A new kubelet process: known resources from the checkpoint, no devices, stopped endpoints."""
        for state in self._resources.values():
            state.devices = {}
            state.stopped_at = now

    def ever_seen(self, resource: str) -> bool:
        """Whether any plugin ever registered it (the kubelet's checkpoint knows it): a device plugin resource."""
        return resource in self._resources

    def is_live(self, resource: str) -> bool:
        state = self._resources.get(resource)
        return state is not None and state.stopped_at is None

    def known(self, resource: str, now: float) -> bool:
        """Whether the resource still exists on the node (registered, and not dropped after the grace period)."""
        state = self._resources.get(resource)
        return state is not None and not state.expired(now, self._grace_period)

    def devices(self, resource: str) -> dict[str, Device]:
        state = self._resources.get(resource)
        return dict(state.devices) if state else {}

    def healthy_ids(self, resource: str) -> set[str]:
        state = self._resources.get(resource)
        return {i for i, d in state.devices.items() if d.healthy} if state else set()

    def capacity(self, now: float) -> dict[str, int]:
        """Node status Capacity: resources dropped after the grace period read 0, as the kubelet reports them."""
        return {
            name: 0 if state.expired(now, self._grace_period) else len(state.devices)
            for name, state in sorted(self._resources.items())
        }

    def allocatable(self, now: float) -> dict[str, int]:
        return {
            name: 0 if state.expired(now, self._grace_period) else sum(d.healthy for d in state.devices.values())
            for name, state in sorted(self._resources.items())
        }
