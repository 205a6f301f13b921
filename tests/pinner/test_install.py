"""``cmk install`` puts the self-contained pinner into the host's install directory."""

from __future__ import annotations

import json
import stat
import subprocess
from pathlib import Path

import pytest

from deviceplugin.errors import CmkError
from deviceplugin.host.installedpinner import install_pinner
from deviceplugin.model.pinnercontract import ISOLATE_HELP as HELP
from tests.support.commands import cmk


def test_install_creates_the_directory_and_an_executable_copy(native_cmk: Path, tmp_path: Path) -> None:
    install_dir = tmp_path / "opt" / "bin"
    result = cmk("install", "--install-dir", str(install_dir))
    assert (result.returncode, result.stdout.splitlines()[0], result.stderr) == (0, f"installed {install_dir}/cmk", "")
    installed = install_dir / "cmk"
    assert installed.read_bytes() == native_cmk.read_bytes()
    assert stat.S_IMODE(installed.stat().st_mode) == 0o755
    ran = subprocess.run([str(installed), "isolate", "--help"], capture_output=True, text=True, check=False)
    assert (ran.returncode, ran.stdout) == (0, HELP)


def test_install_is_idempotent_and_leaves_no_temp_files(native_cmk: Path, tmp_path: Path) -> None:
    (tmp_path / "cmk").write_text("an older pinner")
    for _ in range(2):
        assert cmk("install", "--install-dir", str(tmp_path)).returncode == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cmk", "cmk-infra-cpus", "cmk-node-wide.json"]
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


@pytest.mark.parametrize(("hooks_dir", "problem"), [
    ("/etc", "not the system directory '/etc'"),
    ("hooks.d", "must be an absolute host path"),
    ("/etc/containers/oci/hooks.d/", "must be a normalised path"),
    ("/etc/containers/../oci", "must be a normalised path"),
])
def test_install_into_an_unfit_hooks_dir_is_refused_before_anything_is_written(native_cmk: Path, tmp_path: Path,
                                                                                hooks_dir: str, problem: str) -> None:
    result = cmk("install", "--install-dir", str(tmp_path / "bin"), "--hooks-dir", hooks_dir)
    assert result.returncode == 2
    assert problem in result.stderr and result.stderr.count("\n") == 1
    assert not (tmp_path / "bin").exists()


def test_install_without_a_built_pinner_says_how_to_build_it(tmp_path: Path) -> None:
    with pytest.raises(CmkError, match=r"not built .* 'python -m pinner.build --output \S+/missing'") as err:
        install_pinner(tmp_path / "missing", tmp_path / "bin")
    assert "\n" not in str(err.value)
    assert not (tmp_path / "bin").exists()


def test_install_writes_the_node_wide_hook_and_the_infra_record_of_the_plan(native_cmk: Path, tmp_path: Path) -> None:
    """xeon_d isolates 0-3,8-11 for exclusive and shared: infra is the rest, 4-7,12-15 (as cmk describe shows)."""
    from tests.support.topologies import fixture_copy

    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path)
    config = tmp_path / "config.yaml"
    config.write_text(f"num-exclusive-cores: 2\nsysfs-root: {sysfs}\nprocfs-root: {procfs}\n")
    install_dir, hooks_dir = tmp_path / "opt-bin", tmp_path / "hooks.d"
    result = cmk("install", "--install-dir", str(install_dir), "--hooks-dir", str(hooks_dir), "--config", str(config))
    assert (result.returncode, result.stderr) == (0, "")
    record = install_dir / "cmk-infra-cpus"
    assert record.read_text() == "4-7,12-15\n"
    declaration = json.loads((hooks_dir / "cmk-node-wide.json").read_text())
    assert declaration == {"version": "1.0.0", "when": {"always": True}, "stages": ["createRuntime"], "hook": {
        "path": f"{install_dir}/cmk", "args": ["cmk", "hook", f"--node-wide={record}"], "timeout": 10}}
    assert (install_dir / "cmk-node-wide.json").read_text() == (hooks_dir / "cmk-node-wide.json").read_text()
    mtime = record.stat().st_mtime_ns
    again = cmk("install", "--install-dir", str(install_dir), "--config", str(config))
    assert "kept the infra record" in again.stdout and record.stat().st_mtime_ns == mtime  # same plan: not rewritten


def test_install_with_an_impossible_plan_writes_nothing(native_cmk: Path, tmp_path: Path) -> None:
    result = cmk("install", "--install-dir", str(tmp_path / "bin"), "--num-exclusive-cores", "999")
    assert result.returncode == 1 and result.stderr.count("\n") == 1
    assert not (tmp_path / "bin").exists()
