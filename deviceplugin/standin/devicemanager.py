"""The stand-in's device manager: registration, one client per plugin and its ListAndWatch, what the node reports.

The half of a kubelet a device plugin talks to. Pods are the other half
(:mod:`deviceplugin.standin.admission`), which takes devices through this one.

Thread safety: one re-entrant condition (:attr:`DeviceManager.cond`) guards
the state of both halves; plugin RPCs are made outside it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import grpc

from api.constants import API_VERSION, validate_resource_name
from api.v1beta1 import deviceplugin_pb2 as pb
from deviceplugin.errors import CmkError
from deviceplugin.standin.nodedevices import Device, NodeDevices
from deviceplugin.standin.options import KubeletOptions
from deviceplugin.standin.plugin_client import (
    PluginCallError,
    PluginClient,
    PluginOptions,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Registration:
    """One accepted Register call; ``options`` is the GetDevicePluginOptions reply the stand-in acts on."""

    resource: str
    endpoint: str
    request_options: PluginOptions
    options: PluginOptions


@dataclass(frozen=True)
class _Endpoint:
    client: PluginClient
    options: PluginOptions
    #: A re-registration failed after the kubelet had put the new client in this one's place: the
    #: device manager keeps using this endpoint, but nothing processes the end of its stream.
    orphaned: bool = False


def registration_problem(request: pb.RegisterRequest) -> str | None:
    """Why the kubelet refuses this RegisterRequest, or None."""
    if request.version != API_VERSION:
        return f"requested device plugin API version {request.version!r} is not supported; kubelet supports {API_VERSION}"
    problem = validate_resource_name(request.resource_name)
    if problem:
        return f"invalid extended resource name: {problem}"
    if not request.endpoint or "/" in request.endpoint or request.endpoint in (".", ".."):
        return f"endpoint {request.endpoint!r} must be a bare socket file name inside the device plugin directory"
    return None


class DeviceManager:
    """Plugins registered at ``plugin_dir``, their streams, and the capacity and devices they give the node."""

    def __init__(self, plugin_dir: Path, options: KubeletOptions) -> None:
        self.plugin_dir = plugin_dir
        self.clock = options.clock
        self._dial_timeout, self._rpc_timeout, self._dial_delay = (options.dial_timeout, options.rpc_timeout,
                                                                   options.dial_delay)
        self.cond = threading.Condition(threading.RLock())
        self.node = NodeDevices(options.grace_period)
        self._endpoints: dict[str, _Endpoint] = {}
        self._last_options: dict[str, PluginOptions] = {}
        self._clients: list[PluginClient] = []
        self._generation = 0  # bumped by end(): events from an older kubelet "process" are ignored
        self._registrations: list[Registration] = []
        self._violations: list[str] = []

    def end(self) -> list[PluginClient]:
        """The kubelet process ends: every endpoint is forgotten; the caller closes the clients returned.

        After the servers stop: a plugin whose stream ends first registers again, with this kubelet.
        """
        with self.cond:
            clients, self._clients = self._clients, []
            self._endpoints.clear()
            self._generation += 1
            self.cond.notify_all()
        return clients

    def restarted(self) -> None:
        """Pods keep their devices (checkpoint); every resource reads 0 until re-registered."""
        with self.cond:
            self.node.kubelet_restarted(self.clock())
            self.cond.notify_all()

    def endpoint(self, resource: str) -> _Endpoint | None:
        with self.cond:
            return self._endpoints.get(resource)

    def last_options(self, resource: str) -> PluginOptions:
        """The options of the resource's last registration, live or not."""
        with self.cond:
            return self._last_options.get(resource, PluginOptions())

    # -- registration and ListAndWatch --------------------------------------

    def register(self, request: pb.RegisterRequest, context: grpc.ServicerContext) -> pb.Empty:
        resource = request.resource_name
        problem = registration_problem(request)
        if problem:
            log.warning("registration refused: %s", problem)
            context.abort(grpc.StatusCode.UNKNOWN, problem)
        with self.cond:
            generation = self._generation
        endpoint_path = self.plugin_dir / request.endpoint
        socket_at_register = _inode(endpoint_path)
        if self._dial_delay:
            time.sleep(self._dial_delay)  # a busy kubelet: the window in which a plugin may restart
        try:
            # The dial-back and options call happen before Register answers: a plugin
            # whose server has no free worker now never gets its Register answered.
            client = PluginClient(
                resource, endpoint_path, dial_timeout=self._dial_timeout, rpc_timeout=self._rpc_timeout
            )
        except PluginCallError as error:
            self._connect_failed(resource, generation)
            context.abort(grpc.StatusCode.UNKNOWN, str(error))
        try:
            options = client.get_options()
        except PluginCallError as error:
            client.close()
            self._connect_failed(resource, generation)
            context.abort(grpc.StatusCode.UNKNOWN, str(error))
        if _inode(endpoint_path) != socket_at_register:
            with self.cond:
                self._violations.append(
                    f"{resource}: a Register sent before the plugin replaced its socket {request.endpoint} "
                    "completed against the new server; finish (or fail) a Register before binding the socket again"
                )
        registration = Registration(resource, request.endpoint, PluginOptions.from_pb(request.options), options)
        with self.cond:
            if generation != self._generation:
                client.close()
                context.abort(grpc.StatusCode.UNAVAILABLE, "kubelet is restarting; register again on the new kubelet.sock")
            self._endpoints[resource] = _Endpoint(client, options)
            self._last_options[resource] = options
            self._clients.append(client)
            self.node.registered(resource)
            self._registrations.append(registration)
            self.cond.notify_all()
        log.info("registered %s at %s with options %s", resource, request.endpoint, options)
        # The kubelet starts its ListAndWatch goroutine before Register returns, so a
        # plugin may see the stream open before its own Register call comes back.
        client.watch(
            lambda devices: self._on_snapshot(resource, generation, devices),
            lambda reason: self._on_stream_end(resource, generation, client, reason),
        )
        return pb.Empty()

    def _connect_failed(self, resource: str, generation: int) -> None:
        """The kubelet's connectClient failing: it deregisters whatever client holds the name.

        The new client had already replaced the older one in the registry, so the
        older live client is orphaned: the device manager keeps its endpoint (its
        devices stay as they were, Allocate still reaches it), but the end of its
        stream is never processed as a disconnect.
        """
        with self.cond:
            current = self._endpoints.get(resource)
            if generation == self._generation and current is not None and not current.orphaned:
                self._endpoints[resource] = replace(current, orphaned=True)
                log.warning("%s: re-registration failed; the live client is orphaned", resource)

    def orphaned(self, resource: str) -> bool:
        """Whether the resource's endpoint is a client the kubelet no longer tracks (see ``_connect_failed``)."""
        with self.cond:
            endpoint = self._endpoints.get(resource)
            return endpoint is not None and endpoint.orphaned

    def _on_snapshot(self, resource: str, generation: int, devices: list[Device]) -> None:
        with self.cond:
            if generation != self._generation:
                return
            self._violations.extend(self.node.snapshot(resource, devices))
            self.cond.notify_all()
            now = self.clock()
            log.info(
                "%s: capacity %d allocatable %d",
                resource,
                self.node.capacity(now).get(resource, 0),
                self.node.allocatable(now).get(resource, 0),
            )

    def _on_stream_end(self, resource: str, generation: int, client: PluginClient, reason: str) -> None:
        try:
            self._stream_ended(resource, generation, client, reason)
        finally:
            client.close()  # whatever the stream's fate meant for the registration, its channel is done

    def _stream_ended(self, resource: str, generation: int, client: PluginClient, reason: str) -> None:
        with self.cond:
            if client in self._clients:
                self._clients.remove(client)
            current = self._endpoints.get(resource)
            if generation != self._generation or current is None:
                return
            if current.orphaned and current.client is client:
                return  # runClient finds no registered client for the name: no PluginDisconnected
            if current.client is not client:
                # The kubelet disconnects whichever client is registered now (runClient ->
                # getClient(name)): an old stream ending late kills the new registration.
                self._violations.append(
                    f"{resource}: an older ListAndWatch stream ended after a newer registration, which made the "
                    "kubelet drop the newer one; stop the old server before registering again"
                )
            del self._endpoints[resource]
            self.node.stream_ended(resource, self.clock())
            self.cond.notify_all()
        current.client.close()
        log.warning("%s: ListAndWatch ended (%s); its devices are unhealthy until it registers again", resource, reason)

    def drop_stream(self, resource: str) -> None:
        """End one plugin's ListAndWatch from the kubelet's side, as a broken connection does.

        The kubelet then disconnects the resource (devices unhealthy, the grace
        period starts) and never dials the plugin again: recovering is the
        plugin's job. Returns once the kubelet has processed the end.
        """
        with self.cond:
            endpoint = self._endpoints.get(resource)
            if endpoint is None:
                raise CmkError(f"{resource} has no live stream to drop; live: {sorted(self._endpoints)}")
        endpoint.client.close()
        self.wait_for(lambda: self._endpoints.get(resource) is not endpoint, what=f"{resource} stream ended")

    # -- what the node reports --------------------------------------------------

    def capacity(self) -> dict[str, int]:
        with self.cond:
            return self.node.capacity(self.clock())

    def allocatable(self) -> dict[str, int]:
        with self.cond:
            return self.node.allocatable(self.clock())

    def devices(self, resource: str) -> dict[str, Device]:
        """The latest ListAndWatch snapshot of ``resource`` (all unhealthy once its stream ended)."""
        with self.cond:
            return self.node.devices(resource)

    def healthy_devices(self) -> dict[str, list[Device]]:
        with self.cond:
            now = self.clock()
            return {
                r: [d for d in self.node.devices(r).values() if d.healthy]
                for r in self.node.capacity(now)
                if self.node.known(r, now)
            }

    def registrations(self) -> list[Registration]:
        with self.cond:
            return list(self._registrations)

    def options(self, resource: str) -> PluginOptions | None:
        """The options in effect for the live registration of ``resource``."""
        with self.cond:
            endpoint = self._endpoints.get(resource)
            return endpoint.options if endpoint else None

    def violations(self) -> list[str]:
        """Plugin behaviour a real kubelet tolerates silently but that breaks it (tests expect none)."""
        with self.cond:
            return list(self._violations)

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 30.0, what: str = "condition") -> None:
        """Block until ``predicate()`` holds (re-checked on every state change); TimeoutError shows the state.

        The timeout bounds a hang, not a speed: a daemon starting on a loaded
        2-CPU CI machine took over 10 s to register (it returns as soon as the
        predicate holds, so a generous bound costs a passing test nothing).
        """
        deadline = time.monotonic() + timeout
        with self.cond:
            while not predicate():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(
                        f"{what} not met within {timeout:g} s; capacity {self.capacity()}, "
                        f"allocatable {self.allocatable()}, registered {[r.resource for r in self._registrations]}"
                    )
                # Capped so that time-based changes (the grace period) are seen too.
                self.cond.wait(min(remaining, 0.1))


def _inode(path: Path) -> int | None:
    try:
        return path.stat().st_ino
    except OSError:
        return None
