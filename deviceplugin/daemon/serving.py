"""One server per pool of a device tree and one registrar for them all: started, restarted, stopped together.

Intel's ``manager.go`` is the model: the supervisor hands this a tree and
asks what the kubelet holds; the gRPC servers and registration stay here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from pathlib import Path

from deviceplugin.daemon.settings import socket_name
from deviceplugin.events import EventLog, Observer
from deviceplugin.model.devices import DeviceTree, PoolDevices
from deviceplugin.protocol.registration import Registrar, Registration, socket_identity
from deviceplugin.protocol.server import PoolServer, Preference, options_message

events = EventLog(__name__)


class PoolServers:
    """The servers of the tree served now and the registrar that registers them with ``kubelet_socket``."""

    def __init__(self, kubelet_dir: Path, kubelet_socket: Path, *, install_dir: str, prefer: Preference,
                 cdi: bool, config_ok: bool, observer: Observer, on_stream_lost: Callable[[], None]) -> None:
        self._kubelet_dir, self.kubelet_socket = kubelet_dir, kubelet_socket
        self._install_dir, self._prefer, self._cdi, self._config_ok = install_dir, prefer, cdi, config_ok
        self._observer, self._on_stream_lost = observer, on_stream_lost
        self.servers: dict[str, PoolServer] = {}
        self.registrar: Registrar | None = None
        self._lost: list[tuple[PoolServer, int]] = []
        self._lost_lock = threading.Lock()

    def serve(self, tree: DeviceTree, *, refused: frozenset[str] = frozenset(),
              wires: Mapping[str, bytes] | None = None) -> None:
        """Serve and register every pool of ``tree`` but the ``refused`` ones.

        ``wires``: ``tree``'s ListAndWatch messages, serialized, where made already (the start's check).
        """
        registrations = []
        for resource, devices in tree.items():
            if resource in refused:
                continue
            server = PoolServer(devices, socket_path=self._kubelet_dir / socket_name(resource),
                                install_dir=self._install_dir, prefer=self._prefer, cdi=self._cdi,
                                observer=self._observer, on_stream_lost=self._stream_lost, config_ok=self._config_ok,
                                wire=(wires or {}).get(resource))
            server.start()
            self.servers[resource] = server
            registrations.append(Registration(resource, server.socket_path.name, options_message(devices)))
            events.info("serving", f"serving {resource} on {server.socket_path}: {len(devices.devices)} devices, "
                        f"{devices.healthy} healthy", resource=resource, socket=str(server.socket_path),
                        devices=len(devices.devices), healthy=devices.healthy)
        servers = dict(self.servers)
        self.registrar = Registrar(self.kubelet_socket, registrations, self._observer,
                                   served=lambda resource: servers[resource].socket_is_mine(),
                                   outage=self.registrar is not None and self.registrar.outage)
        self.registrar.start()

    def stop(self, *, wait: bool = True) -> None:
        """Let a Register already sent finish (``wait``), end the streams, stop the servers.

        A Register in flight when the servers are replaced would otherwise
        have the kubelet dial the new server at the same socket path: a second
        client of one pool whose late end then disconnects the new one.
        """
        if self.registrar is not None:
            self.registrar.cancel(wait=wait)
        stopped = [server.stop() for server in self.servers.values()]
        for done in stopped:
            done.wait()
        for server in self.servers.values():
            server.remove_socket()
        self.servers.clear()

    def update(self, resource: str, devices: PoolDevices) -> None:
        if resource in self.servers:
            self.servers[resource].update(devices)

    def registered_resources(self) -> frozenset[str]:
        """Resources registered with the kubelet now listening whose stream it holds (``cmk_pool_registered``).

        A registration alone is not enough: the kubelet may have ended the
        stream since, and then allocatable is 0 however long ago it registered.
        """
        registrar, current, servers = self.registrar, socket_identity(self.kubelet_socket), dict(self.servers)
        if registrar is None or current is None:
            return frozenset()
        return frozenset(r for r, identity in registrar.registered_with().items()
                         if identity == current and r in servers and servers[r].streaming)

    def kubelet_restarted(self, gone: set[str], kubelet_socket_created: bool) -> str:
        """Why a pool may still be tied to a kubelet that is gone (serve anew), or "" (at most retry now)."""
        ours = {server.socket_path.name: server for server in self.servers.values()}
        if any(name in ours and not ours[name].socket_is_mine() for name in gone):
            return "a plugin socket of ours was removed"
        current = socket_identity(self.kubelet_socket)
        registrar = self.registrar
        if not kubelet_socket_created or current is None or registrar is None:
            return ""
        if any(identity != current for identity in registrar.registered_with().values()):
            return "registered with a kubelet that is gone"  # its streams must end first
        registrar.retry_now()  # nothing tied to an old kubelet: just stop waiting out the backoff
        return ""

    def _stream_lost(self, server: PoolServer, stream: int) -> None:
        """From a server's worker thread: the kubelet ended ``stream`` (its number on that server)."""
        with self._lost_lock:
            self._lost.append((server, stream))
        self._on_stream_lost()

    def register_lost(self) -> None:
        """Register again each pool whose last stream the kubelet ended (after a restart: none of the old servers)."""
        with self._lost_lock:
            lost, self._lost = self._lost, []
        registrar = self.registrar
        for server, stream in lost:
            if registrar is None or self.servers.get(server.resource) is not server:
                continue  # a server we replaced since
            if server.opened != stream or server.streaming:
                continue  # the kubelet opened a newer stream: registered already
            if registrar.again(server.resource):
                events.info("stream_lost", f"the kubelet ended the ListAndWatch stream of {server.resource} and will not "
                            "dial back: registering it again", resource=server.resource)
