"""The API server, for the daemon's write to its own node: the pools-not-ready taint removed.

Two requests through :class:`~deviceplugin.host.kubeapi.KubeApi`: read the node, then a JSON patch
of its taints conditional on the taints as read (``test``, then ``replace``), so a taint someone
else changed meanwhile is not overwritten.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

from deviceplugin.host.kubeapi import (
    SERVICE_ACCOUNT,
    ApiError,
    KubeApi,
    in_cluster,
    status_message,
)
from deviceplugin.model.taints import untaint_patch

#: The name callers knew before the client was shared: the same error.
NodeApiError = ApiError
__all__ = ["SERVICE_ACCOUNT", "NodeApiError", "in_cluster", "node_path", "remove_pools_not_ready", "status_message"]


def node_path(node_name: str) -> str:
    """The node's URL path on the API server."""
    return f"/api/v1/nodes/{quote(node_name, safe='')}"


def remove_pools_not_ready(node_name: str, account: Path = SERVICE_ACCOUNT) -> bool:
    """Remove the node's pools-not-ready taint; False if it had none. Raises :class:`NodeApiError`.

    ``account``: the directory holding the service account's ``token`` and the cluster's ``ca.crt``.
    """
    api, path, what = KubeApi(account), node_path(node_name), f"node {node_name}"
    node = api.request("GET", path, what=what)
    patch = untaint_patch(node.get("spec", {}).get("taints") or [])
    if patch is None:
        return False
    api.request("PATCH", path, patch, content_type="application/json-patch+json", what=what)
    return True
