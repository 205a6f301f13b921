"""``cmk hook`` through the Python ``cmk``: the same commands as the static binary of the same name."""

from __future__ import annotations

from pathlib import Path

import pytest

from deviceplugin.cli import hook
from pinner.build import DEFAULT_OUTPUT
from pinner.contract import HOOK_HELP
from tests.commands import cmk


def test_python_cmk_runs_the_static_hook(native_cmk: Path) -> None:
    assert native_cmk == DEFAULT_OUTPUT, "the Python cmk runs the pinner the package build put there"
    result = cmk("hook", "--help")
    assert (result.returncode, result.stdout, result.stderr) == (0, HOOK_HELP, "")
    listed = cmk("--help").stdout
    assert "    hook " in listed


def test_without_the_static_pinner_help_still_shows_and_a_run_says_how_to_build_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "cmk"
    assert hook(["--help"], binary=missing) == 0
    assert capsys.readouterr().out == HOOK_HELP
    assert hook([], binary=missing) == 2
    assert capsys.readouterr().err == (
        f"cmk hook: error: the hook is the static pinner's, and the self-contained pinner was not built ({missing} "
        "is missing, as after a build without a C compiler): build it with 'python -m pinner.build' "
        "(README.md, section Install), or run the installed one, e.g. /opt/bin/cmk hook\n")
