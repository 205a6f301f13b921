"""Per-CPU busy time, interrupts and softirqs from the kernel's procfs counters. Pure: text in, values out.

``/proc/stat``, ``/proc/interrupts`` and ``/proc/softirqs`` are node-wide even
inside a container, so the daemon needs no privilege to see what runs where.
:mod:`deviceplugin.host.procstats` reads the files; everything here works on their
text and on plain values, so tests feed it counters they know.

Why it works this way: ``docs/design/cpustats.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import add, itemgetter
from typing import TYPE_CHECKING

from deviceplugin.model.plan import CORE_POOLS, Pool, PoolPlan
from deviceplugin.model.topology import Topology

if TYPE_CHECKING:
    from deviceplugin.model.devices import DeviceTree

DEVICE, LOCAL = "device", "local"
#: /proc/stat columns after the cpu name: user nice system idle iowait irq softirq steal guest guest_nice.
_BUSY_COLUMNS = itemgetter(0, 1, 2, 5, 6)
_IDLE_COLUMNS = itemgetter(3, 4)
#: Zeros for the columns up to softirq that older kernels did not write (2.4 wrote four, 2.6.0 seven).
_UNWRITTEN = [0] * 3
#: Fields per chunk a sparse /proc/interrupts row is converted by (see _counted_chunks).
_CHUNK = 32
#: The pool label of a CPU that belongs to no pool (partly isolated or unused isolated cores).
NO_POOL = "none"
_CORE_POOL_NAMES = frozenset(str(p) for p in CORE_POOLS)


class StatsError(ValueError):
    """A procfs counter file is not in the kernel's format; ``str()`` says where, in one line."""


@dataclass(frozen=True, slots=True)  # one per CPU or core: no __dict__ each (8,192 CPUs)
class CpuTimes:
    """Seconds a CPU spent busy, and busy plus idle (the denominator of utilisation)."""

    busy: float
    total: float


@dataclass(frozen=True)
class Sample:
    """One reading of the counters. A CPU missing from ``times`` is offline (the kernel lists online ones)."""

    times: Mapping[int, CpuTimes]
    interrupts: Mapping[int, Mapping[str, int]]  # cpu -> DEVICE/LOCAL -> count
    softirqs: Mapping[int, Mapping[str, int]]  # cpu -> DEVICE/LOCAL -> count
    #: ``interrupts``/``softirqs`` the container runtime masked (``/dev/null`` over it, as Kubernetes'
    #: default maskedPaths do to ``/proc/interrupts``): their counters are unknown, not 0
    masked: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)  # one per CPU or core: no __dict__ each (8,192 CPUs)
class Place:
    """Where a CPU sits: its pool (or :data:`NO_POOL`), NUMA node (``unknown`` if none) and isolation."""

    pool: str
    numa_node: str
    isolated: bool

    @property
    def exclusive(self) -> bool:
        return self.pool in _CORE_POOL_NAMES


#: Device (numbered) IRQs per second on one place's exclusive or isolated CPUs (a pool, NUMA node and isolation:
#: one ``cmk_pool_interrupts_total`` series) above which the CmkInterruptStormOnIsolatedCpu alert fires and
#: ``cmk describe`` lists the place's CPUs: one threshold, one meaning (a test holds the rule to it).
DEVICE_IRQ_ALERT_PER_SECOND = 100.0


@dataclass(frozen=True)
class CpuRates:
    """One CPU between two samples: busy as a fraction of the CPU, counts per second."""

    busy: float
    interrupts: Mapping[str, float] = field(default_factory=dict)
    softirqs: Mapping[str, float] = field(default_factory=dict)


def parse_stat(text: str, ticks_per_second: int) -> dict[int, CpuTimes]:
    """The ``cpuN`` lines of ``/proc/stat`` (USER_HZ ticks) as seconds per CPU."""
    times: dict[int, CpuTimes] = {}
    for number, line in enumerate(text.splitlines(), 1):
        name, _, rest = line.partition(" ")
        if not name.startswith("cpu") or name == "cpu":
            continue
        try:
            cpu = int(name[3:])
            values = list(map(int, rest.split()))
        except ValueError:
            raise StatsError(f"line {number}: {line[:60]!r} is not 'cpuN' and tick counts") from None
        if len(values) < 4:
            raise StatsError(f"line {number}: {name} has {len(values)} counters, the kernel writes at least 4")
        values += _UNWRITTEN[len(values) - 4:]  # itemgetter, not a generator per line: 8,192 lines per scrape
        busy, idle = sum(_BUSY_COLUMNS(values)), sum(_IDLE_COLUMNS(values))
        times[cpu] = CpuTimes(busy / ticks_per_second, (busy + idle) / ticks_per_second)
    return times


