"""The daemon's two requests to the API server, over real TLS to a stand-in that answers as the API server does.

What the cluster tier proves on the real API server (the taint removed, the policy's refusal), this
proves in detail: the token and CA of the service account directory, the node's URL, a JSON patch
conditional on the taints as read, and one line naming the API server's refusal.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from deviceplugin.host.nodeapi import NodeApiError, remove_pools_not_ready
from deviceplugin.model.taints import POOLS_NOT_READY

OTHER = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}


class ApiServer(ThreadingHTTPServer):
    node: dict[str, Any]
    seen: list[tuple[str, str, dict[str, str], Any]]
    refuse: bool = False


class Handler(BaseHTTPRequestHandler):
    server: ApiServer

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self.server.seen.append(("GET", self.path, dict(self.headers), None))
        self._answer(200, self.server.node)

    def do_PATCH(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.seen.append(("PATCH", self.path, dict(self.headers), body))
        if self.server.refuse:
            self._answer(422, {"kind": "Status", "message": "ValidatingAdmissionPolicy 'cmk-deviceplugin-untaint' "
                                                            "denied request: the cmk daemon may change only the node its pod runs on"})
            return
        self.server.node["spec"]["taints"] = body[1]["value"]
        self._answer(200, self.server.node)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[ApiServer, Path]]:
    """A TLS server on 127.0.0.1 with a certificate for that address, and a service account directory trusting it."""
    account = tmp_path / "serviceaccount"
    account.mkdir()
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=api",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(tmp_path / "key.pem"),
                    "-out", str(account / "ca.crt")], capture_output=True, check=True)
    (account / "token").write_text("the-token\n")
    server = ApiServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(account / "ca.crt", tmp_path / "key.pem")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    server.node, server.seen = {"metadata": {"name": "n1"}, "spec": {"taints": [OTHER, {"key": POOLS_NOT_READY,
                                                                                        "effect": "NoSchedule"}]}}, []
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(server.server_address[1]))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, account
    server.shutdown()
    server.server_close()


def test_the_taint_goes_by_a_patch_conditional_on_the_taints_as_read(api: tuple[ApiServer, Path]) -> None:
    server, account = api
    assert remove_pools_not_ready("n1", account) is True
    assert server.node["spec"]["taints"] == [OTHER]
    (get, patch) = server.seen
    assert (get[0], get[1], patch[0], patch[1]) == ("GET", "/api/v1/nodes/n1", "PATCH", "/api/v1/nodes/n1")
    assert patch[2]["Content-Type"] == "application/json-patch+json"
    assert get[2]["Authorization"] == patch[2]["Authorization"] == "Bearer the-token"
    assert patch[3][0] == {"op": "test", "path": "/spec/taints", "value": [OTHER, {"key": POOLS_NOT_READY,
                                                                                   "effect": "NoSchedule"}]}


def test_a_node_without_the_taint_is_read_and_left_alone(api: tuple[ApiServer, Path]) -> None:
    server, account = api
    server.node["spec"]["taints"] = [OTHER]
    assert remove_pools_not_ready("n1", account) is False
    assert [s[0] for s in server.seen] == ["GET"]


def test_a_refusal_is_one_line_with_the_api_servers_message(api: tuple[ApiServer, Path]) -> None:
    server, account = api
    server.refuse = True
    with pytest.raises(NodeApiError) as refused:
        remove_pools_not_ready("n1", account)
    assert str(refused.value) == ("PATCH node n1: 422 Unprocessable Entity: ValidatingAdmissionPolicy "
                                  "'cmk-deviceplugin-untaint' denied request: the cmk daemon may change only the node its pod runs on")


def test_a_certificate_the_service_accounts_ca_did_not_sign_is_refused(api: tuple[ApiServer, Path], tmp_path: Path) -> None:
    server, _ = api
    other = tmp_path / "other"
    other.mkdir()
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=x",
                    "-keyout", str(other / "key.pem"), "-out", str(other / "ca.crt")], capture_output=True, check=True)
    (other / "token").write_text("t")
    with pytest.raises(NodeApiError, match="CERTIFICATE_VERIFY_FAILED"):
        remove_pools_not_ready("n1", other)
    assert server.seen == []
