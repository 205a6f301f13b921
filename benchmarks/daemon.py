"""The daemon on a synthetic 1,024-CPU machine, as a real process against the kubelet stand-in.

Measures over real unix sockets: Allocate and GetPreferredAllocation
latency (p50/p99), the size of one ListAndWatch message per pool, the time
from ``kubelet.sock`` re-creation to re-registration of every pool, and the
daemon's RSS and CPU use while idle, both on the synthetic tree (inotify
watcher) and on this machine's real ``/sys`` (kernel uevent watcher).
Prints one table: figure, target, and target/figure (above 1 is within).

    python benchmarks/daemon.py
"""

from __future__ import annotations

import compileall
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

if not __package__:  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import grpc
import psutil

from api.v1beta1 import deviceplugin_pb2 as pb
from api.v1beta1 import deviceplugin_pb2_grpc as pb_grpc
from benchmarks.synthetic_sysfs import write_synthetic_sysfs
from benchmarks.timing import samples_ms
from deviceplugin.host.sysfs import discover
from deviceplugin.model.plan import RESOURCE_NAMES, PlanOptions, Pool, plan_pools
from deviceplugin.standin import Kubelet, KubeletOptions

REPO = Path(__file__).resolve().parents[1]
SOCKETS, NODES_PER_SOCKET, CORES_PER_NODE, THREADS = 4, 2, 64, 2  # 1,024 CPUs, 8 NUMA nodes
CALLS = 2000
RESTARTS = 10
IDLE_SECONDS = 10.0
EXCLUSIVE = RESOURCE_NAMES[Pool.EXCLUSIVE]


def compile_bytecode() -> None:
    """Compile the daemon's modules ahead, as the image does (``compileall``), so a start does not compile them.

    These machines set ``PYTHONDONTWRITEBYTECODE=1``, so without this every
    daemon the benchmarks spawn compiles ~90 modules from source again: about
    80 ms of each start that a deployed daemon never spends. ``__pycache__``
    is git-ignored; Python checks each file's source stamp before using it.
    """
    for package in ("api", "deviceplugin", "pinner"):
        compileall.compile_dir(REPO / package, quiet=1)


def start_daemon(plugin_dir: Path, *roots: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "deviceplugin", "device-plugin", "--kubelet-dir", str(plugin_dir), *roots,
         "--cdi-dir", str(plugin_dir / "cdi"), "--log-level", "WARNING",
         "--no-infra-record", "--no-nfd"],  # never the host's /opt/bin/cmk-infra-cpus or features.d
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, stderr=subprocess.DEVNULL,
    )


def registered_all(kubelet: Kubelet, served: set[str], count: int) -> Callable[[], bool]:
    def done() -> bool:
        seen = [r.resource for r in kubelet.registrations()]
        return all(seen.count(r) >= count and kubelet.allocatable().get(r, 0) > 0 for r in served)

    return done


def served_pools(*roots: Path) -> set[str]:
    """What the daemon will serve for these roots with default flags (the plan, as describe shows it)."""
    plan = plan_pools(discover(*roots), PlanOptions())
    return {RESOURCE_NAMES[pool] for pool in Pool if plan.advertised(pool)}


BARE_SERVERS = """
import sys, threading, grpc
from concurrent import futures
servers = []
for path in sys.argv[1:]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    server.add_insecure_port("unix:" + path)
    server.start()
    servers.append(server)
threading.Event().wait()
"""


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[int(len(ordered) * 0.99) - 1]


