"""Package numbers for CPUs whose ``physical_package_id`` is unknown (-1 on POWER, s390, some ARM guests).

One rule, so the daemon's topology (``deviceplugin.host.sysfs``) and the
pinner's ``--socket-id`` mean the same CPUs by "socket N". The rule is written
twice on purpose: the C pinner (``pinner/native/sockets.c``) runs in images
with no Python, so it cannot import this; it follows it line by line, and
``tests/pinner/test_isolate_sockets.py`` compares the two on every dump (a
deliberate duplicate, listed in ``docs/dev/layout.md``). As lscpu and hwloc
do, a package is the set of CPUs its package list names.
"""

from __future__ import annotations

from collections.abc import Mapping

#: Where a CPU's package list is read, in this order (the kernel renamed ``core_siblings`` in 5.6).
PACKAGE_LIST_FILES = ("package_cpus_list", "core_siblings_list", "package_cpus", "core_siblings")
#: Why a CPU's socket cannot be told (the pinner prints it after the ``physical_package_id`` path).
UNKNOWN_PACKAGE_TEXT = (
    "-1 (unknown), and the CPU is offline or no package_cpus_list or core_siblings_list beside it names its package"
)


def number_packages(known: Mapping[int, int], lists: Mapping[int, frozenset[int]]) -> dict[int, int]:
    """``{cpu: package}`` for each CPU of ``lists`` whose package list names any CPU.

    ``known`` holds the online CPUs whose package id the kernel reported;
    ``lists`` the other online CPUs, each with the CPUs its package list
    names. A package one of its CPUs has an id for keeps the lowest such id;
    the others are numbered after the known ids, in the order of their
    lowest CPU (as lscpu does).
    """
    next_id = max(known.values(), default=-1) + 1
    numbers: dict[frozenset[int], int] = {}
    derived: dict[int, int] = {}
    for cpu in sorted(lists):
        if not lists[cpu]:
            continue
        members = lists[cpu] | {cpu}
        if members not in numbers:
            named = [known[member] for member in members if member in known]
            numbers[members] = min(named) if named else next_id
            next_id += not named
        derived[cpu] = numbers[members]
    return derived
