"""What the isolation collectors add to a ``/metrics`` scrape, on this machine and on 1,024 CPUs.

``python benchmarks/scrape.py [RUNS]`` builds the daemon's registry three times per
machine: without :class:`deviceplugin.observe.cpumetrics.CpuCollector`, with it as
the daemon runs by default (per-pool series and ``cmk_cpu_info``) and with its
per-CPU series (``--per-cpu-metrics``), and times ``Metrics.render`` (what the
HTTP handler runs per scrape), pod
resources read from the kubelet stand-in over a real socket in both. It prints
median and p90 milliseconds, series and bytes side by side and the ratio. The
1,024-CPU procfs is written at a real node's shape (every named interrupt line
and softirq type, 200 device IRQ lines, each steered to one CPU: a NIC's queues) so parsing costs what it
would there; Prometheus' default scrape timeout is 10 s. A second table: the
same scrapes as Prometheus asks for them (OpenMetrics, then gzip-compressed:
``Metrics.encode`` and what the endpoint adds), and the ``_created`` series
the registry carries that the endpoint leaves out.
"""

from __future__ import annotations

import gzip
import statistics
import sys
import tempfile
from pathlib import Path

if not __package__:  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prometheus_client import generate_latest

from benchmarks.synthetic_sysfs import write_synthetic_sysfs
from benchmarks.timing import samples_ms
from deviceplugin.host.sysfs import discover
from deviceplugin.model.cpustats import places
from deviceplugin.model.devices import device_tree
from deviceplugin.model.plan import PlanOptions, plan_pools
from deviceplugin.observe.cpumetrics import CpuCollector
from deviceplugin.observe.metrics import Metrics, PoolCollector
from deviceplugin.standin import Kubelet, KubeletOptions
from tests.support.monitoring import PROMETHEUS_ACCEPT
from tests.support.procfs_counters import Known, write_counters

SYNTHETIC = (4, 2, 64, 2)  # sockets, nodes per socket, cores per node, threads per core
DEVICE_IRQ_LINES = 200


CONFIGS = ("without", "default", "per-CPU")


def _registries(sysfs: Path, procfs: Path, pod_resources: Path) -> tuple[Metrics, Metrics, Metrics]:
    topology = discover(sysfs, procfs)
    plan = plan_pools(topology, PlanOptions())
    tree = device_tree(plan, topology.online)

    def metrics(cpu_stats: CpuCollector | None) -> Metrics:
        collector = PoolCollector(tree=lambda: tree, plan=plan, registered=lambda: frozenset(tree),
                                  pod_resources=pod_resources, cpu_stats=cpu_stats)
        return Metrics(collector, tree)

    where = places(topology, plan)
    return (metrics(None), metrics(CpuCollector(procfs_root=procfs, places=where)),
            metrics(CpuCollector(procfs_root=procfs, places=where, per_cpu=True)))


def _series(text: bytes) -> int:
    return sum(1 for line in text.splitlines() if line and not line.startswith(b"#"))


def main(argv: list[str]) -> int:
    runs = int(argv[0]) if argv else 30
    rows = []
    formats = []
    with tempfile.TemporaryDirectory(prefix="cmk-bench-scrape-", dir="/tmp") as scratch:
        root = Path(scratch)
        kubelet = Kubelet(root / "plugins", KubeletOptions(pod_resources_socket=root / "pod-resources.sock"))
        kubelet.start()
        try:
            synthetic = write_synthetic_sysfs(root / "synthetic", *SYNTHETIC, isolated=range(0, 1024, 2))
            cpus = discover(synthetic.sysfs, synthetic.procfs).online
            write_counters(synthetic.procfs, {c: Known(user=1000 + c, system=300, idle=90000, device_irqs=c,
                                                       timer_irqs=50000, net_rx=c) for c in cpus},
                           steered_irq_lines=DEVICE_IRQ_LINES, real_shape=True)
            machines = {"this machine (/sys, /proc)": (Path("/sys"), Path("/proc")),
                        "synthetic " + "x".join(map(str, SYNTHETIC)): (synthetic.sysfs, synthetic.procfs)}
            for name, (sysfs, procfs) in machines.items():
                online = len(discover(sysfs, procfs).online)
                for label, metrics in zip(CONFIGS, _registries(sysfs, procfs, kubelet.pod_resources_socket)):
                    text = metrics.render()
                    samples = samples_ms(metrics.render, runs, warmup=2)
                    rows.append((name, online, label, statistics.median(samples),
                                 statistics.quantiles(samples, n=10)[-1], _series(text), len(text)))
                    formats.append(_formats(metrics, runs))
        finally:
            kubelet.stop()
    print(f"/metrics scrape (Metrics.render), {runs} warm runs each; pod resources from the stand-in")
    print(f"{'machine':<30} {'CPUs':>5} {'CPU collectors':<15} {'median ms':>10} {'p90 ms':>8} {'series':>7} "
          f"{'bytes':>9}")
    for name, online, label, median, p90, series, size in rows:
        print(f"{name:<30} {online:>5} {label:<15} {median:>10.2f} {p90:>8.2f} {series:>7} {size:>9}")
    for without, *withs in zip(rows[::3], rows[1::3], rows[2::3]):
        for with_ in withs:
            print(f"{with_[0]}: {with_[2]}/without {with_[3] / without[3]:.2f}x the time, "
                  f"+{with_[3] - without[3]:.2f} ms, +{with_[5] - without[5]} series")
    print(f"\nAs Prometheus asks (OpenMetrics, gzip), medians of {runs} warm runs; _created: series left out")
    print(f"{'machine':<30} {'CPU collectors':<15} {'text ms':>8} {'OpenMetrics ms':>15} {'+gzip ms':>9} "
          f"{'bytes':>9} {'gzip bytes':>11} {'ratio':>6} {'_created':>9}")
    for (name, _, label, median, *_), (om_ms, gzip_ms, size, packed, created) in zip(rows, formats):
        print(f"{name:<30} {label:<15} {median:>8.2f} {om_ms:>15.2f} {gzip_ms:>9.2f} {size:>9} {packed:>11} "
              f"{size / packed:>5.1f}x {created:>9}")
    return 0


def _formats(metrics: Metrics, runs: int) -> tuple[float, float, int, int, int]:
    """(OpenMetrics ms, gzip ms, OpenMetrics bytes, gzip bytes, _created series the registry has)."""
    _, body = metrics.encode(PROMETHEUS_ACCEPT)
    encode_ms = statistics.median(samples_ms(lambda: metrics.encode(PROMETHEUS_ACCEPT), runs, warmup=2))
    gzip_ms = statistics.median(samples_ms(lambda: gzip.compress(body), runs, warmup=2))
    created = sum(1 for line in generate_latest(metrics.registry).splitlines()
                  if line.split(b"{")[0].split(b" ")[0].endswith(b"_created"))
    return encode_ms, gzip_ms, len(body), len(gzip.compress(body)), created


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
