"""DRA mode on the real node: the switch from device plugins, the seed pod unchanged, restarts, alignment.

In the order an operator lives it: a pod pinned through the device plugins runs on; the node is
switched to ``mode: dra`` by a config rollout (its held core stays out of the slices until it is
freed); the seed pod, whose YAML still asks for ``cmk.intel.com/exclusive-cores``, is served through
``deploy/dra``'s DeviceClass by the real scheduler and our driver; the kubelet and the daemon restart
under it; deleting it frees its core. Then the node's two-NUMA view and the kubelet's e2e test driver
as a NIC: a claim for a core beside a NIC gets both on one NUMA node, and one that cannot be met stays
Pending with the scheduler's reason. The node goes back to device-plugin mode at the end (its slices
deleted), as the rest of the tier expects it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from deviceplugin.model.cpulist import parse_cpu_list
from deviceplugin.model.resourceslices import device_name
from tests.cluster.deploy import (
    DAEMONSET,
    DEPLOY,
    NAMESPACE,
    Deployment,
    PinnedState,
    container_ids,
    delete_pod,
    devices_of,
    example,
    pinned_state,
    rollout,
    start_pinned_pod,
    start_pod,
    view,
    workload_pod,
)
from tests.cluster.dra import (
    NIC_CLASS,
    PEER_DRIVER,
    TWO_NUMA_SYSFS,
    allocatable,
    allocated_devices,
    config_overlay,
    daemon_log,
    daemon_rollout,
    dra_peers_bin,
    nic_objects,
    our_slices,
    pod_claims,
    published,
    start_test_driver,
    sysfs_patch,
    two_numa_sysfs,
    wait_unschedulable,
)
from tests.cluster.node import BUSYBOX_IMAGE, wait_for
from tests.support.topologies import set_online

EXCLUSIVE, INFRA = "cmk.intel.com/exclusive-cores", "cmk.intel.com/infra"


@dataclass
class Switched:
    """The node in DRA mode, and the device-plugin pod that was pinned when it switched."""

    deployed: Deployment
    held_pod: str
    before: PinnedState
    core: str  # the exclusive core's DRA device name
    cpus: frozenset[int]  # its CPUs


def seed_pod(deployed: Deployment, name: str = "cmk-cdi-only") -> dict[str, Any]:
    """deploy/examples/pod-cdi-only.yaml as every tier runs it (local image, cpu sized): its limits unchanged."""
    pod = workload_pod(example("pod-cdi-only.yaml"), deployed.served(), deployed.threads_per_core)
    assert pod["spec"]["containers"][0]["resources"]["limits"][EXCLUSIVE] == "1"
    pod["metadata"]["name"] = name
    return pod


def pinned_to(deployed: Deployment, pod: str) -> frozenset[int]:
    """The CPUs the pod's one container runs on, by its process and its cpuset (which must agree)."""
    (container_id,) = container_ids(deployed.node, "default", pod).values()
    seen = view(deployed.node, container_id)
    assert parse_cpu_list(seen.cpus_allowed) == parse_cpu_list(seen.cpuset), seen
    return parse_cpu_list(seen.cpuset)


def ours(claim: dict[str, Any]) -> list[str]:
    return [r["device"] for r in allocated_devices(claim) if r["driver"] == "cpu.cmk.intel.com"]


def checkpoint(deployed: Deployment) -> dict[str, Any]:
    path = deployed.node.kubelet_root / "plugins" / "cpu.cmk.intel.com" / "claims.json"
    return dict(json.loads(path.read_text())["claims"])


