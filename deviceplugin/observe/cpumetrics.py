"""Isolation metrics read from procfs at scrape time: what runs where, and what should not.

By default the series are per place — pool, NUMA node and isolation
(``pool``, ``numa_node``, ``isolated``) — so their number grows with pools
times NUMA nodes, not with CPUs; ``cmk_cpu_info`` names each CPU's place once,
to join node_exporter's per-CPU ``node_cpu_seconds_total`` on ``cpu``. With
``per_cpu`` (``--per-cpu-metrics``) the same counters come per CPU too, each
series carrying ``cpu`` and the place labels, so a rule can ask about a pool,
a node or the isolated CPUs with one matcher.

Why it works this way: ``docs/design/cpumetrics.md``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from deviceplugin.host.procstats import read_sample
from deviceplugin.model.cpustats import (
    UNKNOWN_PLACE,
    Place,
    Sample,
    StatsError,
    exclusive_cpus,
    place_groups,
    place_kind_totals,
    place_totals,
    unheld_busy,
)

log = logging.getLogger(__name__)

_PLACE_LABELS = ["pool", "numa_node", "isolated"]
_LABELS = ["cpu", *_PLACE_LABELS]
_POOL_INTERRUPTS = ("Interrupts the place's CPUs served, from /proc/interrupts: kind device (numbered IRQs) or "
                    "local (timer, IPIs).")
_POOL_SOFTIRQS = ("Softirqs the place's CPUs ran, from /proc/softirqs: kind device (net, block, tasklets) or "
                  "local (timer, sched, rcu).")


def _place_labels(place: Place) -> list[str]:
    return [place.pool, place.numa_node, "true" if place.isolated else "false"]


def _labels(cpu: int, place: Place) -> list[str]:
    return [str(cpu), *_place_labels(place)]


class CpuCollector:
    """Reads procfs once per scrape; keeps the previous sample and holdings to count unheld busy time.

    The per-place sums carry each CPU's last counters while it is offline (the
    kernel then leaves it out of procfs), so a pool's counter never goes down
    when a CPU does, which Prometheus would take for a reset.
    """

    def __init__(self, *, procfs_root: Path, places: Mapping[int, Place], per_cpu: bool = False) -> None:
        self._procfs_root = procfs_root
        self._places = places
        self._per_cpu = per_cpu
        self._exclusive = exclusive_cpus(places)
        self._groups = place_groups(places)
        self._lock = threading.Lock()  # scrapes run in the HTTP server's threads
        self._last: tuple[Sample, frozenset[int] | None] | None = None
        self._unheld = dict.fromkeys(sorted(self._exclusive), 0.0)
        self._busy: dict[int, float] = {}  # the last busy seconds of every CPU seen, offline ones too
        self._interrupts: dict[int, Mapping[str, int]] = {}
        self._softirqs: dict[int, Mapping[str, int]] = {}
        self._error: str | None = None
        self._masked: frozenset[str] = frozenset()

    def info(self) -> Metric:
        """``cmk_cpu_info``: one series per CPU naming its place; fixed by the plan, so rendered once."""
        family = GaugeMetricFamily("cmk_cpu_info", "1 per CPU: its pool (none if in no pool), NUMA node and "
                                   "isolation, to join per-CPU series such as node_cpu_seconds_total on cpu.",
                                   labels=_LABELS)
        for cpu, place in sorted(self._places.items()):
            family.add_metric(_labels(cpu, place), 1)
        return family

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
            self._busy.update((cpu, times.busy) for cpu, times in sample.times.items())
            self._interrupts.update(sample.interrupts)
            self._softirqs.update(sample.softirqs)
            busy, interrupts, softirqs = dict(self._busy), dict(self._interrupts), dict(self._softirqs)
        yield from self._pool_families(busy, interrupts, softirqs, unheld, held)
        if self._per_cpu:
            yield from self._cpu_families(sample, unheld, held)

    def _pool_families(self, busy: Mapping[int, float], interrupts: Mapping[int, Mapping[str, int]],
                       softirqs: Mapping[int, Mapping[str, int]], unheld: Mapping[int, float],
                       held: frozenset[int] | None) -> Iterator[Metric]:
        family = CounterMetricFamily("cmk_pool_busy_seconds", "Time the place's CPUs ran something (user, nice, "
                                     "system, irq, softirq), from /proc/stat.", labels=_PLACE_LABELS)
        for place, seconds in place_totals(self._groups, busy).items():
            family.add_metric(_place_labels(place), round(seconds, 6))
        yield family
        kinds = (("cmk_pool_interrupts", _POOL_INTERRUPTS, interrupts), ("cmk_pool_softirqs", _POOL_SOFTIRQS, softirqs))
        for name, text, counts in kinds:
            family = CounterMetricFamily(name, text, labels=[*_PLACE_LABELS, "kind"])
            for (place, kind), count in place_kind_totals(self._groups, counts).items():
                family.add_metric([*_place_labels(place), kind], count)
            yield family
        if held is not None:
            gauge = GaugeMetricFamily("cmk_pool_held_cpus", "The place's CPUs a container holds (kubelet pod "
                                      "resources).", labels=_PLACE_LABELS)
            for place, cpus in place_totals(self._groups, {cpu: 1.0 if cpu in held else 0.0 for cpu in busy}).items():
                gauge.add_metric(_place_labels(place), cpus)
            yield gauge
        family = CounterMetricFamily("cmk_pool_unheld_busy_seconds", "Busy time on the place's exclusive-pool CPUs "
                                     "while no container held them (a leak).", labels=_PLACE_LABELS)
        for place, seconds in place_totals(self._groups, unheld).items():
            family.add_metric(_place_labels(place), round(seconds, 6))  # sums of 1/USER_HZ steps: no float dust
        yield family

    def _cpu_families(self, sample: Sample, unheld: Mapping[int, float],
                      held: frozenset[int] | None) -> Iterator[Metric]:
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
        return _labels(cpu, self._places.get(cpu, UNKNOWN_PLACE))

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
