"""Prometheus metrics of the daemon, on their own CollectorRegistry (never the global one).

A registry per daemon, so tests and two daemons in one process never share
counters. Two kinds of series: counted as events happen, and read at scrape time.

Why it works this way: ``docs/design/metrics.md``.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder, gzip_accepted
from prometheus_client.registry import Collector

from deviceplugin import build_info
from deviceplugin.errors import CmkError
from deviceplugin.events import Allocation, Observer
from deviceplugin.model.assignments import Assignments
from deviceplugin.model.confinement import held_sets
from deviceplugin.model.cpustats import held_cpus
from deviceplugin.model.devices import DeviceTree
from deviceplugin.model.plan import PoolPlan
from deviceplugin.observe.cgroupmetrics import UnconfinedCollector
from deviceplugin.observe.cpumetrics import CpuCollector
from deviceplugin.observe.httpserver import Answer, BoundedHttpServer
from deviceplugin.protocol.podresources import (
    DEFAULT_TIMEOUT,
    DraDevices,
    Unavailable,
    read_assignments,
)

#: Allocate answers in well under a millisecond; the top buckets catch a GC pause or a loaded node.
LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)

#: The exposition formats whose fixed part is kept formatted: the Accept header names the format
#: (versions, escapings), so a client could ask for any number of them; past these, it is formatted per scrape.
FIXED_FORMATS = 8

#: The format Prometheus asks for first.
OPENMETRICS = "application/openmetrics-text;version=1.0.0"
#: What OpenMetrics puts last; the fixed families go before the rest, so their copy ends without it.
_EOF = b"# EOF\n"


class PoolCollector(Collector):
    """Per-pool gauges computed at scrape time from the daemon's state and the kubelet's pod resources."""

    def __init__(self, *, tree: Callable[[], DeviceTree], plan: PoolPlan,
                 registered: Callable[[], frozenset[str]], pod_resources: Path | None,
                 timeout: float = DEFAULT_TIMEOUT, cpu_stats: CpuCollector | None = None,
                 confinement: UnconfinedCollector | None = None, dra: DraDevices | None = None) -> None:
        self._tree = tree
        #: DRA mode: claim devices count as their pools' holdings (:func:`~deviceplugin.protocol.podresources.holdings_from`)
        self._dra = dra
        self._cpu_stats = cpu_stats
        self._confinement = confinement
        self._plan = plan
        self._registered = registered
        self._pod_resources = pod_resources
        self._timeout = timeout

    def fixed(self) -> Iterator[Metric]:
        """Families that stay as they are for the daemon's life (``cmk_cpu_info``): rendered once, not per scrape."""
        if self._cpu_stats is not None:
            yield self._cpu_stats.info()

    def collect(self) -> Iterator[Metric]:
        tree = self._tree()
        labels = ["pool", "resource"]
        families = {
            "capacity": GaugeMetricFamily("cmk_pool_capacity_devices", "Devices the pool advertises.", labels=labels),
            "allocatable": GaugeMetricFamily("cmk_pool_allocatable_devices",
                                             "Healthy devices the pool advertises.", labels=labels),
            "unhealthy": GaugeMetricFamily("cmk_pool_unhealthy_devices",
                                           "Devices unhealthy because a CPU of theirs is offline.", labels=labels),
            "registered": GaugeMetricFamily("cmk_pool_registered",
                                            "1 while the pool is registered with the kubelet now listening.",
                                            labels=labels),
        }
        registered = self._registered()
        for resource, devices in tree.items():
            key = [str(devices.pool), resource]
            families["capacity"].add_metric(key, len(devices.devices))
            families["allocatable"].add_metric(key, devices.healthy)
            families["unhealthy"].add_metric(key, len(devices.devices) - devices.healthy)
            families["registered"].add_metric(key, 1 if resource in registered else 0)
        yield from families.values()
        yield self._cpus(tree)
        yield from self._allocated(tree)

    def _cpus(self, tree: DeviceTree) -> Metric:
        family = GaugeMetricFamily("cmk_pool_cpus", "CPUs (hardware threads) in the pool per NUMA node.",
                                   labels=["pool", "numa_node"])
        for devices in tree.values():
            per_node: dict[str, int] = {}
            for core in self._plan.pools[devices.pool]:
                node = "unknown" if core.node is None else str(core.node)
                per_node[node] = per_node.get(node, 0) + len(core.cpus)
            for node, count in sorted(per_node.items()):
                family.add_metric([str(devices.pool), node], count)
        return family

    def _assignments(self, tree: DeviceTree) -> Assignments | None:
        if self._pod_resources is None:
            return None
        try:
            return read_assignments(self._pod_resources, resources=tree, allocatable=False, timeout=self._timeout,
                                    dra=self._dra)
        except Unavailable:
            return None

    def _allocated(self, tree: DeviceTree) -> Iterator[Metric]:
        assignments = self._assignments(tree)
        up = GaugeMetricFamily("cmk_pod_resources_up",
                               "1 if the last scrape read the kubelet's pod resources API, else 0.")
        up.add_metric([], 0 if assignments is None else 1)
        yield up
        if self._cpu_stats is not None:  # one pod resources read per scrape serves both
            yield from self._cpu_stats.families(None if assignments is None else held_cpus(tree, assignments.held))
        if self._confinement is not None:
            yield from self._confinement.families(None if assignments is None else held_sets(tree, assignments))
        if assignments is None:
            return
        allocated = GaugeMetricFamily("cmk_pool_allocated_devices",
                                      "Devices held by containers (kubelet pod resources List).",
                                      labels=["pool", "resource"])
        for resource, devices in tree.items():
            held = assignments.held(resource) & devices.devices.keys()
            allocated.add_metric([str(devices.pool), resource], len(held))
        yield allocated


