"""Building the package from a fresh clone, editable or not: the pinner is there and setuptools is quiet.

Each build runs setuptools' PEP 517/660 hooks on a copy of the tracked files, as pip does, without
installing anything into this environment.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from deviceplugin.model.pinnercontract import ISOLATE_HELP
from pinner.build import SOURCES

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
    assert {"pinner/bin/cmk", "pinner/native/main.c", "pinner/native/cmk_generated.h"} <= names
    assert {f"pinner/native/{source.name}" for source in SOURCES} <= names
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


def cmk_in(clone: Path, *args: str, path: str = "/usr/bin:/bin") -> subprocess.CompletedProcess[str]:
    """``cmk ARGS`` run from ``clone``'s files alone, as a package without (or with) its built pinner runs."""
    return subprocess.run([sys.executable, "-m", "deviceplugin", *args], cwd=clone,
                          env={"PYTHONPATH": str(clone), "PATH": path, "HOME": str(clone.parent)},
                          capture_output=True, text=True, timeout=300, check=False)


DUMP = ["--sysfs-root", "examples/cmk-xeon_d/sys", "--procfs-root", "examples/cmk-xeon_d/proc", "--usage-window", "0"]


def test_describe_notes_a_pinner_the_build_left_out_and_points_to_the_readme(clone: Path) -> None:
    missing = clone / "pinner/bin/cmk"
    note = (f"note: the self-contained pinner was not built ({missing} is missing, as after a build without a C "
            "compiler), so 'cmk install' cannot put cmk on this node for workloads to run; README.md, section "
            "Install says how to build it")
    table = cmk_in(clone, "describe", *DUMP)
    assert (table.returncode, table.stderr) == (0, "")
    assert note in table.stdout.splitlines()
    assert note.removeprefix("note: ") in json.loads(cmk_in(clone, "describe", "-o", "json", *DUMP).stdout)["plan"]["notes"]
    assert "## Install" in (clone / "README.md").read_text()
    build(clone, "build_editable")  # now the pinner is there: no note
    assert "self-contained pinner" not in cmk_in(clone, "describe", *DUMP).stdout


def test_demo_without_the_pinner_notes_it_and_builds_one_for_the_run(clone: Path) -> None:
    result = cmk_in(clone, "demo")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    step_1 = lines[lines.index("1. Start the device plugin and a kubelet stand-in") + 1]
    assert step_1.startswith(f"  note: the self-contained pinner was not built ({clone / 'pinner/bin/cmk'} is missing")
    assert step_1.endswith("but 'cmk install' will not find it (README.md, section Install says how to build it)")


def test_demo_without_the_pinner_or_a_compiler_is_one_line_pointing_to_the_readme(clone: Path, tmp_path: Path) -> None:
    no_compiler = tmp_path / "bin"
    no_compiler.mkdir()
    result = cmk_in(clone, "demo", path=str(no_compiler))
    assert (result.returncode, result.stderr.count("\n")) == (1, 1), result.stderr
    assert result.stderr.startswith(f"cmk demo: error: the self-contained pinner was not built ({clone / 'pinner/bin/cmk'} "
                                    "is missing, as after a build without a C compiler), and building it for this run "
                                    "failed: no C compiler found")
    assert result.stderr.endswith(" (README.md, section Install)\n")


def install_section_commands() -> list[str]:
    """README's Install commands, as a reader pastes them, the clone line apart (the test copies the tracked files)."""
    readme = (ROOT / "README.md").read_text()
    block = readme.partition("\n## Install\n")[2].partition("\n\n    ")[2].partition("\n\n")[0]
    lines = [line.removeprefix("    ") for line in block.splitlines()]
    assert lines[0] == "git clone REPOSITORY cmk-deviceplugin && cd cmk-deviceplugin"
    return lines[1:]


def shell(clone: Path, script: str, *, path: str) -> subprocess.CompletedProcess[str]:
    """``script`` in bash from the checkout, as a reader's terminal runs it (pip's own settings kept)."""
    env = {k: v for k, v in os.environ.items() if k.startswith(("PIP_", "HTTP", "HTTPS", "NO_PROXY", "http", "https",
                                                                 "no_proxy"))}
    env |= {"PATH": path, "HOME": os.environ.get("HOME", str(clone.parent))}
    return subprocess.run(["/bin/bash", "-ec", script], cwd=clone, env=env, capture_output=True, text=True, timeout=600,
                          check=False)


def test_the_install_sections_commands_install_cmk_and_its_pinner_fix_works_for_the_installed_cmk(
        clone: Path, tmp_path: Path) -> None:
    """README's Install as written: a venv, ``pip install .``; then the trap of a package built without a compiler:
    the command ``cmk install``'s error names, run from the checkout, builds the pinner the installed cmk finds."""
    python = str(Path(sys.executable).parent)  # a python3 of 3.11+ first on PATH, as on the reader's machine
    system = f"{python}:/usr/local/bin:/usr/bin:/bin"
    opt = tmp_path / "opt"
    installed = shell(clone, "\n".join([*install_section_commands(), f"cmk install --install-dir {opt}"]), path=system)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert f"installed {opt / 'cmk'}" in installed.stdout.splitlines()
    assert (clone / ".venv/bin/cmk").is_file() and not (clone / "pinner/bin/cmk").exists()

    # the package again with no compiler on PATH: it comes without its pinner
    no_compiler = tmp_path / "bin"
    no_compiler.mkdir()
    shutil.rmtree(clone / "build")
    bare = shell(clone, ". .venv/bin/activate && pip install -q --no-deps --force-reinstall .", path=str(no_compiler))
    assert bare.returncode == 0, bare.stdout + bare.stderr
    refused = shell(clone, f". .venv/bin/activate && cmk install --install-dir {opt}2", path=system)
    assert refused.returncode == 1 and "self-contained pinner was not built" in refused.stderr, refused.stderr
    fix = refused.stderr.partition("build it with '")[2].partition("'")[0]
    assert fix.startswith("python -m pinner.build --output ") and "README.md, section Install" in refused.stderr
    built = shell(clone, f". .venv/bin/activate && {fix} && cmk install --install-dir {opt}2", path=system)
    assert built.returncode == 0, built.stdout + built.stderr
    assert (opt.parent / "opt2/cmk").is_file() and not (clone / "pinner/bin/cmk").exists()


def test_a_stale_build_directory_never_ships_an_old_pinner(clone: Path, tmp_path: Path) -> None:
    """pip builds in the checkout's build/: a pinner an earlier build left in build/lib must not reach the wheel
    of a build that could not make one (pip then says "not built", and the wheel must agree)."""
    platlib = f"lib.{sysconfig.get_platform()}-{sys.implementation.cache_tag}"  # the wheel is platform-tagged
    stale = clone / "build" / platlib / "pinner/bin/cmk"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"#!/bin/sh\necho an old pinner\n")
    no_compiler = tmp_path / "bin"
    no_compiler.mkdir()
    result = subprocess.run([sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation",
                             "-w", str(tmp_path / "wheels"), "."], cwd=clone, capture_output=True, text=True,
                            env={"PATH": str(no_compiler), "HOME": str(tmp_path)}, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    assert "the self-contained pinner was not built" in result.stdout + result.stderr
    (wheel,) = (tmp_path / "wheels").glob("*.whl")
    assert "pinner/bin/cmk" not in zipfile.ZipFile(wheel).namelist()
