"""The CDI spec: a pure value from the pools and the hook's host path, written atomically, removed on shutdown."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from deviceplugin.cli.commands import build_parser
from deviceplugin.cli.configfile import apply_config, load_config
from deviceplugin.errors import CmkError
from deviceplugin.host import cdi

HOOK = "/opt/bin/cmk"


def test_spec_has_one_device_per_pool_and_one_spec_level_hook() -> None:
    assert cdi.build_spec(["exclusive", "shared"], HOOK) == {
        "cdiVersion": "0.5.0",
        "kind": "cmk.intel.com/cpus",
        "devices": [
            {"name": "exclusive", "containerEdits": {"env": ["CMK_CDI_CONFINED=1"]}},
            {"name": "shared", "containerEdits": {"env": ["CMK_CDI_CONFINED=1"]}},
        ],
        "containerEdits": {
            "hooks": [{"hookName": "createRuntime", "path": HOOK, "args": ["cmk", "hook"], "timeout": 10}]
        },
    }


def test_device_names_are_fully_qualified() -> None:
    assert cdi.device_name("exclusive-non-isolcpus") == "cmk.intel.com/cpus=exclusive-non-isolcpus"


def test_repeated_devices_appear_once_in_first_order() -> None:
    spec = cdi.build_spec(["infra", "shared", "infra"], HOOK)
    assert [d["name"] for d in spec["devices"]] == ["infra", "shared"]


@pytest.mark.parametrize(("devices", "hook_path", "problem"), [
    ([], HOOK, "at least one device"),
    (["shared"], "opt/bin/cmk", "must be absolute"),
])
def test_a_spec_the_runtime_would_refuse_is_never_built(devices: list[str], hook_path: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        cdi.build_spec(devices, hook_path)


def test_write_creates_the_directory_and_a_readable_json_file(tmp_path: Path) -> None:
    spec = cdi.build_spec(["shared"], HOOK)
    path = cdi.write_spec(spec, tmp_path / "run" / "cdi")
    assert path == tmp_path / "run" / "cdi" / "cmk.intel.com-cpus.json"
    assert json.loads(path.read_text()) == spec
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_rewrite_replaces_the_file_whole_and_leaves_no_temp_file(tmp_path: Path) -> None:
    first = cdi.write_spec(cdi.build_spec(["shared"], HOOK), tmp_path)
    with open(first) as reader:  # a runtime reading at that moment keeps the old, whole file
        cdi.write_spec(cdi.build_spec(["infra"], HOOK), tmp_path)
        assert json.load(reader)["devices"][0]["name"] == "shared"
    assert json.loads(first.read_text())["devices"][0]["name"] == "infra"
    assert os.listdir(tmp_path) == [cdi.SPEC_FILE_NAME]


def test_remove_deletes_only_our_file_and_tolerates_its_absence(tmp_path: Path) -> None:
    (tmp_path / "other-vendor.json").write_text("{}")
    cdi.write_spec(cdi.build_spec(["shared"], HOOK), tmp_path)
    cdi.remove_spec(tmp_path)
    cdi.remove_spec(tmp_path)
    assert os.listdir(tmp_path) == ["other-vendor.json"]


def test_an_unwritable_cdi_dir_is_one_line_naming_the_fixes(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(CmkError) as err:
        cdi.write_spec(cdi.build_spec(["shared"], HOOK), tmp_path / "file" / "cdi")
    assert str(err.value) == (
        f"cannot write the CDI spec into {tmp_path}/file/cdi: Not a directory: mount the runtime's CDI directory "
        "writable and name it with --cdi-dir, or run with --no-cdi"
    )


def test_cdi_flags_come_from_the_config_file_too(tmp_path: Path):
    (tmp_path / "cmk.yaml").write_text("cdi: false\ncdi-dir: /etc/cdi\n")
    args = apply_config(build_parser().parse_args(["device-plugin"]), load_config(tmp_path / "cmk.yaml"))
    assert (args.cdi, args.cdi_dir) == (False, Path("/etc/cdi"))
    defaults = apply_config(build_parser().parse_args(["device-plugin"]), {})
    assert (defaults.cdi, defaults.cdi_dir) == (True, Path("/var/run/cdi"))