class _Fixed(Collector):
    """The collector's fixed families, built when the first scrape formats them (not while the pools register)."""

    def __init__(self, collector: PoolCollector) -> None:
        self._collector = collector

    def collect(self) -> Iterator[Metric]:
        return self._collector.fixed()


class _WithoutCreated(Collector):
    """The registry without its ``_created`` samples: a creation time per counter and histogram child
    doubles their series and tells Prometheus nothing it uses (prometheus_client's switch for it is global)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterator[Metric]:
        for metric in self._registry.collect():
            created = metric.name + "_created"
            if any(sample.name == created for sample in metric.samples):
                kept = Metric(metric.name, metric.documentation, metric.type, metric.unit)
                kept.samples = [sample for sample in metric.samples if sample.name != created]
                metric = kept
            yield metric


#: ``cmk_config_info``'s labels without a config file, and while the file was refused (the last good plan serves).
CONFIG_NONE = ("none", "")
CONFIG_LAST_GOOD = ("last-good", "")


class Metrics(Observer):
    """The daemon's registry: counters and histograms plus a :class:`PoolCollector`.

    :meth:`encode` is what a scrape answers, in the format its Accept header
    negotiates (prometheus_client's ``choose_encoder``: OpenMetrics or the
    text format): the collector's fixed families, formatted once per format
    by the first scrape asking for it (one series per CPU: 8,192 lines that
    would otherwise be rebuilt on every scrape), then the registry as it is
    now, without ``_created`` series.
    """

    def __init__(self, collector: PoolCollector, tree: DeviceTree, *, config_fallback: bool = False,
                 config: tuple[str, str] | None = None) -> None:
        self.registry = CollectorRegistry()
        registry = self.registry
        info = build_info()
        Gauge("cmk_build_info", "1: the daemon's release, its Python and machine.", list(info),
              registry=registry).labels(**info).set(1)
        Gauge("cmk_config_fallback", "1 while the daemon refused its config and serves the last good plan.",
              registry=registry).set(1 if config_fallback else 0)
        section, generation = config or (CONFIG_NONE if not config_fallback else CONFIG_LAST_GOOD)
        Gauge("cmk_config_info", "The --config section this node took (default, nodes[I]; none: no file; "
              "last-good: refused) and its generation, a hash of its keys and values.",
              ["section", "generation"], registry=registry).labels(section, generation).set(1)
        self.registrations = Counter("cmk_registrations", "Successful registrations with the kubelet.",
                                     ["resource"], registry=registry)
        self.kubelet_restarts = Counter("cmk_kubelet_restarts", "Kubelet restarts the daemon reacted to.",
                                        registry=registry)
        self.allocate_seconds = Histogram("cmk_allocate_duration_seconds", "Time to answer Allocate.",
                                          ["pool"], buckets=LATENCY_BUCKETS, registry=registry)
        self.preferred_seconds = Histogram("cmk_preferred_allocation_duration_seconds",
                                           "Time to answer GetPreferredAllocation.", ["pool"],
                                           buckets=LATENCY_BUCKETS, registry=registry)
        self.allocate_errors = Counter("cmk_allocate_errors", "Allocate requests refused (the pod is rejected).",
                                       ["pool"], registry=registry)
        self.preferred_errors = Counter("cmk_preferred_allocation_errors",
                                        "GetPreferredAllocation requests refused.", ["pool"], registry=registry)
        self.irq_masks_narrowed = Gauge("cmk_irq_masks_narrowed",
                                        "IRQ masks IRQ steering keeps narrowed off held CPUs now (0 where "
                                        "irqbalance moves them or steering is off).", registry=registry)
        self.irqs_unmovable = Counter("cmk_irqs_unmovable", "IRQs whose mask the kernel refused to IRQ steering "
                                      "(managed or per-CPU): left where they are.", registry=registry)
        for resource, devices in tree.items():  # every series exists from the start, at 0
            pool = str(devices.pool)
            self.registrations.labels(resource)
            self.allocate_seconds.labels(pool)
            self.allocate_errors.labels(pool)
            if devices.preferred_allocation:
                self.preferred_seconds.labels(pool)
                self.preferred_errors.labels(pool)
        registry.register(collector)
        self._fixed_families = _Fixed(collector)
        self._fixed: dict[str, bytes] = {}  # content type -> the fixed families in it
        self._formatting = threading.Lock()
        self._current = _WithoutCreated(registry)

    def _fixed_part(self, encoder: Callable[[Collector], bytes], content_type: str) -> bytes:
        """The fixed families in this format: formatted by the first scrape that asks for it, then kept.

        Not at start: on 8,192 CPUs the two usual formats take 0.2 s, which
        every pool's registration would wait for. Two first scrapes of a
        format at once format it once; past ``FIXED_FORMATS``, each scrape
        formats its own, outside the lock.
        """
        fixed = self._fixed.get(content_type)
        if fixed is not None:
            return fixed
        if len(self._fixed) >= FIXED_FORMATS:
            return encoder(self._fixed_families).removesuffix(_EOF)
        with self._formatting:
            fixed = self._fixed.get(content_type)
            if fixed is None:
                fixed = encoder(self._fixed_families).removesuffix(_EOF)
                if len(self._fixed) < FIXED_FORMATS:
                    self._fixed[content_type] = fixed
        return fixed

    def encode(self, accept: str = "") -> tuple[str, bytes]:
        """(content type, body) of one scrape whose Accept header is ``accept``."""
        encoder, content_type = choose_encoder(accept)
        return content_type, self._fixed_part(encoder, content_type) + encoder(self._current)

    def render(self) -> bytes:
        """The exposition of one scrape in the text format (what a client that names no format gets)."""
        return self.encode()[1]

    # --- the daemon's :class:`Observer`: count and time what it reports ---------------------

    def registered(self, resource: str) -> None:
        self.registrations.labels(resource).inc()

    def kubelet_restarted(self) -> None:
        self.kubelet_restarts.inc()

    def allocated(self, allocation: Allocation, seconds: float) -> None:
        self.allocate_seconds.labels(allocation.pool).observe(seconds)

    def allocate_refused(self, pool: str, seconds: float) -> None:
        self.allocate_seconds.labels(pool).observe(seconds)
        self.allocate_errors.labels(pool).inc()

    def preferred(self, pool: str, seconds: float, *, refused: bool) -> None:
        self.preferred_seconds.labels(pool).observe(seconds)
        if refused:
            self.preferred_errors.labels(pool).inc()

    def irqs_steered(self, narrowed: int) -> None:
        self.irq_masks_narrowed.set(narrowed)

    def irq_unmovable(self) -> None:
        self.irqs_unmovable.inc()


@contextmanager
def serve_metrics(metrics: Metrics, host: str, port: int) -> Iterator[tuple[str, int]]:
    """Serve ``/metrics`` while the block runs, on a fixed few threads; yields the bound (host, port) (port 0 picks one)."""
    def render(path: str, headers: Mapping[str, str]) -> Answer | None:
        if path not in ("/metrics", "/"):
            return None
        content_type, body = metrics.encode(headers.get("accept", ""))
        fields = [("Content-Type", content_type), ("Vary", "Accept, Accept-Encoding")]
        if gzip_accepted(headers.get("accept-encoding", "")):
            return "200 OK", [*fields, ("Content-Encoding", "gzip")], gzip.compress(body)
        return "200 OK", fields, body

    try:
        server = BoundedHttpServer(host, port, render)
    except (OSError, OverflowError, UnicodeError) as err:
        reason = getattr(err, "strerror", None) or str(err)
        raise CmkError(f"cannot serve metrics on {host}:{port}: {reason} "
                       "(pick a free port and an address of this host with --metrics-address)") from None
    server.start()
    try:
        bound = server.server_address
        yield str(bound[0]), int(bound[1])
    finally:
        server.stop()
