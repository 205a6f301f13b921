"""The chart's Prometheus rules and the real promtool that checks them."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


PROMETHEUS = ROOT / "deploy" / "prometheus"


PROMTOOL = shutil.which("promtool")


def promtool(*args: str, cwd: Path = PROMETHEUS) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None, "promtool missing: run .ci/install-system-packages (Debian package prometheus)"
    return subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, check=False, timeout=120)

