"""Pod resources as the kubelet shapes them, sidecars, limit 0 and the API's gate and rate limit.

Against the stand-in NIC plugin (a small plugin of its own), so each rule is seen apart from the daemon.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from api.podresources.v1 import podresources_pb2 as pr
from api.podresources.v1 import podresources_pb2_grpc as pr_grpc
from deviceplugin.standin import ContainerSpec, Kubelet, PodSpec
from deviceplugin.standin.podresourcesserver import RATE_BURST, TokenBucket
from tests.support.nicplugin import NIC_RESOURCE, NicPlugin

VFS = {"vf0": 0, "vf1": 0, "vf2": 1, "vf3": 1}


@pytest.fixture
def nic(plugin_dir: Path) -> Iterator[NicPlugin]:
    plugin = NicPlugin(plugin_dir, VFS)
    yield plugin
    plugin.stop()


def started(kubelet: Kubelet, nic: NicPlugin) -> Kubelet:
    nic.start()
    kubelet.wait_for(lambda: kubelet.allocatable().get(NIC_RESOURCE) == len(VFS), what="NIC registered")
    return kubelet


def lister(kubelet: Kubelet) -> tuple[grpc.Channel, pr_grpc.PodResourcesListerStub]:
    channel = grpc.insecure_channel(f"unix:{kubelet.pod_resources_socket}")
    return channel, pr_grpc.PodResourcesListerStub(channel)


def test_list_shows_sidecars_and_app_containers_one_entry_per_numa_node_never_plain_init(make_kubelet, nic):
    kubelet = started(make_kubelet(), nic)
    pod = kubelet.admit(PodSpec("p", containers=(ContainerSpec("app", limits={NIC_RESOURCE: 2}),), init_containers=(
        ContainerSpec("proxy", limits={NIC_RESOURCE: 1}, restart_always=True),
        ContainerSpec("setup", limits={NIC_RESOURCE: 1}))))
    setup, proxy, app = (pod.container(n).device_ids[NIC_RESOURCE] for n in ("setup", "proxy", "app"))
    assert set(setup) <= set(app)  # the plain init container's device went on to the app container
    assert not set(proxy) & (set(app) | set(setup))  # the sidecar keeps its own: they leave the reuse pool
    channel, stub = lister(kubelet)
    with channel:
        (listed,) = stub.List(pr.ListPodResourcesRequest(), timeout=5).pod_resources
    assert [c.name for c in listed.containers] == ["proxy", "app"]
    app_entries = listed.containers[1].devices
    assert all(len(e.topology.nodes) == 1 for e in app_entries)
    by_node = {e.topology.nodes[0].ID: sorted(e.device_ids) for e in app_entries}
    assert sorted(i for ids in by_node.values() for i in ids) == sorted(app)
    assert all(VFS[i] == node for node, ids in by_node.items() for i in ids)


def test_a_limit_of_zero_allocates_nothing(make_kubelet, nic):
    kubelet = started(make_kubelet(), nic)
    pod = kubelet.admit(PodSpec("zero", (ContainerSpec("app", limits={NIC_RESOURCE: 0}),)))
    assert pod.container("app").devices == {} and nic.allocations == []


def test_get_is_behind_its_gate_and_answers_errors_with_unknown(make_kubelet, nic):
    off = started(make_kubelet(version="1.33"), nic)  # the gate's default before 1.34
    off.admit(PodSpec("p", (ContainerSpec("app", limits={NIC_RESOURCE: 1}),)))
    channel, stub = lister(off)
    with channel, pytest.raises(grpc.RpcError) as disabled:
        stub.Get(pr.GetPodResourcesRequest(pod_name="p", pod_namespace="default"), timeout=5)
    assert disabled.value.code() == grpc.StatusCode.UNKNOWN and "feature gate" in disabled.value.details()


def test_get_with_the_gate_on(make_kubelet, nic):
    on = started(make_kubelet(version="1.34"), nic)  # on by default from 1.34
    on.admit(PodSpec("p", (ContainerSpec("app", limits={NIC_RESOURCE: 1}),)))
    channel, stub = lister(on)
    with channel:
        got = stub.Get(pr.GetPodResourcesRequest(pod_name="p", pod_namespace="default"), timeout=5).pod_resources
        (listed,) = stub.List(pr.ListPodResourcesRequest(), timeout=5).pod_resources
        with pytest.raises(grpc.RpcError) as missing:
            stub.Get(pr.GetPodResourcesRequest(pod_name="nope", pod_namespace="default"), timeout=5)
    assert got == listed
    assert missing.value.code() == grpc.StatusCode.UNKNOWN and "not found" in missing.value.details()


def test_a_burst_beyond_the_rate_limit_is_resource_exhausted(make_kubelet):
    kubelet = make_kubelet()
    channel, stub = lister(kubelet)
    codes = []
    with channel:
        for _ in range(RATE_BURST * 3):
            try:
                stub.List(pr.ListPodResourcesRequest(), timeout=5)
                codes.append(grpc.StatusCode.OK)
            except grpc.RpcError as err:
                codes.append(err.code())
    assert codes[:RATE_BURST] == [grpc.StatusCode.OK] * RATE_BURST  # the burst
    assert grpc.StatusCode.RESOURCE_EXHAUSTED in codes


def test_the_token_bucket_refills_at_its_rate():
    now = [0.0]
    bucket = TokenBucket(100.0, 10, clock=lambda: now[0])
    assert [bucket.allow() for _ in range(11)] == [True] * 10 + [False]
    now[0] += 0.05  # five tokens back
    assert [bucket.allow() for _ in range(6)] == [True] * 5 + [False]
