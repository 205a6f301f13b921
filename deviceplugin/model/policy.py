"""GetPreferredAllocation for the core pools: which free cores a container should get.

A pure function of (cores, available, must_include, size), like NVIDIA's
allocator, so the gRPC server only converts protobuf and the kubelet
stand-in, the tests and the placement benchmark call the very same code.

Why it works this way: ``docs/preferred-allocation.md``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence

from deviceplugin.model.shown import named_ids
from deviceplugin.model.topology import Core

#: Free devices per group key (NUMA node id, L3 group's first CPU).
Spare = Mapping[int, int]
#: A group's key at one scope: the NUMA node and L3 group, or one of them.
Scope = Callable[[Core], tuple[int, ...]]
#: Picks the group to take from next, or None to let the next strategy decide.
Strategy = Callable[[Spare, int, frozenset[int]], int | None]


def _best_fit(spare: Spare, need: int, used: frozenset[int]) -> int | None:
    fitting = [group for group, free in spare.items() if free >= need]
    return min(fitting, key=lambda group: (spare[group], group), default=None)


def _largest_first(spare: Spare, need: int, used: frozenset[int]) -> int | None:
    return min(spare, key=lambda group: (-spare[group], group), default=None)


def _already_used(spare: Spare, need: int, used: frozenset[int]) -> int | None:
    mine = {group: free for group, free in spare.items() if group in used}
    fit = _best_fit(mine, need, used)
    return fit if fit is not None else _largest_first(mine, need, used)


STRATEGIES: tuple[tuple[str, Strategy], ...] = (
    ("already-used", _already_used),
    ("best-fit", _best_fit),
    ("largest-first", _largest_first),
)


def _node_key(core: Core) -> int:
    return core.node if core.node is not None else -1


def _l3_key(core: Core) -> int:
    return min(core.l3) if core.l3 else -1


def _cell_key(core: Core) -> tuple[int, ...]:
    return _node_key(core), _l3_key(core)


def _node_only(core: Core) -> tuple[int, ...]:
    return (_node_key(core),)


def _l3_only(core: Core) -> tuple[int, ...]:
    return (_l3_key(core),)


#: Outermost first: one NUMA node matters more than one L3 group.
LEVELS: tuple[tuple[str, Callable[[Core], int]], ...] = (("numa-node", _node_key), ("l3-cache", _l3_key))

#: Narrowest first: the kinds of group one of which should hold a whole request, each with the
#: enclosing level whose free devices rank its candidates first (fewest first).
SCOPES: tuple[tuple[str, Scope, tuple[Callable[[Core], int], ...]], ...] = (
    ("numa-node and l3-cache", _cell_key, (_node_key,)),
    ("numa-node", _node_only, ()),
    ("l3-cache", _l3_only, ()),
)


def _next_group(spare: Spare, need: int, used: frozenset[int]) -> int:
    for _, strategy in STRATEGIES:
        group = strategy(spare, need, used)
        if group is not None:
            return group
    raise AssertionError("largest-first always answers while a group has free devices")


def _split(spare: Spare, need: int, used: Iterable[int]) -> dict[int, int]:
    """How many devices to take from each group: the one greedy loop every strategy shares."""
    left, chosen, take = dict(spare), frozenset(used), {}
    while need > 0 and left:
        group = _next_group(left, need, chosen)
        take[group] = min(left.pop(group), need)
        need -= take[group]
        chosen |= {group}
    return take


def _choose(cores: Mapping[str, Core], free: Iterable[str], required: frozenset[str], count: int,
            levels: Sequence[tuple[str, Callable[[Core], int]]]) -> list[str]:
    if not levels:
        spare = sorted(set(free) - required, key=lambda i: (cores[i].first, i))
        return sorted(required) + spare[: count - len(required)]
    _, key = levels[0]
    groups: dict[int, list[str]] = {}
    for device in free:
        groups.setdefault(key(cores[device]), []).append(device)
    holding = {group: len(required.intersection(members)) for group, members in groups.items()}
    spare_in = {group: len(members) - holding[group] for group, members in groups.items()}
    extra = _split(spare_in, count - len(required), (g for g, n in holding.items() if n))
    chosen: list[str] = []
    for group, members in groups.items():
        if holding[group] or extra.get(group):
            mine = required.intersection(members)
            chosen += _choose(cores, members, mine, len(mine) + extra.get(group, 0), levels[1:])
    return chosen


def _nodes_needed(cores: Mapping[str, Core], free: Collection[str], required: frozenset[str], count: int) -> int:
    """The fewest NUMA nodes that hold ``count`` of ``free`` with every required device (largest first)."""
    per_node = Counter(_node_key(cores[device]) for device in free)
    mandatory = {_node_key(cores[device]) for device in required}
    rest = count - sum(per_node[node] for node in mandatory)
    others = sorted((n for node, n in per_node.items() if node not in mandatory), reverse=True)
    needed = len(mandatory)
    for spare in others:
        if rest <= 0:
            break
        rest -= spare
        needed += 1
    return needed


def _best_holding(cores: Mapping[str, Core], free: Collection[str], required: frozenset[str], count: int,
                  key: Scope, outer: Sequence[Callable[[Core], int]], fewest: int) -> set[str] | None:
    """The free devices of the best-fit group of one scope that holds the request, or None."""
    groups: dict[tuple[int, ...], set[str]] = {}
    for device in free:
        groups.setdefault(key(cores[device]), set()).add(device)
    spare = [Counter(level(cores[device]) for device in free) for level in outer]

    def rank(group: tuple[int, ...]) -> tuple[int, ...]:
        core = cores[next(iter(groups[group]))]
        return (*(counts[level(core)] for counts, level in zip(spare, outer)), len(groups[group]), *group)

    holding = [group for group, members in groups.items() if len(members) >= count and required <= members
               and _nodes_needed(cores, members, required, count) <= fewest]
    return groups[min(holding, key=rank)] if holding else None


def _one_group(cores: Mapping[str, Core], free: Collection[str], required: frozenset[str],
               count: int) -> Collection[str]:
    """The free devices of the narrowest scope's best-fit group that holds the request; else all of ``free``."""
    fewest = _nodes_needed(cores, free, required, count)
    for _, key, outer in SCOPES:
        members = _best_holding(cores, free, required, count, key, outer, fewest)
        if members is not None:
            return members
    return free


