"""How the node tier turns the daemon's CDI spec and an Allocate answer into config.json (pure, no VM)."""

from __future__ import annotations

import pytest

from deviceplugin.host import cdi
from tests.node import oci

BASE = {"process": {"env": ["PATH=/bin", "CMK_CPUS_EXCLUSIVE=9"]}, "mounts": []}


def test_the_daemons_spec_adds_its_hook_once_and_each_named_devices_env():
    spec = cdi.build_spec(["exclusive", "shared", "infra"], "/opt/bin/cmk")
    config = oci.apply_cdi(BASE, [spec], ["cmk.intel.com/cpus=exclusive", "cmk.intel.com/cpus=infra"])
    assert config["hooks"] == {spec["containerEdits"]["hooks"][0]["hookName"]: [
        {"path": "/opt/bin/cmk", "args": ["cmk", "hook"], "timeout": cdi.HOOK_TIMEOUT_SECONDS}]}
    assert config["process"]["env"].count(cdi.CONFINED_ENV) == 1
    assert BASE["process"]["env"] == ["PATH=/bin", "CMK_CPUS_EXCLUSIVE=9"]  # the input is left alone


def test_an_unresolvable_device_fails_like_the_runtime():
    spec = cdi.build_spec(["exclusive"], "/opt/bin/cmk")
    with pytest.raises(ValueError, match="unresolvable CDI devices cmk.intel.com/cpus=shared"):
        oci.apply_cdi(BASE, [spec], ["cmk.intel.com/cpus=shared"])


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
