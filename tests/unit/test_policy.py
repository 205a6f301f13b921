"""Preferred allocation for core pools: one NUMA node and one L3 group while one has room, else fewest nodes."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping, Sequence
from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deviceplugin.host.sysfs import discover
from deviceplugin.model.policy import (
    STRATEGIES,
    _free_per_cell,
    index_cores,
    numa_nodes_of,
    preferred_allocation,
)
from deviceplugin.model.topology import Core, Topology, build_topology
from tests.support.topologies import FIXTURES


def devices(topology: Topology) -> dict[str, Core]:
    return {f"core{core.first}": core for core in topology.cores}


def grid(cores_per_node: Sequence[int], *, threads: int = 1, l3_size: int | None = None,
         l3_nodes: int | None = None) -> dict[str, Core]:
    """Node i holds cores_per_node[i] cores, numbered on; an L3 group is l3_size consecutive cores of one node,
    or (l3_nodes) all cores of that many consecutive nodes, as on memory-side-cache machines."""
    total = sum(cores_per_node)
    starts = [sum(cores_per_node[:node]) for node in range(len(cores_per_node) + 1)]
    cores, node_of, l3_of = [], {}, {}
    for node, count in enumerate(cores_per_node):
        ids = range(starts[node], starts[node] + count)
        for index, core in enumerate(ids):
            threads_of = [core + t * total for t in range(threads)]
            cores.append(threads_of)
            if l3_nodes:
                span = node // l3_nodes * l3_nodes
                group = range(starts[span], starts[min(span + l3_nodes, len(cores_per_node))])
            else:
                group = ids[(index // l3_size) * l3_size:][:l3_size] if l3_size else ids
            for cpu in threads_of:
                node_of[cpu] = node
                l3_of[cpu] = [c + t * total for c in group for t in range(threads)]
    with_l3 = l3_of if l3_size or l3_nodes else None
    return devices(build_topology(cores, node_of=node_of, package_of=node_of, l3_of=with_l3))


def layout(*groups: tuple[int, int, int, int]) -> tuple[dict[str, Core], list[str]]:
    """Cores numbered on, group by group: (NUMA node, L3 group, free cores, busy cores).

    An L3 group id may recur in several nodes (an L3 spanning them). Returns the cores and the free ones.
    """
    spec = [(node, l3, core) for node, l3, free, busy in groups for core in ["free"] * free + ["busy"] * busy]
    members: dict[int, list[int]] = {}
    for cpu, (_, l3, _) in enumerate(spec):
        members.setdefault(l3, []).append(cpu)
    cores = devices(build_topology(
        [[cpu] for cpu in range(len(spec))],
        node_of={cpu: node for cpu, (node, _, _) in enumerate(spec)},
        l3_of={cpu: members[l3] for cpu, (_, l3, _) in enumerate(spec)},
    ))
    return cores, [f"core{cpu}" for cpu, (_, _, state) in enumerate(spec) if state == "free"]


def l3_groups(answer: Sequence[str], cores: Mapping[str, Core]) -> set[frozenset[int] | None]:
    return {cores[device].l3 for device in answer}


def ids(*firsts: int) -> list[str]:
    return [f"core{first}" for first in firsts]


def free_except(cores: Mapping[str, Core], *used: int) -> list[str]:
    return [device for device in cores if cores[device].first not in used]


def nodes(answer: Sequence[str], cores: Mapping[str, Core]) -> set[int | None]:
    """The node groups an answer touches; cores in no node (None) form one group, as in the policy."""
    return {cores[device].node for device in answer}


def test_strategies_are_named_and_ordered():
    assert [name for name, _ in STRATEGIES] == ["already-used", "best-fit", "largest-first"]


# Node choice: best fit --------------------------------------------------------------------------


@pytest.mark.parametrize(("size", "node"), [(1, 1), (2, 1), (3, 2), (4, 0)])
def test_best_fit_takes_the_node_with_fewest_free_cores_that_fits(size, node):
    cores = grid([4, 4, 4])  # node0: 0-3, node1: 4-7, node2: 8-11
    available = free_except(cores, 4, 5, 8)  # free: node0 4, node1 2, node2 3
    answer = preferred_allocation(cores, available, [], size)
    assert len(answer) == size and nodes(answer, cores) == {node}


def test_best_fit_ties_go_to_the_lowest_node_id():
    cores = grid([4, 4, 4])
    available = free_except(cores, 0, 1, 8, 9)  # node0 and node2 have 2 free, node1 4
    assert preferred_allocation(cores, available, [], 2) == ids(2, 3)


def test_inside_the_node_the_lowest_first_cpus_are_taken():
    cores = grid([4, 4], threads=2)
    assert preferred_allocation(cores, list(cores), [], 3) == ids(0, 1, 2)


# L3 preference inside the chosen node ------------------------------------------------------------


@pytest.mark.parametrize(("size", "expected"), [
    (2, ids(4, 5)),             # the L3 group with 2 free is the best fit
    (3, ids(1, 2, 3)),          # the one with 3 free
    (4, ids(8, 9, 10, 11)),     # the one with 4 free
    (5, ids(4, 8, 9, 10, 11)),  # largest group whole, then the best fit for the last one
])
def test_l3_group_is_chosen_by_best_fit_inside_the_node(size, expected):
    cores = grid([12], l3_size=4)  # L3 groups 0-3, 4-7, 8-11
    available = free_except(cores, 0, 6, 7)  # free per group: 3, 2, 4
    assert preferred_allocation(cores, available, [], size) == expected


def test_one_node_outranks_one_l3_group():
    cores = grid([6, 4], l3_size=3)  # node0: L3 0-2, 3-5; node1: L3 6-8, 9
    available = free_except(cores, 0, 9)  # node0: 5 free (2 + 3), node1: 3 free in one L3 group
    # A 2-core request fits L3 {1,2} exactly, but node1 is the best-fit node.
    assert preferred_allocation(cores, available, [], 2) == ids(6, 7)


#: Each case split the request across L3 groups (or nodes) before this policy, though one group had room:
#: (groups as in layout(), size, NUMA nodes the answer must use).
REGRET_CASES = {
    "the best-fit node has no L3 group with room, the other node has": (
        [(0, 0, 3, 1), (0, 1, 3, 1), (1, 2, 4, 0), (1, 3, 4, 0)], 4, {1}),
    "three L3 groups per node, only the emptier node has one with room": (
        [(0, 0, 2, 2), (0, 1, 2, 2), (0, 2, 2, 2), (1, 3, 5, 0), (1, 4, 3, 2)], 5, {1}),
    "no node has room, but an L3 spanning two nodes has (memory-side cache)": (
        [(0, 0, 4, 0), (1, 0, 1, 3), (2, 1, 3, 1), (3, 1, 3, 1)], 6, {2, 3}),
    "the best-fit node's room is spread evenly over its L3 groups": (
        [(0, 0, 4, 4), (0, 1, 4, 4), (1, 2, 7, 1), (1, 3, 3, 5)], 5, {1}),
}


@pytest.mark.parametrize("case", sorted(REGRET_CASES))
def test_no_split_across_l3_groups_while_one_group_has_room(case):
    groups, size, expected_nodes = REGRET_CASES[case]
    cores, available = layout(*groups)
    answer = preferred_allocation(cores, available, [], size)
    assert len(answer) == size and len(l3_groups(answer, cores)) == 1
    assert nodes(answer, cores) == expected_nodes


def test_an_l3_group_that_costs_an_extra_numa_node_is_not_taken():
    # L3 0 spans nodes 0-2 with 2 free each (6); nodes 3 and 4 (own L3 groups) hold 6 in two nodes.
    cores, available = layout((0, 0, 2, 0), (1, 0, 2, 0), (2, 0, 2, 0), (3, 1, 4, 0), (4, 2, 3, 0))
    answer = preferred_allocation(cores, available, [], 6)
    assert len(nodes(answer, cores)) == 2 and 3 in nodes(answer, cores)  # node 3 whole, then a best fit for 2


def test_among_groups_with_room_the_fullest_node_then_the_smallest_group_wins():
    # node0: L3 groups with 4 and 1 free (5); node1: 3 and 3 free (6). 3 cores fit in three groups.
    cores, available = layout((0, 0, 4, 0), (0, 1, 1, 0), (1, 2, 3, 0), (1, 3, 3, 0))
    assert preferred_allocation(cores, available, [], 3) == ids(0, 1, 2)
    assert preferred_allocation(cores, available, [], 1) == ids(4)  # node0's one-core group: exact fit


def test_a_group_with_room_must_hold_the_must_include_devices():
    cores, available = layout((0, 0, 3, 1), (0, 1, 3, 1), (1, 2, 4, 0))  # core3 is busy, core4-6 free in L3 1
    answer = preferred_allocation(cores, available, ids(0), 3)
    assert answer == ids(0, 1, 2), "L3 0 holds core0 and has room; node1's empty group does not hold core0"


def test_l3_tie_goes_to_the_group_with_the_lowest_first_cpu():
    cores = grid([8], l3_size=4)
    assert preferred_allocation(cores, list(cores), [], 2) == ids(0, 1)


# must_include --------------------------------------------------------------------------------------


def test_must_include_picks_its_node_over_the_best_fit_one():
    cores = grid([2, 4])
    answer = preferred_allocation(cores, list(cores), ids(5), 2)
    assert answer == ids(2, 5)


def test_must_include_in_two_nodes_is_kept_and_no_third_node_is_added():
    cores = grid([3, 3, 3])
    answer = preferred_allocation(cores, list(cores), ids(0, 3), 4)
    assert set(ids(0, 3)) <= set(answer) and len(answer) == 4
    assert nodes(answer, cores) == {0, 1}


def test_must_include_node_too_small_spills_into_the_best_fit_other_node():
    cores = grid([2, 4, 2])
    available = free_except(cores, 6)  # node2 has 1 free, node1 4
    answer = preferred_allocation(cores, available, ids(1), 3)
    assert answer == ids(0, 1, 7)


def test_must_include_alone_fills_the_request():
    cores = grid([2, 2])
    assert preferred_allocation(cores, list(cores), ids(3, 0), 2) == ids(0, 3)


# Spanning nodes --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("size", "expected_nodes"), [
    (8, {2, 0}),     # 5 + best fit for 3: node0 (node1 ties, lower id wins)
    (9, {2, 0, 3}),  # 5 + 3 + best fit for 1: node3 (2 free)
    (13, {0, 1, 2, 3}),
])
def test_spanning_takes_the_largest_nodes_first_and_ends_with_the_best_fit(size, expected_nodes):
    cores = grid([3, 3, 5, 2])
    answer = preferred_allocation(cores, list(cores), [], size)
    assert len(answer) == size and nodes(answer, cores) == expected_nodes


def test_largest_first_ties_go_to_the_lowest_node_id():
    cores = grid([3, 3, 3])
    answer = preferred_allocation(cores, list(cores), [], 5)
    assert answer == ids(0, 1, 2, 3, 4)


# Determinism, edges, errors ----------------------------------------------------------------------------


def test_answer_does_not_depend_on_the_order_of_available():
    cores = grid([4, 6, 5], threads=2, l3_size=3)
    available = free_except(cores, 0, 5, 11, 12)
    expected = preferred_allocation(cores, available, ids(7), 7)
    rng = random.Random(3)
    for _ in range(50):
        shuffled = rng.sample(available, len(available))
        assert preferred_allocation(cores, shuffled, ids(7), 7) == expected


def test_size_zero_is_an_empty_answer():
    assert preferred_allocation(grid([2]), ids(0, 1), [], 0) == []


def test_unknown_available_ids_are_ignored_and_the_shortfall_left_to_the_kubelet():
    cores = grid([2, 2])
    answer = preferred_allocation(cores, ["gpu7", *ids(0, 3)], [], 3)
    assert answer == ids(0, 3)


def test_duplicate_ids_count_once():
    cores = grid([2, 2])
    assert preferred_allocation(cores, ids(0, 0, 2, 2), ids(2, 2), 2) == ids(0, 2)


def test_cores_without_node_or_l3_information_form_one_group():
    cores = {f"c{i}": Core(cpus=frozenset({i}), package=None, die=None, node=None, l3=None,
                           base_frequency=None, energy_performance_preference=None) for i in range(4)}
    assert preferred_allocation(cores, ["c3", "c1", "c2", "c0"], ["c3"], 2) == ["c0", "c3"]
    assert numa_nodes_of(cores, cores) == frozenset()


@pytest.mark.parametrize(("available", "must_include", "size", "message"), [
    (ids(0, 1), [], -1, "allocation size -1 is negative"),
    (ids(0, 1), ["core9", "core8"], 2, "core8, core9 are not devices of this pool"),
    (ids(0), ids(0, 1), 2, "core1 are not in available_deviceIDs"),
    (ids(0, 1, 2), ids(0, 1), 1, "2 must_include devices exceed allocation size 1"),
])
def test_impossible_requests_raise_value_error_naming_the_problem(available, must_include, size, message):
    with pytest.raises(ValueError, match=message):
        preferred_allocation(grid([4]), available, must_include, size)


def test_numa_nodes_of_ignores_unknown_ids():
    cores = grid([2, 2, 2])
    assert numa_nodes_of([*ids(0, 5), "gpu0"], cores) == {0, 2}


# Properties ----------------------------------------------------------------------------------------------


def fewest_nodes(cores: Mapping[str, Core], free: set[str], required: set[str], size: int) -> int:
    """Oracle: the nodes of the required cores, plus as few others as cover the rest.

    k other nodes hold at most the k largest free counts, so the smallest k
    whose largest counts cover the rest is the minimum.
    """
    free_per_node = Counter(cores[device].node for device in free)
    mandatory = {cores[device].node for device in required}
    rest = size - sum(free_per_node[node] for node in mandatory)
    others = sorted((n for node, n in free_per_node.items() if node not in mandatory), reverse=True)
    covering = next(k for k in range(len(others) + 1) if sum(others[:k]) >= rest)
    return len(mandatory) + covering


def check_answer(cores: Mapping[str, Core], available: Sequence[str], must_include: Sequence[str],
                 size: int, shuffle: random.Random) -> None:
    answer = preferred_allocation(cores, available, must_include, size)
    free = {device for device in available if device in cores}
    assert len(answer) == len(set(answer)), "no duplicates"
    assert set(answer) <= free | set(must_include)
    assert set(must_include) <= set(answer)
    assert len(answer) == min(size, len(free))
    assert len(nodes(answer, cores)) == fewest_nodes(cores, free, set(must_include), len(answer))
    single = [node for node in {c.node for c in cores.values()}
              if {cores[d].node for d in must_include} <= {node}
              and sum(cores[d].node == node for d in free) >= size]
    if single:
        assert len(nodes(answer, cores)) <= 1
    fewest = fewest_nodes(cores, free, set(must_include), len(answer))
    l3_with_room = [group for group in {c.l3 for c in cores.values()}
                    if (members := {d for d in free if cores[d].l3 == group}) >= set(must_include)
                    and len(members) >= size and fewest_nodes(cores, members, set(must_include), size) == fewest]
    if l3_with_room:
        assert len(l3_groups(answer, cores)) <= 1, "split across L3 groups though one had room"
    reordered = shuffle.sample(list(available), len(available))
    assert preferred_allocation(cores, reordered, shuffle.sample(list(must_include), len(must_include)), size) == answer


@st.composite
def requests(draw):
    per_node = draw(st.lists(st.integers(1, 6), min_size=1, max_size=4))
    shape = draw(st.sampled_from([{"l3_size": None}, {"l3_size": 1}, {"l3_size": 2}, {"l3_size": 3},
                                  {"l3_nodes": 2}, {"l3_nodes": 3}]))
    cores = grid(per_node, threads=draw(st.integers(1, 2)), **shape)
    available = [d for d in cores if draw(st.booleans())] + draw(st.lists(st.sampled_from(["gpu0", "x"]), max_size=2))
    known = [d for d in available if d in cores]
    must_include = draw(st.lists(st.sampled_from(known), unique=True)) if known else []
    size = draw(st.integers(len(must_include), len(known) + 2))
    return cores, available, must_include, size


@given(requests(), st.randoms(use_true_random=False))
@settings(max_examples=400)
def test_properties_on_literal_topologies(request, shuffle):
    check_answer(*request, shuffle)


# Real machines ----------------------------------------------------------------------------------------


#: Every multi-NUMA dump, with the NUMA nodes holding online cores as the kernel lists them
#: (hwloc-offline-cpu0-node0: node 0 lists no CPU, so its online CPUs are in no node: None).
MULTI_NUMA = {
    "hwloc-128arm-2pa2n8cluster4co": 4,
    "hwloc-128ia64-17n4s2c": 16,
    "hwloc-16amd64-8n2c": 8,
    "hwloc-16amd64-8n2c-cpusets": 8,
    "hwloc-16ia64-8n2s": 8,
    "hwloc-256ia64-64n2s2c": 64,
    "hwloc-256ppc-8n8s4t": 8,
    "hwloc-32amd64-4s2n4c-cgroup2": 8,
    "hwloc-32em64t-2n8c+dax+nvme+mic+dimms": 2,
    "hwloc-32intel64-2p8co2t+8ve": 2,
    "hwloc-40intel64-2g2n4c+pcilocality": 4,
    "hwloc-40intel64-4n10c+pci-conflicts": 4,
    "hwloc-48amd64-4pa2n6c-sparse": 8,
    "hwloc-64amd64-4s2n4ca2co": 8,
    "hwloc-8ia64-2n2s2c": 2,
    "hwloc-96em64t-4no4pa3ca2co": 4,
    "hwloc-fakecpuid1f-64intel64-2p4d2n2c2t": 16,
    "hwloc-memorysidecaches": 4,
    "hwloc-nvidiagpunumanodes": 2,
    "hwloc-offline-cpu0-node0": 2,
}


@cache
def machine(name: str) -> dict[str, Core]:
    return devices(discover(FIXTURES / name / "sys", FIXTURES / name / "proc"))


@pytest.mark.parametrize("name", sorted(MULTI_NUMA))
@given(shuffle=st.randoms(use_true_random=False))
@settings(max_examples=40)
def test_properties_on_real_machines(name, shuffle):
    cores = machine(name)
    assert len({core.node for core in cores.values()}) == MULTI_NUMA[name]
    available = [device for device in cores if shuffle.random() < shuffle.choice([0.3, 0.7, 1.0])]
    must_include = shuffle.sample(available, min(len(available), shuffle.randint(0, 3)))
    size = shuffle.randint(len(must_include), len(available) + 1)
    check_answer(cores, available, must_include, size, shuffle)


def test_memory_side_cache_machine_keeps_a_small_request_in_one_node_and_one_l3():
    cores = machine("hwloc-memorysidecaches")  # 4 nodes of 10 cores; each L3 spans two nodes
    answer = preferred_allocation(cores, list(cores), [], 3)
    assert len(nodes(answer, cores)) == 1 and len({cores[d].l3 for d in answer}) == 1


def test_amd_machine_best_fit_node_leaves_the_emptiest_nodes_whole():
    cores = machine("hwloc-64amd64-4s2n4ca2co")  # 8 nodes of 4 cores
    by_node: dict[int, list[str]] = {}
    for device, core in sorted(cores.items(), key=lambda item: item[1].first):
        by_node.setdefault(core.node, []).append(device)
    available = [d for node, members in by_node.items() for d in members[: 4 if node % 2 else 2]]
    answer = preferred_allocation(cores, available, [], 2)
    assert answer == by_node[0][:2]  # node 0 has exactly 2 free; the 4-free odd nodes stay whole
    wide = preferred_allocation(cores, available, [], 6)
    assert nodes(wide, cores) == {1, 0}  # largest node first (lowest id among 4-free), then the best fit for 2


@given(requests())
@settings(max_examples=200)
def test_free_devices_per_cell_are_the_same_counted_from_either_side(request):
    cores, available, _, _ = request
    index = index_cores(cores)
    for free in ({device for device in available if device in cores}, set(cores), set()):  # either side, both ends
        assert _free_per_cell(index, free) == Counter(index.place[device][0] for device in free)
