"""deploy/prometheus: every rules file loads, fires when it should (``promtool test rules``) and follows the layout.

Each ``NAME-rules.yaml`` has its promtool unit tests beside it in ``NAME-rules.test.yaml``; a new
rules file is run here without changing this module. That the health rules read series the daemon
really exports, and fire on them, is checked against a live daemon in tests/protocol/test_metrics_lint.py.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support.promtool import (
    JOB,
    PROMETHEUS,
    PROMTOOL,
    ROOT,
    RULE_FILES,
    alerts,
    promtool,
    rules_in,
)

HEALTH = PROMETHEUS / "health-rules.yaml"
RUNBOOKS = ROOT / "docs" / "user" / "alerts.md"
#: Where runbook_url points: the runbooks as the repository's web view shows them, an anchor per alert.
RUNBOOK_URL = "https://github.com/cmk-deviceplugin/cmk-deviceplugin/blob/main/docs/user/alerts.md#"


def unit_tests_of(rules: Path) -> Path:
    return rules.with_name(rules.name.removesuffix(".yaml") + ".test.yaml")


def test_promtool_is_installed_by_ci() -> None:
    assert PROMTOOL is not None
    assert "prometheus" in (ROOT / ".ci" / "install-system-packages").read_text()
    assert HEALTH in RULE_FILES


@pytest.mark.parametrize("rules", RULE_FILES, ids=lambda p: p.name)
def test_the_rules_load_and_their_tests_pass(rules: Path) -> None:
    checked = promtool("check", "rules", rules.name)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(rules_in(rules))} rules found" in checked.stdout
    tested = promtool("test", "rules", unit_tests_of(rules).name)
    assert tested.returncode == 0 and "SUCCESS" in tested.stdout, tested.stdout + tested.stderr


@pytest.mark.parametrize("rules", RULE_FILES, ids=lambda p: p.name)
def test_every_alert_has_a_case_that_fires_it(rules: Path) -> None:
    """promtool compares the firing alerts exactly, so a firing case also shows which series stay quiet."""
    tests = yaml.safe_load(unit_tests_of(rules).read_text())
    assert tests["rule_files"] == [rules.name]
    fired = {check["alertname"] for case in tests["tests"] for check in case.get("alert_rule_test", [])
             if check["exp_alerts"]}
    names = {rule["alert"] for rule in alerts(rules)}
    assert names <= fired, f"alerts no test fires: {sorted(names - fired)}"


@pytest.mark.parametrize("rules", RULE_FILES, ids=lambda p: p.name)
def test_every_alert_follows_the_layout(rules: Path) -> None:
    for group in yaml.safe_load(rules.read_text())["groups"]:
        assert group["name"].startswith("cmk-"), group["name"]
    for rule in alerts(rules):
        assert re.fullmatch(r"Cmk[A-Z][A-Za-z]+", rule["alert"]), rule["alert"]
        assert rule["labels"]["severity"] in {"critical", "warning"}, rule["alert"]
        assert {"summary", "description"} <= rule["annotations"].keys(), rule["alert"]
        assert "\n" not in rule["annotations"]["summary"], rule["alert"]
        assert "for" in rule, f"{rule['alert']}: a single scrape must not page"
    for rule in rules_in(rules):  # recording rules named level:metric:operations, as Prometheus advises
        assert "alert" in rule or re.fullmatch(r"cmk:[a-z_]+:[a-z0-9_]+", rule["record"]), rule


def anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives the headings: lower case, punctuation but ``-`` dropped, spaces as ``-``."""
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
            for heading in re.findall(r"^#+ (.+)$", markdown, flags=re.MULTILINE)}


def test_every_alert_has_a_runbook_section_of_its_own() -> None:
    headings = anchors(RUNBOOKS.read_text())
    names = [rule["alert"] for rules in RULE_FILES for rule in alerts(rules)]
    for rules in RULE_FILES:
        for rule in alerts(rules):
            url = rule["annotations"].get("runbook_url", "")
            assert url == RUNBOOK_URL + rule["alert"].lower(), f"{rule['alert']}: runbook_url {url!r}"
            assert url.removeprefix(RUNBOOK_URL) in headings, f"{rule['alert']}: no section in {RUNBOOKS.name}"
    runbooks = {h for h in headings if h.startswith("cmk") and not h.startswith("cmk-")}
    assert runbooks == {name.lower() for name in names}, "a runbook for an alert that no longer exists"
    assert len(set(names)) == len(names)