@pytest.fixture(scope="module")
def switched(deployed: Deployment) -> Iterator[Switched]:
    node = deployed.node
    held_pod = start_pod(node, seed_pod(deployed, "cmk-device-plugin-held"))
    before = pinned_state(node, held_pod)
    node.kubectl("apply", "-k", str(DEPLOY / "dra"))
    overlay = config_overlay(node, deployed.overlay, "overlay-dra", "mode: dra\n")
    try:
        node.kubectl("apply", "-k", str(overlay))
        daemon_rollout(node)
        wait_for("the node's slices are published", lambda: "infra" in published(node), 90)
        wait_for("the kubelet's allocatable of the device plugins' names is 0",
                 lambda: allocatable(node, EXCLUSIVE) in (None, "0"), 90)
        (core_id,) = pinned_device_ids(deployed, held_pod)
        cpus = parse_cpu_list(deployed.device_cpus(EXCLUSIVE, core_id))
        yield Switched(deployed, held_pod, before, device_name(core_id), cpus)
    finally:
        for pod in ("cmk-cdi-only", "cmk-claim-waits", "cmk-claim-next", "cmk-core-beside-nic", "cmk-no-fit",
                    "cmk-claim-across"):
            delete_pod(node, pod)
        delete_pod(node, held_pod)
        node.kubectl("delete", "resourceclaimtemplate,resourceclaim", "--all", "--ignore-not-found", check=False)
        node.kubectl("apply", "-k", str(deployed.overlay))
        # the tier's own overlay cannot reach the API server: whatever a failed check left goes by hand
        node.kubectl("delete", "resourceslices", "--field-selector", "spec.driver=cpu.cmk.intel.com", check=False)
        rollout(node)
        node.kubectl("delete", "-k", str(DEPLOY / "dra"), "--ignore-not-found")


def pinned_device_ids(deployed: Deployment, pod: str) -> list[str]:
    (held,) = devices_of(deployed.node, "default", pod).values()
    return list(held[EXCLUSIVE])


def test_switching_leaves_the_device_plugin_pod_pinned_and_its_core_out_of_the_slices(switched: Switched) -> None:
    node = switched.deployed.node
    assert pinned_state(node, switched.held_pod) == switched.before
    devices = published(node)
    assert switched.core not in devices.get("exclusive", set())
    assert len(devices["infra"]) == next(p for p in switched.deployed.pools() if p["pool"] == "infra")["advertised"]
    assert "slices_published" in daemon_log(node)


def claim_pod(name: str) -> list[dict[str, Any]]:
    """deploy/examples/dra/pod-claim-cores.yaml for one core, run here: a tenth of a CPU, so the scheduler's
    reason is the claim (on two CPUs the daemon, a one-CPU pod and another would exhaust ``cpu`` first)."""
    template, pod = localized("pod-claim-cores.yaml", name)
    template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] = 1
    for part in ("requests", "limits"):
        pod["spec"]["containers"][0]["resources"][part]["cpu"] = "100m"
    return [template, pod]


def localized(example_name: str, name: str) -> list[dict[str, Any]]:
    """A deploy/examples/dra pod and its claim template, both named ``name``, on the tier's local image."""
    template, pod = yaml.safe_load_all((DEPLOY / "examples" / "dra" / example_name).read_text())
    template["metadata"]["name"] = pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] = name
    pod["metadata"]["name"] = name
    container = pod["spec"]["containers"][0]
    container["image"], container["imagePullPolicy"] = BUSYBOX_IMAGE, "Never"
    return [template, pod]


def apply(node: Any, *manifests: dict[str, Any]) -> None:
    for manifest in manifests:
        node.kubectl("apply", "-f", "-", input=json.dumps(manifest))


def test_a_claim_for_the_core_the_device_plugins_pod_holds_waits_with_the_schedulers_reason(
        switched: Switched) -> None:
    node = switched.deployed.node
    apply(node, *claim_pod("cmk-claim-waits"))
    message = wait_unschedulable(node, "cmk-claim-waits")
    assert "cannot allocate all claims" in message, message
    delete_pod(node, "cmk-claim-waits")


