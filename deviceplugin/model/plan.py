"""The pool plan: which cores serve which pool. A pure function of topology and options.

CMK's semantics are kept, so its users' flags mean what they meant (the doc below lists them).

Why it works this way: ``docs/design/pool-plan.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from itertools import groupby, zip_longest

from deviceplugin.errors import CmkError
from deviceplugin.model.cpulist import format_cpu_list
from deviceplugin.model.limits import MAX_CPUS, MAX_SLOTS
from deviceplugin.model.pinnercontract import POOLS as PINNER_POOLS
from deviceplugin.model.settings import setting
from deviceplugin.model.topology import Core, Topology


class Pool(StrEnum):
    EXCLUSIVE = "exclusive"
    EXCLUSIVE_NON_ISOLCPUS = "exclusive-non-isolcpus"
    SHARED = "shared"
    INFRA = "infra"


class Mode(StrEnum):
    PACKED = "packed"
    SPREAD = "spread"


class SlotScope(StrEnum):
    """What one shared/infra slot covers: the whole pool, or the pool's CPUs on one NUMA node.

    ``pool`` (default) suits every node: a slot gives the whole pool, so the
    kubelet's random slot choice without a Topology Manager loses nothing.
    ``numa-node`` offers each node's slots apart (``shared-n1-000``, its
    Allocate answer naming node 1's pool CPUs), so a Topology Manager aligns
    a shared container with the devices it takes.
    """

    POOL = "pool"
    NUMA_NODE = "numa-node"


#: pool -> extended resource name, from the contract table the pinner reads too
RESOURCE_NAMES: Mapping[Pool, str] = {pool: PINNER_POOLS[pool.value].resource for pool in Pool}

#: Pools whose devices are whole cores (one device per core); the others advertise slots.
CORE_POOLS = frozenset({Pool.EXCLUSIVE, Pool.EXCLUSIVE_NON_ISOLCPUS})

#: Default slots for shared/infra: the kubelet's default maxPods, so the slot
#: count never limits a node that the kubelet itself would not limit.
DEFAULT_SLOTS = 110

#: CMK's default pool sizes, used (clipped to what the machine has) when no size is given.
DEFAULT_EXCLUSIVE_CORES = 4
DEFAULT_SHARED_CORES = 1

EPP_RANK: Mapping[str, int] = {
    "performance": 0,
    "balance_performance": 1,
    "balance_power": 2,
    "power": 3,
}


#: Sorts cores best first: (SST-CP rank, negated SST-BF base frequency).
RankKey = Callable[[Core], tuple[int, int]]


class PlanError(CmkError):
    """The requested pools cannot be carved from this machine."""


@dataclass(frozen=True, kw_only=True)
class PlanOptions:
    """Pool sizes and placement (CMK's flags); ``None`` sizes take the documented defaults.

    Each field is a setting's one declaration (:mod:`deviceplugin.model.settings`): its flag, config
    key, checks, last-good form, chart schema and docs row are derived from it. The values come checked.
    """

    num_exclusive_cores: int | None = setting(
        None, least=0, most=MAX_CPUS, metavar="N", help="physical cores in the exclusive pool",
        default_text="the isolated cores shared does not take; without isolcpus, up to 4")
    num_shared_cores: int | None = setting(
        None, least=0, most=MAX_CPUS, metavar="N", help="physical cores in the shared pool",
        default_text="1 when two or more cores are free")
    exclusive_mode: Mode = setting(
        Mode.PACKED, help="packed fills one NUMA node/socket first; spread round-robins")
    shared_mode: Mode = setting(Mode.PACKED, help="as exclusive-mode, for the shared pool")
    excl_non_isolcpus: frozenset[int] = setting(
        frozenset(), metavar="CPUS", default_text="none",
        help="non-isolated CPUs (kernel cpu-list syntax) whose whole cores form the exclusive-non-isolcpus pool")
    shared_slots: int = setting(DEFAULT_SLOTS, least=1, most=MAX_SLOTS, metavar="N",
                                help="containers the shared pool admits at once")
    infra_slots: int = setting(DEFAULT_SLOTS, least=1, most=MAX_SLOTS, metavar="N",
                               help="containers the infra pool admits at once")
    slot_scope: SlotScope = setting(
        SlotScope.POOL,
        help="pool: a shared/infra slot gives the whole pool; numa-node: each NUMA node offers its own slots "
             "(N per node) giving that node's pool CPUs, for the Topology Manager")


@dataclass(frozen=True)
class PoolPlan:
    """Cores per pool (every pool present, empty ones included) and what the planner decided."""

    pools: Mapping[Pool, tuple[Core, ...]]
    isolated_mode: bool
    sst_bf: bool = False
    sst_cp: bool = False
    partially_isolated: tuple[Core, ...] = ()
    unused_isolated: tuple[Core, ...] = ()
    notes: tuple[str, ...] = ()
    slots: Mapping[Pool, int] = field(default_factory=dict)
    slot_scope: SlotScope = SlotScope.POOL

    def slot_groups(self, pool: Pool) -> dict[int | None, tuple[Core, ...]]:
        """NUMA node -> the slot pool's cores there (one group, key None, with scope ``pool``)."""
        cores = self.pools[pool]
        if self.slot_scope is SlotScope.POOL:
            return {None: cores} if cores else {}
        groups: dict[int | None, list[Core]] = {}
        for core in cores:
            groups.setdefault(core.node, []).append(core)
        return {node: tuple(group) for node, group in sorted(groups.items(), key=lambda item: (item[0] is None, item[0] or 0))}

    def cpus(self, pool: Pool) -> frozenset[int]:
        return frozenset(cpu for core in self.pools[pool] for cpu in core.cpus)

    @property
    def all_cores(self) -> tuple[Core, ...]:
        """Every online core the planner saw, in a pool or not, ordered by first CPU."""
        cores = {core for pool in self.pools.values() for core in pool}
        cores.update(self.partially_isolated, self.unused_isolated)
        return tuple(sorted(cores, key=lambda core: core.first))

    def advertised(self, pool: Pool) -> int:
        """How many devices the pool's plugin advertises (0: the pool is not served)."""
        cores = self.pools[pool]
        if not cores:
            return 0
        if pool in CORE_POOLS:
            return len(cores)
        return self.slots.get(pool, DEFAULT_SLOTS) * len(self.slot_groups(pool))


def _cores_text(cores: Iterable[Core]) -> str:
    return " ".join(str(core) for core in cores)


def _node_key(core: Core) -> tuple[int, int]:
    return (
        core.node if core.node is not None else -1,
        core.package if core.package is not None else -1,
    )


def _order(cores: Sequence[Core], mode: Mode) -> list[Core]:
    """Order equally ranked cores: packed fills a node/socket first, spread round-robins."""
    packed = sorted(cores, key=lambda core: (_node_key(core), core.first))
    if mode is Mode.PACKED:
        return packed
    groups = [list(group) for _, group in groupby(packed, key=_node_key)]
    return [core for turn in zip_longest(*groups) for core in turn if core is not None]


def _differs(values: Iterable[object]) -> bool:
    return len({value for value in values if value is not None}) > 1


def _rank_key(sst_cp: bool, sst_bf: bool) -> RankKey:
    def key(core: Core) -> tuple[int, int]:
        epp = EPP_RANK.get(core.energy_performance_preference or "", len(EPP_RANK)) if sst_cp else 0
        freq = -(core.base_frequency or 0) if sst_bf else 0
        return (epp, freq)

    return key


def _ranked(cores: Sequence[Core], mode: Mode, key: RankKey) -> list[Core]:
    """Best-ranked tier first; inside each tier, the mode's order."""
    ranked: list[Core] = []
    for _, tier in groupby(sorted(cores, key=key), key=key):
        ranked.extend(_order(list(tier), mode))
    return ranked


_NON_ISOL = ("excl_non_isolcpus",)


def _named_cores(topology: Topology, cpus: frozenset[int]) -> list[Core]:
    """The cores holding the CPUs named by the excl-non-isolcpus setting, each named CPU checked."""
    known = format_cpu_list(topology.cpus) or "none"
    cores: list[Core] = []
    for cpu in sorted(cpus):
        if cpu not in topology.cpus:
            raise PlanError(f"{{}} names CPU {cpu}, which does not exist (CPUs: {known})", settings=_NON_ISOL)
        if cpu not in topology.online:
            raise PlanError(f"{{}} names CPU {cpu}, which is offline", settings=_NON_ISOL)
        core = topology.core_of(cpu)
        assert core is not None  # every online CPU belongs to a core
        isolated = core.cpus & topology.isolated
        if isolated:
            raise PlanError(
                f"{{}} names CPU {cpu}, whose core {core} is isolated "
                f"(isolated CPUs {format_cpu_list(isolated)} belong to exclusive/shared); "
                "name non-isolated CPUs", settings=_NON_ISOL
            )
        if core not in cores:
            cores.append(core)
    return cores


def _sizes(options: PlanOptions, available: int, limit: Callable[[], str]) -> tuple[int, int]:
    """Exclusive and shared core counts: explicit sizes must fit, defaults take what is left.

    ``limit()`` says why no more fit, for the error alone: it names every core (4,096 formatted
    on 8,192 CPUs, a sixth of planning), so a plan that fits never builds it.
    """
    want_excl, want_shared = options.num_exclusive_cores, options.num_shared_cores
    asked = [f"{n} {pool}" for n, pool in ((want_excl, "exclusive"), (want_shared, "shared")) if n is not None]
    if sum(n or 0 for n in (want_excl, want_shared)) > available:
        raise PlanError(f"asked for {' + '.join(asked)} cores, but {limit()}: ask for fewer")
    if want_shared is None:
        left = available - (want_excl or 0)
        if want_excl is None and left <= DEFAULT_SHARED_CORES:
            want_shared = 0  # too few cores to share: they serve exclusive
        else:
            want_shared = min(DEFAULT_SHARED_CORES, left)
    if want_excl is None:
        want_excl = available - want_shared
    return want_excl, want_shared


@dataclass(frozen=True)
class _Carved:
    """What one of the two carvings gives: the isolated pools, infra, isolated cores left over, its notes."""

    exclusive: list[Core]
    shared: list[Core]
    infra: list[Core]
    unused: list[Core]
    notes: list[str]


def _take(candidates: Sequence[Core], n_excl: int, n_shared: int, options: PlanOptions,
          key: RankKey) -> tuple[list[Core], list[Core], list[Core]]:
    """Exclusive takes its best-ranked ``n_excl``, shared the best ``n_shared`` of the rest; and what is left."""
    # Membership by set, not by list: a list test compares dataclasses field by field, and on
    # 8,192 CPUs that was 8 million comparisons (1.3 s) per plan.
    exclusive = _ranked(candidates, options.exclusive_mode, key)[:n_excl]
    taken = set(exclusive)
    rest = [core for core in candidates if core not in taken]
    shared = _ranked(rest, options.shared_mode, key)[:n_shared]
    taken.update(shared)
    return exclusive, shared, [core for core in rest if core not in taken]


def _isolcpus_plan(whole: list[Core], free: list[Core], options: PlanOptions, key: RankKey) -> _Carved:
    """Exclusive and shared from the wholly isolated cores, infra from the rest; isolated cores left over are noted."""
    n_excl, n_shared = _sizes(options, len(whole),
                              lambda: f"only {len(whole)} whole cores are isolated ({_cores_text(whole) or 'none'})")
    exclusive, shared, unused = _take(whole, n_excl, n_shared, options, key)
    notes = [(f"isolated cores {_cores_text(unused)} are in no pool: raise "
             "num-exclusive-cores or num-shared-cores to use them")] if unused else []
    return _Carved(exclusive, shared, free, unused, notes)


def _fallback_plan(free: list[Core], options: PlanOptions, key: RankKey) -> _Carved:
    """CMK's fallback with nothing isolated: every pool from all cores, infra keeping the lowest CPU's core."""
    housekeeping = min(free, key=lambda core: core.first) if free else None
    candidates = [core for core in free if core is not housekeeping]
    limit = (
        f"no CPU is isolated and infra must keep one of the {len(free)} cores, "
        f"leaving {len(candidates)} (CMK's fallback; boot with isolcpus= for more)"
    )
    n_excl, n_shared = _sizes(options, len(candidates), lambda: limit)
    if options.num_exclusive_cores is None:
        n_excl = min(n_excl, DEFAULT_EXCLUSIVE_CORES)
    notes = [("no isolated CPUs: pools are carved from all cores (CMK's fallback); "
             "boot with isolcpus= to keep the kernel's scheduler off exclusive cores")]
    exclusive, shared, _ = _take(candidates, n_excl, n_shared, options, key)
    taken = set(exclusive) | set(shared)
    infra = sorted([core for core in free if core not in taken], key=lambda core: core.first)
    return _Carved(exclusive, shared, infra, [], notes)


def plan_pools(topology: Topology, options: PlanOptions = PlanOptions()) -> PoolPlan:
    """Carve the pools; raise PlanError when the (checked) options cannot be met on this topology."""
    cores = topology.cores
    if not cores:
        raise PlanError("no online CPUs found: check {}", settings=("sysfs_root",))
    isolated = topology.isolated & topology.online
    partial = [core for core in cores if core.cpus & isolated and not core.cpus <= isolated]
    non_isol = _named_cores(topology, options.excl_non_isolcpus)
    named = set(non_isol)
    free = [core for core in cores if not core.cpus & isolated and core not in named]

    sst_cp = _differs(core.energy_performance_preference for core in cores)
    sst_bf = _differs(core.base_frequency for core in cores)
    key = _rank_key(sst_cp, sst_bf)
    if isolated:
        carved = _isolcpus_plan([core for core in cores if core.cpus <= isolated], free, options, key)
    else:
        carved = _fallback_plan(free, options, key)
    if non_isol and not carved.infra:
        raise PlanError("{} takes every non-isolated core; leave at least one core for infra", settings=_NON_ISOL)
    notes = list(carved.notes)
    if partial:
        notes.append(
            f"partly isolated cores {_cores_text(partial)} are in no pool: "
            "isolate all threads of a core, or none"
        )

    return PoolPlan(
        pools={
            Pool.EXCLUSIVE: tuple(carved.exclusive),
            Pool.EXCLUSIVE_NON_ISOLCPUS: tuple(sorted(non_isol, key=lambda core: core.first)),
            Pool.SHARED: tuple(carved.shared),
            Pool.INFRA: tuple(carved.infra),
        },
        isolated_mode=bool(isolated),
        sst_bf=sst_bf,
        sst_cp=sst_cp,
        partially_isolated=tuple(partial),
        unused_isolated=tuple(carved.unused),
        notes=tuple(notes),
        slots={Pool.SHARED: options.shared_slots, Pool.INFRA: options.infra_slots},
        slot_scope=options.slot_scope,
    )
