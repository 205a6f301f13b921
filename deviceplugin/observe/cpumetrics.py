"""Per-CPU isolation metrics read from procfs at scrape time: what runs where, and what should not.

Every series carries ``cpu``, ``pool`` (``none`` for a CPU in no pool),
``numa_node`` and ``isolated`` (``true`` for the kernel's ``isolcpus``), so a
rule can ask about a pool, a node or the isolated CPUs with one matcher:

Why it works this way: ``docs/cpumetrics.md``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from deviceplugin.host.procstats import read_sample
from deviceplugin.model.cpustats import (
    NO_POOL,
    Place,
    Sample,
    StatsError,
    exclusive_cpus,
    unheld_busy,
)

log = logging.getLogger(__name__)

_LABELS = ["cpu", "pool", "numa_node", "isolated"]
_UNKNOWN = Place(NO_POOL, "unknown", False)


def _labels(cpu: int, place: Place) -> list[str]:
    return [str(cpu), place.pool, place.numa_node, "true" if place.isolated else "false"]


class CpuCollector:
    """Reads procfs once per scrape; keeps the previous sample and holdings to count unheld busy time."""

    def __init__(self, *, procfs_root: Path, places: Mapping[int, Place]) -> None:
        self._procfs_root = procfs_root
        self._places = places
        self._exclusive = exclusive_cpus(places)
        self._lock = threading.Lock()  # scrapes run in the HTTP server's threads
        self._last: tuple[Sample, frozenset[int] | None] | None = None
        self._unheld = dict.fromkeys(sorted(self._exclusive), 0.0)
        self._error: str | None = None
        self._masked: frozenset[str] = frozenset()

    def families(self, held: frozenset[int] | None) -> Iterator[Metric]:
        """The CPU families for one scrape; ``held`` is None when the kubelet's pod resources are away."""
        up = GaugeMetricFamily("cmk_cpu_stats_up", "1 if the last scrape read procfs' CPU counters, else 0.")
        try:
            sample = read_sample(self._procfs_root)
        except StatsError as err:
            if str(err) != self._error:  # once per cause, not once per scrape
                log.warning("CPU metrics left out: %s", err)
            self._error = str(err)
            up.add_metric([], 0)
            yield up
            return
        self._error = None
        if sample.masked and self._masked != sample.masked:  # once, not once per scrape
            log.warning("CPU %s counters left out: the container runtime masks %s (Kubernetes' default "
                        "maskedPaths); busy time and leaks are still measured",
                        " and ".join(sorted(sample.masked)),
                        " and ".join(str(self._procfs_root / name) for name in sorted(sample.masked)))
        self._masked = sample.masked
        up.add_metric([], 1)
        yield up
        with self._lock:
            self._count_unheld(sample, held)
            unheld = dict(self._unheld)
        yield from self._counters(sample)
        if held is not None:
            gauge = GaugeMetricFamily("cmk_cpu_held", "1 while a container holds the CPU (kubelet pod resources).",
                                      labels=_LABELS)
            for cpu in sample.times:
                gauge.add_metric(self._of(cpu), 1 if cpu in held else 0)
            yield gauge
        family = CounterMetricFamily("cmk_cpu_unheld_busy_seconds",
                                     "Busy time on an exclusive-pool CPU no container held (a leak).", labels=_LABELS)
        for cpu, seconds in unheld.items():
            family.add_metric(self._of(cpu), round(seconds, 6))  # a sum of 1/USER_HZ steps: no float dust
        yield family

    def _of(self, cpu: int) -> list[str]:
        return _labels(cpu, self._places.get(cpu, _UNKNOWN))

    def _count_unheld(self, sample: Sample, held: frozenset[int] | None) -> None:
        if self._last is not None:
            before, held_before = self._last
            if held_before is not None and held is not None:
                for cpu, seconds in unheld_busy(before, sample, self._exclusive, held_before, held).items():
                    self._unheld[cpu] += seconds
        self._last = (sample, held)

    def _counters(self, sample: Sample) -> Iterator[Metric]:
        busy = CounterMetricFamily("cmk_cpu_busy_seconds", "Time the CPU ran something (user, nice, system, "
                                   "irq, softirq), from /proc/stat.", labels=_LABELS)
        interrupts = CounterMetricFamily("cmk_cpu_interrupts", "Interrupts the CPU served, from /proc/interrupts: "
                                         "kind device (numbered IRQs) or local (timer, IPIs).",
                                         labels=[*_LABELS, "kind"])
        softirqs = CounterMetricFamily("cmk_cpu_softirqs", "Softirqs the CPU ran, from /proc/softirqs: kind device "
                                       "(net, block, tasklets) or local (timer, sched, rcu).",
                                       labels=[*_LABELS, "kind"])
        for cpu, times in sample.times.items():
            labels = self._of(cpu)
            busy.add_metric(labels, times.busy)
            for kind, count in sorted(sample.interrupts.get(cpu, {}).items()):
                interrupts.add_metric([*labels, kind], count)
            for kind, count in sorted(sample.softirqs.get(cpu, {}).items()):
                softirqs.add_metric([*labels, kind], count)
        yield from (busy, interrupts, softirqs)
