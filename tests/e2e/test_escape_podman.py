"""No root container widens its cpuset under podman + runc on this machine's cgroup v1 (issue 20).

The attacker (``tests/support/escape.c``) runs as the container's uid 0, not
privileged: with the default capabilities, with ``--cap-drop ALL``, and with
seccomp unconfined; by ``unshare`` and by one raw ``clone``. A pinned
container (a core's CDI device) must end on its core and an ordinary one (the
node-wide hook) on the infra CPUs, read from the host: the affinity the
attacker ends with, and its container cgroup's ``cpuset.cpus``. Without
the hook's bound (``docs/design/hook.md``) the attacker reaches every CPU: the
pinner tier's control case (``tests/pinner/test_hook_escape.py``) shows it on
the same kernel, and these tests fail with the hook of before the bound.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from deviceplugin.model import hookcontract as hook
from deviceplugin.model.confinement import Reason
from tests.e2e.conftest import ROOT
from tests.support import escape
from tests.support.nodewide import NodeWide
from tests.support.podman import (
    CGROUP_V1,
    cgroup_dir,
    container_pid,
    podman,
    run_with_hooks,
    scratch_cgroup_parent,
)

pytestmark = pytest.mark.e2e

ATTACKER = "/escape"
SECURITY = {
    "default": (),
    "cap-drop-all": ("--cap-drop", "ALL"),
    "seccomp-unconfined": ("--security-opt", "seccomp=unconfined"),
}


@pytest.fixture(scope="module")
def attacker(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return escape.build(tmp_path_factory.mktemp("escape") / "escape")


def attack(node: NodeWide, attacker: Path, image: str, name: str, mode: str, security: str, *,
           pinned: bool, runtime_args: tuple[str, ...] = ()) -> tuple[escape.Attempt, str]:
    """(what the attacker reached, its container cgroup's cpuset.cpus read on the host after it tried)."""
    device = ("--device", f"{node.kind}=core") if pinned else ()
    script = f"{ATTACKER} {mode}; echo done; exec sleep inf"
    result = run_with_hooks(node.hooks_dir, "-d", "--name", name, *SECURITY[security], *device, *runtime_args,
                            "-v", f"{attacker}:{ATTACKER}:ro", image, "sh", "-c", script, check=False)
    assert result.returncode == 0, result.stderr
    for _ in range(600):  # a bounded wait for the attacker's line
        logs = podman("logs", name).stdout
        if "done" in logs:
            break
        time.sleep(0.05)
    pid = container_pid(name)
    cgroup = cgroup_dir(pid, "cpuset")
    if cgroup.name == hook.CONFINED_CGROUP:
        cgroup = cgroup.parent
    return escape.parse(logs), (cgroup / "cpuset.cpus").read_text().strip()


@pytest.mark.parametrize("security", SECURITY)
@pytest.mark.parametrize("mode", escape.MODES)
@pytest.mark.parametrize("pinned", [True, False], ids=["pinned", "ordinary"])
def test_a_root_container_stays_on_its_cpus(node: NodeWide, attacker: Path, image: str, container_name: str,
                                           mode: str, security: str, pinned: bool) -> None:
    attempt, cgroup_cpus = attack(node, attacker, image, container_name, mode, security, pinned=pinned)
    expected = node.core if pinned else node.infra
    assert (attempt.affinity, cgroup_cpus) == (expected, expected), attempt
    assert not attempt.widened_cgroup, attempt


@pytest.mark.parametrize("mode", escape.MODES)
def test_a_root_pinned_container_whose_spec_names_other_cpus_stays_on_its_own(
        node: NodeWide, attacker: Path, image: str, container_name: str, mode: str) -> None:
    """The node-wide hook leaves a container whose spec names CPUs alone only when it holds no pool device.

    ``--cpuset-cpus`` writes ``linux.resources.cpu.cpus`` into the spec, as the kubelet's static CPU
    manager has containerd do: a pinned container still gets its core and the hook's bound, and its
    root process, trying every way out, stays there.
    """
    attempt, cgroup_cpus = attack(node, attacker, image, container_name, mode, "default", pinned=True,
                                  runtime_args=("--cpuset-cpus", node.infra))
    assert (attempt.affinity, cgroup_cpus) == (node.core, node.core), attempt
    assert not attempt.widened_cgroup, attempt


@pytest.fixture
def pod_parent(node: NodeWide) -> Iterator[str]:
    """A ``--cgroup-parent`` playing a pod whose other child (conmon's cgroup here, the sandbox in Kubernetes) holds
    only the exclusive core, so the pod's containers are given no other CPU."""
    with scratch_cgroup_parent() as parent:
        cpuset = CGROUP_V1 / "cpuset" / parent.lstrip("/")
        (cpuset / "conmon").mkdir(parents=True)
        for directory, cpus in ((cpuset, (CGROUP_V1 / "cpuset" / "cpuset.cpus").read_text()), (cpuset / "conmon", node.core)):
            (directory / "cpuset.mems").write_text((CGROUP_V1 / "cpuset" / "cpuset.mems").read_text())
            (directory / "cpuset.cpus").write_text(cpus)
        yield parent


@pytest.mark.parametrize("mode", escape.MODES)
def test_a_process_exec_d_later_is_bound_by_its_pod(node: NodeWide, attacker: Path, image: str,
                                                    container_name: str, pod_parent: str, mode: str) -> None:
    """``podman exec`` (as ``kubectl exec``) joins the container's own cgroup, not the one below: the pod bounds it."""
    result = run_with_hooks(node.hooks_dir, "-d", "--name", container_name, "--cgroup-parent", pod_parent,
                            "--device", f"{node.kind}=core", "-v", f"{attacker}:{ATTACKER}:ro", image,
                            "sleep", "inf", check=False)
    assert result.returncode == 0, result.stderr
    attempt = escape.parse(podman("exec", container_name, ATTACKER, mode).stdout)
    assert (attempt.steps["mount"], attempt.affinity) == ("ok", node.core), attempt
    assert not attempt.widened_cgroup, attempt


def test_the_runtime_lifecycle_works_below_the_bound(node: NodeWide, image: str,
                                                     container_name: str) -> None:
    """stats, top, exec, pause, update, kill and rm all work on a container whose processes the hook moved below."""
    result = run_with_hooks(node.hooks_dir, "-d", "--name", container_name, "--device", f"{node.kind}=core", image,
                            "sleep", "inf", check=False)
    assert result.returncode == 0, result.stderr
    pid = container_pid(container_name)
    leaf = cgroup_dir(pid, "cpuset")
    assert leaf.name == hook.CONFINED_CGROUP
    assert podman("stats", "--no-stream", "--format", "{{.PIDs}}", container_name).stdout.split() == ["1"]
    assert "sleep" in podman("top", container_name, "args").stdout
    assert podman("exec", container_name, "true").returncode == 0
    podman("pause", container_name)
    podman("unpause", container_name)
    podman("update", "--cpus", "0.5", container_name)
    podman("kill", container_name)
    podman("rm", container_name)
    assert not leaf.parent.exists()  # the runtime removed the container's cgroup, the one below included


def test_a_container_widened_by_a_process_exec_d_later_is_reported_as_widened(
        node: NodeWide, attacker: Path, image: str, container_name: str) -> None:
    """Under podman's own parent (conmon's cgroup there holds every CPU) the pod bound cannot narrow anything, so a
    process exec'd later does widen its container: ``cmk describe`` says so, and not "started before the hook"."""
    result = run_with_hooks(node.hooks_dir, "-d", "--name", container_name, "-v", f"{attacker}:{ATTACKER}:ro",
                            image, "sleep", "inf", check=False)  # an ordinary container: on infra
    assert result.returncode == 0, result.stderr
    attempt = escape.parse(podman("exec", container_name, ATTACKER, "unshare").stdout)
    assert attempt.widened_cgroup, attempt  # the precondition: nothing above bounds it here
    full_id = podman("inspect", "--format", "{{.Id}}", container_name).stdout.strip()
    described = subprocess.run([sys.executable, "-m", "deviceplugin", "describe", "-o", "json", "--usage-window", "0",
                                "--excl-non-isolcpus", node.core], cwd=ROOT, capture_output=True, text=True,
                               check=True, timeout=60)
    found = {c["full_id"]: c for c in json.loads(described.stdout)["unconfined"]["containers"]}
    assert found[full_id]["reason"] == Reason.WIDENED
    assert found[full_id]["exclusive_cpus"] == node.core
