"""Device IDs, TopologyInfo nodes and health from literal topologies: stable, short, CDI-valid."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from api.constants import validate_device_id
from deviceplugin.model.devices import (
    core_device_ids,
    cpu_list_id,
    device_tree,
    health_changes,
    slot_device_ids,
)
from deviceplugin.model.plan import RESOURCE_NAMES, PlanOptions, Pool, plan_pools
from deviceplugin.model.topology import build_topology

CDI_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]*\Z")


def two_nodes():
    """Two NUMA nodes, 8 cores with threads (i, i+8), cores 0-3 on node 0; CPUs 0-5,8-13 isolated."""
    node = {cpu: (cpu % 8) // 4 for cpu in range(16)}
    return build_topology([(i, i + 8) for i in range(8)], node_of=node, package_of=node,
                          isolated=[*range(6), *range(8, 14)])


def test_core_devices_are_named_by_their_place_and_carry_their_node():
    topology = two_nodes()
    plan = plan_pools(topology, PlanOptions(num_exclusive_cores=5, num_shared_cores=1))
    tree = device_tree(plan, topology.online)
    exclusive = tree[RESOURCE_NAMES[Pool.EXCLUSIVE]]
    assert list(exclusive.devices) == ["core-n0-p0-c0", "core-n0-p0-c1", "core-n0-p0-c2", "core-n0-p0-c3", "core-n1-p1-c4"]
    assert exclusive.devices["core-n1-p1-c4"].numa_nodes == {1}
    assert exclusive.devices["core-n0-p0-c0"].cpus == {0, 8}
    assert exclusive.cores["core-n0-p0-c2"].cpus == {2, 10}
    assert exclusive.preferred_allocation


def test_slot_devices_cover_the_pool_and_every_node_it_spans():
    topology = two_nodes()
    plan = plan_pools(topology, PlanOptions(num_exclusive_cores=1, num_shared_cores=1,
                                            shared_slots=3, infra_slots=12))
    tree = device_tree(plan, topology.online)
    shared = tree[RESOURCE_NAMES[Pool.SHARED]]
    assert list(shared.devices) == ["shared-000", "shared-001", "shared-002"]
    assert all(device.cpus == plan.cpus(Pool.SHARED) for device in shared.devices.values())
    infra = tree[RESOURCE_NAMES[Pool.INFRA]]
    assert len(infra.devices) == 12 and set(infra.devices) >= {"infra-000", "infra-011"}
    assert infra.devices["infra-000"].numa_nodes == {1}  # cores 6 and 7 are not isolated
    assert not shared.preferred_allocation and not infra.preferred_allocation


def test_pools_without_cpus_are_not_in_the_tree():
    topology = two_nodes()
    tree = device_tree(plan_pools(topology), topology.online)
    assert RESOURCE_NAMES[Pool.EXCLUSIVE_NON_ISOLCPUS] not in tree
    assert set(tree) == {RESOURCE_NAMES[p] for p in (Pool.EXCLUSIVE, Pool.SHARED, Pool.INFRA)}


def test_ids_do_not_depend_on_online_state_only_health_does():
    topology = two_nodes()
    plan = plan_pools(topology)
    before = device_tree(plan, topology.online)
    after = device_tree(plan, topology.online - {9})
    for resource in before:
        assert list(before[resource].devices) == list(after[resource].devices)
    exclusive = RESOURCE_NAMES[Pool.EXCLUSIVE]
    assert not after[exclusive].devices["core-n0-p0-c1"].healthy
    assert after[exclusive].healthy == before[exclusive].healthy - 1
    assert health_changes(before[exclusive], after[exclusive]) == [("core-n0-p0-c1", False)]
    assert health_changes(after[exclusive], before[exclusive]) == [("core-n0-p0-c1", True)]


def test_one_offline_cpu_makes_every_slot_of_its_pool_unhealthy():
    topology = two_nodes()
    plan = plan_pools(topology, PlanOptions(num_exclusive_cores=4, num_shared_cores=2))
    shared_cpu = min(plan.cpus(Pool.SHARED))
    tree = device_tree(plan, topology.online - {shared_cpu})
    assert tree[RESOURCE_NAMES[Pool.SHARED]].healthy == 0
    assert tree[RESOURCE_NAMES[Pool.INFRA]].healthy == 110


def test_device_ids_come_from_the_topology_not_from_the_order_it_was_read_in():
    """IDs must survive a restart (the kubelet's checkpoint holds them), whatever order sysfs lists CPUs in."""
    node = {cpu: (cpu % 8) // 4 for cpu in reversed(range(16))}
    shuffled = build_topology([(i + 8, i) for i in reversed(range(8))], node_of=node, package_of=node,
                              isolated=[*range(13, 7, -1), *range(5, -1, -1)])
    tree = device_tree(plan_pools(shuffled), shuffled.online)
    assert tree == device_tree(plan_pools(two_nodes()), two_nodes().online)
    assert {i: d.cpus for i, d in tree[RESOURCE_NAMES[Pool.EXCLUSIVE]].devices.items()} == {
        "core-n0-p0-c0": {0, 8}, "core-n0-p0-c1": {1, 9}, "core-n0-p0-c2": {2, 10}, "core-n0-p0-c3": {3, 11},
        "core-n1-p1-c4": {4, 12}}


def test_slot_ids_widen_past_three_digits_and_sort_as_numbers():
    ids = slot_device_ids(Pool.INFRA, 1500)
    assert ids[0] == "infra-0000" and ids[-1] == "infra-1499"
    assert sorted(ids) == ids


def test_a_core_too_long_to_name_by_its_cpus_is_named_by_its_first():
    sparse = [1000 + 37 * i for i in range(16)]
    core = build_topology([sparse]).cores[0]
    assert cpu_list_id(core) == "cpus-1000"


@settings(max_examples=200)
@given(st.lists(st.integers(0, 8191), min_size=1, max_size=16, unique=True))
def test_every_core_id_is_short_cdi_valid_and_kubelet_valid(threads):
    core = build_topology([threads], node_of=dict.fromkeys(threads, 2**31),
                          package_of=dict.fromkeys(threads, 2**31)).cores[0]
    for device_id in (cpu_list_id(core), core_device_ids([core])[core]):
        assert len(device_id) <= 63 and CDI_NAME.match(device_id)
        assert validate_device_id(device_id) is None


def test_every_slot_id_is_kubelet_valid():
    for pool in Pool:
        for device_id in slot_device_ids(pool, 110):
            assert validate_device_id(device_id) is None and CDI_NAME.match(device_id)
