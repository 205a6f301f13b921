"""The interrupt storm alert, fed the rates the IRQ steering check measured on a real kernel: it fires for the
held cores before steering and is silent after.

The guest counted ``cmk_pool_interrupts_total{kind="device", pool="exclusive"}``
from the daemon's /metrics during each phase (tests/node/guest.py,
``check_irq_steering``); here the real promtool evaluates the shipped rule on
a series growing at that rate.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from deviceplugin.model.cpustats import DEVICE_IRQ_ALERT_PER_SECOND
from tests.node.shapes import IRQ_STEERING, NO_ISOLCPUS
from tests.support.promtool import PROMETHEUS, promtool

ALERT = "CmkInterruptStormOnIsolatedCpu"
LABELS = {"instance": "vm", "pool": "exclusive", "numa_node": "0", "isolated": "false", "kind": "device"}


def _series(labels: dict[str, str], name: str) -> str:
    return name + "{" + ", ".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def alert_fires(tmp_path: Path, per_minute: int) -> bool:
    """Whether the shipped rule fires after 12 minutes of a series growing ``per_minute``."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "isolation-rules.yaml").write_text((PROMETHEUS / "isolation-rules.yaml").read_text())
    firing = {"alertname": ALERT, "alertstate": "firing", "severity": "warning", **LABELS}
    case = {"rule_files": ["isolation-rules.yaml"], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [{"series": _series(LABELS, "cmk_pool_interrupts_total"), "values": f"0+{per_minute}x20"}],
        "promql_expr_test": [{"expr": f'ALERTS{{alertname="{ALERT}", alertstate="firing"}}', "eval_time": "12m",
                              "exp_samples": [{"labels": _series(firing, "ALERTS"), "value": 1}]}]}]}
    (tmp_path / "case.yaml").write_text(yaml.safe_dump(case))
    return promtool("test", "rules", "case.yaml", cwd=tmp_path).returncode == 0


@pytest.mark.node
@pytest.mark.parametrize("shape", [NO_ISOLCPUS.name])
def test_the_storm_alert_fires_on_the_held_cores_before_steering_and_not_after(node_boots, shape, tmp_path):
    result = node_boots.get(shape).result
    assert result["checks"].get(IRQ_STEERING, {}).get("ok"), result["checks"].get(IRQ_STEERING)
    figures: dict[str, Any] = result["figures"]["irq_steering"]
    rates = {phase: figures[phase]["metric"] / figures[phase]["seconds"] for phase in ("before", "after")}
    assert rates["before"] > DEVICE_IRQ_ALERT_PER_SECOND, f"the disk load stormed too little to alert: {rates}"
    assert alert_fires(tmp_path / "before", round(rates["before"] * 60)), f"no alert at {rates['before']:.0f}/s"
    assert not alert_fires(tmp_path / "after", round(rates["after"] * 60)), f"an alert at {rates['after']:.0f}/s"
