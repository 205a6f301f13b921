"""Where the real machine dumps live, and the fixture README's recipe for changing a copy of one.

Shared by every test and benchmark that reads ``../shared/fixtures/topologies``
(override with CMK_FIXTURES). The dumps are read-only shared data: a test that
writes ``isolated``, ``cmdline`` or flips ``cpuN/online`` works on its own copy.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import replace
from pathlib import Path

from deviceplugin.model.cpulist import format_cpu_list, parse_cpu_list
from deviceplugin.model.topology import Cpu, Topology

FIXTURES = Path(
    os.environ.get("CMK_FIXTURES")
    or Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "topologies"
)


def fixture_copy(name: str, dest: Path, *, isolcpus: str | None = None,
                 cmdline: str | None = None) -> tuple[Path, Path]:
    """(sysfs root, procfs root) of a writable copy of dump ``name`` under ``dest``.

    ``isolcpus`` is written to ``cpu/isolated`` and, unless ``cmdline`` is
    given, onto the kernel command line as the kernel would show it.
    """
    root = dest / name
    shutil.copytree(FIXTURES / name, root, symlinks=True)
    for path in [root, *root.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o200)  # the corpus is read-only
    sysfs, procfs = root / "sys", root / "proc"
    procfs.mkdir(exist_ok=True)
    if isolcpus is not None:
        (sysfs / "devices/system/cpu/isolated").write_text(isolcpus + "\n")
        cmdline = cmdline or f"BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro isolcpus={isolcpus}"
    if cmdline is not None:
        (procfs / "cmdline").write_text(cmdline + "\n")
    return sysfs, procfs


def set_online(sysfs: Path, cpu: int, online: bool) -> None:
    """Flip one CPU the way the kernel shows it: ``cpuN/online`` and the ``cpu/online`` list."""
    cpu_dir = sysfs / "devices/system/cpu"
    (cpu_dir / f"cpu{cpu}/online").write_text("1\n" if online else "0\n")
    listing = cpu_dir / "online"
    if listing.exists():
        cpus = set(parse_cpu_list(listing.read_text()))
        cpus = cpus | {cpu} if online else cpus - {cpu}
        listing.write_text(format_cpu_list(cpus) + "\n")


def offline_view(full: Topology, offline: frozenset[int], isolated: frozenset[int] | None = None) -> Topology:
    """``full`` as discovery reads it with ``offline`` CPUs down: no placement for them, siblings without them."""
    cpus = {n: Cpu(id=n, online=False) if n in offline else replace(c, siblings=c.siblings - offline)
            for n, c in full.cpus.items()}
    return Topology(cpus=cpus, isolated=full.isolated if isolated is None else isolated, nohz_full=full.nohz_full)


def take_offline_as_the_kernel_does(sysfs: Path, cpu: int) -> None:
    """``cpuN/online`` 0, its ``topology/`` folder gone, and its siblings' lists without it."""
    set_online(sysfs, cpu, False)
    cpu_dir = sysfs / "devices/system/cpu"
    topology = cpu_dir / f"cpu{cpu}/topology"
    siblings = {int(x) for x in (topology / "thread_siblings_list").read_text().replace("-", ",").split(",")}
    for path in sorted(topology.iterdir()):
        path.unlink()
    topology.rmdir()
    for sibling in siblings - {cpu}:
        (cpu_dir / f"cpu{sibling}/topology/thread_siblings_list").write_text(f"{sibling}\n")
        (cpu_dir / f"cpu{sibling}/topology/thread_siblings").write_text(f"{1 << sibling:x}\n")


def topology(name: str) -> Path:
    """A real machine's dump, from ``CMK_FIXTURES`` like every other test's."""
    path = FIXTURES / name
    if not path.is_dir():
        raise FileNotFoundError(f"topology fixture {name} not found in {FIXTURES} (set CMK_FIXTURES)")
    return path
