"""The README's first commands, run as a reader of a fresh clone runs them, must print what it shows."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

from tests.support.commands import cmk

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
    result = cmk(*argv[1:])
    assert (result.returncode, result.stderr, result.stdout) == (0, "", shown)


def test_the_shipped_dump_carries_its_license():
    assert "Apache License" in (ROOT / "examples/cmk-xeon_d/LICENSE").read_text()


def test_cmk_fixtures_relocates_the_dumps_for_every_test_folder(tmp_path):
    """The README says CMK_FIXTURES points the tests elsewhere: the pinner tests used to ignore it."""
    (tmp_path / "somewhere").mkdir()
    code = ("from tests.support.topologies import FIXTURES, topology; "
            "print(FIXTURES); print(topology('somewhere'))")
    shown = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={"CMK_FIXTURES": str(tmp_path), "PATH": "/usr/bin"},
                           capture_output=True, text=True, check=True).stdout.split()
    assert shown == [str(tmp_path), str(tmp_path / "somewhere")]


def test_one_readme_command_sets_up_and_runs_the_tests_and_ci_runs_it():
    assert section("Tests").lstrip("\n").startswith("    .ci/test\n")
    steps = (ROOT / ".ci/test").read_text()
    order = [steps.index(step) for step in (".ci/install-system-packages", "pip install -q -e '.[test]'",
                                            "lint-imports", "python -m pytest")]
    assert order == sorted(order)
    assert 'exec "$(dirname "$0")/test"' in (ROOT / ".ci/run").read_text()