def kind_totals(text: str, is_device: Callable[[str], bool]) -> dict[int, dict[str, int]]:
    """``/proc/interrupts`` or ``/proc/softirqs`` per CPU: every row's counts summed as :data:`DEVICE` or :data:`LOCAL`.

    The header names the columns (``CPU0 CPU2`` when CPU 1 is offline); a row
    with fewer counts than columns (``ERR:``, ``MIS:``: node-wide) is left
    out, and what follows the counts (chip, trigger, device names) is
    ignored. A 1,024-CPU node's interrupts hold a quarter million counts,
    mostly zeros: rows are summed by their chunks that hold something else.
    """
    lines = text.splitlines()
    header = next((n for n, line in enumerate(lines) if line.strip()), None)
    if header is None:
        return {}
    try:
        cpus = [int(col.removeprefix("CPU")) for col in lines[header].split()]
    except ValueError:
        raise StatsError(f"line {header + 1}: the header is not 'CPU0 CPU1 ...'") from None
    totals = {DEVICE: [0] * len(cpus), LOCAL: [0] * len(cpus)}
    for number, line in enumerate(lines[header + 1:], header + 2):
        name, colon, rest = line.partition(":")
        if not colon:
            if line.strip():
                raise StatsError(f"line {number}: {line[:60]!r} has no 'NAME:'")
            continue
        fields = rest.split(maxsplit=len(cpus))[:len(cpus)]
        if len(fields) < len(cpus):
            continue
        try:
            chunks = _counted_chunks(fields)
        except ValueError:  # a description word where a count would be: a node-wide row
            continue
        total = totals[DEVICE if is_device(name.strip()) else LOCAL]
        for first, counts in chunks:
            total[first:first + len(counts)] = map(add, total[first:first + len(counts)], counts)
    return {cpu: {DEVICE: totals[DEVICE][i], LOCAL: totals[LOCAL][i]} for i, cpu in enumerate(cpus)}


def _counted_chunks(fields: list[str]) -> list[tuple[int, list[int]]]:
    """One row's counts as (first column, counts) for its runs that are not all ``0``; ValueError on a non-count.

    A large node's rows are mostly zeros: an IRQ counts only on the CPUs it
    is steered to (a managed vector on one), and many named lines on none.
    ``str.split`` gives every ``0`` as the same cached string, so counting
    them is one quick pass: a row of zeros ends there, and a sparse one
    converts and adds only the chunks that hold something else, stopping
    once it has them all (a 1,024-CPU row steered to one CPU: ~20 µs, not
    100-150). A row counting on most CPUs (LOC, RES, CAL) is one chunk.
    """
    zeros = fields.count("0")
    if zeros < len(fields) // 2:
        return [(0, list(map(int, fields)))]
    chunks, left = [], len(fields) - zeros
    for first in range(0, len(fields), _CHUNK):
        if not left:
            break
        chunk = fields[first:first + _CHUNK]
        if (counted := len(chunk) - chunk.count("0")):
            chunks.append((first, list(map(int, chunk))))
            left -= counted
    return chunks


#: Softirqs raised on behalf of devices and drivers (the rest, timer, hrtimer, sched and rcu, the kernel
#: raises on every busy CPU itself); like device IRQs, these follow where a device's interrupts are steered.
DEVICE_SOFTIRQS = frozenset({"HI", "NET_TX", "NET_RX", "BLOCK", "IRQ_POLL", "TASKLET"})


def interrupt_kinds(text: str) -> dict[int, dict[str, int]]:
    """``/proc/interrupts`` per CPU: numbered lines are :data:`DEVICE` IRQs, named ones (LOC, RES, ...) :data:`LOCAL`."""
    return kind_totals(text, str.isdigit)


def softirq_kinds(text: str) -> dict[int, dict[str, int]]:
    """``/proc/softirqs`` per CPU: :data:`DEVICE_SOFTIRQS` as :data:`DEVICE`, the rest (and any new type) :data:`LOCAL`."""
    return kind_totals(text, DEVICE_SOFTIRQS.__contains__)


def places(topology: Topology, plan: PoolPlan) -> dict[int, Place]:
    """Every CPU the topology knows, with its pool from the plan, its NUMA node and whether it is isolated."""
    pool_of = {cpu: name for pool, cores in plan.pools.items() for name in (str(pool),)
               for core in cores for cpu in core.cpus}
    isolated = topology.isolated
    # One Place per distinct place, not one per CPU (8,192 of them), found by a plain tuple: making a
    # Place per CPU to look it up was most of this on 8,192 CPUs.
    shared: dict[tuple[str, int | None, bool], Place] = {}
    found = {}
    for cpu in topology.cpus:  # the node alone: a core's later threads' records need not be read
        key = (pool_of.get(cpu, NO_POOL), topology.node_of(cpu), cpu in isolated)
        place = shared.get(key)
        if place is None:
            pool, node, alone = key
            place = shared[key] = Place(pool, "unknown" if node is None else str(node), alone)
        found[cpu] = place
    return found


#: Where a CPU the plan does not know sits (one the kernel lists that discovery did not).
UNKNOWN_PLACE = Place(NO_POOL, "unknown", False)


