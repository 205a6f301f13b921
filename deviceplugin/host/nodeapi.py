"""The API server, for the one write the daemon makes there: its own node's pools-not-ready taint removed.

Two HTTPS requests (read the node, a conditional JSON patch of its taints) with the pod's service
account token and the cluster's CA, as the in-cluster configuration of every client reads them.
Standard library rather than the ``kubernetes`` client: for these two requests the client cost
the image 55 s of build and 126 MB, and the daemon 1.6 s of import and 35 MB (docs/dev/api-client.md).
"""

from __future__ import annotations

import json
import os
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import quote

from deviceplugin.model.taints import untaint_patch

#: Where the kubelet puts what the pod's projected service account volume holds: token, ca.crt, namespace.
SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TIMEOUT = 10.0


class NodeApiError(Exception):
    """The API server refused or could not be reached: what was asked and why, on one line."""


def in_cluster(account: Path = SERVICE_ACCOUNT) -> bool:
    """True in a pod that can reach the API server with a token (the DaemonSet's daemon container)."""
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and (account / "token").exists()


def remove_pools_not_ready(node_name: str, account: Path = SERVICE_ACCOUNT) -> bool:
    """Remove the node's pools-not-ready taint; False if it had none. Raises :class:`NodeApiError`.

    ``account``: the directory holding the service account's ``token`` and the cluster's ``ca.crt``.
    """
    node = _request("GET", node_name, account)
    patch = untaint_patch(node.get("spec", {}).get("taints") or [])
    if patch is None:
        return False
    _request("PATCH", node_name, account, patch)
    return True


def _request(method: str, node_name: str, account: Path, body: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    url = f"https://{f'[{host}]' if ':' in host else host}:{port}/api/v1/nodes/{quote(node_name, safe='')}"
    headers = {"Accept": "application/json",
               # read at every request: the kubelet rotates a projected token
               "Authorization": f"Bearer {(account / 'token').read_text().strip()}"}
    data = None
    if body is not None:
        data, headers["Content-Type"] = json.dumps(body).encode(), "application/json-patch+json"
    context = ssl.create_default_context(cafile=str(account / "ca.crt"))
    # no proxy from the environment: the API server is the cluster's own address
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context))
    try:
        with opener.open(urllib.request.Request(url, data=data, headers=headers, method=method),
                         timeout=TIMEOUT) as answer:
            result: dict[str, Any] = json.load(answer)
            return result
    except urllib.error.HTTPError as err:
        raise NodeApiError(f"{method} node {node_name}: {err.code} {err.reason}: {status_message(err.read())}") from None
    except (urllib.error.URLError, OSError, ValueError) as err:
        raise NodeApiError(f"{method} node {node_name}: {getattr(err, 'reason', err)}") from None


def status_message(body: bytes) -> str:
    """The ``message`` of the API server's Status answer, else the answer as it came."""
    text = body.decode(errors="replace").strip()
    try:
        return str(json.loads(text)["message"])
    except (ValueError, KeyError, TypeError):
        return text
