"""The daemon's inotify reader beside watchdog, doing the same watching, in one run.

``python benchmarks/watchers.py [--cpus 1024,8192] [--rounds 3] [--wakes 30]``

Each case runs in a fresh interpreter (so imports and resident memory are
its own) and measures: the import of the watcher code, the start (every
watch placed, the reader threads running), resident memory over the
interpreter before the import, the threads it runs, and the wake latency
from an action to the callback (median and p90 of ``--wakes``):
``kubelet.sock`` created by a bind and removed, as a restarting kubelet
does, and a ``cpuN/online`` written in a dump.

Shapes: ``node``, the plugin directory only (on a real node the CPUs come by
kernel uevents, no inotify); ``dump-N``, the plugin directory and a synthetic
N-CPU sysfs dump's ``cpu/`` folders (tests, ``cmk demo``, the benchmarks).
Implementations: ``ours`` (:mod:`deviceplugin.host.watchers`), ``watchdog``
(one observer: the plugin directory and ``cpu/`` recursively, as the daemon
watched before it had its own reader) and, at the smallest dump only,
``watchdog-per-folder`` (``cpu/`` and each ``cpuN/`` scheduled one by one,
which is what "these folders, not below" takes in watchdog: an emitter
thread per folder). The cases alternate, ``--rounds`` times, so drift on a
shared machine hits both alike.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

if not __package__:  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

KUBELET = "kubelet.sock"
IMPLEMENTATIONS = ("ours", "watchdog")


def rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise SystemExit("no VmRSS in /proc/self/status")


class Signal:
    """A callback that records when it ran, for the latency of one action."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.at = 0.0

    def __call__(self, *_: object) -> None:
        self.at = time.perf_counter()
        self.event.set()

    def wait_since(self, start: float) -> float:
        if not self.event.wait(5):
            raise SystemExit("no callback within 5 s")
        self.event.clear()
        return self.at - start


def start_ours(plugin_dir: Path, cpu_dir: Path | None, kubelet: Signal, deleted: Signal,
               cpus: Signal) -> Callable[[], None]:
    from deviceplugin.host.watchers import PluginDirWatcher, _InotifyCpuWatcher

    watchers: list[PluginDirWatcher | _InotifyCpuWatcher] = [
        PluginDirWatcher(plugin_dir, on_kubelet=kubelet, on_deleted=deleted, kubelet_socket_name=KUBELET)]
    if cpu_dir is not None:
        watchers.append(_InotifyCpuWatcher(cpu_dir, cpus))
    for watcher in watchers:
        watcher.start()

    def stop() -> None:
        for watcher in watchers:
            watcher.stop()

    return stop


def start_watchdog(plugin_dir: Path, cpu_dir: Path | None, kubelet: Signal, deleted: Signal,
                   cpus: Signal, *, per_folder: bool = False) -> Callable[[], None]:
    """The same callbacks from watchdog's observer, with its event filter asking for what ours asks for."""
    from watchdog.events import (
        DirCreatedEvent,
        FileClosedEvent,
        FileCreatedEvent,
        FileDeletedEvent,
        FileMovedEvent,
        FileSystemEvent,
        FileSystemEventHandler,
    )
    from watchdog.observers import Observer

    class PluginDir(FileSystemEventHandler):
        def on_created(self, event: FileSystemEvent) -> None:
            if not event.is_directory and os.path.basename(os.fsdecode(event.src_path)) == KUBELET:
                kubelet()

        def on_deleted(self, event: FileSystemEvent) -> None:
            if not event.is_directory:
                deleted(os.path.basename(os.fsdecode(event.src_path)))

        def on_moved(self, event: FileSystemEvent) -> None:
            self.on_deleted(event)

    class CpuDir(FileSystemEventHandler):
        def on_closed(self, event: FileSystemEvent) -> None:
            if os.path.basename(os.fsdecode(event.src_path)) == "online":
                cpus()

        def on_created(self, event: FileSystemEvent) -> None:
            if event.is_directory:
                cpus()

    observer = Observer()
    observer.schedule(PluginDir(), str(plugin_dir), recursive=False,
                      event_filter=[FileCreatedEvent, FileDeletedEvent, FileMovedEvent])
    if cpu_dir is not None:
        folders = [cpu_dir]
        if per_folder:
            folders += [Path(entry.path) for entry in os.scandir(cpu_dir)
                        if entry.name[3:].isdigit() and entry.name.startswith("cpu")]
        for folder in folders:
            observer.schedule(CpuDir(), str(folder), recursive=not per_folder,
                              event_filter=[FileClosedEvent, DirCreatedEvent])
    observer.start()

    def stop() -> None:
        observer.stop()
        observer.join()

    return stop