def place_groups(place: Mapping[int, Place]) -> dict[Place, tuple[int, ...]]:
    """Each place's CPUs, places in label order: built once, so a scrape sums by CPU, never hashing a place per CPU."""
    groups: dict[Place, list[int]] = {}
    for cpu, where in sorted(place.items()):
        groups.setdefault(where, []).append(cpu)
    return {where: tuple(groups[where]) for where in sorted(groups, key=_label_order)}


def _with_unknown(groups: Mapping[Place, Sequence[int]], cpus: Iterable[int]) -> Mapping[Place, Sequence[int]]:
    known = {cpu for members in groups.values() for cpu in members}
    unknown = sorted(set(cpus) - known)
    return {**groups, UNKNOWN_PLACE: unknown} if unknown else groups


def place_totals(groups: Mapping[Place, Sequence[int]], values: Mapping[int, float]) -> dict[Place, float]:
    """Per-CPU values summed per place (pool, NUMA node, isolation) of :func:`place_groups`.

    The per-pool series: their count grows with pools times NUMA nodes, not
    with CPUs, so a 1,024-CPU node's scrape carries tens of them, not thousands.
    A CPU no place holds counts in :data:`UNKNOWN_PLACE`; a place none of whose
    CPUs has a value is left out.
    """
    totals: dict[Place, float] = {}
    for where, cpus in _with_unknown(groups, values).items():
        found = [values[cpu] for cpu in cpus if cpu in values]
        if found:
            totals[where] = sum(found)
    return totals


def place_kind_totals(groups: Mapping[Place, Sequence[int]],
                      counts: Mapping[int, Mapping[str, int]]) -> dict[tuple[Place, str], int]:
    """Per-CPU counts by kind (:data:`DEVICE`, :data:`LOCAL`) summed per place and kind, like :func:`place_totals`."""
    totals: dict[tuple[Place, str], int] = {}
    for where, cpus in _with_unknown(groups, counts).items():
        found = [counts[cpu] for cpu in cpus if cpu in counts]
        for kind in sorted({kind for kinds in found for kind in kinds}):
            totals[where, kind] = sum(kinds.get(kind, 0) for kinds in found)
    return totals


def _label_order(where: Place) -> tuple[str, str, bool]:
    return where.pool, where.numa_node, where.isolated


def held_cpus(tree: DeviceTree, held: Callable[[str], Iterable[str]]) -> frozenset[int]:
    """CPUs behind the device IDs ``held(resource)`` names (``Assignments.held``): a core's threads; a slot its pool."""
    return frozenset(cpu for resource, devices in tree.items() for cpu in devices.cpus_of(held(resource)))


def _delta(before: float, after: float) -> float:
    return after - before if after >= before else after


def _per_second(then: Mapping[str, int], now: Mapping[str, int], seconds: float) -> dict[str, float]:
    return {kind: _delta(then.get(kind, 0), count) / seconds if seconds > 0 else 0.0 for kind, count in now.items()}


def rates(before: Sample, after: Sample, seconds: float) -> dict[int, CpuRates]:
    """Per CPU online in both samples: busy share of its time, interrupts and softirqs per second."""
    out: dict[int, CpuRates] = {}
    for cpu in sorted(before.times.keys() & after.times.keys()):
        then, now = before.times[cpu], after.times[cpu]
        total = _delta(then.total, now.total)
        busy = min(1.0, _delta(then.busy, now.busy) / total) if total > 0 else 0.0
        out[cpu] = CpuRates(busy, _per_second(before.interrupts.get(cpu, {}), after.interrupts.get(cpu, {}), seconds),
                            _per_second(before.softirqs.get(cpu, {}), after.softirqs.get(cpu, {}), seconds))
    return out


def unheld_busy(before: Sample, after: Sample, cpus: Iterable[int],
                held_before: frozenset[int], held_after: frozenset[int]) -> dict[int, float]:
    """Busy seconds between two samples on each of ``cpus`` that no container held at either sample.

    Unheld at both ends, so a container starting or stopping between two
    samples is never counted as a leak (a container that came and went in
    between counts, as the kubelet's List never showed it either).
    """
    leaked = {}
    for cpu in cpus:
        if cpu in held_before or cpu in held_after or cpu not in before.times or cpu not in after.times:
            continue
        leaked[cpu] = _delta(before.times[cpu].busy, after.times[cpu].busy)
    return leaked


def exclusive_cpus(place: Mapping[int, Place]) -> frozenset[int]:
    return frozenset(cpu for cpu, p in place.items() if p.exclusive)


def pools_of(place: Mapping[int, Place]) -> dict[str, frozenset[int]]:
    """Pool name -> its CPUs, in :class:`Pool` order, then :data:`NO_POOL` if some CPU is in none."""
    order = [str(p) for p in Pool] + [NO_POOL]
    groups: dict[str, set[int]] = {}
    for cpu, p in place.items():
        groups.setdefault(p.pool, set()).add(cpu)
    return {name: frozenset(groups[name]) for name in order if name in groups}
