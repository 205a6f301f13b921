"""The kubelet's connection to one device plugin: dial back, options, ListAndWatch, allocation calls.

The only module of the stand-in that calls a plugin; it turns protobuf into
the plain values of ``nodedevices``/``answers`` and gRPC failures into
:class:`PluginCallError`, so the rest of the stand-in never sees grpc.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc

from api.v1beta1 import deviceplugin_pb2 as pb
from api.v1beta1 import deviceplugin_pb2_grpc as pb_grpc
from deviceplugin.standin.nodedevices import Device
from deviceplugin.standin.runoptions import ContainerAnswer, DeviceNode, Mount


class PluginCallError(Exception):
    """A call to the plugin failed; the message names the call and the gRPC status."""


@dataclass(frozen=True)
class PluginOptions:
    pre_start_required: bool = False
    get_preferred_allocation_available: bool = False

    @classmethod
    def from_pb(cls, message: pb.DevicePluginOptions) -> PluginOptions:
        return cls(message.pre_start_required, message.get_preferred_allocation_available)


def device_from_pb(message: pb.Device) -> Device:
    nodes = tuple(node.ID for node in message.topology.nodes)
    return Device(message.ID, message.health, nodes, empty_topology=message.HasField("topology") and not nodes)


def answer_from_pb(message: pb.ContainerAllocateResponse) -> ContainerAnswer:
    return ContainerAnswer(
        envs=dict(message.envs),
        mounts=tuple(Mount(m.container_path, m.host_path, m.read_only) for m in message.mounts),
        devices=tuple(DeviceNode(d.container_path, d.host_path, d.permissions) for d in message.devices),
        annotations=dict(message.annotations),
        cdi_devices=tuple(c.name for c in message.cdi_devices),
    )


def _describe(call: str, error: grpc.RpcError) -> str:
    code = error.code() if isinstance(error, grpc.Call) else None
    details = error.details() if isinstance(error, grpc.Call) else str(error)
    return f"device plugin {call} rpc failed: {code.name if code else 'error'}: {details}"


class PluginClient:
    """One registration's channel to the plugin at ``<plugin_dir>/<endpoint>``."""

    def __init__(self, resource: str, socket: Path, *, dial_timeout: float, rpc_timeout: float) -> None:
        self.resource = resource
        self.socket = socket
        self._rpc_timeout = rpc_timeout
        # A private subchannel pool: a re-registered plugin must not be reached through the old connection.
        self._channel = grpc.insecure_channel(f"unix://{socket}", options=[("grpc.use_local_subchannel_pool", 1)])
        try:
            grpc.channel_ready_future(self._channel).result(timeout=dial_timeout)
        except grpc.FutureTimeoutError:
            self._channel.close()
            raise PluginCallError(f"cannot dial device plugin at {socket} within {dial_timeout:g} s") from None
        self._stub = pb_grpc.DevicePluginStub(self._channel)

    def get_options(self) -> PluginOptions:
        try:
            reply = self._stub.GetDevicePluginOptions(pb.Empty(), timeout=self._rpc_timeout)
        except grpc.RpcError as error:
            raise PluginCallError("failed to get device plugin options: " + _describe("GetDevicePluginOptions", error)) from None
        return PluginOptions.from_pb(reply)

    def watch(self, on_snapshot: Callable[[list[Device]], None], on_end: Callable[[str], None]) -> threading.Thread:
        """Open ListAndWatch with no deadline, as the kubelet does, and consume it in a daemon thread."""

        def run() -> None:
            reason = "stream closed by the plugin"
            try:
                for message in self._stub.ListAndWatch(pb.Empty()):
                    on_snapshot([device_from_pb(d) for d in message.devices])
            except grpc.RpcError as error:
                reason = _describe("ListAndWatch", error)
            except ValueError as error:  # the channel was closed under the iterator
                reason = f"ListAndWatch ended: {error}"
            on_end(reason)

        thread = threading.Thread(target=run, name=f"listandwatch {self.resource}", daemon=True)
        thread.start()
        return thread

    def preferred(self, available: list[str], must_include: list[str], size: int) -> list[str]:
        request = pb.PreferredAllocationRequest(
            container_requests=[
                pb.ContainerPreferredAllocationRequest(
                    available_deviceIDs=available, must_include_deviceIDs=must_include, allocation_size=size
                )
            ]
        )
        try:
            reply = self._stub.GetPreferredAllocation(request, timeout=self._rpc_timeout)
        except grpc.RpcError as error:
            raise PluginCallError(_describe("GetPreferredAllocation", error)) from None
        return list(reply.container_responses[0].deviceIDs) if reply.container_responses else []

    def allocate(self, ids: Sequence[str]) -> ContainerAnswer:
        request = pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=list(ids))])
        try:
            reply = self._stub.Allocate(request, timeout=self._rpc_timeout)
        except grpc.RpcError as error:
            raise PluginCallError(_describe("Allocate", error)) from None
        if not reply.container_responses:
            raise PluginCallError(f"no containers return in allocation response {reply}")
        return answer_from_pb(reply.container_responses[0])

    def pre_start(self, ids: Sequence[str]) -> None:
        try:
            self._stub.PreStartContainer(pb.PreStartContainerRequest(devices_ids=list(ids)), timeout=self._rpc_timeout)
        except grpc.RpcError as error:
            raise PluginCallError(_describe("PreStartContainer", error)) from None

    def close(self) -> None:
        """Closing the channel cancels the ListAndWatch stream, as a dying kubelet's connections do."""
        self._channel.close()
