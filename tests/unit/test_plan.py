"""Pool plans on literal topologies: CMK's semantics, placement modes, SST ranking, every error."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deviceplugin.model.plan import Mode, PlanError, PlanOptions, Pool, plan_pools
from deviceplugin.model.topology import build_topology


def cores_of(plan, pool: Pool) -> list[set[int]]:
    return [set(core.cpus) for core in plan.pools[pool]]


def xeon_d(isolated=(0, 1, 2, 3, 8, 9, 10, 11)):
    """Xeon D-1541 as in CMK's test data: 8 cores, siblings n and n+8."""
    return build_topology([(i, i + 8) for i in range(8)], isolated=isolated)


def two_nodes(isolated=range(16), cores_per_node=4):
    """Two NUMA nodes (one socket each), 2 threads per core: core i = (i, i+8)."""
    n = cores_per_node * 2
    node = {cpu: (cpu % n) // cores_per_node for cpu in range(2 * n)}
    return build_topology([(i, i + n) for i in range(n)], node_of=node, package_of=node,
                          isolated=isolated)


def test_cmk_xeon_d_three_exclusive_one_shared():
    plan = plan_pools(xeon_d(), PlanOptions(num_exclusive_cores=3, num_shared_cores=1))
    assert cores_of(plan, Pool.EXCLUSIVE) == [{0, 8}, {1, 9}, {2, 10}]
    assert cores_of(plan, Pool.SHARED) == [{3, 11}]
    assert plan.cpus(Pool.INFRA) == {4, 5, 6, 7, 12, 13, 14, 15}
    assert plan.pools[Pool.EXCLUSIVE_NON_ISOLCPUS] == ()
    assert plan.isolated_mode
    assert plan.advertised(Pool.EXCLUSIVE) == 3
    assert plan.advertised(Pool.EXCLUSIVE_NON_ISOLCPUS) == 0


def test_defaults_use_every_isolated_core_one_shared():
    plan = plan_pools(xeon_d())
    assert len(plan.pools[Pool.EXCLUSIVE]) == 3 and len(plan.pools[Pool.SHARED]) == 1
    assert plan.unused_isolated == ()


def test_shared_given_exclusive_takes_the_rest():
    plan = plan_pools(xeon_d(), PlanOptions(num_shared_cores=2))
    assert len(plan.pools[Pool.EXCLUSIVE]) == 2 and len(plan.pools[Pool.SHARED]) == 2


def test_unused_isolated_cores_are_reported_not_given_to_infra():
    plan = plan_pools(xeon_d(), PlanOptions(num_exclusive_cores=1, num_shared_cores=1))
    assert [set(c.cpus) for c in plan.unused_isolated] == [{2, 10}, {3, 11}]
    assert plan.cpus(Pool.INFRA) == {4, 5, 6, 7, 12, 13, 14, 15}
    assert any("in no pool" in note for note in plan.notes)


def test_slots_are_advertised_for_shared_and_infra():
    plan = plan_pools(xeon_d(), PlanOptions(shared_slots=7, infra_slots=3))
    assert plan.advertised(Pool.SHARED) == 7 and plan.advertised(Pool.INFRA) == 3


def test_packed_fills_one_node_first():
    plan = plan_pools(two_nodes(), PlanOptions(num_exclusive_cores=3, num_shared_cores=2))
    assert cores_of(plan, Pool.EXCLUSIVE) == [{0, 8}, {1, 9}, {2, 10}]
    assert cores_of(plan, Pool.SHARED) == [{3, 11}, {4, 12}]


def test_spread_round_robins_across_nodes():
    plan = plan_pools(two_nodes(), PlanOptions(num_exclusive_cores=3, num_shared_cores=2,
                                               exclusive_mode=Mode.SPREAD, shared_mode=Mode.SPREAD))
    assert cores_of(plan, Pool.EXCLUSIVE) == [{0, 8}, {4, 12}, {1, 9}]
    assert cores_of(plan, Pool.SHARED) == [{2, 10}, {5, 13}]


def test_sst_bf_gives_high_priority_cores_to_exclusive_first():
    freq = {cpu: (2_700_000 if cpu in (2, 10, 5, 13) else 2_100_000) for cpu in range(16)}
    topo = build_topology([(i, i + 8) for i in range(8)], isolated=range(16), base_frequency=freq)
    plan = plan_pools(topo, PlanOptions(num_exclusive_cores=2, num_shared_cores=1))
    assert plan.sst_bf and not plan.sst_cp
    assert cores_of(plan, Pool.EXCLUSIVE) == [{2, 10}, {5, 13}]
    assert cores_of(plan, Pool.SHARED) == [{0, 8}]


def test_sst_cp_ranks_performance_over_balance_over_power():
    epp = {0: "power", 1: "balance_power", 2: "performance", 3: "balance_performance"}
    epp = {cpu: epp[cpu % 4] for cpu in range(4)}
    topo = build_topology([(i,) for i in range(4)], epp=epp)  # no isolcpus: fallback
    plan = plan_pools(topo, PlanOptions(num_exclusive_cores=1, num_shared_cores=1))
    assert plan.sst_cp
    assert cores_of(plan, Pool.EXCLUSIVE) == [{2}]
    assert cores_of(plan, Pool.SHARED) == [{3}]
    assert plan.cpus(Pool.INFRA) == {0, 1}


def test_equal_sst_values_do_not_count_as_detected():
    topo = build_topology([(i,) for i in range(4)], isolated=range(4),
                          base_frequency=dict.fromkeys(range(4), 2_000_000),
                          epp=dict.fromkeys(range(4), "balance_performance"))
    plan = plan_pools(topo)
    assert not plan.sst_bf and not plan.sst_cp


def test_excl_non_isolcpus_takes_whole_named_cores_out_of_infra():
    plan = plan_pools(xeon_d(), PlanOptions(excl_non_isolcpus=frozenset({4, 13})))
    assert cores_of(plan, Pool.EXCLUSIVE_NON_ISOLCPUS) == [{4, 12}, {5, 13}]
    assert plan.cpus(Pool.INFRA) == {6, 7, 14, 15}
    assert plan.advertised(Pool.EXCLUSIVE_NON_ISOLCPUS) == 2


def test_fallback_without_isolcpus_keeps_cpu0_core_in_infra():
    plan = plan_pools(build_topology([(0,), (1,)]))
    assert not plan.isolated_mode
    assert cores_of(plan, Pool.EXCLUSIVE) == [{1}]
    assert plan.pools[Pool.SHARED] == ()
    assert plan.cpus(Pool.INFRA) == {0}
    assert any("fallback" in note for note in plan.notes)


def test_fallback_defaults_are_cmks_four_and_one_clipped():
    plan = plan_pools(build_topology([(i, i + 16) for i in range(16)]))
    assert len(plan.pools[Pool.EXCLUSIVE]) == 4 and len(plan.pools[Pool.SHARED]) == 1
    assert cores_of(plan, Pool.EXCLUSIVE)[0] == {1, 17}  # core of CPU 0 stays infra
    assert len(plan.pools[Pool.INFRA]) == 11


def test_fallback_can_give_all_but_one_core():
    plan = plan_pools(build_topology([(i,) for i in range(4)]),
                      PlanOptions(num_exclusive_cores=2, num_shared_cores=1))
    assert plan.cpus(Pool.INFRA) == {0}


def test_partly_isolated_cores_are_reported_and_unused():
    plan = plan_pools(xeon_d(isolated=(0, 1, 2, 3)))
    assert [set(c.cpus) for c in plan.partially_isolated] == [{0, 8}, {1, 9}, {2, 10}, {3, 11}]
    assert plan.pools[Pool.EXCLUSIVE] == () and plan.pools[Pool.SHARED] == ()
    assert plan.cpus(Pool.INFRA) == {4, 5, 6, 7, 12, 13, 14, 15}
    assert any("partly isolated" in note for note in plan.notes)


def test_offline_threads_are_not_planned():
    topo = build_topology([(i, i + 8) for i in range(8)], isolated=range(16), offline=[9])
    plan = plan_pools(topo, PlanOptions(num_exclusive_cores=2, num_shared_cores=0))
    assert cores_of(plan, Pool.EXCLUSIVE) == [{0, 8}, {1}]


@pytest.mark.parametrize(("topology", "options", "message"), [
    (xeon_d(), PlanOptions(num_exclusive_cores=4, num_shared_cores=1),
     "asked for 4 exclusive + 1 shared cores, but only 4 whole cores are isolated"),
    (xeon_d(), PlanOptions(num_exclusive_cores=5), "asked for 5 exclusive cores"),
    (xeon_d(), PlanOptions(num_shared_cores=9), "asked for 9 shared cores"),
    (xeon_d(), PlanOptions(excl_non_isolcpus=frozenset({99})),
     "excl-non-isolcpus names CPU 99, which does not exist (CPUs: 0-15)"),
    (xeon_d(), PlanOptions(excl_non_isolcpus=frozenset({8})),
     "excl-non-isolcpus names CPU 8, whose core {0,8} is isolated"),
    (build_topology([(0,), (1,), (2,)], offline=[2]), PlanOptions(excl_non_isolcpus=frozenset({2})),
     "excl-non-isolcpus names CPU 2, which is offline"),
    (xeon_d(), PlanOptions(excl_non_isolcpus=frozenset(range(4, 8))),
     "excl-non-isolcpus takes every non-isolated core"),
    (build_topology([(0,), (1,)]), PlanOptions(num_exclusive_cores=1, num_shared_cores=1),
     "no CPU is isolated and infra must keep one of the 2 cores, leaving 1"),
    (xeon_d(isolated=(0, 1, 2, 3)), PlanOptions(num_exclusive_cores=1),
     "only 0 whole cores are isolated (none)"),
])
def test_impossible_plans_are_one_clear_error(topology, options, message):
    with pytest.raises(PlanError) as err:
        plan_pools(topology, options)
    assert message in str(err.value)
    assert "\n" not in str(err.value)
    assert "--" not in str(err.value), "the model names a setting, the edge its flag or key"


@st.composite
def topologies_and_options(draw):
    threads = draw(st.integers(1, 4))
    n_cores = draw(st.integers(1, 12))
    nodes = draw(st.integers(1, 3))
    cores = [tuple(core + n_cores * t for t in range(threads)) for core in range(n_cores)]
    all_cpus = range(n_cores * threads)
    node_of = {cpu: (cpu % n_cores) * nodes // n_cores for cpu in all_cpus}
    isolated = draw(st.sets(st.sampled_from(list(all_cpus))))
    offline = draw(st.sets(st.sampled_from(list(all_cpus)), max_size=2)) - {0}
    topo = build_topology(cores, node_of=node_of, package_of=node_of, isolated=isolated,
                          offline=offline)
    size = st.none() | st.integers(0, n_cores)
    options = PlanOptions(
        num_exclusive_cores=draw(size), num_shared_cores=draw(size),
        exclusive_mode=draw(st.sampled_from(Mode)), shared_mode=draw(st.sampled_from(Mode)),
        excl_non_isolcpus=frozenset(draw(st.sets(st.sampled_from(list(all_cpus)), max_size=2))),
    )
    return topo, options


@settings(max_examples=400)
@given(topologies_and_options())
def test_any_plan_has_disjoint_pools_of_whole_online_cores(case):
    topology, options = case
    try:
        plan = plan_pools(topology, options)
    except PlanError as err:
        # refused: one line, for a request the machine cannot meet; CMK's defaults always fit
        assert str(err) and "\n" not in str(err)
        assert options != PlanOptions(exclusive_mode=options.exclusive_mode, shared_mode=options.shared_mode)
        options = PlanOptions()
        plan = plan_pools(topology, options)
    seen: set[int] = set()
    for pool, cores in plan.pools.items():
        for core in cores:
            assert core.cpus <= topology.online, "every planned CPU is online"
            assert not core.cpus & seen, "pools never overlap"
            seen |= core.cpus
            assert topology.core_of(core.first).cpus == core.cpus, "only whole cores"
        if plan.isolated_mode and pool in (Pool.EXCLUSIVE, Pool.SHARED):
            assert plan.cpus(pool) <= topology.isolated
        if pool in (Pool.INFRA, Pool.EXCLUSIVE_NON_ISOLCPUS):
            assert not plan.cpus(pool) & topology.isolated
    if any(not core.cpus & topology.isolated for core in topology.cores):
        assert plan.pools[Pool.INFRA], "infra keeps a core whenever one is not isolated"
    if options.num_exclusive_cores is not None:
        assert len(plan.pools[Pool.EXCLUSIVE]) == options.num_exclusive_cores
    if options.num_shared_cores is not None:
        assert len(plan.pools[Pool.SHARED]) == options.num_shared_cores