def test_the_runbook_check_sees_a_missing_section() -> None:
    """``anchors`` finds what GitHub would link to, so a heading renamed away fails the test above."""
    text = RUNBOOKS.read_text()
    assert "cmkpoolnotregistered" in anchors(text)
    assert "cmkpoolnotregistered" not in anchors(text.replace("## CmkPoolNotRegistered", "## Pool not registered"))


def test_a_wrong_expectation_fails(tmp_path: Path) -> None:
    """promtool does fail a test whose alert does not fire as written: the passes above mean something."""
    case = yaml.safe_load(unit_tests_of(HEALTH).read_text())
    shutil.copy(HEALTH, tmp_path)
    (check,) = [c for t in case["tests"] for c in t["alert_rule_test"]
                if c["alertname"] == "CmkPoolNotRegistered" and c["exp_alerts"]]
    check["exp_alerts"] = []  # it fires there
    (tmp_path / unit_tests_of(HEALTH).name).write_text(yaml.safe_dump(case))
    result = promtool("test", "rules", unit_tests_of(HEALTH).name, cwd=tmp_path)
    assert result.returncode != 0
    assert "CmkPoolNotRegistered" in result.stdout + result.stderr


def test_the_scrape_job_is_a_valid_config_named_as_the_rules_expect(tmp_path: Path) -> None:
    """promtool checks the job with the rules; Debian builds it without Kubernetes service discovery,
    so the discovery block (role pod in cmk-system) is checked here and stood in for by a static target."""
    scrape = yaml.safe_load((PROMETHEUS / "scrape-config.yaml").read_text())["scrape_configs"]
    assert [job["job_name"] for job in scrape] == [JOB]
    (job,) = scrape
    assert job.pop("kubernetes_sd_configs") == [{"role": "pod", "namespaces": {"names": ["cmk-system"]}}]
    job["static_configs"] = [{"targets": ["127.0.0.1:9464"]}]
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({"rule_files": [str(path) for path in RULE_FILES], "scrape_configs": scrape}))
    result = promtool("check", "config", str(config))
    assert result.returncode == 0, result.stdout + result.stderr
    for rule in alerts(HEALTH):
        for job in re.findall(r'job="([^"]*)"', rule["expr"]):
            assert job == JOB, rule["alert"]


def test_the_scrape_job_keeps_the_daemons_metrics_port() -> None:
    """The relabelling keeps pods labelled as the DaemonSet labels them, on the port it names."""
    proc = subprocess.run(["kubectl", "kustomize", str(ROOT / "deploy" / "base")], capture_output=True, text=True,
                          check=True)
    (daemonset,) = [d for d in yaml.safe_load_all(proc.stdout) if d and d["kind"] == "DaemonSet"]
    labels = daemonset["spec"]["template"]["metadata"]["labels"]
    ports = {p["name"] for c in daemonset["spec"]["template"]["spec"]["containers"] for p in c.get("ports", [])}
    (job,) = yaml.safe_load((PROMETHEUS / "scrape-config.yaml").read_text())["scrape_configs"]
    (keep,) = [r for r in job["relabel_configs"] if r.get("action") == "keep"]
    values = []
    for source in keep["source_labels"]:
        if source.startswith("__meta_kubernetes_pod_label_"):
            (value,) = [v for k, v in labels.items() if re.sub(r"[^a-zA-Z0-9_]", "_", k)
                        == source.removeprefix("__meta_kubernetes_pod_label_")]
            values.append(value)
        else:
            assert source == "__meta_kubernetes_pod_container_port_name"
            values.append("metrics")
            assert "metrics" in ports
    assert re.fullmatch(keep["regex"], ";".join(values))
    assert job["kubernetes_sd_configs"][0]["namespaces"]["names"] == [daemonset["metadata"]["namespace"]]


def test_describe_lists_interrupted_cpus_at_the_alerts_own_threshold() -> None:
    """One threshold, one meaning: the storm alert's number is the one `cmk describe` lists CPUs above."""
    from deviceplugin.model.cpustats import DEVICE_IRQ_ALERT_PER_SECOND

    (storm,) = [a for a in alerts(PROMETHEUS / "isolation-rules.yaml") if a["alert"] == "CmkInterruptStormOnIsolatedCpu"]
    thresholds = {float(number) for number in re.findall(r"\[5m\]\)\s*>\s*([0-9.]+)", storm["expr"])}
    assert thresholds == {DEVICE_IRQ_ALERT_PER_SECOND}
