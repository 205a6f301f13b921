"""The node taint that keeps pool pods off a node until its pools are registered, and the patch removing it.

An operator taints a node ``cmk.intel.com/pools-not-ready:NoSchedule`` before the DaemonSet runs
there (README "Deploy"); the daemon removes it once the kubelet holds every pool it serves, as node
agents remove their own not-ready taints (docs/user/deploy.md).
"""

from __future__ import annotations

from typing import Any

POOLS_NOT_READY = "cmk.intel.com/pools-not-ready"


def untaint_patch(taints: list[dict[str, Any]], key: str = POOLS_NOT_READY) -> list[dict[str, Any]] | None:
    """The JSON patch that removes every ``key`` taint from a node whose ``spec.taints`` is ``taints``; None: none there.

    Its ``test`` op makes it conditional on the taints being as read: a taint added or removed by
    someone else meanwhile fails the patch instead of being undone by it (the list is replaced whole).
    """
    kept = [taint for taint in taints if taint.get("key") != key]
    if len(kept) == len(taints):
        return None
    return [{"op": "test", "path": "/spec/taints", "value": taints},
            {"op": "replace", "path": "/spec/taints", "value": kept}]
