"""The CDI spec: a pure value from the pools and the hook's host path, written atomically, never removed by the daemon."""

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
from deviceplugin.model import cdispec
from deviceplugin.model import hookcontract as hook
from deviceplugin.model.answers import allocate_answer
from deviceplugin.model.cdispec import cdi_device_names, kept_cpus
from deviceplugin.model.cpulist import format_cpu_list, parse_cpu_list
from deviceplugin.model.devices import DeviceTree, device_tree
from deviceplugin.model.plan import (
    RESOURCE_NAMES,
    Mode,
    PlanOptions,
    Pool,
    SlotScope,
    plan_pools,
)
from deviceplugin.model.topology import build_topology
from tests.support.topologies import fixture_copy

HOOK = "/opt/bin/cmk"
SHARED = {"shared": frozenset({1})}


def hook_edit(cpus: str, *marks: str) -> dict[str, object]:
    return {"env": ["CMK_CDI_CONFINED=1"],
            "hooks": [{"hookName": "createRuntime", "path": HOOK, "args": ["cmk", "hook", f"--cpus={cpus}", *marks],
                       "timeout": 10}]}


def test_each_device_carries_its_own_cpus_in_its_own_hook() -> None:
    assert cdispec.build_spec({"cpus-1.9": frozenset({1, 9}), "shared": frozenset({2, 3, 4, 10})}, HOOK) == {
        "cdiVersion": "0.5.0",
        "kind": "cmk.intel.com/cpus",
        "devices": [
            {"name": "cpus-1.9", "containerEdits": hook_edit("1,9")},
            {"name": "shared", "containerEdits": hook_edit("2-4,10")},
        ],
    }


def test_only_the_devices_named_exclusive_carry_the_mark() -> None:
    spec = cdispec.build_spec({"cpus-1.9": frozenset({1, 9}), "shared": frozenset({2})}, HOOK, exclusive={"cpus-1.9"})
    assert [d["containerEdits"] for d in spec["devices"]] == [hook_edit("1,9", "--exclusive"), hook_edit("2")]


def test_the_exclusive_devices_are_the_cores_of_both_core_pools(tmp_path: Path) -> None:
    topology = discover(*fixture_copy("cmk-xeon_d", tmp_path))
    pools = device_tree(plan_pools(topology, PlanOptions(num_exclusive_cores=2, excl_non_isolcpus=frozenset({4}))),
                        topology.online)
    exclusive = cdispec.exclusive_devices(pools)
    assert len(exclusive) == 3 and all(name.startswith("core-") for name in exclusive)
    assert exclusive == {name for name in cdispec.spec_devices(pools) if name not in ("shared", "infra")}


def test_device_names_are_fully_qualified() -> None:
    assert cdispec.qualified_name("cpus-1.9") == "cmk.intel.com/cpus=cpus-1.9"


def tree(tmp_path: Path) -> DeviceTree:
    """xeon_d's plan: 2 exclusive cores, shared and infra slot pools."""
    topology = discover(*fixture_copy("cmk-xeon_d", tmp_path))
    return device_tree(plan_pools(topology, PlanOptions(num_exclusive_cores=2)), topology.online)


def test_a_core_is_its_own_device_and_a_slot_pool_is_one(tmp_path: Path) -> None:
    pools = tree(tmp_path)
    devices = cdispec.spec_devices(pools)
    cores = {name: cpus for name, cpus in devices.items() if name.startswith("core-")}
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
        cdispec.build_spec(devices, hook_path)


def test_write_creates_the_directory_and_a_readable_json_file(tmp_path: Path) -> None:
    spec = cdispec.build_spec(SHARED, HOOK)
    path = cdi.write_spec(spec, tmp_path / "run" / "cdi")
    assert path == tmp_path / "run" / "cdi" / "cmk.intel.com-cpus.json"
    assert json.loads(path.read_text()) == spec
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


