"""Per-CPU busy time, interrupts and softirqs from the kernel's procfs counters. Pure: text in, values out.

``/proc/stat``, ``/proc/interrupts`` and ``/proc/softirqs`` are node-wide even
inside a container, so the daemon needs no privilege to see what runs where.
:mod:`deviceplugin.procstats` reads the files; everything here works on their
text and on plain values, so tests feed it counters they know.

- Busy time is ``user + nice + system + irq + softirq`` (the guest columns are
  already inside ``user``/``nice``; ``steal`` is time the hypervisor ran
  someone else, ``iowait`` is idle waiting): what ran on the CPU.
- Interrupts are split by kind: ``device`` for the numbered lines (hardware
  IRQs, which ``smp_affinity`` can steer off isolated CPUs) and ``local`` for
  the named per-CPU lines (timer, IPIs, ...), which no affinity moves.
- Softirqs keep their type (``net_rx`` on an isolated CPU means a NIC queue
  is served there).

Counters go out as counters (Prometheus takes rates); ``cmk describe`` takes
a rate between two samples with :func:`rates`. A counter that went down
between two samples (the kernel does not reset them, but a dump swapped
under us could) counts from zero, as Prometheus' ``rate`` does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from deviceplugin.plan import CORE_POOLS, Pool, PoolPlan
from deviceplugin.topology import Topology

if TYPE_CHECKING:
    from deviceplugin.assignments import Assignments
    from deviceplugin.devices import DeviceTree

DEVICE, LOCAL = "device", "local"
#: /proc/stat columns after the cpu name: user nice system idle iowait irq softirq steal guest guest_nice.
_BUSY_COLUMNS = (0, 1, 2, 5, 6)
_IDLE_COLUMNS = (3, 4)
#: The pool label of a CPU that belongs to no pool (partly isolated or unused isolated cores).
NO_POOL = "none"


class StatsError(ValueError):
    """A procfs counter file is not in the kernel's format; ``str()`` says where, in one line."""


@dataclass(frozen=True)
class CpuTimes:
    """Seconds a CPU spent busy, and busy plus idle (the denominator of utilisation)."""

    busy: float
    total: float


@dataclass(frozen=True)
class Sample:
    """One reading of the counters. A CPU missing from ``times`` is offline (the kernel lists online ones)."""

    times: Mapping[int, CpuTimes]
    interrupts: Mapping[int, Mapping[str, int]]  # cpu -> DEVICE/LOCAL -> count
    softirqs: Mapping[int, Mapping[str, int]]  # cpu -> type (lower case) -> count


@dataclass(frozen=True)
class Place:
    """Where a CPU sits: its pool (or :data:`NO_POOL`), NUMA node (``unknown`` if none) and isolation."""

    pool: str
    numa_node: str
    isolated: bool

    @property
    def exclusive(self) -> bool:
        return self.pool in {str(p) for p in CORE_POOLS}


@dataclass(frozen=True)
class CpuRates:
    """One CPU between two samples: busy as a fraction of the CPU, counts per second."""

    busy: float
    interrupts: Mapping[str, float] = field(default_factory=dict)
    softirqs: float = 0.0


def parse_stat(text: str, ticks_per_second: int) -> dict[int, CpuTimes]:
    """The ``cpuN`` lines of ``/proc/stat`` (USER_HZ ticks) as seconds per CPU."""
    times: dict[int, CpuTimes] = {}
    for number, line in enumerate(text.splitlines(), 1):
        name, _, rest = line.partition(" ")
        if not name.startswith("cpu") or name == "cpu":
            continue
        try:
            cpu = int(name[3:])
            values = [int(v) for v in rest.split()]
        except ValueError:
            raise StatsError(f"line {number}: {line[:60]!r} is not 'cpuN' and tick counts") from None
        if len(values) < 4:
            raise StatsError(f"line {number}: {name} has {len(values)} counters, the kernel writes at least 4")
        busy = sum(values[i] for i in _BUSY_COLUMNS if i < len(values))
        idle = sum(values[i] for i in _IDLE_COLUMNS if i < len(values))
        times[cpu] = CpuTimes(busy / ticks_per_second, (busy + idle) / ticks_per_second)
    return times


