"""deploy/examples' three-pool pod on the real node: the kubelet's devices, containerd's CDI, the kernel's CPUs.

One container per pool this node serves (a pool without CPUs has no resource to ask for). What each
container got is read three ways and must agree: the kubelet's pod resources API (which devices),
the daemon's plan (which CPUs those devices are), and the kernel (Cpus_allowed_list of the
container's process and its cpuset cgroup).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from deviceplugin.model.cpulist import parse_cpu_list
from tests.cluster.deploy import (
    RESOURCE_PREFIX,
    Deployment,
    cdi_device_name,
    cdi_spec,
    container_ids,
    delete_pod,
    describe_node,
    describe_section,
    devices_of,
    example,
    start_pod,
    view,
    workload_pod,
)

NAMESPACE = "default"


@pytest.fixture(scope="module")
def seed(deployed: Deployment) -> Iterator[str]:
    pod = workload_pod(example("pod-three-pools.yaml"), deployed.served(), deployed.threads_per_core)
    assert pod["spec"]["containers"], "this node serves no pool the seed pod asks for"
    name = start_pod(deployed.node, pod)
    yield name
    delete_pod(deployed.node, name)


def expected_cpus(deployed: Deployment, held: dict[str, tuple[str, ...]]) -> frozenset[int]:
    return frozenset().union(*(parse_cpu_list(deployed.device_cpus(resource, device))
                               for resource, ids in held.items() for device in ids))


def test_every_container_holds_one_device_of_its_pool(deployed: Deployment, seed: str) -> None:
    pod = deployed.node.kubectl_json("-n", NAMESPACE, "get", "pod", seed)
    held = devices_of(deployed.node, NAMESPACE, seed)
    for container in pod["spec"]["containers"]:
        asked = {r: int(n) for r, n in container["resources"]["limits"].items() if r.startswith(RESOURCE_PREFIX)}
        assert {r: len(ids) for r, ids in held[container["name"]].items()} == asked, container["name"]


def test_each_container_runs_on_the_cpus_of_the_devices_the_kubelet_gave_it(deployed: Deployment, seed: str) -> None:
    held = devices_of(deployed.node, NAMESPACE, seed)
    for container, container_id in container_ids(deployed.node, NAMESPACE, seed).items():
        want = expected_cpus(deployed, held[container])
        seen = view(deployed.node, container_id)
        assert (parse_cpu_list(seen.cpus_allowed), parse_cpu_list(seen.cpuset)) == (want, want), container


def test_containerd_injected_each_cdi_device_of_the_allocate_answer(deployed: Deployment, seed: str) -> None:
    """The spec's edits for each held device (its ``cmk hook --cpus`` entry, its env) are in the container's config.json."""
    devices = {d["name"]: d["containerEdits"] for d in cdi_spec(deployed.node)["devices"]}
    held = devices_of(deployed.node, NAMESPACE, seed)
    for container, container_id in container_ids(deployed.node, NAMESPACE, seed).items():
        spec = view(deployed.node, container_id).spec
        for resource, ids in held[container].items():
            for device in ids:
                edits = devices[cdi_device_name(resource, device)]
                hooks = [{k: h[k] for k in ("path", "args")} for h in spec["hooks"]["createRuntime"]]
                for hook in edits.get("hooks", []):
                    assert {"path": hook["path"], "args": hook["args"]} in hooks, (container, device)
                assert set(edits.get("env", [])) <= set(spec["process"]["env"]), (container, device)


def test_describe_node_shows_them_under_allocated_resources(deployed: Deployment, seed: str) -> None:
    allocated = describe_section(describe_node(deployed.node), "Allocated resources")
    held = devices_of(deployed.node, NAMESPACE, seed)
    for resource in deployed.served():
        count = sum(len(h.get(resource, ())) for h in held.values())
        assert allocated[resource][:2] == [str(count), str(count)], resource  # requests, limits


def test_after_deletion_the_devices_are_free(deployed: Deployment, seed: str) -> None:
    delete_pod(deployed.node, seed)
    assert devices_of(deployed.node, NAMESPACE, seed) == {}
    allocated = describe_section(describe_node(deployed.node), "Allocated resources")
    for resource in deployed.served():
        assert allocated[resource][:2] == ["0", "0"], resource
