"""The API server, for the one write the daemon makes there: its own node's pools-not-ready taint removed.

Through the ``kubernetes`` client and the pod's service account token (in-cluster config); imported
only when a daemon in a pod gets that far, so no other command pays for the client's import.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from deviceplugin.model.taints import untaint_patch

#: Where the kubelet puts the service account token a pod's ``serviceAccountToken`` projection asks for.
TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")


def in_cluster() -> bool:
    """True in a pod that can reach the API server with a token (the DaemonSet's daemon container)."""
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and TOKEN.exists()


def remove_pools_not_ready(node_name: str) -> bool:
    """Remove the node's pools-not-ready taint; False if it had none. Raises the client's errors."""
    from kubernetes import client, config

    config.load_incluster_config()
    api = client.CoreV1Api()
    try:
        node = json.loads(api.read_node(node_name, _preload_content=False).data)
        patch = untaint_patch(node.get("spec", {}).get("taints") or [])
        if patch is None:
            return False
        api.patch_node(node_name, patch)
    except client.ApiException as err:
        raise NodeApiError(f"{err.status} {err.reason}: {_message(err.body)}") from None
    return True


class NodeApiError(Exception):
    """The API server refused or failed a request: status, reason and its message, on one line."""


def _message(body: object) -> str:
    """The ``message`` of a Status body, else the body as it came (bytes decoded)."""
    text = body.decode(errors="replace") if isinstance(body, bytes) else str(body or "")
    try:
        return str(json.loads(text).get("message", text))
    except (ValueError, AttributeError):
        return text.strip()
