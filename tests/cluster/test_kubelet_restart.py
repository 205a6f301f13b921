"""The real kubelet restarts under running pods: they keep their CPUs, every pool registers again, new pods are admitted.

The kubelet deletes the device-plugin sockets at start and restores its checkpoint with no healthy
devices; the daemon sees ``kubelet.sock`` come back and registers each pool again. "Registered
again" is the kubelet's own view: its pod resources ``GetAllocatableResources`` lists every device
the plan advertises.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from deviceplugin.protocol.podresources import Unavailable, read_assignments
from tests.cluster.deploy import (
    NAMESPACE,
    Deployment,
    PinnedState,
    container_ids,
    delete_pod,
    example,
    node_shows_registered,
    pinned_state,
    start_pinned_pod,
    start_pod,
    view,
    workload_pod,
)
from tests.cluster.node import wait_for


@dataclass(frozen=True)
class Restart:
    before: PinnedState
    after: PinnedState
    registered_after: float  # seconds from the kubelet's start to every pool's devices being allocatable
    daemon_restarts: tuple[int, int]  # the daemon container's restartCount before and after


def daemon_restart_count(deployed: Deployment) -> int:
    pods = deployed.node.kubectl_json("-n", NAMESPACE, "get", "pods", "-l", "app.kubernetes.io/component=daemon")
    return sum(c["restartCount"] for p in pods["items"] for c in p["status"]["containerStatuses"])


def allocatable_counts(deployed: Deployment) -> dict[str, int]:
    try:
        healthy = read_assignments(deployed.node.pod_resources_socket, timeout=1).allocatable or {}
    except Unavailable:
        return {}
    return {resource: len(ids) for resource, ids in healthy.items() if resource in deployed.served()}


@pytest.fixture(scope="module")
def restart(deployed: Deployment) -> Iterator[Restart]:
    node = deployed.node
    planned = {p["resource"]: p["advertised"] for p in deployed.pools() if p["advertised"]}
    wait_for("every pool allocatable before the restart", lambda: allocatable_counts(deployed) == planned, 60)
    name = start_pinned_pod(node, deployed.served(), deployed.threads_per_core)
    before = pinned_state(node, name)
    daemon_before = daemon_restart_count(deployed)
    started = node.restart_kubelet()
    wait_for("every pool registered again", lambda: allocatable_counts(deployed) == planned, 120,
             alive=node.processes["kubelet"].check_alive, interval=0.05)
    registered = time.monotonic() - started
    print(f"kubelet restart: every pool allocatable again {registered:.2f} s after the kubelet started")
    wait_for("node Ready again", node.node_ready, 120)
    wait_for("the node's status shows the pools again", lambda: node_shows_registered(node), 90)
    yield Restart(before, pinned_state(node, name), registered, (daemon_before, daemon_restart_count(deployed)))
    delete_pod(node, name)


def test_running_pods_keep_their_processes_and_cpus(restart: Restart) -> None:
    assert restart.after == restart.before
    assert restart.after.restarts == 0


def test_every_pool_registers_again(restart: Restart, deployed: Deployment) -> None:
    """By the daemon itself: a daemon stuck after the restart would be restarted by its liveness probe
    (a minute later) and register then, which once passed here as a 63 s re-registration."""
    assert restart.daemon_restarts[1] == restart.daemon_restarts[0]
    planned = {p["resource"]: p["advertised"] for p in deployed.pools() if p["advertised"]}
    assert allocatable_counts(deployed) == planned


def test_a_new_pod_is_admitted_afterwards(restart: Restart, deployed: Deployment) -> None:
    """The exclusive core is still held by the pinned pod, so the newcomer asks for what is left: an infra slot."""
    infra = workload_pod(example("pod-three-pools.yaml"), {"cmk.intel.com/infra"}, deployed.threads_per_core)
    infra["metadata"]["name"] = "cmk-after-kubelet-restart"
    name = start_pod(deployed.node, infra)
    try:
        (container_id,) = container_ids(deployed.node, "default", name).values()
        (cpus,) = [p["cpus"] for p in deployed.pools() if p["pool"] == "infra"]
        assert view(deployed.node, container_id).cpuset == cpus
    finally:
        delete_pod(deployed.node, name)
