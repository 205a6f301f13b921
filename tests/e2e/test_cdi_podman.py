"""An unmodified container is confined by its CDI devices' hooks under podman + runc, checked from the host.

The real daemon (``cmk device-plugin`` on this machine's own sysfs: the core
of the highest CPU as the exclusive-non-isolcpus pool, every other CPU infra)
serves the kubelet stand-in; its spec file lands in a temporary CDI dir.
podman 4.3 reads specs only from /etc/cdi and /var/run/cdi, so a uniquely
named link there points at the daemon's file for the module's duration. Each
container is started as the kubelet would: the ``--device`` names, env and
mounts of a real Allocate answer, then the pod spec's own env after them. The
image holds only static busybox: nothing in the container pins anything; the
runtime's hooks do, with the CPUs their CDI devices carry.
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
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from deviceplugin.host.sysfs import discover
from deviceplugin.model import cdispec
from deviceplugin.model import hookcontract as hook
from deviceplugin.model.cpulist import format_cpu_list, parse_cpu_list
from deviceplugin.model.devices import core_device_ids
from deviceplugin.model.pinnercontract import ENV_NAMES, LIST_HINT
from deviceplugin.model.plan import RESOURCE_NAMES, Pool
from deviceplugin.standin import ContainerSpec, Kubelet, KubeletOptions, PodSpec
from deviceplugin.standin.runoptions import ContainerAnswer
from tests.support.nodewide import host_view, plan_cpus
from tests.support.podman import env_flags, hook_devices, podman, run

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
RUNTIME_CDI_DIR = Path("/var/run/cdi")
NON_ISOL, INFRA = RESOURCE_NAMES[Pool.EXCLUSIVE_NON_ISOLCPUS], RESOURCE_NAMES[Pool.INFRA]


Allocate = Callable[[dict[str, int]], ContainerAnswer]


@dataclass(frozen=True)
class Node:
    kubelet: Kubelet
    spec: Path  # the daemon's own spec file
    install_dir: Path
    core: str  # the exclusive-non-isolcpus core's CPUs, kernel list form
    infra: str  # the infra pool's CPUs
    every: str  # every CPU this machine lets us use


@pytest.fixture(scope="module")
def node(install_dir: Path) -> Iterator[Node]:
    """The daemon serving the stand-in, its spec linked where podman reads specs; stopped and unlinked after."""
    core, infra = plan_cpus()
    work = Path(tempfile.mkdtemp(prefix="cmk-cdi-e2e-", dir="/tmp"))  # short: unix socket paths
    plugin_dir, cdi_dir = work / "dp", work / "cdi"
    plugin_dir.mkdir()
    kubelet = Kubelet(plugin_dir, KubeletOptions(seed=0))
    kubelet.start()
    daemon = subprocess.Popen(
        [sys.executable, "-m", "deviceplugin", "device-plugin", "--kubelet-dir", str(plugin_dir),
         "--install-dir", str(install_dir), "--cdi-dir", str(cdi_dir), "--excl-non-isolcpus", format_cpu_list(core)],
        cwd=ROOT, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    spec = cdi_dir / cdispec.SPEC_FILE_NAME
    link = RUNTIME_CDI_DIR / f"cmk-e2e-{uuid.uuid4().hex[:10]}.json"
    try:
        kubelet.wait_for(lambda: kubelet.allocatable().get(NON_ISOL, 0) > 0 and kubelet.allocatable().get(INFRA, 0) > 0,
                         what="the daemon registered its pools")
        RUNTIME_CDI_DIR.mkdir(parents=True, exist_ok=True)
        link.symlink_to(spec)
        yield Node(kubelet, spec, install_dir, format_cpu_list(core), format_cpu_list(infra),
                   format_cpu_list(core | infra))
    finally:
        link.unlink(missing_ok=True)
        daemon.send_signal(signal.SIGTERM)
        _, stderr = daemon.communicate(timeout=30)
        kubelet.stop()
        kept = spec.exists()
        shutil.rmtree(work, ignore_errors=True)
    assert daemon.returncode == 0, stderr
    assert kept  # the daemon leaves its spec: restarts replay the names while it is away


def core_device(cpus: str) -> str:
    """The CDI device of this machine's core with ``cpus``, as the device model names it (never parsed)."""
    names = core_device_ids(discover().cores)
    return cdispec.qualified_name(next(name for core, name in names.items() if format_cpu_list(core.cpus) == cpus))


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


def answer_flags(answer: ContainerAnswer, pod_env: Mapping[str, str] = {}) -> list[str]:
    """What the runtime gets from the kubelet: CDI devices, the plugins' env then the pod spec's own, mounts."""
    devices = [flag for name in answer.cdi_devices for flag in ("--device", name)]
    mounts = [flag for m in answer.mounts for flag in ("-v", f"{m.host_path}:{m.container_path}:{'ro' if m.read_only else 'rw'}")]
    return [*devices, *env_flags(answer.envs), *env_flags(pod_env), *mounts]


def oci_config(name: str) -> dict[str, object]:
    container_id = podman("inspect", "--format", "{{.Id}}", name).stdout.strip()
    path = Path(f"/var/lib/containers/storage/overlay-containers/{container_id}/userdata/config.json")
    return json.loads(path.read_text())


def start(name: str, answer: ContainerAnswer, image: str, *command: str, pod_env: Mapping[str, str] = {}) -> None:
    result = run("-d", "--name", name, *answer_flags(answer, pod_env), image, *command, check=False)
    assert result.returncode == 0, result.stderr
    for _ in range(1000):  # a bounded wait for the script's first line
        if "ready" in podman("logs", name).stdout:
            return
    raise AssertionError(f"container {name} never printed ready: {podman('logs', name).stderr}")


