"""Timing process and container starts side by side, shared by the hook benchmarks.

A hook's cost is a millisecond inside podman's run-to-run noise, so each
benchmark times the hook alone against a real process in a real cpuset
cgroup beside spawning ``/bin/true`` the same way, and whole container starts
interleaved so drift hits every kind alike.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

SPAWN_TRUE = "spawn /bin/true"


def runs_parser(doc: str | None, runs: int = 50, hook_runs: int = 300) -> argparse.ArgumentParser:
    """A hook benchmark's command line: how many container starts of each kind, how many direct hook runs."""
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=runs, help=f"podman runs of each kind (default: {runs})")
    parser.add_argument("--hook-runs", type=int, default=hook_runs, help=f"direct hook runs of each (default: {hook_runs})")
    return parser


def timed(argv: Sequence[str], stdin: bytes | None = None) -> float:
    """Seconds from spawn to exit; a failed command ends the benchmark with its stderr."""
    start = time.perf_counter()
    result = subprocess.run(list(argv), input=stdin, capture_output=True, check=False)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"benchmark command failed: {' '.join(argv)}: {result.stderr.decode().strip()}")
    return elapsed


def figures(samples: list[float]) -> tuple[float, float]:
    """Median and p90 in milliseconds."""
    ordered = sorted(samples)
    return statistics.median(ordered) * 1000, ordered[int(0.9 * (len(ordered) - 1))] * 1000


def report(title: str, rows: Mapping[str, list[float]], base: str, other: str) -> None:
    print(title)
    for name, samples in rows.items():
        median, p90 = figures(samples)
        print(f"  {name:<46} median {median:8.2f} ms   p90 {p90:8.2f} ms")
    base_median, other_median = figures(rows[base])[0], figures(rows[other])[0]
    print(f"  added by the hook: {other_median - base_median:+.2f} ms median, ratio {other_median / base_median:.3f}x")


def installed_pinner(work_dir: Path) -> Path:
    """The static binary built if needed and installed as ``cmk install`` does, under ``work_dir``."""
    from deviceplugin.host.installedpinner import install_pinner
    from pinner.build import DEFAULT_OUTPUT, build

    if not DEFAULT_OUTPUT.is_file():
        build(DEFAULT_OUTPUT)
    return install_pinner(DEFAULT_OUTPUT, work_dir / "opt-bin")


def hook_alone(name: str, argv: Sequence[str], bundle: Path, runs: int) -> None:
    """Time ``argv`` confining a real process in a real cpuset cgroup, interleaved with ``/bin/true``."""
    from tests.support.hookrun import cpuset_cgroup, process_in, state

    rows: dict[str, list[float]] = {SPAWN_TRUE: [], name: []}
    with cpuset_cgroup() as cgroup, process_in(cgroup) as proc:
        stdin = state(proc.pid, bundle).encode()
        for _ in range(runs):
            rows[SPAWN_TRUE].append(timed(["/bin/true"], stdin))
            rows[name].append(timed(argv, stdin))
    report(f"the hook alone ({runs} runs each, interleaved):", rows, SPAWN_TRUE, name)


def interleaved(kinds: Mapping[str, Sequence[str]], runs: int) -> dict[str, list[float]]:
    """Seconds of each kind's command, ``runs`` rounds of one of each after one warm-up run each."""
    for argv in kinds.values():
        timed(argv)  # warm podman's caches for each
    rows: dict[str, list[float]] = {name: [] for name in kinds}
    for _ in range(runs):
        for name, argv in kinds.items():
            rows[name].append(timed(argv))
    return rows

