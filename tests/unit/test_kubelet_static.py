"""The placement benchmark's kubelet static policy, replaying the kubelet's own test tables.

Topologies and expectations are those of ``pkg/kubelet/cm/cpumanager``'s
``policy_test.go`` (``topoSingleSocketHT``, ``topoDualSocketHT``,
``topoDualSocketMultiNumaPerSocketHT``) and ``cpu_assignment_test.go``
(``TestCPUAccumulatorFreeCPUs``, ``commonTakeByTopologyTestCases``,
``TestTakeByTopologyNUMAPacked``), so a drift from the kubelet fails here.
"""

from __future__ import annotations

import pytest

from benchmarks.kubelet_static import (
    CpuInfo,
    CpuTopology,
    Unsupported,
    _Accumulator,
    best_hint,
    kubelet_choice,
    take_by_topology_numa_packed,
)
from deviceplugin.model.cpulist import format_cpu_list, parse_cpu_list
from deviceplugin.model.topology import build_topology


def _topology(cpus: int, cores: int, socket_of, numa_of, sockets: int) -> CpuTopology:
    """A kubelet test topology: CPU i sits on core i % cores; no uncore ids (NumUncoreCache 0)."""
    details = {cpu: CpuInfo(numa=numa_of(cpu % cores), socket=socket_of(cpu % cores), core=cpu % cores, uncore=0)
               for cpu in range(cpus)}
    return CpuTopology(details, sockets=sockets, cores=cores, uncore_caches=0)


SINGLE_SOCKET_HT = _topology(8, 4, lambda core: 0, lambda core: 0, 1)
DUAL_SOCKET_HT = _topology(12, 6, lambda core: core % 2, lambda core: core % 2, 2)
MULTI_NUMA_PER_SOCKET_HT = _topology(80, 40, lambda core: core // 20, lambda core: core // 10, 2)
TOPOLOGIES = {"single-socket-ht": SINGLE_SOCKET_HT, "dual-socket-ht": DUAL_SOCKET_HT,
              "dual-socket-multi-numa-per-socket-ht": MULTI_NUMA_PER_SOCKET_HT}


@pytest.mark.parametrize(("topology", "available", "expected"), [
    ("single-socket-ht", "0-7", [0, 4, 1, 5, 2, 6, 3, 7]),
    ("single-socket-ht", "3-7", [4, 5, 6, 3, 7]),
    ("dual-socket-ht", "0-11", [0, 6, 2, 8, 4, 10, 1, 7, 3, 9, 5, 11]),
    ("dual-socket-ht", "1-11", [6, 2, 8, 4, 10, 1, 7, 3, 9, 5, 11]),
    ("dual-socket-ht", "1-5,7-11", [2, 8, 4, 10, 1, 7, 3, 9, 5, 11]),
])
def test_free_cpus_are_sorted_as_the_kubelet_sorts_them(topology, available, expected):
    accumulator = _Accumulator(TOPOLOGIES[topology], parse_cpu_list(available), 0)
    assert accumulator.sort_cpus_packed() == expected


@pytest.mark.parametrize(("topology", "available", "count", "uncore", "expected"), [
    ("single-socket-ht", "0-7", 0, False, ""),
    ("single-socket-ht", "0-7", 1, False, "0"),
    ("single-socket-ht", "1,3,5-7", 1, False, "6"),
    ("single-socket-ht", "0-7", 2, False, "0,4"),
    ("single-socket-ht", "0-7", 8, False, "0-7"),
    ("single-socket-ht", "0-3,6", 2, False, "2,6"),
    ("dual-socket-ht", "0-11", 6, False, "0,2,4,6,8,10"),
    ("dual-socket-multi-numa-per-socket-ht", "0-79", 40, False, "0-19,40-59"),
    ("dual-socket-multi-numa-per-socket-ht", "0-79", 20, False, "0-9,40-49"),
    ("dual-socket-multi-numa-per-socket-ht", "10-39,50-79", 20, False, "10-19,50-59"),
    ("dual-socket-multi-numa-per-socket-ht", "0-79", 60, False, "0-29,40-69"),
    ("dual-socket-multi-numa-per-socket-ht", "1-39,41-79", 60, False, "10-39,50-79"),
    ("dual-socket-ht", "1-5,7-11", 1, False, "2"),
    ("dual-socket-ht", "0-11", 8, False, "0-2,4,6-8,10"),
    ("dual-socket-multi-numa-per-socket-ht", "0-79", 64, False, "0-31,40-71"),
    ("dual-socket-ht", "1-5,7-11", 1, True, "1"),  # PreferAlignByUncoreCache: takePartialUncore's odd branch
])
def test_take_by_topology_numa_packed_matches_the_kubelets_table(topology, available, count, uncore, expected):
    chosen = take_by_topology_numa_packed(TOPOLOGIES[topology], parse_cpu_list(available), count, uncore)
    assert format_cpu_list(chosen) == expected


def test_more_cpus_than_available_is_the_kubelets_error():
    with pytest.raises(ValueError, match=r"not enough cpus available to satisfy request: requested=5, available=4"):
        take_by_topology_numa_packed(SINGLE_SOCKET_HT, {0, 2, 4, 6}, 5, False)


def test_the_best_hint_is_the_lowest_single_node_with_room_else_the_narrowest_mask():
    free = parse_cpu_list("0-9,40-49") | parse_cpu_list("12-19,52-59")  # node0 whole, node1 16 of 20
    assert best_hint(MULTI_NUMA_PER_SOCKET_HT, free, 16) == {0}
    assert best_hint(MULTI_NUMA_PER_SOCKET_HT, free - parse_cpu_list("0-5"), 16) == {1}
    assert best_hint(MULTI_NUMA_PER_SOCKET_HT, free, 30) == {0, 1}  # no node has room: two nodes, not preferred


def test_the_topology_manager_refuses_more_than_eight_numa_nodes():
    cores = {f"core{n}": core for n, core in enumerate(
        build_topology([[n] for n in range(9)], node_of={n: n for n in range(9)}).cores)}
    with pytest.raises(Unsupported, match="refuses 9 NUMA nodes"):
        kubelet_choice(cores, CpuTopology.of(cores.values()), list(cores), 1, topology_manager=True, uncore=False)


def test_whole_cores_are_asked_for_and_answered_as_devices():
    topology = build_topology([[0, 4], [1, 5], [2, 6], [3, 7]], node_of={0: 0, 4: 0, 1: 0, 5: 0, 2: 1, 6: 1, 3: 1, 7: 1})
    cores = {f"core{core.first}": core for core in topology.cores}
    topo = CpuTopology.of(cores.values())
    free = ["core0", "core1", "core2"]  # node 0 whole, node 1 one core
    assert kubelet_choice(cores, topo, free, 2, topology_manager=False, uncore=False) == ["core0", "core1"]
    # one core: packed fills the node with the fewest free CPUs; the Topology Manager's hint is node 0
    assert kubelet_choice(cores, topo, free, 1, topology_manager=False, uncore=False) == ["core2"]
    assert kubelet_choice(cores, topo, free, 1, topology_manager=True, uncore=False) == ["core0"]