SLEEPER = ("sh", "-c", "echo ready; exec sleep inf")


def test_hook_confines_the_cgroup_and_the_process(node: Node, allocate: Allocate, image: str,
                                                  container_name: str) -> None:
    answer = allocate({NON_ISOL: 1})
    assert answer.cdi_devices == (core_device(node.core),)
    assert format_cpu_list(parse_cpu_list(answer.envs["CMK_CPUS_EXCLUSIVE_NON_ISOLCPUS"])) == node.core
    start(container_name, answer, image, *SLEEPER)
    _, allowed, cpus = host_view(container_name)
    assert (allowed, cpus) == (node.core, node.core)


def test_a_process_asking_for_every_cpu_stays_confined(node: Node, allocate: Allocate, image: str,
                                                       container_name: str) -> None:
    answer = allocate({NON_ISOL: 1})
    mask = format(sum(1 << c for c in parse_cpu_list(node.every)), "x")
    script = f"taskset -p {mask} $$ > /dev/null; echo ready; exec sleep inf"
    start(container_name, answer, image, "sh", "-c", script)
    podman("exec", container_name, "taskset", "-p", mask, "1")  # and again from outside its first process
    _, allowed, cpus = host_view(container_name)
    assert (allowed, cpus) == (node.core, node.core)


@pytest.mark.parametrize("forged", [*ENV_NAMES, "all four"])
def test_a_container_forging_a_pool_env_stays_on_the_cpus_it_holds(node: Node, allocate: Allocate, image: str,
                                                                   container_name: str, forged: str) -> None:
    """The issue's escape: an infra slot plus the pod's own CMK_CPUS_* naming the exclusive core (and more)."""
    answer = allocate({INFRA: 1})
    pod_env = {name: node.every for name in (ENV_NAMES if forged == "all four" else [forged])}
    start(container_name, answer, image, *SLEEPER, pod_env=pod_env)
    _, allowed, cpus = host_view(container_name)
    assert (allowed, cpus) == (node.infra, node.infra)
    env = oci_config(container_name)["process"]["env"]  # type: ignore[index]
    assert all(f"{name}={node.every}" in env for name in pod_env)  # the forgery did reach the container


def test_two_pools_give_the_union_from_one_hook_per_device(node: Node, allocate: Allocate, image: str,
                                                           container_name: str) -> None:
    answer = allocate({NON_ISOL: 1, INFRA: 1})
    assert sorted(answer.cdi_devices) == sorted(
        [core_device(node.core), cdispec.qualified_name("infra")])
    start(container_name, answer, image, *SLEEPER, pod_env={"CMK_CPUS_INFRA": ""})  # an emptied env changes nothing
    _, allowed, cpus = host_view(container_name)
    assert (allowed, cpus) == (node.every, node.every)
    config = oci_config(container_name)
    hooks = config["hooks"]["createRuntime"]  # type: ignore[index]
    assert sorted(h["args"] for h in hooks) == sorted(
        [hook.command_line(node.core, exclusive=True), hook.command_line(node.infra)])


def test_the_env_plays_no_part(node: Node, allocate: Allocate, image: str, container_name: str) -> None:
    """The CDI device alone, with none of the answer's env: still confined, to the device's CPUs."""
    answer = allocate({NON_ISOL: 1})
    devices = [flag for name in answer.cdi_devices for flag in ("--device", name)]
    result = run("-d", "--name", container_name, *devices, image, *SLEEPER, check=False)
    assert result.returncode == 0, result.stderr
    _, allowed, cpus = host_view(container_name)
    assert (allowed, cpus) == (node.core, node.core)


@pytest.fixture
def bad_devices(node: Node) -> Iterator[str]:
    """A spec of our hook with a missing and a malformed channel, under a kind of its own; removed after."""
    with hook_devices(node.install_dir / "cmk", {
        "no-cpus": list(hook.ARGS),
        "malformed": hook.command_line("1,x"),
        "cpus-without-value": [*hook.ARGS, "--cpus"],
    }) as kind:
        yield kind


NO_CPUS = "cmk hook: error: no --cpus=LIST: " + hook.NO_CPUS_HINT
#: A bad entry is reported by its own hook, or by another cmk hook of the container that runs first.
ENTRY = r"cmk hook: error: (?:this hook's |the container's config \S+/config\.json: hooks\.createRuntime\[\d+\] \(cmk hook\): )"
MALFORMED = re.compile(ENTRY + re.escape(f"--cpus='1,x' is not a cpu list: 'x' is not a CPU number ({LIST_HINT})"))
NEEDS_VALUE = re.compile(r"cmk hook: error: (?:option --cpus needs a value \(see 'cmk hook --help'\)|the container's "
                         r"config \S+/config\.json: hooks\.createRuntime\[\d+\] \(cmk hook\): option --cpus needs a value$)")


@pytest.mark.parametrize(("device", "expected"), [
    ("no-cpus", re.compile(re.escape(NO_CPUS))),
    ("malformed", MALFORMED),
    ("cpus-without-value", NEEDS_VALUE),
], ids=["no-cpus", "malformed", "cpus-without-value"])
def test_a_container_whose_channel_is_missing_or_malformed_does_not_start(
        node: Node, allocate: Allocate, image: str, bad_devices: str, device: str, expected: re.Pattern[str]) -> None:
    """Beside a real device too: one bad hook entry fails the start, whatever the env says."""
    answer = allocate({INFRA: 1})
    flags = [*answer_flags(answer, {name: node.every for name in ENV_NAMES}), "--device", f"{bad_devices}={device}"]
    result = run("--rm", *flags, image, "sh", "-c", "echo started", check=False)
    assert result.returncode != 0
    assert "started" not in result.stdout
    assert any(expected.search(line) for line in result.stderr.splitlines()), result.stderr
