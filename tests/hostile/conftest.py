"""The fork server and the one check every hostile case passes: fails fast, one line, no traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
#: Per-case limits. A case must finish within a second of CPU (the issue's "within 1 s", measured so
#: that five test runs sharing two CPUs do not count as slowness); one still running after LIMIT
#: seconds of wall time is killed and counts as a hang (a FIFO blocks without spending any CPU).
CPU_LIMIT = 1.0
LIMIT = float(os.environ.get("CMK_HOSTILE_LIMIT", "5"))  # 1 to count a baseline quickly
NOBODY = 65534


@dataclass(frozen=True)
class Outcome:
    status: int
    hung: bool
    seconds: float
    cpu: float
    stdout: str
    stderr: str

    def problems(self) -> list[str]:
        """What makes this outcome not a clear, fast error (empty: it is one)."""
        found = []
        if self.hung:
            found.append(f"hung (killed after {LIMIT} s)")
        elif self.cpu > CPU_LIMIT:
            found.append(f"slow ({self.cpu:.2f} s of CPU)")
        if "Traceback" in self.stderr:
            found.append("traceback")
        lines = self.stderr.rstrip("\n").split("\n") if self.stderr.strip() else []
        if len(lines) != 1:
            found.append(f"{len(lines)} lines on stderr")
        if not self.hung and self.status == 0:
            found.append("exit status 0")
        return found


class ForkServer:
    def __init__(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self._process = subprocess.Popen([sys.executable, "-m", "tests.hostile.forkrun"], cwd=REPO, env=env,
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self._process.stdout is not None and self._process.stdout.readline() == "ready\n"

    def run(self, *argv: str, uid: int | None = None, limit: float = LIMIT) -> Outcome:
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.write(json.dumps({"argv": list(argv), "uid": uid, "limit": limit}) + "\n")
        self._process.stdin.flush()
        return Outcome(**json.loads(self._process.stdout.readline()))

    def close(self) -> None:
        assert self._process.stdin is not None
        self._process.stdin.close()
        self._process.wait(timeout=10)


@pytest.fixture(scope="session")
def cmk() -> Iterator[Callable[..., Outcome]]:
    server = ForkServer()
    yield server.run
    server.close()


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A temporary folder the unprivileged user can search (pytest's own is mode 0700)."""
    path = Path(tempfile.mkdtemp(prefix="cmk-hostile-"))
    path.chmod(0o755)
    yield path
    subprocess.run(["rm", "-rf", str(path)], check=False)


def _record(outcomes: dict[str, Outcome], bad: dict[str, tuple[list[str], str]]) -> None:
    """With CMK_HOSTILE_REPORT=FILE, append this table's counts (for the closing note)."""
    report = os.environ.get("CMK_HOSTILE_REPORT")
    if not report:
        return
    counts: dict[str, int] = {}
    for problems, _ in bad.values():
        for problem in problems:
            kind = problem.split(" (")[0].split(" ", 1)[-1] if "lines" in problem else problem.split(" (")[0]
            counts[kind] = counts.get(kind, 0) + 1
    with open(report, "a") as out:
        out.write(json.dumps({"table": os.environ.get("PYTEST_CURRENT_TEST", "?").split(" ")[0],
                              "cases": len(outcomes), "failing": len(bad), "problems": counts,
                              "slowest": round(max((o.seconds for o in outcomes.values()), default=0), 3),
                              "most_cpu": round(max((o.cpu for o in outcomes.values()), default=0), 3)}) + "\n")


def assert_clear_errors(outcomes: dict[str, Outcome], must_name: dict[str, str] | None = None) -> None:
    """Every case failed with one line and no traceback, in time; report all that did not at once."""
    bad = {case: (outcome.problems(), outcome.stderr[-300:]) for case, outcome in outcomes.items()
           if outcome.problems()}
    for case, needle in (must_name or {}).items():
        if case in outcomes and needle not in outcomes[case].stderr:
            bad.setdefault(case, ([f"does not name {needle!r}"], outcomes[case].stderr[-300:]))
    _record(outcomes, bad)
    assert not bad, f"{len(bad)} of {len(outcomes)} cases: " + json.dumps(bad, indent=1, ensure_ascii=False)
