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


def test_the_taint_goes_only_once_the_pools_are_registered_and_a_refusal_is_tried_again(caplog) -> None:
    import logging
    import threading

    from deviceplugin.daemon.untaint import Untaint

    registered = threading.Event()
    done = threading.Event()
    calls: list[bool] = []

    def remove(node: str) -> bool:
        calls.append(registered.is_set())
        if len(calls) == 1:
            raise RuntimeError("403 Forbidden: nodes is forbidden")
        done.set()
        return True

    caplog.set_level(logging.INFO, logger="deviceplugin.daemon.untaint")
    untaint = Untaint("n1", registered.is_set, remove, poll=0.01, retry=0.01)
    untaint.start()
    registered.set()
    assert done.wait(10)
    untaint.stop()
    assert calls == [True, True]
    lines = [(r.event, r.node, r.getMessage()) for r in caplog.records]  # type: ignore[attr-defined]
    assert lines[0][:2] == ("taint_unremoved", "n1")
    assert lines[0][2].startswith(f"cannot remove taint {POOLS_NOT_READY} from node n1: 403 Forbidden")
    assert lines[-1] == ("taint_removed", "n1", f"pools registered: removed taint {POOLS_NOT_READY} from node n1")