@pytest.mark.parametrize("spec", [
    {"cdiVersion": "0.6.0", "kind": "cmk.intel.com/cpus", "devices": [{"name": "a", "containerEdits": {"env": ["X=1"]}},
                                                                     {"name": "b"}]},
    {"devices": [{"name": "a"}]},
    {"kind": "cmk.intel.com/cpus", "devices": []},
], ids=["devices", "devices-only", "no-devices"])
def test_the_spec_text_is_the_spec_with_a_line_per_device(spec: dict[str, object]) -> None:
    text = cdi.spec_text(spec)
    assert json.loads(text) == spec
    devices = spec["devices"]
    assert isinstance(devices, list)
    lines = [line.removesuffix(",") for line in text.splitlines()]
    assert all(f"    {json.dumps(device)}" in lines for device in devices), "each device whole on its own line"


def test_rewrite_replaces_the_file_whole_and_leaves_no_temp_file(tmp_path: Path) -> None:
    first = cdi.write_spec(cdispec.build_spec(SHARED, HOOK), tmp_path)
    with open(first) as reader:  # a runtime reading at that moment keeps the old, whole file
        cdi.write_spec(cdispec.build_spec({"infra": frozenset({0})}, HOOK), tmp_path)
        assert json.load(reader)["devices"][0]["name"] == "shared"
    assert json.loads(first.read_text())["devices"][0]["name"] == "infra"
    assert os.listdir(tmp_path) == [cdispec.SPEC_FILE_NAME]


def test_a_spec_equal_to_the_one_on_disk_is_left_as_it_is_and_any_difference_rewrites_it(tmp_path: Path) -> None:
    spec = cdispec.build_spec(SHARED, HOOK)
    path = cdi.write_spec(spec, tmp_path)
    inode = path.stat().st_ino
    assert cdi.write_spec(spec, tmp_path, on_disk=cdi.read_spec(tmp_path)) == path
    assert path.stat().st_ino == inode, "the same spec: the file is not replaced"
    other = cdispec.build_spec({"infra": frozenset({0})}, HOOK)
    cdi.write_spec(other, tmp_path, on_disk=cdi.read_spec(tmp_path))
    assert cdi.read_spec(tmp_path) == other and path.stat().st_ino != inode
    path.chmod(0o600)
    inode = path.stat().st_ino
    cdi.write_spec(other, tmp_path, on_disk=cdi.read_spec(tmp_path))
    assert stat.S_IMODE(path.stat().st_mode) == 0o644 and path.stat().st_ino != inode, "a wrong mode is fixed"


