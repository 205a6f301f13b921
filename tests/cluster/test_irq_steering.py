"""IRQ steering through the real kubelet: the DaemonSet with deploy/overlays/irq-steering's patch keeps this
node's device IRQ masks off the core a pinned pod holds, and gives every mask back when the pod goes.

The daemon runs as the DaemonSet runs it (uid 0, no capability) and writes the host's /proc/irq through the
overlay's hostPath mount; the test reads the host's own /proc/irq. An IRQ the kernel refuses (the daemon
logs it as unmovable) may keep the held CPUs; every other one may not.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from deviceplugin.model.cpulist import parse_cpu_list
from tests.cluster.deploy import (
    DAEMONSET,
    DEPLOY,
    NAMESPACE,
    Deployment,
    delete_pod,
    pinned_state,
    rollout,
    start_pinned_pod,
)
from tests.cluster.node import Node, wait_for

IRQ = Path("/proc/irq")


def masks() -> dict[str, frozenset[int]]:
    """This node's IRQ masks, read from the kernel: each numbered IRQ's and the default one."""
    found = {}
    for entry in IRQ.iterdir():
        if entry.name.isdigit():
            try:
                found[entry.name] = parse_cpu_list((entry / "smp_affinity_list").read_text().strip())
            except OSError:
                continue
    value = int((IRQ / "default_smp_affinity").read_text().strip().replace(",", ""), 16)
    found["default"] = frozenset(bit for bit in range(value.bit_length()) if value >> bit & 1)
    return found


def unmovable(node: Node) -> set[str]:
    """The IRQs the daemon logged as refused by the kernel."""
    logs = node.kubectl("-n", NAMESPACE, "logs", f"daemonset/{DAEMONSET}", "-c", "daemon", check=False).stdout
    return set(re.findall(r"event=irq_unmovable irq=(\w+)", logs))


@dataclass(frozen=True)
class Steered:
    held: frozenset[int]
    before: dict[str, frozenset[int]]
    during: dict[str, frozenset[int]]
    after: dict[str, frozenset[int]]
    unmovable: set[str]


@pytest.fixture(scope="module")
def steered(deployed: Deployment) -> Iterator[Steered]:
    node = deployed.node
    overlay = node.path("overlay-irq-steering")
    overlay.mkdir(exist_ok=True)
    shipped = yaml.safe_load((DEPLOY / "overlays" / "irq-steering" / "kustomization.yaml").read_text())
    (overlay / "kustomization.yaml").write_text(json.dumps({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(deployed.overlay, overlay)], "patches": shipped["patches"]}))
    before = masks()
    pod = ""
    try:
        node.kubectl("apply", "-k", str(overlay))
        rollout(node)
        pod = start_pinned_pod(node, deployed.served(), deployed.threads_per_core)
        (held,) = {parse_cpu_list(cpus) for _, cpus, _ in pinned_state(node, pod).containers.values()}
        wait_for(f"every movable IRQ mask off the held CPUs {sorted(held)}",
                 lambda: not {irq for irq, m in masks().items() if m & held} - unmovable(node), 60)
        during, refused = masks(), unmovable(node)
        delete_pod(node, pod)
        pod = ""
        wait_for("every IRQ mask given back as it was", lambda: masks() == before, 60)
        yield Steered(held, before, during, masks(), refused)
    finally:
        if pod:
            delete_pod(node, pod)
        node.kubectl("apply", "-k", str(deployed.overlay))  # steering off: a recorded mask left goes back
        rollout(node)


def test_no_movable_irq_mask_names_the_held_cpus_while_the_pod_runs(steered: Steered) -> None:
    touched = {irq for irq, mask in steered.before.items() if mask & steered.held} - steered.unmovable
    assert touched, f"no IRQ mask named the held CPUs {sorted(steered.held)} before: nothing was tried"
    assert all(not steered.during[irq] & steered.held for irq in touched if irq in steered.during)


def test_every_mask_is_given_back_as_found_when_the_pod_goes(steered: Steered) -> None:
    assert steered.after == steered.before
