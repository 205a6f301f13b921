"""``cmk isolate`` as the behaviour tests run it: the static ``cmk`` executable every container gets.

The Python ``cmk isolate`` execs that same binary (``tests/pinner/test_cli_pinner.py``
checks it does), so the tables run once.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.native import ensure_native_pinner

ROOT = Path(__file__).resolve().parents[2]
CPUSET_V1 = Path("/sys/fs/cgroup/cpuset")
#: The two lowest CPUs this process may use: tests that pin for real use these, whatever the machine numbers them.
CPU_A, CPU_B = sorted(os.sched_getaffinity(0))[:2]
BASE_ENV = {"PATH": "/usr/bin:/bin", "LC_ALL": "C"}


@dataclass(frozen=True)
class Pinner:
    name: str
    prefix: tuple[str, ...]

    def argv(self, args: Sequence[str]) -> list[str]:
        return [*self.prefix, *args]

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        return {**BASE_ENV, **(extra or {})}

    def run(
        self, args: Sequence[str], env: dict[str, str] | None = None, launcher: Sequence[str] = ()
    ) -> subprocess.CompletedProcess[str]:
        """``launcher`` execs the pinner as a runtime would (joining a cgroup, setting an affinity)."""
        return subprocess.run(
            [*launcher, *self.argv(args)], env=self.env(env), cwd=ROOT, capture_output=True, text=True, timeout=60,
            check=False,
        )

    def popen(
        self, args: Sequence[str], env: dict[str, str] | None = None, launcher: Sequence[str] = ()
    ) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [*launcher, *self.argv(args)], env=self.env(env), cwd=ROOT, stdout=subprocess.PIPE, text=True
        )


#: Names another build of the static pinner for these tests to run instead (``test_arm64.py``: the arm64 one
#: behind a qemu-aarch64 wrapper).
ENV_OTHER_PINNER = "CMK_TEST_PINNER"


@pytest.fixture(scope="session")
def native_cmk() -> Path:
    other = os.environ.get(ENV_OTHER_PINNER)
    return Path(other) if other else ensure_native_pinner()


@pytest.fixture
def pinner(native_cmk: Path) -> Pinner:
    return Pinner("native", (str(native_cmk), "isolate"))


def affinity_here() -> str:
    """This process's affinity in list form: what a child started without ``before`` inherits."""
    from deviceplugin.model.cpulist import format_cpu_list

    return format_cpu_list(os.sched_getaffinity(0))


def cpuset_here() -> str:
    """This process's cpuset CPUs, read from the cgroup filesystem (v1, else v2).

    What the pinner must report as allowed: a different source than the
    pinner's own probe, so the two can disagree.
    """
    path = Path("/proc/self/cpuset").read_text().strip().lstrip("/")
    for candidate in (CPUSET_V1 / path / "cpuset.effective_cpus", Path("/sys/fs/cgroup") / path / "cpuset.cpus.effective"):
        if candidate.is_file():
            return candidate.read_text().strip()
    raise FileNotFoundError(f"no cpuset cgroup file for /{path} under /sys/fs/cgroup")


def on_cpus(cpus: str) -> list[str]:
    """A launcher starting the pinner with affinity ``cpus``, narrower than the cpuset: as the
    runtime's affinity stays with a container on Linux 6.2+ when runc < 1.3.1 does not reset it."""
    return [TASKSET, "-c", cpus]


TASKSET = shutil.which("taskset") or "/usr/bin/taskset"
