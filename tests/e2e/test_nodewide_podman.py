"""The node-wide hook confines every container under podman + runc with ``--hooks-dir``, checked from the host.

The hooks.d declaration and the infra record are the real ``cmk install``'s
files' shape (:mod:`deviceplugin.host.nodewide`), in a temporary hooks dir and
record: the highest CPU's core plays the exclusive pool, every other CPU infra.
An ordinary container (no CDI device) must end on the infra CPUs and stay
there; a pinned one (a core's CDI device) gets its core; a noisy ordinary
container's threads are sampled from ``/proc/PID/task/*/stat`` and never run
on the exclusive core, against a baseline without the hook that does.
"""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path

import pytest

from deviceplugin.model.cpulist import parse_cpu_list
from tests.support.nodewide import NodeWide, host_view, start
from tests.support.podman import (
    container_pid,
    descendants,
    podman,
    run_with_hooks,
    weighty_cgroup_parent,
)
from tests.support.threads import samples_on_each

pytestmark = pytest.mark.e2e

NOISY = ("sh", "-c", "(while :; do :; done) & (while :; do :; done) & echo ready; while :; do :; done")


def test_an_ordinary_container_is_born_on_the_infra_cpus(node: NodeWide, image: str, container_name: str) -> None:
    start(node.hooks_dir, container_name, image)
    _, allowed, cpus = host_view(container_name)
    assert (allowed, cpus) == (node.infra, node.infra)


def test_taskset_inside_an_ordinary_container_cannot_reach_an_exclusive_core(node: NodeWide, image: str,
                                                                            container_name: str) -> None:
    start(node.hooks_dir, container_name, image)
    reach = podman("exec", container_name, "taskset", "-c", node.core, "true", check=False)
    assert reach.returncode != 0
    mask = format(sum(1 << c for c in parse_cpu_list(node.core) | parse_cpu_list(node.infra)), "x")
    podman("exec", container_name, "taskset", "-p", mask, "1")  # asking for every CPU gets the cpuset's only
    _, allowed, cpus = host_view(container_name)
    assert (allowed, cpus) == (node.infra, node.infra)


def test_a_container_whose_spec_names_its_cpus_keeps_them(node: NodeWide, image: str, container_name: str) -> None:
    """podman's ``--cpuset-cpus`` lands in ``linux.resources.cpu.cpus``, as the kubelet's static CPU manager's
    choice does through containerd: the hook leaves the container on those CPUs, the record's infra aside."""
    start(node.hooks_dir, container_name, image, "--cpuset-cpus", node.core)
    _, allowed, cpus = host_view(container_name)
    assert (allowed, cpus) == (node.core, node.core)


def test_a_pinned_container_gets_its_pool(node: NodeWide, image: str, container_name: str) -> None:
    start(node.hooks_dir, container_name, image, "--device", f"{node.kind}=core")
    _, allowed, cpus = host_view(container_name)
    assert (allowed, cpus) == (node.core, node.core)


def noisy_samples(hooks_dir: Path | None, image: str, name: str, cpus: frozenset[int], seconds: float = 3.0) -> tuple[int, int]:
    """(samples of a noisy container's threads on ``cpus``, all samples), sampled every 10 ms for ``seconds``."""
    with weighty_cgroup_parent() as parent:
        try:
            result = run_with_hooks(hooks_dir, "-d", "--name", name, "--cgroup-parent", parent, image, *NOISY,
                                    check=False)
            assert result.returncode == 0, result.stderr
            pid = container_pid(name)
            time.sleep(0.2)  # the loops have forked
            return samples_on_each({pid: partial(descendants, pid)}, cpus, seconds)[pid]
        finally:
            podman("rm", "-f", "-t", "0", name, check=False)


def test_a_noisy_ordinary_container_never_runs_on_an_exclusive_core(node: NodeWide, image: str,
                                                                    container_name: str) -> None:
    exclusive = parse_cpu_list(node.core)
    baseline, baseline_total = noisy_samples(None, image, container_name, exclusive)
    confined, confined_total = noisy_samples(node.hooks_dir, image, container_name + "-hook", exclusive)
    print(f"samples on exclusive CPUs {node.core}: baseline {baseline} of {baseline_total}, "
          f"with the node-wide hook {confined} of {confined_total}")
    assert baseline > 0 and baseline_total > 0  # without the hook the scheduler uses the exclusive core
    assert confined == 0 and confined_total > 0
