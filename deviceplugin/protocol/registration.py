"""Registering pools with the kubelet: the one module that calls the kubelet's Registration service.

The registrar retries with exponential backoff while there is no kubelet and
never gives up: a node daemon must outlive kubelet restarts and upgrades.
It remembers which ``kubelet.sock`` (by inode) each pool registered with, so
the daemon can tell a new kubelet from the one it already serves, and
:func:`kubelet_listens` tells a kubelet from the file a dead one left.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc

from api.constants import API_VERSION
from api.v1beta1 import deviceplugin_pb2 as pb
from api.v1beta1 import deviceplugin_pb2_grpc as pb_grpc
from deviceplugin.events import EventLog, Observer

events = EventLog(__name__)

FIRST_DELAY = 0.05
MAX_DELAY = 5.0
#: The kubelet dials back with a 10 s timeout before it answers Register.
REGISTER_TIMEOUT = 15.0
#: How long one attempt waits for kubelet.sock to accept a connection before it backs off.
CONNECT_TIMEOUT = 0.5
CONNECT_PROBE_METHOD = "/v1beta1.Registration/CmkConnect"


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


def kubelet_listens(kubelet_socket: Path, *, just_created: bool = False) -> bool:
    """Whether a server accepts connections on ``kubelet_socket`` now (a bare connect: no gRPC call).

    The file alone proves nothing after a kubelet restart: a killed kubelet
    leaves its ``kubelet.sock`` behind, refusing connections, until the next
    one's sweep unlinks it; and a starting kubelet binds the new one a moment
    before it listens. So a ``just_created`` socket's refusals are retried
    for up to :data:`CONNECT_TIMEOUT`; any other is asked once.
    """
    deadline = time.monotonic() + (CONNECT_TIMEOUT if just_created else 0.0)
    while True:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(CONNECT_TIMEOUT)
            try:
                sock.connect(str(kubelet_socket))
            except OSError:
                pass
            else:
                return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(FIRST_DELAY)


class RegisterError(Exception):
    """Register failed: ``code`` is the gRPC status name (or UNAVAILABLE when nothing listens)."""

    def __init__(self, code: str, details: str) -> None:
        super().__init__(f"{code}: {details}")
        self.code, self.details = code, details


class NotServed(Exception):
    """The pool's socket is gone: registering it from this server could only mislead the kubelet."""


def register(kubelet_socket: Path, registration: Registration, *, timeout: float = REGISTER_TIMEOUT,
             served: Callable[[], bool] = lambda: True) -> None:
    """One Register call; raises RegisterError when the kubelet is away or refuses.

    Connects first, then asks ``served()``, then sends. A starting kubelet
    deletes every plugin socket before it creates ``kubelet.sock``: so if the
    connection reached a new kubelet, our socket is already gone and nothing
    is sent; a Register is never sent that would have the new kubelet dial a
    path our next server binds.
    """
    with grpc.insecure_channel(f"unix:{kubelet_socket}") as channel:
        _connect(channel)
        if not served():
            raise NotServed(registration.resource)
        try:
            pb_grpc.RegistrationStub(channel).Register(
                pb.RegisterRequest(version=API_VERSION, endpoint=registration.endpoint,
                                   resource_name=registration.resource, options=registration.options),
                timeout=timeout,
            )
        except grpc.RpcError as err:
            raise RegisterError(err.code().name, err.details() or "") from None


def _connect(channel: grpc.Channel) -> None:
    """Open the channel's connection without sending Register: a call to a method no kubelet has.

    UNIMPLEMENTED proves a connection to a live server (grpc-go answers unknown
    methods so, without logging); the Register that follows uses the same
    connection. (``channel_ready_future`` would do the same but leaves a
    connectivity poller that costs 200 ms at every close.)
    """
    try:
        channel.unary_unary(CONNECT_PROBE_METHOD)(b"", timeout=CONNECT_TIMEOUT)
    except grpc.RpcError as err:
        if err.code() != grpc.StatusCode.UNIMPLEMENTED:
            raise RegisterError(err.code().name, err.details() or "") from None


