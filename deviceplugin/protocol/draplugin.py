"""The DRA kubelet plugin's gRPC side: registration with the plugin watcher, and NodePrepare/NodeUnprepareResources.

Protobuf in, pure calls (:mod:`deviceplugin.model.claims`), protobuf out. Which devices a claim
was allocated comes from a :class:`ClaimSource` (the API server's ResourceClaim, in the daemon);
the prepared claims go to a :class:`ClaimStore` before the kubelet hears of them, so a restart
reads back exactly what was given; the devices' health streams from :mod:`~deviceplugin.protocol.drahealth`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import grpc

from api.dra.v1 import api_pb2 as dra_pb
from api.dra.v1 import api_pb2_grpc as dra_grpc
from api.drahealth.v1alpha1 import api_pb2_grpc as health_grpc
from api.health.v1 import health_pb2_grpc
from api.pluginregistration.v1 import api_pb2 as reg_pb
from api.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from deviceplugin.errors import CmkError, one_line
from deviceplugin.events import EventLog
from deviceplugin.model.claims import (
    AllocatedDevice,
    ClaimError,
    Prepared,
    decode,
    encode,
    prepare,
    published_index,
)
from deviceplugin.model.devices import DeviceTree
from deviceplugin.model.resourceslices import DRIVER_NAME
from deviceplugin.protocol.drahealth import HealthWatch
from deviceplugin.protocol.server import ReadyHealth, listen

events = EventLog(__name__)

#: ``PluginInfo.type`` of a DRA plugin, as pluginregistration/v1's constants.go names it.
PLUGIN_TYPE = "DRAPlugin"
#: The service this plugin serves, written as the kubelet 1.36 matches it in ``supported_versions``.
SERVICE_VERSION = "v1.DRAPlugin"
#: The kubelet's GetInfo has a 1 s deadline and it calls Prepare/Unprepare concurrently per pod; one more
#: for its health stream, open as long as the driver is registered.
WORKERS = 5


class ClaimSource(Protocol):
    """Where a claim's allocation is read (its ``status.allocation``); raises CmkError when it cannot say."""

    def allocated(self, namespace: str, name: str, uid: str) -> Sequence[AllocatedDevice]: ...


class ClaimStore(Protocol):
    """The prepared claims' checkpoint: bytes that survive the daemon (None: nothing saved yet)."""

    def load(self) -> bytes | None: ...

    def save(self, data: bytes) -> None: ...


@dataclass
class RegistrationStatus:
    """What the kubelet said in NotifyRegistrationStatus (None until it did)."""

    registered: bool | None = None
    error: str = ""


class Registration(reg_grpc.RegistrationServicer):
    """Answers the plugin watcher: a DRA plugin of ``driver`` serving ``v1.DRAPlugin`` on ``endpoint``."""

    def __init__(self, endpoint: Path, driver: str = DRIVER_NAME, *,
                 on_registered: Callable[[], None] | None = None) -> None:
        self.endpoint, self.driver = endpoint, driver
        self._on_registered = on_registered
        self.status = RegistrationStatus()
        self.notified = threading.Event()

    def GetInfo(self, request: reg_pb.InfoRequest, context: grpc.ServicerContext) -> reg_pb.PluginInfo:
        return reg_pb.PluginInfo(type=PLUGIN_TYPE, name=self.driver, endpoint=str(self.endpoint),
                                 supported_versions=[SERVICE_VERSION])

    def NotifyRegistrationStatus(self, request: reg_pb.RegistrationStatus,
                                 context: grpc.ServicerContext) -> reg_pb.RegistrationStatusResponse:
        self.status = RegistrationStatus(request.plugin_registered, request.error)
        if request.plugin_registered:
            events.info("dra_registered", f"the kubelet registered DRA driver {self.driver} at {self.endpoint}",
                        driver=self.driver, endpoint=str(self.endpoint))
            if self._on_registered is not None:
                self._on_registered()
        else:
            error = one_line(request.error)
            events.warning("dra_register_refused", f"the kubelet refused DRA driver {self.driver}: {error}",
                           driver=self.driver, error=error)
        self.notified.set()
        return reg_pb.RegistrationStatusResponse()


