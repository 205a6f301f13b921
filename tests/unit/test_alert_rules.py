"""deploy/prometheus/isolation-rules.yaml beyond what test_prometheus_rules checks of every rules file.

Its promtool cases must fail once a rule's threshold or aggregation is broken, so they
cannot pass by asserting nothing, and every series the rules read must be one the daemon exports.
"""

from __future__ import annotations

import re
import shutil

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from deviceplugin.model.cpustats import Place
from deviceplugin.observe.cgroupmetrics import UnconfinedCollector
from deviceplugin.observe.cpumetrics import CpuCollector
from tests.support.procfs_counters import Known, write_counters
from tests.support.promtool import PROMETHEUS as RULES
from tests.support.promtool import promtool


@pytest.mark.parametrize(("rule", "broken"), [
    ("rate(cmk_pool_unheld_busy_seconds_total[5m]) > 0.1", "rate(cmk_pool_unheld_busy_seconds_total[5m]) > 2"),
    ('isolated="true"}[5m]) > 100', 'isolated="true"}[5m]) > 1000'),
    ("cmk_cpu_stats_up == 0", "cmk_cpu_stats_up == 2"),
    ('{reason="started_before_hook"} > 0', '{reason="started_before_hook"} > 2'),
    ('{reason="widened"} > 0', '{reason="widened"} > 1'),
    ("cmk_cgroup_scan_up == 0", "cmk_cgroup_scan_up == 2"),
    ("sum by (instance, pool, numa_node) (rate(cmk_pool_busy_seconds_total[5m]))",
     "max by (instance, pool, numa_node) (rate(cmk_pool_busy_seconds_total[5m]))"),
])
def test_the_rule_tests_fail_when_a_rule_is_broken(tmp_path, rule, broken):
    text = (RULES / "isolation-rules.yaml").read_text()
    assert text.count(rule) == 1
    (tmp_path / "isolation-rules.yaml").write_text(text.replace(rule, broken))
    shutil.copy(RULES / "isolation-rules.test.yaml", tmp_path)
    tested = promtool("test", "rules", "isolation-rules.test.yaml", cwd=tmp_path)
    assert tested.returncode != 0 and "FAILED" in tested.stdout + tested.stderr


class _Families(Collector):
    def __init__(self, collector: CpuCollector | UnconfinedCollector) -> None:
        self._collector = collector

    def collect(self):  # type: ignore[no-untyped-def]
        return self._collector.families(frozenset())


def test_every_series_the_rules_read_is_one_the_daemon_exports(tmp_path):
    write_counters(tmp_path, {0: Known(user=5, idle=5)})
    registry = CollectorRegistry()
    registry.register(_Families(CpuCollector(procfs_root=tmp_path, places={0: Place("exclusive", "0", True)})))
    cpuset = tmp_path / "fs/cgroup/cpuset"
    cpuset.mkdir(parents=True)
    (cpuset / "cpuset.effective_cpus").write_text("0\n")
    registry.register(_Families(UnconfinedCollector(sysfs_root=tmp_path, exclusive=frozenset({0}))))
    exported = {s.name for family in text_string_to_metric_families(generate_latest(registry).decode())
                for s in family.samples}
    groups = yaml.safe_load((RULES / "isolation-rules.yaml").read_text())["groups"]
    read = {name for group in groups for rule in group["rules"] for name in re.findall(r"\bcmk_\w+", rule["expr"])}
    assert read and read <= exported, read - exported