def test_the_seed_pod_runs_pinned_on_the_freed_core_through_the_device_class(switched: Switched) -> None:
    deployed, node = switched.deployed, switched.deployed.node
    delete_pod(node, switched.held_pod)  # the kubelet frees the device plugin's core: the daemon publishes it
    wait_for("the freed core is published", lambda: switched.core in published(node).get("exclusive", set()), 60)
    start_pod(node, seed_pod(deployed))
    (claim,) = pod_claims(node, "cmk-cdi-only")
    assert ours(claim) == [switched.core]
    assert pinned_to(deployed, "cmk-cdi-only") == switched.cpus
    assert list(checkpoint(deployed)) == [claim["metadata"]["uid"]]
    described = json.loads(node.kubectl(
        "-n", NAMESPACE, "exec", f"daemonset/{DAEMONSET}", "-c", "daemon", "--", "cmk", "describe", "--config",
        "/etc/cmk/config.yaml", "--pod-resources-socket", str(node.pod_resources_socket), "--output", "json",
        "--usage-window", "0").stdout)
    (pool,) = [p for p in described["live"]["pools"] if p["resource"] == EXCLUSIVE]
    assert [(c["pod"], [device_name(i) for i in c["devices"]]) for c in pool["containers"]] == [
        ("cmk-cdi-only", [switched.core])]
    assert any(note.startswith("DRA mode") for note in described["live"]["notes"])


def test_a_second_claim_for_the_same_core_waits_and_a_kubelet_restart_changes_nothing(switched: Switched) -> None:
    node = switched.deployed.node
    before = pinned_state(node, "cmk-cdi-only")
    apply(node, *claim_pod("cmk-claim-next"))
    wait_unschedulable(node, "cmk-claim-next")
    registered, devices = daemon_log(node).count("event=dra_registered"), published(node)
    node.restart_kubelet()
    wait_for("the node is Ready again", node.node_ready, 120)
    wait_for("the new kubelet registered the driver", lambda: daemon_log(node).count("event=dra_registered")
             > registered, 60)
    # the starting kubelet deletes its node's slices: the driver publishes them again once registered
    wait_for("the slices are back", lambda: published(node) == devices, 60)
    assert pinned_state(node, "cmk-cdi-only") == before
    assert pending(node, "cmk-claim-next")


def pending(node: Any, pod: str) -> bool:
    return node.kubectl_json("get", "pod", pod)["status"]["phase"] == "Pending"


def test_a_daemon_restart_reads_the_prepared_claim_back(switched: Switched) -> None:
    deployed, node = switched.deployed, switched.deployed.node
    before = pinned_state(node, "cmk-cdi-only")
    held = checkpoint(deployed)
    node.kubectl("-n", NAMESPACE, "delete", "pod", "-l", "app.kubernetes.io/component=daemon", "--wait=true")
    daemon_rollout(node)
    wait_for("the restarted daemon publishes", lambda: "event=slices_published" in daemon_log(node), 90)
    assert checkpoint(deployed) == held
    assert pinned_state(node, "cmk-cdi-only") == before
    assert pending(node, "cmk-claim-next")


def test_deleting_the_seed_pod_frees_its_core_for_the_next_claim(switched: Switched) -> None:
    deployed, node = switched.deployed, switched.deployed.node
    delete_pod(node, "cmk-cdi-only")
    result = node.kubectl("wait", "--for=condition=Ready", "pod/cmk-claim-next", "--timeout=120s", check=False,
                          timeout=150)
    assert result.returncode == 0, node.kubectl("describe", "pod", "cmk-claim-next", check=False).stdout[-3000:]
    assert pinned_to(deployed, "cmk-claim-next") == switched.cpus
    (claim,) = pod_claims(node, "cmk-claim-next")
    assert list(checkpoint(deployed)) == [claim["metadata"]["uid"]]
    delete_pod(node, "cmk-claim-next")
    wait_for("the claim is unprepared", lambda: not checkpoint(deployed), 60)


@dataclass
class TwoNuma:
    switched: Switched
    core: str  # the exclusive core's device on the two-NUMA view, as our slices publish it
    cpus: frozenset[int]  # its CPUs (its smtSiblings attribute)
    core_node: int  # its NUMA node
    sysfs: Path  # the two-NUMA copy the daemon reads (this machine's path)


