"""The Helm chart renders deploy/'s own objects: with the default values what ``kubectl kustomize deploy/base``
renders (the Namespace left to README's ``kubectl apply -f deploy/base/namespace.yaml``), so the chart and the base never drift.

Rendering is the real ``helm template`` and ``helm lint`` (helm from ``.ci/build-cluster``, as the
cluster tier's components; on PATH in CI), compared object by object, parsed.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.support.manifests import DEPLOY, ROOT, VERSIONS, objects, render
from tests.support.promtool import promtool

CHART = ROOT / "charts" / "cmk-deviceplugin"
NAMESPACE = "cmk-system"
Key = tuple[str, str]


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("helm")
    assert binary, "helm is not on PATH: export PATH=\"$(.ci/build-cluster | tail -n1):$PATH\" (CI does)"
    return subprocess.run([binary, *args], capture_output=True, text=True, check=False, timeout=120)


@cache
def template(*settings: str) -> tuple[dict[str, Any], ...]:
    """``helm template`` of the chart into cmk-system, each ``settings`` item a ``--set-json`` KEY=JSON."""
    args = ["template", "cmk-deviceplugin", str(CHART), "--namespace", NAMESPACE]
    for setting in settings:
        args += ["--set-json", setting]
    result = helm(*args)
    assert result.returncode == 0, result.stderr
    return tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc)


def by_key(docs: Iterable[dict[str, Any]]) -> dict[Key, dict[str, Any]]:
    """(kind, name) -> a copy of the object (the renders are cached: a test changing one changes no other)."""
    return {(d["kind"], d["metadata"]["name"]): json.loads(json.dumps(d)) for d in docs}


def test_with_the_default_values_the_chart_renders_the_base_less_its_namespace() -> None:
    base = by_key(render("base"))
    assert by_key(template()) == {k: v for k, v in base.items() if k[0] != "Namespace"}


def test_irq_steering_in_the_config_mounts_what_the_kustomize_overlay_mounts() -> None:
    def daemon_and_volumes(docs: Iterable[dict[str, Any]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        (ds,) = [d for d in docs if d["kind"] == "DaemonSet"]
        (daemon,) = [c for c in ds["spec"]["template"]["spec"]["containers"] if c["name"] == "daemon"]
        return daemon, ds["spec"]["template"]["spec"]["volumes"]

    chart, chart_volumes = daemon_and_volumes(template('config={"irq-steering": ["exclusive"]}'))
    overlay, overlay_volumes = daemon_and_volumes(render("overlays/irq-steering"))
    plain, _ = daemon_and_volumes(template())
    assert "--irq-dir=/host/proc/irq" in chart["args"] and not any("irq" in arg for arg in plain["args"])
    assert chart["volumeMounts"] == overlay["volumeMounts"] and chart_volumes[-2:] == overlay_volumes[-2:]
    (config,) = [d for d in template('config={"irq-steering": ["exclusive"]}') if d["kind"] == "ConfigMap"
                 and "config.yaml" in d.get("data", {})]
    assert yaml.safe_load(config["data"]["config.yaml"])["irq-steering"] == ["exclusive"]


def test_with_create_namespace_the_chart_renders_exactly_the_base() -> None:
    assert by_key(template("createNamespace=true")) == by_key(render("base"))


def blank_lines_dropped(obj: Any) -> Any:
    """``obj`` with every run of line breaks in its strings made one.

    kustomize re-folds a ``>-`` scalar with more-indented lines into one that parses with an extra
    blank line (the CEL expressions of deploy/admission); Helm and PyYAML read the file as written.
    """
    if isinstance(obj, dict):
        return {k: blank_lines_dropped(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [blank_lines_dropped(v) for v in obj]
    return re.sub(r"\n+", "\n", obj) if isinstance(obj, str) else obj


def test_the_admission_switch_adds_exactly_deploy_admission() -> None:
    on, off = by_key(template("admission.enabled=true")), by_key(template())
    added = {k: v for k, v in on.items() if k not in off}
    assert blank_lines_dropped(added) == blank_lines_dropped(by_key(render("admission")))
    assert {k: v for k, v in on.items() if k in off} == off
    # and the expressions are the file's own, character for character
    written = [d for d in yaml.safe_load_all((DEPLOY / "admission/policy.yaml").read_text()) if d]
    assert [added[(d["kind"], d["metadata"]["name"])]["spec"] for d in written] == [d["spec"] for d in written]


def test_the_dra_switch_adds_exactly_deploy_dras_device_classes_and_is_off_by_default() -> None:
    on, off = by_key(template('dra={"deviceClasses": {"enabled": true}}')), by_key(template())
    added = {k: v for k, v in on.items() if k not in off}
    assert added == by_key(render("dra")) and {k[0] for k in added} == {"DeviceClass"}
    assert {k: v for k, v in on.items() if k in off} == off
    assert not [k for k in off if k[0] == "DeviceClass"]


@pytest.mark.parametrize("version", sorted({"1.36.0", VERSIONS[-1]}))
def test_the_device_classes_validate_strictly_where_dra_serves_resource_names(version: str) -> None:
    """resource.k8s.io/v1 with extendedResourceName: Kubernetes 1.36+, as test_deploy.py checks deploy/dra."""
    classes = [d for d in template('dra={"deviceClasses": {"enabled": true}}') if d["kind"] == "DeviceClass"]
    assert classes
    for obj in classes:
        kubernetes_validate.validate(obj, version, strict=True)


def test_a_second_node_group_release_renders_the_node_group_overlay() -> None:
    """deploy/overlays/node-group-large as a release: its group, its config, its threads per core."""
    overlay = {k: v for k, v in by_key(render("overlays/node-group-large")).items() if k[0] != "Namespace"}
    config = yaml.safe_load(next(c for c in objects("ConfigMap", "overlays/node-group-large")
                                 if "config.yaml" in c["data"])["data"]["config.yaml"])
    released = template('nodeGroup="large"', f"config={json.dumps(config)}", "threadsPerCore=2")
    chart = by_key(released)
    # kustomize hashes the overlay's file as written (comments and all); the chart writes the same keys
    (key,) = [k for k in overlay if k[1].startswith("cmk-config-large-")]
    (ours,) = [k for k in chart if k[1].startswith("cmk-config-large-")]
    assert yaml.safe_load(chart.pop(ours)["data"]["config.yaml"]) == config
    overlay.pop(key)
    for objects_ in (overlay, chart):
        ds = objects_[("DaemonSet", "cmk-deviceplugin-large")]
        (volume,) = [v for v in ds["spec"]["template"]["spec"]["volumes"] if "configMap" in v]
        volume["configMap"]["name"] = "cmk-config-large"
    assert chart == overlay


def test_the_config_value_is_the_daemons_config_and_a_change_renames_its_configmap() -> None:
    """The name's content hash is what rolls the daemon on helm upgrade, as kustomize's does on apply."""
    def config_name(docs: Iterable[dict[str, Any]]) -> str:
        (ds,) = [d for d in docs if d["kind"] == "DaemonSet"]
        (volume,) = [v for v in ds["spec"]["template"]["spec"]["volumes"] if "configMap" in v]
        (cm,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == volume["configMap"]["name"]]
        return str(cm["metadata"]["name"])

    changed = template('config={"exclusive-mode": "spread", "num-exclusive-cores": 2}')
    assert config_name(changed) != config_name(template())
    (cm,) = [d for d in changed if d["metadata"]["name"] == config_name(changed)]
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())["config"]
    # Helm merges a value into the defaults: the keys not given stay as they are
    assert yaml.safe_load(cm["data"]["config.yaml"]) == {**defaults, "exclusive-mode": "spread",
                                                         "num-exclusive-cores": 2}


def test_scheduling_image_and_resources_values_reach_the_daemonset() -> None:
    docs = template('image={"repository": "registry.example/cmk", "tag": "9.9.9", "pullPolicy": "Always"}',
                    'tolerations=[{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]',
                    'nodeSelector={"node-role.example/dataplane": "true"}',
                    'affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms":'
                    ' [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}}',
                    'resources={"daemon": {"requests": {"cpu": "50m", "memory": "96Mi"},'
                    ' "limits": {"cpu": "1", "memory": "256Mi"}}}')
    (ds,) = [d for d in docs if d["kind"] == "DaemonSet"]
    pod = ds["spec"]["template"]["spec"]
    (base,) = objects("DaemonSet", "base")
    base_pod = base["spec"]["template"]["spec"]
    assert {(c["image"], c["imagePullPolicy"]) for c in pod["initContainers"] + pod["containers"]} == {
        ("registry.example/cmk:9.9.9", "Always")}
    assert pod["tolerations"] == [*base_pod["tolerations"], {"key": "dedicated", "operator": "Exists",
                                                             "effect": "NoSchedule"}]
    assert pod["nodeSelector"] == {**base_pod["nodeSelector"], "node-role.example/dataplane": "true"}
    assert pod["affinity"]["nodeAffinity"]
    (daemon,) = pod["containers"]
    (install,) = pod["initContainers"]
    assert daemon["resources"]["limits"] == {"cpu": "1", "memory": "256Mi"}
    assert install["resources"] == base_pod["initContainers"][0]["resources"]


def test_the_monitoring_switches_render_the_rule_files_as_they_are_and_the_components_pod_monitor() -> None:
    docs = by_key(template("monitoring.podMonitor.enabled=true", "monitoring.prometheusRule.enabled=true"))
    rule = docs[("PrometheusRule", "cmk-deviceplugin")]
    files = sorted((DEPLOY / "prometheus").glob("*-rules.yaml"))
    assert files and rule["spec"]["groups"] == [g for f in files for g in yaml.safe_load(f.read_text())["groups"]]
    # one PodMonitor, deploy/components/monitoring's: the chart's is that file, narrowed to its node group
    (component,) = [o for o in objects("PodMonitor", "components/monitoring")]
    monitor = docs[("PodMonitor", "cmk-deviceplugin")]["spec"]
    component["spec"]["selector"]["matchLabels"]["cmk.intel.com/node-group"] = "default"
    component["spec"]["podMetricsEndpoints"][0]["interval"] = "30s"
    assert monitor == component["spec"]
    (ds,) = objects("DaemonSet", "base")
    assert monitor["selector"]["matchLabels"].items() <= ds["spec"]["template"]["metadata"]["labels"].items()
    assert not {k for k in by_key(template()) if k[0] in ("PodMonitor", "PrometheusRule")}, "off by default"


def test_the_dashboard_switch_renders_the_components_dashboard_for_grafanas_sidecar() -> None:
    docs = by_key(template("monitoring.dashboard.enabled=true", 'monitoring.dashboard.labels={"release": "kps"}'))
    configmap = docs[("ConfigMap", "cmk-deviceplugin-dashboard")]
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert configmap["metadata"]["labels"]["release"] == "kps"
    shipped = DEPLOY / "components/monitoring/dashboard.json"
    assert json.loads(configmap["data"]["cmk-deviceplugin.json"]) == json.loads(shipped.read_text())
    assert ("ConfigMap", "cmk-deviceplugin-dashboard") not in by_key(template())


def test_the_runbook_base_points_every_alert_at_its_section_and_promtool_loads_the_result(tmp_path) -> None:
    base = "https://docs.example.com/cmk/alerts.html"
    docs = by_key(template("monitoring.prometheusRule.enabled=true",
                           f'monitoring.prometheusRule.runbookBaseURL="{base}"'))
    groups = docs[("PrometheusRule", "cmk-deviceplugin")]["spec"]["groups"]
    alerts = [rule for group in groups for rule in group["rules"] if "alert" in rule]
    sections = {line[3:].strip().lower() for line in (ROOT / "docs/user/alerts.md").read_text().splitlines()
                if line.startswith("## ")}
    assert alerts and {a["annotations"]["runbook_url"] for a in alerts} == {f"{base}#{a['alert'].lower()}" for a in alerts}
    assert {a["alert"].lower() for a in alerts} <= sections
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    checked = promtool("check", "rules", "rules.yaml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert helm("template", "x", str(CHART), "--set", "monitoring.prometheusRule.runbookBaseURL=docs").returncode != 0


def test_the_network_policy_scraper_is_a_setting() -> None:
    docs = template('networkPolicy.prometheus={"namespaceSelector": {"matchLabels": {"team": "obs"}},'
                    ' "podSelector": {"matchLabels": {"app": "vmagent"}}}')
    (policy,) = [d for d in docs if d["kind"] == "NetworkPolicy"]
    (source,) = policy["spec"]["ingress"][0]["from"]
    assert source == {"namespaceSelector": {"matchLabels": {"team": "obs"}}, "podSelector": {"matchLabels": {"app": "vmagent"}}}


@pytest.mark.parametrize("version", VERSIONS)
def test_every_rendered_object_validates_strictly(version: str) -> None:
    for obj in template("admission.enabled=true", "createNamespace=true"):
        kubernetes_validate.validate(obj, version, strict=True)


@pytest.mark.parametrize("settings", [(), ("--set", "admission.enabled=true", "--set", "dra.deviceClasses.enabled=true")])
def test_helm_lint_passes(settings: tuple[str, ...]) -> None:
    result = helm("lint", "--strict", str(CHART), *settings)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


@pytest.mark.parametrize(("setting", "complaint"), [
    ('nodeGroup="Large Nodes"', "nodeGroup"),
    ('config={"num-exclusive-cores": "4"}', "num-exclusive-cores"),
    ("threadsPerCore=0", "threadsPerCore"),
    ('imagetag="x"', "imagetag"),
])
def test_the_schema_refuses_bad_values_with_the_key_named(setting: str, complaint: str) -> None:
    result = helm("template", "x", str(CHART), "--set-json", setting)
    assert result.returncode != 0 and complaint in result.stderr, result.stderr


def test_the_schema_knows_every_config_key_but_the_paths_the_daemonset_sets() -> None:
    """A new daemon flag is a new chart key; a path the DaemonSet mounts is not one (it would miss its mount)."""
    from deviceplugin.cli.configfile import FILE_KEYS

    schema = json.loads((CHART / "values.schema.json").read_text())["properties"]["config"]
    (ds,) = objects("DaemonSet", "base")
    (daemon,) = ds["spec"]["template"]["spec"]["containers"]
    set_by_args = {arg.split("=", 1)[0].removeprefix("--") for arg in daemon["args"] if arg.startswith("--")}
    roots = {"sysfs-root", "procfs-root"}  # the container's own /sys and /proc, as the DaemonSet says
    assert set(schema["properties"]) == set(FILE_KEYS) - set_by_args - roots | {"default", "nodes"}
    assert set(schema["definitions"]["keys"]["properties"]) == set(FILE_KEYS) - set_by_args - roots


#: docs/user/node-groups.md's example, as a release's values file: a default and per-node sections
PER_NODE_VALUES = """\
config:
  default:
    shared-slots: 100
  nodes:
    - names: [edge-1, edge-2]
      config:
        num-exclusive-cores: 2
    - nameRegex: 'big-[0-9]+'
      config:
        num-exclusive-cores: 16
        exclusive-mode: spread
        irq-steering: [exclusive]
