"""The node's ResourceSlices published to an API server stand-in over real TLS, as the DRA driver keeps them.

The slices are ``resource_slices``' own, of a small two-node machine cut two devices to a slice so
that every pool takes several. What is asserted is what the API server ends up holding and which
writes it was asked for: a republish of equal content asks for none.
"""

from __future__ import annotations

from typing import Any

import pytest

from deviceplugin.host.kubeapi import ApiError, KubeApi
from deviceplugin.host.sliceapi import SLICES, Published, delete_all, publish
from deviceplugin.model.node import plan_node
from deviceplugin.model.plan import PlanOptions
from deviceplugin.model.resourceslices import DRIVER_NAME, resource_slices
from deviceplugin.model.topology import build_topology
from tests.support.apiserver import Seen, Served

NODE = "/api/v1/nodes/n1"
LIST = f"{SLICES}?fieldSelector=spec.nodeName%3Dn1%2Cspec.driver%3Dcpu.cmk.intel.com"


def slices(exclusive: int, generation: int = 1, node_name: str = "n1") -> list[dict[str, Any]]:
    """Node ``node_name``'s slices with ``exclusive`` exclusive cores of 8 (two NUMA nodes), two devices a slice."""
    topology = build_topology([[c, c + 8] for c in range(8)], node_of={c: c % 8 // 4 for c in range(16)})
    tree = plan_node(topology, PlanOptions(num_exclusive_cores=exclusive, num_shared_cores=1,
                                                shared_slots=3, infra_slots=3)).tree
    return resource_slices(tree, frozenset(), node_name=node_name, generation=generation, max_devices=2)


def held(api: Served, node: str = "n1", driver: str = DRIVER_NAME) -> dict[str, dict[str, Any]]:
    """The API server's slices of ``node`` and ``driver``, by name."""
    return {o["metadata"]["name"]: o for path, o in api.store.objects.items() if path.startswith(SLICES + "/")
            and o["spec"]["nodeName"] == node and o["spec"]["driver"] == driver}


def devices(resource_slices: dict[str, dict[str, Any]] | list[dict[str, Any]]) -> dict[str, list[str]]:
    items = resource_slices.values() if isinstance(resource_slices, dict) else resource_slices
    return {s["metadata"]["name"]: [d["name"] for d in s["spec"]["devices"]] for s in items}


@pytest.fixture
def api(api_server: Served) -> Served:
    """The stand-in holding node n1."""
    api_server.store.put(NODE, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
    return api_server


def test_a_first_publish_creates_every_slice_owned_by_the_node(api: Served) -> None:
    wanted = slices(exclusive=4)
    assert len(wanted) >= 4

    published = publish(KubeApi(api.account), "n1", wanted)

    assert published == Published(created=len(wanted), updated=0, deleted=0, unchanged=0)
    found = held(api)
    assert devices(found) == devices(wanted)
    uid = api.store.objects[NODE]["metadata"]["uid"]
    assert {str(s["metadata"]["ownerReferences"]) for s in found.values()} == {
        str([{"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": uid, "controller": True}])}
    assert {s["spec"]["pool"]["generation"] for s in found.values()} == {1}
    assert [(s.method, s.path) for s in api.store.seen[:2]] == [("GET", NODE), ("GET", LIST)]


def test_a_republish_of_equal_content_writes_nothing(api: Served) -> None:
    publish(KubeApi(api.account), "n1", slices(exclusive=4))
    before = api.store.writes()

    published = publish(KubeApi(api.account), "n1", slices(exclusive=4, generation=7))

    assert published == Published(created=0, updated=0, deleted=0, unchanged=len(slices(exclusive=4)))
    assert api.store.writes() == before


def test_a_smaller_device_list_rewrites_the_kept_slices_at_a_new_generation_and_deletes_the_rest(api: Served) -> None:
    publish(KubeApi(api.account), "n1", slices(exclusive=4))
    smaller = slices(exclusive=2)
    gone = set(devices(slices(exclusive=4))) - set(devices(smaller))
    assert gone

    published = publish(KubeApi(api.account), "n1", smaller)

    assert published == Published(created=0, updated=len(smaller), deleted=len(gone), unchanged=0)
    found = held(api)
    assert devices(found) == devices(smaller)
    # one generation for the whole pool, above the old one, so the scheduler never mixes the two lists
    assert {(s["spec"]["pool"]["generation"], s["spec"]["pool"]["resourceSliceCount"]) for s in found.values()} == {
        (2, len(smaller))}


def test_one_changed_slice_is_replaced_alone_at_the_same_generation(api: Served) -> None:
    publish(KubeApi(api.account), "n1", slices(exclusive=4))
    changed = slices(exclusive=4)
    changed[0]["spec"]["devices"][0]["attributes"]["isolcpus"] = {"bool": True}
    name = changed[0]["metadata"]["name"]
    before = len(api.store.writes())

    published = publish(KubeApi(api.account), "n1", changed)

    assert published == Published(created=0, updated=1, deleted=0, unchanged=len(changed) - 1)
    assert api.store.writes()[before:] == [("PUT", f"{SLICES}/{name}")]
    assert held(api)[name]["spec"] == changed[0]["spec"]


def bump_before_first_put(api: Served, times: int) -> list[str]:
    """Another writer changes the slice between our list and our PUT, ``times`` times; returns the paths it changed."""
    changed: list[str] = []

    def before(seen: Seen) -> None:
        if seen.method == "PUT" and len(changed) < times:
            with api.store.lock:
                api.store.put(seen.path, api.store.objects[seen.path])
            changed.append(seen.path)

    api.store.before = before
    return changed


def test_a_conflict_is_listed_again_and_the_write_retried(api: Served) -> None:
    publish(KubeApi(api.account), "n1", slices(exclusive=4))
    changed = bump_before_first_put(api, times=1)
    smaller = slices(exclusive=2)

    publish(KubeApi(api.account), "n1", smaller)

    assert len(changed) == 1
    assert [s.method for s in api.store.seen if s.path == changed[0]].count("PUT") == 2
    assert sum(1 for s in api.store.seen if s.path == LIST) == 3  # one for the first publish, two for the second
    assert devices(held(api)) == devices(smaller)


def test_a_second_conflict_is_the_callers_as_one_line_with_its_status(api: Served) -> None:
    publish(KubeApi(api.account), "n1", slices(exclusive=4))
    bump_before_first_put(api, times=2)

    with pytest.raises(ApiError) as refused:
        publish(KubeApi(api.account), "n1", slices(exclusive=2))

    assert refused.value.status == 409
    assert str(refused.value).startswith("PUT resourceslice n1-cmk-")
    assert "\n" not in str(refused.value)


def test_another_nodes_and_another_drivers_slices_are_left_alone(api: Served) -> None:
    theirs = slices(exclusive=4, node_name="n2")
    other_driver = resource_slices(plan_node(build_topology([[0], [1], [2]]), PlanOptions()).tree, frozenset(),
                                   node_name="n1", generation=1, driver="gpu.example.com")
    for index, resource_slice in enumerate(other_driver):
        resource_slice["metadata"]["name"] = f"n1-gpu-{index}"
    for resource_slice in [*theirs, *other_driver]:
        api.store.put(f"{SLICES}/{resource_slice['metadata']['name']}", resource_slice)
    kept = {path: obj["metadata"]["resourceVersion"] for path, obj in api.store.objects.items()}

    publish(KubeApi(api.account), "n1", slices(exclusive=4))
    publish(KubeApi(api.account), "n1", slices(exclusive=2))
    assert delete_all(KubeApi(api.account), "n1") == len(slices(exclusive=2))

    assert {path: api.store.objects[path]["metadata"]["resourceVersion"] for path in kept} == kept
    assert held(api) == {}


def test_delete_all_removes_the_nodes_slices_and_counts_them(api: Served) -> None:
    publish(KubeApi(api.account), "n1", slices(exclusive=4))

    assert delete_all(KubeApi(api.account), "n1") == len(slices(exclusive=4))
    assert held(api) == {}
    assert delete_all(KubeApi(api.account), "n1") == 0


def test_slices_given_as_a_function_of_the_generation_are_built_for_the_next_one(api: Served) -> None:
    """As the daemon gives them (``partial(resource_slices, ...)``): a restarted daemon does not know the generation."""
    asked: list[int] = []

    def slices_at(generation: int) -> list[dict[str, Any]]:
        asked.append(generation)
        return slices(exclusive=4 if len(asked) < 3 else 2, generation=generation)

    publish(KubeApi(api.account), "n1", slices_at)
    publish(KubeApi(api.account), "n1", slices_at)
    publish(KubeApi(api.account), "n1", slices_at)

    assert asked == [1, 2, 2]
    assert {s["spec"]["pool"]["generation"] for s in held(api).values()} == {2}
    assert devices(held(api)) == devices(slices(exclusive=2))