class DraPlugin(dra_grpc.DRAPluginServicer):
    """Prepares claims from the node's devices, checkpointing each change before answering."""

    def __init__(self, tree: DeviceTree, source: ClaimSource, store: ClaimStore, *, pool_name: str,
                 driver: str = DRIVER_NAME, where: str = "the prepared-claims checkpoint",
                 on_unprepared: Callable[[], None] | None = None) -> None:
        self._index = published_index(tree)
        self._source, self._store = source, store
        #: called (from a gRPC thread) after claims were unprepared and the checkpoint saved
        self._on_unprepared = on_unprepared
        self.pool_name, self.driver = pool_name, driver
        self._lock = threading.Lock()
        try:
            data = store.load()
        except OSError as err:
            raise ClaimError(f"cannot read {where} ({err.strerror}): check the daemon's state directory") from None
        self._prepared: Prepared = decode(data, where=where)

    @property
    def prepared(self) -> Prepared:
        with self._lock:
            return self._prepared

    def _save(self, prepared: Prepared) -> str | None:
        try:
            self._store.save(encode(prepared))
        except OSError as err:
            return f"cannot save the prepared-claims checkpoint ({err.strerror}): check the daemon's state directory"
        self._prepared = prepared
        return None

    def NodePrepareResources(self, request: dra_pb.NodePrepareResourcesRequest,
                             context: grpc.ServicerContext) -> dra_pb.NodePrepareResourcesResponse:
        response = dra_pb.NodePrepareResourcesResponse()
        with self._lock:
            state = dict(self._prepared)
            for claim in request.claims:
                name = f"{claim.namespace}/{claim.name}"
                try:  # a claim prepared already keeps its answer: no need to read it again
                    allocated = () if claim.uid in state else self._source.allocated(claim.namespace, claim.name,
                                                                                       claim.uid)
                    state[claim.uid] = prepare(state, claim.uid, name, allocated, self._index,
                                               driver=self.driver, pool_name=self.pool_name)
                except CmkError as err:
                    events.warning("claim_refused", f"cannot prepare claim {name}: {one_line(err)}",
                                   claim=name, uid=claim.uid, error=one_line(err))
                    response.claims[claim.uid].error = one_line(err)
            failed = self._save(state) if state != self._prepared else None
            for claim in request.claims:
                entry = response.claims[claim.uid]
                if failed and claim.uid not in self._prepared:  # given only once it is on disk
                    entry.error = entry.error or failed
                elif not entry.error:
                    entry.devices.extend(dra_pb.Device(request_names=d.request_names, pool_name=d.pool_name,
                                                       device_name=d.device_name, cdi_device_ids=d.cdi_device_ids)
                                         for d in state[claim.uid])
        return response

    def NodeUnprepareResources(self, request: dra_pb.NodeUnprepareResourcesRequest,
                               context: grpc.ServicerContext) -> dra_pb.NodeUnprepareResourcesResponse:
        response = dra_pb.NodeUnprepareResourcesResponse()
        gone = {claim.uid for claim in request.claims}
        with self._lock:
            state = {uid: devices for uid, devices in self._prepared.items() if uid not in gone}
            failed = self._save(state) if len(state) != len(self._prepared) else None
            for claim in request.claims:
                response.claims[claim.uid].error = failed or ""
        if self._on_unprepared is not None and not failed:
            self._on_unprepared()
        return response


def serve(socket_path: Path, servicer: Registration | DraPlugin, health: ReadyHealth | None = None,
          watch: HealthWatch | None = None) -> grpc.Server:
    """A started server of ``servicer`` on ``socket_path`` (a stale socket there is replaced).

    ``health``: also the gRPC health check ``cmk probe`` asks (the kubelet never calls it); ``watch``: also
    ``DRAResourceHealth``, the devices' health the kubelet streams.
    """
    problem = f"cannot listen on {socket_path}: check that its directory exists and is writable"

    def add(server: grpc.Server) -> None:
        if isinstance(servicer, Registration):
            reg_grpc.add_RegistrationServicer_to_server(servicer, server)
        else:
            dra_grpc.add_DRAPluginServicer_to_server(servicer, server)
        if health is not None:
            health_pb2_grpc.add_HealthServicer_to_server(health, server)
        if watch is not None:
            health_grpc.add_DRAResourceHealthServicer_to_server(watch, server)

    return listen(socket_path, problem, add, thread_prefix="cmk-dra", workers=WORKERS)
