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
from deviceplugin.host.sysfs import discover
from deviceplugin.model.answers import cdi_device_names
from deviceplugin.model.devices import DeviceTree, device_tree
from deviceplugin.model.plan import PlanOptions, plan_pools
from tests.topologies import fixture_copy

HOOK = "/opt/bin/cmk"
SHARED = {"shared": frozenset({1})}


def hook_edit(cpus: str) -> dict[str, object]:
    return {"env": ["CMK_CDI_CONFINED=1"],
            "hooks": [{"hookName": "createRuntime", "path": HOOK, "args": ["cmk", "hook", f"--cpus={cpus}"],
                       "timeout": 10}]}


def test_each_device_carries_its_own_cpus_in_its_own_hook() -> None:
    assert cdi.build_spec({"cpus-1.9": frozenset({1, 9}), "shared": frozenset({2, 3, 4, 10})}, HOOK) == {
        "cdiVersion": "0.5.0",
        "kind": "cmk.intel.com/cpus",
        "devices": [
            {"name": "cpus-1.9", "containerEdits": hook_edit("1,9")},
            {"name": "shared", "containerEdits": hook_edit("2-4,10")},
        ],
    }


def test_device_names_are_fully_qualified() -> None:
    assert cdi.device_name("cpus-1.9") == "cmk.intel.com/cpus=cpus-1.9"


def tree(tmp_path: Path) -> DeviceTree:
    """xeon_d's plan: 2 exclusive cores, shared and infra slot pools."""
    topology = discover(*fixture_copy("cmk-xeon_d", tmp_path))
    return device_tree(plan_pools(topology, PlanOptions(num_exclusive_cores=2)), topology.online)


def test_a_core_is_its_own_device_and_a_slot_pool_is_one(tmp_path: Path) -> None:
    pools = tree(tmp_path)
    devices = cdi.spec_devices(pools)
    cores = {name: cpus for name, cpus in devices.items() if name.startswith("cpus-")}
    assert len(cores) == 2 and all(len(cpus) == 2 for cpus in cores.values())  # one per core, both threads
    assert sorted(set(devices) - set(cores)) == ["infra", "shared"]
    for pool in pools.values():  # every device ID the kubelet may hold resolves to a device with its CPUs
        for device in pool.devices.values():
            (name,) = cdi_device_names(pool, [device.id])
            assert devices[name.removeprefix("cmk.intel.com/cpus=")] == device.cpus


def test_an_answer_names_each_ids_device_once_in_order(tmp_path: Path) -> None:
    exclusive, shared = (p for p in tree(tmp_path).values() if p.pool.value in ("exclusive", "shared"))
    first, second = exclusive.devices
    assert cdi_device_names(exclusive, [second, first, second]) == (
        f"cmk.intel.com/cpus={second}", f"cmk.intel.com/cpus={first}")
    assert cdi_device_names(shared, list(shared.devices)[:3]) == ("cmk.intel.com/cpus=shared",)


@pytest.mark.parametrize(("devices", "hook_path", "problem"), [
    ({}, HOOK, "at least one device"),
    ({"shared": frozenset({1})}, "opt/bin/cmk", "must be absolute"),
    ({"shared": frozenset()}, HOOK, "needs CPUs"),
])
def test_a_spec_the_runtime_would_refuse_is_never_built(devices: dict[str, frozenset[int]], hook_path: str,
                                                         problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        cdi.build_spec(devices, hook_path)


def test_write_creates_the_directory_and_a_readable_json_file(tmp_path: Path) -> None:
    spec = cdi.build_spec(SHARED, HOOK)
    path = cdi.write_spec(spec, tmp_path / "run" / "cdi")
    assert path == tmp_path / "run" / "cdi" / "cmk.intel.com-cpus.json"
    assert json.loads(path.read_text()) == spec
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_rewrite_replaces_the_file_whole_and_leaves_no_temp_file(tmp_path: Path) -> None:
    first = cdi.write_spec(cdi.build_spec(SHARED, HOOK), tmp_path)
    with open(first) as reader:  # a runtime reading at that moment keeps the old, whole file
        cdi.write_spec(cdi.build_spec({"infra": frozenset({0})}, HOOK), tmp_path)
        assert json.load(reader)["devices"][0]["name"] == "shared"
    assert json.loads(first.read_text())["devices"][0]["name"] == "infra"
    assert os.listdir(tmp_path) == [cdi.SPEC_FILE_NAME]


def test_remove_deletes_only_our_file_and_tolerates_its_absence(tmp_path: Path) -> None:
    (tmp_path / "other-vendor.json").write_text("{}")
    cdi.write_spec(cdi.build_spec(SHARED, HOOK), tmp_path)
    cdi.remove_spec(tmp_path)
    cdi.remove_spec(tmp_path)
    assert os.listdir(tmp_path) == ["other-vendor.json"]


def test_an_unwritable_cdi_dir_is_one_line_naming_the_fixes(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(CmkError) as err:
        cdi.write_spec(cdi.build_spec(SHARED, HOOK), tmp_path / "file" / "cdi")
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
