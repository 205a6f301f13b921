"""Start-to-exec time of the static pinner and of the ``cmk`` console script that execs it, beside references.

Every variant is fork/exec'd (posix_spawn) and waited for, RUNS times,
round-robin so drift hits all alike; the figure is spawn-to-exit wall time of
``... /bin/true``. Printed: median and p90 per variant, and the ratio the
pinner promises: the static pinner over ``taskset -c N /bin/true`` (target:
under 50 ms median). The ``cmk`` console-script path (site, the pip script's
``import re``, ``deviceplugin.cli``, then the exec of the static pinner) is
measured beside the bare interpreter, for an honest picture.

    python benchmarks/pinner_start.py [--runs 200]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# What pip writes for a console_scripts entry point.
CONSOLE_SCRIPT = """\
import re
import sys
from deviceplugin.cli import main
if __name__ == "__main__":
    sys.argv[0] = re.sub(r"(-script\\.pyw|\\.exe)?$", "", sys.argv[0])
    sys.exit(main())
"""


def spawn_time(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, env)
    _, status = os.waitpid(pid, 0)
    elapsed = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"benchmark command failed: {' '.join(argv)}")
    return elapsed


def static_pinner() -> Path:
    """This checkout's static pinner, built first if it is not there."""
    sys.path.insert(0, str(ROOT))
    from pinner.build import DEFAULT_OUTPUT, build

    if not DEFAULT_OUTPUT.is_file():
        build(DEFAULT_OUTPUT)
    return DEFAULT_OUTPUT


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    pinner = static_pinner()
    cpu = min(os.sched_getaffinity(0))
    python = sys.executable
    taskset = "/usr/bin/taskset"
    env = {"PATH": "/usr/bin:/bin", "CMK_CPUS_SHARED": str(cpu), "PYTHONPATH": str(ROOT)}
    pinner_args = ["--pool=shared", "--", "/bin/true"]
    with tempfile.TemporaryDirectory(prefix="cmk-bench-") as tmp:
        script = Path(tmp) / "cmk"
        script.write_text(CONSOLE_SCRIPT)
        variants = {
            "python3 -I -S -c pass": [python, "-I", "-S", "-c", "pass"],
            "cmk isolate (console script)": [python, str(script), "isolate", *pinner_args],
            f"taskset -c {cpu} /bin/true": [taskset, "-c", str(cpu), "/bin/true"],
            "static cmk isolate": [str(pinner), "isolate", *pinner_args],
            "/bin/true": ["/bin/true"],
        }
        times: dict[str, list[float]] = {name: [] for name in variants}
        for argv in variants.values():  # warm the page cache
            spawn_time(argv, env)
        for _ in range(args.runs):
            for name, argv in variants.items():
                times[name].append(spawn_time(argv, env))

    def med(name: str) -> float:
        return statistics.median(times[name]) * 1000

    def p90(name: str) -> float:
        return statistics.quantiles(times[name], n=10)[-1] * 1000

    print(f"start-to-exit of '... /bin/true', {args.runs} runs each, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}")
    print(f"{'variant':36} {'median ms':>10} {'p90 ms':>9}")
    for name in variants:
        print(f"{name:36} {med(name):10.2f} {p90(name):9.2f}")
    bare, console = "python3 -I -S -c pass", "cmk isolate (console script)"
    native, ref = "static cmk isolate", f"taskset -c {cpu} /bin/true"
    print()
    print(f"cmk console script / bare interp.:  {med(console) / med(bare):.2f}x  (no target; site + deviceplugin.cli + exec)")
    print(f"static pinner / taskset:            {med(native) / med(ref):.2f}x  ({med(native):.2f} ms median, target < 50 ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
