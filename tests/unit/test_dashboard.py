"""The Grafana dashboard (deploy/components/monitoring/dashboard.json): every query is PromQL that promtool accepts.

Each query, with Grafana's variables filled in as Grafana would, becomes a recording rule in a
throwaway rule file that ``promtool check rules`` parses. That the series they name are ones a real
daemon exports is checked by scraping one: tests/protocol/test_monitoring_series.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from tests.support.monitoring import (
    SCRAPE_SERIES,
    dashboard,
    panels,
    queries,
    raw_queries,
    series_names,
    substitute,
)
from tests.support.promtool import RULE_FILES, alerts, promtool


def check_as_rules(exprs: list[str], tmp_path: Path) -> tuple[int, str]:
    """``promtool check rules`` on one recording rule per expression: (exit status, output)."""
    rules = [{"record": f"cmk_dashboard:query_{n}", "expr": expr} for n, expr in enumerate(exprs)]
    path = tmp_path / "dashboard-rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = promtool("check", "rules", path.name, cwd=tmp_path)
    return result.returncode, result.stdout + result.stderr


def test_every_dashboard_query_parses_with_promtool(tmp_path: Path) -> None:
    found = queries()
    assert len(found) >= 20
    status, output = check_as_rules([expr for _, expr in found], tmp_path)
    assert status == 0 and f"SUCCESS: {len(found)} rules found" in output, output


def test_promtool_refuses_a_broken_query(tmp_path: Path) -> None:
    """So the pass above means something: an unbalanced parenthesis, an unknown function, a range on a range."""
    (_, good), *_ = queries()
    for broken in (good + ")", "rate_of(cmk_pool_cpus[5m])", "rate(cmk_pool_busy_seconds_total[5m][5m])"):
        status, output = check_as_rules([good, broken], tmp_path)
        assert status != 0, broken
        assert '"cmk_dashboard:query_1": could not parse expression' in output, output


def test_every_variable_a_query_uses_is_defined_or_grafanas() -> None:
    board = dashboard()
    for where, expr in raw_queries(board):
        substitute(expr, {v["name"] for v in board["templating"]["list"]})  # asserts on an unknown one
        assert "$" not in substitute(expr, {v["name"] for v in board["templating"]["list"]}), where
    try:
        substitute('cmk_pool_cpus{instance=~"$node"}', {"instance"})
    except AssertionError as err:
        assert "$node" in str(err)
    else:
        raise AssertionError("an undefined variable went unnoticed")


def test_the_dashboard_reads_raw_series_only() -> None:
    """It works without the recording rules loaded: every name is the daemon's or the scrape's own."""
    names = set().union(*(series_names(expr) for _, expr in queries()))
    assert names and not [name for name in names if ":" in name], names
    assert names - SCRAPE_SERIES == {name for name in names if name.startswith("cmk_")}


def alert_threshold(name: str) -> float:
    (rule,) = [rule for path in RULE_FILES for rule in alerts(path) if rule["alert"] == name]
    (value,) = set(re.findall(r"> ([0-9.]+)", rule["expr"]))
    return float(value)


def threshold_line(title: str) -> float:
    (panel,) = [p for p in panels(dashboard()) if p["title"] == title]
    steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert panel["fieldConfig"]["defaults"]["custom"]["thresholdsStyle"]["mode"] == "line"
    return float(steps[-1]["value"])


def test_the_threshold_lines_are_where_the_alerts_fire() -> None:
    assert threshold_line("Leaks: busy exclusive CPUs no container holds") == alert_threshold("CmkExclusiveCpuLeak")
    assert threshold_line("Device interrupts on isolated or exclusive CPUs") == \
        alert_threshold("CmkInterruptStormOnIsolatedCpu")


def test_the_panels_are_laid_out_and_use_the_datasource_variable() -> None:
    board = dashboard()
    ids = [panel["id"] for panel in panels(board)]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for panel in panels(board):
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        mine = {(x, y) for x in range(grid["x"], grid["x"] + grid["w"]) for y in range(grid["y"], grid["y"] + grid["h"])}
        assert not mine & cells, f"{panel['title']} overlaps another panel"
        cells |= mine
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["description"], panel["title"]
        refs = [target["refId"] for target in panel["targets"]]
        assert refs and len(refs) == len(set(refs)), panel["title"]
    titles = " ".join(panel["title"].lower() for panel in panels(board))
    for subject in ("pool", "allocated", "leaks", "interrupts", "unconfined", "registered"):
        assert subject in titles, subject

