"""The CPU topology model: read-only values, no I/O.

``deviceplugin.host.sysfs`` builds a :class:`Topology` from a sysfs/procfs root;
everything downstream (pool plan, device model, allocation policy) reads it.
Tests build one from literal values with :func:`build_topology`.

A *core* is the set of hardware threads the kernel lists as siblings
(``core_cpus_list``/``thread_siblings_list``), not a ``core_id``: core ids
repeat across packages and, on some machines, inside one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from deviceplugin.model.cpulist import format_cpu_list


@dataclass(frozen=True, slots=True)  # one per CPU or core: no __dict__ each (8,192 CPUs)
class Cpu:
    """One logical CPU as the kernel describes it.

    Offline CPUs often have no ``topology/`` folder: their placement fields
    are then ``None``. ``siblings`` holds the *online* threads of the core
    (itself included, for an online CPU).
    """

    id: int
    online: bool
    package: int | None = None
    die: int | None = None
    node: int | None = None
    core_id: int | None = None
    siblings: frozenset[int] = frozenset()
    l3: frozenset[int] | None = None
    base_frequency: int | None = None  # kHz, SST-BF
    energy_performance_preference: str | None = None  # SST-CP


@dataclass(frozen=True, slots=True)  # one per CPU or core: no __dict__ each (8,192 CPUs)
class Core:
    """A physical core: its online hardware threads and where it sits."""

    cpus: frozenset[int]
    package: int | None
    die: int | None
    node: int | None
    l3: frozenset[int] | None
    base_frequency: int | None
    energy_performance_preference: str | None
    core_id: int | None = None  # the kernel's core_id of its threads: stable while a thread is offline

    @property
    def first(self) -> int:
        return min(self.cpus)

    def __str__(self) -> str:
        return "{" + format_cpu_list(self.cpus) + "}"


class CpuTable(Mapping[int, Cpu]):
    """CPU id -> :class:`Cpu`, in id order; the records of a core's later threads may be read on first use.

    The pools need of every CPU only its online state and NUMA node, and of
    each core only its first thread's record (:class:`Core` is made from
    it). So discovery for the daemon reads the later threads' own files (half
    of ~100,000 on 8,192 CPUs) only if something asks for their records:
    ``later`` holds their NUMA nodes (from the node lists), ``read_later``
    reads them, once. Read-only, like the mapping it replaces.
    """

    __slots__ = ("_ids", "_lock", "_node", "_online", "_read_later", "_records")

    def __init__(self, records: Mapping[int, Cpu], later: Mapping[int, int | None] | None = None,
                 read_later: Callable[[], Mapping[int, Cpu]] | None = None) -> None:
        later = later or {}
        self._records = dict(records)
        self._ids = tuple(sorted(self._records.keys() | later.keys()))
        self._online = frozenset(cpu for cpu, record in self._records.items() if record.online) | later.keys()
        self._node = {cpu: record.node for cpu, record in self._records.items()} | dict(later)
        self._read_later = read_later if later else None
        self._lock = threading.Lock()

    @property
    def online(self) -> frozenset[int]:
        return self._online

    def node_of(self, cpu: int) -> int | None:
        return self._node.get(cpu)

    def __getitem__(self, cpu: int) -> Cpu:
        if cpu not in self._records and self._read_later is not None and cpu in self._node:
            with self._lock:
                if self._read_later is not None:
                    self._records.update(self._read_later())
                    self._read_later = None
        return self._records[cpu]

    def __iter__(self) -> Iterator[int]:
        return iter(self._ids)

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, cpu: object) -> bool:
        return cpu in self._node

    def __repr__(self) -> str:
        return f"CpuTable({dict(self.items())!r})"


@dataclass(frozen=True)
class Topology:
    """Every possible CPU with its state, plus the kernel's isolation settings."""

    cpus: Mapping[int, Cpu]
    isolated: frozenset[int] = frozenset()
    nohz_full: frozenset[int] = frozenset()
    _cores: tuple[Core, ...] = field(default=(), repr=False, compare=False)
    _table: CpuTable = field(default_factory=lambda: CpuTable({}), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        table = self.cpus if isinstance(self.cpus, CpuTable) else CpuTable(self.cpus)
        object.__setattr__(self, "cpus", table)
        object.__setattr__(self, "_table", table)
        object.__setattr__(self, "_cores", _group_cores(table))

    @property
    def online(self) -> frozenset[int]:
        return self._table.online

    @property
    def offline(self) -> frozenset[int]:
        return frozenset(self._table) - self._table.online

    def node_of(self, cpu: int) -> int | None:
        """The CPU's NUMA node (None: unknown, or no such CPU), without reading its record."""
        return self._table.node_of(cpu)

    @property
    def cores(self) -> tuple[Core, ...]:
        """Cores with at least one online thread, ordered by their first CPU."""
        return self._cores

    @property
    def packages(self) -> frozenset[int]:
        return frozenset(c.package for c in self.cpus.values() if c.online and c.package is not None)

    @property
    def numa_nodes(self) -> Mapping[int, frozenset[int]]:
        """NUMA node id -> its online CPUs (nodes without online CPUs are left out)."""
        nodes: dict[int, set[int]] = {}
        for cpu in self._table:
            node = self._table.node_of(cpu)
            if node is not None and cpu in self._table.online:
                nodes.setdefault(node, set()).add(cpu)
        return {node: frozenset(cpus) for node, cpus in sorted(nodes.items())}

    @property
    def threads_per_core_max(self) -> int:
        return max((len(core.cpus) for core in self.cores), default=0)

    def core_of(self, cpu: int) -> Core | None:
        for core in self.cores:
            if cpu in core.cpus:
                return core
        return None


def _group_cores(cpus: CpuTable) -> tuple[Core, ...]:
    """Each core from its first online thread's record: the later threads' records are not read."""
    seen: set[int] = set()
    cores: list[Core] = []
    online = cpus.online
    for cpu_id in cpus:
        if cpu_id not in online or cpu_id in seen:
            continue
        cpu = cpus[cpu_id]
        if cpu.id in cpu.siblings and cpu.siblings <= online:  # as discovery reads them: one set per core, not two
            threads = cpu.siblings
        else:
            threads = frozenset(t for t in (cpu.siblings | {cpu.id}) if t in online)
            threads = cpu.siblings if threads == cpu.siblings else threads
        seen |= threads
        cores.append(
            Core(
                cpus=threads,
                package=cpu.package,
                die=cpu.die,
                node=cpu.node,
                l3=cpu.l3,
                base_frequency=cpu.base_frequency,
                energy_performance_preference=cpu.energy_performance_preference,
                core_id=cpu.core_id,
            )
        )
    return tuple(sorted(cores, key=lambda core: core.first))


def build_topology(
    cores: Iterable[Iterable[int]],
    *,
    node_of: Mapping[int, int] | None = None,
    package_of: Mapping[int, int] | None = None,
    offline: Iterable[int] = (),
    isolated: Iterable[int] = (),
    base_frequency: Mapping[int, int] | None = None,
    epp: Mapping[int, str] | None = None,
    l3_of: Mapping[int, Iterable[int]] | None = None,
) -> Topology:
    """A topology from literal values, for tests and synthetic benchmarks.

    ``cores`` lists each core's threads; ``node_of``/``package_of`` map a CPU
    to its NUMA node/package (default 0); per-CPU attributes are keyed by CPU.
    """
    offline_set = frozenset(offline)
    cpus: dict[int, Cpu] = {}
    for threads in cores:
        thread_set = frozenset(threads)
        online_threads = thread_set - offline_set
        for cpu in thread_set:
            online = cpu not in offline_set
            cpus[cpu] = Cpu(
                id=cpu,
                online=online,
                package=(package_of or {}).get(cpu, 0),
                die=0,
                node=(node_of or {}).get(cpu, 0),
                core_id=min(thread_set),
                siblings=online_threads if online else frozenset(),
                l3=frozenset(l3_of[cpu]) if l3_of and cpu in l3_of else None,
                base_frequency=(base_frequency or {}).get(cpu),
                energy_performance_preference=(epp or {}).get(cpu),
            )
    return Topology(cpus=cpus, isolated=frozenset(isolated))
