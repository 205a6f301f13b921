"""The device model: what each pool's plugin advertises. Pure values, no I/O, no grpc.

A snapshot is a *device tree* (resource name -> :class:`PoolDevices`), built
from the pool plan and the set of online CPUs. The daemon rebuilds it when
CPUs go offline or online and diffs it against the one it serves.

Why it works this way: ``docs/design/device-model.md``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from deviceplugin.model.cpulist import CpuListError, format_cpu_list, parse_cpu_list
from deviceplugin.model.plan import (
    CORE_POOLS,
    DEFAULT_SLOTS,
    RESOURCE_NAMES,
    Pool,
    PoolPlan,
)
from deviceplugin.model.topology import Core

MAX_ID_LENGTH = 63  # the kubelet's limit; the daemon checks every ID with api.constants at start


@dataclass(frozen=True, slots=True)  # one per CPU or core: no __dict__ each (8,192 CPUs)
class Device:
    """One advertised device: its CPUs, the NUMA nodes they sit on, and whether all are online."""

    id: str
    cpus: frozenset[int]
    numa_nodes: frozenset[int]
    healthy: bool
    #: the NUMA node of a NUMA-local slot (slot scope ``numa-node``), whose CDI device is that node's alone
    slot_node: int | None = None


@dataclass(frozen=True)
class PoolDevices:
    """One resource's snapshot: devices in advertising order, and the cores behind core devices."""

    pool: Pool
    resource: str
    devices: Mapping[str, Device]
    cores: Mapping[str, Core]

    @property
    def preferred_allocation(self) -> bool:
        """Advertised only for core pools: slots are interchangeable, the kubelet's own pick is as good."""
        return self.pool in CORE_POOLS

    @property
    def healthy(self) -> int:
        return sum(1 for device in self.devices.values() if device.healthy)

    def cpus_of(self, ids: Iterable[str]) -> frozenset[int]:
        """The CPUs behind known IDs: a core's threads, or a slot's whole pool; unknown IDs add none."""
        return frozenset(cpu for i in ids if i in self.devices for cpu in self.devices[i].cpus)


#: resource name -> its snapshot; only pools with CPUs appear.
DeviceTree = Mapping[str, PoolDevices]


LEGACY_PREFIX = "cpus-"


def cpu_list_id(core: Core) -> str:
    """``cpus-1.9``: the core's online CPUs (the fallback name, and every core's name before 0.1.0)."""
    name = LEGACY_PREFIX + format_cpu_list(core.cpus).replace(",", ".")
    return name if len(name) <= MAX_ID_LENGTH else f"{LEGACY_PREFIX}{core.first}"


def _place(core: Core) -> str | None:
    if core.core_id is None:
        return None
    parts = [f"n{core.node}" if core.node is not None else "",
             f"p{core.package}" if core.package is not None else "",
             f"d{core.die}" if core.die else "", f"c{core.core_id}"]
    return "core-" + "-".join(part for part in parts if part)


def core_device_ids(cores: Iterable[Core]) -> dict[Core, str]:
    """Each core's ID: its place where that is unique among ``cores`` (all the node's), else its CPUs."""
    places = {core: _place(core) for core in cores}
    count = Counter(place for place in places.values() if place is not None)
    return {core: place if place is not None and count[place] == 1 else cpu_list_id(core)
            for core, place in places.items()}


def legacy_core_cpus(device_id: str) -> frozenset[int] | None:
    """The CPUs a ``cpus-`` ID (today's fallback, every core ID before 0.1.0) named; None for others.

    A long name was cut to its first CPU; callers widen the result to whole cores.
    """
    if not device_id.startswith(LEGACY_PREFIX):
        return None
    try:
        return parse_cpu_list(device_id.removeprefix(LEGACY_PREFIX).replace(".", ","))
    except CpuListError:
        return None


def slot_device_ids(pool: Pool, count: int, node: int | None = None) -> list[str]:
    """``shared-000``...; with a NUMA node (slot scope ``numa-node``) ``shared-n1-000``..."""
    width = max(3, len(str(count - 1)))
    prefix = pool.value if node is None else f"{pool.value}-n{node}"
    return [f"{prefix}-{index:0{width}d}" for index in range(count)]


def _nodes(cores: Iterable[Core]) -> frozenset[int]:
    return frozenset(core.node for core in cores if core.node is not None)


def pool_devices(plan: PoolPlan, pool: Pool, online: frozenset[int],
                 names: Mapping[Core, str] | None = None,
                 withheld: frozenset[Core] = frozenset()) -> PoolDevices | None:
    """The pool's devices with health from ``online``; None when the pool has no CPUs.

    ``names`` are :func:`core_device_ids` of the plan's cores (computed here when not given).
    ``withheld`` cores (:mod:`deviceplugin.model.withheld`) are in no device: a core pool does not
    advertise them, a slot pool's CPUs leave them out (no CPUs left: its slots are Unhealthy).
    """
    planned = plan.pools[pool]
    if not planned:
        return None
    cores = [core for core in planned if core not in withheld]
    if pool in CORE_POOLS:
        names = names if names is not None else core_device_ids(plan.all_cores)
        by_id = {names[core]: core for core in cores}
        node_sets: dict[int | None, frozenset[int]] = {}  # one {n} per node, not one per device
        devices = {}
        for device_id, core in by_id.items():
            nodes = node_sets.get(core.node)
            if nodes is None:
                nodes = node_sets[core.node] = _nodes([core])
            devices[device_id] = Device(device_id, core.cpus, nodes, core.cpus <= online)
    else:
        by_id = {}
        devices = {}
        for node, group in plan.slot_groups(pool).items():
            kept = [core for core in group if core not in withheld]
            cpus = frozenset(cpu for core in kept for cpu in core.cpus)
            nodes, healthy = _nodes(group), bool(cpus) and cpus <= online
            count = plan.slots.get(pool, DEFAULT_SLOTS)
            devices.update((i, Device(i, cpus, nodes, healthy, node)) for i in slot_device_ids(pool, count, node))
    return PoolDevices(pool, RESOURCE_NAMES[pool], MappingProxyType(devices), MappingProxyType(by_id))


def device_tree(plan: PoolPlan, online: frozenset[int], withheld: frozenset[Core] = frozenset(), *,
                names: Mapping[Core, str] | None = None) -> DeviceTree:
    """Every served pool's snapshot, in the plan's pool order; ``names`` as :func:`pool_devices` takes them."""
    tree = {}
    names = core_device_ids(plan.all_cores) if names is None else names
    for pool in Pool:
        devices = pool_devices(plan, pool, online, names, withheld)
        if devices is not None:
            tree[devices.resource] = devices
    return MappingProxyType(tree)


def health_changes(old: PoolDevices, new: PoolDevices) -> list[tuple[str, bool]]:
    """(device ID, now healthy) for each device whose health differs between two snapshots."""
    return [
        (device_id, device.healthy)
        for device_id, device in new.devices.items()
        if device_id in old.devices and old.devices[device_id].healthy != device.healthy
    ]
