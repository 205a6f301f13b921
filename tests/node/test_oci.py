"""How the node tier turns the daemon's CDI spec and an Allocate answer into config.json (pure, no VM)."""

from __future__ import annotations

import pytest

from deviceplugin.host import cdi
from tests.node import oci

BASE = {"process": {"env": ["PATH=/bin", "CMK_CPUS_EXCLUSIVE=9"]}, "mounts": []}


def test_the_daemons_spec_adds_each_named_devices_hook_and_its_env_once():
    spec = cdi.build_spec({"core-a": frozenset({2, 3}), "shared": frozenset({4}), "infra": frozenset({0, 1})},
                          "/opt/bin/cmk")
    config = oci.apply_cdi(BASE, [spec], ["cmk.intel.com/cpus=core-a", "cmk.intel.com/cpus=infra"])
    assert config["hooks"] == {cdi.HOOK_STAGE: [
        {"path": "/opt/bin/cmk", "args": ["cmk", "hook", f"--cpus={cpus}"], "timeout": cdi.HOOK_TIMEOUT_SECONDS}
        for cpus in ("2-3", "0-1")]}
    assert config["process"]["env"].count(cdi.CONFINED_ENV) == 1
    assert oci.hook_cpus(config) == {0, 1, 2, 3}  # the hook's CPUs: its entries, not CMK_CPUS_EXCLUSIVE=9
    assert BASE["process"]["env"] == ["PATH=/bin", "CMK_CPUS_EXCLUSIVE=9"]  # the input is left alone


def test_an_unresolvable_device_fails_like_the_runtime():
    spec = cdi.build_spec({"core-a": frozenset({2, 3})}, "/opt/bin/cmk")
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
