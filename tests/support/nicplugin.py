"""A stand-in NIC device plugin: a second NUMA-aware resource for the Topology Manager to align with.

SR-IOV NIC plugins advertise one device per virtual function, each with the
NUMA node of its PCI device, and answer Allocate with the VFs' PCI addresses.
This one does that over real gRPC on a unix socket in the plugin directory,
registering like any plugin; it advertises no preferred allocation, so the
kubelet alone picks its VFs. Node ``None`` sends no TopologyInfo (nil), and
``empty_topology`` sends a present-but-empty one, for the kubelet's two cases.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from concurrent import futures
from pathlib import Path

import grpc

from api.constants import API_VERSION, HEALTHY, KUBELET_SOCKET_NAME
from api.v1beta1 import deviceplugin_pb2 as pb
from api.v1beta1 import deviceplugin_pb2_grpc as pb_grpc

NIC_RESOURCE = "example.com/sriov-vf"
ENV_NAME = "PCIDEVICE_EXAMPLE_COM_SRIOV_VF"


class NicPlugin(pb_grpc.DevicePluginServicer):
    """``vfs``: VF ID -> its NUMA node (None: no TopologyInfo)."""

    def __init__(self, plugin_dir: Path, vfs: Mapping[str, int | None], *, resource: str = NIC_RESOURCE,
                 empty_topology: bool = False) -> None:
        self.plugin_dir = Path(plugin_dir)
        self.resource = resource
        self.socket = self.plugin_dir / f"nic-{resource.rpartition('/')[2]}.sock"
        self._vfs = dict(vfs)
        self._empty = empty_topology
        self._stopped = threading.Event()
        self._server: grpc.Server | None = None
        self.allocations: list[list[str]] = []

    def start(self) -> None:
        """Serve, then register with ``kubelet.sock`` (the kubelet dials back before it answers)."""
        self.socket.unlink(missing_ok=True)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="nic"))
        pb_grpc.add_DevicePluginServicer_to_server(self, server)
        server.add_insecure_port(f"unix:{self.socket}")
        server.start()
        self._server = server
        with grpc.insecure_channel(f"unix:{self.plugin_dir / KUBELET_SOCKET_NAME}") as channel:
            pb_grpc.RegistrationStub(channel).Register(pb.RegisterRequest(
                version=API_VERSION, endpoint=self.socket.name, resource_name=self.resource,
                options=pb.DevicePluginOptions()), timeout=10)

    def stop(self) -> None:
        self._stopped.set()
        if self._server is not None:
            self._server.stop(None).wait()
        self.socket.unlink(missing_ok=True)

    def _topology(self, node: int | None) -> pb.TopologyInfo | None:
        if self._empty:
            return pb.TopologyInfo()
        return None if node is None else pb.TopologyInfo(nodes=[pb.NUMANode(ID=node)])

    def GetDevicePluginOptions(self, request: pb.Empty, context: grpc.ServicerContext) -> pb.DevicePluginOptions:
        return pb.DevicePluginOptions()

    def ListAndWatch(self, request: pb.Empty, context: grpc.ServicerContext) -> Iterator[pb.ListAndWatchResponse]:
        yield pb.ListAndWatchResponse(devices=[pb.Device(ID=vf, health=HEALTHY, topology=self._topology(node))
                                               for vf, node in sorted(self._vfs.items())])
        while not self._stopped.wait(0.1) and context.is_active():
            pass

    def Allocate(self, request: pb.AllocateRequest, context: grpc.ServicerContext) -> pb.AllocateResponse:
        responses = []
        for req in request.container_requests:
            self.allocations.append(list(req.devices_ids))
            responses.append(pb.ContainerAllocateResponse(envs={ENV_NAME: ",".join(sorted(req.devices_ids))}))
        return pb.AllocateResponse(container_responses=responses)