"""


def values_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "values.yaml"
    path.write_text(text)
    return str(path)


def test_per_node_config_sections_pass_lint_and_render_a_config_each_node_reads_its_section_of(tmp_path: Path) -> None:
    from deviceplugin.cli.configfile import parse_config, select_section

    values = values_file(tmp_path, PER_NODE_VALUES)
    lint = helm("lint", "--strict", str(CHART), "--values", values)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    result = helm("template", "cmk-deviceplugin", str(CHART), "--namespace", NAMESPACE, "--values", values)
    assert result.returncode == 0, result.stderr
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    (config,) = [d for d in docs if d["kind"] == "ConfigMap" and "config.yaml" in d.get("data", {})]
    written = yaml.safe_load(config["data"]["config.yaml"])
    # the chart's flat defaults joined default:, under the release's own (the daemon refuses keys beside it)
    assert set(written) == {"default", "nodes"} and written["default"]["shared-slots"] == 100
    taken = {node: select_section(written, node, "config.yaml") for node in ("edge-2", "big-7", "other")}
    assert {node: section for node, (_, section) in taken.items()} == {
        "edge-2": "nodes[0]", "big-7": "nodes[1]", "other": "default"}
    big = parse_config(taken["big-7"][0], "config.yaml")
    assert (big["num_exclusive_cores"], str(big["exclusive_mode"]), big["shared_slots"]) == (16, "spread", 100)
    # a node section that steers IRQs gets the daemon the host's /proc/irq, as a flat key does
    (ds,) = [d for d in docs if d["kind"] == "DaemonSet"]
    (daemon,) = [c for c in ds["spec"]["template"]["spec"]["containers"] if c["name"] == "daemon"]
    assert "--irq-dir=/host/proc/irq" in daemon["args"]


@pytest.mark.parametrize(("values", "complaint"), [
    ("config:\n  nodes:\n    - names: [edge-1]\n      config:\n        num-exclusive-core: 2\n",
     "num-exclusive-core"),
    ("config:\n  default:\n    shared-slots: 0\n", "/config/default/shared-slots"),
    ("config:\n  nodes:\n    - names: [edge-1]\n      nameRegex: edge-.*\n", "/config/nodes/0"),
    ("config:\n  nodes:\n    - config: {}\n", "/config/nodes/0"),
])
def test_the_schema_refuses_a_bad_per_node_section_naming_where(tmp_path: Path, values: str, complaint: str) -> None:
    result = helm("template", "x", str(CHART), "--values", values_file(tmp_path, values))
    assert result.returncode != 0 and complaint in result.stderr, result.stderr
