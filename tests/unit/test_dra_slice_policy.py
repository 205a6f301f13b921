"""deploy/admission's DRA policy, evaluated by the CEL harness: cmk-system's service accounts may create, update
and delete only the ResourceSlices of the node their token names and of the driver cpu.cmk.intel.com.

The RBAC beside it grants what the daemon's DRA mode calls and no more; the policy is what holds each
daemon to its own node.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from deviceplugin.model.resourceslices import DRIVER_NAME
from tests.support.admission import render, validate

pytestmark = pytest.mark.unit

DAEMON = {"username": "system:serviceaccount:cmk-system:cmk-deviceplugin-large",
          "groups": ["system:serviceaccounts", "system:serviceaccounts:cmk-system", "system:authenticated"],
          "extra": {"authentication.kubernetes.io/node-name": ["n1"]}}
ONLY_ITS_NODE = "the cmk daemon may write only the ResourceSlices of the node its pod runs on"
ONLY_ITS_DRIVER = "the cmk daemon may write only ResourceSlices of its driver cpu.cmk.intel.com"


def named(kind: str, name: str) -> dict[str, Any]:
    (found,) = [o for o in render("admission") if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def resource_slice(node: str | None = "n1", driver: str = DRIVER_NAME, **placement: Any) -> dict[str, Any]:
    """A slice as the API server holds it: spec.nodeName for one node, else ``placement`` (allNodes, nodeSelector)."""
    spec: dict[str, Any] = {"driver": driver, "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                            "devices": [], **placement}
    if node is not None:
        spec["nodeName"] = node
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-cpu.cmk.intel.com-x"}, "spec": spec}


def verdict(operation: str, new: dict[str, Any] | None, old: dict[str, Any] | None,
            user: dict[str, Any] = DAEMON) -> list[str]:
    policy = named("ValidatingAdmissionPolicy", "cmk-deviceplugin-dra")
    name = (new or old or {})["metadata"]["name"]
    return validate(policy, {"object": new, "oldObject": old,
                             "request": {"operation": operation, "name": name, "userInfo": user}})


def test_the_daemon_creates_updates_and_deletes_its_own_nodes_slices() -> None:
    assert verdict("CREATE", resource_slice(), None) == []
    assert verdict("UPDATE", resource_slice(), resource_slice()) == []
    assert verdict("DELETE", None, resource_slice()) == []


@pytest.mark.parametrize("operation", ["CREATE", "UPDATE", "DELETE"])
def test_another_nodes_slice_is_refused(operation: str) -> None:
    other = resource_slice("n2")
    new, old = {"CREATE": (other, None), "UPDATE": (other, other), "DELETE": (None, other)}[operation]
    assert verdict(operation, new, old) == [ONLY_ITS_NODE]


def test_an_update_moving_a_slice_to_or_from_another_node_is_refused() -> None:
    assert verdict("UPDATE", resource_slice("n2"), resource_slice()) == [ONLY_ITS_NODE]
    assert verdict("UPDATE", resource_slice(), resource_slice("n2")) == [ONLY_ITS_NODE]


def test_another_drivers_slice_is_refused_on_its_own_node_too() -> None:
    theirs = resource_slice(driver="gpu.example.com")
    assert verdict("CREATE", theirs, None) == [ONLY_ITS_DRIVER]
    assert verdict("DELETE", None, theirs) == [ONLY_ITS_DRIVER]
    assert verdict("UPDATE", resource_slice(), theirs) == [ONLY_ITS_DRIVER]


@pytest.mark.parametrize("placement", [
    {"allNodes": True},
    {"nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}},
])
def test_a_slice_for_several_nodes_is_refused(placement: dict[str, Any]) -> None:
    assert verdict("CREATE", resource_slice(None, **placement), None) == [ONLY_ITS_NODE]


def test_a_token_without_a_node_is_refused() -> None:
    user = copy.deepcopy(DAEMON)
    del user["extra"]["authentication.kubernetes.io/node-name"]
    assert verdict("CREATE", resource_slice(), None, user) == [ONLY_ITS_NODE]
    assert verdict("DELETE", None, resource_slice(), user) == [ONLY_ITS_NODE]


def test_anyone_outside_cmk_system_is_not_this_policys_business() -> None:
    kubelet = {"username": "system:node:n2", "groups": ["system:nodes", "system:authenticated"], "extra": {}}
    assert verdict("DELETE", None, resource_slice(), kubelet) == []


def test_the_policy_sees_every_write_the_role_grants_and_the_binding_names_its_grantees() -> None:
    role = named("ClusterRole", "cmk-deviceplugin-dra")
    rules = {resource: set(rule["verbs"]) for rule in role["rules"] for resource in rule["resources"]}
    assert rules == {"resourceslices": {"get", "list", "watch", "create", "update", "delete"},
                     "resourceclaims": {"get"}}
    (constraint,) = named("ValidatingAdmissionPolicy", "cmk-deviceplugin-dra")["spec"]["matchConstraints"]["resourceRules"]
    writes = {"create": "CREATE", "update": "UPDATE", "delete": "DELETE"}
    assert set(constraint["operations"]) == {writes[v] for v in rules["resourceslices"] if v in writes}
    (subject,) = named("ClusterRoleBinding", "cmk-deviceplugin-dra")["subjects"]
    assert subject["name"] in DAEMON["groups"]
    assert named("ValidatingAdmissionPolicyBinding", "cmk-deviceplugin-dra")["spec"]["validationActions"] == ["Deny"]
