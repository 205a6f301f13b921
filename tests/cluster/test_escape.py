"""Root pods cannot widen their cpuset through the real kubelet and containerd (issue 20), pinned or ordinary.

The attacker of ``tests/support/escape.c`` (a new user, mount and cgroup
namespace by ``unshare`` or one raw ``clone``, the cpuset hierarchy mounted
there and written with every CPU) runs as the pod's uid 0 with containerd's
default capabilities, at the container's start and again through ``kubectl
exec``, which joins the container's own cgroup. Seccomp: RuntimeDefault
(containerd's profile refuses the namespaces: the attempt stops early) and,
for the ordinary pod the admission policy does not check, Unconfined (the
attempt gets as far as its mount). Each must end on the CPUs the pod holds:
its exclusive core, or the infra CPUs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deviceplugin.model.cpulist import parse_cpu_list
from tests.cluster.deploy import (
    Deployment,
    delete_pod,
    devices_of,
    example,
    start_pod,
    workload_pod,
)
from tests.cluster.node import BUSYBOX_IMAGE
from tests.support import escape

ATTACKER = "/escape"
SCRIPT = f"{ATTACKER} unshare; {ATTACKER} clone; exec sleep 3600"


@pytest.fixture(scope="module")
def attacker(deployed: Deployment) -> Path:
    return escape.build(deployed.node.path("escape"))


def root_pod(name: str, base: dict[str, Any], seccomp: str, attacker: Path) -> dict[str, Any]:
    """``base`` run as uid 0 with the default capabilities, ``seccomp``, and the attacker mounted from the node."""
    pod = {**base, "metadata": {"name": name}}
    pod["spec"] = {**base["spec"], "securityContext": {"runAsUser": 0, "seccompProfile": {"type": seccomp}},
                   "volumes": [{"name": "escape", "hostPath": {"path": str(attacker), "type": "File"}}],
                   "terminationGracePeriodSeconds": 1}
    (container,) = pod["spec"]["containers"]
    container.update(command=["sh", "-c", SCRIPT], securityContext={"readOnlyRootFilesystem": True},
                     volumeMounts=[{"name": "escape", "mountPath": ATTACKER, "readOnly": True}])
    return pod


def ordinary(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"automountServiceAccountToken": False, "restartPolicy": "Never",
                     "containers": [{"name": "app", "image": BUSYBOX_IMAGE, "imagePullPolicy": "Never",
                                     "resources": {"requests": {"cpu": "10m", "memory": "8Mi"}}}]}}


def attempts(deployed: Deployment, name: str) -> list[tuple[str, escape.Attempt]]:
    """What the attacker reached at the container's start (both modes) and through ``kubectl exec``."""
    node = deployed.node
    logs = ""
    for _ in range(100):
        logs = node.kubectl("logs", name).stdout
        if logs.count("escape: ") >= 2:
            break
    started = [escape.parse(line) for line in logs.splitlines() if line.startswith("escape: ")]
    joined = node.kubectl("exec", name, "--", ATTACKER, "unshare", check=False)
    return [("at start by unshare", started[0]), ("at start by clone", started[1]),
            ("kubectl exec'd, by unshare", escape.parse(joined.stdout + joined.stderr))]


@pytest.fixture
def running(deployed: Deployment, attacker: Path, request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    """(pod name, the CPUs it holds) for the ``(kind, seccomp)`` the test is parametrized with."""
    kind, seccomp = request.param
    name = f"cmk-escape-{kind}-{seccomp.lower()}"
    if kind == "pinned":
        base = workload_pod(example("pod-cdi-only.yaml"), deployed.served(), deployed.threads_per_core)
    else:
        base = ordinary(name)
    started = start_pod(deployed.node, root_pod(name, base, seccomp, attacker))
    try:
        if kind == "pinned":
            held = devices_of(deployed.node, "default", started)["app"]
            cpus = ",".join(deployed.device_cpus(resource, device) for resource, ids in held.items() for device in ids)
        else:
            (cpus,) = [p["cpus"] for p in deployed.pools() if p["pool"] == "infra"]
        yield started, cpus
    finally:
        delete_pod(deployed.node, started)


@pytest.mark.parametrize("running", [("pinned", "RuntimeDefault"), ("ordinary", "RuntimeDefault"),
                                     ("ordinary", "Unconfined")], indirect=True,
                         ids=["pinned-runtime-default", "ordinary-runtime-default", "ordinary-unconfined"])
def test_a_root_pod_stays_on_the_cpus_it_holds(deployed: Deployment, running: tuple[str, str]) -> None:
    name, cpus = running
    for how, attempt in attempts(deployed, name):
        print(f"{name} {how}: {attempt.steps} affinity={attempt.affinity}")
        assert parse_cpu_list(attempt.affinity) == parse_cpu_list(cpus), (how, attempt)


def test_the_api_server_refuses_a_root_pinned_pod_without_seccomp(deployed: Deployment, attacker: Path) -> None:
    """Where the hook's bound is the only wall left, the admission policy refuses the pod outright."""
    base = workload_pod(example("pod-cdi-only.yaml"), deployed.served(), deployed.threads_per_core)
    pod = root_pod("cmk-escape-pinned-unconfined", base, "Unconfined", attacker)
    result = deployed.node.kubectl("apply", "--dry-run=server", "-f", "-", input=json.dumps(pod), check=False)
    assert result.returncode != 0 and "seccomp" in result.stderr, result.stderr
