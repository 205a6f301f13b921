"""Hostile files and values: one table, shared by every command surface's test.

:func:`plant` turns a path into one hostile kind of file. Each kind names what
a reader must refuse (or, for ``nul bytes`` in sysfs, tolerate): the table in
the "Bad input" section of docs/user/daemon.md lists the same kinds.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from pathlib import Path

NOBODY = 65534
BIG = 2 * 1024 * 1024  # past every limit of the bounded reader

#: kind -> the user to run as (None: the test's own)
FILE_KINDS: dict[str, int | None] = {
    "fifo": None,
    "/dev/zero": None,
    "/dev/null": None,
    "directory": None,
    "symlink loop": None,
    "socket": None,
    "too large": None,
    "invalid utf-8": None,
    "unreadable": NOBODY,
    "unsearchable parent": NOBODY,
}


def plant(path: Path, kind: str) -> Path:
    """Replace ``path`` by a ``kind`` file; returns the path to hand to the command (may differ)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind in ("/dev/zero", "/dev/null"):
        path.symlink_to(kind)
    elif kind == "directory":
        path.mkdir()
    elif kind == "symlink loop":
        path.symlink_to(path.name + ".loop")
        path.with_name(path.name + ".loop").symlink_to(path.name)
    elif kind == "socket":
        short = Path(tempfile.mkdtemp(prefix="cmk-s-")) / "s"  # sun_path is short: bind there, move in
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(str(short))
        short.rename(path)
        short.parent.rmdir()
    elif kind == "too large":
        path.write_bytes(b"0" * BIG)
    elif kind == "invalid utf-8":
        path.write_bytes(b"\xff\xfe\xc3\x28 \x80\n")
    elif kind == "unreadable":
        path.write_text("0\n")
        path.chmod(0)
    elif kind == "unsearchable parent":
        path.write_text("0\n")
        path.parent.chmod(0o700)
    else:
        raise ValueError(kind)
    return path


#: Counts as flags: every one must be a one-line error (the valid 0/1 aside).
BAD_COUNTS = [
    "99999999999999999999", "9" * 5000, "+1", "1_000", " 1", "1 ", "٣", "１", "0x10", "1e3", "1.0", "-1",
    "nan", "inf", "", "--", "- 1", "1\n", "\x00", "１０", "𝟙",
]
#: Slots: the counts plus the numbers just past the protocol bound (added by the test).
BAD_CPU_LISTS = ["0-99999999", "9" * 5000, "٣", "1-0", ",", "0:1/0", "0-3:9/2", "-1", "0x1", "１", "0,,1",
                 "0-" + "9" * 30]
BAD_INSTALL_DIRS = [
    "/", "/usr", "/etc", "/bin", "/sbin", "/lib", "/lib64", "/proc", "/sys", "/dev", "/var", "/boot", "/root",
    "/home", "/usr/lib", "/proc/self", "/sys/fs/cgroup", "/dev/shm", "relative/dir", "", ".", "/opt/cmk/../..",
    "/opt/../etc", "/opt/cmk/..", "/opt/cmk/.", "//opt/cmk", "/opt//cmk", "/opt/cmk/", "/opt/cmk\n",
    "/opt/c\x01mk", "/opt/c\x7fmk", "/opt/" + "x" * 5000, "/opt/cmk\x00",
]
