"""GetPreferredAllocation for the core pools: which free cores a container should get.

A pure function of (cores, available, must_include, size), like NVIDIA's
allocator, so the gRPC server only converts protobuf and the kubelet
stand-in, the tests and the placement benchmark call the very same code.
What does not change between calls (each core's NUMA node and L3 group,
the order of cores) is a :class:`CoreIndex` the server builds once per
snapshot, so a call costs the free devices it is given and the groups it
looks at, not the machine.

Why it works this way: ``docs/design/preferred-allocation.md``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter

from deviceplugin.model.shown import named_ids
from deviceplugin.model.topology import Core

#: Free devices per group key (NUMA node id, L3 group's first CPU).
Spare = Mapping[int, int]
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


#: A cell: one NUMA node's share of one L3 group, (node key, L3 key); every group below is made of cells.
Cell = tuple[int, int]

#: Narrowest first: the kinds of group one of which should hold a whole request, each with its key of a
#: cell and whether the enclosing NUMA node's free devices rank its candidates first (fewest first).
SCOPES: tuple[tuple[str, Callable[[Cell], tuple[int, ...]], bool], ...] = (
    ("numa-node and l3-cache", lambda cell: cell, True),
    ("numa-node", lambda cell: cell[:1], False),
    ("l3-cache", lambda cell: cell[1:], False),
)

#: Outermost first, the levels a request is split over once no scope holds it (or inside the one that does).
LEVELS = ("numa-node", "l3-cache")


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


@dataclass(frozen=True)
class CoreIndex:
    """What the policy needs of a pool's cores, computed once per snapshot instead of once per call.

    The kubelet calls GetPreferredAllocation in the admission path of every
    pod, and a pool's cores only change with the plan: each device's cell
    (NUMA node and L3 group keys) and its rank in (first CPU, ID) order are
    fixed, so a call only counts the free devices per cell, works on those
    counts (a few per NUMA node), and walks the ordered members of the few
    cells it takes from. :func:`index_cores` builds it; :func:`prefer` uses it.
    """

    #: device ID -> (its cell, its rank in (first CPU, ID) order)
    place: Mapping[str, tuple[Cell, int]]
    #: cell -> its devices in rank order
    members: Mapping[Cell, tuple[str, ...]]


def index_cores(cores: Mapping[str, Core]) -> CoreIndex:
    """The :class:`CoreIndex` of a pool's cores (device ID -> core)."""
    ordered = sorted(cores, key=lambda device: (cores[device].first, device))
    place: dict[str, tuple[Cell, int]] = {}
    members: dict[Cell, list[str]] = {}
    # An L3's key is its lowest CPU, taken once per L3 set (discovery gives a group's cores one set), not per core
    l3_keys: dict[frozenset[int] | None, int] = {l3: min(l3) for l3 in {core.l3 for core in cores.values()} if l3}
    for rank, device in enumerate(ordered):
        cell = (_node_key(cores[device]), l3_keys.get(cores[device].l3, -1))
        place[device] = (cell, rank)
        members.setdefault(cell, []).append(device)
    # Plain dicts behind the read-only Mapping type: a MappingProxyType nearly doubles the cost of the
    # C-level lookups a call makes for each of the (up to 4,000) devices the kubelet lists as available
    return CoreIndex(place, {c: tuple(m) for c, m in members.items()})


def _fewest_nodes(per_node: Mapping[int, int], mandatory: Collection[int], count: int) -> int:
    """The fewest NUMA nodes whose free devices (``per_node``) hold ``count`` with every ``mandatory`` node."""
    rest = count - sum(per_node.get(node, 0) for node in mandatory)
    needed = len(mandatory)
    for spare in sorted((n for node, n in per_node.items() if node not in mandatory), reverse=True):
        if rest <= 0:
            break
        rest -= spare
        needed += 1
    return needed


class _Free:
    """One call's free devices counted per cell (and per node and L3 group), with the required ones among them."""

    def __init__(self, cells: Mapping[Cell, int], required: Mapping[Cell, int]) -> None:
        self.cells, self.required = cells, required
        self.nodes: Counter[int] = Counter()
        self.l3: Counter[int] = Counter()
        for (node, l3), n in self.cells.items():
            self.nodes[node] += n
            self.l3[l3] += n

    def per_node(self, cells: Iterable[Cell]) -> dict[int, int]:
        counts: dict[int, int] = {}
        for cell in cells:
            counts[cell[0]] = counts.get(cell[0], 0) + self.cells[cell]
        return counts

    def only(self, cells: Iterable[Cell]) -> _Free:
        """The same counts, of ``cells`` alone."""
        kept = {cell: self.cells[cell] for cell in cells}
        return _Free(kept, {cell: n for cell, n in self.required.items() if cell in kept})


