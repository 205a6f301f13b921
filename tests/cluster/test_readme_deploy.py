"""README's deploy steps as written, on the real node: its Helm path, then its kubectl-only path.

Each path starts from a node as step 2 leaves it (prepared from the image: the node's bring-up runs
README's ``deploy:node`` block), runs README's ``deploy:label`` block and the path's block with only
README's variables given this node's values (:mod:`tests.cluster.readme`), then checks what a reader
is promised: the DaemonSet rolls out, the daemon removes the ``pools-not-ready`` taint step 3 set once
its pools are registered, and deploy/examples' CDI-only pod runs on exactly its exclusive core.
The tier's ``helm`` and ``kubectl`` move the node-local paths and let the daemon reach the API server
(:mod:`tests.cluster.postrender`); the commands are README's. The session's deployment is taken away
first and put back after.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from deviceplugin.model.cpulist import parse_cpu_list
from deviceplugin.model.taints import POOLS_NOT_READY
from tests.cluster import readme
from tests.cluster.deploy import (
    DAEMON_PODS,
    DEPLOY,
    NAMESPACE,
    Deployment,
    container_ids,
    daemon_pods,
    delete_pod,
    devices_of,
    node_paths,
    remove_kustomize_deploy,
    rollout,
    start_pinned_pod,
    view,
)
from tests.cluster.node import NODE_NAME, Node, wait_for

ROOT = Path(__file__).resolve().parents[2]
LABEL = "cmk.intel.com/cpu-pools"


@dataclass
class Road:
    """A reader's shell: a copy of the clone's deploy/ and charts/ as the working directory, the tier's tools first."""

    deployed: Deployment
    work: Path
    env: dict[str, str]
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def node(self) -> Node:
        return self.deployed.node

    def run(self, *blocks: str) -> subprocess.CompletedProcess[str]:
        values = {"REGISTRY": readme.REGISTRY, "NODE": NODE_NAME,
                  "THREADS_PER_CORE": str(self.deployed.threads_per_core),
                  # this node's plan as the session's daemon serves it (its pool sizes)
                  "EXCLUSIVE_CORES": str(self.cores("exclusive")), "SHARED_CORES": str(self.cores("shared"))}
        script = "set -euo pipefail\n" + readme.variables(values) + "".join(readme.block(b) for b in blocks)
        result = subprocess.run(["bash", "-c", script], cwd=self.work, env=self.env, capture_output=True, text=True,
                                timeout=600, check=False)
        assert result.returncode == 0, f"README's {blocks}: status {result.returncode}\n{result.stdout}\n{result.stderr}"
        return result

    def cores(self, pool: str) -> int:
        (found,) = [p for p in self.deployed.pools() if p["pool"] == pool]
        return len(found["devices"]) if found["advertised"] else 0


def tools(node: Node, where: Path) -> Path:
    """``helm`` and ``kubectl`` as README's reader runs them, with the tier's differences made on the way."""
    where.mkdir()
    api = f"127.0.0.1:{node.ports['apiserver']}"
    render = f"cd {ROOT} && {sys.executable} -m tests.cluster.postrender '{json.dumps(node_paths(node))}' {api}"
    (where / "post-render").write_text(f"#!/bin/sh\n{render}\n")
    (where / "helm").write_text(f"""#!/bin/sh
case "$1" in install|upgrade|template) exec {node.bin / 'helm'} "$@" --post-renderer {where / 'post-render'} ;; esac
exec {node.bin / 'helm'} "$@"
""")
    (where / "kubectl").write_text(f"""#!/bin/bash
set -euo pipefail
if [ "$1" = apply ] && [ "$2" = -k ]; then
  {node.bin / 'kubectl'} kustomize "$3" | {where / 'post-render'} | {node.bin / 'kubectl'} apply -f -
  exit 0
fi
exec {node.bin / 'kubectl'} "$@"
""")
    for name in ("post-render", "helm", "kubectl"):
        (where / name).chmod(0o755)
    return where


def fresh(node: Node) -> None:
    """The node as README's step 3 finds it: prepared, not labelled, not tainted, nothing of the product deployed."""
    node.kubectl("label", "node", NODE_NAME, f"{LABEL}-")
    node.kubectl("taint", "node", NODE_NAME, f"{POOLS_NOT_READY}-", check=False)
    wait_for("the daemon pods are gone", lambda: not daemon_pods(node), 120)


