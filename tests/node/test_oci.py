"""How the node tier turns the daemon's CDI spec and an Allocate answer into config.json (pure, no VM)."""

from __future__ import annotations

import json

import pytest

from deviceplugin.host import nodewide
from deviceplugin.model import cdispec
from tests.node import oci

BASE = {"process": {"env": ["PATH=/bin", "CMK_CPUS_EXCLUSIVE=9"]}, "mounts": []}


def test_the_daemons_spec_adds_each_named_devices_hook_and_its_env_once():
    spec = cdispec.build_spec({"core-a": frozenset({2, 3}), "shared": frozenset({4}), "infra": frozenset({0, 1})},
                          "/opt/bin/cmk")
    config = oci.apply_cdi(BASE, [spec], ["cmk.intel.com/cpus=core-a", "cmk.intel.com/cpus=infra"])
    assert config["hooks"] == {cdispec.HOOK_STAGE: [
        {"path": "/opt/bin/cmk", "args": ["cmk", "hook", f"--cpus={cpus}"], "timeout": cdispec.HOOK_TIMEOUT_SECONDS}
        for cpus in ("2-3", "0-1")]}
    assert config["process"]["env"].count(cdispec.CONFINED_ENV) == 1
    assert oci.hook_cpus(config) == {0, 1, 2, 3}  # the hook's CPUs: its entries, not CMK_CPUS_EXCLUSIVE=9
    assert BASE["process"]["env"] == ["PATH=/bin", "CMK_CPUS_EXCLUSIVE=9"]  # the input is left alone


def test_an_unresolvable_device_fails_like_the_runtime():
    spec = cdispec.build_spec({"core-a": frozenset({2, 3})}, "/opt/bin/cmk")
    with pytest.raises(ValueError, match="unresolvable CDI devices cmk.intel.com/cpus=shared"):
        oci.apply_cdi(BASE, [spec], ["cmk.intel.com/cpus=shared"])


def test_the_hooks_cpus_come_only_from_cmk_hook_entries():
    config = {"process": {"env": ["CMK_CPUS_EXCLUSIVE=0-63"]}, "hooks": {
        "createRuntime": [{"path": "/x/other", "args": ["other", "hook", "--cpus=7"]},
                          {"path": "/opt/bin/cmk", "args": ["/opt/bin/cmk", "hook", "--cpus=1-2"]},
                          {"path": "/opt/bin/cmk", "args": ["cmk", "hook", "--cpus=5"]}],
        "prestart": [{"path": "/opt/bin/cmk", "args": ["cmk", "hook", "--cpus=6"]}]}}
    assert oci.hook_cpus(config) == {1, 2, 5}
    assert oci.hook_cpus({"process": {"env": ["CMK_CPUS_EXCLUSIVE=1"]}}) == frozenset()


def test_an_edit_it_does_not_know_is_refused_not_dropped():
    spec = {"kind": "x.com/y", "devices": [{"name": "d", "containerEdits": {"intelRdt": {"closID": "a"}}}]}
    with pytest.raises(ValueError, match=r"\['intelRdt'\]"):
        oci.apply_cdi(BASE, [spec], ["x.com/y=d"])


def test_the_answer_replaces_env_by_name_and_binds_its_mounts():
    config = oci.apply_answer(BASE, {"CMK_CPUS_EXCLUSIVE": "2,3"}, [("/opt/bin", "/host/bin", True)], [],
                              {"a": "b"})
    assert config["process"]["env"] == ["PATH=/bin", "CMK_CPUS_EXCLUSIVE=2,3"]
    assert config["mounts"] == [{"destination": "/opt/bin", "type": "bind", "source": "/host/bin",
                                 "options": ["rbind", "ro"]}]
    assert config["annotations"] == {"a": "b"}


def test_device_nodes_get_the_host_nodes_numbers_and_an_allow_rule():
    config: dict = {}
    oci.apply_edits(config, {"deviceNodes": [{"path": "/dev/null"}]}, lambda path: ("c", 1, 3))
    assert config["linux"]["devices"] == [{"path": "/dev/null", "type": "c", "major": 1, "minor": 3,
                                           "fileMode": 0o666, "uid": 0, "gid": 0}]
    assert config["linux"]["resources"]["devices"] == [
        {"allow": True, "type": "c", "major": 1, "minor": 3, "access": "rwm"}]


