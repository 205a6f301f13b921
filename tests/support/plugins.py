"""Small real device plugins for testing the kubelet stand-in itself."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest

from api.constants import API_VERSION, HEALTHY
from api.v1beta1 import deviceplugin_pb2 as pb
from api.v1beta1 import deviceplugin_pb2_grpc as pb_grpc
from deviceplugin.standin import ContainerSpec, Kubelet, PodSpec
from tests.support.started import StopAfter

R = "example.com/cores"


DeviceRow = tuple[str, str, tuple[int, ...]]


FOUR = [("d0", HEALTHY, (0,)), ("d1", HEALTHY, (0,)), ("d2", HEALTHY, (1,)), ("d3", HEALTHY, (1,))]


class MiniPlugin(pb_grpc.DevicePluginServicer):
    """A device plugin serving one resource; ``calls`` is the ordered log of what happened on the wire."""

    def __init__(
        self,
        plugin_dir: Path,
        *,
        resource: str = R,
        devices: Sequence[DeviceRow] = FOUR,
        preferred: bool = False,
        pre_start: bool = False,
        workers: int = 4,
        prefer: Callable[[list[str], list[str], int], list[str]] | None = None,
        envs: dict[str, str] | None = None,
        fail_allocate_call: int | None = None,
    ) -> None:
        self.plugin_dir = plugin_dir
        self.resource = resource
        self.endpoint = resource.replace("/", "_") + ".sock"
        self.options = pb.DevicePluginOptions(pre_start_required=pre_start, get_preferred_allocation_available=preferred)
        self.workers = workers
        self.prefer = prefer
        self.envs = envs or {}
        self.fail_allocate_call = fail_allocate_call
        self.calls: list[tuple[str, object]] = []
        self._cond = threading.Condition()
        self._devices = self._to_pb(devices)
        self._version = 0
        self._ended = False
        self.server: grpc.Server | None = None

    @staticmethod
    def _to_pb(rows: Sequence[DeviceRow]) -> list[pb.Device]:
        return [
            pb.Device(ID=i, health=h, topology=pb.TopologyInfo(nodes=[pb.NUMANode(ID=n) for n in nodes]) if nodes else None)
            for i, h, nodes in rows
        ]

    def _log(self, name: str, payload: object = None) -> None:
        with self._cond:
            self.calls.append((name, payload))

    def names(self) -> list[str]:
        with self._cond:
            return [name for name, _ in self.calls]

    def payloads(self, name: str) -> list:
        with self._cond:
            return [payload for n, payload in self.calls if n == name]

    # -- life cycle and registration -------------------------------------------

    def serve(self) -> MiniPlugin:
        self.server = grpc.server(ThreadPoolExecutor(max_workers=self.workers))
        pb_grpc.add_DevicePluginServicer_to_server(self, self.server)
        assert self.server.add_insecure_port(f"unix://{self.plugin_dir / self.endpoint}")
        self.server.start()
        with self._cond:
            self._ended = False
        return self

    def register(self, *, version: str = API_VERSION, resource: str | None = None, endpoint: str | None = None,
                 options: pb.DevicePluginOptions | None = None) -> None:
        request = pb.RegisterRequest(
            version=version,
            endpoint=self.endpoint if endpoint is None else endpoint,
            resource_name=self.resource if resource is None else resource,
            options=self.options if options is None else options,
        )
        self._log("register-sent")
        with grpc.insecure_channel(f"unix://{self.plugin_dir / 'kubelet.sock'}") as channel:
            try:
                pb_grpc.RegistrationStub(channel).Register(request, timeout=30)
            finally:
                self._log("register-returned")

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop(None).wait()

    def set_devices(self, rows: Sequence[DeviceRow]) -> None:
        with self._cond:
            self._devices = self._to_pb(rows)
            self._version += 1
            self._cond.notify_all()

    def end_stream(self) -> None:
        with self._cond:
            self._ended = True
            self._cond.notify_all()

    # -- the DevicePlugin service -----------------------------------------------------

    def GetDevicePluginOptions(self, request: pb.Empty, context: grpc.ServicerContext) -> pb.DevicePluginOptions:
        self._log("GetDevicePluginOptions")
        return self.options

    def ListAndWatch(self, request: pb.Empty, context: grpc.ServicerContext) -> Iterator[pb.ListAndWatchResponse]:
        self._log("ListAndWatch")
        sent = -1
        while True:
            with self._cond:
                self._cond.wait_for(lambda sent=sent: self._version != sent or self._ended or not context.is_active(), timeout=0.2)
                if self._ended or not context.is_active():
                    return
                if self._version == sent:
                    continue
                sent, devices = self._version, list(self._devices)
            yield pb.ListAndWatchResponse(devices=devices)

    def GetPreferredAllocation(self, request: pb.PreferredAllocationRequest, context: grpc.ServicerContext):
        (req,) = request.container_requests
        available, must, size = list(req.available_deviceIDs), list(req.must_include_deviceIDs), req.allocation_size
        self._log("GetPreferredAllocation", (available, must, size))
        answer = self.prefer(available, must, size) if self.prefer else (must + sorted(set(available) - set(must)))[:size]
        return pb.PreferredAllocationResponse(
            container_responses=[pb.ContainerPreferredAllocationResponse(deviceIDs=answer)]
        )

    def Allocate(self, request: pb.AllocateRequest, context: grpc.ServicerContext) -> pb.AllocateResponse:
        (req,) = request.container_requests
        ids = sorted(req.devices_ids)
        self._log("Allocate", ids)
        if self.fail_allocate_call == len(self.payloads("Allocate")):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"refusing {ids}")
        envs = {"IDS_" + self.resource.split("/")[1].upper(): ",".join(ids), **self.envs}
        return pb.AllocateResponse(container_responses=[pb.ContainerAllocateResponse(envs=envs)])

    def PreStartContainer(self, request: pb.PreStartContainerRequest, context: grpc.ServicerContext):
        self._log("PreStartContainer", sorted(request.devices_ids))
        return pb.PreStartContainerResponse()


@pytest.fixture
def plugins(plugin_dir: Path) -> Iterator[Callable[..., MiniPlugin]]:
    """``plugins(**settings)``: a served (not yet registered) MiniPlugin, stopped after the test."""
    with StopAfter() as kept:
        def make(**settings: object) -> MiniPlugin:
            return kept.keep(MiniPlugin(plugin_dir, **settings).serve())  # type: ignore[arg-type]

        yield make


@pytest.fixture
def registered(kubelet: Kubelet, plugins: Callable[..., MiniPlugin]) -> Callable[..., MiniPlugin]:
    """``registered(**settings)``: a MiniPlugin registered with the stand-in, its first snapshot applied."""

    def make(**settings: object) -> MiniPlugin:
        plugin = plugins(**settings)
        plugin.register()
        expected = len(settings.get("devices", FOUR))  # type: ignore[arg-type]
        kubelet.wait_for(lambda: kubelet.capacity().get(plugin.resource) == expected, what=f"{plugin.resource} snapshot")
        return plugin

    return make


def pod(name: str, *containers: dict[str, int], init: Sequence[dict[str, int]] = ()) -> PodSpec:
    return PodSpec(
        name=name,
        init_containers=[ContainerSpec(f"init{i}", ["true"], limits) for i, limits in enumerate(init)],
        containers=[ContainerSpec(f"c{i}", ["sleep", "1"], limits) for i, limits in enumerate(containers)],
    )

