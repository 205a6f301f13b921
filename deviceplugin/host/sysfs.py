"""Topology discovery: the one module that reads sysfs and procfs.

Both roots are parameters so tests and ``--sysfs-root``/``--procfs-root``
point discovery at a machine dump. The kernel's fallbacks are written as
code, in the order the kernel's own history needs them (the doc below lists each).

Why it works this way: ``docs/design/topology-discovery.md``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

from deviceplugin.errors import CmkError, os_reason
from deviceplugin.host.files import PSEUDO_FILE_LIMIT, check_directory, read_file, shown
from deviceplugin.model.bootparams import BootCpuSettings, parse_cmdline
from deviceplugin.model.limits import (
    CpuListError,
    checked_cpu_list,
    checked_cpu_mask,
    parse_count,
)
from deviceplugin.model.packages import PACKAGE_LIST_FILES, number_packages
from deviceplugin.model.pinnercontract import DEFAULT_SYSFS_ROOT as PINNER_SYSFS_ROOT
from deviceplugin.model.topology import Cpu, CpuTable, Topology

#: Where the host's sysfs and procfs are (the flags' defaults, the daemon's settings'); tests point them at dumps.
DEFAULT_SYSFS_ROOT = Path(PINNER_SYSFS_ROOT)
DEFAULT_PROCFS_ROOT = Path("/proc")

_CPU_DIR = re.compile(r"cpu(\d+)")
_NODE_DIR = re.compile(r"node(\d+)")
_CACHE_DIR = re.compile(r"index(\d+)")
_MAX_ID = 2**31 - 1  # topology ids are C ints; -1 is "unknown"
_NO_CPUS = "(null)"  # what cpu/nohz_full reads when nohz_full is off
_SIBLING_FILES = ("core_cpus_list", "thread_siblings_list", "core_cpus", "thread_siblings")
#: An id's file -> the files listing the CPUs that share it (the package's, the die's), list first.
_GROUP_FILES = {"physical_package_id": PACKAGE_LIST_FILES, "die_id": ("die_cpus_list", "die_cpus")}
T = TypeVar("T")
_ROOT_HINT = "pass --sysfs-root the directory that holds devices/system/cpu"


def discover(sysfs_root: Path = Path("/sys"), procfs_root: Path = Path("/proc"), *,
             later_threads_on_demand: bool = False) -> Topology:
    """Every possible CPU with its state and placement, plus the kernel's isolation settings.

    With ``later_threads_on_demand`` (the daemon) each core's first online
    thread is read now and the other threads' files only when their records
    are asked for (:class:`~deviceplugin.model.topology.CpuTable`): the cores,
    online CPUs and NUMA nodes are the same either way, and so is every
    record once read. Where a first thread's package id is unknown, its
    number depends on every thread's package list, so all are read now.
    """
    cpu_root = _system_dir(sysfs_root)
    reader = _Reader()
    dirs = _numbered_dirs(reader, cpu_root, _CPU_DIR)
    online = _online_cpus(reader, cpu_root, dirs)
    if not online:
        raise CmkError(f"{cpu_root} shows no online CPU ({_ROOT_HINT})")
    every = (reader.cpus(_join(cpu_root, "possible")) or frozenset()) | dirs.keys() | online
    node_of = _node_of(reader, os.path.join(str(sysfs_root), "devices", "system", "node"), online)

    def record(cpu: int, reader: _Reader = reader) -> Cpu:
        if cpu not in online:
            return Cpu(id=cpu, online=False)
        return _online_cpu(reader, cpu, dirs.get(cpu), node_of.get(cpu), online)

    cpus: Mapping[int, Cpu]
    first, later = _first_threads(every, online, record) if later_threads_on_demand else ({}, frozenset())
    if later and all(cpu.package is not None for cpu in first.values() if cpu.online):
        later_dirs = {cpu: dirs[cpu] for cpu in later if cpu in dirs}
        learnt = reader.groups()

        def read_later() -> dict[int, Cpu]:
            """The later threads' records as the eager path makes them (the first threads' packages are known)."""
            fresh = _Reader(learnt)
            records = {**first, **{cpu: _online_cpu(fresh, cpu, later_dirs.get(cpu), node_of.get(cpu), online)
                                   for cpu in sorted(later)}}
            records.update(_derived_packages(fresh, records, later_dirs))
            return {cpu: records[cpu] for cpu in later}

        cpus = CpuTable(first, {cpu: node_of.get(cpu) for cpu in later}, read_later)
    else:
        eager = {**first, **{cpu: record(cpu) for cpu in every if cpu not in first}}
        eager.update(_derived_packages(reader, eager, dirs))
        cpus = eager
    boot = read_boot_settings(procfs_root)
    isolated = (reader.cpus(_join(cpu_root, "isolated")) or frozenset()) | boot.isolcpus
    nohz_full = (reader.cpus(_join(cpu_root, "nohz_full")) or frozenset()) | boot.nohz_full
    return Topology(cpus=cpus, isolated=isolated, nohz_full=nohz_full)


def _first_threads(every: frozenset[int], online: frozenset[int],
                   record: Callable[[int], Cpu]) -> tuple[dict[int, Cpu], frozenset[int]]:
    """The records of the offline CPUs and of each core's first online thread, and the online CPUs left.

    A first thread is what :class:`~deviceplugin.model.topology.Topology` makes a core of: the
    lowest online CPU that no lower first thread lists among its siblings.
    """
    first: dict[int, Cpu] = {}
    covered: set[int] = set()
    for cpu in sorted(every):
        if cpu in covered:
            continue
        first[cpu] = found = record(cpu)
        if found.online:
            covered |= (found.siblings | {cpu}) & online
    return first, frozenset(covered - first.keys())


def online_cpus(sysfs_root: Path = Path("/sys")) -> frozenset[int]:
    """The online CPUs alone, as :func:`discover` finds them: all a hotplug event can change.

    The plan is fixed at start, so a CPU going offline or online only changes
    device health; re-reading every CPU's placement for that is ~100,000
    files on 8,192 CPUs (seconds holding the interpreter while pools register).
    """
    cpu_root = _system_dir(sysfs_root)
    reader = _Reader()
    online = reader.cpus(_join(cpu_root, "online")) or _online_cpus(
        reader, cpu_root, _numbered_dirs(reader, cpu_root, _CPU_DIR))
    if not online:
        raise CmkError(f"{cpu_root} shows no online CPU ({_ROOT_HINT})")
    return online


def _derived_packages(reader: _Reader, cpus: Mapping[int, Cpu], dirs: Mapping[int, str]) -> dict[int, Cpu]:
    """Online CPUs whose package id is unknown, given one from their package's CPU list.

    The numbering is :func:`deviceplugin.model.packages.number_packages`, the one both
    pinners' ``--socket-id`` uses.
    """
    lists: dict[int, frozenset[int]] = {}
    for cpu in sorted(cpus):
        if cpus[cpu].online and cpus[cpu].package is None and cpu in dirs:
            topology = _join(dirs[cpu], "topology")
            names = reader.listing(topology) or ()
            members = reader.cpus(*(_join(topology, name) for name in PACKAGE_LIST_FILES if name in names))
            if members:
                lists[cpu] = members
    known = {cpu.id: cpu.package for cpu in cpus.values() if cpu.package is not None}
    numbers = number_packages(known, lists)
    return {cpu: replace(cpus[cpu], package=package) for cpu, package in numbers.items()}


def read_boot_settings(procfs_root: Path) -> BootCpuSettings:
    """``isolcpus=``/``nohz_full=`` from ``<procfs_root>/cmdline``.

    A missing file means no boot parameters: machine dumps often lack it,
    and ``cpu/isolated`` still carries the kernel's view of ``isolcpus``.
    """
    path = _join(str(procfs_root), "cmdline")
    text = _Reader().text(path)
    if text is None:
        return BootCpuSettings()
    try:
        return parse_cmdline(text)
    except CpuListError as error:
        raise CmkError(f"{path}: {error}") from None


def _join(directory: str, name: str) -> str:
    return directory + "/" + name


def _system_dir(sysfs_root: Path) -> str:
    if not check_directory(sysfs_root, what="sysfs root"):
        raise CmkError(f"sysfs root {shown(sysfs_root)} does not exist ({_ROOT_HINT})")
    path = sysfs_root / "devices" / "system" / "cpu"
    if not check_directory(path, what="sysfs folder"):
        raise CmkError(f"{shown(path)} does not exist: {shown(sysfs_root)} is not a sysfs root ({_ROOT_HINT})")
    return str(path)


def _numbered_dirs(reader: _Reader, parent: str, pattern: re.Pattern[str]) -> dict[int, str]:
    """``cpuN``/``nodeN`` subfolders by number (``cpufreq``, ``cpuidle`` etc. are skipped)."""
    found: dict[int, str] = {}
    for name, is_dir in reader.entries(parent) or ():
        match = pattern.fullmatch(name)
        if match and is_dir():
            found[int(match.group(1))] = _join(parent, name)
    return found


def _online_cpus(reader: _Reader, cpu_root: str, dirs: Mapping[int, str]) -> frozenset[int]:
    listed = reader.cpus(_join(cpu_root, "online"))
    if listed:
        return listed
    online: set[int] = set()
    for cpu, path in dirs.items():
        flag_path = _join(path, "online")
        flag = reader.text(flag_path)
        if flag:
            if flag not in ("0", "1"):
                raise CmkError(f"{flag_path}: expected 0 or 1, found {flag!r}")
            if flag == "1":
                online.add(cpu)
        elif os.path.isdir(_join(path, "topology")):
            online.add(cpu)
    return frozenset(online)


def _node_of(reader: _Reader, node_root: str, online: frozenset[int]) -> dict[int, int]:
    nodes = _numbered_dirs(reader, node_root, _NODE_DIR) if os.path.isdir(node_root) else {}
    if not nodes:
        return dict.fromkeys(online, 0)
    node_of: dict[int, int] = {}
    for node in sorted(nodes, reverse=True):  # the lowest node, written last, wins
        path = nodes[node]
        members = reader.cpus(_join(path, "cpulist"), _join(path, "cpumap")) or frozenset()
        node_of.update(dict.fromkeys(members, node))
    return node_of


def _online_cpu(
    reader: _Reader, cpu: int, path: str | None, node: int | None, online: frozenset[int]
) -> Cpu:
    topology = _join(path, "topology") if path else ""
    try:  # each file is opened, not looked up in a listing first: a listing per CPU was a tenth of discovery
        siblings = reader.cpus(*(_join(topology, name) for name in _SIBLING_FILES)) if path else None
    except CmkError:
        reader.listing(topology)  # a file where the folder should be: say that, not what reading inside it says
        raise
    if path is None or (siblings is None and reader.listing(topology) is None):
        # Online but undescribed (a trimmed dump): a lone thread of unknown placement.
        return Cpu(id=cpu, online=True, node=node, siblings=frozenset({cpu}))
    core = reader.shared(((siblings or frozenset()) & online) | {cpu})
    base_frequency, epp = _cpufreq(reader, _join(path, "cpufreq"))
    return Cpu(
        id=cpu,
        online=True,
        package=reader.group_id(cpu, topology, "physical_package_id"),
        die=reader.group_id(cpu, topology, "die_id"),
        node=node,
        core_id=_id(reader, topology, "core_id"),
        siblings=core,
        l3=reader.l3_of(cpu, _join(path, "cache"), core),
        base_frequency=base_frequency,
        energy_performance_preference=epp,
    )


def _id(reader: _Reader, directory: str, name: str) -> int | None:
    """A topology id; missing or the kernel's "unknown" (``-1``) is ``None``."""
    value = reader.integer(_join(directory, name))
    return None if value is None or value < 0 else value


