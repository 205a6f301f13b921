"""Where the DRA plugin reads what the scheduler allocated to a claim: the ResourceClaim on the API server.

The kubelet names a claim by namespace, name and uid. A claim of that name with another uid (or none)
is a new object: the one the kubelet asked for was deleted, and its allocation is not this node's to
prepare. The kubelet plugin library (``k8s.io/dynamic-resource-allocation/kubeletplugin``) refuses such a
claim the same way ("got replaced") before it calls a driver.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

from deviceplugin.host.kubeapi import NOT_FOUND, ApiError, KubeApi
from deviceplugin.model.claims import AllocatedDevice, ClaimError

CLAIMS = "/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}"


def claim_path(namespace: str, name: str) -> str:
    return CLAIMS.format(namespace=quote(namespace, safe=""), name=quote(name, safe=""))


def allocation_results(claim: dict[str, Any], where: str) -> list[AllocatedDevice]:
    """``status.allocation.devices.results[]`` of the claim; :class:`ClaimError` when it has no allocation."""
    allocation = (claim.get("status") or {}).get("allocation")
    if not allocation:
        raise ClaimError(f"claim {where} has no status.allocation: the scheduler has not allocated it, so there "
                         "is nothing to prepare; the kubelet asks again once the pod is scheduled with it")
    try:
        return [AllocatedDevice(request=r["request"], driver=r["driver"], pool=r["pool"], device=r["device"])
                for r in (allocation.get("devices") or {}).get("results") or []]
    except (KeyError, TypeError) as err:
        raise ClaimError(f"claim {where} has an allocation result without {err}: "
                         "not a resource.k8s.io/v1 allocation this driver can read") from None


class ApiClaimSource:
    """A :class:`~deviceplugin.protocol.draplugin.ClaimSource` on the API server, through ``api``."""

    def __init__(self, api: KubeApi) -> None:
        self._api = api

    def allocated(self, namespace: str, name: str, uid: str) -> Sequence[AllocatedDevice]:
        where = f"{namespace}/{name}"
        try:
            claim = self._api.request("GET", claim_path(namespace, name), what=f"resourceclaim {where}")
        except ApiError as err:
            if err.status != NOT_FOUND:
                raise ClaimError(str(err)) from None
            claim = None
        found = None if claim is None else claim.get("metadata", {}).get("uid")
        if found != uid:
            again = "" if found is None else f" and created again (uid {found} now)"
            raise ClaimError(f"claim {where} is not the one the kubelet asked for (uid {uid}): it was deleted{again}; "
                             "delete the pod so that its claim is allocated anew")
        return allocation_results(claim or {}, where)
