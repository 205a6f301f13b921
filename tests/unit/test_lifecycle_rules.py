"""Pure lifecycle rules: the stand-in's replay, gates and re-admission checks; the last good plan file."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from deviceplugin.errors import CmkError
from deviceplugin.host import lastgood
from deviceplugin.model.plan import Mode, PlanOptions, SlotScope
from deviceplugin.standin.cdiresolve import unresolvable
from deviceplugin.standin.lifecycle import (
    VERSIONS,
    feature_gates,
    readmission_error,
    replay,
)
from deviceplugin.standin.runoptions import ContainerAnswer, Mount


@pytest.mark.parametrize(("version", "on"), [("1.28", False), ("1.29", True), ("1.31", True), ("1.36", True)])
def test_the_cdi_gate_defaults_by_version(version, on):
    assert feature_gates(version)["DevicePluginCDIDevices"] is on


@pytest.mark.parametrize(("version", "on"), [("1.28", False), ("1.33", False), ("1.34", True), ("1.36", True)])
def test_the_pod_resources_get_gate_defaults_by_version(version, on):
    assert feature_gates(version)["KubeletPodResourcesGet"] is on


def test_versions_modelled_are_1_28_to_1_36():
    assert VERSIONS[0] == "1.28" and VERSIONS[-1] == "1.36" and len(VERSIONS) == 9
    with pytest.raises(CmkError, match="feature gate 'Nope' is not modelled"):
        feature_gates("1.30", {"Nope": True})


def test_replay_merges_first_wins_in_random_order_and_drops_cdi_with_the_gate_off():
    a = ContainerAnswer(envs={"X": "a"}, mounts=(Mount("/opt/bin", "/host/a"),), cdi_devices=("v/c=a",))
    b = ContainerAnswer(envs={"X": "b"}, cdi_devices=("v/c=b", "v/c=a"))
    rng = random.Random(1)
    winners = {replay("c", [("r/a", a), ("r/b", b)], rng, cdi_enabled=True)[0].envs["X"] for _ in range(30)}
    assert winners == {"a", "b"}
    merged, conflicts = replay("c", [("r/a", a), ("r/b", b)], rng, cdi_enabled=False)
    assert merged.cdi_devices == () and len(conflicts) == 1 and merged.mounts == a.mounts


def test_readmission_errors_are_the_kubelets():
    assert readmission_error("r/x", ["d0"], []) == "no healthy devices present; cannot allocate unhealthy devices r/x"
    assert readmission_error("r/x", ["d0", "d1"], ["d1", "d2"]) == (
        "previously allocated devices are no longer healthy; cannot allocate unhealthy devices r/x")
    assert readmission_error("r/x", ["d1"], ["d1", "d2"]) is None


def test_cdi_names_resolve_against_json_and_yaml_specs_and_skip_broken_ones(tmp_path: Path):
    (tmp_path / "a.json").write_text(json.dumps({"kind": "v.com/c", "devices": [{"name": "one"}]}))
    (tmp_path / "b.yaml").write_text("kind: v.com/d\ndevices:\n  - name: two\n")
    (tmp_path / "broken.json").write_text("{")
    (tmp_path / ".hidden.json").write_text(json.dumps({"kind": "v.com/e", "devices": [{"name": "three"}]}))
    names = ["v.com/c=one", "v.com/d=two", "v.com/e=three", "v.com/c=two"]
    assert unresolvable(names, [tmp_path, tmp_path / "missing"]) == ["v.com/e=three", "v.com/c=two"]


def test_the_last_good_plan_round_trips_and_a_broken_file_is_none(tmp_path: Path):
    options = PlanOptions(num_exclusive_cores=3, exclusive_mode=Mode.SPREAD, excl_non_isolcpus=frozenset({5, 4}),
                          shared_slots=7)
    assert lastgood.load(tmp_path) is None
    lastgood.save(tmp_path, options)
    assert lastgood.load(tmp_path) == options
    lastgood.path_in(tmp_path).write_text('{"plan": {"num_exclusive_cores": 3')
    assert lastgood.load(tmp_path) is None


#: ``cmk-last-good-plan.json`` as the release before the settings table wrote it (``lastgood.to_json``).
WRITTEN_BEFORE = """{
  "plan": {
    "excl_non_isolcpus": [
      4,
      5
    ],
    "exclusive_mode": "spread",
    "infra_slots": 110,
    "num_exclusive_cores": 3,
    "num_shared_cores": null,
    "shared_mode": "packed",
    "shared_slots": 7,
    "slot_scope": "pool"
  }
}
"""


def test_a_last_good_plan_an_earlier_release_wrote_loads_typed_and_is_written_the_same(tmp_path: Path):
    lastgood.path_in(tmp_path).write_text(WRITTEN_BEFORE)
    options = lastgood.load(tmp_path)
    assert options == PlanOptions(num_exclusive_cores=3, exclusive_mode=Mode.SPREAD,
                                  excl_non_isolcpus=frozenset({4, 5}), shared_slots=7)
    # typed, not the JSON string: the plan tells scopes apart by identity, and "pool" is not SlotScope.POOL
    assert options is not None and options.slot_scope is SlotScope.POOL and options.exclusive_mode is Mode.SPREAD
    # and written back the same (a setting added later adds its key; every earlier one stays as it was)
    assert json.loads(lastgood.to_json(options))["plan"].items() >= json.loads(WRITTEN_BEFORE)["plan"].items()


def test_a_last_good_file_missing_a_newer_setting_takes_its_default_and_one_out_of_bounds_is_none(tmp_path: Path):
    written = json.loads(WRITTEN_BEFORE)
    del written["plan"]["slot_scope"]  # as a release before --slot-scope wrote it
    lastgood.path_in(tmp_path).write_text(json.dumps(written))
    loaded = lastgood.load(tmp_path)
    assert loaded is not None and loaded.slot_scope is SlotScope.POOL
    written["plan"]["shared_slots"] = 0  # checked against the declaration, as a flag and a key are
    lastgood.path_in(tmp_path).write_text(json.dumps(written))
    assert lastgood.load(tmp_path) is None
