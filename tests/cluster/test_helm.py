"""The chart on the real node: ``helm install``, ``helm upgrade`` and ``helm uninstall``, each its own test.

The session deploys with ``kubectl apply -k``; this module takes that deployment's objects away
(the namespace and the admission policies stay), installs the chart in their place with the
operator's values (image, pull policy, threads per core) and the node's paths moved by a
post-renderer exactly as the kustomize test overlay moves them, and at the end puts the kustomize
deployment back for the tests after it. The rendered objects are first validated by the real API
server (``kubectl apply --dry-run=server``).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.cluster.deploy import (
    DAEMONSET,
    NAMESPACE,
    Deployment,
    PinnedState,
    daemon_pods,
    delete_pod,
    node_paths,
    node_shows_registered,
    pinned_state,
    remove_kustomize_deploy,
    rollout,
    start_pinned_pod,
)
from tests.cluster.node import NODE_NAME, Node, wait_for

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "cmk-deviceplugin"
RELEASE = "cmk-deviceplugin"
DEVICE_PLUGINS = Path("/var/lib/kubelet/device-plugins")
KUBELET_OWN = {"kubelet.sock", "kubelet_internal_checkpoint"}  # its plugin and pod resources sockets


@dataclass
class Tier:
    deployed: Deployment
    renderer: Path
    dry_run: subprocess.CompletedProcess[str]

    @property
    def node(self) -> Node:
        return self.deployed.node

    def helm(self, *args: str, check: bool = True, timeout: float = 400) -> subprocess.CompletedProcess[str]:
        helm = self.node.bin / "helm"
        assert helm.exists(), f"{helm} missing: .ci/build-cluster builds it"
        result = subprocess.run([str(helm), f"--kubeconfig={self.node.kubeconfig}", "-n", NAMESPACE, *args],
                                capture_output=True, text=True, timeout=timeout, check=False)
        if check and result.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)}: {result.stderr}\n{self.node.log_tails()}")
        return result

    def values(self) -> list[str]:
        """What an operator sets for this node: the imported image, never pulled, one thread per core."""
        name, _, tag = self.node.product_image.rpartition(":")
        return ["--set", f"image.repository={name}", "--set", f"image.tag={tag}", "--set", "image.pullPolicy=Never",
                "--set", f"threadsPerCore={self.deployed.threads_per_core}",
                "--post-renderer", str(self.renderer)]


@pytest.fixture(scope="module")
def tier(deployed: Deployment) -> Iterator[Tier]:
    node = deployed.node
    renderer = node.path("helm-post-renderer")
    renderer.write_text(f"#!/bin/sh\ncd {ROOT} && exec {sys.executable} -m tests.cluster.postrender "
                        f"'{json.dumps(node_paths(node))}'\n")
    renderer.chmod(0o755)
    remove_kustomize_deploy(node)
    tier = Tier(deployed, renderer, subprocess.CompletedProcess([], 0))
    rendered = tier.helm("template", RELEASE, str(CHART), *tier.values(), "--set", "admission.enabled=true",
                         "--set", "createNamespace=true", "--namespace", NAMESPACE)
    tier.dry_run = node.kubectl("apply", "--dry-run=server", "-f", "-", input=rendered.stdout, check=False)
    try:
        yield tier
    finally:
        tier.helm("uninstall", RELEASE, "--wait", check=False)
        wait_for("the release's daemon pods are gone", lambda: not daemon_pods(node), 120)
        node.kubectl("apply", "-k", str(deployed.overlay))
        rollout(node)


@pytest.fixture(scope="module")
def installed(tier: Tier) -> Tier:
    tier.helm("install", RELEASE, str(CHART), *tier.values(), "--wait", "--timeout=5m")
    rollout(tier.node)
    return tier


@dataclass(frozen=True)
class Upgrade:
    daemons_before: set[str]
    daemons_after: set[str]
    before: PinnedState
    after: PinnedState
    config: str


@pytest.fixture(scope="module")
def upgraded(installed: Tier) -> Iterator[Upgrade]:
    node, deployed = installed.node, installed.deployed
    name = start_pinned_pod(node, deployed.served(), deployed.threads_per_core)
    try:
        before, daemons_before = pinned_state(node, name), daemon_pods(node)
        # keeps this node's plan (one exclusive core at most here), so the pinned pod's core stays valid
        installed.helm("upgrade", RELEASE, str(CHART), "--reuse-values", *installed.values(),
                       "--set", "config.exclusive-mode=spread", "--wait", "--timeout=5m")
        rollout(node)
        config = node.kubectl("-n", NAMESPACE, "exec", f"daemonset/{DAEMONSET}", "-c", "daemon", "--",
                              "cat", "/etc/cmk/config.yaml").stdout
        yield Upgrade(daemons_before, daemon_pods(node), before, pinned_state(node, name), config)
    finally:
        delete_pod(node, name)


def test_the_chart_objects_pass_the_api_servers_validation(tier: Tier) -> None:
    assert tier.dry_run.returncode == 0, tier.dry_run.stderr
    kinds = re.findall(r"^(\S+) \S+ \(server dry run\)$", tier.dry_run.stdout, re.MULTILINE)
    assert {k.split("/")[0].split(".")[0] for k in kinds} >= {
        "daemonset", "configmap", "serviceaccount", "networkpolicy", "namespace",
        "validatingadmissionpolicy", "validatingadmissionpolicybinding"}, tier.dry_run.stdout


def test_helm_install_serves_the_pools_on_the_node(installed: Tier) -> None:
    node = installed.node
    status = node.kubectl_json("-n", NAMESPACE, "get", "daemonset", DAEMONSET)["status"]
    assert (status["desiredNumberScheduled"], status["numberReady"]) == (1, 1)
    assert node_shows_registered(node)
    capacity = node.kubectl_json("get", "node", NODE_NAME)["status"]["capacity"]
    assert installed.deployed.served() <= set(capacity)
    listed = installed.helm("list", "-o", "json")
    (release,) = [r for r in json.loads(listed.stdout) if r["name"] == RELEASE]
    assert release["status"] == "deployed"


def test_helm_upgrade_with_a_config_change_rolls_the_daemon_and_leaves_the_pinned_pod(upgraded: Upgrade) -> None:
    assert "exclusive-mode: spread" in upgraded.config
    assert len(upgraded.daemons_after) == 1 and upgraded.daemons_after.isdisjoint(upgraded.daemons_before)
    assert upgraded.after == upgraded.before and upgraded.after.restarts == 0


def uninstall_docs() -> str:
    """Every section of README and docs/ whose heading names uninstalling."""
    text = ""
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for section in re.split(r"(?m)^(?=#+ )", doc.read_text()):
            if re.match(r"#+ .*[Uu]ninstall", section):
                text += section
    return text


def node_files(node: Node) -> set[Path]:
    """What the product may leave on the node: its host directories' files, and its own in the plugin directory."""
    mounted = node_paths(node)
    found = {p for where in mounted.values() if Path(where).is_dir() for p in Path(where).rglob("*")
             if not p.is_dir()}
    found |= set(DEVICE_PLUGINS.iterdir()) if DEVICE_PLUGINS.is_dir() else set()
    return {p for p in found if p.name not in KUBELET_OWN}


def test_helm_uninstall_leaves_nothing_on_the_node_the_docs_do_not_name(upgraded: Upgrade, installed: Tier) -> None:
    node = installed.node
    installed.helm("uninstall", RELEASE, "--wait", "--timeout=3m")
    wait_for("the daemon pods are gone", lambda: not daemon_pods(node), 120)
    left = node.kubectl_json("-n", NAMESPACE, "get", "daemonset,configmap,serviceaccount,networkpolicy",
                             "-l", "app.kubernetes.io/part-of=cmk-deviceplugin")["items"]
    assert not left, [o["metadata"]["name"] for o in left]
    docs = uninstall_docs()
    assert docs, "no section of README or docs/ says how to uninstall"
    unnamed = sorted(str(p) for p in node_files(node) if not re.search(rf"[`/]{re.escape(p.name)}`", docs))
    assert not unnamed, f"left on the node and named by no uninstall section: {unnamed}"