def preferred_allocation(cores: Mapping[str, Core], available: Sequence[str], must_include: Sequence[str],
                         size: int) -> list[str]:
    """The devices a container should get, ordered by first CPU.

    ``available`` IDs unknown to ``cores`` are ignored, as the kubelet ignores
    unknown IDs in the answer; duplicates count once. With fewer known
    available devices than ``size`` the answer holds all of them — the
    kubelet fills the shortfall itself — so it never raises for that.

    Raises ValueError (the server's INVALID_ARGUMENT) when the request
    itself is impossible: a negative size, ``must_include`` IDs that are
    unknown or not available, or more of them than ``size``.
    """
    if size < 0:
        raise ValueError(f"allocation size {size} is negative; ask for 0 or more devices")
    required = frozenset(must_include)
    unknown = required - cores.keys()
    if unknown:
        raise ValueError(f"must_include devices {named_ids(unknown)} are not devices of this pool")
    missing = required - set(available)
    if missing:
        raise ValueError(f"must_include devices {named_ids(missing)} are not in available_deviceIDs; "
                         "the kubelet lists reused devices as available too")
    if len(required) > size:
        raise ValueError(f"{len(required)} must_include devices exceed allocation size {size}; "
                         "the size counts the reused devices too")
    free = {device for device in available if device in cores}
    count = min(size, len(free))
    chosen = _choose(cores, _one_group(cores, free, required, count), required, count, LEVELS)
    return sorted(chosen, key=lambda device: (cores[device].first, device))


def numa_nodes_of(devices: Iterable[str], cores: Mapping[str, Core]) -> frozenset[int]:
    """The NUMA nodes a set of devices touches (unknown IDs and node-less cores add none)."""
    return frozenset(node for d in devices if d in cores and (node := cores[d].node) is not None)
