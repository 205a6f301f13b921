"""One pool's gRPC DevicePlugin server on its unix socket: protobuf in, pure calls, protobuf out.

What to advertise, what to prefer and what to answer live in
:mod:`deviceplugin.model.devices`, :mod:`deviceplugin.model.policy` and
:mod:`deviceplugin.model.answers`; this module only converts and streams.

It serves one ListAndWatch stream, the newest: a new stream ends the older
one, so streams hold one worker however many are opened and Allocate always
finds one free. It calls ``on_stream_lost`` when the newest stream ends and
the server did not end it, since the kubelet never dials a plugin back.

Why it works this way: ``docs/design/plugin-server.md``.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent import futures
from pathlib import Path

import grpc

from api.constants import HEALTHY, UNHEALTHY
from api.health.v1 import health_pb2, health_pb2_grpc
from api.v1beta1 import deviceplugin_pb2 as pb
from api.v1beta1 import deviceplugin_pb2_grpc as pb_grpc
from deviceplugin.errors import CmkError, one_line, os_reason
from deviceplugin.events import Allocation, EventLog, Observer
from deviceplugin.model.answers import (
    ContainerAnswer,
    DeviceRequestError,
    allocate_answer,
)
from deviceplugin.model.cpulist import format_cpu_list
from deviceplugin.model.devices import PoolDevices
from deviceplugin.model.policy import CoreIndex, index_cores
from deviceplugin.model.shown import shown_ids

events = EventLog(__name__)

#: policy.prefer(index, available, must_include, size) -> IDs; raises ValueError on bad input.
Preference = Callable[[CoreIndex, Sequence[str], Sequence[str], int], list[str]]

#: The dial-back, one ListAndWatch stream (and, for a moment, the one it replaces) and concurrent admissions.
WORKERS = 8
#: Health service name that is NOT_SERVING while the daemon runs on its last good plan (config refused).
CONFIG_SERVICE = "cmk.intel.com/config"


#: sun_path holds 108 bytes with the terminating NUL; gRPC's own check logs a line and returns 0.
MAX_SOCKET_PATH = 107
#: Half the kubelet's 4 MiB gRPC receive limit: a larger ListAndWatch message would never list the pool.
LIST_MESSAGE_LIMIT = 2 * 1024 * 1024


def socket_path_problem(path: Path) -> str | None:
    """Why ``path`` cannot be a unix socket's address, or None."""
    size = len(os.fsencode(path))
    if size > MAX_SOCKET_PATH:
        return (f"socket path {path} is {size} bytes; unix sockets allow {MAX_SOCKET_PATH}: "
                "use a shorter --kubelet-dir")
    return None


def list_message_problem(devices: PoolDevices, wire: bytes | None = None) -> str | None:
    """Why the pool's ListAndWatch message cannot reach the kubelet, or None (sized with every device Unhealthy).

    ``wire``: the message serialized (:func:`list_message_wire`), when the caller has it already.
    """
    size = len(list_message_wire(devices) if wire is None else wire)
    size += len(devices.devices) * (len(UNHEALTHY) - len(HEALTHY))
    if size > LIST_MESSAGE_LIMIT:
        return (f"{devices.resource}: {len(devices.devices)} devices make a {size}-byte ListAndWatch message, "
                f"past the {LIST_MESSAGE_LIMIT}-byte limit (half the kubelet's 4 MiB): advertise fewer slots")
    return None


def options_message(devices: PoolDevices) -> pb.DevicePluginOptions:
    """The same options go in RegisterRequest and the GetDevicePluginOptions reply."""
    return pb.DevicePluginOptions(
        pre_start_required=False,
        get_preferred_allocation_available=devices.preferred_allocation,
    )


def list_message(devices: PoolDevices) -> pb.ListAndWatchResponse:
    return pb.ListAndWatchResponse(devices=[
        pb.Device(
            ID=device.id,
            health=HEALTHY if device.healthy else UNHEALTHY,
            topology=pb.TopologyInfo(nodes=[pb.NUMANode(ID=node) for node in sorted(device.numa_nodes)])
            if device.numa_nodes else None,
        )
        for device in devices.devices.values()
    ])


