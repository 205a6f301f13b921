"""What the shipped monitoring reads: the PromQL of every rule and of every dashboard query, and the series names in it.

Shared by the unit tests of the dashboard and the rules and by the protocol test that scrapes a real daemon.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS = ROOT / "deploy" / "prometheus"
RULE_FILES = sorted(PROMETHEUS.glob("*-rules.yaml"))
MONITORING = ROOT / "deploy" / "components" / "monitoring"
DASHBOARD = MONITORING / "dashboard.json"

#: What Prometheus 2.x sends (scrape/scrape.go, acceptHeader): OpenMetrics first, the text format as a fallback.
PROMETHEUS_ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
                     "text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
#: What Grafana puts for its own variables when it runs a query; the dashboard's variables become a regex that
#: matches every value (what "All" sends).
GRAFANA_VARIABLES = {"__rate_interval": "5m", "__interval": "1m", "__range": "1h"}
#: Series a query may read that the daemon does not export: the scrape's own.
SCRAPE_SERIES = {"up"}
#: ``label_values(SELECTOR, LABEL)``: a variable's query, Grafana's, not PromQL; its selector is.
LABEL_VALUES = re.compile(r"label_values\((?P<selector>.+),\s*(?P<label>\w+)\)")


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in board["panels"]:
        yield panel
        yield from panel.get("panels", [])  # a collapsed row holds its panels


def variable_names(board: dict[str, Any]) -> set[str]:
    return {variable["name"] for variable in board["templating"]["list"]}


def raw_queries(board: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, PromQL with Grafana's ``$variables``) of every panel target and every variable's selector."""
    found = [(f"panel {panel['id']} {panel['title']!r} {target['refId']}", target["expr"])
             for panel in panels(board) for target in panel.get("targets", [])]
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            match = LABEL_VALUES.fullmatch(variable["query"]["query"])
            assert match, f"variable {variable['name']}: {variable['query']['query']!r} is not label_values(...)"
            found.append((f"variable {variable['name']}", match["selector"]))
    return found


def substitute(expr: str, variables: set[str]) -> str:
    """The query as Prometheus gets it: Grafana's variables as :data:`GRAFANA_VARIABLES`, the dashboard's as ``.+``."""
    def value(match: re.Match[str]) -> str:
        name = match[1] or match[2]
        if name in GRAFANA_VARIABLES:
            return GRAFANA_VARIABLES[name]
        assert name in variables, f"${name} is no variable of the dashboard: {expr}"
        return ".+"
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", value, expr)


def queries() -> list[tuple[str, str]]:
    """(where, PromQL as Prometheus gets it) of every dashboard query."""
    board = dashboard()
    names = variable_names(board)
    return [(where, substitute(expr, names)) for where, expr in raw_queries(board)]


def rule_expressions() -> list[tuple[str, str]]:
    return [(f"{path.name} {rule.get('alert') or rule.get('record')}", rule["expr"])
            for path in RULE_FILES for group in yaml.safe_load(path.read_text())["groups"] for rule in group["rules"]]


def recorded() -> set[str]:
    return {rule["record"] for path in RULE_FILES for group in yaml.safe_load(path.read_text())["groups"]
            for rule in group["rules"] if "record" in rule}


def series_names(expr: str) -> set[str]:
    """The metric names an expression reads: ``cmk_*`` series, the scrape's ``up``, recorded ``cmk:*`` ones."""
    without_strings = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    return set(re.findall(r"\b(?:cmk_\w+|cmk:[\w:]+)", without_strings)) | (
        set(re.findall(r"\b\w+\b", without_strings)) & SCRAPE_SERIES)


#: The prometheus-operator release whose CRDs the component's objects are checked against, fetched as the Go
#: module it is (its example/prometheus-operator-crd holds the CRDs the operator installs).
OPERATOR_MODULE = "github.com/prometheus-operator/prometheus-operator@v0.85.0"
OPERATOR_CRDS = {"PodMonitor": "monitoring.coreos.com_podmonitors.yaml",
                 "PrometheusRule": "monitoring.coreos.com_prometheusrules.yaml"}


@functools.cache
def operator_crd_dir() -> Path:
    """The directory of the operator's CRD files in the module cache (``go mod download``, once per session)."""
    import subprocess

    download = subprocess.run(["go", "mod", "download", "-json", OPERATOR_MODULE], capture_output=True, text=True,
                              check=False, timeout=600)
    assert download.returncode == 0, f"go mod download {OPERATOR_MODULE}: {download.stdout}{download.stderr}"
    return Path(json.loads(download.stdout)["Dir"]) / "example" / "prometheus-operator-crd"


@functools.cache
def operator_schema(kind: str) -> tuple[str, dict[str, Any]]:
    """(apiVersion, openAPIV3Schema) of the stored version of the operator's CRD for ``kind``."""
    crd = yaml.safe_load((operator_crd_dir() / OPERATOR_CRDS[kind]).read_text())
    assert crd["spec"]["names"]["kind"] == kind
    (version,) = [v for v in crd["spec"]["versions"] if v["served"] and v["storage"]]
    return f"{crd['spec']['group']}/{version['name']}", version["schema"]["openAPIV3Schema"]


def unknown_fields(value: Any, schema: dict[str, Any], where: str = "") -> list[str]:
    """Fields the schema does not name, as the API server's strict field validation reports them."""
    if isinstance(value, dict) and "properties" in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
        found = [f"{where}.{key}" for key in value if key not in schema["properties"]]
        for key, item in value.items():
            if key in schema["properties"]:
                found += unknown_fields(item, schema["properties"][key], f"{where}.{key}")
        return found
    if isinstance(value, list) and "items" in schema:
        return [bad for n, item in enumerate(value) for bad in unknown_fields(item, schema["items"], f"{where}[{n}]")]
    return []


def validate_operator_object(obj: dict[str, Any]) -> None:
    """Raise if ``obj`` (a PodMonitor or PrometheusRule) breaks its CRD's schema or names a field it lacks."""
    import jsonschema

    api_version, schema = operator_schema(obj["kind"])
    assert obj["apiVersion"] == api_version, obj["apiVersion"]
    # the schema's patterns are Go's (RE2: "^(?i)..."), so the schema itself is not checked against the metaschema
    jsonschema.Draft7Validator(schema).validate(obj)
    unknown = unknown_fields(obj, schema)
    if unknown:
        raise jsonschema.ValidationError(f"{obj['kind']}/{obj['metadata']['name']}: unknown fields {unknown}")
