"""The three ways to run ``cmk isolate``; every behaviour test runs against each.

- ``python``: ``python3 -I -S pinner/cmk_isolate.py``, the fastest Python entry;
- ``cli``: ``python -m deviceplugin isolate``, the ``cmk`` console script's path;
- ``native``: the static ``cmk`` executable for images without Python.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.pinner.native import ensure_native_pinner

ROOT = Path(__file__).resolve().parents[2]
ISOLATE_PY = ROOT / "pinner" / "cmk_isolate.py"
BASE_ENV = {"PATH": "/usr/bin:/bin", "LC_ALL": "C"}


@dataclass(frozen=True)
class Pinner:
    name: str
    prefix: tuple[str, ...]

    def argv(self, args: Sequence[str]) -> list[str]:
        return [*self.prefix, *args]

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        return {**BASE_ENV, **(extra or {})}

    def run(self, args: Sequence[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(args), env=self.env(env), cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
        )

    def popen(self, args: Sequence[str], env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        return subprocess.Popen(self.argv(args), env=self.env(env), cwd=ROOT, stdout=subprocess.PIPE, text=True)


@pytest.fixture(scope="session")
def native_cmk() -> Path:
    return ensure_native_pinner()


@pytest.fixture(params=["python", "cli", "native"])
def pinner(request: pytest.FixtureRequest) -> Pinner:
    if request.param == "python":
        return Pinner("python", (sys.executable, "-I", "-S", str(ISOLATE_PY)))
    if request.param == "cli":
        return Pinner("cli", (sys.executable, "-m", "deviceplugin", "isolate"))
    return Pinner("native", (str(request.getfixturevalue("native_cmk")), "isolate"))


def topology(name: str) -> Path:
    """A real machine's dump from shared/fixtures/topologies (shared/ sits beside the repository)."""
    for shared in (ROOT.parent / "shared", Path("/work/shared")):
        path = shared / "fixtures" / "topologies" / name
        if path.is_dir():
            return path
    raise FileNotFoundError(f"topology fixture {name} not found beside {ROOT}")


def allowed_here() -> str:
    """This process's CPUs in list form: what the pinner it starts reports as allowed."""
    from pinner.cpulist import format_cpu_list

    return format_cpu_list(os.sched_getaffinity(0))
