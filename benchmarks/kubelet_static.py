"""The kubelet's static CPU manager policy, reimplemented for the placement benchmark.

Read from the kubelet's own source, in copies of Kubernetes master that
carry the uncore-cache option (esotsal/kubernetes, openshift/kubernetes;
the function names are kept so each step can be checked against them):

- ``pkg/kubelet/cm/cpumanager/cpu_assignment.go``: ``cpuAccumulator``,
  ``takeByTopologyNUMAPacked`` with its steps ``takeFullFirstLevel`` /
  ``takeFullSecondLevel`` (``numaFirst`` when sockets >= NUMA nodes, else
  ``socketsFirst``), ``takeUncoreCache`` (``takeFullUncore`` then
  ``takePartialUncore``, only with ``prefer-align-cpus-by-uncorecache``),
  ``takeFullCores`` and ``takeRemainingCPUs``; ``sort`` orders ids by free
  CPUs ascending, then id.
- ``pkg/kubelet/cm/cpumanager/topology/topology.go``: ``CPUDetails``
  (``CoresNeededInUncoreCache`` takes the lowest core ids),
  ``CPUsPerSocket``/``CPUsPerUncore`` (integer averages), and the uncore id
  of a core without an L3 falling back to its socket (``getUncoreCacheID``).
- ``pkg/kubelet/cm/cpumanager/policy_static.go``: ``allocateCPUs`` takes
  from the Topology Manager's NUMA affinity first, then the rest;
  ``generateCPUTopologyHints`` marks the masks of the narrowest size that
  could hold the request (counting all CPUs) as preferred.
- ``pkg/kubelet/cm/topologymanager/policy.go``: ``HintMerger.compare`` and
  ``NUMAInfo.Narrowest`` pick the best hint (preferred first, then fewer
  nodes, then lower-numbered nodes; among non-preferred hints the count
  closest to ``BestNonPreferredAffinityCount``). With the CPU manager as
  the only hint provider this is the hint that ``best-effort`` admits with.
  The Topology Manager refuses machines with more than 8 NUMA nodes unless
  ``max-allowable-numa-nodes`` is raised (``topology_manager.go``).

The model works on hardware threads as the kubelet does; a container asks
for whole exclusive cores as a device plugin's does, so a request of n cores
is n times ``CPUsPerCore`` CPUs (what ``full-pcpus-only`` admits), and the
answer is the cores whose threads the kubelet took. ``tests/unit/
test_kubelet_static.py`` replays cases of the kubelet's own
``cpu_assignment_test.go`` against it.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from deviceplugin.model.topology import Core

MAX_TOPOLOGY_MANAGER_NODES = 8  # topologymanager: defaultMaxAllowableNUMANodes


class Unsupported(Exception):
    """The kubelet cannot place exclusive CPUs on this machine (the message says why)."""


@dataclass(frozen=True)
class CpuInfo:
    """``topology.CPUInfo``: where one CPU (here: one core) sits."""

    numa: int
    socket: int
    core: int
    uncore: int


class CpuTopology:
    """``topology.CPUTopology``: the counts and the per-CPU details of the whole machine."""

    def __init__(self, details: Mapping[int, CpuInfo], *, sockets: int, cores: int, uncore_caches: int) -> None:
        self.details = dict(details)
        self.num_cpus = len(self.details)
        self.num_sockets = sockets
        self.num_cores = cores
        self.num_numa = len({info.numa for info in self.details.values()})
        self.num_uncore = uncore_caches
        self.cpus_per_core = self.num_cpus // cores if cores else 0
        self.cpus_per_socket = self.num_cpus // sockets if sockets else 0
        self.cpus_per_uncore = self.num_cpus // uncore_caches if uncore_caches else 0
        self.numa_first = self.num_sockets >= self.num_numa
        self._members: dict[str, dict[int, frozenset[int]]] = {}
        for attr in ("numa", "socket", "core", "uncore"):
            groups: dict[int, set[int]] = {}
            for cpu, info in self.details.items():
                groups.setdefault(getattr(info, attr), set()).add(cpu)
            self._members[attr] = {key: frozenset(cpus) for key, cpus in groups.items()}

    @classmethod
    def of(cls, cores: Iterable[Core]) -> CpuTopology:
        """``topology.Discover``: a core's id is its lowest CPU (``getUniqueCoreID``)."""
        details = {}
        for core in cores:
            socket = core.package if core.package is not None else -1
            uncore = min(core.l3) if core.l3 else -2 - socket  # getUncoreCacheID: no L3 -> the socket
            numa = core.node if core.node is not None else -1
            for cpu in core.cpus:
                details[cpu] = CpuInfo(numa=numa, socket=socket, core=core.first, uncore=uncore)
        infos = details.values()
        return cls(details, sockets=len({i.socket for i in infos}), cores=len({i.core for i in infos}),
                   uncore_caches=len({i.uncore for i in infos}))

    def cpus_in(self, attr: str, key: int) -> frozenset[int]:
        """``CPUDetails.CPUsInNUMANodes`` and its siblings, over the whole machine."""
        return self._members[attr].get(key, frozenset())


