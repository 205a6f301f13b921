"""Where the real machine dumps live, and the README's recipe for giving one isolated CPUs.

Shared by every test that reads ``../shared/fixtures/topologies`` (override with CMK_FIXTURES).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

FIXTURES = Path(
    os.environ.get("CMK_FIXTURES")
    or Path(__file__).resolve().parents[1].parent / "shared" / "fixtures" / "topologies"
)


def fixture_copy(name: str, dest: Path, *, isolated: str | None = None,
                 cmdline: str | None = None) -> tuple[Path, Path]:
    """Copy dump ``name`` under ``dest`` (writable), optionally writing cpu/isolated and proc/cmdline.

    Returns the copy's (sysfs root, procfs root).
    """
    copy = dest / name
    shutil.copytree(FIXTURES / name, copy)
    for path in [copy, *copy.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o200)  # the corpus is read-only
    (copy / "proc").mkdir(exist_ok=True)
    if isolated is not None:
        (copy / "sys/devices/system/cpu/isolated").write_text(isolated + "\n")
    if cmdline is not None:
        (copy / "proc/cmdline").write_text(cmdline + "\n")
    return copy / "sys", copy / "proc"
