"""Building the package from a fresh clone, editable or not: the pinner is there and setuptools is quiet.

Each build runs setuptools' PEP 517/660 hooks on a copy of the tracked files, as pip does, without
installing anything into this environment.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from pinner.contract import ISOLATE_HELP

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.e2e


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    """The tracked files only, as a fresh clone has them (no built pinner)."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in files.decode().split("\0"):
        if name and (ROOT / name).is_file():
            target = tmp_path / "src" / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, target)
    assert not (tmp_path / "src/pinner/bin").exists()
    return tmp_path / "src"


def build(clone: Path, hook: str, *, path: str | None = None) -> tuple[Path, str]:
    """Run ``setuptools.build_meta.<hook>`` in ``clone``; returns (the wheel, everything it printed)."""
    out = clone.parent / "wheels"
    out.mkdir(exist_ok=True)
    env = {"PATH": path if path is not None else "/usr/local/bin:/usr/bin:/bin", "HOME": str(clone.parent)}
    code = "import sys; from setuptools import build_meta; print(getattr(build_meta, sys.argv[1])(sys.argv[2]))"
    result = subprocess.run([sys.executable, "-c", code, hook, str(out)], cwd=clone, env=env, capture_output=True,
                            text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    return out / result.stdout.splitlines()[-1], result.stdout + result.stderr


def test_a_wheel_carries_the_pinner_and_its_sources_without_a_setuptools_warning(clone: Path) -> None:
    wheel, printed = build(clone, "build_wheel")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"pinner/bin/cmk", "pinner/native/cmk.c", "pinner/native/cmk_generated.h"} <= names
    assert "is absent from the `packages` configuration" not in printed
    assert not any("__pycache__" in name for name in names)


def test_an_editable_build_leaves_the_pinner_where_cmk_install_finds_it(clone: Path, tmp_path: Path) -> None:
    build(clone, "build_editable")
    pinner = clone / "pinner/bin/cmk"
    shown = subprocess.run([str(pinner), "isolate", "--help"], capture_output=True, text=True, check=True).stdout
    assert shown == ISOLATE_HELP
    install = subprocess.run([sys.executable, "-m", "deviceplugin", "install", "--install-dir", str(tmp_path / "opt")],
                             cwd=clone, env={"PYTHONPATH": str(clone), "PATH": "/usr/bin:/bin"},
                             capture_output=True, text=True, timeout=60, check=False)
    assert (install.returncode, install.stdout.splitlines()[0]) == (0, f"installed {tmp_path / 'opt/cmk'}"), \
        install.stderr
    assert (tmp_path / "opt/cmk").read_bytes() == pinner.read_bytes()


def test_without_a_compiler_the_build_says_cmk_install_will_fail(clone: Path, tmp_path: Path) -> None:
    no_compiler = tmp_path / "bin"
    no_compiler.mkdir()
    _, printed = build(clone, "build_wheel", path=str(no_compiler))
    assert "warning: the self-contained pinner was not built, so 'cmk install' will fail: no C compiler found" \
        in printed
