"""``DRAResourceHealth`` on the DRA service socket: the kubelet's stream of device health.

The kubelet opens ``NodeWatchResources`` on every registered driver (it retried every 5 s and
logged ``Unimplemented`` before this was served). Each stream gets every device's health at once,
again at each change, and every :data:`~deviceplugin.model.drahealth.RESEND_SECONDS` otherwise,
since the kubelet forgets a report older than the timeout it carries.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import grpc

from api.drahealth.v1alpha1 import api_pb2 as health_pb
from api.drahealth.v1alpha1 import api_pb2_grpc as health_grpc
from deviceplugin.model.drahealth import RESEND_SECONDS, TIMEOUT_SECONDS, DeviceHealth
from deviceplugin.protocol.server import wake_on_cancel


def response(devices: tuple[DeviceHealth, ...], now: int) -> health_pb.NodeWatchResourcesResponse:
    """The report of ``devices`` at unix time ``now``."""
    return health_pb.NodeWatchResourcesResponse(devices=[
        health_pb.DeviceHealth(device=health_pb.DeviceIdentifier(pool_name=d.pool_name, device_name=d.device_name),
                               health=health_pb.HEALTHY if d.healthy else health_pb.UNHEALTHY,
                               last_updated_time=now, health_check_timeout_seconds=TIMEOUT_SECONDS,
                               message=d.message)
        for d in devices])


class HealthWatch(health_grpc.DRAResourceHealthServicer):
    """Streams the devices' health as :meth:`update` last gave it; a stream ends when its server stops."""

    def __init__(self, devices: tuple[DeviceHealth, ...] = (), resend: float = RESEND_SECONDS) -> None:
        self._devices, self._resend = devices, resend
        self._version = 0
        self._changed = threading.Condition()

    def update(self, devices: tuple[DeviceHealth, ...]) -> None:
        with self._changed:
            if devices != self._devices:
                self._devices, self._version = devices, self._version + 1
                self._changed.notify_all()

    def NodeWatchResources(self, request: health_pb.NodeWatchResourcesRequest,
                           context: grpc.ServicerContext) -> Iterator[health_pb.NodeWatchResourcesResponse]:
        wake_on_cancel(context, self._changed)
        sent = -1

        def due() -> bool:
            return self._version != sent or not context.is_active()

        while True:
            with self._changed:
                self._changed.wait_for(due, timeout=None if sent < 0 else self._resend)
                if not context.is_active():
                    return
                sent, devices = self._version, self._devices
            yield response(devices, int(time.time()))