class _Accumulator:
    """``cpuAccumulator``: the free CPUs still to choose from and the CPUs taken so far."""

    def __init__(self, topo: CpuTopology, available: Iterable[int], needed: int) -> None:
        self.topo = topo
        self.free = set(available) & topo.details.keys()
        self.needed = needed
        self.result: set[int] = set()

    # ---- CPUDetails over the free CPUs ----------------------------------------------------------
    def _free_count(self, attr: str) -> Counter[int]:
        return Counter(getattr(self.topo.details[cpu], attr) for cpu in self.free)

    def _sorted(self, attr: str, keys: Iterable[int]) -> list[int]:
        """``cpuAccumulator.sort``: fewest free CPUs first, then the lowest id."""
        free = self._free_count(attr)
        return sorted(keys, key=lambda key: (free[key], key))

    def _nested(self, outer: list[int], outer_attr: str, attr: str) -> list[int]:
        """Each outer group in turn, its ``attr`` ids sorted (``SocketsInNUMANodes`` and the like)."""
        inner: dict[int, set[int]] = {}
        for cpu in self.free:
            info = self.topo.details[cpu]
            inner.setdefault(getattr(info, outer_attr), set()).add(getattr(info, attr))
        return [key for group in outer for key in self._sorted(attr, inner.get(group, ()))]

    def sort_numa_nodes(self) -> list[int]:
        if self.topo.numa_first:
            return self._sorted("numa", self._free_count("numa"))
        return self._nested(self.sort_sockets(), "socket", "numa")

    def sort_sockets(self) -> list[int]:
        if self.topo.numa_first:
            return self._nested(self.sort_numa_nodes(), "numa", "socket")
        return self._sorted("socket", self._free_count("socket"))

    def sort_cores(self) -> list[int]:
        if self.topo.numa_first:
            return self._nested(self.sort_sockets(), "socket", "core")
        return self._nested(self.sort_numa_nodes(), "numa", "core")

    def sort_uncore_caches(self) -> list[int]:
        return self._nested(self.sort_numa_nodes(), "numa", "uncore")

    def sort_cpus_packed(self) -> list[int]:
        return [cpu for core in self.sort_cores() for cpu in sorted(self.free & self.topo.cpus_in("core", core))]

    # ---- taking ---------------------------------------------------------------------------------
    def take(self, cpus: Iterable[int]) -> None:
        taken = set(cpus)
        self.result |= taken
        self.free -= taken
        self.needed -= len(taken)

    def satisfied(self) -> bool:
        return self.needed < 1

    def _is_whole(self, attr: str, key: int, size: int | None = None) -> bool:
        whole = self.topo.cpus_in(attr, key)
        return len(self.free & whole) == (len(whole) if size is None else size)

    def _take_whole(self, attr: str, keys: list[int], size: int | None = None) -> None:
        """``takeFullNUMANodes``/``takeFullSockets``/``takeFullUncore``/``takeFullCores``."""
        for key in [key for key in keys if self._is_whole(attr, key, size)]:
            cpus = self.topo.cpus_in(attr, key)
            if self.needed >= len(cpus):  # needsAtLeast
                self.take(cpus)

    def take_full_numa_nodes(self) -> None:
        self._take_whole("numa", self.sort_numa_nodes())

    def take_full_sockets(self) -> None:
        self._take_whole("socket", self.sort_sockets(), self.topo.cpus_per_socket)

    def take_partial_uncore(self, uncore: int) -> None:
        cores_needed = -(-self.needed // self.topo.cpus_per_core)
        cores = sorted({self.topo.details[c].core for c in self.free if self.topo.details[c].uncore == uncore})
        cpus = sorted(c for c in self.free if self.topo.details[c].core in cores[:cores_needed])
        if self.needed % 2 and self.topo.cpus_per_core > 1 and len(cpus) > self.needed:
            cpus = cpus[:-1]  # an odd request takes one thread of the last core
        if self.needed == len(cpus):
            self.take(cpus)

    def take_uncore_cache(self) -> None:
        for uncore in self.sort_uncore_caches():
            if self.needed >= self.topo.cpus_per_uncore:
                self._take_whole("uncore", self.sort_uncore_caches())
            if self.satisfied():
                return
            self.take_partial_uncore(uncore)
            if self.satisfied():
                return

    def take_full_cores(self) -> None:
        self._take_whole("core", self.sort_cores(), self.topo.cpus_per_core)

    def take_remaining_cpus(self) -> None:
        for cpu in self.sort_cpus_packed():
            self.take({cpu})
            if self.satisfied():
                return


def take_by_topology_numa_packed(topo: CpuTopology, available: Iterable[int], count: int,
                                 prefer_align_by_uncore_cache: bool) -> set[int]:
    """``takeByTopologyNUMAPacked`` with the packed CPU sorting strategy (the default)."""
    acc = _Accumulator(topo, available, count)
    if acc.satisfied():
        return acc.result
    if acc.needed > len(acc.free):
        raise ValueError(f"not enough cpus available to satisfy request: requested={count}, available={len(acc.free)}")
    steps: list[Callable[[], None]] = (
        [acc.take_full_numa_nodes, acc.take_full_sockets] if topo.numa_first
        else [acc.take_full_sockets, acc.take_full_numa_nodes]
    )
    if prefer_align_by_uncore_cache:
        steps.append(acc.take_uncore_cache)
    steps += [acc.take_full_cores, acc.take_remaining_cpus]
    for step in steps:
        step()
        if acc.satisfied():
            return acc.result
    raise ValueError("failed to allocate cpus")


def best_hint(topo: CpuTopology, available: Iterable[int], request: int) -> frozenset[int]:
    """The NUMA affinity the Topology Manager (``best-effort``) admits a container with.

    ``generateCPUTopologyHints`` over every mask of NUMA nodes, then
    ``HintMerger.compare``. Raises Unsupported on machines the Topology Manager refuses.
    """
    nodes = sorted({info.numa for info in topo.details.values()})
    if len(nodes) > MAX_TOPOLOGY_MANAGER_NODES:
        raise Unsupported(f"the Topology Manager refuses {len(nodes)} NUMA nodes (at most 8)")
    rank = {node: index for index, node in enumerate(nodes)}  # bit order: lower node ids are lower bits
    free = Counter(topo.details[cpu].numa for cpu in set(available) & topo.details.keys())
    total = {node: len(topo.cpus_in("numa", node)) for node in nodes}
    min_affinity = len(nodes)
    hints: list[tuple[frozenset[int], bool]] = []
    for size in range(1, len(nodes) + 1):  # bitmask.IterateBitMasks: by count, then combination order
        for mask in itertools.combinations(nodes, size):
            if sum(total[n] for n in mask) >= request and size < min_affinity:
                min_affinity = size
            if sum(free[n] for n in mask) >= request:
                hints.append((frozenset(mask), False))
    hints = [(mask, len(mask) == min_affinity) for mask, _ in hints]
    if not hints:
        return frozenset(nodes)

    def value(mask: frozenset[int]) -> int:
        return sum(1 << rank[node] for node in mask)

    def narrowest(current: frozenset[int], candidate: frozenset[int]) -> frozenset[int]:
        if candidate == current:
            return current
        narrower = (len(current), value(current)) < (len(candidate), value(candidate))  # IsNarrowerThan
        return current if narrower else candidate

    best_non_preferred = min(len(mask) for mask, _ in hints)  # maxOfMinAffinityCounts, one provider
    best: tuple[frozenset[int], bool] | None = None
    for candidate in hints:
        best = candidate if best is None else _compare(best, candidate, best_non_preferred, narrowest)
    assert best is not None
    return best[0]


def _compare(current: tuple[frozenset[int], bool], candidate: tuple[frozenset[int], bool], best_count: int,
             narrowest: Callable[[frozenset[int], frozenset[int]], frozenset[int]]) -> tuple[frozenset[int], bool]:
    """``HintMerger.compare`` for two hints of the one provider."""
    (cur, cur_pref), (cand, cand_pref) = current, candidate
    if cur_pref != cand_pref:
        return candidate if cand_pref else current
    if cur_pref or len(cur) > best_count:
        return current if narrowest(cur, cand) == cur else candidate
    if len(cur) == best_count:
        if len(cand) != best_count:
            return current
        return current if narrowest(cur, cand) == cur else candidate
    if len(cand) > best_count:
        return current
    if len(cand) == best_count or len(cand) > len(cur):
        return candidate
    if len(cand) < len(cur):
        return current
    return current if narrowest(cur, cand) == cur else candidate


def allocate_cpus(topo: CpuTopology, available: Iterable[int], count: int, affinity: frozenset[int] | None,
                  prefer_align_by_uncore_cache: bool = False) -> set[int]:
    """``staticPolicy.allocateCPUs``: the CPUs of the NUMA affinity first, then any others."""
    allocatable = set(available)
    result: set[int] = set()
    if affinity is not None:
        aligned = {cpu for cpu in allocatable if topo.details[cpu].numa in affinity}
        result = take_by_topology_numa_packed(topo, aligned, min(count, len(aligned)), prefer_align_by_uncore_cache)
    rest = take_by_topology_numa_packed(topo, allocatable - result, count - len(result), prefer_align_by_uncore_cache)
    return result | rest


def kubelet_choice(cores: Mapping[str, Core], topo: CpuTopology, free: Iterable[str], size: int, *,
                   topology_manager: bool, uncore: bool) -> list[str]:
    """The cores the kubelet would pin for a container of ``size`` exclusive cores.

    Raises Unsupported where the kubelet cannot run its policy, or would
    hand out a busy CPU: ``isSocketFree`` compares with ``CPUsPerSocket``, an
    average, so on sockets of different sizes (a cgroup-limited dump) a
    socket with that many free CPUs counts as free and is taken whole.
    """
    device_of = {cpu: device for device in free for cpu in cores[device].cpus}
    count = size * topo.cpus_per_core
    affinity = best_hint(topo, device_of, count) if topology_manager else None
    chosen = allocate_cpus(topo, device_of, count, affinity, uncore)
    busy = sorted(chosen - device_of.keys())
    if busy:
        raise Unsupported(f"takes busy CPU {busy[0]}: sockets differ in size, CPUsPerSocket is an average")
    answer = sorted({device_of[cpu] for cpu in chosen})
    if any(not cores[device].cpus <= chosen for device in answer):
        raise Unsupported("splits a core: cores differ in their number of threads")
    return answer
