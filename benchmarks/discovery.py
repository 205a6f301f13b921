"""How long topology discovery takes, on the largest real dump and on 1,024 CPUs.

``python benchmarks/discovery.py [RUNS]`` prints median and p90 milliseconds
per run and per CPU for each machine side by side, and the ratio between
them: discovery should grow linearly with the CPU count (the daemon runs it
at start and on every re-plan, so 1,024 CPUs must stay well under a second).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

if not __package__:  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.synthetic_sysfs import write_synthetic_sysfs
from benchmarks.timing import samples_ms
from deviceplugin.host.sysfs import discover
from deviceplugin.model.plan import plan_pools
from tests.support.topologies import FIXTURES

LARGEST_DUMP = "hwloc-256ppc-8n8s4t"
SYNTHETIC = (4, 2, 64, 2)  # sockets, nodes per socket, cores per node, threads per core



def _timed(step: Callable[[], object], runs: int) -> list[float]:
    # warm the page cache and imports: the daemon re-discovers a warm sysfs
    return samples_ms(step, runs, warmup=1)


def _p90(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=10)[-1]


def main(argv: list[str]) -> int:
    runs = int(argv[0]) if argv else 20
    if not (FIXTURES / LARGEST_DUMP).is_dir():
        print(f"fixture {FIXTURES / LARGEST_DUMP} not found: set CMK_FIXTURES", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="cmk-bench-discovery-") as scratch:
        # half the machine isolated, as a node dedicated to pinned workloads would be
        roots = write_synthetic_sysfs(Path(scratch), *SYNTHETIC, isolated=range(0, 1024, 2))
        machines = {
            f"{LARGEST_DUMP}": (FIXTURES / LARGEST_DUMP / "sys", FIXTURES / LARGEST_DUMP / "proc"),
            "synthetic " + "x".join(map(str, SYNTHETIC)): (roots.sysfs, roots.procfs),
        }
        rows = []
        for name, (sysfs, procfs) in machines.items():
            cpus = len(discover(sysfs, procfs).cpus)
            steps: dict[str, Callable[[], object]] = {
                "discover": lambda s=sysfs, p=procfs: discover(s, p),
                "discover+plan": lambda s=sysfs, p=procfs: plan_pools(discover(s, p)),
            }
            for step_name, step in steps.items():
                samples = _timed(step, runs)
                rows.append((name, cpus, step_name, statistics.median(samples), _p90(samples)))

    print(f"topology discovery, {runs} warm runs each")
    print(f"{'machine':<32} {'CPUs':>5} {'step':<14} {'median ms':>10} {'p90 ms':>8} {'us/CPU':>7}")
    for name, cpus, step_name, median, p90 in rows:
        print(f"{name:<32} {cpus:>5} {step_name:<14} {median:>10.1f} {p90:>8.1f} {median / cpus * 1000:>7.1f}")
    small, large = rows[0], next(row for row in rows if row[1] != rows[0][1] and row[2] == rows[0][2])
    print(
        f"{large[1]} vs {small[1]} CPUs: {large[3] / small[3]:.2f}x the time for "
        f"{large[1] / small[1]:.2f}x the CPUs (per CPU {large[3] / large[1] / (small[3] / small[1]):.2f}x)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
