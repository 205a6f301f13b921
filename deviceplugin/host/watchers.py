"""Watching for change, event-driven: the plugin directory, and CPUs going offline or online.

Why it works this way: ``docs/design/watchers.md``.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import re
import selectors
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

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


_IN_CLOSE_WRITE, _IN_MOVED_FROM, _IN_MOVED_TO = 0x8, 0x40, 0x80
_IN_CREATE, _IN_DELETE, _IN_ISDIR = 0x100, 0x200, 0x40000000
_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len; then len bytes of name
_CPU_DIR = re.compile(rb"cpu\d+")


def _readable(source: int | socket.socket, wake: int) -> Iterator[None]:
    """Once each time ``source`` is readable, until ``wake`` is (a watcher's stop writes to it)."""
    with selectors.DefaultSelector() as selector:
        selector.register(source, selectors.EVENT_READ)
        selector.register(wake, selectors.EVENT_READ)
        while True:
            for key, _ in selector.select():
                if key.fileobj == wake:
                    return
                yield


class _Inotify:
    """One inotify instance on the folders :meth:`watch` names (not their subfolders), read by one thread.

    The kernel's interface through libc, as watchdog uses it, without its
    modules, threads and objects per watch: measured beside watchdog in
    ``docs/dev/libraries.md`` (1.3 MB and 2 threads more on a node; 3.4 s
    and 37 MB on an 8,192-CPU dump). Subclasses decide in :meth:`_event`
    what an event means; it runs in the reader thread.
    """

    def __init__(self, name: str, mask: int) -> None:
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._mask = mask
        self._fd = -1
        self._wake_r, self._wake_w = -1, -1
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def watch(self, path: str | bytes | Path) -> int:
        """Watch ``path``; its watch descriptor, or -1 if it went away meanwhile."""
        wd = int(self._libc.inotify_add_watch(self._fd, os.fsencode(path), self._mask))
        if wd < 0:
            number = ctypes.get_errno()
            if number in (errno.ENOENT, errno.ENOTDIR):
                return -1
            raise OSError(number, os.strerror(number), str(path))
        return wd

    def _watch_all(self) -> None:
        raise NotImplementedError

    def start(self) -> None:
        self._fd = int(self._libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC))
        if self._fd < 0:
            number = ctypes.get_errno()
            raise OSError(number, os.strerror(number))
        try:
            self._watch_all()
        except OSError:
            os.close(self._fd)
            raise
        self._wake_r, self._wake_w = os.pipe()
        self._thread.start()

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        os.write(self._wake_w, b"x")
        self._thread.join()
        for fd in (self._fd, self._wake_r, self._wake_w):
            os.close(fd)

    def _run(self) -> None:
        for _ in _readable(self._fd, self._wake_r):
            try:
                data = os.read(self._fd, 64 * 1024)
            except BlockingIOError:
                continue
            offset = 0
            while offset + _EVENT.size <= len(data):
                wd, mask, _, size = _EVENT.unpack_from(data, offset)
                name = data[offset + _EVENT.size:offset + _EVENT.size + size].rstrip(b"\0")
                offset += _EVENT.size + size
                self._event(wd, mask, name)
            self._read_done()

    def _event(self, wd: int, mask: int, name: bytes) -> None:
        raise NotImplementedError

    def _read_done(self) -> None:
        """After the events of one read: a subclass may act once for several."""


class PluginDirWatcher(_Inotify):
    """Calls ``on_kubelet()`` when kubelet.sock appears, ``on_deleted(name)`` when a file goes (or is renamed away)."""

    def __init__(self, directory: Path, *, on_kubelet: Callable[[], None],
                 on_deleted: Callable[[str], None], kubelet_socket_name: str) -> None:
        super().__init__("cmk-plugin-dir-watch", _IN_CREATE | _IN_DELETE | _IN_MOVED_FROM | _IN_MOVED_TO)
        self._dir = directory
        self._on_kubelet, self._on_deleted = on_kubelet, on_deleted
        self._kubelet = os.fsencode(kubelet_socket_name)

    def _watch_all(self) -> None:
        if self.watch(self._dir) < 0:
            raise OSError(errno.ENOENT, os.strerror(errno.ENOENT), str(self._dir))

    def _event(self, wd: int, mask: int, name: bytes) -> None:
        if mask & _IN_ISDIR or not name:
            return
        if mask & (_IN_DELETE | _IN_MOVED_FROM):
            self._on_deleted(os.fsdecode(name))
        elif name == self._kubelet:
            self._on_kubelet()


class _InotifyCpuWatcher(_Inotify):
    """``cpu/`` and each ``cpuN/`` folder, not their subfolders: the ``online`` files live there.

    A recursive watch of the whole tree (as watchdog did it) also watched
    every ``topology/`` and ``cache/indexN/`` folder: 57,345 watches and 2.4 s
    of Python at start on 8,192 CPUs, 3.6 MB on 1,024, for events that never
    come. A ``cpuN`` folder created later (a hotplugged CPU in a dump) is
    watched from its creation on. Only close-after-write, create and move
    events are asked for, so the daemon's own reads never wake it.
    """

    def __init__(self, cpu_dir: Path, on_change: Callable[[], None]) -> None:
        super().__init__("cmk-cpu-watch", _IN_CLOSE_WRITE | _IN_MOVED_TO | _IN_CREATE)
        self._dir, self._on_change = cpu_dir, on_change
        self._root = -1
        self._changed = False

    def _watch_all(self) -> None:
        self._root = self.watch(self._dir)
        # Scanned as bytes: names and paths come as the kernel's inotify_add_watch takes them, with no
        # encoding per entry (a Path each was a third of the start on 8,192 CPUs, a str two encodings).
        with os.scandir(os.fsencode(self._dir)) as entries:
            for entry in entries:
                if _CPU_DIR.fullmatch(entry.name) and entry.is_dir(follow_symlinks=False):
                    self.watch(entry.path)

    def _event(self, wd: int, mask: int, name: bytes) -> None:
        if wd == self._root and mask & _IN_ISDIR and _CPU_DIR.fullmatch(name):
            try:
                self.watch(self._dir / os.fsdecode(name))
            except OSError as err:  # the CPU's own online file then goes unseen: say so
                log.warning("cannot watch %s: %s", self._dir / os.fsdecode(name), err.strerror)
            self._changed = True
        elif name == b"online":
            self._changed = True

    def _read_done(self) -> None:
        if self._changed:
            self._changed = False
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
        for _ in _readable(self._sock, self._wake_r):
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