@pytest.fixture(scope="module")
def two_numa(switched: Switched) -> Iterator[TwoNuma]:
    deployed, node = switched.deployed, switched.deployed.node
    sysfs = two_numa_sysfs(node.path("two-numa", "sys"))
    daemonset = next(d for d in yaml.safe_load_all(node.kubectl("kustomize", str(deployed.overlay)).stdout)
                     if d and d["kind"] == "DaemonSet")
    overlay = config_overlay(node, deployed.overlay, "overlay-dra-two-numa",
                             f"mode: dra\nsysfs-root: {TWO_NUMA_SYSFS}\n", patches=sysfs_patch(daemonset, sysfs))
    driver = start_test_driver(node, dra_peers_bin())
    try:
        node.kubectl("apply", "-k", str(overlay))
        daemon_rollout(node)
        wait_for("the two-NUMA slices are published", lambda: any(
            "resource.kubernetes.io/numaNode" in d.get("attributes", {}) and d["attributes"][
                "resource.kubernetes.io/numaNode"]["int"] == 1
            for s in our_slices(node) for d in s["spec"].get("devices", [])), 90)
        (core,) = [d for s in our_slices(node) if s["metadata"]["labels"]["cmk.intel.com/pool"] == "exclusive"
                   for d in s["spec"]["devices"]]
        attributes = core["attributes"]
        # the other node's NIC first: the scheduler, unconstrained, takes a slice's devices in order
        apply(node, *nic_objects([1 - attributes["resource.kubernetes.io/numaNode"]["int"],
                                  attributes["resource.kubernetes.io/numaNode"]["int"]]))
        yield TwoNuma(switched, core["name"], parse_cpu_list(attributes["smtSiblings"]["string"]),
                      attributes["resource.kubernetes.io/numaNode"]["int"], sysfs)
    finally:
        for pod in ("cmk-core-beside-nic", "cmk-no-fit", "cmk-claim-health"):
            delete_pod(node, pod)
        for item in nic_objects([0, 1]):
            node.kubectl("delete", item["kind"].lower(), item["metadata"]["name"], "--ignore-not-found", check=False)
        driver.stop()


def aligned_manifests(deployed: Deployment, name: str, nic_selector: str | None = None) -> list[dict[str, Any]]:
    """deploy/examples/dra/pod-core-beside-nic.yaml with the test driver's class for the NIC, run here."""
    template, pod = localized("pod-core-beside-nic.yaml", name)
    (nic,) = [r for r in template["spec"]["spec"]["devices"]["requests"] if r["name"] == "nic"]
    nic["exactly"]["deviceClassName"] = NIC_CLASS
    if nic_selector:
        nic["exactly"]["selectors"] = [{"cel": {"expression": nic_selector}}]
    for part in ("requests", "limits"):
        pod["spec"]["containers"][0]["resources"][part]["cpu"] = str(deployed.threads_per_core)
    return [template, pod]


def test_a_claim_for_a_core_beside_a_nic_gets_both_on_one_numa_node(two_numa: TwoNuma) -> None:
    deployed, node = two_numa.switched.deployed, two_numa.switched.deployed.node
    template, pod = aligned_manifests(deployed, "cmk-core-beside-nic")
    apply(node, template)
    start_pod(node, pod)
    (claim,) = pod_claims(node, "cmk-core-beside-nic")
    results = {r["request"]: r for r in allocated_devices(claim)}
    assert results["nic"]["driver"] == PEER_DRIVER
    assert results["nic"]["device"] == f"nic-{two_numa.core_node}"
    assert results["cores"]["device"] == two_numa.core
    assert pinned_to(deployed, "cmk-core-beside-nic") == two_numa.cpus
    delete_pod(node, "cmk-core-beside-nic")


def test_a_claim_no_numa_node_can_meet_stays_pending_with_the_schedulers_reason(two_numa: TwoNuma) -> None:
    deployed, node = two_numa.switched.deployed, two_numa.switched.deployed.node
    other = 1 - two_numa.core_node
    template, pod = aligned_manifests(deployed, "cmk-no-fit",
                                      f'device.attributes["resource.kubernetes.io"].numaNode == {other}')
    apply(node, template, pod)
    message = wait_unschedulable(node, "cmk-no-fit")
    assert "cannot allocate all claims" in message, message
    status = node.kubectl_json("get", "pod", "cmk-no-fit")
    assert status["status"]["phase"] == "Pending" and not status["spec"].get("nodeName")
    delete_pod(node, "cmk-no-fit")


