"""An unmodified container is confined by the CDI device's hook under podman + runc, checked from the host.

The real daemon (``cmk device-plugin`` on this machine's own sysfs, CPU 1
as the exclusive-non-isolcpus pool, CPU 0 infra) serves the kubelet
stand-in; its spec file lands in a temporary CDI dir. podman 4.3 reads specs
only from /etc/cdi and /var/run/cdi, so a uniquely named link there points at
the daemon's file for the module's duration. Each container is started as
the kubelet would: the ``--device`` names, env and mounts of a real Allocate
answer. The image holds only static busybox: nothing in the container pins
anything; the runtime's hook does.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from deviceplugin.host import cdi
from deviceplugin.model.plan import RESOURCE_NAMES, Pool
from deviceplugin.standin import ContainerSpec, Kubelet, PodSpec
from deviceplugin.standin.answers import ContainerAnswer
from pinner import hook
from pinner.contract import ENV_LIST
from tests.e2e.podman import env_flags, podman, run

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
RUNTIME_CDI_DIR = Path("/var/run/cdi")
NON_ISOL, INFRA = RESOURCE_NAMES[Pool.EXCLUSIVE_NON_ISOLCPUS], RESOURCE_NAMES[Pool.INFRA]


Allocate = Callable[[dict[str, int]], ContainerAnswer]


@dataclass(frozen=True)
class Node:
    kubelet: Kubelet
    spec: Path  # the daemon's own spec file


@pytest.fixture(scope="module")
def node(install_dir: Path) -> Iterator[Node]:
    """The daemon serving the stand-in, its spec linked where podman reads specs; stopped and unlinked after."""
    if os.cpu_count() != 2 or sorted(os.sched_getaffinity(0)) != [0, 1]:
        pytest.fail("this test's plan (CPU 1 exclusive-non-isolcpus, CPU 0 infra) needs CPUs 0 and 1")
    work = Path(tempfile.mkdtemp(prefix="cmk-cdi-e2e-", dir="/tmp"))  # short: unix socket paths
    plugin_dir, cdi_dir = work / "dp", work / "cdi"
    plugin_dir.mkdir()
    kubelet = Kubelet(plugin_dir, seed=0)
    kubelet.start()
    daemon = subprocess.Popen(
        [sys.executable, "-m", "deviceplugin", "device-plugin", "--kubelet-dir", str(plugin_dir),
         "--install-dir", str(install_dir), "--cdi-dir", str(cdi_dir), "--excl-non-isolcpus", "1"],
        cwd=ROOT, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    spec = cdi_dir / cdi.SPEC_FILE_NAME
    link = RUNTIME_CDI_DIR / f"cmk-e2e-{uuid.uuid4().hex[:10]}.json"
    try:
        kubelet.wait_for(lambda: kubelet.allocatable().get(NON_ISOL, 0) > 0 and kubelet.allocatable().get(INFRA, 0) > 0,
                         what="the daemon registered its pools")
        RUNTIME_CDI_DIR.mkdir(parents=True, exist_ok=True)
        link.symlink_to(spec)
        yield Node(kubelet, spec)
    finally:
        link.unlink(missing_ok=True)
        daemon.send_signal(signal.SIGTERM)
        _, stderr = daemon.communicate(timeout=30)
        kubelet.stop()
        shutil.rmtree(work, ignore_errors=True)
    assert daemon.returncode == 0, stderr
    assert not spec.exists()  # the daemon removed its spec at exit


@pytest.fixture
def allocate(node: Node) -> Iterator[Allocate]:
    """``allocate(limits)``: a real Allocate answer for a one-container pod the stand-in admits; deleted after."""
    pods: list[str] = []

    def admit(limits: dict[str, int]) -> ContainerAnswer:
        name = f"e2e-{uuid.uuid4().hex[:8]}"
        pods.append(name)
        return node.kubelet.admit(PodSpec(name, containers=(ContainerSpec("c", limits=limits),))).container("c").answer

    yield admit
    for name in pods:
        node.kubelet.delete_pod(name)


def answer_flags(answer: ContainerAnswer) -> list[str]:
    """What the runtime gets from the kubelet: CDI devices, env, mounts."""
    devices = [flag for name in answer.cdi_devices for flag in ("--device", name)]
    mounts = [flag for m in answer.mounts for flag in ("-v", f"{m.host_path}:{m.container_path}:{'ro' if m.read_only else 'rw'}")]
    return [*devices, *env_flags(answer.envs), *mounts]


def host_view(name: str) -> tuple[int, str, str]:
    """(PID, Cpus_allowed_list, its cpuset cgroup's cpuset.cpus) of the container's process, read on the host."""
    pid = int(podman("inspect", "--format", "{{.State.Pid}}", name).stdout)
    with open(f"/proc/{pid}/status") as f:
        allowed = next(line.split(":", 1)[1].strip() for line in f if line.startswith("Cpus_allowed_list:"))
    with open(f"/proc/{pid}/cgroup") as f:
        path = next(line.rstrip("\n").split(":", 2)[2] for line in f if "cpuset" in line.split(":")[1].split(","))
    cpus = (Path("/sys/fs/cgroup/cpuset") / path.lstrip("/") / "cpuset.cpus").read_text().strip()
    return pid, allowed, cpus


def start(name: str, answer: ContainerAnswer, image: str, *command: str) -> None:
    result = run("-d", "--name", name, *answer_flags(answer), image, *command, check=False)
    assert result.returncode == 0, result.stderr
    for _ in range(1000):  # a bounded wait for the script's first line
        if "ready" in podman("logs", name).stdout:
            return
    raise AssertionError(f"container {name} never printed ready: {podman('logs', name).stderr}")


SLEEPER = ("sh", "-c", "echo ready; exec sleep inf")


def test_hook_confines_the_cgroup_and_the_process(allocate: Allocate, image: str, container_name: str) -> None:
    answer = allocate({NON_ISOL: 1})
    assert answer.cdi_devices == ("cmk.intel.com/cpus=exclusive-non-isolcpus",)
    assigned = answer.envs["CMK_CPUS_EXCLUSIVE_NON_ISOLCPUS"]
    start(container_name, answer, image, *SLEEPER)
    _, allowed, cpus = host_view(container_name)
    assert (allowed, cpus) == (assigned, assigned) == ("1", "1")


def test_a_process_asking_for_every_cpu_stays_confined(allocate: Allocate, image: str, container_name: str) -> None:
    answer = allocate({NON_ISOL: 1})
    script = "taskset -p 3 $$ > /dev/null; echo ready; exec sleep inf"
    start(container_name, answer, image, "sh", "-c", script)
    podman("exec", container_name, "taskset", "-p", "3", "1")  # and again from outside its first process
    _, allowed, cpus = host_view(container_name)
    assert (allowed, cpus) == ("1", "1")


def test_two_pools_give_the_union_and_one_hook(allocate: Allocate, image: str, container_name: str) -> None:
    answer = allocate({NON_ISOL: 1, INFRA: 1})
    assert sorted(answer.cdi_devices) == ["cmk.intel.com/cpus=exclusive-non-isolcpus", "cmk.intel.com/cpus=infra"]
    start(container_name, answer, image, *SLEEPER)
    _, allowed, cpus = host_view(container_name)
    assert (allowed, cpus) == ("0-1", "0-1")
    container_id = podman("inspect", "--format", "{{.Id}}", container_name).stdout.strip()
    config = json.loads(Path(f"/var/lib/containers/storage/overlay-containers/{container_id}/userdata/config.json")
                        .read_text())
    assert [h["args"] for h in config["hooks"]["createRuntime"]] == [list(hook.ARGS)]
    assert config["process"]["env"].count(cdi.CONFINED_ENV) == 1


def test_a_container_without_cpus_in_its_env_does_not_start(allocate: Allocate, image: str) -> None:
    answer = allocate({INFRA: 1})
    devices = [flag for name in answer.cdi_devices for flag in ("--device", name)]
    result = run("--rm", *devices, image, "sh", "-c", "echo started", check=False)  # the env lost on the way
    assert result.returncode != 0
    assert "started" not in result.stdout
    expected = re.compile(
        r"cmk hook: error: the container's env \(process\.env in /\S+/userdata/config\.json\) sets none of "
        + re.escape(f"{ENV_LIST}: nothing to confine it to; {hook.NO_CPUS_HINT}")
        + "$"
    )
    assert any(expected.search(line) for line in result.stderr.splitlines()), result.stderr
