"""Registering pools with the kubelet: the one module that calls the kubelet's Registration service.

The registrar retries with exponential backoff while there is no kubelet and
never gives up: a node daemon must outlive kubelet restarts and upgrades.
It remembers which ``kubelet.sock`` (by inode) each pool registered with, so
the daemon can tell a new kubelet from the one it already serves.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc

from api.constants import API_VERSION
from api.v1beta1 import deviceplugin_pb2 as pb
from api.v1beta1 import deviceplugin_pb2_grpc as pb_grpc
from deviceplugin.events import Events, Registered, RegisterFailed

FIRST_DELAY = 0.05
MAX_DELAY = 5.0
#: The kubelet dials back with a 10 s timeout before it answers Register.
REGISTER_TIMEOUT = 15.0


@dataclass(frozen=True)
class Registration:
    resource: str
    endpoint: str  # the socket's bare file name in the device-plugin directory
    options: pb.DevicePluginOptions


def socket_identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def register(kubelet_socket: Path, registration: Registration, *, timeout: float = REGISTER_TIMEOUT) -> None:
    """One Register call; raises grpc.RpcError when the kubelet is away or refuses."""
    with grpc.insecure_channel(f"unix:{kubelet_socket}") as channel:
        pb_grpc.RegistrationStub(channel).Register(
            pb.RegisterRequest(version=API_VERSION, endpoint=registration.endpoint,
                               resource_name=registration.resource, options=registration.options),
            timeout=timeout,
        )


class Registrar:
    """Registers each pool once, in a thread, retrying with backoff until done or cancelled."""

    def __init__(self, kubelet_socket: Path, registrations: Sequence[Registration],
                 events: Events | None = None) -> None:
        self._kubelet_socket = kubelet_socket
        self._events = events or Events()
        self._pending = list(registrations)
        self._cancel = threading.Event()
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._registered: dict[str, tuple[int, int] | None] = {}
        self._thread = threading.Thread(target=self._run, name="cmk-registrar", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def cancel(self, *, wait: bool = True) -> None:
        """Stop retrying; without ``wait`` a Register already in flight may finish on its own."""
        self._cancel.set()
        self._wake.set()
        if wait:
            self._thread.join()

    def retry_now(self) -> None:
        """Cut a backoff wait short: a kubelet has just appeared."""
        self._wake.set()

    def registered_with(self) -> dict[str, tuple[int, int] | None]:
        """resource -> identity of the kubelet.sock it registered with, for pools registered so far."""
        with self._lock:
            return dict(self._registered)

    @property
    def done(self) -> bool:
        with self._lock:
            return not self._pending

    def _run(self) -> None:
        delay = FIRST_DELAY
        complained = False
        while not self._cancel.is_set():
            with self._lock:
                if not self._pending:
                    return
                registration = self._pending[0]
            identity = socket_identity(self._kubelet_socket)
            try:
                register(self._kubelet_socket, registration)
            except grpc.RpcError as err:
                if not complained:  # one line per outage, not one per retry
                    self._events.emit(RegisterFailed(registration.resource, str(self._kubelet_socket),
                                                     err.code().name, err.details(), MAX_DELAY))
                    complained = True
                self._wake.wait(delay)
                self._wake.clear()
                if self._cancel.is_set():
                    return
                delay = min(delay * 2, MAX_DELAY)
                continue
            delay, complained = FIRST_DELAY, False
            with self._lock:
                self._pending.pop(0)
                self._registered[registration.resource] = identity
            preferred = registration.options.get_preferred_allocation_available
            self._events.emit(Registered(registration.resource, registration.endpoint, preferred))