def timed(call: Callable[[], object], n: int = CALLS) -> list[float]:
    # warm the channel and the server's threads (the first calls after start are slow)
    return samples_ms(call, n, warmup=300)


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def main() -> int:
    logging.getLogger("deviceplugin.standin").setLevel(logging.ERROR)  # expected stream ends on restart
    compile_bytecode()
    work = Path(tempfile.mkdtemp(prefix="cmk-bench-daemon-"))
    rows: list[tuple[str, str, str, float]] = []  # what, figure, target, target/figure
    processes: list[subprocess.Popen[bytes]] = []
    kubelets: list[Kubelet] = []
    try:
        cpus = SOCKETS * NODES_PER_SOCKET * CORES_PER_NODE * THREADS
        node0 = {c for c in range(cpus) if (c % (cpus // THREADS)) < CORES_PER_NODE}
        roots = write_synthetic_sysfs(work / "machine", SOCKETS, NODES_PER_SOCKET, CORES_PER_NODE, THREADS,
                                      isolated=sorted(set(range(cpus)) - node0))
        plugin_dir, sys_dir = work / "dp", work / "dp-sys"
        kubelet = Kubelet(plugin_dir, KubeletOptions(seed=0))
        kubelet.start()
        kubelets.append(kubelet)
        daemon = start_daemon(plugin_dir, "--sysfs-root", str(roots.sysfs), "--procfs-root", str(roots.procfs))
        processes.append(daemon)
        served = served_pools(roots.sysfs, roots.procfs)
        kubelet.wait_for(registered_all(kubelet, served, 1), timeout=60, what="first registration")
        print(f"synthetic machine: {cpus} CPUs, {SOCKETS * NODES_PER_SOCKET} NUMA nodes; served: "
              + ", ".join(f"{r.rpartition('/')[2]} {kubelet.capacity()[r]}" for r in sorted(served)))

        # ListAndWatch: one full snapshot per pool, as the kubelet received it, encoded again (a
        # stream of our own would replace the kubelet's: a server serves only its newest stream).
        for resource in sorted(served):
            size = pb.ListAndWatchResponse(devices=[
                pb.Device(ID=d.id, health=d.health,
                          topology=pb.TopologyInfo(nodes=[pb.NUMANode(ID=n) for n in d.numa_nodes])
                          if d.numa_nodes else None)
                for d in kubelet.devices(resource).values()]).ByteSize()
            rows.append((f"ListAndWatch message, {resource.rpartition('/')[2]}", f"{size / 1024:.1f} KiB",
                         "< 1 MiB", (1 << 20) / size))

        # Allocate and GetPreferredAllocation over the daemon's socket.
        channel = grpc.insecure_channel(f"unix:{plugin_dir / 'cmk-exclusive-cores.sock'}")
        stub = pb_grpc.DevicePluginStub(channel)
        ids = sorted(kubelet.devices(EXCLUSIVE))
        # The floor on this machine: a call whose handler does nothing but return a constant.
        p50, p99 = percentiles(timed(lambda: stub.GetDevicePluginOptions(pb.Empty())))
        rows.append(("floor: GetDevicePluginOptions p50 / p99", f"{p50:.2f} / {p99:.2f} ms", "p99 < 2 ms", 2 / p99))
        for size in (4, 32):
            allocate = pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=ids[:size])])
            p50, p99 = percentiles(timed(lambda request=allocate: stub.Allocate(request)))
            rows.append((f"Allocate {size} cores p50 / p99", f"{p50:.2f} / {p99:.2f} ms", "p99 < 2 ms", 2 / p99))
            prefer = pb.PreferredAllocationRequest(container_requests=[pb.ContainerPreferredAllocationRequest(
                available_deviceIDs=ids, must_include_deviceIDs=ids[:1], allocation_size=size)])
            p50, p99 = percentiles(timed(lambda request=prefer: stub.GetPreferredAllocation(request)))
            rows.append((f"GetPreferredAllocation {size} of {len(ids)} p50 / p99", f"{p50:.2f} / {p99:.2f} ms",
                         "p99 < 2 ms", 2 / p99))
        channel.close()

        # kubelet restart: from kubelet.sock's creation to every pool registered again.
        delays = []
        for round_ in range(2, RESTARTS + 2):
            kubelet.restart()
            kubelet.wait_for(registered_all(kubelet, served, round_), timeout=10, what="re-registration")
            delays.append((time.time_ns() - os.stat(kubelet.socket).st_mtime_ns) / 1e9)
        worst = max(delays)
        rows.append((f"kubelet.sock re-created -> {len(served)} pools registered (median / max of {RESTARTS})",
                     f"{statistics.median(delays) * 1000:.0f} / {worst * 1000:.0f} ms", "< 0.5 s", 0.5 / worst))

        # The kubelet ends one pool's stream and stays up (it never dials back): until that pool is
        # registered again and its new stream has sent a snapshot (allocatable back).
        drops = []
        for _ in range(RESTARTS):
            before = [r.resource for r in kubelet.registrations()].count(EXCLUSIVE)
            allocatable = kubelet.allocatable()[EXCLUSIVE]
            start = time.perf_counter()
            kubelet.drop_stream(EXCLUSIVE)
            kubelet.wait_for(lambda before=before, allocatable=allocatable: (
                [r.resource for r in kubelet.registrations()].count(EXCLUSIVE) == before + 1
                and kubelet.allocatable()[EXCLUSIVE] == allocatable), timeout=10, what="registered again")
            drops.append(time.perf_counter() - start)
        worst = max(drops)
        rows.append((f"stream dropped by the kubelet -> registered and allocatable again (median / max of {RESTARTS})",
                     f"{statistics.median(drops) * 1000:.0f} / {worst * 1000:.0f} ms", "< 1 s", 1 / worst))

        # Idle: this daemon (inotify on the synthetic tree) beside one on the real /sys (uevents).
        sys_kubelet = Kubelet(sys_dir, KubeletOptions(seed=0))
        sys_kubelet.start()
        kubelets.append(sys_kubelet)
        processes.append(start_daemon(sys_dir))
        sys_served = served_pools(Path("/sys"), Path("/proc"))
        sys_kubelet.wait_for(registered_all(sys_kubelet, sys_served, 1), timeout=30, what="registration on /sys")
        # Baseline: as many bare grpc servers as pools, doing nothing (grpc's own housekeeping).
        processes.append(subprocess.Popen([sys.executable, "-c", BARE_SERVERS,
                                           *(str(work / f"bare{i}.sock") for i in range(len(served)))]))
        time.sleep(1.0)  # let the first snapshots and log lines settle
        idle = {"synthetic 1,024 CPUs": psutil.Process(daemon.pid),
                "this machine's /sys": psutil.Process(processes[1].pid),
                f"baseline: {len(served)} bare grpc servers": psutil.Process(processes[2].pid)}
        before = {name: cpu_seconds(p) for name, p in idle.items()}
        time.sleep(IDLE_SECONDS)
        for name, process in idle.items():
            used = cpu_seconds(process) - before[name]
            rss = process.memory_info().rss / 1e6
            rows.append((f"RSS, {name}", f"{rss:.1f} MB", "< 60 MB", 60 / rss))
            figure = f"{used * 1000:.0f} ms ({used / IDLE_SECONDS * 100:.2f} %)"
            rows.append((f"CPU in {IDLE_SECONDS:.0f} s idle, {name}", figure, "~0",
                         float("inf") if used == 0 else 0.01 * IDLE_SECONDS / used))

        # SIGTERM (a DaemonSet rollout): streams end, sockets go, exit 0.
        start = time.perf_counter()
        daemon.terminate()
        status = daemon.wait(timeout=10)
        took = time.perf_counter() - start
        left = sorted(p.name for p in plugin_dir.iterdir() if p.name.startswith("cmk-") and p.name.endswith(".sock"))
        rows.append((f"SIGTERM -> exit {status}, sockets left: {len(left)}", f"{took * 1000:.0f} ms", "< 2 s", 2 / took))
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=10)
        for kubelet in kubelets:
            kubelet.stop()
        shutil.rmtree(work, ignore_errors=True)

    width = max(len(row[0]) for row in rows)
    print(f"\n{'measure':<{width}}  {'figure':>22}  {'target':>16}  target/figure")
    for what, figure, target, ratio in rows:
        print(f"{what:<{width}}  {figure:>22}  {target:>16}  {ratio:>12.1f}x")
    print("(idle CPU ratio: 1% of one CPU over the window / CPU used; inf = not a single tick)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