def _holding_cells(free: _Free, required: int, count: int) -> list[Cell] | None:
    """The cells of the narrowest scope's best-fit group that holds the request; None: no group does.

    Scopes narrowest first (:data:`SCOPES`): a cell, a NUMA node, an L3 group;
    a group holds the request when its free devices number ``count``, include
    every required one and need no more NUMA nodes than the request needs
    anyway. Ranked by the enclosing node's free devices (cells only), then the
    group's, then its key: fewest first.
    """
    mandatory = {cell[0] for cell in free.required}
    fewest = _fewest_nodes(free.nodes, mandatory, count)
    for _, key, by_node in SCOPES:
        groups: dict[tuple[int, ...], list[Cell]] = {}
        for cell in free.cells:
            groups.setdefault(key(cell), []).append(cell)
        best: tuple[tuple[int, ...], list[Cell]] | None = None
        for group, cells in groups.items():
            size = sum(free.cells[cell] for cell in cells)
            if size < count or sum(free.required.get(cell, 0) for cell in cells) != required:
                continue
            inside = {cell[0] for cell in cells if free.required.get(cell)}
            if _fewest_nodes(free.per_node(cells), inside, count) > fewest:
                continue
            rank = ((free.nodes[cells[0][0]],) if by_node else ()) + (size, *group)
            if best is None or rank < best[0]:
                best = (rank, cells)
        if best is not None:
            return best[1]
    return None


def _take(index: CoreIndex, counts: _Free, free: Collection[str], required: frozenset[str], count: int) -> list[str]:
    """``count`` devices of the counted cells with every required one, split over :data:`LEVELS` by :func:`_split`.

    Within a cell, the lowest-ranked free devices (its members are in rank order, so the walk stops
    after the devices it takes and the busy ones before them).
    """
    by_node: dict[int, list[Cell]] = {}
    for cell in counts.cells:
        by_node.setdefault(cell[0], []).append(cell)
    holding = {node: sum(counts.required.get(c, 0) for c in node_cells) for node, node_cells in by_node.items()}
    spare = {node: counts.nodes[node] - holding[node] for node in by_node}
    extra = _split(spare, count - len(required), (node for node, n in holding.items() if n))
    chosen: list[str] = []
    for node, node_cells in by_node.items():
        if not (holding[node] or extra.get(node)):
            continue
        cell_of = {cell[1]: cell for cell in node_cells}
        mine = {l3: counts.required.get(cell, 0) for l3, cell in cell_of.items()}
        left = {l3: counts.cells[cell] - mine[l3] for l3, cell in cell_of.items()}
        more = _split(left, extra.get(node, 0), (l3 for l3, n in mine.items() if n))
        for l3, cell in cell_of.items():
            if not (mine[l3] or more.get(l3)):
                continue
            wanted = more.get(l3, 0)
            for device in index.members[cell]:
                if wanted <= 0:
                    break
                if device in free and device not in required:
                    chosen.append(device)
                    wanted -= 1
    return sorted(required) + chosen


def _free_per_cell(index: CoreIndex, free: set[str]) -> Counter[Cell]:
    """The free devices per cell (cells with none left out), counting whichever side of the pool is smaller.

    The kubelet lists every free device, most of the pool on a quiet node: then
    the busy ones, the pool less ``free`` (one C-level set difference), are
    fewer to count than the free ones.
    """
    if 2 * len(free) <= len(index.place):
        return Counter(_cells_of(index, free))
    per_cell = Counter({cell: len(members) for cell, members in index.members.items()})
    per_cell.subtract(_cells_of(index, index.place.keys() - free))
    return +per_cell


def _cells_of(index: CoreIndex, devices: Iterable[str]) -> Iterator[Cell]:
    """Each device's cell, in C (two maps), not a Python loop over thousands of devices."""
    return map(itemgetter(0), map(index.place.__getitem__, devices))


def prefer(index: CoreIndex, available: Sequence[str], must_include: Sequence[str], size: int) -> list[str]:
    """:func:`preferred_allocation` over a pool's precomputed :class:`CoreIndex`: what the servers call."""
    if size < 0:
        raise ValueError(f"allocation size {size} is negative; ask for 0 or more devices")
    place = index.place
    required = frozenset(must_include)
    unknown = required - place.keys()
    if unknown:
        raise ValueError(f"must_include devices {named_ids(unknown)} are not devices of this pool")
    free = set(filter(place.__contains__, available))
    missing = required - free
    if missing:
        raise ValueError(f"must_include devices {named_ids(missing)} are not in available_deviceIDs; "
                         "the kubelet lists reused devices as available too")
    if len(required) > size:
        raise ValueError(f"{len(required)} must_include devices exceed allocation size {size}; "
                         "the size counts the reused devices too")
    count = min(size, len(free))
    counts = _Free(_free_per_cell(index, free), Counter(_cells_of(index, required)))
    cells = _holding_cells(counts, len(required), count)
    chosen = _take(index, counts if cells is None else counts.only(cells), free, required, count)
    return sorted(chosen, key=lambda device: place[device][1])


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

    Builds the :class:`CoreIndex` each call; a server keeps one per snapshot and calls :func:`prefer`.
    """
    return prefer(index_cores(cores), available, must_include, size)


def numa_nodes_of(devices: Iterable[str], cores: Mapping[str, Core]) -> frozenset[int]:
    """The NUMA nodes a set of devices touches (unknown IDs and node-less cores add none)."""
    return frozenset(node for d in devices if d in cores and (node := cores[d].node) is not None)
