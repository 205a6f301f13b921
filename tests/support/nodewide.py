"""The node-wide hook under real podman: a hooks dir, its infra record and the containers it confines."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from deviceplugin.host import nodewide
from deviceplugin.model import hookcontract as hook
from deviceplugin.model.cpulist import format_cpu_list, parse_cpu_list
from tests.support.podman import (
    container_pid,
    hook_devices,
    podman,
    run_with_hooks,
)

SLEEPER = ("sh", "-c", "echo ready; exec sleep inf")


@dataclass(frozen=True)
class NodeWide:
    hooks_dir: Path
    core: str  # the exclusive core's CPUs
    infra: str  # the record's CPUs
    kind: str  # a CDI kind whose device "core" carries the core's hook, as the daemon writes it


@pytest.fixture(scope="module")
def node(install_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeWide]:
    core, infra = plan_cpus()
    work = tmp_path_factory.mktemp("nodewide")
    hooks_dir, record_dir = work / "hooks.d", work / "record"
    record_dir.mkdir()
    nodewide.write_record(record_dir, infra)
    nodewide.write_declaration(hooks_dir, str(install_dir / "cmk"), str(nodewide.record_path(record_dir)))
    devices = {"core": hook.command_line(format_cpu_list(core), exclusive=True)}
    with hook_devices(install_dir / "cmk", devices) as kind:
        yield NodeWide(hooks_dir, format_cpu_list(core), format_cpu_list(infra), kind)


def start(hooks_dir: Path | None, name: str, image: str, *args: str) -> int:
    result = run_with_hooks(hooks_dir, "-d", "--name", name, *args, image, *SLEEPER, check=False)
    assert result.returncode == 0, result.stderr
    return container_pid(name)


def plan_cpus() -> tuple[frozenset[int], frozenset[int]]:
    """(the highest CPU's core, every other CPU): a plan that works on any machine with two cores or more."""
    online = frozenset(os.sched_getaffinity(0))
    last = max(online)
    siblings = Path(f"/sys/devices/system/cpu/cpu{last}/topology/thread_siblings_list").read_text()
    core = parse_cpu_list(siblings) & online
    if not online - core:
        pytest.fail(f"these tests need two cores (one exclusive, one infra); this machine has CPUs "
                    f"{format_cpu_list(online)} in one core")
    return core, online - core


def host_view(name: str) -> tuple[int, str, str]:
    """(PID, Cpus_allowed_list, its cpuset cgroup's cpuset.cpus) of the container's process, read on the host."""
    pid = int(podman("inspect", "--format", "{{.State.Pid}}", name).stdout)
    with open(f"/proc/{pid}/status") as f:
        allowed = next(line.split(":", 1)[1].strip() for line in f if line.startswith("Cpus_allowed_list:"))
    with open(f"/proc/{pid}/cgroup") as f:
        path = next(line.rstrip("\n").split(":", 2)[2] for line in f if "cpuset" in line.split(":")[1].split(","))
    cpus = (Path("/sys/fs/cgroup/cpuset") / path.lstrip("/") / "cpuset.cpus").read_text().strip()
    return pid, allowed, cpus
