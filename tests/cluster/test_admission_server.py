"""deploy/admission evaluated by the real API server: the CEL tests' accepted/refused table through
``kubectl apply --dry-run=server``, with the verdict and message the port (tests/support/admission.py) gives
(one of its messages where several node groups deny: see :func:`accepted_answers`).

Each table row names the objects its cluster holds; the policies are the deployed ones, so what
changes between rows is the node groups' ConfigMaps in cmk-system. They are put in place one set
at a time (the API server reads them through an informer: a canary row whose verdict the set
changes is retried until the server has seen the set), and the overlay's own are put back after.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.cluster.deploy import DEPLOY, NAMESPACE, Deployment, render
from tests.cluster.node import Node, wait_for
from tests.support.admission import ACCEPTED, REFUSED, Request, denials, kubectl_error

PARAMS_LABEL = "cmk.intel.com/admission-params=node-group"
CASES: list[tuple[str, dict[str, Any], Callable[[], list[dict[str, Any]]], list[str]]] = [
    *((case, manifest, objects, []) for case, manifest, objects in ACCEPTED), *REFUSED]


def group_configmaps(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == "ConfigMap"
            and o["metadata"].get("labels", {}).get("cmk.intel.com/admission-params") == "node-group"]


def dry_run(node: Node, manifest: dict[str, Any]) -> str:
    """'' if the API server accepts the pod, else the message kubectl prints (without its 'Error from server' lead)."""
    result = node.kubectl("apply", "--dry-run=server", "-f", "-", input=json.dumps(manifest), check=False)
    if result.returncode == 0:
        return ""
    message = result.stderr.strip()
    start = message.find("The pods ")
    return message[start:] if start >= 0 else message


def accepted_answers(manifest: dict[str, Any], messages: list[str]) -> set[str]:
    """What kubectl may print: '' for an accepted pod, else one of the port's denials.

    The API server names one denial. When several node groups' ConfigMaps (the params of one
    binding) each deny, which one it names varies from request to request (seen on kube-apiserver
    v1.36.3: the same pod was refused naming group default, then group large), so any of them is
    the server's verdict; the port lists them sorted by name.
    """
    return {kubectl_error(Request(manifest), m) for m in messages} if messages else {""}


def put_groups(node: Node, configmaps: list[dict[str, Any]]) -> None:
    node.kubectl("-n", NAMESPACE, "delete", "configmap", "-l", PARAMS_LABEL, "--wait=true")
    for configmap in configmaps:
        node.kubectl("apply", "-f", "-", input=json.dumps(configmap))


def seen_by_server(node: Node, previous: list[dict[str, Any]], current: list[dict[str, Any]],
                   rows: list[tuple[str, dict[str, Any], Any, list[str]]]) -> None:
    """Wait until a row whose verdict (by the port) differs between the two sets gets the new one from the server."""
    for _, manifest, _, _ in rows:
        now, before = denials(current, Request(manifest)), denials(previous, Request(manifest))
        if now != before:
            want = accepted_answers(manifest, now)

            def server_agrees(manifest: dict[str, Any] = manifest, want: set[str] = want) -> bool:
                return dry_run(node, manifest) in want
            wait_for("the API server sees the node groups", server_agrees, 30)
            return
    time.sleep(2)  # no row tells the sets apart: give the informer a moment (the verdicts cannot tell either)


@pytest.fixture(scope="module")
def verdicts(deployed: Deployment) -> Iterator[dict[str, str]]:
    node = deployed.node
    policies = render(DEPLOY / "admission", node)
    current = [*policies, *render(deployed.overlay, node)]
    results: dict[str, str] = {}
    by_set: dict[str, list[tuple[str, dict[str, Any], Any, list[str]]]] = {}
    for row in CASES:
        by_set.setdefault(json.dumps(group_configmaps(row[2]()), sort_keys=True), []).append(row)
    # The API server's RuntimeClass admission refuses a pod naming a class that does not exist, before any
    # policy: the classes the table names exist here (handler runc), so the policy is what judges them.
    classes = sorted({str(row[1]["spec"]["runtimeClassName"]) for row in CASES if "runtimeClassName" in row[1]["spec"]})
    for name in classes:
        node.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                                                           "metadata": {"name": name}, "handler": "runc"}))
    try:
        for key, rows in by_set.items():
            objects = rows[0][2]()
            put_groups(node, json.loads(key))
            seen_by_server(node, current, objects, rows)
            for case, manifest, _, _ in rows:
                results[case] = dry_run(node, manifest)
            current = objects
        yield results
    finally:
        restored = group_configmaps(render(deployed.overlay, node))
        put_groups(node, restored)
        seen_by_server(node, current, [*policies, *restored],
                       [(c, m, o, d) for c, m, o, d in CASES])
        for name in classes:
            node.kubectl("delete", "runtimeclass", name, "--ignore-not-found")


@pytest.mark.parametrize(("case", "manifest", "objects", "messages"), CASES, ids=[row[0] for row in CASES])
def test_the_api_server_gives_the_ports_verdict(verdicts: dict[str, str], case: str, manifest: dict[str, Any],
                                                 objects: Any, messages: list[str]) -> None:
    assert verdicts[case] in accepted_answers(manifest, messages)