def declared(tmp_path, *extra_dirs):
    """The hooks.d declaration `cmk install` writes (with a real binary at its hook path), read back as podman does."""
    binary, record = tmp_path / "cmk", tmp_path / "cmk-infra-cpus"
    binary.write_text("")
    nodewide.write_declaration(tmp_path / "hooks.d", str(binary), str(record))
    return oci.read_hooks_dirs([tmp_path / "hooks.d", *extra_dirs]), binary, record


def test_the_node_wide_declaration_reaches_every_containers_create_runtime_after_its_cdi_hooks(tmp_path):
    declarations, binary, record = declared(tmp_path)
    spec = cdispec.build_spec({"core-a": frozenset({2, 3})}, "/opt/bin/cmk")
    pinned = oci.apply_hooks(oci.apply_cdi(BASE, [spec], ["cmk.intel.com/cpus=core-a"]), declarations)
    ordinary = oci.apply_hooks(BASE, declarations)
    node_wide = {"path": str(binary), "args": ["cmk", "hook", f"--node-wide={record}"],
                 "timeout": nodewide.HOOK_TIMEOUT_SECONDS}
    assert ordinary["hooks"] == {"createRuntime": [node_wide]}
    assert pinned["hooks"]["createRuntime"][1:] == [node_wide]
    assert oci.hook_cpus(pinned) == {2, 3} and oci.hook_cpus(ordinary) == frozenset()  # no --cpus node-wide
    assert "hooks" not in BASE


def test_a_declaration_whose_binary_is_missing_is_skipped_and_a_later_directory_masks_by_name(tmp_path):
    declarations, binary, _ = declared(tmp_path)
    override = tmp_path / "etc"
    override.mkdir()
    (override / nodewide.DECLARATION_NAME).write_text(json.dumps(
        {**declarations[nodewide.DECLARATION_NAME], "stages": ["prestart"]}))
    (override / "notes.txt").write_text("not json")
    masked = oci.read_hooks_dirs([tmp_path / "hooks.d", override, tmp_path / "absent"])
    assert oci.apply_hooks(BASE, masked)["hooks"]["createRuntime"][0]["path"] == str(binary)  # prestart lands there
    binary.unlink()
    assert oci.read_hooks_dirs([tmp_path / "hooks.d"]) == {}


@pytest.mark.parametrize(("when", "annotations", "bind_mounts", "args", "matched"), [
    ({"always": True}, {}, False, ["sh"], True),
    ({"always": False}, {}, False, ["sh"], False),
    ({}, {}, False, ["sh"], False),  # no condition set: no match
    ({"hasBindMounts": True}, {}, True, ["sh"], True),
    ({"hasBindMounts": True}, {}, False, ["sh"], False),
    ({"annotations": {"^io\\.x$": "on"}}, {"io.x": "turned-on"}, False, ["sh"], True),  # searched, not anchored
    ({"annotations": {"^io\\.x$": "on"}}, {"io.x": "off", "io.y": "on"}, False, ["sh"], False),
    ({"commands": ["/sleep$"]}, {}, False, ["/bin/sleep", "1"], True),
    ({"always": True, "commands": ["^nginx"]}, {}, False, ["sh"], False),  # every condition set must hold
])
def test_when_matches_as_containers_common_does(when, annotations, bind_mounts, args, matched):
    declaration = {"version": "1.0.0", "hook": {"path": "/x"}, "when": when, "stages": ["createRuntime"]}
    config = oci.apply_hooks({"process": {"args": args}}, {"a.json": declaration}, annotations, bind_mounts)
    assert bool(config.get("hooks")) is matched


@pytest.mark.parametrize(("change", "message"), [
    ({"version": "0.1.0"}, "unrecognized hook version: '0.1.0'"),
    ({"stages": None}, "missing required property: stages"),
    ({"stages": ["precreate"]}, "unknown stage 'precreate'"),
    ({"hook": {"args": ["x"]}}, "missing required property: hook.path"),
    ({"when": {"always": True, "or": True}}, r"when \['or'\] are not followed"),
    ({"cmds": ["x"]}, r"properties \['cmds'\] are not followed"),
])
def test_a_declaration_it_does_not_follow_is_refused(change, message):
    declaration = {"version": "1.0.0", "hook": {"path": "/x"}, "when": {"always": True}, "stages": ["createRuntime"],
                   **change}
    with pytest.raises(ValueError, match=message):
        oci.apply_hooks(BASE, {"a.json": declaration})
