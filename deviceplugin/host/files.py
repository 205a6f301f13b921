"""The one reader of every file a ``cmk`` command reads: bounded, never blocking, one-line errors.

Config files, sysfs and procfs files all come through :func:`read_file`. It
refuses, with a :class:`FileProblem` naming the path, whatever is not a
regular file (a FIFO would block ``open`` or ``read`` forever, ``/dev/zero``
never ends, a socket or directory is no text), a file larger than the
caller's limit, and every OS error (symlink loop, no permission, a name too
long) in the OS's words. The file is opened ``O_NONBLOCK`` and checked with
``fstat`` on the open descriptor, so a FIFO swapped in after a ``stat`` still
cannot block. sysfs and procfs files report a size of 4096 or 0 whatever they
hold, so the limit is enforced by reading at most ``limit + 1`` bytes.
"""

from __future__ import annotations

import os
import stat

from deviceplugin.errors import CmkError, one_line

shown = one_line  # a path as a one-line message shows it

#: sysfs and procfs files are one page; a cpu list of 8,192 CPUs in the worst form fits many times over.
PSEUDO_FILE_LIMIT = 64 * 1024
_KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
          stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a directory", stat.S_IFLNK: "a symlink"}


class FileProblem(CmkError):
    """A file that cannot be read as a small regular file; the message names the path."""


def read_file(path: str | os.PathLike[str], limit: int, *, what: str = "") -> bytes | None:
    """The whole content of regular file ``path``, at most ``limit`` bytes; ``None`` if it does not exist.

    ``what`` names the file in errors, with a trailing space ("config file ").
    A first read that returns the file's whole ``st_size`` ends it: discovery
    reads ~50,000 small files on 8,192 CPUs, and the read that would only see
    the end was a fifth of the time. (sysfs and procfs report 4096 or 0, so
    there a second read still finds the end.)
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except ValueError:  # a NUL in the name
        raise FileProblem(f"cannot read {what}{shown(path)}: the path holds a NUL byte") from None
    except OSError as err:
        raise FileProblem(f"cannot read {what}{shown(path)}: {_reason(err)}") from None
    try:
        status = os.fstat(fd)
        kind = stat.S_IFMT(status.st_mode)
        if kind != stat.S_IFREG:
            raise FileProblem(f"cannot read {what}{shown(path)}: it is {_KINDS.get(kind, 'not a regular file')}, "
                              "not a regular file")
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, min(65536, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size == status.st_size and size <= limit:
                break
        if size > limit:
            raise FileProblem(f"cannot read {what}{shown(path)}: larger than the {limit}-byte limit")
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)
    except BlockingIOError:
        raise FileProblem(f"cannot read {what}{shown(path)}: reading would block") from None
    except OSError as err:
        raise FileProblem(f"cannot read {what}{shown(path)}: {_reason(err)}") from None
    finally:
        os.close(fd)


def check_directory(path: str | os.PathLike[str], *, what: str) -> bool:  # what: "sysfs root"
    """True if ``path`` is a directory, False if nothing is there; a FileProblem for anything else."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return False
    except ValueError:
        raise FileProblem(f"{what} {shown(path)}: the path holds a NUL byte") from None
    except OSError as err:
        raise FileProblem(f"cannot open {what} {shown(path)}: {_reason(err)}") from None
    if not stat.S_ISDIR(mode):
        raise FileProblem(f"{what} {shown(path)} is {_KINDS.get(stat.S_IFMT(mode), 'a file')}, not a directory")
    return True


def _reason(err: OSError) -> str:
    if isinstance(err, PermissionError):
        return "permission denied (run as a user who may read it, or fix its mode)"
    return err.strerror or str(err)
