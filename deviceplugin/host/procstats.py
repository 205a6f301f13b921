"""Reads ``stat``, ``interrupts`` and ``softirqs`` under a procfs root into a :class:`~deviceplugin.model.cpustats.Sample`.

The root is a parameter (like ``--sysfs-root``), so tests hand it copies with
known counters. Every failure is a :class:`~deviceplugin.model.cpustats.StatsError`
naming the file; callers decide whether that is fatal (it never is: the
metrics report ``cmk_cpu_stats_up 0``, describe prints one line). A table the container runtime
masked is not a failure: :attr:`~deviceplugin.model.cpustats.Sample.masked` names it.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from deviceplugin.host import malloc
from deviceplugin.host.files import FileProblem, read_file
from deviceplugin.model.cpustats import (
    Sample,
    StatsError,
    interrupt_kinds,
    parse_stat,
    softirq_kinds,
)

T = TypeVar("T")

#: USER_HZ, the unit of /proc/stat: 100 on every architecture Linux builds for, asked anyway.
TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")


#: /proc/interrupts grows with CPUs times IRQ lines, 11 bytes a count: 2.5 MB on 1,024 CPUs with 200 lines,
#: 18 MB on 8,192 (the contract's limit), 64 MiB there with 700 lines; far past that it is no procfs.
PROC_TABLE_LIMIT = 64 * 1024 * 1024


def _read(path: Path) -> str:
    try:
        raw = read_file(path, PROC_TABLE_LIMIT)
    except FileProblem as err:
        raise StatsError(f"{err} (is --procfs-root a procfs?)") from None
    if raw is None:
        raise StatsError(f"cannot read {path}: No such file or directory (is --procfs-root a procfs?)")
    return raw.decode("ascii", "replace")


def _parsed(path: Path, parse: Callable[[str], T]) -> T:
    text = _read(path)
    try:
        return parse(text)
    except StatsError as err:
        raise StatsError(f"{path}: {err}") from None


def read_sample(procfs_root: Path, ticks_per_second: int = TICKS_PER_SECOND) -> Sample:
    """One reading of the three files; a file in the wrong format names itself and the line."""
    times = _parsed(procfs_root / "stat", lambda text: parse_stat(text, ticks_per_second))
    if not times:
        raise StatsError(f"{procfs_root / 'stat'} lists no cpuN line (is --procfs-root a procfs?)")
    masked = frozenset(name for name in ("interrupts", "softirqs") if _masked(procfs_root / name))
    interrupts = {} if "interrupts" in masked else _parsed(procfs_root / "interrupts", interrupt_kinds)
    softirqs = {} if "softirqs" in masked else _parsed(procfs_root / "softirqs", softirq_kinds)
    malloc.trim()  # the tables' lines are freed: megabytes the next reading need not keep
    return Sample(times, interrupts, softirqs, masked)


def _masked(path: Path) -> bool:
    """True for a character device where a procfs table should be: a runtime's mask (``/dev/null`` bound over it).

    Kubernetes (1.36: ``pkg/securitycontext`` defaultMaskedPaths, kept in sync with moby) and
    containerd 2.x mask ``/proc/interrupts`` in every container whose procMount is Default, the
    DaemonSet's daemon included; /proc/stat is never masked, so busy time and leaks stay measurable.
    """
    try:
        return stat.S_ISCHR(os.stat(path).st_mode)
    except OSError:
        return False  # reading it names the problem


def sample_window(procfs_root: Path, seconds: float) -> tuple[Sample, Sample, float]:
    """Two readings about ``seconds`` apart, and the seconds that really passed (the rates' denominator)."""
    before, start = read_sample(procfs_root), time.monotonic()
    time.sleep(seconds)
    after, end = read_sample(procfs_root), time.monotonic()
    return before, after, end - start
