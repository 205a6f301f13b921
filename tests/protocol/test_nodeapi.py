"""The daemon's two requests to the API server, over real TLS to a stand-in that answers as the API server does.

What the cluster tier proves on the real API server (the taint removed, the policy's refusal), this
proves in detail: the token and CA of the service account directory, the node's URL, a JSON patch
conditional on the taints as read, and one line naming the API server's refusal.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from deviceplugin.host.nodeapi import NodeApiError, remove_pools_not_ready
from deviceplugin.model.taints import POOLS_NOT_READY
from tests.support.apiserver import Served

OTHER = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
NODE = "/api/v1/nodes/n1"


@pytest.fixture
def api(api_server: Served) -> Served:
    """The stand-in holding node n1 with the pools-not-ready taint and another one."""
    api_server.store.put(NODE, {"metadata": {"name": "n1"},
                                "spec": {"taints": [OTHER, {"key": POOLS_NOT_READY, "effect": "NoSchedule"}]}})
    return api_server


def test_the_taint_goes_by_a_patch_conditional_on_the_taints_as_read(api: Served) -> None:
    assert remove_pools_not_ready("n1", api.account) is True
    assert api.store.objects[NODE]["spec"]["taints"] == [OTHER]
    (get, patch) = api.store.seen
    assert (get.method, get.path, patch.method, patch.path) == ("GET", NODE, "PATCH", NODE)
    assert patch.headers["Content-Type"] == "application/json-patch+json"
    assert get.headers["Authorization"] == patch.headers["Authorization"] == "Bearer the-token"
    assert patch.body[0] == {"op": "test", "path": "/spec/taints", "value": [OTHER, {"key": POOLS_NOT_READY,
                                                                                     "effect": "NoSchedule"}]}


def test_a_node_without_the_taint_is_read_and_left_alone(api: Served) -> None:
    api.store.objects[NODE]["spec"]["taints"] = [OTHER]
    assert remove_pools_not_ready("n1", api.account) is False
    assert [s.method for s in api.store.seen] == ["GET"]


def test_a_refusal_is_one_line_with_the_api_servers_message(api: Served) -> None:
    denied = ("ValidatingAdmissionPolicy 'cmk-deviceplugin-untaint' denied request: "
              "the cmk daemon may change only the node its pod runs on")
    api.store.refuse[("PATCH", NODE)] = (422, denied)
    with pytest.raises(NodeApiError) as refused:
        remove_pools_not_ready("n1", api.account)
    assert str(refused.value) == ("PATCH node n1: 422 Unprocessable Entity: ValidatingAdmissionPolicy "
                                  "'cmk-deviceplugin-untaint' denied request: the cmk daemon may change only the node its pod runs on")


def test_a_certificate_the_service_accounts_ca_did_not_sign_is_refused(api: Served, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=x",
                    "-keyout", str(other / "key.pem"), "-out", str(other / "ca.crt")], capture_output=True, check=True)
    (other / "token").write_text("t")
    with pytest.raises(NodeApiError, match="CERTIFICATE_VERIFY_FAILED"):
        remove_pools_not_ready("n1", other)
    assert api.store.seen == []