def _l3(reader: _Reader, cache_root: str, core: frozenset[int]) -> frozenset[int] | None:
    """The CPUs sharing this CPU's L3 (``None`` where the dump has no such cache).

    An empty sharing list (ia64 kernels write ``00000000``) means the core's
    own cache, as hwloc reads it.
    """
    indexes = sorted(
        (int(match.group(1)), match.group(0))
        for match in map(_CACHE_DIR.fullmatch, reader.listing(cache_root) or ())
        if match
    )
    for _number, name in indexes:
        index = _join(cache_root, name)
        if reader.integer(_join(index, "level")) != 3 or reader.text(_join(index, "type")) == "Instruction":
            continue
        cpus = reader.cpus(_join(index, "shared_cpu_list"), _join(index, "shared_cpu_map"))
        if cpus is not None:
            return cpus or core
    return None


def _cpufreq(reader: _Reader, cpufreq: str) -> tuple[int | None, str | None]:
    """SST-BF base frequency (kHz) and SST-CP energy/performance preference, where present."""
    names = reader.listing(cpufreq)
    if not names:
        return None, None
    base = reader.integer(_join(cpufreq, "base_frequency")) if "base_frequency" in names else None
    epp_name = "energy_performance_preference"
    epp = reader.text(_join(cpufreq, epp_name)) if epp_name in names else None
    return base, epp or None


