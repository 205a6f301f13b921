"""Copies of the real topology dumps with isolcpus written in, for tests that change them.

The dumps are read-only shared data; a test that writes ``isolated``,
``cmdline`` or flips ``cpuN/online`` works on its own copy under tmp_path.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

FIXTURES = Path(
    os.environ.get("CMK_FIXTURES", Path(__file__).resolve().parents[1].parent / "shared/fixtures/topologies")
)


def fixture_copy(name: str, dest: Path, *, isolcpus: str | None = None) -> tuple[Path, Path]:
    """(sysfs root, procfs root) of a copy of fixture ``name``, with ``isolcpus`` written in when given."""
    root = dest / name
    shutil.copytree(FIXTURES / name, root, symlinks=True)
    sysfs, procfs = root / "sys", root / "proc"
    procfs.mkdir(exist_ok=True)
    if isolcpus is not None:
        (sysfs / "devices/system/cpu/isolated").write_text(isolcpus + "\n")
        (procfs / "cmdline").write_text(f"BOOT_IMAGE=/vmlinuz root=/dev/sda1 isolcpus={isolcpus}\n")
    return sysfs, procfs


def set_online(sysfs: Path, cpu: int, online: bool) -> None:
    """Flip one CPU the way the kernel shows it: ``cpuN/online`` and the ``cpu/online`` list."""
    from pinner.cpulist import format_cpu_list, parse_cpu_list

    cpu_dir = sysfs / "devices/system/cpu"
    (cpu_dir / f"cpu{cpu}/online").write_text("1\n" if online else "0\n")
    listing = cpu_dir / "online"
    if listing.exists():
        cpus = set(parse_cpu_list(listing.read_text()))
        cpus = cpus | {cpu} if online else cpus - {cpu}
        listing.write_text(format_cpu_list(cpus) + "\n")
