"""Where a process's threads last ran, from procfs: shared by the podman tests and the node tier's guest.

Kept free of pytest, which costs the guest seconds to import under TCG.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path


def last_cpus(pid: int) -> list[int]:
    """The CPU each thread of ``pid`` last ran on (field 39 of ``/proc/PID/task/TID/stat``); exited threads skipped."""
    cpus = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            text = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue
        cpus.append(int(text[text.rindex(")") + 2:].split()[36]))  # fields from 3 (state) on
    return cpus


def samples_on(processes: Callable[[], Iterable[int]], cpus: frozenset[int], seconds: float,
               every: float = 0.01) -> tuple[int, int]:
    """(samples on ``cpus``, all samples) of the CPU each thread of ``processes()`` last ran on, every ``every`` s."""
    hits = total = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for pid in processes():
            try:
                ran = last_cpus(pid)
            except FileNotFoundError:
                continue
            hits += sum(1 for cpu in ran if cpu in cpus)
            total += len(ran)
        time.sleep(every)
    return hits, total