def list_message_wire(devices: PoolDevices) -> bytes:
    """The pool's ListAndWatch message, serialized: built once per snapshot, parsed back for each stream.

    Building the message is Python per device (20 ms for 4,096 cores on 8,192 CPUs); parsing it back
    from its bytes is upb's C (0.3 ms), and the bytes (137 KB there) are a sixth of the message's
    own memory. The daemon's start sizes the message (:func:`list_message_problem`) and hands the
    bytes to the server, so the first stream does not build it a second time.
    """
    return list_message(devices).SerializeToString()


def answer_message(answer: ContainerAnswer) -> pb.ContainerAllocateResponse:
    return pb.ContainerAllocateResponse(
        envs=dict(answer.envs),
        mounts=[pb.Mount(container_path=m.container_path, host_path=m.host_path, read_only=m.read_only)
                for m in answer.mounts],
        cdi_devices=[pb.CDIDevice(name=name) for name in answer.cdi_devices],
    )


class PoolServer(pb_grpc.DevicePluginServicer):
    """Serves one resource; :meth:`update` pushes a new snapshot to every open stream."""

    def __init__(self, devices: PoolDevices, *, socket_path: Path, install_dir: str,
                 prefer: Preference, cdi: bool = False, observer: Observer | None = None,
                 on_stream_lost: Callable[[PoolServer, int], None] | None = None, config_ok: bool = True,
                 wire: bytes | None = None) -> None:
        """``wire``: ``devices``' ListAndWatch message as :func:`list_message_wire` made it, if made already."""
        self.socket_path = socket_path
        self.config_ok = config_ok
        self._on_stream_lost = on_stream_lost
        self._observer = observer or Observer()
        self._install_dir = install_dir
        self._cdi = cdi
        self._prefer = prefer
        # The devices with the policy's view of their cores and their ListAndWatch message, built with each
        # snapshot and swapped as one: no call pays for the machine's size, and none sees devices of one
        # snapshot with another's index or message.
        self._snapshot = (devices, index_cores(devices.cores), list_message_wire(devices) if wire is None else wire)
        self._version = 0
        self._stopped = False
        self._changed = threading.Condition()
        self._server: grpc.Server | None = None
        self._streams = 0  # open now
        self._opened = 0  # ever opened: numbers each stream
        self.socket_inode: int | None = None

    @property
    def devices(self) -> PoolDevices:
        return self._snapshot[0]

    @property
    def resource(self) -> str:
        return self.devices.resource

    @property
    def opened(self) -> int:
        """How many ListAndWatch streams the kubelet has opened to this server (the last one's number)."""
        with self._changed:
            return self._opened

    @property
    def streaming(self) -> bool:
        """True while the kubelet holds a ListAndWatch stream open to this server."""
        with self._changed:
            return self._streams > 0 and not self._stopped

    def start(self) -> None:
        """Listen on the socket (replacing a stale one) before anyone registers it."""
        problem = f"cannot listen on {self.socket_path}: check that --kubelet-dir is a writable directory"
        too_long = socket_path_problem(self.socket_path)
        if too_long:
            raise CmkError(too_long)
        def add(server: grpc.Server) -> None:
            pb_grpc.add_DevicePluginServicer_to_server(self, server)
            health_pb2_grpc.add_HealthServicer_to_server(
                ReadyHealth(self.resource, lambda: self.streaming, lambda: self.config_ok), server)

        server = listen(self.socket_path, problem, add, thread_prefix=f"cmk-{self.devices.pool}")
        self._server = server
        self.socket_inode = self._bound_inode()

    def _bound_inode(self) -> int | None:
        """The inode of the socket just bound, or None if it is already gone.

        A starting kubelet unlinks every socket in the directory before it listens on kubelet.sock;
        a daemon that rebinds on seeing its socket go can lose the new one in between (seen with
        kubelet 1.36: the daemon then served nothing until its liveness probe restarted it). Not
        ours then: the watcher's SocketGone for it makes the daemon serve once more.
        """
        try:
            return os.stat(self.socket_path).st_ino
        except FileNotFoundError:
            return None

    def socket_is_mine(self) -> bool:
        try:
            return os.stat(self.socket_path).st_ino == self.socket_inode
        except FileNotFoundError:
            return False

    def update(self, devices: PoolDevices) -> None:
        snapshot = (devices, index_cores(devices.cores), list_message_wire(devices))  # outside the lock: streams wait on it
        with self._changed:
            self._snapshot = snapshot
            self._version += 1
            self._changed.notify_all()

    def stop(self, grace: float = 0.5) -> threading.Event:
        """End every stream first, then stop serving; returns the event set once stopped."""
        with self._changed:
            self._stopped = True
            self._changed.notify_all()
        done = self._server.stop(grace) if self._server is not None else threading.Event()
        if self._server is None:
            done.set()
        return done

    def remove_socket(self) -> None:
        if self.socket_is_mine():
            self.socket_path.unlink()

    # --- DevicePlugin service -------------------------------------------------------------

    def GetDevicePluginOptions(self, request: pb.Empty, context: grpc.ServicerContext) -> pb.DevicePluginOptions:
        return options_message(self.devices)

    def ListAndWatch(self, request: pb.Empty, context: grpc.ServicerContext) -> Iterator[pb.ListAndWatchResponse]:
        wake_on_cancel(context, self._changed)
        sent = -1

        def replaced() -> bool:
            return self._opened != number

        def ready() -> bool:
            return self._stopped or replaced() or self._version != sent or not context.is_active()

        with self._changed:
            self._streams += 1
            self._opened += 1
            number = self._opened
            self._changed.notify_all()  # the older stream ends: one worker for streams, whatever opens them
        try:
            while True:
                with self._changed:
                    self._changed.wait_for(ready)
                    if self._stopped or replaced() or not context.is_active():
                        return
                    sent, wire = self._version, self._snapshot[2]
                yield pb.ListAndWatchResponse.FromString(wire)
        finally:  # also when grpc closes the generator because the kubelet went away mid-yield
            with self._changed:
                self._streams -= 1
                newer = self._opened if replaced() else None
                lost = not self._stopped and newer is None
            if newer is not None:
                events.warning("stream_replaced", f"ListAndWatch stream {number} of {self.resource} ended: stream {newer} "
                               "replaced it (the kubelet holds one per plugin)", resource=self.resource, stream=number,
                               newer=newer)
            if lost and self._on_stream_lost is not None:
                self._on_stream_lost(self, number)

    def GetPreferredAllocation(self, request: pb.PreferredAllocationRequest,
                               context: grpc.ServicerContext) -> pb.PreferredAllocationResponse:
        start = time.perf_counter()
        devices, index, _ = self._snapshot
        pool = str(devices.pool)
        if not devices.preferred_allocation:
            context.abort(grpc.StatusCode.UNIMPLEMENTED,
                          f"{devices.resource}: slots are interchangeable, preferred allocation is not offered")
        responses = []
        for req in request.container_requests:
            # Each read of a repeated field makes its strings anew: 4,000 of them on 8,192 CPUs, read once
            available, must_include = list(req.available_deviceIDs), list(req.must_include_deviceIDs)
            try:
                chosen = self._prefer(index, available, must_include, req.allocation_size)
            except ValueError as err:
                seconds = time.perf_counter() - start
                events.warning("preferred_allocation_refused", f"refused preferred allocation: {err}", pool=pool,
                               resource=devices.resource, error=str(err), seconds=seconds)
                self._observer.preferred(pool, seconds, refused=True)
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, one_line(f"{devices.resource}: {err}"))
            seconds = time.perf_counter() - start
            events.debug("preferred_allocation", f"preferred {' '.join(chosen)} for {devices.resource}", pool=pool,
                         resource=devices.resource, available=_known(devices, available),
                         must_include=_known(devices, must_include), size=req.allocation_size, chosen=tuple(chosen),
                         seconds=seconds)
            self._observer.preferred(pool, seconds, refused=False)
            responses.append(pb.ContainerPreferredAllocationResponse(deviceIDs=chosen))
        return pb.PreferredAllocationResponse(container_responses=responses)

    def Allocate(self, request: pb.AllocateRequest, context: grpc.ServicerContext) -> pb.AllocateResponse:
        start = time.perf_counter()
        devices = self.devices
        pool = str(devices.pool)
        responses = []
        for req in request.container_requests:
            ids = list(req.devices_ids)
            try:
                answer = allocate_answer(devices, ids, install_dir=self._install_dir,
                                         cdi=self._cdi)
            except DeviceRequestError as err:
                seconds = time.perf_counter() - start
                events.warning("allocate_refused", f"refused allocation: {err}", pool=pool, resource=devices.resource,
                               devices=shown_ids(ids), requested=len(ids), error=str(err), seconds=seconds)
                self._observer.allocate_refused(pool, seconds)
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, one_line(err))
            cpus = format_cpu_list(devices.cpus_of(ids))
            allocation, seconds = Allocation(pool, devices.resource, _known(devices, ids), cpus), time.perf_counter() - start
            events.info("allocated", f"allocated {devices.resource} {','.join(allocation.devices)}: CPUs {cpus}", pool=pool,
                        resource=devices.resource, devices=allocation.devices, cpus=cpus, seconds=seconds)
            self._observer.allocated(allocation, seconds)
            responses.append(answer_message(answer))
        return pb.AllocateResponse(container_responses=responses)

    def PreStartContainer(self, request: pb.PreStartContainerRequest,
                          context: grpc.ServicerContext) -> pb.PreStartContainerResponse:
        return pb.PreStartContainerResponse()  # not advertised; harmless if called anyway


