"""``cmk install`` puts the self-contained pinner into the host's install directory."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import pytest

from deviceplugin.errors import CmkError
from deviceplugin.host.install import install_pinner
from pinner.isolate import HELP
from tests.pinner.conftest import ROOT


def cmk(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "deviceplugin", *args], cwd=ROOT, capture_output=True, text=True, check=False
    )


def test_install_creates_the_directory_and_an_executable_copy(native_cmk: Path, tmp_path: Path) -> None:
    install_dir = tmp_path / "opt" / "bin"
    result = cmk("install", "--install-dir", str(install_dir))
    assert (result.returncode, result.stdout, result.stderr) == (0, f"installed {install_dir}/cmk\n", "")
    installed = install_dir / "cmk"
    assert installed.read_bytes() == native_cmk.read_bytes()
    assert stat.S_IMODE(installed.stat().st_mode) == 0o755
    ran = subprocess.run([str(installed), "isolate", "--help"], capture_output=True, text=True, check=False)
    assert (ran.returncode, ran.stdout) == (0, HELP)


def test_install_is_idempotent_and_leaves_no_temp_files(native_cmk: Path, tmp_path: Path) -> None:
    (tmp_path / "cmk").write_text("an older pinner")
    for _ in range(2):
        assert cmk("install", "--install-dir", str(tmp_path)).returncode == 0
    assert [p.name for p in tmp_path.iterdir()] == ["cmk"]
    assert (tmp_path / "cmk").read_bytes() == native_cmk.read_bytes()


def test_install_into_an_impossible_directory_is_one_line(native_cmk: Path, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    target = tmp_path / "file" / "bin"
    result = cmk("install", "--install-dir", str(target))
    assert result.returncode == 1
    assert result.stderr == f"cmk install: error: cannot create the install directory {target}: Not a directory\n"


def test_install_into_a_system_directory_is_refused_before_anything_is_written(native_cmk: Path) -> None:
    result = cmk("install", "--install-dir", "/etc/passwd/bin")
    assert result.returncode == 2
    assert "must not be a system directory" in result.stderr and result.stderr.count("\n") == 1


def test_install_without_a_built_pinner_says_how_to_build_it(tmp_path: Path) -> None:
    with pytest.raises(CmkError, match=r"not built .* 'python -m pinner.build'") as err:
        install_pinner(tmp_path / "missing", tmp_path / "bin")
    assert "\n" not in str(err.value)
    assert not (tmp_path / "bin").exists()
