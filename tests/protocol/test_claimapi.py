"""The DRA plugin's ClaimSource on the API server: a ResourceClaim's allocation read over real TLS from a stand-in.

The kubelet names the claim by namespace, name and uid; what is asserted is what the plugin is told
(the scheduler's results, as written) and each refusal's one line.
"""

from __future__ import annotations

from typing import Any

import pytest

from deviceplugin.host.claimapi import ApiClaimSource, claim_path
from deviceplugin.host.kubeapi import KubeApi
from deviceplugin.model.claims import AllocatedDevice, ClaimError
from deviceplugin.model.resourceslices import DRIVER_NAME
from tests.support.apiserver import Served

PATH = claim_path("team-a", "pod-1-cores")
RESULTS = [{"request": "cores", "driver": DRIVER_NAME, "pool": "n1", "device": "core-n0-p0-c3"},
           {"request": "nic", "driver": "nic.example.com", "pool": "n1", "device": "eth1"}]


def claim(results: list[dict[str, Any]] | None) -> dict[str, Any]:
    status = {} if results is None else {"allocation": {"devices": {"results": results}}}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "pod-1-cores", "namespace": "team-a"}, "spec": {}, "status": status}


@pytest.fixture
def api(api_server: Served) -> Served:
    """The stand-in holding the allocated claim team-a/pod-1-cores."""
    api_server.store.put(PATH, claim(RESULTS))
    return api_server


def uid(api: Served) -> str:
    return str(api.store.objects[PATH]["metadata"]["uid"])


def test_the_allocation_results_are_read_as_the_scheduler_wrote_them(api: Served) -> None:
    found = ApiClaimSource(KubeApi(api.account)).allocated("team-a", "pod-1-cores", uid(api))

    assert list(found) == [AllocatedDevice("cores", DRIVER_NAME, "n1", "core-n0-p0-c3"),
                           AllocatedDevice("nic", "nic.example.com", "n1", "eth1")]
    assert [(s.method, s.path) for s in api.store.seen] == [
        ("GET", "/apis/resource.k8s.io/v1/namespaces/team-a/resourceclaims/pod-1-cores")]


def test_a_claim_created_again_under_the_same_name_is_refused(api: Served) -> None:
    with pytest.raises(ClaimError) as refused:
        ApiClaimSource(KubeApi(api.account)).allocated("team-a", "pod-1-cores", "old-uid")

    assert str(refused.value) == (f"claim team-a/pod-1-cores is not the one the kubelet asked for (uid old-uid): it was "
                                  f"deleted and created again (uid {uid(api)} now); delete the pod so that its claim "
                                  "is allocated anew")


def test_a_deleted_claim_is_refused(api: Served) -> None:
    del api.store.objects[PATH]

    with pytest.raises(ClaimError, match=r"^claim team-a/pod-1-cores is not the one the kubelet asked for "
                                         r"\(uid u1\): it was deleted; delete the pod"):
        ApiClaimSource(KubeApi(api.account)).allocated("team-a", "pod-1-cores", "u1")


def test_a_claim_without_an_allocation_is_refused(api: Served) -> None:
    api.store.put(PATH, claim(None))

    with pytest.raises(ClaimError, match=r"^claim team-a/pod-1-cores has no status.allocation: the scheduler has not"):
        ApiClaimSource(KubeApi(api.account)).allocated("team-a", "pod-1-cores", uid(api))


def test_a_refusal_of_the_api_server_is_one_line(api: Served) -> None:
    forbidden = ('resourceclaims.resource.k8s.io "pod-1-cores" is forbidden: User "system:serviceaccount:cmk:cmk" '
                 'cannot get resource "resourceclaims" in API group "resource.k8s.io" in the namespace "team-a"')
    api.store.refuse[("GET", PATH)] = (403, forbidden)

    with pytest.raises(ClaimError) as refused:
        ApiClaimSource(KubeApi(api.account)).allocated("team-a", "pod-1-cores", uid(api))

    assert str(refused.value) == f"GET resourceclaim team-a/pod-1-cores: 403 Forbidden: {forbidden}"
