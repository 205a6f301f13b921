"""Every daemon figure on synthetic machines of 1,024, 4,096 and 8,192 CPUs, each beside its floor in the same run.

``python benchmarks/scale.py [--cpus 1024,4096,8192] [--calls N]`` writes each
machine with :func:`benchmarks.synthetic_sysfs.write_synthetic_sysfs` (every
NUMA node but the first isolated, as ``benchmarks/daemon.py`` does), procfs
counters at a real node's shape (200 device IRQ lines, each steered to one CPU) and a kubelet-shaped
cgroup tree of 3,300 containers (``benchmarks/cgroup_scan.py``), then runs the
real daemon against the kubelet stand-in over real unix sockets, its metrics
on a real HTTP port, its modules compiled ahead as the image has them, and
measures:

- start: process spawn to every pool registered and allocatable, beside as
  many bare grpc servers spawned until their sockets exist (the floor, in
  the same row);
- the size of one ListAndWatch message per pool;
- Allocate and GetPreferredAllocation (4 and 32 cores) p50/p99, beside
  GetDevicePluginOptions (a handler returning a constant: the RPC floor);
- kubelet restart to every pool registered again;
- a ``/metrics`` scrape (default series), beside a request for a path the
  endpoint does not serve (the HTTP floor), and the cgroup walk alone, which
  a scrape with nothing changed does not repeat;
- RSS and CPU over an idle window, beside the bare grpc servers (and RSS
  over theirs);
- ``cmk describe`` on the machine, beside ``cmk describe --help``.

It prints one table, a column per machine, the growth from the smallest to
the largest and the issue's targets (``ok``/``MISSED``): the start under 1 s
at 8,192 CPUs, RSS at most the floor's + 25 MB at 1,024 and 90 MB at 8,192. Trees go to
``/dev/shm`` (tmpfs, as sysfs is memory) when it is there.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

if not __package__:  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import grpc
import psutil

from api.v1beta1 import deviceplugin_pb2 as pb
from api.v1beta1 import deviceplugin_pb2_grpc as pb_grpc
from benchmarks.cgroup_scan import build_tree
from benchmarks.daemon import (
    BARE_SERVERS,
    EXCLUSIVE,
    compile_bytecode,
    cpu_seconds,
    percentiles,
    registered_all,
    served_pools,
    start_daemon,
)
from benchmarks.synthetic_sysfs import write_synthetic_sysfs
from benchmarks.timing import samples_ms
from deviceplugin.host.cgroups import scan
from deviceplugin.standin import Kubelet, KubeletOptions
from tests.support.procfs_counters import Known, write_counters

REPO = Path(__file__).resolve().parents[1]
#: CPUs -> sockets, NUMA nodes per socket, cores per node, threads per core
SHAPES = {1024: (4, 2, 64, 2), 4096: (8, 4, 64, 2), 8192: (8, 4, 128, 2)}
PODS = 1100  # 3,300 containers: ten times a node at maxPods 110
DEVICE_IRQ_LINES = 200
STARTS = 3
#: The issue's targets: seconds to start at 8,192 CPUs; MB of RSS over the floor at 1,024, and in all at 8,192.
START_TARGET_S = 1.0
RSS_OVER_FLOOR_MB = 25.0
RSS_TARGET_MB = 90.0
CELL = 24  # characters per machine's column
RESTARTS = 3
SCRAPES = 10
IDLE_SECONDS = 5.0


@dataclass
class Row:
    """One measure: its figure per machine (a number, for the growth) and how it prints."""

    what: str
    unit: str
    values: dict[int, float] = field(default_factory=dict)
    shown: dict[int, str] = field(default_factory=dict)
    #: (CPUs, verdict) -> the target's text and whether the figure meets it
    target: Callable[[dict[int, float]], tuple[str, bool] | None] = lambda values: None


class Table:
    def __init__(self) -> None:
        self.rows: dict[str, Row] = {}

    def add(self, what: str, cpus: int, value: float, shown: str, unit: str = "ms",
            target: Callable[[dict[int, float]], tuple[str, bool] | None] | None = None) -> None:
        row = self.rows.setdefault(what, Row(what, unit))
        row.values[cpus], row.shown[cpus] = value, shown
        if target is not None:
            row.target = target

    def print(self, machines: list[int]) -> None:
        width = max(len(row.what) for row in self.rows.values())
        head = "".join(f"{f'{cpus:,} CPUs':>{CELL}}" for cpus in machines)
        print(f"\n{'measure':<{width}}{head}  {'growth':>8}  target")
        for row in self.rows.values():
            cells = "".join(f"{row.shown.get(cpus, '-'):>{CELL}}" for cpus in machines)
            first, last = row.values.get(machines[0]), row.values.get(machines[-1])
            growth = f"{last / first:.2f}x" if first and last is not None else "-"
            verdict = row.target(row.values)
            target = "" if verdict is None else f"{verdict[0]}: {'ok' if verdict[1] else 'MISSED'}"
            print(f"{row.what:<{width}}{cells}  {growth:>8}  {target}")
        if len(machines) > 1:
            print(f"(growth: the {machines[-1]:,}-CPU figure over the {machines[0]:,}-CPU one, "
                  f"for {machines[-1] / machines[0]:.0f}x the CPUs)")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def write_machine(root: Path, cpus: int, cgroups: Path) -> tuple[Path, Path]:
    """The synthetic sysfs and procfs of ``cpus`` CPUs, its counters, and the shared cgroup tree linked in."""
    sockets, nodes, cores, threads = SHAPES[cpus]
    node0 = {cpu for cpu in range(cpus) if (cpu % (cpus // threads)) < cores}
    roots = write_synthetic_sysfs(root, sockets, nodes, cores, threads, isolated=sorted(set(range(cpus)) - node0))
    write_counters(roots.procfs, {cpu: Known(user=1000 + cpu, system=300, idle=90000, device_irqs=cpu,
                                             timer_irqs=50000, net_rx=cpu) for cpu in range(cpus)},
                   steered_irq_lines=DEVICE_IRQ_LINES, real_shape=True)
    (roots.sysfs / "fs").symlink_to(cgroups)  # one tree for every machine: the walk does not follow links below
    return roots.sysfs, roots.procfs


def spawn_until(argv: list[str], done: Callable[[], bool], timeout: float = 120) -> tuple[subprocess.Popen[bytes], float]:
    start = time.perf_counter()
    process = subprocess.Popen(argv, cwd=REPO, stderr=subprocess.DEVNULL)
    deadline = start + timeout
    while not done():
        if time.perf_counter() > deadline or process.poll() is not None:
            process.kill()
            raise SystemExit(f"scale.py: {argv[:4]} did not get there in {timeout:g} s")
        time.sleep(0.002)
    return process, time.perf_counter() - start


def get(url: str) -> float:
    start = time.perf_counter()
    try:
        with urllib.request.urlopen(url, timeout=30) as answer:
            answer.read()
    except urllib.error.HTTPError as err:  # the floor: a path the endpoint does not serve
        err.read()
    return (time.perf_counter() - start) * 1000


def run_ms(argv: list[str], runs: int) -> float:
    took = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, cwd=REPO, check=True, capture_output=True)
        took.append((time.perf_counter() - start) * 1000)
    return statistics.median(took)


def measure(table: Table, cpus: int, work: Path, cgroups: Path, calls: int) -> None:
    sysfs, procfs = write_machine(work / f"m{cpus}", cpus, cgroups)
    served = served_pools(sysfs, procfs)
    roots = ["--sysfs-root", str(sysfs), "--procfs-root", str(procfs)]
    processes: list[subprocess.Popen[bytes]] = []
    kubelet = Kubelet(work / f"dp{cpus}", KubeletOptions(pod_resources_socket=work / f"pr{cpus}.sock", seed=0))
    kubelet.start()
    try:
        # Start: the floor is as many bare grpc servers, spawned until their sockets exist.
        # Each start right after a floor's, so a machine busy with other work weighs on both alike.
        bare = [work / f"bare{cpus}-{i}.sock" for i in range(len(served))]
        floors, starts = [], []
        port = free_port()
        for attempt in range(STARTS):
            for path in bare:
                path.unlink(missing_ok=True)
            process, took = spawn_until([sys.executable, "-c", BARE_SERVERS, *map(str, bare)],
                                        lambda: all(p.exists() for p in bare))
            floors.append(took)
            process.terminate()
            process.wait(timeout=10)
            count = attempt + 1
            start = time.perf_counter()
            daemon = start_daemon(kubelet.plugin_dir, *roots, "--metrics-address", f"127.0.0.1:{port}",
                                  "--pod-resources-socket", str(kubelet.pod_resources_socket), "--no-nfd",
                                  "--no-infra-record")
            kubelet.wait_for(registered_all(kubelet, served, count), timeout=120, what="registration")
            starts.append(time.perf_counter() - start)
            if attempt < STARTS - 1:
                daemon.terminate()
                daemon.wait(timeout=30)
        processes.append(daemon)
        floor = statistics.median(floors)
        table.add("floor: bare grpc servers spawned -> sockets", cpus, floor, f"{floor * 1000:.0f} ms")
        started = statistics.median(starts)
        table.add(f"start -> all pools registered (median of {STARTS}) / floor", cpus, started,
                  f"{started * 1000:.0f} / {floor * 1000:.0f} ms ({started / floor:.1f}x)",
                  target=lambda v: (f"8,192 CPUs < {START_TARGET_S:g} s", v[8192] < START_TARGET_S)
                  if 8192 in v else None)

        # ListAndWatch: one full snapshot per pool, as the kubelet receives it.
        for resource in sorted(served):
            name = resource.rpartition("/")[2]
            with grpc.insecure_channel(f"unix:{kubelet.plugin_dir / f'cmk-{name}.sock'}") as channel:
                stream = pb_grpc.DevicePluginStub(channel).ListAndWatch(pb.Empty())
                size = next(stream).ByteSize()
                stream.cancel()
            table.add(f"ListAndWatch message, {name}", cpus, size, f"{size / 1024:.1f} KiB",
                      target=lambda v: ("< 2 MiB", max(v.values()) < 2 << 20))

        # The RPCs over the exclusive pool's socket, beside the floor in the same run.
        with grpc.insecure_channel(f"unix:{kubelet.plugin_dir / 'cmk-exclusive-cores.sock'}") as channel:
            stub = pb_grpc.DevicePluginStub(channel)
            ids = sorted(kubelet.devices(EXCLUSIVE))
            floor_p50, floor_p99 = percentiles(samples_ms(lambda: stub.GetDevicePluginOptions(pb.Empty()), calls,
                                                          warmup=calls // 4))
            table.add("floor: GetDevicePluginOptions p50 / p99", cpus, floor_p50, f"{floor_p50:.2f} / {floor_p99:.2f}")
            for size in (4, 32):
                allocate = pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=ids[:size])])
                p50, p99 = percentiles(samples_ms(lambda r=allocate: stub.Allocate(r), calls, warmup=calls // 4))
                table.add(f"Allocate {size} cores p50 / p99", cpus, p50, f"{p50:.2f} / {p99:.2f}")
                prefer = pb.PreferredAllocationRequest(container_requests=[pb.ContainerPreferredAllocationRequest(
                    available_deviceIDs=ids, must_include_deviceIDs=ids[:1], allocation_size=size)])
                p50, p99 = percentiles(samples_ms(lambda r=prefer: stub.GetPreferredAllocation(r), calls,
                                                  warmup=calls // 4))
                table.add(f"GetPreferredAllocation {size} cores p50 / p99", cpus, p50,
                          f"{p50:.2f} / {p99:.2f} ({p50 / floor_p50:.1f}x)")
                table.add(f"GetPreferredAllocation {size} cores p50 / floor p50", cpus, p50 / floor_p50,
                          f"{p50 / floor_p50:.2f}x", unit="x",
                          target=lambda v: ("<= 2x at 1,024", v[1024] <= 2) if 1024 in v else None)
                if cpus == 8192:
                    table.rows[f"GetPreferredAllocation {size} cores p50 / p99"].target = (
                        lambda v: ("<= 5 ms at 8,192", v[8192] <= 5))
            table.add("exclusive devices available in those calls", cpus, len(ids), f"{len(ids):,}", unit="")

        # A kubelet restart: from kubelet.sock's creation to every pool registered again.
        delays = []
        for round_ in range(STARTS + 1, STARTS + 1 + RESTARTS):
            kubelet.restart()
            kubelet.wait_for(registered_all(kubelet, served, round_), timeout=60, what="re-registration")
            delays.append(time.time_ns() - os.stat(kubelet.socket).st_mtime_ns)
        median = statistics.median(delays) / 1e6
        table.add(f"kubelet.sock re-created -> registered (median of {RESTARTS})", cpus, median, f"{median:.0f} ms")

        # /metrics over HTTP: the first scrape walks the cgroup tree, the next reuse it.
        url = f"http://127.0.0.1:{port}"
        first = get(f"{url}/metrics")
        scrape = statistics.median(get(f"{url}/metrics") for _ in range(SCRAPES))
        floor = statistics.median(get(f"{url}/nothing") for _ in range(SCRAPES))
        with urllib.request.urlopen(f"{url}/metrics", timeout=30) as answer:
            text = answer.read()
        series = sum(1 for line in text.splitlines() if line and not line.startswith(b"#"))
        table.add("floor: HTTP request for an unserved path", cpus, floor, f"{floor:.1f} ms")
        table.add(f"/metrics scrape, default series (median of {SCRAPES})", cpus, scrape,
                  f"{scrape:.1f} ms ({scrape / floor:.1f}x)",
                  target=lambda v: ("< 50 ms at 1,024", v[1024] < 50) if 1024 in v else None)
        table.add("/metrics series / bytes", cpus, series, f"{series:,} / {len(text) / 1024:.0f} KiB", unit="")
        table.add("first scrape (walks 3,300 container cgroups)", cpus, first, f"{first:.1f} ms")
        walk = statistics.median(samples_ms(lambda: scan(sysfs), 3, warmup=1))
        table.add("the cgroup walk alone (not repeated per scrape)", cpus, walk, f"{walk:.1f} ms")

        # Idle: this daemon beside as many bare grpc servers.
        bare_server = subprocess.Popen([sys.executable, "-c", BARE_SERVERS, *map(str, bare)])
        processes.append(bare_server)
        time.sleep(1.0)
        watched = {"daemon": psutil.Process(daemon.pid), "bare": psutil.Process(bare_server.pid)}
        before = {name: cpu_seconds(p) for name, p in watched.items()}
        time.sleep(IDLE_SECONDS)
        used = {name: cpu_seconds(p) - before[name] for name, p in watched.items()}
        rss = {name: p.memory_info().rss / 1e6 for name, p in watched.items()}
        table.add(f"floor: RSS of {len(served)} bare grpc servers", cpus, rss["bare"], f"{rss['bare']:.1f} MB", "MB")
        table.add("RSS, daemon", cpus, rss["daemon"], f"{rss['daemon']:.1f} MB", "MB",
                  target=lambda v: (f"<= {RSS_TARGET_MB:g} MB at 8,192", v[8192] <= RSS_TARGET_MB)
                  if 8192 in v else None)
        over = rss["daemon"] - rss["bare"]
        table.add("RSS, daemon over the floor", cpus, over, f"+{over:.1f} MB", "MB",
                  target=lambda v: (f"<= floor + {RSS_OVER_FLOOR_MB:g} MB at 1,024", v[1024] <= RSS_OVER_FLOOR_MB)
                  if 1024 in v else None)
        table.add(f"floor: CPU of bare servers in {IDLE_SECONDS:.0f} s idle", cpus, used["bare"] * 1000,
                  f"{used['bare'] * 1000:.0f} ms")
        table.add(f"CPU of the daemon in {IDLE_SECONDS:.0f} s idle", cpus, used["daemon"] * 1000,
                  f"{used['daemon'] * 1000:.0f} ms")

        # cmk describe, as a process, beside its --help (interpreter, imports, parser).
        describe = [sys.executable, "-m", "deviceplugin", "describe", *roots, "--usage-window", "0", "-o", "json"]
        floor = run_ms([*describe, "--help"], STARTS)
        took = run_ms(describe, STARTS)
        table.add("floor: cmk describe --help", cpus, floor, f"{floor:.0f} ms")
        table.add("cmk describe (with 3,300 container cgroups)", cpus, took, f"{took:.0f} ms ({took / floor:.1f}x)")
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=30)
        kubelet.stop()
        shutil.rmtree(work / f"m{cpus}", ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpus", default="1024,4096,8192",
                        help=f"machines, comma-separated, of {', '.join(map(str, SHAPES))}")
    parser.add_argument("--calls", type=int, default=400, help="timed RPCs per figure (a quarter more to warm up)")
    args = parser.parse_args(argv)
    logging.getLogger("deviceplugin.standin").setLevel(logging.ERROR)  # expected stream ends on restart
    compile_bytecode()  # every start and describe below runs compiled modules, as in the image
    machines = sorted(int(text) for text in args.cpus.split(","))
    if not set(machines) <= SHAPES.keys():
        parser.error(f"--cpus {args.cpus}: each must be one of {', '.join(map(str, SHAPES))}")
    shm = Path("/dev/shm")
    work = Path(tempfile.mkdtemp(prefix="cmk-bench-scale-", dir=shm if shm.is_dir() else None))
    table = Table()
    started = time.monotonic()
    try:
        cgroups = work / "cgroups"
        build_tree(cgroups.parent / "cgroups-sys", PODS)
        (cgroups.parent / "cgroups-sys" / "fs").rename(cgroups)
        for cpus in machines:
            print(f"{cpus:,} CPUs ...", end=" ", flush=True)
            measure(table, cpus, work, cgroups, args.calls)
            print(f"measured ({time.monotonic() - started:.0f} s)", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    table.print(machines)
    print(f"{args.calls} RPCs per figure; {time.monotonic() - started:.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