def claimed_health(node: Any, pod: str) -> list[tuple[str, str]]:
    """The health and message of each device the kubelet shows in the pod's status (``allocatedResourcesStatus``)."""
    statuses = node.kubectl_json("get", "pod", pod)["status"].get("containerStatuses", [])
    return [(r.get("health", ""), r.get("message", "")) for c in statuses for s in c.get("allocatedResourcesStatus", [])
            for r in s.get("resources", [])]


def test_a_claims_pod_shows_its_cores_health_from_the_driver_and_an_offline_thread_turns_it_unhealthy(
        two_numa: TwoNuma) -> None:
    """DRAResourceHealth through the real kubelet: the pod's status says Healthy, then Unhealthy with the daemon's
    reason once a thread of its core goes offline (here in the copy of sysfs the daemon reads), then Healthy."""
    node = two_numa.switched.deployed.node
    template, pod = claim_pod("cmk-claim-health")
    apply(node, template)
    start_pod(node, pod)
    (claim,) = pod_claims(node, "cmk-claim-health")
    assert ours(claim) == [two_numa.core]
    wait_for("the pod's status shows its core Healthy",
             lambda: claimed_health(node, "cmk-claim-health") == [("Healthy", "")], 60)
    cpu = max(two_numa.cpus)
    set_online(two_numa.sysfs, cpu, False)
    try:
        wait_for("the pod's status shows its core Unhealthy", lambda: [h for h, _ in claimed_health(
            node, "cmk-claim-health")] == ["Unhealthy"], 60)
        (_, message), = claimed_health(node, "cmk-claim-health")
        assert message.startswith("a CPU of exclusive device") and message.endswith("is offline"), message
        wait_for("the core leaves the slices", lambda: two_numa.core not in published(node).get("exclusive", set()),
                 60)
    finally:
        set_online(two_numa.sysfs, cpu, True)
    wait_for("the pod's status shows its core Healthy again",
             lambda: claimed_health(node, "cmk-claim-health") == [("Healthy", "")], 60)
    delete_pod(node, "cmk-claim-health")


def test_switching_back_keeps_a_claims_core_out_of_the_device_plugins_until_its_pod_goes(two_numa: TwoNuma) -> None:
    deployed, node = two_numa.switched.deployed, two_numa.switched.deployed.node
    template, pod = claim_pod("cmk-claim-across")
    apply(node, template)
    start_pod(node, pod)
    before = pinned_state(node, "cmk-claim-across")
    node.kubectl("apply", "-k", str(config_overlay(node, deployed.overlay, "overlay-back", "")))
    daemon_rollout(node)
    wait_for("the node's slices are deleted", lambda: not our_slices(node), 60)
    assert "event=dra_claims_left" in daemon_log(node)
    wait_for("the kubelet's allocatable names the device plugins again", lambda: allocatable(node, INFRA)
             not in (None, "0"), 90)
    assert allocatable(node, EXCLUSIVE) == "0"  # the claim's core: out of the device plugins
    assert pinned_state(node, "cmk-claim-across") == before
    delete_pod(node, "cmk-claim-across")  # the kubelet unprepares it through the driver the daemon kept
    cores = str(next(p for p in deployed.pools() if p["resource"] == EXCLUSIVE)["advertised"])
    wait_for("the core is back in the device plugins", lambda: allocatable(node, EXCLUSIVE) == cores, 90)
    assert "event=dra_claims_gone" in daemon_log(node)
    rollout(node)
    pinned = start_pinned_pod(node, deployed.served(), deployed.threads_per_core)
    try:
        assert pinned_to(deployed, pinned) == two_numa.switched.cpus
    finally:
        delete_pod(node, pinned)