def parse_per_cpu_table(text: str) -> dict[str, dict[int, int]]:
    """``/proc/interrupts`` or ``/proc/softirqs``: row name -> CPU -> count.

    The header names the columns (``CPU0 CPU2`` when CPU 1 is offline); a row
    with fewer counts than columns (``ERR:``, ``MIS:``: node-wide) is skipped,
    and what follows the counts (chip, trigger, device names) is ignored.
    """
    lines = text.splitlines()
    header = next((n for n, line in enumerate(lines) if line.strip()), None)
    if header is None:
        return {}
    try:
        cpus = [int(col.removeprefix("CPU")) for col in lines[header].split()]
    except ValueError:
        raise StatsError(f"line {header + 1}: the header is not 'CPU0 CPU1 ...'") from None
    rows: dict[str, dict[int, int]] = {}
    for number, line in enumerate(lines[header + 1:], header + 2):
        name, colon, rest = line.partition(":")
        if not colon:
            if line.strip():
                raise StatsError(f"line {number}: {line[:60]!r} has no 'NAME:'")
            continue
        fields = rest.split()[:len(cpus)]
        if len(fields) < len(cpus) or not all(f.isdigit() for f in fields):
            continue
        rows[name.strip()] = dict(zip(cpus, map(int, fields)))
    return rows


def interrupt_kinds(rows: Mapping[str, Mapping[int, int]]) -> dict[int, dict[str, int]]:
    """Per CPU, interrupts summed into :data:`DEVICE` (numbered lines) and :data:`LOCAL` (named lines)."""
    per_cpu: dict[int, dict[str, int]] = {}
    for name, counts in rows.items():
        kind = DEVICE if name.isdigit() else LOCAL
        for cpu, count in counts.items():
            kinds = per_cpu.setdefault(cpu, {DEVICE: 0, LOCAL: 0})
            kinds[kind] += count
    return per_cpu


def softirq_types(rows: Mapping[str, Mapping[int, int]]) -> dict[int, dict[str, int]]:
    """Per CPU, softirq counts by type in lower case (``net_rx``), as node_exporter names them."""
    per_cpu: dict[int, dict[str, int]] = {}
    for name, counts in rows.items():
        for cpu, count in counts.items():
            per_cpu.setdefault(cpu, {})[name.lower()] = count
    return per_cpu


def places(topology: Topology, plan: PoolPlan) -> dict[int, Place]:
    """Every CPU the topology knows, with its pool from the plan, its NUMA node and whether it is isolated."""
    pool_of = {cpu: str(pool) for pool, cores in plan.pools.items() for core in cores for cpu in core.cpus}
    return {
        cpu.id: Place(pool_of.get(cpu.id, NO_POOL), "unknown" if cpu.node is None else str(cpu.node),
                      cpu.id in topology.isolated)
        for cpu in topology.cpus.values()
    }


def held_cpus(tree: DeviceTree, assignments: Assignments) -> frozenset[int]:
    """CPUs behind devices some container holds: a core's threads; any held slot holds its whole pool."""
    return frozenset(cpu for resource, devices in tree.items()
                     for cpu in devices.cpus_of(assignments.held(resource)))


def _delta(before: float, after: float) -> float:
    return after - before if after >= before else after


def rates(before: Sample, after: Sample, seconds: float) -> dict[int, CpuRates]:
    """Per CPU online in both samples: busy share of its time, interrupts and softirqs per second."""
    out: dict[int, CpuRates] = {}
    for cpu in sorted(before.times.keys() & after.times.keys()):
        then, now = before.times[cpu], after.times[cpu]
        total = _delta(then.total, now.total)
        busy = min(1.0, _delta(then.busy, now.busy) / total) if total > 0 else 0.0
        irq_then, irq_now = before.interrupts.get(cpu, {}), after.interrupts.get(cpu, {})
        interrupts = {kind: _delta(irq_then.get(kind, 0), count) / seconds if seconds > 0 else 0.0
                      for kind, count in irq_now.items()}
        soft_then, soft_now = before.softirqs.get(cpu, {}), after.softirqs.get(cpu, {})
        soft = sum(_delta(soft_then.get(t, 0), count) for t, count in soft_now.items())
        out[cpu] = CpuRates(busy, interrupts, soft / seconds if seconds > 0 else 0.0)
    return out


def unheld_busy(before: Sample, after: Sample, cpus: Iterable[int],
                held_before: frozenset[int], held_after: frozenset[int]) -> dict[int, float]:
    """Busy seconds between two samples on each of ``cpus`` that no container held at either sample.

    Held at both ends is required so a container starting or stopping between
    two samples is never counted as a leak; what runs there meanwhile is
    unseen by the kubelet too, which is what the signal is for.
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
