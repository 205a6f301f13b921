"""Pool plans on real machine dumps with isolcpus written into a copy (the fixture README's recipe)."""

from __future__ import annotations

from pathlib import Path

from deviceplugin.host.sysfs import discover
from deviceplugin.model.cpulist import format_cpu_list
from deviceplugin.model.plan import Mode, PlanOptions, Pool, plan_pools
from tests.support.topologies import FIXTURES, fixture_copy


def cores(plan, pool: Pool) -> list[str]:
    return [format_cpu_list(core.cpus) for core in plan.pools[pool]]


def test_xeon_d_as_cmk_tested_it():
    topology = discover(FIXTURES / "cmk-xeon_d/sys", FIXTURES / "cmk-xeon_d/proc")
    plan = plan_pools(topology, PlanOptions(num_exclusive_cores=3, num_shared_cores=1))
    assert cores(plan, Pool.EXCLUSIVE) == ["0,8", "1,9", "2,10"]
    assert cores(plan, Pool.SHARED) == ["3,11"]
    assert format_cpu_list(plan.cpus(Pool.INFRA)) == "4-7,12-15"


def _four_node_machine(tmp_path: Path):
    """Dell R740, SNC2: 4 NUMA nodes numbered round-robin (CPU n is on node n % 4)."""
    sysfs, procfs = fixture_copy("hwloc-memorysidecaches", tmp_path, isolcpus="0-15,40-55")
    return discover(sysfs, procfs)


def test_packed_fills_one_numa_node_first_on_a_real_machine(tmp_path):
    plan = plan_pools(_four_node_machine(tmp_path), PlanOptions(num_exclusive_cores=4, num_shared_cores=2))
    assert cores(plan, Pool.EXCLUSIVE) == ["0,40", "4,44", "8,48", "12,52"]
    assert {core.node for core in plan.pools[Pool.EXCLUSIVE]} == {0}
    assert cores(plan, Pool.SHARED) == ["1,41", "5,45"]
    assert len(plan.pools[Pool.INFRA]) == 40 - 16


def test_spread_round_robins_numa_nodes_on_a_real_machine(tmp_path):
    plan = plan_pools(_four_node_machine(tmp_path),
                      PlanOptions(num_exclusive_cores=4, num_shared_cores=2,
                                  exclusive_mode=Mode.SPREAD, shared_mode=Mode.SPREAD))
    assert cores(plan, Pool.EXCLUSIVE) == ["0,40", "1,41", "2,42", "3,43"]
    assert [core.node for core in plan.pools[Pool.EXCLUSIVE]] == [0, 1, 2, 3]
    assert [core.node for core in plan.pools[Pool.SHARED]] == [0, 1]


def _hybrid(tmp_path: Path, **files: str):
    """Alder-Lake-like hybrid: P-cores {0,1}..{10,11} at 1.9 GHz, E-cores 12..19 at 1.4 GHz."""
    sysfs, procfs = fixture_copy("hwloc-20em64t-hybrid-1p6c2t+2ca4co1t", tmp_path,
                                 isolcpus="4-19")
    for name, value in files.items():
        cpu, attribute = name.split("__")
        (sysfs / "devices/system/cpu" / cpu / "cpufreq" / attribute).write_text(value + "\n")
    return discover(sysfs, procfs)


def test_sst_bf_high_priority_cores_go_to_exclusive_first_on_a_real_dump(tmp_path):
    # Raise two E-cores' base frequency above the P-cores': SST-BF's high-priority cores.
    topology = _hybrid(tmp_path, cpu18__base_frequency="2400000", cpu19__base_frequency="2400000")
    plan = plan_pools(topology, PlanOptions(num_exclusive_cores=3, num_shared_cores=1))
    assert plan.sst_bf
    assert cores(plan, Pool.EXCLUSIVE) == ["18", "19", "4-5"]
    assert cores(plan, Pool.SHARED) == ["6-7"]


def test_sst_cp_ranks_energy_preference_on_a_real_dump(tmp_path):
    topology = _hybrid(tmp_path, cpu16__energy_performance_preference="performance",
                       cpu4__energy_performance_preference="power",
                       cpu5__energy_performance_preference="power")
    plan = plan_pools(topology, PlanOptions(num_exclusive_cores=1, num_shared_cores=2))
    assert plan.sst_cp
    assert cores(plan, Pool.EXCLUSIVE) == ["16"]
    # balance_performance beats power: the P-core {4,5} is ranked last
    assert cores(plan, Pool.SHARED) == ["6-7", "8-9"]


def test_exclusive_non_isolcpus_on_a_real_dump(tmp_path):
    topology = _four_node_machine(tmp_path)
    plan = plan_pools(topology, PlanOptions(excl_non_isolcpus=frozenset({16, 57})))
    assert cores(plan, Pool.EXCLUSIVE_NON_ISOLCPUS) == ["16,56", "17,57"]
    assert not plan.cpus(Pool.INFRA) & {16, 17, 56, 57}


def test_fallback_on_a_dump_without_isolcpus():
    topology = discover(FIXTURES / "hwloc-16em64t-4s2c2t/sys", FIXTURES / "hwloc-16em64t-4s2c2t/proc")
    plan = plan_pools(topology)
    assert not plan.isolated_mode
    assert 0 in plan.cpus(Pool.INFRA)
    assert len(plan.pools[Pool.EXCLUSIVE]) == 4 and len(plan.pools[Pool.SHARED]) == 1
