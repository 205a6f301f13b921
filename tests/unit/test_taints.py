"""The patch the daemon sends to remove its node's pools-not-ready taint, once its pools are registered."""

from __future__ import annotations

import pytest

from deviceplugin.model.taints import POOLS_NOT_READY, untaint_patch

pytestmark = pytest.mark.unit

OURS = {"key": POOLS_NOT_READY, "effect": "NoSchedule"}
OTHER = {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute", "timeAdded": "2026-12-03T11:00:00Z"}


def test_the_patch_keeps_every_other_taint_and_holds_only_if_the_taints_are_as_read() -> None:
    assert untaint_patch([OTHER, OURS]) == [{"op": "test", "path": "/spec/taints", "value": [OTHER, OURS]},
                                            {"op": "replace", "path": "/spec/taints", "value": [OTHER]}]


def test_every_copy_goes_whatever_its_effect() -> None:
    ours_too = {"key": POOLS_NOT_READY, "value": "x", "effect": "NoExecute"}
    assert untaint_patch([OURS, ours_too])[1]["value"] == []  # type: ignore[index]


@pytest.mark.parametrize("taints", [[], [OTHER]])
def test_a_node_without_the_taint_gets_no_patch(taints: list[dict[str, str]]) -> None:
    assert untaint_patch(taints) is None