@pytest.fixture(scope="module")
def road(deployed: Deployment) -> Iterator[Road]:
    node = deployed.node
    work = node.path("clone")
    work.mkdir()
    for tree in ("deploy", "charts"):
        shutil.copytree(ROOT / tree, work / tree, symlinks=True)
    env = {**os.environ, "KUBECONFIG": str(node.kubeconfig),
           "PATH": f"{tools(node, node.path('readme-bin'))}:{node.bin}:{os.environ['PATH']}"}
    remove_kustomize_deploy(node)
    node.kubectl("delete", "-k", str(DEPLOY / "admission"), "--ignore-not-found", "--wait=true")
    fresh(node)
    road = Road(deployed, work, env)
    try:
        yield road
    finally:
        node.kubectl("-n", NAMESPACE, "delete", "pod", "-l", DAEMON_PODS, "--ignore-not-found", check=False)
        subprocess.run([str(node.bin / "helm"), f"--kubeconfig={node.kubeconfig}", "-n", NAMESPACE, "uninstall",
                        "cmk-deviceplugin", "--wait"], capture_output=True, check=False, timeout=300)
        remove_kustomize_deploy(node)
        node.kubectl("taint", "node", NODE_NAME, f"{POOLS_NOT_READY}-", check=False)
        node.kubectl("label", "node", NODE_NAME, f"{LABEL}=default", "--overwrite")
        node.kubectl("apply", "-k", str(deployed.overlay))
        node.kubectl("apply", "-k", str(DEPLOY / "admission"))
        rollout(node)
        print(f"README deploy paths: {road.seconds}", file=sys.stderr)


def taints(node: Node) -> list[str]:
    return [t["key"] for t in node.kubectl_json("get", "node", NODE_NAME)["spec"].get("taints", [])]


def check_the_promise(road: Road) -> None:
    """Rolled out, the taint gone by the daemon's hand, the CDI-only pod on exactly its core."""
    node = road.node
    rollout(node)
    wait_for("the daemon removes the pools-not-ready taint", lambda: POOLS_NOT_READY not in taints(node), 90)
    logs = node.kubectl("-n", NAMESPACE, "logs", "-l", DAEMON_PODS, "-c", "daemon", "--tail=-1").stdout
    assert f"removed taint {POOLS_NOT_READY} from node {NODE_NAME}" in logs, logs[-3000:]
    pod = start_pinned_pod(node, road.deployed.served(), road.deployed.threads_per_core)
    try:
        held = devices_of(node, "default", pod)
        for container, container_id in container_ids(node, "default", pod).items():
            want = frozenset().union(*(parse_cpu_list(road.deployed.device_cpus(resource, device))
                                       for resource, ids in held[container].items() for device in ids))
            seen = view(node, container_id)
            assert want and parse_cpu_list(seen.cpus_allowed) == parse_cpu_list(seen.cpuset) == want, container
    finally:
        delete_pod(node, pod)


def test_readmes_helm_commands_as_written_give_a_pinned_pod_and_the_daemon_removes_the_taint(road: Road) -> None:
    started = time.monotonic()
    road.run("label")
    assert POOLS_NOT_READY in taints(road.node)
    road.run("helm")
    check_the_promise(road)
    config = road.node.kubectl("-n", NAMESPACE, "exec", "daemonset/cmk-deviceplugin", "-c", "daemon", "--",
                               "cat", "/etc/cmk/config.yaml").stdout
    assert f"num-exclusive-cores: {road.cores('exclusive')}" in config, config
    subprocess.run([str(road.node.bin / "helm"), "-n", NAMESPACE, "uninstall", "cmk-deviceplugin", "--wait"],
                   env=road.env, capture_output=True, check=True, timeout=300)
    fresh(road.node)
    road.seconds["helm"] = round(time.monotonic() - started, 1)


def test_readmes_kubectl_only_commands_as_written_give_a_pinned_pod(road: Road) -> None:
    started = time.monotonic()
    road.run("label", "kustomize")
    check_the_promise(road)
    road.seconds["kustomize"] = round(time.monotonic() - started, 1)


def test_the_daemon_may_not_change_anything_else_on_its_node(road: Road) -> None:
    """The policy narrowing the daemon's node patch: a label, as the daemon's account on its own node, is refused."""
    account = f"system:serviceaccount:{NAMESPACE}:cmk-deviceplugin"
    result = road.node.kubectl("label", "node", NODE_NAME, "cmk.test/escaped=yes", f"--as={account}",
                               "--as-group=system:serviceaccounts", f"--as-group=system:serviceaccounts:{NAMESPACE}",
                               f"--as-user-extra=authentication.kubernetes.io/node-name={NODE_NAME}", check=False)
    assert result.returncode != 0 and "may change nothing on a node but" in result.stderr, result.stderr
