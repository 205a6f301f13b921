"""The Allocate answer from device IDs alone: env per pool, one shared mount, bad IDs named."""

from __future__ import annotations

import pytest

from deviceplugin.model.answers import DeviceRequestError, Mount, allocate_answer
from deviceplugin.model.devices import device_tree
from deviceplugin.model.plan import RESOURCE_NAMES, PlanOptions, Pool, plan_pools
from deviceplugin.model.shown import named_ids, shown_id, shown_ids
from deviceplugin.model.topology import build_topology

INSTALL = "/opt/cmk/bin"


def tree(offline=()):
    topology = build_topology([(i, i + 8) for i in range(8)], isolated=[*range(5), *range(8, 13)])
    plan = plan_pools(topology, PlanOptions(num_exclusive_cores=4, num_shared_cores=1))
    return device_tree(plan, topology.online - set(offline))


def test_exclusive_env_lists_the_cores_cpus_ascending():
    answer = allocate_answer(tree()[RESOURCE_NAMES[Pool.EXCLUSIVE]], ["core-n0-p0-c2", "core-n0-p0-c0"],
                             install_dir=INSTALL)
    assert answer.envs == {"CMK_CPUS_EXCLUSIVE": "0,2,8,10"}


def test_shared_and_infra_envs_are_the_pools_cpus():
    devices = tree()
    shared = allocate_answer(devices[RESOURCE_NAMES[Pool.SHARED]], ["shared-004"], install_dir=INSTALL)
    infra = allocate_answer(devices[RESOURCE_NAMES[Pool.INFRA]], ["infra-000", "infra-001"],
                            install_dir=INSTALL)
    assert shared.envs == {"CMK_CPUS_SHARED": "4,12"}
    assert infra.envs == {"CMK_CPUS_INFRA": "5,6,7,13,14,15"}


def test_every_pool_mounts_the_pinner_identically_so_merged_answers_never_conflict():
    devices = tree()
    answers = [allocate_answer(pool, [next(iter(pool.devices))], install_dir=INSTALL)
               for pool in devices.values()]
    assert {answer.mounts for answer in answers} == {(Mount("/opt/bin", INSTALL, True),)}
    env_names = [name for answer in answers for name in answer.envs]
    assert len(env_names) == len(set(env_names)) == 3


def test_an_answer_depends_on_the_ids_alone_not_on_what_was_answered_before():
    """Stateless: the kubelet never says when devices are freed, so no earlier answer may leak in."""
    exclusive = tree()[RESOURCE_NAMES[Pool.EXCLUSIVE]]
    expected = {"CMK_CPUS_EXCLUSIVE": "1,9"}
    assert allocate_answer(exclusive, ["core-n0-p0-c1"], install_dir=INSTALL).envs == expected
    assert allocate_answer(exclusive, ["core-n0-p0-c0", "core-n0-p0-c2"], install_dir=INSTALL).envs == \
        {"CMK_CPUS_EXCLUSIVE": "0,2,8,10"}
    again = allocate_answer(tree()[RESOURCE_NAMES[Pool.EXCLUSIVE]], ["core-n0-p0-c1"], install_dir=INSTALL)
    assert again.envs == expected and again.mounts == (Mount("/opt/bin", INSTALL, True),)


def test_unknown_ids_are_named():
    exclusive = tree()[RESOURCE_NAMES[Pool.EXCLUSIVE]]
    with pytest.raises(DeviceRequestError, match=r"unknown device IDs: core-n0-p0-c7, nope"):
        allocate_answer(exclusive, ["core-n0-p0-c0", "nope", "core-n0-p0-c7"], install_dir=INSTALL)


def test_unhealthy_ids_are_named():
    exclusive = tree(offline=[9])[RESOURCE_NAMES[Pool.EXCLUSIVE]]
    with pytest.raises(DeviceRequestError, match=r"unhealthy device IDs .*: core-n0-p0-c1$"):
        allocate_answer(exclusive, ["core-n0-p0-c0", "core-n0-p0-c1"], install_dir=INSTALL)


def test_an_empty_request_is_refused():
    with pytest.raises(DeviceRequestError, match="no device IDs"):
        allocate_answer(tree()[RESOURCE_NAMES[Pool.SHARED]], [], install_dir=INSTALL)


def test_with_cdi_each_core_names_its_own_device_and_slots_their_pools():
    devices = tree()
    exclusive = allocate_answer(devices[RESOURCE_NAMES[Pool.EXCLUSIVE]], ["core-n0-p0-c2", "core-n0-p0-c0"],
                                install_dir=INSTALL, cdi=True)
    shared = allocate_answer(devices[RESOURCE_NAMES[Pool.SHARED]], ["shared-004", "shared-001"],
                             install_dir=INSTALL, cdi=True)
    assert exclusive.cdi_devices == ("cmk.intel.com/cpus=core-n0-p0-c2", "cmk.intel.com/cpus=core-n0-p0-c0")
    assert shared.cdi_devices == ("cmk.intel.com/cpus=shared",)
    assert allocate_answer(devices[RESOURCE_NAMES[Pool.SHARED]], ["shared-004"], install_dir=INSTALL).cdi_devices == ()


def test_an_error_names_the_first_five_distinct_ids_sorted_and_counts_the_rest() -> None:
    assert named_ids(["b", "a", "b"]) == "a, b"
    assert named_ids([f"id-{n}" for n in range(7)] * 2) == "id-0, id-1, id-2, id-3, id-4 and 2 more"
    assert shown_ids(["z" * 64, "y"]) == ("y", f"{'z' * 63}... (64 characters)")
    assert shown_id("x" * 63) == "x" * 63  # the kubelet's longest ID is shown whole
