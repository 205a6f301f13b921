"""The DaemonSet as a real control plane rolls it out on a real node, from the test overlay of deploy/base."""

from __future__ import annotations

from tests.cluster.deploy import (
    DAEMONSET,
    NAMESPACE,
    PRODUCT_PREFIX,
    Deployment,
    moved,
    node_paths,
    overlay_changes,
)


def test_the_daemonset_is_desired_and_ready_on_the_one_node(deployed: Deployment) -> None:
    """A node without CNI would give 0 desired and a "successful" rollout: the numbers are asserted."""
    status = deployed.node.kubectl_json("-n", NAMESPACE, "get", "daemonset", DAEMONSET)["status"]
    assert (status["desiredNumberScheduled"], status["numberReady"], status["numberAvailable"]) == (1, 1, 1)


def test_the_overlay_changes_only_what_an_operator_changes(deployed: Deployment) -> None:
    """Image, pull policy, node-local paths and threads per core; anything else would not be the user's deploy."""
    paths = node_paths(deployed.node)
    changes = overlay_changes(deployed.node, deployed.overlay)
    assert changes
    for where, before, after in changes:
        field = where.rsplit("/", 1)[-1]
        if field == "image":
            assert before.startswith("cmk-deviceplugin:") and after.startswith(PRODUCT_PREFIX), where
        elif field == "imagePullPolicy":
            assert after == "Never", where
        elif where == "ConfigMap/cmk-node-group:/data/threads-per-core":
            assert after == "1", where
        else:
            assert isinstance(before, str) and after == moved(before, paths) != before, (where, before, after)
