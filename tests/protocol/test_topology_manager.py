"""The stand-in's Topology Manager against the daemon and a stand-in NIC plugin, over real gRPC.

Done-when of issue 10: with ``single-numa-node``, a pod of exclusive cores
+ a shared slot + a NIC VF on node 1 is admitted with all of them on node 1
(slot scope ``numa-node``), and a request no node can hold is rejected with
the kubelet's ``TopologyAffinityError``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from api.podresources.v1 import podresources_pb2 as prpb
from api.podresources.v1 import podresources_pb2_grpc as prpb_grpc
from deviceplugin.host.sysfs import discover
from deviceplugin.model.cpulist import parse_cpu_list
from deviceplugin.model.plan import Mode, SlotScope
from deviceplugin.standin import AdmissionError, ContainerSpec, Kubelet, PodSpec
from tests.support.daemon import (
    EXCLUSIVE,
    SHARED,
    copy_with_isolcpus,
    wait_registered,
)
from tests.support.nicplugin import ENV_NAME, NIC_RESOURCE, NicPlugin
from tests.support.started import StopAfter

DUMP = "hwloc-32intel64-2p8co2t+8ve"  # 2 NUMA nodes of 8 cores x 2 threads
VFS_ON_NODE_1 = {"0000:81:00.2": 1, "0000:81:00.3": 1}


@pytest.fixture
def nic(plugin_dir: Path) -> Iterator[Callable[..., NicPlugin]]:
    with StopAfter() as kept:
        def start(vfs: dict[str, int | None] = VFS_ON_NODE_1, **options: object) -> NicPlugin:
            return kept.start(NicPlugin(plugin_dir, vfs, **options))  # type: ignore[arg-type]

        yield start


def node_kubelet(make_kubelet, policy: str) -> Kubelet:
    return make_kubelet(topology_policy=policy, numa_nodes=(0, 1))


def serve_numa_slots(kubelet, start_daemon, tmp_path, scope=SlotScope.NUMA_NODE):
    sysfs, procfs = copy_with_isolcpus(DUMP, tmp_path)
    daemon = start_daemon(sysfs, procfs, num_exclusive_cores=6, num_shared_cores=4, exclusive_mode=Mode.SPREAD,
                          shared_mode=Mode.SPREAD, shared_slots=4, slot_scope=scope)  # 3 + 2 cores per node
    wait_registered(kubelet, {EXCLUSIVE, SHARED})
    return daemon, discover(sysfs, procfs).numa_nodes


def test_single_numa_node_puts_cores_shared_slot_and_nic_all_on_node_1(make_kubelet, start_daemon, nic, tmp_path):
    kubelet = node_kubelet(make_kubelet, "single-numa-node")
    daemon, nodes = serve_numa_slots(kubelet, start_daemon, tmp_path)
    assert sorted(kubelet.devices(SHARED)) == [f"shared-n{n}-00{i}" for n in (0, 1) for i in range(4)]
    nic()
    kubelet.wait_for(lambda: kubelet.allocatable().get(NIC_RESOURCE) == 2, what="NIC registered")
    pod = kubelet.admit(PodSpec("dpdk", (ContainerSpec("fwd", limits={EXCLUSIVE: 2, SHARED: 1, NIC_RESOURCE: 1}),)))
    fwd = pod.container("fwd")
    assert parse_cpu_list(fwd.envs["CMK_CPUS_EXCLUSIVE"]) <= nodes[1]
    assert parse_cpu_list(fwd.envs["CMK_CPUS_SHARED"]) <= nodes[1]
    assert parse_cpu_list(fwd.envs["CMK_CPUS_SHARED"]) == daemon.plan.cpus(daemon.tree[SHARED].pool) & nodes[1]
    assert fwd.envs[ENV_NAME] in VFS_ON_NODE_1
    assert all(d.numa_nodes == (1,) for ds in fwd.devices.values() for d in ds)

    free_on_1 = sum(1 for d in kubelet.devices(EXCLUSIVE).values() if d.numa_nodes == (1,)) - 2
    too_big = ContainerSpec("big", limits={EXCLUSIVE: free_on_1 + 1, NIC_RESOURCE: 1})
    with pytest.raises(AdmissionError, match="TopologyAffinityError: Resources cannot be allocated with Topology locality"):
        kubelet.admit(PodSpec("big", (too_big,)))
    assert [p.name for p in kubelet.pods()] == ["dpdk"]  # the rejected pod holds nothing


def test_pool_wide_slots_look_aligned_but_span_nodes(make_kubelet, start_daemon, nic, tmp_path):
    """Why slot scope numa-node exists: a pool-wide slot carries both nodes, so node 1 'aligns' with it."""
    kubelet = node_kubelet(make_kubelet, "single-numa-node")
    _, nodes = serve_numa_slots(kubelet, start_daemon, tmp_path, scope=SlotScope.POOL)
    nic()
    kubelet.wait_for(lambda: kubelet.allocatable().get(NIC_RESOURCE) == 2, what="NIC registered")
    pod = kubelet.admit(PodSpec("ctl", (ContainerSpec("ctl", limits={SHARED: 1, NIC_RESOURCE: 1}),)))
    shared = parse_cpu_list(pod.container("ctl").envs["CMK_CPUS_SHARED"])
    assert shared & nodes[0] and shared & nodes[1]


def test_best_effort_admits_what_single_numa_node_rejects(make_kubelet, start_daemon, nic, tmp_path):
    kubelet = node_kubelet(make_kubelet, "best-effort")
    daemon, nodes = serve_numa_slots(kubelet, start_daemon, tmp_path)
    nic()
    kubelet.wait_for(lambda: kubelet.allocatable().get(NIC_RESOURCE) == 2, what="NIC registered")
    on_1 = sum(1 for d in kubelet.devices(EXCLUSIVE).values() if d.numa_nodes == (1,))
    pod = kubelet.admit(PodSpec("wide", (ContainerSpec("app", limits={EXCLUSIVE: on_1 + 1, NIC_RESOURCE: 1}),)))
    cpus = parse_cpu_list(pod.container("app").envs["CMK_CPUS_EXCLUSIVE"])
    exclusive_on_1 = daemon.plan.cpus(daemon.tree[EXCLUSIVE].pool) & nodes[1]
    assert cpus & nodes[0] and cpus >= exclusive_on_1  # every aligned core first, then one of node 0


# --- stand-in rules alone, with the NIC plugin only ------------------------------------------------------


@pytest.mark.parametrize("policy, admitted", [("none", True), ("best-effort", True), ("restricted", True),
                                              ("single-numa-node", False)])
def test_two_vfs_one_per_node_under_each_policy(make_kubelet, nic, policy, admitted):
    kubelet = node_kubelet(make_kubelet, policy)
    nic({"vf0": 0, "vf1": 1})
    kubelet.wait_for(lambda: kubelet.allocatable().get(NIC_RESOURCE) == 2, what="NIC registered")
    pod = PodSpec("two", (ContainerSpec("app", limits={NIC_RESOURCE: 2}),))
    if admitted:
        assert sorted(kubelet.admit(pod).container("app").envs[ENV_NAME].split(",")) == ["vf0", "vf1"]
    else:
        with pytest.raises(AdmissionError, match="TopologyAffinityError"):
            kubelet.admit(pod)


def test_empty_topology_means_no_alignment_and_vanishes_from_allocatable(make_kubelet, nic, plugin_dir):
    kubelet = node_kubelet(make_kubelet, "single-numa-node")
    nic({"vf0": 0, "vf1": 1}, empty_topology=True)
    kubelet.wait_for(lambda: kubelet.allocatable().get(NIC_RESOURCE) == 2, what="NIC registered")
    kubelet.admit(PodSpec("two", (ContainerSpec("app", limits={NIC_RESOURCE: 2}),)))  # no hint: admitted
    import grpc

    with grpc.insecure_channel(f"unix:{kubelet.pod_resources_socket}") as channel:
        stub = prpb_grpc.PodResourcesListerStub(channel)
        allocatable = stub.GetAllocatableResources(prpb.AllocatableResourcesRequest(), timeout=5)
        listed = stub.List(prpb.ListPodResourcesRequest(), timeout=5)
    assert [d for d in allocatable.devices if d.resource_name == NIC_RESOURCE] == []
    (entry,) = listed.pod_resources[0].containers[0].devices
    assert sorted(entry.device_ids) == ["vf0", "vf1"] and not entry.HasField("topology")


def test_nil_topology_stays_in_allocatable_without_a_node(make_kubelet, nic):
    kubelet = node_kubelet(make_kubelet, "single-numa-node")
    nic({"vf0": None})
    kubelet.wait_for(lambda: kubelet.allocatable().get(NIC_RESOURCE) == 1, what="NIC registered")
    import grpc

    with grpc.insecure_channel(f"unix:{kubelet.pod_resources_socket}") as channel:
        allocatable = prpb_grpc.PodResourcesListerStub(channel).GetAllocatableResources(
            prpb.AllocatableResourcesRequest(), timeout=5)
    (entry,) = [d for d in allocatable.devices if d.resource_name == NIC_RESOURCE]
    assert list(entry.device_ids) == ["vf0"] and not entry.HasField("topology")


def test_a_resource_no_plugin_ever_registered_is_admitted_without_allocate(make_kubelet, nic):
    kubelet = node_kubelet(make_kubelet, "single-numa-node")
    pod = kubelet.admit(PodSpec("early", (ContainerSpec("app", limits={NIC_RESOURCE: 1}),)))
    assert pod.container("app").devices == {} and dict(pod.container("app").envs) == {}
