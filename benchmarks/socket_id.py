"""``cmk isolate --socket-id`` where sysfs gives package ids, beside where it gives -1 (POWER, s390).

With ids the pinner reads one ``physical_package_id`` per pool CPU; with -1
it reads every online CPU's id and package list to number the packages as
the daemon does. Both pinners, spawn to exit of ``--no-affinity ... /bin/true``
on copies of real dumps, round-robin so drift hits all alike. Printed: median
per dump and pinner, and each -1 dump's ratio to the dump with ids.

    python benchmarks/socket_id.py [--runs 40]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: (dump, the two pool CPUs; both on package 0 in each dump).
DUMPS = {"hwloc-16amd64-8n2c": "0,1", "hwloc-20s390-2g6s4c": "0,1", "hwloc-256ppc-8n8s4t": "0,1"}
WITH_IDS = "hwloc-16amd64-8n2c"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    args = parser.parse_args()

    sys.path.insert(0, str(ROOT))
    from benchmarks.pinner_start import spawn_time, static_pinner
    from tests.support.topologies import fixture_copy

    pinners = {"static": [str(static_pinner()), "isolate"]}
    with tempfile.TemporaryDirectory(prefix="cmk-socket-bench-") as tmp:
        runs: dict[tuple[str, str], tuple[list[str], dict[str, str]]] = {}
        for dump, cpus in DUMPS.items():
            sysfs, _ = fixture_copy(dump, Path(tmp) / dump)
            env = {"PATH": "/usr/bin:/bin", "CMK_CPUS_SHARED": cpus, "CMK_SYSFS_ROOT": str(sysfs),
                   "PYTHONPATH": str(ROOT)}
            for name, argv in pinners.items():
                runs[(dump, name)] = ([*argv, "--socket-id=0", "--pool=shared", "--no-affinity", "--", "/bin/true"],
                                      env)
        times: dict[tuple[str, str], list[float]] = {key: [] for key in runs}
        for argv, env in runs.values():
            spawn_time(argv, env)  # warm the page cache
        for _ in range(args.runs):
            for key, (argv, env) in runs.items():
                times[key].append(spawn_time(argv, env))

    def med(key: tuple[str, str]) -> float:
        return statistics.median(times[key]) * 1000

    print(f"cmk isolate --socket-id=0 ... /bin/true, {args.runs} runs each (median ms; ratio to {WITH_IDS})")
    for dump in DUMPS:
        cells = [f"{name} {med((dump, name)):7.2f} ({med((dump, name)) / med((WITH_IDS, name)):.2f}x)"
                 for name in pinners]
        print(f"  {dump:24} " + "   ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