def test_an_unwritable_cdi_dir_is_one_line_naming_the_fixes(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(CmkError) as err:
        cdi.write_spec(cdispec.build_spec(SHARED, HOOK), tmp_path / "file" / "cdi")
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


def test_a_device_the_spec_on_disk_had_is_kept_with_its_cpus_and_a_new_one_wins() -> None:
    previous = cdispec.build_spec({"shared": frozenset({3}), "core-n0-p0-c1": frozenset({1})}, HOOK)
    current = {"core-n0-p0-c1": frozenset({1, 9})}
    assert kept_cpus(previous, cdispec.KIND, current) == {"shared": frozenset({3})}
    assert kept_cpus({"kind": "other.io/x", "devices": [{"name": "a"}]}, cdispec.KIND, current) == {}
    old_release = {"kind": cdispec.KIND, "devices": [{"name": "exclusive", "containerEdits": {"env": [cdispec.CONFINED_ENV]}}],
                   "containerEdits": {"hooks": [{"hookName": "createRuntime", "path": HOOK, "args": list(hook.ARGS)}]}}
    assert kept_cpus(old_release, cdispec.KIND, current) == {}  # its CPUs were only in the env: stays unresolvable
    assert kept_cpus(None, cdispec.KIND, current) == {}


@pytest.mark.parametrize(("device", "cpus"), [
    ({"name": "two-entries", "containerEdits": {"hooks": [
        {"path": "/a", "args": [*hook.ARGS, "--cpus=1"]}, {"path": "/b", "args": [*hook.ARGS, "--cpus=2", "--x"]}]}},
     {1, 2}),
    ({"name": "not-cmk-hook", "containerEdits": {"hooks": [{"path": "/bin/sh", "args": ["sh", "--cpus=1"]}]}}, None),
    ({"name": "empty-list", "containerEdits": {"hooks": [{"args": [*hook.ARGS, "--cpus="]}]}}, None),
    ({"name": "junk-list", "containerEdits": {"hooks": [{"args": [*hook.ARGS, "--cpus=1-x"]}]}}, None),
    ({"name": "-bad-name", "containerEdits": {"hooks": [{"args": [*hook.ARGS, "--cpus=1"]}]}}, None),
    ({"name": 7, "containerEdits": {"hooks": [{"args": [*hook.ARGS, "--cpus=1"]}]}}, None),
    ({"name": "hooks-not-a-list", "containerEdits": {"hooks": {"args": [*hook.ARGS, "--cpus=1"]}}}, None),
])
def test_only_a_cmk_hook_cpu_list_that_parses_keeps_a_device(device: dict[str, object], cpus: set[int] | None) -> None:
    kept = kept_cpus({"kind": cdispec.KIND, "devices": [device]}, cdispec.KIND, {})
    assert kept == ({} if cpus is None else {device["name"]: frozenset(cpus)})


def test_read_spec_returns_what_write_spec_wrote_and_none_for_junk(tmp_path: Path) -> None:
    spec = cdispec.build_spec(SHARED, HOOK)
    cdi.write_spec(spec, tmp_path)
    assert cdi.read_spec(tmp_path) == spec
    (tmp_path / cdispec.SPEC_FILE_NAME).write_text("{not json")
    assert cdi.read_spec(tmp_path) is None
    assert cdi.read_spec(tmp_path / "missing") is None
    (tmp_path / cdispec.SPEC_FILE_NAME).unlink()
    os.mkfifo(tmp_path / cdispec.SPEC_FILE_NAME)  # never opened for writing: a blocking read would hang
    assert cdi.read_spec(tmp_path) is None


def test_numa_local_slots_name_their_own_nodes_device_whose_hook_has_that_nodes_cpus() -> None:
    node = {cpu: (cpu % 8) // 4 for cpu in range(16)}  # two nodes, cores (i, i+8), cores 0-3 on node 0
    topology = build_topology([(i, i + 8) for i in range(8)], node_of=node, package_of=node,
                              isolated=[*range(6), *range(8, 14)])
    plan = plan_pools(topology, PlanOptions(num_exclusive_cores=2, num_shared_cores=2, shared_mode=Mode.SPREAD,
                                            slot_scope=SlotScope.NUMA_NODE))
    shared = device_tree(plan, topology.online)[RESOURCE_NAMES[Pool.SHARED]]
    on_node = {n: frozenset(cpu for core in plan.pools[Pool.SHARED] if core.node == n for cpu in core.cpus)
               for n in (0, 1)}
    assert all(on_node.values())  # spread: the shared pool has a core on each node
    spec = cdispec.build_spec(cdispec.spec_devices({shared.resource: shared}), HOOK)
    hooks = {device["name"]: device["containerEdits"]["hooks"][0]["args"] for device in spec["devices"]}
    assert hooks == {f"shared-n{n}": ["cmk", "hook", f"--cpus={format_cpu_list(on_node[n])}"] for n in (0, 1)}
    for n in (0, 1):
        ids = [i for i in shared.devices if i.startswith(f"shared-n{n}-")][:2]
        answer = allocate_answer(shared, ids, install_dir="/opt/cmk", cdi=True)
        assert answer.cdi_devices == (f"cmk.intel.com/cpus=shared-n{n}",)
        assert parse_cpu_list(answer.envs["CMK_CPUS_SHARED"]) == on_node[n]


def test_unthrottling_is_on_by_default_and_off_by_flag_or_config(tmp_path: Path):
    (tmp_path / "cmk.yaml").write_text("unthrottle-exclusive: false\n")
    parse = build_parser().parse_args
    assert apply_config(parse(["device-plugin"]), {}).unthrottle_exclusive is True
    assert apply_config(parse(["device-plugin", "--no-unthrottle-exclusive"]), {}).unthrottle_exclusive is False
    assert apply_config(parse(["device-plugin"]), load_config(tmp_path / "cmk.yaml")).unthrottle_exclusive is False