def _known(devices: PoolDevices, ids: Iterable[str]) -> tuple[str, ...]:
    """The pool's devices among ``ids``, each once in first-seen order: bounded by the pool, not the request."""
    unique = dict.fromkeys(ids)
    if unique.keys() <= devices.devices.keys():  # the kubelet's own requests: one C-level check, not a loop
        return tuple(unique)
    return tuple(i for i in unique if i in devices.devices)


class ReadyHealth(health_pb2_grpc.HealthServicer):
    """The standard gRPC health check ``cmk probe`` asks: SERVING only while the kubelet holds what it serves.

    Service ``""`` and ``name`` (a pool's resource, or the DRA driver) answer ``ready()``: a device
    plugin's ListAndWatch stream held, or the driver registered with its slices published.
    :data:`CONFIG_SERVICE` is SERVING unless the daemon refused its config and serves the last good
    plan; anything else is NOT_FOUND, as the standard says.
    """

    def __init__(self, name: str, ready: Callable[[], bool], config_ok: Callable[[], bool]) -> None:
        self._name, self._ready, self._config_ok = name, ready, config_ok

    def Check(self, request: health_pb2.HealthCheckRequest,
              context: grpc.ServicerContext) -> health_pb2.HealthCheckResponse:
        if request.service not in ("", self._name, CONFIG_SERVICE):
            context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {request.service!r}; "
                          f"this socket serves {self._name} and {CONFIG_SERVICE}")
        good = self._config_ok() if request.service == CONFIG_SERVICE else self._ready()
        status = health_pb2.HealthCheckResponse.SERVING if good else health_pb2.HealthCheckResponse.NOT_SERVING
        return health_pb2.HealthCheckResponse(status=status)


def wake_on_cancel(context: grpc.ServicerContext, changed: threading.Condition) -> None:
    """A stream waiting on ``changed`` wakes when its client goes: a cancelled stream must not hold its worker
    until the next update."""
    def wake() -> None:
        with changed:
            changed.notify_all()

    context.add_callback(wake)


def listen(socket_path: Path, problem: str, add: Callable[[grpc.Server], None], *, thread_prefix: str,
           workers: int = WORKERS) -> grpc.Server:
    """A started gRPC server, its servicers put on by ``add``, on ``socket_path`` (a stale socket replaced).

    ``problem`` is the one line a socket that cannot be bound gives, naming the setting to check.
    """
    try:
        if socket_path.exists() or socket_path.is_symlink():
            socket_path.unlink()
    except OSError as err:
        raise CmkError(f"{problem} ({os_reason(err)})") from None
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix=thread_prefix))
    add(server)
    try:
        bound = server.add_insecure_port(f"unix:{socket_path}")
    except RuntimeError:  # newer grpc raises instead of returning 0
        bound = 0
    if not bound:
        raise CmkError(problem)
    server.start()
    return server
