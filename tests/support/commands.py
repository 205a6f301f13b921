"""``cmk`` as a user runs it: a real process from the repository root, its output and status."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def cmk(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``cmk ARGS`` (this checkout's, via ``python -m deviceplugin``); never raises on a non-zero status."""
    return subprocess.run([sys.executable, "-m", "deviceplugin", *args], cwd=ROOT, check=False,
                          capture_output=True, text=True, timeout=timeout)
