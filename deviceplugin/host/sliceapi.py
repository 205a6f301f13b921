"""The node's ResourceSlices on the API server: published (created, replaced, deleted) and removed.

What to write is pure (``model/slicesync.py``); this module lists, writes and counts, as
``k8s.io/dynamic-resource-allocation/resourceslice``'s controller (``resourceslicecontroller.go``) does
for a node-local driver: it lists with the field selector ``spec.nodeName=<node>,spec.driver=<driver>``
(another node's or driver's slices are never touched); the owner is the Node (``v1``/``Node``, its name,
the uid read from ``GET /api/v1/nodes/<node>``) with ``controller: true`` and no ``blockOwnerDeletion``,
so the garbage collector deletes the slices with their Node; obsolete slices go first, deleted with the
listed uid and resourceVersion as preconditions (a 404 is not an error), then updates, then creates.
Where the controller keeps an informer and requeues, this lists once per publish and, on a 409, lists
again and tries once more. Unlike the controller's generated names, ours are ``<node>-cmk-<pool>-<n>``,
so an unchanged slice keeps its name and equal content writes nothing. Why: ``docs/design/dra.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

from deviceplugin.host.kubeapi import CONFLICT, NOT_FOUND, ApiError, KubeApi
from deviceplugin.host.nodeapi import node_path
from deviceplugin.model.resourceslices import DRIVER_NAME
from deviceplugin.model.slicesync import next_generation, slice_changes

SLICES = "/apis/resource.k8s.io/v1/resourceslices"
#: The slices, or a function giving them for a pool generation.
Wanted = Sequence[Mapping[str, Any]] | Callable[[int], Sequence[Mapping[str, Any]]]


@dataclass(frozen=True)
class Published:
    """What a publish wrote: slices created, replaced and deleted, and wanted slices already as wanted."""

    created: int
    updated: int
    deleted: int
    unchanged: int

    @property
    def wrote(self) -> bool:
        return bool(self.created or self.updated or self.deleted)


@dataclass
class _Written:
    created: set[str] = field(default_factory=set)
    updated: set[str] = field(default_factory=set)
    deleted: set[str] = field(default_factory=set)


def owner(api: KubeApi, node_name: str) -> dict[str, Any]:
    """The ownerReference to the node (its uid read from the API server), as the controller writes it."""
    node = api.request("GET", node_path(node_name), what=f"node {node_name}")
    return {"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node["metadata"]["uid"], "controller": True}


def listed(api: KubeApi, node_name: str, driver: str = DRIVER_NAME) -> list[dict[str, Any]]:
    """The node's slices of ``driver``, as the API server has them."""
    query = urlencode({"fieldSelector": f"spec.nodeName={node_name},spec.driver={driver}"})
    answer = api.request("GET", f"{SLICES}?{query}", what=f"resourceslices of node {node_name}")
    return list(answer.get("items") or [])


def _path(resource_slice: Mapping[str, Any]) -> str:
    return f"{SLICES}/{quote(resource_slice['metadata']['name'], safe='')}"


def _delete(api: KubeApi, resource_slice: Mapping[str, Any], preconditions: dict[str, str] | None) -> bool:
    """Delete one slice; False if it was gone already."""
    body = {"kind": "DeleteOptions", "apiVersion": "v1", **({"preconditions": preconditions} if preconditions else {})}
    try:
        api.request("DELETE", _path(resource_slice), body, what=f"resourceslice {resource_slice['metadata']['name']}")
    except ApiError as err:
        if err.status == NOT_FOUND:
            return False
        raise
    return True


def _sync(api: KubeApi, node_name: str, slices: Wanted, reference: Mapping[str, Any], driver: str,
          written: _Written) -> set[str]:
    """One list and its writes; the wanted slices' names."""
    current = listed(api, node_name, driver)
    wanted = slices(next_generation(current)) if callable(slices) else slices
    least = max((int(w["spec"]["pool"]["generation"]) for w in wanted), default=1)
    changes = slice_changes(current, wanted, owner=reference, least_generation=least)
    for old in changes.delete:
        metadata = old["metadata"]
        if _delete(api, old, {"uid": metadata["uid"], "resourceVersion": metadata["resourceVersion"]}):
            written.deleted.add(metadata["name"])
    for new in changes.update:
        api.request("PUT", _path(new), new, what=f"resourceslice {new['metadata']['name']}")
        written.updated.add(new["metadata"]["name"])
    for new in changes.create:
        api.request("POST", SLICES, new, what=f"resourceslice {new['metadata']['name']}")
        written.created.add(new["metadata"]["name"])
    return {w["metadata"]["name"] for w in wanted}


def publish(api: KubeApi, node_name: str, slices: Wanted, *, reference: Mapping[str, Any] | None = None,
            driver: str = DRIVER_NAME) -> Published:
    """Make the node's slices of ``driver`` on the API server exactly ``slices`` (``resource_slices``' manifests).

    ``slices`` may also be a function of the generation (``partial(resource_slices, ...)``), called
    with the one after the highest listed. Each slice gets ``reference`` (the Node's ownerReference;
    read with :func:`owner` when not given). The pool generation is the publisher's
    (``model/slicesync.py``): the slices' own is the least a write uses. Raises
    :class:`~deviceplugin.host.kubeapi.ApiError`; a 409 is retried once.
    """
    reference = reference if reference is not None else owner(api, node_name)
    written = _Written()
    try:
        names = _sync(api, node_name, slices, reference, driver, written)
    except ApiError as err:
        if err.status != CONFLICT:
            raise
        names = _sync(api, node_name, slices, reference, driver, written)  # listed again: the other writer's change is seen
    return Published(created=len(written.created), updated=len(written.updated), deleted=len(written.deleted),
                     unchanged=len(names - written.created - written.updated))


def delete_all(api: KubeApi, node_name: str, driver: str = DRIVER_NAME) -> int:
    """Delete every slice of ``driver`` on the node (uninstall; the node leaving DRA mode); how many went."""
    return sum(_delete(api, old, None) for old in listed(api, node_name, driver))
