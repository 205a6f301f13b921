"""Watching for change, event-driven: the plugin directory, and CPUs going offline or online.

Why it works this way: ``docs/watchers.md``.
"""

from __future__ import annotations

import logging
import os
import selectors
import socket
import threading
from collections.abc import Callable
from pathlib import Path

from watchdog.events import (
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer

from deviceplugin.errors import CmkError
from deviceplugin.host.files import PSEUDO_FILE_LIMIT, read_file

log = logging.getLogger(__name__)

NETLINK_KOBJECT_UEVENT = 15
UEVENT_KERNEL_GROUP = 1
POLL_SECONDS = 5.0
_CPU_ACTIONS = (b"online", b"offline", b"add", b"remove")


def cpu_uevent(message: bytes) -> tuple[str, int] | None:
    """(action, cpu) for a kernel uevent about a CPU going online/offline (or hotplug), else None."""
    header, _, _ = message.partition(b"\0")
    action, _, devpath = header.partition(b"@")
    prefix = b"/devices/system/cpu/cpu"
    if action not in _CPU_ACTIONS or not devpath.startswith(prefix) or not devpath[len(prefix):].isdigit():
        return None
    return action.decode(), int(devpath[len(prefix):])


class _Handler(FileSystemEventHandler):
    def __init__(self, on_event: Callable[[FileSystemEvent], None]) -> None:
        self._on_event = on_event

    def on_any_event(self, event: FileSystemEvent) -> None:
        self._on_event(event)


def _file_name(event: FileSystemEvent) -> str:
    """The name an event leaves behind (a move's target); watchdog may hand paths over as bytes."""
    return os.path.basename(os.fsdecode(event.dest_path or event.src_path))


class _InotifyWatcher:
    """One watchdog observer (one inotify instance, one thread) on one folder, started and stopped."""

    def __init__(self, name: str, directory: Path, *, recursive: bool,
                 events: list[type[FileSystemEvent]]) -> None:
        self._observer = Observer()
        self._observer.name = name
        self._observer.schedule(_Handler(self._event), str(directory), recursive=recursive, event_filter=events)

    def _event(self, event: FileSystemEvent) -> None:
        raise NotImplementedError

    def start(self) -> None:
        self._observer.start()

    def stop(self) -> None:
        self._observer.stop()
        self._observer.join()


class PluginDirWatcher(_InotifyWatcher):
    """Calls ``on_kubelet()`` when kubelet.sock appears, ``on_deleted(name)`` when a file goes."""

    def __init__(self, directory: Path, *, on_kubelet: Callable[[], None],
                 on_deleted: Callable[[str], None], kubelet_socket_name: str) -> None:
        self._on_kubelet, self._on_deleted, self._kubelet = on_kubelet, on_deleted, kubelet_socket_name
        super().__init__("cmk-plugin-dir-watch", directory, recursive=False,
                         events=[FileCreatedEvent, FileDeletedEvent, FileMovedEvent])

    def _event(self, event: FileSystemEvent) -> None:
        if isinstance(event, FileDeletedEvent):
            self._on_deleted(_file_name(event))
        elif _file_name(event) == self._kubelet:
            self._on_kubelet()


class _InotifyCpuWatcher(_InotifyWatcher):
    def __init__(self, cpu_dir: Path, on_change: Callable[[], None]) -> None:
        self._on_change = on_change
        # One recursive watch: one inotify instance and one thread, whatever the CPU count
        # (a watch per cpuN folder would cost a thread and an inotify instance each).
        # A finished write (close after write) is one event; modify events would add one per write() call.
        super().__init__("cmk-cpu-watch", cpu_dir, recursive=True,
                         events=[FileClosedEvent, FileCreatedEvent, FileMovedEvent])

    def _event(self, event: FileSystemEvent) -> None:
        if _file_name(event) == "online":
            self._on_change()


class _UeventCpuWatcher:
    def __init__(self, sock: socket.socket, on_change: Callable[[], None]) -> None:
        self._sock, self._on_change = sock, on_change
        self._wake_r, self._wake_w = os.pipe()
        self._thread = threading.Thread(target=self._run, name="cmk-cpu-uevents", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        os.write(self._wake_w, b"x")
        self._thread.join()
        self._sock.close()
        os.close(self._wake_r)
        os.close(self._wake_w)

    def _run(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self._sock, selectors.EVENT_READ)
            selector.register(self._wake_r, selectors.EVENT_READ)
            while True:
                for key, _ in selector.select():
                    if key.fileobj == self._wake_r:
                        return
                    try:
                        message = self._sock.recv(65536)
                    except OSError:  # ENOBUFS after a burst: state is re-read anyway
                        message = b"online@/devices/system/cpu/cpu0"
                    event = cpu_uevent(message)
                    if event is not None:
                        log.info("kernel uevent: cpu%d %s", event[1], event[0])
                        self._on_change()


class _PollingCpuWatcher:
    def __init__(self, online_file: Path, on_change: Callable[[], None]) -> None:
        self._file, self._on_change = online_file, on_change
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cmk-cpu-poll", daemon=True)

    def _read(self) -> str:
        try:
            return (read_file(self._file, PSEUDO_FILE_LIMIT) or b"").decode("ascii", "replace")
        except CmkError:  # unreadable now: a change is seen once it reads again
            return ""

    def start(self) -> None:
        self._last = self._read()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            text = self._read()
            if text != self._last:
                self._last = text
                self._on_change()


CpuWatcher = _InotifyCpuWatcher | _UeventCpuWatcher | _PollingCpuWatcher


def _uevent_socket() -> socket.socket:
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC, NETLINK_KOBJECT_UEVENT)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        sock.bind((0, UEVENT_KERNEL_GROUP))
    except OSError:
        sock.close()
        raise
    return sock


def cpu_watcher(sysfs_root: Path, on_change: Callable[[], None]) -> CpuWatcher:
    """The cheapest event source that works for this root (see the module docstring)."""
    cpu_dir = sysfs_root / "devices/system/cpu"
    if sysfs_root.resolve() != Path("/sys"):
        watcher = _InotifyCpuWatcher(cpu_dir, on_change)
        log.info("watching %s for CPUs going offline/online (inotify)", cpu_dir)
        return watcher
    try:
        sock = _uevent_socket()
    except OSError as err:
        log.warning("no kernel uevents (%s): reading %s/online every %.0f s instead",
                    err.strerror, cpu_dir, POLL_SECONDS)
        return _PollingCpuWatcher(cpu_dir / "online", on_change)
    log.info("watching kernel uevents for CPUs going offline/online")
    return _UeventCpuWatcher(sock, on_change)
