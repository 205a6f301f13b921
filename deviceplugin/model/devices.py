"""The device model: what each pool's plugin advertises. Pure values, no I/O, no grpc.

A snapshot is a *device tree* (resource name -> :class:`PoolDevices`), built
from the pool plan and the set of online CPUs. The daemon rebuilds it when
CPUs go offline or online and diffs it against the one it serves.

Why it works this way: ``docs/device-model.md``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from deviceplugin.model.plan import CORE_POOLS, RESOURCE_NAMES, Pool, PoolPlan
from deviceplugin.model.topology import Core
from pinner.cpulist import format_cpu_list

MAX_ID_LENGTH = 63  # the kubelet's limit; the daemon checks every ID with api.constants at start


@dataclass(frozen=True)
class Device:
    """One advertised device: its CPUs, the NUMA nodes they sit on, and whether all are online."""

    id: str
    cpus: frozenset[int]
    numa_nodes: frozenset[int]
    healthy: bool


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


def core_device_id(core: Core) -> str:
    name = "cpus-" + format_cpu_list(core.cpus).replace(",", ".")
    return name if len(name) <= MAX_ID_LENGTH else f"cpus-{core.first}"


def slot_device_ids(pool: Pool, count: int) -> list[str]:
    width = max(3, len(str(count - 1)))
    return [f"{pool.value}-{index:0{width}d}" for index in range(count)]


def _nodes(cores: Iterable[Core]) -> frozenset[int]:
    return frozenset(core.node for core in cores if core.node is not None)


def pool_devices(plan: PoolPlan, pool: Pool, online: frozenset[int]) -> PoolDevices | None:
    """The pool's devices with health from ``online``; None when the pool has no CPUs."""
    cores = plan.pools[pool]
    if not cores:
        return None
    if pool in CORE_POOLS:
        by_id = {core_device_id(core): core for core in cores}
        devices = {
            device_id: Device(device_id, core.cpus, _nodes([core]), core.cpus <= online)
            for device_id, core in by_id.items()
        }
    else:
        by_id = {}
        cpus = plan.cpus(pool)
        nodes = _nodes(cores)
        healthy = cpus <= online
        devices = {
            device_id: Device(device_id, cpus, nodes, healthy)
            for device_id in slot_device_ids(pool, plan.advertised(pool))
        }
    return PoolDevices(pool, RESOURCE_NAMES[pool], MappingProxyType(devices), MappingProxyType(by_id))


def device_tree(plan: PoolPlan, online: frozenset[int]) -> DeviceTree:
    """Every served pool's snapshot, in the plan's pool order."""
    tree = {}
    for pool in Pool:
        devices = pool_devices(plan, pool, online)
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
