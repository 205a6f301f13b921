"""``cmk``'s own start, two source trees side by side: what a refactor did to every command's cost.

Each command runs as a fresh process with ``PYTHONPATH`` set to one tree,
the trees interleaved round by round so the machine's drift hits both alike;
the figures are medians and the ratio is after/before. The daemon's import
is timed apart from a command, since its start is what the kubelet waits on.

    python -m benchmarks.cli_start --before /path/to/old/checkout --after . --rounds 15
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.starts import figures

#: What each row runs: the commands a user types first, and the daemon's import alone.
COMMANDS = {
    "cmk --version": ["-m", "deviceplugin", "--version"],
    "cmk describe (a dump, json)": [
        "-m", "deviceplugin", "describe", "--output", "json",
        "--sysfs-root", "examples/cmk-xeon_d/sys", "--procfs-root", "examples/cmk-xeon_d/proc",
    ],
    "import the daemon's command": ["-c", "import deviceplugin.cli.device_plugin"],
}  # fmt: skip


def run_once(tree: Path, args: list[str]) -> float:
    """Seconds from spawn to exit of ``python ARGS`` with ``tree`` first on the path, run from ``tree``."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    start = time.perf_counter()
    result = subprocess.run([sys.executable, *args], cwd=tree, env=env, capture_output=True, check=False)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"benchmark command failed in {tree}: {' '.join(args)}: {result.stderr.decode().strip()}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--before", type=Path, required=True, help="the older source tree")
    parser.add_argument("--after", type=Path, required=True, help="the newer source tree")
    parser.add_argument("--rounds", type=int, default=15)
    options = parser.parse_args()
    trees = {"before": options.before.resolve(), "after": options.after.resolve()}
    samples: dict[tuple[str, str], list[float]] = {}
    for _ in range(options.rounds):
        for name, args in COMMANDS.items():
            for label, tree in trees.items():
                samples.setdefault((name, label), []).append(run_once(tree, args))
    print(f"cmk's start, {options.rounds} rounds interleaved (median / p90 ms; ratio of medians after/before)")
    for name in COMMANDS:
        before, _ = figures(samples[(name, "before")])
        after, after_p90 = figures(samples[(name, "after")])
        print(f"  {name:<30} before {before:7.1f}   after {after:7.1f} (p90 {after_p90:7.1f})   ratio {after / before:.2f}")


if __name__ == "__main__":
    main()
