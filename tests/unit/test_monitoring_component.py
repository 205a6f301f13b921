"""deploy/components/monitoring: PodMonitor, PrometheusRules and the dashboard, with the base needing no CRD.

The PrometheusRules are generated from deploy/prometheus/*-rules.yaml (tools/prometheusrule.py) and
must stay what those files give; the objects are checked against the prometheus-operator's own CRDs;
the PodMonitor must scrape what the rules expect, as scrape-config.yaml does without the operator.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import jsonschema
import pytest
import yaml

from tests.support.manifests import render
from tests.support.monitoring import (
    DASHBOARD,
    ROOT,
    RULE_FILES,
    validate_operator_object,
)
from tests.support.promtool import JOB, PROMETHEUS

TOOL = ROOT / "tools" / "prometheusrule.py"


def tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("prometheusrule", TOOL)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def of_kind(kind: str, kustomization: str) -> list[dict[str, Any]]:
    return [obj for obj in render(kustomization) if obj["kind"] == kind]


def test_the_committed_prometheusrules_are_what_the_rule_files_give() -> None:
    checked = subprocess.run([sys.executable, str(TOOL), "--check"], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stderr
    rules = {obj["metadata"]["name"]: obj["spec"]["groups"] for obj in of_kind("PrometheusRule", "overlays/monitoring")}
    assert rules == {f"cmk-deviceplugin-{path.name.removesuffix('-rules.yaml')}": yaml.safe_load(path.read_text())["groups"]
                     for path in RULE_FILES}


def test_the_check_sees_a_rule_file_changed(tmp_path: Path) -> None:
    changed = tmp_path / "health-rules.yaml"
    changed.write_text((PROMETHEUS / "health-rules.yaml").read_text().replace("for: 2m", "for: 3m", 1))
    prometheusrule = tool()
    assert prometheusrule.render([changed]) != prometheusrule.render([PROMETHEUS / "health-rules.yaml"])
    assert "for: 3m" in prometheusrule.render([changed])


def test_the_base_needs_no_operator_crd_and_the_overlay_adds_only_the_component() -> None:
    def names(kustomization: str) -> set[tuple[str, str]]:
        return {(obj["kind"], obj["metadata"]["name"]) for obj in render(kustomization)}

    assert not {kind for kind, _ in names("base")} & {"PodMonitor", "PrometheusRule"}
    assert names("overlays/monitoring") - names("base") == names("components/monitoring") == {
        ("PodMonitor", "cmk-deviceplugin"), ("PrometheusRule", "cmk-deviceplugin-health"),
        ("PrometheusRule", "cmk-deviceplugin-isolation"), ("ConfigMap", "cmk-deviceplugin-dashboard")}
    for obj in render("overlays/monitoring"):
        assert obj["kind"] == "Namespace" or obj["metadata"]["namespace"] == "cmk-system", obj["metadata"]["name"]


def test_the_podmonitor_scrapes_every_daemon_as_the_rules_expect() -> None:
    (monitor,) = of_kind("PodMonitor", "overlays/monitoring")
    selector = monitor["spec"]["selector"]["matchLabels"]
    for kustomization in ("base", "overlays/node-group-large"):  # every node group's daemon
        (daemonset,) = of_kind("DaemonSet", kustomization)
        template = daemonset["spec"]["template"]
        assert selector.items() <= template["metadata"]["labels"].items(), kustomization
        ports = {p["name"] for c in template["spec"]["containers"] for p in c.get("ports", [])}
        assert [e["port"] for e in monitor["spec"]["podMetricsEndpoints"]] == ["metrics"] and "metrics" in ports
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    relabel = {r["targetLabel"]: r for r in endpoint["relabelings"]}
    assert relabel["job"]["replacement"] == JOB  # what every rule's job matcher names
    (job,) = yaml.safe_load((PROMETHEUS / "scrape-config.yaml").read_text())["scrape_configs"]
    plain = {r["target_label"]: r["source_labels"] for r in job["relabel_configs"] if "target_label" in r}
    assert {k: relabel[k]["sourceLabels"] for k in plain} == plain  # instance and pod as without the operator
    for rules in RULE_FILES:
        for found in re.findall(r'job="([^"]*)"', rules.read_text()):
            assert found == JOB


def test_the_dashboard_configmap_carries_the_dashboard_for_grafanas_sidecar() -> None:
    (configmap,) = [c for c in of_kind("ConfigMap", "overlays/monitoring")
                    if c["metadata"]["name"] == "cmk-deviceplugin-dashboard"]
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(configmap["data"]["cmk-deviceplugin.json"]) == json.loads(DASHBOARD.read_text())


def test_the_operator_schemas_refuse_what_the_api_server_would() -> None:
    """The CRD check the strict validation test relies on fails on a wrong type and on an unknown field."""
    (monitor,) = of_kind("PodMonitor", "overlays/monitoring")
    validate_operator_object(monitor)
    wrong_type = json.loads(json.dumps(monitor))
    wrong_type["spec"]["podMetricsEndpoints"] = {"port": "metrics"}
    with pytest.raises(jsonschema.ValidationError):
        validate_operator_object(wrong_type)
    unknown = json.loads(json.dumps(monitor))
    unknown["spec"]["podMetricsEndpoints"][0]["relabellings"] = []
    with pytest.raises(jsonschema.ValidationError, match="relabellings"):
        validate_operator_object(unknown)
    (rule, *_) = of_kind("PrometheusRule", "overlays/monitoring")
    unknown = json.loads(json.dumps(rule))
    unknown["spec"]["groups"][0]["rules"][0]["runbook"] = "x"
    with pytest.raises(jsonschema.ValidationError, match="runbook"):
        validate_operator_object(unknown)


def documented_patch() -> dict[str, Any]:
    """The scraper patch of docs/user/monitoring.md, as an overlay would hold it."""
    blocks = re.findall(r"```yaml\n(.*?)```", (ROOT / "docs" / "user" / "monitoring.md").read_text(), flags=re.DOTALL)
    (block,) = [b for b in blocks if "NetworkPolicy" in b]
    return yaml.safe_load(block)


@pytest.mark.parametrize("kustomization", ["base", "overlays/node-group-large", "overlays/monitoring"])
def test_the_scraper_is_one_setting_the_documented_patch_changes(kustomization: str, tmp_path: Path) -> None:
    (default,) = of_kind("NetworkPolicy", kustomization)
    (rule,) = default["spec"]["ingress"]
    overlay = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
               "resources": [os.path.relpath(ROOT / "deploy" / kustomization, tmp_path)], **documented_patch()}
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(overlay))
    built = subprocess.run(["kubectl", "kustomize", str(tmp_path)], capture_output=True, text=True, check=False)
    assert built.returncode == 0, built.stderr
    objects = [obj for obj in yaml.safe_load_all(built.stdout) if obj]
    (policy,) = [obj for obj in objects if obj["kind"] == "NetworkPolicy"]
    (patched,) = policy["spec"]["ingress"]
    (value,) = [op["value"] for op in yaml.safe_load(documented_patch()["patches"][0]["patch"])]
    assert patched == {**rule, "from": value}  # the scraper changed, the port kept
    assert policy["spec"]["podSelector"] == default["spec"]["podSelector"]
    assert [obj for obj in objects if obj["kind"] != "NetworkPolicy"] == \
        [obj for obj in render(kustomization) if obj["kind"] != "NetworkPolicy"]


def test_the_runbook_base_flag_points_every_alert_of_the_component_at_that_page() -> None:
    base = "https://docs.example.com/cmk/alerts.html"
    rules = [rule for obj in yaml.safe_load_all(tool().render(runbook_base=base)) if obj
             for group in obj["spec"]["groups"] for rule in group["rules"] if "alert" in rule]
    assert rules and [r["annotations"]["runbook_url"] for r in rules] == [f"{base}#{r['alert'].lower()}" for r in rules]
