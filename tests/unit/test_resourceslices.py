"""ResourceSlices from the node's plan: the device plugins' devices, their placement, and the API's limits.

Real machine dumps (every one in the fixtures) and a synthetic 8,192-CPU machine in the shape
``benchmarks/scale.py`` uses; the expected counts come from each machine's own device tree,
never from this machine. Each slice is also checked against the ``resource.k8s.io/v1`` JSON
schema of Kubernetes 1.36 (kubernetes-validate).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from deviceplugin.host.sysfs import discover
from deviceplugin.model.devices import device_tree
from deviceplugin.model.drahealth import device_health
from deviceplugin.model.node import NodePlan, plan_node
from deviceplugin.model.plan import (
    RESOURCE_NAMES,
    PlanOptions,
    Pool,
    SlotScope,
    plan_pools,
)
from deviceplugin.model.resourceslices import (
    ATTR_CPU_COUNT,
    ATTR_ISOLCPUS,
    ATTR_NUMA_NODE,
    ATTR_POOL,
    ATTR_SMT_SIBLINGS,
    ATTR_SOCKET,
    DRIVER_NAME,
    MAX_DEVICES_PER_SLICE,
    SliceError,
    device_name,
    resource_slices,
    slice_name,
    slice_problems,
)
from deviceplugin.model.topology import Topology, build_topology
from tests.support.topologies import FIXTURES, fixture_copy

MACHINES = sorted(path.name for path in FIXTURES.iterdir() if (path / "sys").is_dir())
#: etcd's default request limit: an object above it cannot be stored however valid it is
ETCD_MAX_REQUEST_BYTES = 1_572_864
SCHEMA_VERSION = "1.36.0"


def big_pools(topology: Topology) -> NodePlan:
    """Most cores exclusive (of the isolated ones, where the dump has isolcpus), so large machines need several slices."""
    cores = sum(1 for core in topology.cores if core.cpus <= topology.isolated or not topology.isolated)
    options = PlanOptions(num_exclusive_cores=max(1, cores - 2), num_shared_cores=1) if cores >= 3 else PlanOptions()
    return plan_node(topology, options)


def synthetic(sockets: int, nodes_per_socket: int, cores_per_node: int, threads: int) -> Topology:
    """``benchmarks/scale.py``'s shape: thread t of core c is CPU c + t * cores; every node but the first isolated."""
    cores = sockets * nodes_per_socket * cores_per_node
    node_of = {c + t * cores: c // cores_per_node for c in range(cores) for t in range(threads)}
    package_of = {cpu: node // nodes_per_socket for cpu, node in node_of.items()}
    l3_of = {cpu: [c + t * cores for c in range(node * cores_per_node, (node + 1) * cores_per_node) for t in range(threads)]
             for cpu, node in node_of.items()}
    return build_topology([[c + t * cores for t in range(threads)] for c in range(cores)], node_of=node_of,
                          package_of=package_of, l3_of=l3_of, isolated=[cpu for cpu, node in node_of.items() if node])


def devices_by_pool(slices: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for resource_slice in slices:
        for device in resource_slice["spec"]["devices"]:
            found.setdefault(device["attributes"][ATTR_POOL]["string"], []).append(device)
    return found


def assert_publishable(node: NodePlan, topology: Topology, slices: list[dict[str, Any]]) -> None:
    """Within every limit, one complete pool, and exactly the tree's healthy devices per pool."""
    assert [problem for s in slices for problem in slice_problems(s)] == []
    assert all(len(s["spec"]["devices"]) <= MAX_DEVICES_PER_SLICE for s in slices)
    assert {(s["spec"]["pool"]["name"], s["spec"]["pool"]["resourceSliceCount"]) for s in slices} == {("node-a", len(slices))}
    names = [device["name"] for s in slices for device in s["spec"]["devices"]]
    assert len(names) == len(set(names))  # unique in the pool, across slices
    expected = {
        devices.pool.value: [device_name(i) for i, device in devices.devices.items() if device.healthy]
        for devices in node.tree.values()
    }
    assert {pool: [d["name"] for d in found] for pool, found in devices_by_pool(slices).items()} == expected
    per_pool = Counter(s["metadata"]["labels"]["cmk.intel.com/pool"] for s in slices)
    assert per_pool == {pool: math.ceil(len(ids) / MAX_DEVICES_PER_SLICE) for pool, ids in expected.items()}
    assert max(len(json.dumps(s)) for s in slices) < ETCD_MAX_REQUEST_BYTES


@pytest.mark.parametrize("machine", MACHINES)
def test_every_real_machine_publishes_its_healthy_devices_within_the_api_limits(machine: str) -> None:
    topology = discover(FIXTURES / machine / "sys", FIXTURES / machine / "proc")
    node = big_pools(topology)

    slices = resource_slices(node.tree, topology.isolated, node_name="node-a", generation=1)

    assert_publishable(node, topology, slices)
    for resource_slice in slices:
        kubernetes_validate.validate(resource_slice, SCHEMA_VERSION, strict=True)


def test_the_largest_real_machine_needs_more_than_one_slice_for_a_pool() -> None:
    """Guards the table above: at least one dump makes the split happen."""
    largest = max(MACHINES, key=lambda m: len(discover(FIXTURES / m / "sys", FIXTURES / m / "proc").cores))
    topology = discover(FIXTURES / largest / "sys", FIXTURES / largest / "proc")
    slices = resource_slices(big_pools(topology).tree, topology.isolated, node_name="node-a", generation=1)
    assert max(Counter(s["metadata"]["labels"]["cmk.intel.com/pool"] for s in slices).values()) > 1


@pytest.mark.parametrize("shape", [(4, 2, 64, 2), (8, 4, 128, 2)], ids=["1024-cpus", "8192-cpus"])
def test_synthetic_machines_up_to_8192_cpus_stay_within_the_limits(shape: tuple[int, int, int, int]) -> None:
    topology = synthetic(*shape)
    node = plan_node(topology, PlanOptions(num_exclusive_cores=len(topology.cores) // 2, num_shared_cores=2))

    slices = resource_slices(node.tree, topology.isolated, node_name="node-a", generation=7)

    assert_publishable(node, topology, slices)
    assert {s["spec"]["pool"]["generation"] for s in slices} == {7}
    exclusive = devices_by_pool(slices)["exclusive"]
    assert len(exclusive) == len(topology.cores) // 2
    assert len(slices) == math.ceil(len(exclusive) / MAX_DEVICES_PER_SLICE) + 2  # shared and infra: 110 slots each


def test_a_core_carries_its_numa_node_socket_threads_and_isolation(tmp_path: Path) -> None:
    topology = discover(*fixture_copy("hwloc-16em64t-4s2c2t", tmp_path, isolcpus="2-7,10-15"))
    node = plan_node(topology, PlanOptions(num_exclusive_cores=3, num_shared_cores=1))
    exclusive = node.tree[RESOURCE_NAMES[Pool.EXCLUSIVE]]

    slices = resource_slices(node.tree, topology.isolated, node_name="node-a", generation=1)
    [published] = [s for s in slices if s["metadata"]["labels"]["cmk.intel.com/pool"] == "exclusive"]

    for device in published["spec"]["devices"]:
        core = exclusive.cores[device["name"]]
        attributes = device["attributes"]
        assert attributes[ATTR_POOL] == {"string": "exclusive"}
        assert attributes[ATTR_SOCKET] == {"int": core.package}
        assert attributes[ATTR_SMT_SIBLINGS]["string"] == ",".join(map(str, sorted(core.cpus)))
        assert len(core.cpus) == 2
        assert attributes[ATTR_ISOLCPUS] == {"bool": True}
        if core.node is not None:
            assert attributes[ATTR_NUMA_NODE] == {"int": core.node}
    assert len(published["spec"]["devices"]) == 3
    assert {d["attributes"][ATTR_ISOLCPUS]["bool"] for d in devices_by_pool(slices)["infra"]} == {False}


def literal_two_nodes() -> Topology:
    """Two NUMA nodes of four cores (threads i, i+8); cores 0-5 isolated."""
    node = {cpu: (cpu % 8) // 4 for cpu in range(16)}
    return build_topology([(i, i + 8) for i in range(8)], node_of=node, package_of=node,
                          isolated=[*range(6), *range(8, 14)])


def test_a_slot_names_one_numa_node_only_when_it_covers_one() -> None:
    topology = literal_two_nodes()
    whole = plan_pools(topology, PlanOptions(num_exclusive_cores=2, num_shared_cores=4, shared_slots=2))
    per_node = plan_pools(topology, PlanOptions(num_exclusive_cores=2, num_shared_cores=4, shared_slots=2,
                                                slot_scope=SlotScope.NUMA_NODE))

    def shared(plan: Any) -> list[dict[str, Any]]:
        slices = resource_slices(device_tree(plan, topology.online), topology.isolated, node_name="n", generation=1)
        return devices_by_pool(slices)["shared"]

    assert [d["attributes"].get(ATTR_NUMA_NODE) for d in shared(whole)] == [None, None]
    assert [d["attributes"][ATTR_NUMA_NODE] for d in shared(per_node)] == [{"int": 0}, {"int": 0}, {"int": 1}, {"int": 1}]
    assert {d["attributes"][ATTR_CPU_COUNT]["int"] for d in shared(whole)} == {8}
    assert {d["attributes"][ATTR_ISOLCPUS]["bool"] for d in shared(whole)} == {True}


def test_a_core_with_an_offline_thread_is_not_published() -> None:
    topology = literal_two_nodes()
    plan = plan_pools(topology, PlanOptions(num_exclusive_cores=2, num_shared_cores=1))
    exclusive = device_tree(plan, topology.online)[RESOURCE_NAMES[Pool.EXCLUSIVE]]
    gone_id, gone = next(iter(exclusive.devices.items()))

    tree = device_tree(plan, topology.online - {min(gone.cpus)})
    names = [d["name"] for d in devices_by_pool(resource_slices(tree, topology.isolated, node_name="n",
                                                                generation=2))["exclusive"]]

    assert device_name(gone_id) not in names
    assert len(names) == len(exclusive.devices) - 1


def test_a_core_with_an_offline_thread_left_out_of_the_slices_is_reported_unhealthy_to_the_kubelet() -> None:
    topology = literal_two_nodes()
    plan = plan_pools(topology, PlanOptions(num_exclusive_cores=2, num_shared_cores=1))
    gone_id, gone = next(iter(device_tree(plan, topology.online)[RESOURCE_NAMES[Pool.EXCLUSIVE]].devices.items()))
    tree = device_tree(plan, topology.online - {min(gone.cpus)})

    health = device_health(tree, "node-a")

    assert [(h.pool_name, h.device_name) for h in health] == [
        ("node-a", device_name(i)) for devices in tree.values() for i in devices.devices]
    assert [(h.device_name, h.message) for h in health if not h.healthy] == [
        (device_name(gone_id), f"a CPU of exclusive device {gone_id} is offline")]


def test_a_fallback_cpu_list_id_becomes_a_dns_label() -> None:
    assert device_name("cpus-1.9") == "cpus-1-9"
    assert device_name("core-n0-p1-c3") == "core-n0-p1-c3"


def test_slice_names_stay_unique_and_short_for_the_longest_node_names() -> None:
    a, b = "a" * 250 + ".x", "a" * 250 + ".y"
    names = {slice_name(node, Pool.EXCLUSIVE_NON_ISOLCPUS, 31) for node in (a, b)}
    assert len(names) == 2 and all(len(name) <= 253 for name in names)
    assert slice_name("node-a", Pool.SHARED, 0) == "node-a-cmk-shared-0"


@pytest.mark.parametrize(
    ("node_name", "driver", "complaint"),
    [
        ("Node_A", DRIVER_NAME, "node name 'Node_A' is not a DNS subdomain"),
        ("node-a", "CPU.example", "driver name 'CPU.example' is not a lowercase DNS subdomain"),
        ("node-a", "d" * 64, "at most 63 characters"),
    ],
)
def test_a_bad_node_or_driver_name_says_what_is_wrong(node_name: str, driver: str, complaint: str) -> None:
    topology = literal_two_nodes()
    tree = device_tree(plan_pools(topology), topology.online)
    with pytest.raises(SliceError, match=complaint):
        resource_slices(tree, topology.isolated, node_name=node_name, generation=1, driver=driver)


def a_slice(devices: list[dict[str, Any]]) -> dict[str, Any]:
    return {"metadata": {"name": "n-cmk-exclusive-0"},
            "spec": {"driver": DRIVER_NAME, "nodeName": "n", "pool": {"name": "n", "generation": 1,
                                                                        "resourceSliceCount": 1},
                     "devices": devices}}


@pytest.mark.parametrize(
    ("devices", "complaint"),
    [
        ([{"name": f"d{i}", "attributes": {}} for i in range(129)], "129 devices; at most 128"),
        ([{"name": "d", "attributes": {}}] * 2, "device 'd' appears twice"),
        ([{"name": "cpus-1.9", "attributes": {}}], "'cpus-1.9' is not a DNS label"),
        ([{"name": "d", "attributes": {"cpus": {"string": "1," * 33}}}], "longer than 64 characters"),
        ([{"name": "d", "attributes": {"l3-id": {"int": 1}}}], "'l3-id' is not a C identifier"),
        ([{"name": "d", "attributes": {"x" * 33: {"int": 1}}}], "at most 32 characters"),
        ([{"name": "d", "attributes": {"Bad_Domain/x": {"int": 1}}}], "domain 'Bad_Domain' is not a DNS subdomain"),
        ([{"name": "d", "attributes": {"x": {"int": 1, "bool": True}}}], "exactly one of int, bool"),
        ([{"name": "d", "attributes": {f"a{i}": {"int": i} for i in range(33)}}], "more than 32 attributes"),
    ],
)
def test_slice_problems_name_each_limit_the_api_server_enforces(devices: list[dict[str, Any]], complaint: str) -> None:
    problems = slice_problems(a_slice(devices))
    assert any(complaint in problem for problem in problems), problems
