"""Where a process's threads last ran, from procfs: shared by the podman tests and the node tier's guest.

Kept free of pytest, which costs the guest seconds to import under TCG.
"""

from __future__ import annotations

import os
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
