"""The daemon's real /metrics against Prometheus's own tools: lint, and the alert rules on real series.

A real daemon serves the kubelet stand-in; its exposition is scraped over HTTP in the states an
operator meets (serving with a pod admitted, a CPU offline, the kubelet gone) and each scrape goes
through ``promtool check metrics``. The same scrapes become the input of ``promtool test rules``
(each sample held for ten minutes, with the labels the scrape job adds), so the rules in
deploy/prometheus/health-rules.yaml are shown to fire on the series the daemon really exports, with their labels.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml
from prometheus_client.parser import text_string_to_metric_families

from deviceplugin.standin import Kubelet
from tests.support.daemon import (
    EXCLUSIVE,
    INFRA,
    REPO,
    SHARED,
    three_pool_pod,
    wait_registered,
)
from tests.support.metrics import (
    eventually,
    exposition,
    lint,
    metered_daemon,
    pool_values,
)
from tests.support.topologies import set_online

RULES = REPO / "deploy" / "prometheus" / "health-rules.yaml"
LABELS = {"job": "cmk-deviceplugin", "instance": "node-a"}  # what the scrape job (scrape-config.yaml) adds


def families(text: str) -> set[str]:
    return {family.name for family in text_string_to_metric_families(text)}


def series(text: str, *names: str) -> list[dict[str, str]]:
    """promtool input series: every sample of ``names``, with the scrape's labels, held for ten minutes."""
    found = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in names:
                labels = {**sample.labels, **LABELS}
                selector = ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
                found.append({"series": f"{sample.name}{{{selector}}}", "values": f"{sample.value:g}x10"})
    return found


def annotations(alert: str, labels: dict[str, str], value: str) -> dict[str, str]:
    """The alert's annotations with their templates filled in (they use only $labels.NAME and $value)."""
    (rule,) = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if r.get("alert") == alert]
    fill = {f"{{{{ $labels.{k} }}}}": v for k, v in labels.items()} | {"{{ $value }}": value}
    result = {}
    for key, template in rule["annotations"].items():
        for placeholder, text in fill.items():
            template = template.replace(placeholder, text)
        assert "{{" not in template, template
        result[key] = template
    return result


def firing(text: str, alert: str, names: tuple[str, ...], tmp_path: Path,
           expected: list[tuple[dict[str, str], str]]) -> None:
    """``promtool test rules``: at 8 minutes exactly ``expected`` (labels, value) alerts fire on the scraped series."""
    exp = [{"exp_labels": labels, "exp_annotations": annotations(alert, labels, value)} for labels, value in expected]
    case = {"rule_files": [str(RULES)], "evaluation_interval": "1m",
            "tests": [{"interval": "1m", "input_series": series(text, *names),
                       "alert_rule_test": [{"eval_time": "8m", "alertname": alert, "exp_alerts": exp}]}]}
    path = tmp_path / f"{alert}.yaml"
    path.write_text(yaml.safe_dump(case))
    result = subprocess.run(["promtool", "test", "rules", str(path)], capture_output=True, text=True, check=False,
                            timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def rule_metrics() -> set[str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {name for group in groups for rule in group["rules"] for name in re.findall(r"\bcmk_\w+", rule["expr"])}


def alert_labels(pool: str, resource: str, severity: str) -> dict[str, str]:
    return {**LABELS, "pool": pool, "resource": resource, "severity": severity}


def test_the_real_exposition_lints_and_the_rules_fire_on_it(kubelet: Kubelet, plugin_dir, tmp_path):
    daemon = metered_daemon(kubelet, plugin_dir, tmp_path)
    process, logs, sysfs = daemon.process, daemon.logs, daemon.sysfs
    try:
        address = logs.wait_for("metrics_serving")["address"]
        wait_registered(kubelet, {EXCLUSIVE, SHARED, INFRA})
        eventually(address, lambda s: all(v == 1 for v in pool_values(s, "cmk_pool_registered").values()),
                   "registered")
        kubelet.admit(three_pool_pod("demo", exclusive=2))  # histograms and allocated devices get samples
        serving = exposition(address)
        lint(serving)
        assert rule_metrics() and rule_metrics() <= families(serving), "the rules read series the daemon exports"
        firing(serving, "CmkPoolNotRegistered", ("cmk_pool_registered",), tmp_path, [])
        firing(serving, "CmkPoolDevicesUnhealthy", ("cmk_pool_unhealthy_devices",), tmp_path, [])

        set_online(sysfs, 9, False)  # the second thread of core {1,9}: that exclusive device is unhealthy
        offline = eventually(address, lambda s: pool_values(s, "cmk_pool_unhealthy_devices")[EXCLUSIVE] == 1,
                             "unhealthy")
        assert offline
        text = exposition(address)
        lint(text)
        firing(text, "CmkPoolDevicesUnhealthy", ("cmk_pool_unhealthy_devices",), tmp_path,
               [(alert_labels("exclusive", EXCLUSIVE, "warning"), "1")])

        kubelet.stop()  # the kubelet is gone: no pool is registered with a listening kubelet
        eventually(address, lambda s: all(v == 0 for v in pool_values(s, "cmk_pool_registered").values()),
                   "unregistered")
        away = exposition(address)
        lint(away)
        firing(away, "CmkPoolNotRegistered", ("cmk_pool_registered",), tmp_path,
               [(alert_labels(pool, resource, "critical"), "0")
                for pool, resource in (("exclusive", EXCLUSIVE), ("infra", INFRA), ("shared", SHARED))])
    finally:
        process.terminate()
        process.wait(timeout=20)
        logs.join()
    assert process.returncode == 0


def test_the_lint_catches_a_bad_exposition():
    """``lint`` fails on what promtool flags (a counter without _total), so its passes above mean something."""
    try:
        lint("# HELP cmk_bad A counter.\n# TYPE cmk_bad counter\ncmk_bad 1\n")
    except AssertionError as err:
        assert "_total" in str(err)
    else:
        raise AssertionError("promtool check metrics accepted a counter without _total")
