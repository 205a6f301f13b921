"""Every series the shipped rules and dashboard read is one a real scrape of the daemon has.

The daemon runs as the DaemonSet runs it (metrics on, pod resources from the kubelet stand-in) on a
copy of the Xeon D dump with procfs counters and a cpuset cgroup tree beside it, so every reading is
up; it is scraped over HTTP as Prometheus scrapes it (OpenMetrics, gzip). The names come from
deploy/prometheus/*-rules.yaml and deploy/components/monitoring/dashboard.json.
"""

from __future__ import annotations

import gzip
import urllib.request

from prometheus_client.openmetrics.parser import text_string_to_metric_families

from deviceplugin.standin import Kubelet
from tests.support.cgroups import container, cpuset_root
from tests.support.daemon import (
    EXCLUSIVE,
    INFRA,
    SHARED,
    three_pool_pod,
    wait_registered,
)
from tests.support.metrics import metered_daemon
from tests.support.monitoring import (
    PROMETHEUS_ACCEPT,
    SCRAPE_SERIES,
    queries,
    recorded,
    rule_expressions,
    series_names,
)
from tests.support.procfs_counters import Known, write_counters


def prometheus_scrape(address: str) -> set[str]:
    """The sample names of one scrape with Prometheus' headers."""
    request = urllib.request.Request(f"http://{address}/metrics",
                                     headers={"Accept": PROMETHEUS_ACCEPT, "Accept-Encoding": "gzip"})
    with urllib.request.urlopen(request, timeout=10) as reply:
        assert reply.headers["Content-Encoding"] == "gzip"
        text = gzip.decompress(reply.read()).decode()
    return {sample.name for family in text_string_to_metric_families(text) for sample in family.samples}


def test_every_series_the_rules_and_the_dashboard_read_is_in_a_real_scrape(kubelet: Kubelet, plugin_dir, tmp_path):
    daemon = metered_daemon(kubelet, plugin_dir, tmp_path)
    write_counters(daemon.procfs, {cpu: Known(user=10, idle=10, device_irqs=5, timer_irqs=7, net_rx=3)
                                   for cpu in range(16)})
    container(cpuset_root(daemon.sysfs), "a" * 64, range(16))  # one container from before the hook
    try:
        address = daemon.logs.wait_for("metrics_serving")["address"]
        wait_registered(kubelet, {EXCLUSIVE, SHARED, INFRA})
        kubelet.admit(three_pool_pod("demo", exclusive=1))
        exported = prometheus_scrape(address)
    finally:
        daemon.process.terminate()
        daemon.process.wait(timeout=20)
        daemon.logs.join()
    assert {"cmk_cpu_stats_up", "cmk_cgroup_scan_up", "cmk_pod_resources_up", "cmk_unconfined_containers",
            "cmk_pool_held_cpus", "cmk_pool_allocated_devices"} <= exported  # every reading up: nothing left out
    by_rules = {name for _, expr in rule_expressions() for name in series_names(expr)}
    by_dashboard = {name for _, expr in queries() for name in series_names(expr)}
    assert len(by_rules) >= 8 and len(by_dashboard) >= 15
    for name in sorted(by_rules | by_dashboard):
        assert name in exported or name in SCRAPE_SERIES or name in recorded(), f"{name}: not in a scrape of the daemon"
    assert daemon.process.returncode == 0


def test_a_name_the_daemon_does_not_export_is_caught():
    """``series_names`` finds a misspelt series inside a query, strings and labels aside."""
    names = series_names('sum by (pool) (rate(cmk_pool_interupts_total{kind="cmk_not_a_series", instance=~".+"}[5m]))')
    assert names == {"cmk_pool_interupts_total"}
    assert series_names('up{job="cmk-deviceplugin"} == 0') == {"up"}
    assert series_names("cmk:pool_busy_cpus:rate5m > 1") == {"cmk:pool_busy_cpus:rate5m"}
