"""The unconfined rule on real topologies: every cpuset the hook hands out passes, a node-wide cpuset does not."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deviceplugin.host.sysfs import discover
from deviceplugin.model.assignments import Assignments, Holding
from deviceplugin.model.confinement import (
    Container,
    container_id,
    exclusive_cpus,
    held_sets,
    unconfined,
)
from deviceplugin.model.devices import device_tree
from deviceplugin.model.plan import (
    CORE_POOLS,
    RESOURCE_NAMES,
    PlanOptions,
    Pool,
    PoolPlan,
    SlotScope,
    plan_pools,
)
from tests.support.topologies import fixture_copy

ID = "0123456789abcdef" * 4
#: (dump, isolcpus, plan options): an isolcpus node, a multi-NUMA node with per-node slots and non-isolcpus cores
PLANS = {
    "xeon-d isolcpus": ("cmk-xeon_d", "0-3,8-11", PlanOptions(num_exclusive_cores=3, num_shared_cores=1)),
    "two numa, per-node slots": ("hwloc-memorysidecaches", "0-15,40-55",
                                 PlanOptions(num_exclusive_cores=4, num_shared_cores=4,
                                             excl_non_isolcpus=frozenset({16, 17, 56, 57}),
                                             slot_scope=SlotScope.NUMA_NODE)),
}


@pytest.fixture(scope="module", params=sorted(PLANS))
def planned(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[PoolPlan, frozenset[int]]:
    name, isolcpus, options = PLANS[request.param]
    sysfs, procfs = fixture_copy(name, tmp_path_factory.mktemp("topo"), isolcpus=isolcpus)
    topology = discover(sysfs, procfs)
    return plan_pools(topology, options), topology.online


def box(cpus: frozenset[int]) -> Container:
    return Container(ID, f"/kubepods/pod1/{ID}", cpus)


@pytest.mark.parametrize(("name", "found"), [
    (ID, ID),  # containerd and docker, cgroupfs
    (f"crio-{ID}", ID),  # CRI-O, cgroupfs
    (f"libpod-{ID}", ID),  # podman, cgroupfs
    (f"cri-containerd-{ID}.scope", ID), (f"crio-{ID}.scope", ID), (f"libpod-{ID}.scope", ID),
    (f"docker-{ID}.scope", ID),
    (f"crio-conmon-{ID}.scope", None), (f"libpod-conmon-{ID}.scope", None), ("conmon", None),
    (ID.upper(), None), (ID[:-1], None), (ID + "0", None), (f"pod{ID[:8]}-1111-2222-3333-444444444444", None),
    (f"kubepods-burstable-pod{ID}.slice", None), (f"crio-{ID}.scope.mount", None), (f"other-{ID}.scope", None),
    (f"libpod-{ID}\n", None), ("", None),
])
def test_a_container_is_a_cgroup_named_by_its_runtimes_id(name: str, found: str | None) -> None:
    assert container_id(name) == found


def test_exclusive_cpus_are_both_core_pools(planned: tuple[PoolPlan, frozenset[int]]) -> None:
    plan, _ = planned
    assert exclusive_cpus(plan) == plan.cpus(Pool.EXCLUSIVE) | plan.cpus(Pool.EXCLUSIVE_NON_ISOLCPUS)
    assert exclusive_cpus(plan)  # both fixtures plan exclusive cores


def _hook_shapes(plan: PoolPlan) -> st.SearchStrategy[tuple[frozenset[int], bool]]:
    """(a cpuset the hook hands a container, whether it mixes cores with a slot's CPUs)."""
    cores = [core for pool in sorted(CORE_POOLS) for core in plan.pools[pool]]
    groups = [frozenset(c for core in group for c in core.cpus)
              for pool in (Pool.SHARED, Pool.INFRA) for group in plan.slot_groups(pool).values()]

    def shape(picked: list[int], slots: list[int]) -> tuple[frozenset[int], bool]:
        cpus = frozenset(c for i in picked for c in cores[i].cpus) | frozenset(c for i in slots for c in groups[i])
        return cpus, bool(picked) and bool(slots)

    return st.builds(shape, st.lists(st.sampled_from(range(len(cores))), max_size=len(cores)),
                     st.lists(st.sampled_from(range(len(groups))), max_size=2))


@settings(max_examples=200)
@given(data=st.data())
def test_no_cpuset_the_hook_hands_out_is_unconfined(planned: tuple[PoolPlan, frozenset[int]], data: st.DataObject) -> None:
    plan, _ = planned
    cpus, mixed = data.draw(_hook_shapes(plan))
    exclusive = exclusive_cpus(plan)
    # cores alone, slots alone or the infra record pass without the kubelet; cores with a slot once it names them
    assert unconfined([box(cpus)], exclusive, None if not mixed else frozenset({cpus})) == []
    if mixed:
        assert [u.exclusive for u in unconfined([box(cpus)], exclusive, None)] == [cpus & exclusive]


def test_the_infra_record_and_each_whole_pool_are_confined(planned: tuple[PoolPlan, frozenset[int]]) -> None:
    plan, _ = planned
    exclusive = exclusive_cpus(plan)
    for pool in Pool:
        assert unconfined([box(plan.cpus(pool))], exclusive) == []


def test_the_node_wide_cpuset_of_a_container_born_before_the_hook_is_unconfined(
        planned: tuple[PoolPlan, frozenset[int]]) -> None:
    plan, online = planned
    exclusive = exclusive_cpus(plan)
    held = frozenset({plan.cpus(Pool.INFRA) | frozenset(plan.pools[Pool.EXCLUSIVE][0].cpus)})
    for kubelet in (None, frozenset(), held):
        found = unconfined([box(online)], exclusive, kubelet)
        assert [(u.container.cgroup, u.exclusive) for u in found] == [(f"/kubepods/pod1/{ID}", exclusive)]


@settings(max_examples=200)
@given(data=st.data())
def test_a_cpuset_reaching_exclusive_and_other_cpus_is_unconfined_unless_one_container_holds_it(
        planned: tuple[PoolPlan, frozenset[int]], data: st.DataObject) -> None:
    plan, online = planned
    exclusive = exclusive_cpus(plan)
    cpus = frozenset(data.draw(st.sets(st.sampled_from(sorted(online)), min_size=1)))
    found = unconfined([box(cpus)], exclusive)
    expected = bool(cpus & exclusive) and not cpus <= exclusive
    assert [u.exclusive for u in found] == ([cpus & exclusive] if expected else [])
    assert unconfined([box(cpus)], exclusive, frozenset({cpus})) == []


def test_held_sets_are_each_containers_devices_across_its_resources(tmp_path: Path) -> None:
    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path, isolcpus="0-3,8-11")
    topology = discover(sysfs, procfs)
    plan = plan_pools(topology, PlanOptions(num_exclusive_cores=3, num_shared_cores=1))
    tree = device_tree(plan, topology.online)
    exclusive, infra = RESOURCE_NAMES[Pool.EXCLUSIVE], RESOURCE_NAMES[Pool.INFRA]
    core = next(iter(tree[exclusive].devices))
    slot = next(iter(tree[infra].devices))
    assignments = Assignments(holdings=(
        Holding("net", "dpdk", "fwd", exclusive, (core,)), Holding("net", "dpdk", "fwd", infra, (slot,)),
        Holding("net", "dpdk", "ctl", infra, (slot,)), Holding("net", "x", "y", "example.com/nic", ("nic-0",)),
    ), allocatable=None)
    core_cpus = tree[exclusive].cpus_of([core])
    assert held_sets(tree, assignments) == {core_cpus | plan.cpus(Pool.INFRA), plan.cpus(Pool.INFRA)}  # no NIC
    both = box(core_cpus | plan.cpus(Pool.INFRA))
    assert unconfined([both], exclusive_cpus(plan), held_sets(tree, assignments)) == []
