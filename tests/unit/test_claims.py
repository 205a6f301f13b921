"""Prepared claims from literal device trees: what a claim gets, what it is refused, and the checkpoint's bytes."""

from __future__ import annotations

import pytest

from deviceplugin.model.cdispec import cdi_device_names
from deviceplugin.model.claims import (
    AllocatedDevice,
    ClaimError,
    decode,
    encode,
    prepare,
    published_index,
)
from deviceplugin.model.devices import device_tree
from deviceplugin.model.plan import RESOURCE_NAMES, PlanOptions, Pool, plan_pools
from deviceplugin.model.resourceslices import DRIVER_NAME
from deviceplugin.model.topology import build_topology

TOPOLOGY = build_topology([(i, i + 4) for i in range(4)], isolated=[0, 1, 2, 4, 5, 6])
TREE = device_tree(plan_pools(TOPOLOGY, PlanOptions(num_exclusive_cores=2, num_shared_cores=1)), TOPOLOGY.online)
INDEX = published_index(TREE)
EXCLUSIVE = TREE[RESOURCE_NAMES[Pool.EXCLUSIVE]]
CORE = next(iter(EXCLUSIVE.devices))


def result(device: str, request: str = "cpus", driver: str = DRIVER_NAME, pool: str = "n") -> AllocatedDevice:
    return AllocatedDevice(request, driver, pool, device)


def test_two_requests_on_one_device_give_it_once_with_both_request_names() -> None:
    [device] = prepare({}, "u", "ns/c", [result(CORE, "a"), result(CORE, "b")], INDEX, driver=DRIVER_NAME,
                       pool_name="n")
    assert (device.request_names, device.device_name, device.cdi_device_ids) == (
        ("a", "b"), CORE, cdi_device_names(EXCLUSIVE, [CORE]))


def test_results_of_another_node_pool_are_not_this_nodes_to_give() -> None:
    assert prepare({}, "u", "ns/c", [result(CORE, pool="other-node")], INDEX, driver=DRIVER_NAME, pool_name="n") == ()


def test_a_device_held_by_another_claim_is_refused_naming_that_claim() -> None:
    held = {"u1": prepare({}, "u1", "ns/a", [result(CORE)], INDEX, driver=DRIVER_NAME, pool_name="n")}
    with pytest.raises(ClaimError, match=f"allocated device '{CORE}', which claim u1 holds"):
        prepare(held, "u2", "ns/b", [result(CORE)], INDEX, driver=DRIVER_NAME, pool_name="n")


def test_the_checkpoint_reads_back_what_it_wrote_and_equal_states_write_equal_bytes() -> None:
    state = {uid: prepare({}, uid, "ns/c", [result(device)], INDEX, driver=DRIVER_NAME, pool_name="n")
             for uid, device in zip(("u2", "u1"), EXCLUSIVE.devices, strict=True)}
    assert decode(encode(state), where="f") == state
    assert encode(state) == encode(dict(reversed(state.items())))
    assert decode(None, where="f") == {}


@pytest.mark.parametrize("data", [b"[]", b'{"version": 1}', b'{"version": 1, "claims": {"u": [{"pool": "n"}]}}'])
def test_a_checkpoint_of_another_shape_is_refused_with_the_fix(data: bytes) -> None:
    with pytest.raises(ClaimError, match="state.json is not a prepared-claims checkpoint.*delete it"):
        decode(data, where="state.json")