class Registrar:
    """Registers each pool in its own thread, retrying with backoff until done or cancelled.

    One thread per pool, so a pool whose Register keeps failing (the kubelet
    refusing its name, say) never holds the others up. :meth:`again` queues
    one pool anew (the kubelet ended its stream). :meth:`cancel` ends the
    backoff waits at once but lets a Register already sent finish: the
    kubelet goes on with a call whatever the caller does (it dials back
    within 10 s), so the daemon must not bind a new server at the same socket
    until that call is over, or the old call would connect the new server.

    ``served(resource)`` is asked before every attempt: once the pool's socket
    is gone (a starting kubelet deletes every plugin socket before it creates
    ``kubelet.sock``), a Register could only leave the kubelet dialling a path
    that the daemon's next server will bind, so the thread stops instead and
    the daemon's restart registers anew.
    """

    def __init__(self, kubelet_socket: Path, registrations: Sequence[Registration],
                 observer: Observer | None = None, *, served: Callable[[str], bool] = lambda resource: True,
                 outage: bool = False) -> None:
        self._kubelet_socket = kubelet_socket
        self._served = served
        self._observer = observer or Observer()
        self._by_resource = {r.resource: r for r in registrations}
        self._cancel = threading.Event()
        self._wake = threading.Condition()
        self._woken = 0
        self._lock = threading.Lock()
        self._registered: dict[str, tuple[int, int] | None] = {}
        self._threads: dict[str, threading.Thread] = {}
        self._started = False
        #: a RegisterFailed was emitted and no pool has registered since: one line per outage, not per pool.
        #: ``outage``: the registrar this one replaces was in one (servers restarted while the kubelet is away).
        self._outage = outage

    def start(self) -> None:
        with self._lock:
            self._started = True
        for resource in self._by_resource:
            self.again(resource)

    def again(self, resource: str) -> bool:
        """Register ``resource`` (again); False if it is being registered already or we are cancelled."""
        with self._lock:
            running = self._threads.get(resource)
            finishing = running is not None and resource in self._registered
        if finishing and running is not None:
            running.join()  # registered, only logging it: this new loss needs a new Register
        with self._lock:
            running = self._threads.get(resource)
            if not self._started or self._cancel.is_set() or (running is not None and running.is_alive()):
                return False
            self._registered.pop(resource, None)
            thread = threading.Thread(target=self._run, args=(self._by_resource[resource],),
                                      name=f"cmk-register-{resource.rpartition('/')[2]}", daemon=True)
            self._threads[resource] = thread
            thread.start()
        return True

    def cancel(self, *, wait: bool = True) -> None:
        """Stop retrying; with ``wait``, return once every Register already sent is answered."""
        self._cancel.set()
        self.retry_now()
        if wait:
            with self._lock:
                threads = list(self._threads.values())
            for thread in threads:
                thread.join()

    @property
    def outage(self) -> bool:
        """A RegisterFailed was emitted and no pool registered since."""
        with self._lock:
            return self._outage

    def retry_now(self) -> None:
        """Cut every backoff wait short: a kubelet has just appeared."""
        with self._wake:
            self._woken += 1
            self._wake.notify_all()

    def registered_with(self) -> dict[str, tuple[int, int] | None]:
        """resource -> identity of the kubelet.sock it registered with, for pools registered so far."""
        with self._lock:
            return dict(self._registered)

    @property
    def done(self) -> bool:
        with self._lock:
            return set(self._registered) == set(self._by_resource)

    def _backoff(self, delay: float) -> None:
        with self._wake:
            woken = self._woken
            self._wake.wait_for(lambda: self._woken != woken, timeout=delay)

    def _run(self, registration: Registration) -> None:
        delay = FIRST_DELAY
        while not self._cancel.is_set():
            try:
                register(self._kubelet_socket, registration,
                         served=lambda: self._served(registration.resource))
            except NotServed:
                events.logger.debug("%s: its socket is gone, not registering it from this server",
                                    registration.resource)
                return
            except RegisterError as err:
                with self._lock:
                    first, self._outage = not self._outage, True
                if first:  # one line per outage, not one per retry or per pool
                    events.warning("register_failed", f"cannot register {registration.resource} at {self._kubelet_socket} "
                                   f"({err.code}: {err.details}); retrying with backoff up to {MAX_DELAY:.0f} s",
                                   resource=registration.resource, kubelet_socket=str(self._kubelet_socket),
                                   code=err.code, details=err.details, max_delay=MAX_DELAY)
                self._backoff(delay)
                delay = min(delay * 2, MAX_DELAY)
                continue
            # Read after Register: the kubelet.sock that answered is the one there now. Read before,
            # a kubelet restarting in between would leave the pool tied to the old identity.
            identity = socket_identity(self._kubelet_socket)
            with self._lock:
                self._registered[registration.resource] = identity
                self._outage = False
            preferred = registration.options.get_preferred_allocation_available
            events.info("registered", f"registered {registration.resource} with the kubelet (endpoint "
                        f"{registration.endpoint}, preferred allocation {'on' if preferred else 'off'})",
                        resource=registration.resource, endpoint=registration.endpoint, preferred_allocation=preferred)
            self._observer.registered(registration.resource)
            return
