"""A DaemonSet update (a config change re-applied with kubectl apply -k) rolls the daemon under a pinned pod.

The config's content hash is in its ConfigMap's name, so a changed ``config.yaml`` changes the pod
template and the real DaemonSet controller replaces the daemon (maxUnavailable 1, maxSurge 0). The
change here (``exclusive-mode: spread``) keeps this node's plan, so the pinned pod's core stays
valid. The pinned pod must not notice: same process, same CPUs, no restart.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.cluster.deploy import (
    DEPLOY,
    NAMESPACE,
    Deployment,
    PinnedState,
    delete_pod,
    pinned_state,
    rollout,
    start_pinned_pod,
)


@dataclass(frozen=True)
class Update:
    daemons_before: set[str]  # the daemon pods' UIDs
    daemons_after: set[str]
    before: PinnedState
    after: PinnedState


def daemon_pods(deployed: Deployment) -> set[str]:
    pods = deployed.node.kubectl_json("-n", NAMESPACE, "get", "pods", "-l", "app.kubernetes.io/component=daemon")
    return {p["metadata"]["uid"] for p in pods["items"]}


@pytest.fixture(scope="module")
def update(deployed: Deployment) -> Iterator[Update]:
    node = deployed.node
    name = start_pinned_pod(node, deployed.served(), deployed.threads_per_core)
    before = pinned_state(node, name)
    daemons_before = daemon_pods(deployed)
    changed = node.path("overlay-changed")
    changed.mkdir(exist_ok=True)
    config = (DEPLOY / "base" / "config.yaml").read_text()
    assert "exclusive-mode: packed" in config
    (changed / "config.yaml").write_text(config.replace("exclusive-mode: packed", "exclusive-mode: spread"))
    (changed / "kustomization.yaml").write_text(json.dumps({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(deployed.overlay, changed)],
        "configMapGenerator": [{"name": "cmk-config", "behavior": "replace", "files": ["config.yaml"]}]}))
    try:
        node.kubectl("apply", "-k", str(changed))
        rollout(node)
        yield Update(daemons_before, daemon_pods(deployed), before, pinned_state(node, name))
    finally:
        delete_pod(node, name)
        node.kubectl("apply", "-k", str(deployed.overlay))
        rollout(node)


def test_the_update_replaced_the_daemon(update: Update) -> None:
    assert len(update.daemons_after) == 1 and update.daemons_after.isdisjoint(update.daemons_before)


def test_the_pinned_pod_is_untouched(update: Update) -> None:
    assert update.after == update.before
    assert update.after.restarts == 0
