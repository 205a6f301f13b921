"""glibc's allocator, tuned and trimmed so the daemon's resident memory stays near what it holds.

glibc only: elsewhere (musl, no ``mallopt``/``malloc_trim``) nothing changes.
"""

from __future__ import annotations

import ctypes
from functools import cache

#: glibc's mallopt parameters (malloc.h)
_M_MMAP_THRESHOLD, _M_ARENA_MAX = -3, -8


@cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None)


def tune() -> None:
    """A fixed mmap threshold and two arenas; call before the first thread (arenas are made per thread).

    A scrape reads multi-megabyte procfs tables in one of the HTTP server's
    threads: glibc gives each thread its own arena, and after the first
    large block is freed it raises its mmap threshold so later ones come
    from (and stay in) the arenas. A fixed 128 KiB threshold and two arenas
    return those blocks to the kernel (-3.5 MB after scrapes on 1,024 CPUs).
    """
    mallopt = getattr(_libc(), "mallopt", None)
    if mallopt is not None:
        mallopt(_M_MMAP_THRESHOLD, 128 * 1024)
        mallopt(_M_ARENA_MAX, 2)


def trim() -> None:
    """Give the kernel back the free pages of every arena, after a burst of blocks under the mmap threshold.

    Reading ``/proc/interrupts`` splits it into one string per line (90 KB
    each on 8,192 CPUs): freed, those pages stay in the arena, 20 MB that a
    scrape never uses again. Trimming takes about a millisecond.
    """
    malloc_trim = getattr(_libc(), "malloc_trim", None)
    if malloc_trim is not None:
        malloc_trim(0)
