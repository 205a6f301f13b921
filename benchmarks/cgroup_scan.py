"""How long the unconfined-containers scan takes, beside a whole ``cmk describe`` and the describe without it.

``python benchmarks/cgroup_scan.py [RUNS]`` builds cgroup v1 trees as the
kubelet lays them out with cgroupfs (``kubepods/burstable/pod<uid>/<id>``,
three containers per pod, a v1 cpuset directory's files in each) for a node at
maxPods 110 and ten times that, times :func:`deviceplugin.host.cgroups.scan`
on them and on this host's /sys, then ``cmk describe --usage-window 0`` on a
dump with each tree and without one, as processes: median milliseconds and
the ratio of each to the describe without a tree.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if not __package__:  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.timing import samples_ms
from deviceplugin.host.cgroups import scan
from tests.support.topologies import fixture_copy

ROOT = Path(__file__).resolve().parents[1]
#: the files of a v1 cpuset cgroup, as the kernel lists them
V1_FILES = ("cgroup.clone_children", "cgroup.procs", "cpuset.cpu_exclusive", "cpuset.cpus", "cpuset.effective_cpus",
            "cpuset.effective_mems", "cpuset.mem_exclusive", "cpuset.mem_hardwall", "cpuset.memory_migrate",
            "cpuset.memory_pressure", "cpuset.memory_spread_page", "cpuset.memory_spread_slab", "cpuset.mems",
            "cpuset.sched_load_balance", "cpuset.sched_relax_domain_level", "notify_on_release", "tasks")


def _cgroup(path: Path, cpus: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    for name in V1_FILES:
        (path / name).write_text(cpus + "\n" if "cpus" in name else "0\n")


def build_tree(sysfs: Path, pods: int) -> int:
    """A kubelet's cgroupfs tree of ``pods`` pods with three containers each (one born before the hook)."""
    root = sysfs / "fs/cgroup/cpuset"
    _cgroup(root, "0-15")
    for qos in ("burstable", "besteffort"):
        _cgroup(root / "kubepods" / qos, "0-15")
    for pod in range(pods):
        parent = root / "kubepods" / ("burstable" if pod % 2 else "besteffort") / f"pod{pod:08d}-0000-0000-0000-000000000000"
        _cgroup(parent, "0-15")
        for i in range(3):
            _cgroup(parent / f"{pod * 3 + i:064x}", "0-15" if i == 0 else "4-7,12-15")
    return pods * 3


def describe_once(sysfs: Path, procfs: Path) -> float:
    argv = [sys.executable, "-m", "deviceplugin", "describe", "--sysfs-root", str(sysfs), "--procfs-root", str(procfs),
            "--usage-window", "0", "--num-exclusive-cores", "3", "-o", "json"]
    start = time.perf_counter()
    subprocess.run(argv, cwd=ROOT, check=True, capture_output=True)
    return (time.perf_counter() - start) * 1000


def main(argv: list[str]) -> int:
    runs = int(argv[1]) if len(argv) > 1 else 20
    with tempfile.TemporaryDirectory(prefix="cmk-bench-cgroups-") as work:
        base = Path(work)
        host = scan(Path("/sys"))
        host_ms = statistics.median(samples_ms(lambda: scan(Path("/sys")), runs, warmup=1))
        print(f"scan of this host's /sys ({len(host.containers)} containers): {host_ms:.2f} ms median")
        dumps = {0: fixture_copy("cmk-xeon_d", base / "bare", isolcpus="0-3,8-11")}
        for pods in (110, 1100):
            sysfs, procfs = dumps[pods] = fixture_copy("cmk-xeon_d", base / str(pods), isolcpus="0-3,8-11")
            containers = build_tree(sysfs, pods)
            found = scan(sysfs)
            assert len(found.containers) == containers and found.complete
            scan_ms = statistics.median(samples_ms(lambda: scan(sysfs), runs, warmup=1))  # noqa: B023
            print(f"{pods} pods, {containers} containers: scan {scan_ms:.1f} ms median "
                  f"({1000 * scan_ms / containers:.0f} us per container)")
        times: dict[int, list[float]] = {pods: [] for pods in dumps}
        for _ in range(runs):  # round robin: load from other work on the machine hits each alike
            for pods, (sysfs, procfs) in dumps.items():
                times[pods].append(describe_once(sysfs, procfs))
        bare = statistics.median(times[0])
        for pods, samples in times.items():
            what = "no cgroup tree" if not pods else f"{pods * 3} containers"
            print(f"cmk describe --usage-window 0, {what}: {statistics.median(samples):.0f} ms median "
                  f"(ratio {statistics.median(samples) / bare:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
