"""Which container holds which devices: the one module that asks the kubelet's pod resources API.

The kubelet never tells a plugin that devices were freed, so the plugin
keeps no record of assignments; the kubelet's checkpoint is the record, and
pod resources ``List`` is how to read it. ``GetAllocatableResources`` adds
the kubelet's view of health (its healthy devices per resource).

:func:`read_assignments` returns plain values
(:class:`deviceplugin.model.assignments.Assignments`) or
raises :class:`Unavailable` with a one-line reason, so callers (``cmk
describe``, the metrics, the allocation log) decide what "away" means for
them without touching gRPC.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path

import grpc

from api.podresources.v1 import podresources_pb2 as pb
from api.podresources.v1 import podresources_pb2_grpc as pb_grpc
from deviceplugin.errors import os_reason
from deviceplugin.model.assignments import Assignments, Holding

#: Long enough for a busy kubelet on a big node, short enough for a Prometheus scrape (10 s default).
DEFAULT_TIMEOUT = 2.0


class Unavailable(Exception):
    """The pod resources API could not be read; ``str()`` says why in one line."""


#: DRA mode's devices: (driver, device name) -> (the pool's resource name, the device-plugin ID it stands for)
DraDevices = Mapping[tuple[str, str], tuple[str, str]]


def holdings_from(response: pb.ListPodResourcesResponse, resources: Iterable[str] | None = None,
                  dra: DraDevices | None = None) -> tuple[Holding, ...]:
    """Pure: List's one-entry-per-resource-and-NUMA-node shape folded into one Holding per container and resource.

    ``dra``: a container's claim devices of our DRA driver count as its holding of the pool they are
    from, under their device-plugin IDs, so every reader counts the same in either mode.
    """
    wanted = None if resources is None else set(resources)
    holdings = []
    for pod in response.pod_resources:
        for container in pod.containers:
            ids: dict[str, dict[str, None]] = {}
            for entry in container.devices:
                if wanted is None or entry.resource_name in wanted:
                    ids.setdefault(entry.resource_name, {}).update(dict.fromkeys(entry.device_ids))
            for claim in container.dynamic_resources if dra else ():
                for device in claim.claim_resources:
                    found = dra.get((device.driver_name, device.device_name)) if dra else None
                    if found is not None and (wanted is None or found[0] in wanted):
                        ids.setdefault(found[0], {})[found[1]] = None
            holdings += [Holding(pod.namespace, pod.name, container.name, resource, tuple(device_ids))
                         for resource, device_ids in sorted(ids.items())]
    return tuple(holdings)


def allocatable_from(response: pb.AllocatableResourcesResponse) -> dict[str, frozenset[str]]:
    allocatable: dict[str, set[str]] = {}
    for entry in response.devices:
        allocatable.setdefault(entry.resource_name, set()).update(entry.device_ids)
    return {resource: frozenset(ids) for resource, ids in allocatable.items()}


def _check_socket(path: Path) -> None:
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise Unavailable(f"no socket at {path} (is the kubelet running, and the directory mounted?)") from None
    except OSError as err:
        raise Unavailable(f"cannot use {path}: {os_reason(err)}") from None
    if not stat.S_ISSOCK(mode):
        raise Unavailable(f"{path} is not a unix socket")


def _reason(err: grpc.RpcError, path: Path, timeout: float) -> str:
    if err.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
        return f"no answer from {path} within {timeout:g} s"
    return f"{path}: {err.code().name}: {err.details()}"


def read_assignments(socket: Path, *, resources: Iterable[str] | None = None, allocatable: bool = True,
                     timeout: float = DEFAULT_TIMEOUT, dra: DraDevices | None = None) -> Assignments:
    """List (and GetAllocatableResources unless told not to) within ``timeout`` seconds each.

    ``dra``: DRA mode's devices (:func:`holdings_from`); the kubelet's allocatable then names none of
    the pools (it lists device plugins' devices only), so it is left unknown.
    """
    _check_socket(socket)
    with grpc.insecure_channel(f"unix:{socket}") as channel:
        stub = pb_grpc.PodResourcesListerStub(channel)
        try:
            holdings = holdings_from(stub.List(pb.ListPodResourcesRequest(), timeout=timeout), resources, dra)
        except grpc.RpcError as err:
            raise Unavailable(_reason(err, socket, timeout)) from None
        healthy = cpus = None
        if allocatable and dra is None:
            try:
                answer = stub.GetAllocatableResources(pb.AllocatableResourcesRequest(), timeout=timeout)
                healthy, cpus = allocatable_from(answer), frozenset(answer.cpu_ids)
            except grpc.RpcError as err:  # older kubelets or a disabled feature gate: List alone still helps
                if err.code() not in (grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.PERMISSION_DENIED):
                    raise Unavailable(_reason(err, socket, timeout)) from None
    if healthy is not None and resources is not None:
        wanted = set(resources)
        healthy = {r: ids for r, ids in healthy.items() if r in wanted}
    return Assignments(holdings, healthy, cpus)


def kubelet_cpus(socket: Path, *, timeout: float = DEFAULT_TIMEOUT) -> frozenset[int] | None:
    """GetAllocatableResources' ``cpu_ids`` (non-empty only under the static CPU manager policy).

    None when this kubelet does not serve the call; :class:`Unavailable` when the socket cannot be read.
    """
    _check_socket(socket)
    with grpc.insecure_channel(f"unix:{socket}") as channel:
        try:
            answer = pb_grpc.PodResourcesListerStub(channel).GetAllocatableResources(
                pb.AllocatableResourcesRequest(), timeout=timeout)
        except grpc.RpcError as err:
            if err.code() in (grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.PERMISSION_DENIED):
                return None
            raise Unavailable(_reason(err, socket, timeout)) from None
    return frozenset(answer.cpu_ids)
