"""Replacing a file so that a reader (container runtime, nfd-worker, a pod exec'ing the pinner)
sees the old content or the new, whole, never a partial write.

The one place the daemon writes files on the host: CDI specs, the NFD feature
file and the installed pinner all go through :func:`write_atomically`.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomically(target: Path, data: bytes, *, mode: int) -> None:
    """Write ``data`` to a dot-named temp file beside ``target``, fsync, then rename it over ``target``.

    The dot prefix and ``.tmp`` suffix keep the temp file out of directory
    scanners (CDI ignores names not ending in ``.json``, NFD skips dot files).
    Creates the directory. Raises OSError; the caller says what failed and how to fix it.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            os.fchmod(out.fileno(), mode)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