def child(implementation: str, plugin_dir: Path, cpu_dir: Path | None, wakes: int) -> None:
    """One case in this interpreter: print its figures as one JSON line."""
    # What the daemon has loaded anyway (ctypes for its malloc tuning), so both sides count only their own.
    import ctypes  # noqa: F401
    import logging  # noqa: F401
    import selectors  # noqa: F401

    import deviceplugin.host.files

    base_rss = rss_kb()
    base_threads = threading.active_count()
    kubelet, deleted, cpus = Signal(), Signal(), Signal()
    start = time.perf_counter()
    if implementation == "ours":
        import deviceplugin.host.watchers  # noqa: F401
    else:
        import watchdog.events
        import watchdog.observers  # noqa: F401
    imported = time.perf_counter()
    import_rss = rss_kb()
    if implementation == "ours":
        stop = start_ours(plugin_dir, cpu_dir, kubelet, deleted, cpus)
    else:
        stop = start_watchdog(plugin_dir, cpu_dir, kubelet, deleted, cpus,
                              per_folder=implementation == "watchdog-per-folder")
    started = time.perf_counter()
    time.sleep(0.2)  # let every reader thread reach its first read before the first action
    figures: dict[str, object] = {
        "import_ms": (imported - start) * 1000,
        "start_ms": (started - imported) * 1000,
        "import_kb": import_rss - base_rss,
        "rss_kb": rss_kb() - base_rss,
        "threads": threading.active_count() - base_threads,
    }
    created, removed, online = [], [], []
    for _ in range(wakes):
        sock = socket.socket(socket.AF_UNIX)
        begin = time.perf_counter()
        sock.bind(str(plugin_dir / KUBELET))
        created.append(kubelet.wait_since(begin))
        begin = time.perf_counter()
        os.unlink(plugin_dir / KUBELET)
        removed.append(deleted.wait_since(begin))
        sock.close()
        if cpu_dir is not None:
            begin = time.perf_counter()
            (cpu_dir / "cpu1/online").write_text("1\n")
            online.append(cpus.wait_since(begin))
    figures["wake_created"] = created
    figures["wake_deleted"] = removed
    figures["wake_online"] = online
    figures["rss_after_kb"] = rss_kb() - base_rss
    stop()
    print(json.dumps(figures))


def run_case(implementation: str, plugin_dir: Path, cpu_dir: Path | None, wakes: int) -> dict[str, object]:
    argv = [sys.executable, __file__, "--child", implementation, str(plugin_dir), str(cpu_dir or ""), str(wakes)]
    result = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=600)
    if result.returncode != 0:
        return {"failed": (result.stderr.strip().splitlines() or ["no output"])[-1]}
    figures: dict[str, object] = json.loads(result.stdout.splitlines()[-1])
    return figures


def ms(samples: object) -> str:
    values = sorted(float(x) * 1000 for x in samples)  # type: ignore[attr-defined]
    if not values:
        return "-"
    return f"{statistics.median(values):.2f} / {values[int(0.9 * (len(values) - 1))]:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpus", default="1024,8192", help="dump sizes, comma-separated")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--wakes", type=int, default=30)
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        implementation, plugin_dir, cpu_dir, wakes = args.child
        child(implementation, Path(plugin_dir), Path(cpu_dir) if cpu_dir else None, int(wakes))
        return

    from benchmarks.synthetic_sysfs import write_synthetic_sysfs

    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
    with tempfile.TemporaryDirectory(prefix="cmk-watchers-", dir=base) as tmp:
        root = Path(tmp)
        shapes: dict[str, Path | None] = {"node": None}
        sizes = [int(n) for n in args.cpus.split(",")]
        for n in sizes:
            roots = write_synthetic_sysfs(root / f"dump-{n}", 2, 2, n // 8, 2)
            shapes[f"dump-{n}"] = roots.sysfs / "devices/system/cpu"
        cases = [(shape, impl) for shape in shapes for impl in IMPLEMENTATIONS]
        cases.append((f"dump-{sizes[0]}", "watchdog-per-folder"))
        results: dict[tuple[str, str], list[dict[str, object]]] = {case: [] for case in cases}
        for _ in range(args.rounds):
            for shape, impl in cases:
                plugin_dir = root / f"plugins-{shape}-{impl}"
                plugin_dir.mkdir(exist_ok=True)
                results[shape, impl].append(run_case(impl, plugin_dir, shapes[shape], args.wakes))

    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; "
          f"medians over {args.rounds} rounds; wakes: median / p90 ms over {args.wakes} (all rounds)")
    header = ("shape", "implementation", "import ms", "start ms", "RSS import", "RSS started", "RSS after",
              "threads", "kubelet.sock created", "socket removed", "cpuN/online written")
    print(" | ".join(header))
    for (shape, impl), runs in results.items():
        ok = [run for run in runs if "failed" not in run]
        if not ok:
            print(f"{shape} | {impl} | failed: {runs[0]['failed']}")
            continue

        def median(key: str, runs: list[dict[str, object]] = ok) -> float:
            return statistics.median(float(run[key]) for run in runs)  # type: ignore[arg-type]

        def pooled(key: str, runs: list[dict[str, object]] = ok) -> list[float]:
            return [x for run in runs for x in run[key]]  # type: ignore[attr-defined]

        print(f"{shape} | {impl} | {median('import_ms'):.1f} | {median('start_ms'):.1f} | "
              f"{median('import_kb') / 1024:.2f} MB | {median('rss_kb') / 1024:.2f} MB | "
              f"{median('rss_after_kb') / 1024:.2f} MB | {median('threads'):.0f} | "
              f"{ms(pooled('wake_created'))} | {ms(pooled('wake_deleted'))} | {ms(pooled('wake_online'))}")


if __name__ == "__main__":
    main()
