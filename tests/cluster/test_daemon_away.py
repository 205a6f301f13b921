"""A pinned container killed while the daemon is away is restarted by the kubelet on the same CPUs.

What a rollout's gap (or an outage) looks like to a running pod: the node's label is taken off, so
the real DaemonSet controller deletes the daemon, and the pinned container's process is killed.
The kubelet restarts it from its cached Allocate answer without calling the plugin (it keeps the
endpoint for its grace period), and containerd resolves the answer's CDI names against the spec
the daemon left in place: the new process must get the CPUs the old one had. Deterministic
instead of racing a rollout: the daemon is gone before the kill, not maybe gone.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.cluster.deploy import (
    NAMESPACE,
    Deployment,
    PinnedState,
    delete_pod,
    example,
    pinned_state,
    rollout,
    start_pod,
    workload_pod,
)
from tests.cluster.node import NODE_NAME, wait_for

POOL_LABEL = "cmk.intel.com/cpu-pools"


@dataclass(frozen=True)
class Replay:
    before: PinnedState
    after: PinnedState
    daemons_while_killed: int


def daemon_count(deployed: Deployment) -> int:
    pods = deployed.node.kubectl_json("-n", NAMESPACE, "get", "pods", "-l", "app.kubernetes.io/component=daemon")
    return len(pods["items"])


@pytest.fixture(scope="module")
def replay(deployed: Deployment) -> Iterator[Replay]:
    node = deployed.node
    manifest = workload_pod(example("pod-cdi-only.yaml"), deployed.served(), deployed.threads_per_core)
    manifest["metadata"]["name"] = "cmk-restarted-while-daemon-away"
    manifest["spec"]["restartPolicy"] = "Always"  # the example's Never would leave it dead
    name = start_pod(node, manifest)
    before = pinned_state(node, name)
    try:
        node.kubectl("label", "node", NODE_NAME, f"{POOL_LABEL}-")
        wait_for("the daemon gone", lambda: daemon_count(deployed) == 0, 60)
        daemons = daemon_count(deployed)
        ((pid, _, _),) = before.containers.values()
        os.kill(pid, signal.SIGKILL)
        wait_for("the container restarted", lambda: pinned_state(node, name).restarts == 1
                 and node.kubectl_json("get", "pod", name)["status"]["containerStatuses"][0]["ready"], 90)
        yield Replay(before, pinned_state(node, name), daemons)
    finally:
        delete_pod(node, name)
        node.kubectl("label", "node", NODE_NAME, f"{POOL_LABEL}=default", "--overwrite")
        rollout(node)


def test_the_container_was_restarted_while_no_daemon_ran(replay: Replay) -> None:
    assert replay.daemons_while_killed == 0
    assert replay.after.restarts == 1
    assert replay.after.containers.keys() == replay.before.containers.keys()
    assert all(replay.after.containers[c][0] != replay.before.containers[c][0] for c in replay.before.containers)


def test_the_restarted_container_has_the_same_cpus(replay: Replay) -> None:
    assert {c: v[1:] for c, v in replay.after.containers.items()} == \
        {c: v[1:] for c, v in replay.before.containers.items()}
