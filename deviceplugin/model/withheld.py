"""Cores kept out of every pool while the kubelet still holds them elsewhere. Pure values, no I/O.

Why it works this way: ``docs/design/withheld.md``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from deviceplugin.model.cpulist import format_cpu_list
from deviceplugin.model.devices import core_device_ids, legacy_core_cpus
from deviceplugin.model.plan import CORE_POOLS, RESOURCE_NAMES, Pool, PoolPlan
from deviceplugin.model.topology import Core

POOL_OF: Mapping[str, Pool] = {resource: pool for pool, resource in RESOURCE_NAMES.items()}


@dataclass(frozen=True)
class Withheld:
    """One core out of every pool: the plan's pool for it, and the holding that keeps it out."""

    core: Core
    planned: Pool
    resource: str
    device_id: str
    reason: str

    @property
    def message(self) -> str:
        """One sentence for the daemon's ``core_withheld`` line and describe's note."""
        return (f"core {{{format_cpu_list(self.core.cpus)}}} withheld from {self.planned}: {self.resource} "
                f"{self.device_id} is still held ({self.reason}); it rejoins {self.planned} once the kubelet frees it")


def _planned_pool(plan: PoolPlan) -> dict[Core, Pool]:
    return {core: pool for pool, cores in plan.pools.items() for core in cores}


def withheld_cores(plan: PoolPlan, held: Mapping[str, Iterable[str]],
                   slot_cpus: Mapping[str, frozenset[int]] | None = None) -> tuple[Withheld, ...]:
    """Cores the plan puts in a pool while ``held`` (resource -> IDs containers hold) ties them to another.

    ``slot_cpus``: resource -> the CPUs its slots gave out before this plan
    (None or missing: the same as now, nothing to withhold for that pool).
    IDs of other resources and IDs no scheme knows are ignored.
    """
    if not any(held.values()):  # a node with no container holding anything: nothing to name (8,192 CPUs: 40 ms)
        return ()
    planned = _planned_pool(plan)
    names = core_device_ids(plan.all_cores)
    by_name = {name: core for core, name in names.items()}
    found: dict[Core, Withheld] = {}

    def withhold(cores: Iterable[Core], resource: str, device_id: str, reason: str, keep: Pool | None) -> None:
        for core in cores:
            pool = planned.get(core)
            if pool is not None and pool is not keep and core not in found:
                found[core] = Withheld(core, pool, resource, device_id, reason)

    for resource, ids in sorted(held.items()):
        pool = POOL_OF.get(resource)
        if pool is None:
            continue
        for device_id in sorted(set(ids)):
            if pool in CORE_POOLS:
                core = by_name.get(device_id)
                if core is not None:
                    withhold([core], resource, device_id, f"the plan moved it out of {pool}", keep=pool)
                    continue
                cpus = legacy_core_cpus(device_id)
                if cpus:
                    touched = [c for c in plan.all_cores if c.cpus & cpus]
                    withhold(touched, resource, device_id, "under an ID of an older release", keep=None)
            elif slot_cpus and resource in slot_cpus:
                cpus = slot_cpus[resource]
                touched = [c for c in plan.all_cores if c.cpus & cpus]
                withhold(touched, resource, device_id,
                         f"its slot runs on the previous {pool} CPUs {format_cpu_list(cpus)}", keep=pool)
    return tuple(sorted(found.values(), key=lambda w: w.core.first))


@dataclass(frozen=True)
class Holds:
    """What one read of pod resources decides: the withheld cores, and the slot record to keep."""

    withheld: tuple[Withheld, ...]
    record: Mapping[str, frozenset[int]]


def learn_holds(plan: PoolPlan, held: Mapping[str, Iterable[str]], recorded: Mapping[str, frozenset[int]],
                held_at_start: Mapping[str, Iterable[str]]) -> Holds:
    """The daemon's rule for each read of pod resources.

    ``recorded``: the slot record found at the daemon's start (resource ->
    CPUs its slots gave before); it counts while a slot held at the daemon's
    start (``held_at_start``) is still held, as those run on the previous
    plan's CPUs; slots handed out since run on this plan's. The new record is
    what slots give now, plus the recorded CPUs that still count.
    """
    before = {r: cpus for r, cpus in recorded.items() if set(held.get(r, ())) & set(held_at_start.get(r, ()))}
    withheld = withheld_cores(plan, held, before)
    out = frozenset(cpu for w in withheld for cpu in w.core.cpus)
    record = {RESOURCE_NAMES[pool]: plan.cpus(pool) - out
              for pool in Pool if pool not in CORE_POOLS and plan.pools[pool]}
    for resource, cpus in before.items():
        record[resource] = record.get(resource, frozenset()) | cpus
    return Holds(withheld, record)
