"""The kubelet's pod resources API v1 over the stand-in's state: what `cmk describe` reads on a node.

Shapes follow the kubelet: ``List`` gives one ``ContainerDevices`` per
resource and NUMA node (a device on two nodes is listed under both, a device
without topology in an entry without topology); ``GetAllocatableResources``
gives one entry per healthy device and node. ``cpu_ids`` stay empty: with
CPU manager policy ``none`` the kubelet pins nothing itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import grpc

from api.podresources.v1 import podresources_pb2 as pb
from api.podresources.v1 import podresources_pb2_grpc as pb_grpc
from deviceplugin.standin.nodedevices import Device
from deviceplugin.standin.pods import AdmittedPod

_NO_TOPOLOGY = -1


def _topology(node: int) -> pb.TopologyInfo | None:
    return None if node == _NO_TOPOLOGY else pb.TopologyInfo(nodes=[pb.NUMANode(ID=node)])


def container_devices(resource: str, devices: Iterable[Device]) -> list[pb.ContainerDevices]:
    """Group one container's devices of one resource per NUMA node, as ``getContainerDevices`` does."""
    by_node: dict[int, list[str]] = {}
    for device in devices:
        for node in device.numa_nodes or (_NO_TOPOLOGY,):
            by_node.setdefault(node, []).append(device.id)
    return [
        pb.ContainerDevices(resource_name=resource, device_ids=ids, topology=_topology(node))
        for node, ids in sorted(by_node.items())
    ]


def pod_resources(pod: AdmittedPod) -> pb.PodResources:
    return pb.PodResources(
        name=pod.name,
        namespace=pod.namespace,
        containers=[
            pb.ContainerResources(
                name=c.name,
                devices=[entry for r, ds in sorted(c.devices.items()) for entry in container_devices(r, ds)],
            )
            for c in pod.app_containers
        ],
    )


def allocatable_devices(healthy: dict[str, list[Device]]) -> list[pb.ContainerDevices]:
    """One entry per healthy device and NUMA node, as ``containerDevicesFromResourceDeviceInstances`` does."""
    return [
        pb.ContainerDevices(resource_name=resource, device_ids=[device.id], topology=_topology(node))
        for resource, devices in sorted(healthy.items())
        for device in sorted(devices, key=lambda d: d.id)
        if not device.empty_topology  # present but empty: the kubelet lists it under no node, not even "none"
        for node in device.numa_nodes or (_NO_TOPOLOGY,)
    ]


class PodResourcesServicer(pb_grpc.PodResourcesListerServicer):
    """Reads the stand-in through two callables, so it holds no state of its own."""

    def __init__(self, pods: Callable[[], list[AdmittedPod]], healthy: Callable[[], dict[str, list[Device]]]) -> None:
        self._pods = pods
        self._healthy = healthy

    def List(self, request: pb.ListPodResourcesRequest, context: grpc.ServicerContext) -> pb.ListPodResourcesResponse:
        return pb.ListPodResourcesResponse(pod_resources=[pod_resources(p) for p in self._pods()])

    def GetAllocatableResources(
        self, request: pb.AllocatableResourcesRequest, context: grpc.ServicerContext
    ) -> pb.AllocatableResourcesResponse:
        return pb.AllocatableResourcesResponse(devices=allocatable_devices(self._healthy()))

    def Get(self, request: pb.GetPodResourcesRequest, context: grpc.ServicerContext) -> pb.GetPodResourcesResponse:
        for pod in self._pods():
            if pod.name == request.pod_name and pod.namespace == request.pod_namespace:
                return pb.GetPodResourcesResponse(pod_resources=pod_resources(pod))
        context.abort(
            grpc.StatusCode.NOT_FOUND, f"pod {request.pod_name} in namespace {request.pod_namespace} not found"
        )
        raise AssertionError("context.abort raises")
