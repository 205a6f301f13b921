"""The cgroup-namespace escape of issue 20 (``escape.c`` beside this file): built once, its one line parsed.

A root process inside a container makes a user, mount and cgroup namespace
(``unshare`` or one raw ``clone``), mounts the cpuset hierarchy there (whose
root is its own cgroup), writes every online CPU to that root's
``cpuset.cpus`` and asks for every CPU. The tests run it in real containers
and in real cgroups and compare the affinity it ends with against the CPUs
the container was given.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

SOURCE = Path(__file__).with_name("escape.c")
MODES = ("unshare", "clone")


def build(output: Path) -> Path:
    """The attacker as a static executable (it runs in a busybox image); musl-gcc first, as the pinner's build."""
    for compiler in ("musl-gcc", "gcc"):
        if shutil.which(compiler) is None:
            continue
        result = subprocess.run([compiler, "-static", "-O2", "-Wall", "-Werror", "-o", str(output), str(SOURCE)],
                                capture_output=True, text=True, check=False)
        if result.returncode == 0:
            return output
    raise RuntimeError(f"cannot build {SOURCE} statically: install musl-tools (or gcc with static glibc)")


@dataclass(frozen=True)
class Attempt:
    """What one run of the escape reached: each step's outcome ("ok" or an errno name) and the affinity it ended with."""

    mode: str
    steps: dict[str, str]
    affinity: str

    @property
    def widened_cgroup(self) -> bool:
        return self.steps.get("write") == "ok"


def parse(output: str) -> Attempt:
    """The ``escape: MODE step=result ... affinity=LIST`` line among ``output``'s lines."""
    line = next((ln for ln in output.splitlines() if ln.startswith("escape: ")), None)
    if line is None:
        raise AssertionError(f"the escape printed no result line: {output!r}")
    mode, *fields = line.removeprefix("escape: ").split()
    steps = dict(field.split("=", 1) for field in fields)
    return Attempt(mode, {k: v for k, v in steps.items() if k != "affinity"}, steps["affinity"])
