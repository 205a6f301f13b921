"""Where a process's threads last ran, from procfs: shared by the podman tests and the node tier's guest.

Kept free of pytest, which costs the guest seconds to import under TCG.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TypeVar

K = TypeVar("K")


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


def samples_on_each(processes: Mapping[K, Callable[[], Iterable[int]]], cpus: frozenset[int], seconds: float,
                    every: float = 0.01) -> dict[K, tuple[int, int]]:
    """For each key, (samples on ``cpus``, all samples) of the CPU each thread of its ``processes()`` last ran on.

    Sampled every ``every`` s for ``seconds``, all keys in the same rounds.
    """
    counts = {key: [0, 0] for key in processes}
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for key, pids in processes.items():
            for pid in pids():
                try:
                    ran = last_cpus(pid)
                except FileNotFoundError:
                    continue
                counts[key][0] += sum(1 for cpu in ran if cpu in cpus)
                counts[key][1] += len(ran)
        time.sleep(every)
    return {key: (hits, total) for key, (hits, total) in counts.items()}
