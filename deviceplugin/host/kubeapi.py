"""The daemon's one client of the API server: in-cluster configuration and JSON over HTTPS, standard library only.

Every client's in-cluster configuration reads the same three things, and so does this one: the
server from ``KUBERNETES_SERVICE_HOST``/``PORT``, the cluster's CA from the service account's
``ca.crt``, and its ``token``, read again at every request because the kubelet rotates a projected
token. Why not the ``kubernetes`` client (55 s of image build, 126 MB, 1.6 s of import for a handful
of requests): docs/dev/api-client.md. The callers are ``nodeapi.py`` (the taint), ``sliceapi.py``
(the ResourceSlices) and ``claimapi.py`` (the ResourceClaims).
"""

from __future__ import annotations

import json
import os
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from deviceplugin.errors import CmkError

#: Where the kubelet puts what the pod's projected service account volume holds: token, ca.crt, namespace.
SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TIMEOUT = 10.0
NOT_FOUND, CONFLICT = 404, 409


class ApiError(CmkError):
    """The API server refused or could not be reached: what was asked and why, on one line.

    ``status`` is the HTTP status code (None when no answer came), so a caller tells a missing
    object (404) from a stale one (409) without reading the message.
    """

    def __init__(self, message: str, status: int | None) -> None:
        super().__init__(message)
        self.status = status


def in_cluster(account: Path = SERVICE_ACCOUNT) -> bool:
    """True in a pod that can reach the API server with a token (the DaemonSet's daemon container)."""
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and (account / "token").exists()


def status_message(body: bytes) -> str:
    """The ``message`` of the API server's Status answer, else the answer as it came."""
    text = body.decode(errors="replace").strip()
    try:
        return str(json.loads(text)["message"])
    except (ValueError, KeyError, TypeError):
        return text


class KubeApi:
    """The API server named by the pod's environment, trusted through ``account``'s CA, as ``account``'s token.

    ``account``: the directory holding the service account's ``token`` and the cluster's ``ca.crt``.
    """

    def __init__(self, account: Path = SERVICE_ACCOUNT) -> None:
        host = os.environ.get("KUBERNETES_SERVICE_HOST")
        if not host:
            raise ApiError("KUBERNETES_SERVICE_HOST is not set: the API server is reached only from a pod "
                           "(run the daemon in the DaemonSet)", None)
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        self.server = f"https://{f'[{host}]' if ':' in host else host}:{port}"
        self.account = account
        self._opener: urllib.request.OpenerDirector | None = None

    def _open(self) -> urllib.request.OpenerDirector:
        if self._opener is None:
            context = ssl.create_default_context(cafile=str(self.account / "ca.crt"))
            # no proxy from the environment: the API server is the cluster's own address
            self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}),
                                                       urllib.request.HTTPSHandler(context=context))
        return self._opener

    def request(self, method: str, path: str, body: Any = None, *, content_type: str = "application/json",
                what: str | None = None) -> dict[str, Any]:
        """The JSON answer to ``method path`` (``path`` already URL-encoded); raises :class:`ApiError`.

        ``what`` names the object in the error's line (``node n1``); the path when not given.
        """
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data, headers["Content-Type"] = json.dumps(body).encode(), content_type
        said = what or path
        try:
            # read at every request: the kubelet rotates a projected token
            headers["Authorization"] = f"Bearer {(self.account / 'token').read_text().strip()}"
            opener = self._open()
            with opener.open(urllib.request.Request(self.server + path, data=data, headers=headers, method=method),
                             timeout=TIMEOUT) as answer:
                text = answer.read()
        except urllib.error.HTTPError as err:
            raise ApiError(f"{method} {said}: {err.code} {err.reason}: {status_message(err.read())}", err.code) from None
        except (urllib.error.URLError, OSError, ValueError) as err:
            raise ApiError(f"{method} {said}: {getattr(err, 'reason', err)}", None) from None
        try:
            result: dict[str, Any] = json.loads(text) if text.strip() else {}
        except ValueError:
            raise ApiError(f"{method} {said}: the answer is not JSON: {text[:80]!r}", None) from None
        return result
