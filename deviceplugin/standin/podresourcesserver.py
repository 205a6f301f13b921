"""The kubelet's pod resources API v1 over the stand-in's state: what `cmk describe` reads on a node.

Shapes follow the kubelet: ``List`` covers app containers and sidecars (never
plain init containers) and gives one ``ContainerDevices`` per resource and NUMA node (a device on two nodes is listed under both, a device
without topology in an entry without topology); ``GetAllocatableResources``
gives one entry per healthy device and node. ``cpu_ids`` stay empty under
CPU manager policy ``none`` (the kubelet pins nothing itself); under ``static``
GetAllocatableResources lists the CPUs it hands out (online minus reserved),
as ``containerCPUsFromResourceDeviceInstances``' caller does.
"""

from __future__ import annotations

import threading
import time
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
            for c in pod.listed_containers
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


#: The kubelet's limits on the whole pod resources API (``podresources/grpc/ratelimit.go``).
RATE_QPS, RATE_BURST = 100.0, 10
RATE_LIMITED = "rejected by rate limit"


class TokenBucket:
    """``golang.org/x/time/rate``'s Allow: ``burst`` tokens, refilled at ``rate`` per second."""

    def __init__(self, rate: float = RATE_QPS, burst: int = RATE_BURST,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._rate, self._burst, self._clock = rate, burst, clock
        self._tokens, self._last = float(burst), clock()
        self._lock = threading.Lock()

    def allow(self) -> bool:
        with self._lock:
            now = self._clock()
            self._tokens = min(self._burst, self._tokens + (now - self._last) * self._rate)
            self._last = now
            if self._tokens < 1:
                return False
            self._tokens -= 1
            return True


class PodResourcesServicer(pb_grpc.PodResourcesListerServicer):
    """Reads the stand-in through two callables, so it holds no state of its own.

    ``get_enabled`` is the ``KubeletPodResourcesGet`` gate (off 1.27-1.33, on from
    1.34); errors come back with code Unknown, as the kubelet returns plain Go
    errors; beyond the rate limit every method answers ResourceExhausted.
    """

    def __init__(self, pods: Callable[[], list[AdmittedPod]], healthy: Callable[[], dict[str, list[Device]]],
                 *, get_enabled: bool = False, limiter: TokenBucket | None = None,
                 static_cpus: Iterable[int] = ()) -> None:
        self._pods = pods
        self._healthy = healthy
        self._static_cpus = sorted(static_cpus)
        self._get_enabled = get_enabled
        self._limiter = limiter or TokenBucket()

    def _admit(self, context: grpc.ServicerContext) -> None:
        if not self._limiter.allow():
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, RATE_LIMITED)

    def List(self, request: pb.ListPodResourcesRequest, context: grpc.ServicerContext) -> pb.ListPodResourcesResponse:
        self._admit(context)
        return pb.ListPodResourcesResponse(pod_resources=[pod_resources(p) for p in self._pods()])

    def GetAllocatableResources(
        self, request: pb.AllocatableResourcesRequest, context: grpc.ServicerContext
    ) -> pb.AllocatableResourcesResponse:
        self._admit(context)
        return pb.AllocatableResourcesResponse(devices=allocatable_devices(self._healthy()), cpu_ids=self._static_cpus)

    def Get(self, request: pb.GetPodResourcesRequest, context: grpc.ServicerContext) -> pb.GetPodResourcesResponse:
        self._admit(context)
        if not self._get_enabled:
            context.abort(grpc.StatusCode.UNKNOWN, "PodResources API Get method disabled via feature gate")
        for pod in self._pods():
            if pod.name == request.pod_name and pod.namespace == request.pod_namespace:
                return pb.GetPodResourcesResponse(pod_resources=pod_resources(pod))
        context.abort(
            grpc.StatusCode.UNKNOWN, f"pod {request.pod_name} in namespace {request.pod_namespace} not found"
        )
        raise AssertionError("context.abort raises")
