"""The README's first commands, run as a reader of a fresh clone runs them, must print what it shows."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def section(title: str) -> str:
    return README.partition(f"\n## {title}")[2].partition("\n## ")[0]


def test_the_describe_example_runs_on_the_shipped_dump_and_prints_what_the_readme_shows():
    text = section("First thing to run: `cmk describe`")
    command = text.partition("repository ships one")[2].partition("\n\n")[2].partition("\n\n")[0]
    argv = shlex.split(command.replace("\\\n", " "))
    assert argv[:2] == ["cmk", "describe"] and "examples/cmk-xeon_d/sys" in argv
    shown = text.partition("```\n")[2].partition("```")[0]
    result = subprocess.run([sys.executable, "-m", "deviceplugin", *argv[1:]], cwd=ROOT, capture_output=True,
                            text=True, timeout=60, check=False)
    assert (result.returncode, result.stderr, result.stdout) == (0, "", shown)


def test_the_shipped_dump_carries_its_license():
    assert "Apache License" in (ROOT / "examples/cmk-xeon_d/LICENSE").read_text()
