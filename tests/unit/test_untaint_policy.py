"""deploy/admission's untaint policy, evaluated by the CEL harness: cmk-system's service accounts may remove
the pools-not-ready taint from the node their token names, and change nothing else on any node.

The cluster tier checks the same policy on the real API server (the daemon's removal goes through, a
label from its account is refused).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from deviceplugin.model.taints import POOLS_NOT_READY
from tests.support.admission import render, validate

pytestmark = pytest.mark.unit

OURS = {"key": POOLS_NOT_READY, "effect": "NoSchedule"}
OTHER = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
DAEMON = {"username": "system:serviceaccount:cmk-system:cmk-deviceplugin",
          "groups": ["system:serviceaccounts", "system:serviceaccounts:cmk-system", "system:authenticated"],
          "extra": {"authentication.kubernetes.io/node-name": ["n1"]}}
ONLY_ITS_NODE = "the cmk daemon may change only the node its pod runs on"
ONLY_THE_TAINT = "the cmk daemon may only remove the taint cmk.intel.com/pools-not-ready"
NOTHING_ELSE = "the cmk daemon may change nothing on a node but its taint cmk.intel.com/pools-not-ready"


def node(name: str = "n1", taints: list[dict[str, str]] | None = None, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
            "spec": {"taints": [OTHER, OURS] if taints is None else taints}}


def verdict(new: dict[str, Any], old: dict[str, Any], user: dict[str, Any] = DAEMON) -> list[str]:
    (policy,) = [o for o in render("admission") if o["kind"] == "ValidatingAdmissionPolicy"
                 and o["metadata"]["name"] == "cmk-deviceplugin-untaint"]
    return validate(policy, {"object": new, "oldObject": old,
                             "request": {"operation": "UPDATE", "name": new["metadata"]["name"], "userInfo": user}})


def test_the_daemon_removes_the_taint_from_its_own_node() -> None:
    assert verdict(node(taints=[OTHER]), node()) == []


def test_the_last_taint_removed_leaves_an_empty_list() -> None:
    assert verdict(node(taints=[]), node(taints=[OURS])) == []


def test_another_node_is_refused() -> None:
    assert verdict(node("n2", taints=[OTHER]), node("n2")) == [ONLY_ITS_NODE]


def test_a_token_without_a_node_is_refused() -> None:
    user = copy.deepcopy(DAEMON)
    del user["extra"]["authentication.kubernetes.io/node-name"]
    assert verdict(node(taints=[OTHER]), node(), user) == [ONLY_ITS_NODE]


@pytest.mark.parametrize(("new", "old"), [
    (node(taints=[OURS]), node()),  # another taint removed
    (node(taints=[OTHER, OURS, {"key": "x", "effect": "NoExecute"}]), node()),  # a taint added
])
def test_any_other_taint_change_is_refused(new: dict[str, Any], old: dict[str, Any]) -> None:
    assert verdict(new, old) == [ONLY_THE_TAINT]


def test_a_label_is_refused_with_the_taint_removed_or_not() -> None:
    assert verdict(node(taints=[OTHER], escaped="yes"), node(taints=[OTHER])) == [NOTHING_ELSE]
    assert verdict(node(taints=[OTHER], escaped="yes"), node()) == [NOTHING_ELSE]


def test_cordoning_is_refused() -> None:
    cordoned = node(taints=[OTHER])
    cordoned["spec"]["unschedulable"] = True
    assert verdict(cordoned, node(taints=[OTHER])) == [NOTHING_ELSE]


def test_anyone_outside_cmk_system_is_not_this_policys_business() -> None:
    admin = {"username": "kubernetes-admin", "groups": ["system:masters"], "extra": {}}
    assert verdict(node("n2", escaped="yes"), node("n2"), admin) == []
