"""The cluster tier's one node for the whole session, and the product deployed on it as a user does.

``node``: the real components from ``.ci/build-cluster`` (``CMK_CLUSTER_BIN``, or the script is run
to find or build them), the images imported. ``deployed``: README's deploy steps 4 and 5 (label, ``kubectl
apply -k`` of the test overlay and of ``deploy/admission``, wait for the rollout). Both are session
fixtures: a component that does not start raises once and pytest reports that error, log tail
included, for every test of the tier. Nothing here skips.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from deviceplugin.kubelet.podresources import Unavailable, read_assignments
from tests.cluster import images
from tests.cluster.deploy import DAEMONSET, DEPLOY, NAMESPACE, write_overlay
from tests.cluster.node import NODE_NAME, ComponentFailed, Node, running_node, wait_for

ROOT = Path(__file__).resolve().parents[2]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/cluster carries the ``cluster`` marker (``-m cluster`` selects the tier)."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.cluster)


def cluster_bin() -> Path:
    """Where the node's binaries are: ``.ci/test`` exports it; run alone, the build script says (and builds)."""
    if os.environ.get("CMK_CLUSTER_BIN"):
        return Path(os.environ["CMK_CLUSTER_BIN"])
    result = subprocess.run([str(ROOT / ".ci/build-cluster")], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ComponentFailed(f".ci/build-cluster failed:\n{result.stderr[-3000:]}")
    return Path(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    binaries = cluster_bin()
    work = tmp_path_factory.mktemp("cluster")
    product, archive = images.product_archive(work / "product.tar")
    archives = [images.pause_archive(binaries / "pause", work / "pause.tar"),
                images.busybox_archive(work / "busybox.tar"), archive]
    with running_node(binaries, work / "logs", archives) as up:
        for path in archives:
            path.unlink()
        up.product_image = product
        yield up


@dataclass(frozen=True)
class Deployment:
    """The deployed product and the plan its daemon's own ``cmk describe`` prints on this node."""

    node: Node
    overlay: Path
    plan: dict[str, Any]  # describe --output json: "topology", "plan"

    @property
    def threads_per_core(self) -> int:
        return int(self.plan["topology"]["threads_per_core_max"])

    def pools(self) -> list[dict[str, Any]]:
        return list(self.plan["plan"]["pools"])

    def served(self) -> set[str]:
        """The resources this node advertises (pools with CPUs)."""
        return {p["resource"] for p in self.pools() if p["advertised"]}

    def device_cpus(self, resource: str, device: str) -> str:
        """The CPUs a device of ``resource`` stands for: its core's for core pools, the pool's for slots."""
        (pool,) = [p for p in self.pools() if p["resource"] == resource]
        return str(pool["devices"].get(device, pool["cpus"]) if pool["unit"] == "cores" else pool["cpus"])


def rollout(node: Node, timeout: int = 240) -> None:
    """``kubectl rollout status`` of the DaemonSet, then the node's status catching up with the kubelet.

    On failure the pods, events and components' logs say why.
    """
    result = node.kubectl("-n", NAMESPACE, "rollout", "status", f"daemonset/{DAEMONSET}", f"--timeout={timeout}s",
                          check=False, timeout=timeout + 30)
    if result.returncode != 0:
        pods = node.kubectl("-n", NAMESPACE, "describe", "pods", check=False).stdout[-4000:]
        raise ComponentFailed(f"rollout of {DAEMONSET}: {result.stderr}\n{pods}\n{node.log_tails()}")
    wait_for("the node's status shows the pools the kubelet registered", lambda: node_shows_registered(node), 90)


def node_shows_registered(node: Node) -> bool:
    """True once the node's capacity and allocatable count each resource's devices as the kubelet does.

    The kubelet's count is its pod resources API's (GetAllocatableResources), not the plan: the
    tests compare the node's status with the plan.

    The DaemonSet is ready as soon as the kubelet holds each pool's stream; the node's status follows
    at the kubelet's next status update.
    """
    try:
        allocatable = read_assignments(node.pod_resources_socket, timeout=2).allocatable or {}
    except Unavailable:
        return False
    status = node.kubectl_json("get", "node", NODE_NAME)["status"]
    held = {resource: str(len(ids)) for resource, ids in allocatable.items() if ids}
    return bool(held) and all(status.get(part, {}).get(resource) == count for resource, count in held.items()
                              for part in ("capacity", "allocatable"))


@pytest.fixture(scope="session")
def deployed(node: Node) -> Deployment:
    # the daemon's image says what this node has; the overlay needs its threads per core up front
    topology = json.loads(subprocess.run(
        [sys.executable, "-m", "deviceplugin", "describe", "--output", "json", "--usage-window", "0"],
        cwd=ROOT, capture_output=True, text=True, check=True).stdout)["topology"]
    node.kubectl("label", "node", NODE_NAME, "cmk.intel.com/cpu-pools=default")
    overlay = write_overlay(node, node.product_image, int(topology["threads_per_core_max"]))
    node.kubectl("apply", "-k", str(overlay))
    node.kubectl("apply", "-k", str(DEPLOY / "admission"))
    rollout(node)
    described = node.kubectl("-n", NAMESPACE, "exec", f"daemonset/{DAEMONSET}", "-c", "daemon", "--", "cmk",
                             "describe", "--config", "/etc/cmk/config.yaml", "--output", "json",
                             "--usage-window", "0")
    return Deployment(node, overlay, json.loads(described.stdout))
