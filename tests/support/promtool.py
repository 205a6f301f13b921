"""The chart's Prometheus rules and the real promtool that checks them."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]


PROMETHEUS = ROOT / "deploy" / "prometheus"


PROMTOOL = shutil.which("promtool")


def promtool(*args: str, cwd: Path = PROMETHEUS) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None, "promtool missing: run .ci/install-system-packages (Debian package prometheus)"
    return subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, check=False, timeout=120)


RULE_FILES = sorted(PROMETHEUS.glob("*-rules.yaml"))


JOB = "cmk-deviceplugin"


def rules_in(rules: Path) -> list[dict[str, Any]]:
    return [rule for group in yaml.safe_load(rules.read_text())["groups"] for rule in group["rules"]]


def alerts(rules: Path) -> list[dict[str, Any]]:
    return [rule for rule in rules_in(rules) if "alert" in rule]
