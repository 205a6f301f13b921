"""``cmk isolate`` and ``cmk hook`` through the Python ``cmk``: they exec the static binary of the same name."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from deviceplugin.cli import static_pinner
from deviceplugin.model.pinnercontract import HOOK_HELP, ISOLATE_HELP
from pinner.build import DEFAULT_OUTPUT
from tests.pinner.conftest import BASE_ENV, CPU_A, ROOT
from tests.support.commands import cmk


def test_python_cmk_runs_the_static_hook(native_cmk: Path) -> None:
    assert native_cmk == DEFAULT_OUTPUT, "the Python cmk runs the pinner the package build put there"
    result = cmk("hook", "--help")
    assert (result.returncode, result.stdout, result.stderr) == (0, HOOK_HELP, "")
    listed = cmk("--help").stdout
    assert "    hook " in listed


def test_python_cmk_isolate_is_the_static_pinner_exec_d_in_place(native_cmk: Path) -> None:
    """The same process (its PID) ends up as the command, pinned, with the static pinner's env."""
    script = 'echo "$$ $CMK_CPUS_ASSIGNED"; grep ^Cpus_allowed_list: /proc/self/status'
    process = subprocess.Popen([sys.executable, "-m", "deviceplugin", "isolate", "--pool=shared", "sh", "--", "-c",
                                script], env={**BASE_ENV, "CMK_CPUS_SHARED": str(CPU_A)}, cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = process.communicate(timeout=60)
    assert (process.returncode, err, out) == (0, "", f"{process.pid} {CPU_A}\nCpus_allowed_list:\t{CPU_A}\n")
    assert cmk("isolate", "--help").stdout == ISOLATE_HELP


@pytest.mark.parametrize(("command", "text", "what"), [("hook", HOOK_HELP, "the hook"),
                                                        ("isolate", ISOLATE_HELP, "the pinner")])
def test_without_the_static_pinner_help_still_shows_and_a_run_says_how_to_build_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, text: str, what: str) -> None:
    missing = tmp_path / "cmk"
    assert static_pinner(command, ["--help"], binary=missing) == 0
    assert capsys.readouterr().out == text
    assert static_pinner(command, [], binary=missing) == 2
    assert capsys.readouterr().err == (
        f"cmk {command}: error: {what} is the static pinner's, and the self-contained pinner was not built "
        f"({missing} is missing, as after a build without a C compiler): build it with 'python -m pinner.build --output {missing}' "
        f"(README.md, section Install), or run the installed one, e.g. /opt/bin/cmk {command}\n")
