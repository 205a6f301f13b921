"""A synthetic machine's sysfs and procfs, written as the kernel lays them out.

The real dumps in ``shared/fixtures/topologies`` stop at 256 CPUs; benchmarks
(discovery, pool planning, the daemon) need 1,024. The tree follows what an
x86 kernel writes: CPUs numbered first threads of every core across all
sockets, then second threads (siblings ``n`` and ``n + cores``), ``*_list``
files beside the hex masks, L1d/L1i/L2 per core and L3 per NUMA node (as on
SNC or AMD NPS machines) or, with ``l3_per_node``, several L3 groups of
consecutive cores per node (AMD CCXs, Intel sub-NUMA L3 slices), no
``online`` file for cpu0, and ``isolcpus=`` on the command line matching
``cpu/isolated``.

Importable (``from benchmarks.synthetic_sysfs import write_synthetic_sysfs``)
and runnable: ``python benchmarks/synthetic_sysfs.py DIR 4 2 64 2`` writes a
1,024-CPU tree to DIR.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

if not __package__:  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from deviceplugin.model.cpulist import format_cpu_list


class SyntheticRoots(NamedTuple):
    """Where the tree was written: pass these as ``--sysfs-root``/``--procfs-root``."""

    sysfs: Path
    procfs: Path


def write_synthetic_sysfs(
    root: Path,
    sockets: int,
    nodes_per_socket: int,
    cores_per_node: int,
    threads_per_core: int,
    isolated: Iterable[int] = (),
    *,
    base_frequency_khz: int | None = None,
    l3_per_node: int = 1,
) -> SyntheticRoots:
    """Write ``root/sys/devices/system/{cpu,node}`` and ``root/proc/cmdline``.

    ``isolated`` CPUs go to ``cpu/isolated`` and to ``isolcpus=`` on the
    command line; ``base_frequency_khz`` adds ``cpufreq/base_frequency``;
    ``l3_per_node`` splits each node's cores into that many L3 groups.
    """
    cores = sockets * nodes_per_socket * cores_per_node
    total = cores * threads_per_core
    if total == 0:
        raise ValueError("a synthetic machine needs at least one CPU")
    if l3_per_node < 1 or cores_per_node % l3_per_node:
        raise ValueError(f"{cores_per_node} cores per node do not split into {l3_per_node} equal L3 groups")
    cores_per_l3 = cores_per_node // l3_per_node
    isolated_set = frozenset(isolated)
    system = root / "sys" / "devices" / "system"
    cpu_root = system / "cpu"
    files: dict[Path, str] = {}

    def core_threads(core: int) -> list[int]:
        return [core + thread * cores for thread in range(threads_per_core)]

    for core in range(cores):
        node, core_in_node = divmod(core, cores_per_node)
        socket = node // nodes_per_socket
        threads = core_threads(core)
        l3_first = core - core % cores_per_l3
        l3_cpus = [t for c in range(l3_first, l3_first + cores_per_l3) for t in core_threads(c)]
        socket_first = socket * nodes_per_socket * cores_per_node
        socket_cpus = [
            t
            for c in range(socket_first, socket_first + nodes_per_socket * cores_per_node)
            for t in core_threads(c)
        ]
        topology_files = {
            "physical_package_id": str(socket),
            "die_id": "0",
            "die_cpus_list": format_cpu_list(socket_cpus),
            "die_cpus": _mask(socket_cpus, total),
            "core_id": str(core_in_node + (node % nodes_per_socket) * cores_per_node),
            "cluster_id": str(core),
            "core_cpus_list": format_cpu_list(threads),
            "core_cpus": _mask(threads, total),
            "thread_siblings_list": format_cpu_list(threads),
            "thread_siblings": _mask(threads, total),
            "core_siblings_list": format_cpu_list(socket_cpus),
            "core_siblings": _mask(socket_cpus, total),
            "package_cpus_list": format_cpu_list(socket_cpus),
            "package_cpus": _mask(socket_cpus, total),
        }
        caches = [
            (1, "Data", threads),
            (1, "Instruction", threads),
            (2, "Unified", threads),
            (3, "Unified", l3_cpus),
        ]
        for cpu in threads:
            cpu_dir = cpu_root / f"cpu{cpu}"
            if cpu != 0:
                files[cpu_dir / "online"] = "1"
            for name, value in topology_files.items():
                files[cpu_dir / "topology" / name] = value
            for index, (level, kind, shared) in enumerate(caches):
                index_dir = cpu_dir / "cache" / f"index{index}"
                files[index_dir / "level"] = str(level)
                files[index_dir / "type"] = kind
                files[index_dir / "shared_cpu_list"] = format_cpu_list(shared)
                files[index_dir / "shared_cpu_map"] = _mask(shared, total)
            if base_frequency_khz is not None:
                files[cpu_dir / "cpufreq" / "base_frequency"] = str(base_frequency_khz)

    every = format_cpu_list(range(total))
    for name, value in {
        "online": every,
        "possible": every,
        "present": every,
        "offline": "",
        "isolated": format_cpu_list(isolated_set),
        "nohz_full": "",
    }.items():
        files[cpu_root / name] = value
    nodes = sockets * nodes_per_socket
    for node in range(nodes):
        members = [t for c in range(node * cores_per_node, (node + 1) * cores_per_node) for t in core_threads(c)]
        files[system / "node" / f"node{node}" / "cpulist"] = format_cpu_list(members)
        files[system / "node" / f"node{node}" / "cpumap"] = _mask(members, total)
    for name in ("online", "possible", "has_cpu"):
        files[system / "node" / name] = format_cpu_list(range(nodes))

    cmdline = "BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro quiet"
    if isolated_set:
        cmdline += f" isolcpus={format_cpu_list(isolated_set)}"
    files[root / "proc" / "cmdline"] = cmdline

    made: set[Path] = set()
    for path, value in files.items():
        if path.parent not in made:
            path.parent.mkdir(parents=True, exist_ok=True)
            made.add(path.parent)
        # os-level writes: an 8,192-CPU tree is 250,000 files, and Path.write_text's text layer doubles the time
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, (value + "\n").encode())
        finally:
            os.close(fd)
    return SyntheticRoots(sysfs=root / "sys", procfs=root / "proc")


def _mask(cpus: Iterable[int], total: int) -> str:
    """A sysfs hex mask: 32-bit words, most significant first, as wide as the machine."""
    value = 0
    for cpu in cpus:
        value |= 1 << cpu
    words = max(1, (total + 31) // 32)
    return ",".join(f"{value >> (32 * word) & 0xFFFFFFFF:08x}" for word in reversed(range(words)))


def main(argv: list[str]) -> int:
    if len(argv) not in (5, 6) or not all(arg.isdigit() for arg in argv[1:]):
        print(
            "usage: synthetic_sysfs.py DIR SOCKETS NODES_PER_SOCKET CORES_PER_NODE THREADS_PER_CORE [L3_PER_NODE]",
            file=sys.stderr,
        )
        return 2
    sockets, nodes, cores, threads, *l3 = (int(arg) for arg in argv[1:])
    try:
        roots = write_synthetic_sysfs(Path(argv[0]), sockets, nodes, cores, threads, l3_per_node=l3[0] if l3 else 1)
    except ValueError as error:
        print(f"synthetic_sysfs.py: {error}", file=sys.stderr)
        return 2
    print(f"--sysfs-root {roots.sysfs} --procfs-root {roots.procfs}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