_L3 = "l3"


@dataclass(frozen=True, slots=True)
class _Group:
    """CPUs that share one L3, package or die, as one CPU's list named them, with the id read (none for an L3)."""

    name: str  # _L3 or the id's file
    cpus: frozenset[int]
    id: int = -1


class _Reader:
    """Reads sysfs for one discovery, parsing each distinct cpu set once.

    Siblings of a core and all CPUs of a cache share the same list text, so
    a 1,024-CPU machine parses a few hundred distinct lists, not thousands.
    """

    def __init__(self, groups: Iterable[_Group] = ()) -> None:
        self._parsed: dict[tuple[bool, str], frozenset[int]] = {}
        self._shared: dict[frozenset[int], frozenset[int]] = {}
        self._groups: list[_Group] = []
        self._l3: dict[int, frozenset[int]] = {}
        self._ids: dict[str, dict[int, int]] = {}  # an id's file -> CPU -> the id its group's first CPU read
        self._no_lists: set[str] = set()  # ids whose CPU lists this dump lacks
        for group in groups:
            self._learn(group)

    def groups(self) -> tuple[_Group, ...]:
        """Each L3, package and die read so far: what a later reader of the same machine starts from."""
        return tuple(self._groups)

    def _learn(self, group: _Group) -> None:
        self._groups.append(group)
        if group.name == _L3:
            self._l3.update(dict.fromkeys(group.cpus, group.cpus))
        else:
            self._ids.setdefault(group.name, {}).update(dict.fromkeys(group.cpus, group.id))

    def group_id(self, cpu: int, topology: str, name: str) -> int | None:
        """A package's or die's id (``name``), read once per group: every CPU its CPU list names has it.

        Like an L3's sharing list, the kernel's ``package_cpus_list`` and
        ``die_cpus_list`` are the CPUs whose id is this one. A dump without
        such lists (kernels before 5.3 name no die) reads each CPU's id.
        """
        known = self._ids.get(name, {})
        if cpu in known:
            return known[cpu]
        value = _id(self, topology, name)
        if value is not None and name not in self._no_lists:
            members = self.cpus(*(_join(topology, list_name) for list_name in _GROUP_FILES[name]))
            if members is None:
                self._no_lists.add(name)
            elif cpu in members:
                self._learn(_Group(name, members, value))
        return value

    def l3_of(self, cpu: int, cache_root: str, core: frozenset[int]) -> frozenset[int] | None:
        """``cpu``'s L3, read once per L3: every CPU an L3's sharing list names shares that L3.

        The kernel writes the one list for every CPU of a cache, so a CPU an
        earlier one's list names needs no cache folder read of its own: on
        8,192 CPUs that is 7 of a first thread's 12 reads (the package and
        die ids, :meth:`group_id`, are 2 more).
        """
        known = self._l3.get(cpu)
        if known is not None:
            return known
        found = _l3(self, cache_root, core)
        if found is not None:
            self._learn(_Group(_L3, found))
        return found

    def shared(self, cpus: frozenset[int]) -> frozenset[int]:
        """One object per distinct set: a core's threads each compute their core's set (8,192 sets, 1.8 MB)."""
        return self._shared.setdefault(cpus, cpus)

    def listing(self, path: str) -> frozenset[str] | None:
        """A folder's entry names; ``None`` if it does not exist."""
        return _listed(path, lambda: frozenset(os.listdir(path)))

    def entries(self, path: str) -> list[tuple[str, Callable[[], bool]]] | None:
        """A folder's entry names, each with whether it is a folder (a symlink to one too), from one scan."""

        def scan() -> list[tuple[str, Callable[[], bool]]]:
            with os.scandir(path) as found:
                return [(entry.name, entry.is_dir) for entry in found]

        return _listed(path, scan)

    def text(self, path: str) -> str | None:
        """The file's content without NULs and surrounding whitespace; ``None`` if missing."""
        raw = read_file(path, PSEUDO_FILE_LIMIT)
        if raw is None:
            return None
        try:
            return raw.decode("ascii").replace("\x00", "").strip()
        except UnicodeDecodeError:
            raise CmkError(f"{shown(path)}: expected text, found binary data") from None

    def integer(self, path: str) -> int | None:
        text = self.text(path)
        if text is None:
            return None
        try:
            return parse_count(text, least=-1, most=_MAX_ID)
        except ValueError:
            raise CmkError(f"{path}: expected an integer, found {text[:40]!r}") from None

    def cpus(self, *candidates: str) -> frozenset[int] | None:
        """The first existing file's cpu set: ``*list`` files as cpu lists, others as hex masks."""
        for path in candidates:
            text = self.text(path)
            if text is None:
                continue
            if text == _NO_CPUS:
                return frozenset()
            is_list = _is_list_file(os.path.basename(path))
            key = (is_list, text)
            if key not in self._parsed:
                try:
                    self._parsed[key] = self.shared((checked_cpu_list if is_list else checked_cpu_mask)(text))
                except CpuListError as error:
                    raise CmkError(f"{path}: {error}") from None
            return self._parsed[key]
        return None


def _listed(path: str, list_it: Callable[[], T]) -> T | None:
    """``list_it()``; ``None`` if the folder does not exist, a CmkError naming it for anything else."""
    try:
        return list_it()
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        raise CmkError(f"cannot list {path}: a file stands where a folder should be") from None
    except OSError as error:
        raise CmkError(f"cannot list {path}: {os_reason(error)}") from None


_CPU_LIST_FILES = frozenset({"online", "possible", "present", "isolated", "nohz_full"})


def _is_list_file(name: str) -> bool:
    """Whether the file holds a cpu list (``0-3,8``) rather than a hex mask (``ff,0000000f``)."""
    return name.endswith("list") or name in _CPU_LIST_FILES
