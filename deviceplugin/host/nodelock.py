"""One daemon per node: an ``flock`` on a file in the kubelet's device-plugin directory.

Two daemons on one node (a node relabelled between two DaemonSets, a rollout
with a surge) would unlink each other's sockets and register the same
resources. The lock is taken before the daemon touches any file, so the second
one refuses to start and says who holds it.

Why ``flock`` on a file in the device-plugin directory: that directory is the
one host path every daemon of any DaemonSet must mount (an abstract unix
socket would be per network namespace, so two pods without ``hostNetwork``
would both get one). The kernel releases the lock when its holder dies, however
it dies: the file left behind is only a place, never the lock, and says who
last held it. The kubelet deletes only sockets in that directory.
"""

from __future__ import annotations

import fcntl
import os
import socket
from pathlib import Path

from deviceplugin.errors import CmkError, os_reason

LOCK_FILE_NAME = "cmk-device-plugin.lock"


def holder_text() -> str:
    """Who we are, as the next daemon will read it: pid (in our pid namespace) and host (the pod's name)."""
    return f"pid {os.getpid()} on {socket.gethostname()}"


class NodeLock:
    """Held from :meth:`acquire` until :meth:`release` or the process's death."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / LOCK_FILE_NAME
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock or raise CmkError naming the daemon holding it."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as err:
            raise CmkError(f"cannot open the lock file {self.path} (--kubelet-dir must be a writable directory): "
                           f"{os_reason(err)}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "a process"
            os.close(fd)
            raise CmkError(f"another cmk device-plugin ({holder}) already serves {self.path.parent} "
                           f"(it holds {self.path}); only one daemon may serve a node: stop the other "
                           "one or remove this node from one of the two DaemonSets") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, (holder_text() + "\n").encode(), 0)
        self._fd = fd

    def holds_current_file(self) -> bool:
        """False once the directory (and so the file) was deleted or replaced under us."""
        if self._fd is None:
            return False
        try:
            current = os.stat(self.path)
        except OSError:
            return False
        mine = os.fstat(self._fd)
        return (current.st_dev, current.st_ino) == (mine.st_dev, mine.st_ino)

    def release(self) -> None:
        """Closing the descriptor releases the flock; the file stays (it is not the lock)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
