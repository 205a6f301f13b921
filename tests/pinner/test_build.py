"""The self-contained pinner builds warning-free into a static executable, with musl or glibc."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from deviceplugin import __version__
from deviceplugin.model.pinnercontract import ISOLATE_HELP
from pinner import build
from tests.support.native import PT_INTERP, program_header_types


def test_generated_header_matches_isolate_py() -> None:
    assert build.HEADER.read_text() == build.generate_header(), "run: python -m pinner.build --write-header"


@pytest.mark.parametrize("compiler", ["musl-gcc", "cc"])
def test_builds_static_and_warning_free(compiler: str, tmp_path: Path) -> None:
    if shutil.which(compiler) is None:
        pytest.fail(f"{compiler} is not installed (apt-get install musl-tools / gcc)")
    output = tmp_path / "cmk"
    used, warnings = build.build(output, compilers=(compiler,))
    assert (used, warnings) == (compiler, "")
    assert PT_INTERP not in program_header_types(output)
    result = subprocess.run([str(output), "isolate", "--help"], env={}, capture_output=True, text=True, check=False)
    assert (result.returncode, result.stdout) == (0, ISOLATE_HELP)


def test_no_compiler_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(build.BuildError, match="no C compiler found: install musl-tools"):
        build.build(tmp_path / "cmk", compilers=("no-such-cc",))
    assert not (tmp_path / "cmk").exists()


def test_native_top_level_names_its_two_commands(native_cmk: Path) -> None:
    none = subprocess.run([str(native_cmk)], capture_output=True, text=True, check=False)
    other = subprocess.run([str(native_cmk), "describe"], capture_output=True, text=True, check=False)
    assert (none.returncode, none.stderr) == (
        2, ("cmk: error: missing COMMAND: this self-contained cmk runs 'cmk isolate' (see 'cmk isolate --help') "
        "and 'cmk hook' (see 'cmk hook --help')\n"))
    assert (other.returncode, other.stderr) == (
        2, ("cmk: error: unknown command 'describe': this self-contained cmk runs only 'cmk isolate' and 'cmk hook'; "
        "the other commands come with the cmk-deviceplugin package\n"))


def test_the_static_pinner_names_the_same_release_as_the_package(tmp_path: Path) -> None:
    """A pinner found on a node (``/opt/bin/cmk --version``) says which release put it there, as ``cmk --version`` does."""
    output = tmp_path / "cmk"
    build.build(output)
    package = subprocess.run([sys.executable, "-m", "deviceplugin", "--version"], capture_output=True, text=True,
                             check=True).stdout
    assert package == f"cmk {__version__}\n"
    for flag in ("--version", "-V"):
        shown = subprocess.run([str(output), flag], env={}, capture_output=True, text=True, check=False)
        assert (shown.returncode, shown.stdout, shown.stderr) == (0, package, "")
