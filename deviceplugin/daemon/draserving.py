"""DRA mode's serving: the pools as one DRA driver, in place of the device plugins' servers.

The supervisor runs it exactly as it runs :class:`~deviceplugin.daemon.serving.PoolServers`
(serve, update, stop), so planning, CPU hotplug, held cores, the CDI spec and IRQ steering are the
device-plugin mode's own. What differs: two sockets (the plugin watcher's registration and the
``dra/v1`` service, :mod:`deviceplugin.protocol.draplugin`) and the ResourceSlices, published from a
thread of their own so the supervisor never waits on the API server. A device a device plugin's
container still holds (the node was in device-plugin mode) stays out of the slices until the
kubelet frees it. Why it works this way: ``docs/design/dra.md``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import grpc

from deviceplugin.daemon.settings import DaemonSettings
from deviceplugin.events import EventLog
from deviceplugin.host.claimfile import ClaimFile
from deviceplugin.model.claims import AllocatedDevice, ClaimError
from deviceplugin.model.devices import DeviceTree, PoolDevices
from deviceplugin.model.drahealth import device_health
from deviceplugin.model.resourceslices import DRIVER_NAME, resource_slices, unheld
from deviceplugin.protocol.drahealth import HealthWatch
from deviceplugin.protocol.draplugin import ClaimSource, DraPlugin, Registration, serve
from deviceplugin.protocol.server import PoolServer, ReadyHealth

events = EventLog(__name__)

#: The registration socket's name in the plugins registry, as the kubelet plugin library names it.
REGISTRATION_SOCKET = f"{DRIVER_NAME}-reg.sock"
#: In ``--plugins-dir``/``<driver>``: the ``dra/v1`` socket and the prepared claims.
SERVICE_SOCKET = "dra.sock"
CHECKPOINT = "claims.json"
#: Seconds between publish attempts while the API server refuses, doubling up to the most.
RETRY, RETRY_MAX = 5.0, 60.0
#: Seconds between checks that the API server still has the slices as published.
RESYNC = 60.0

#: slices for a generation: the publisher picks the generation from what the API server holds
SlicesAt = Callable[[int], list[dict[str, Any]]]


@dataclass(frozen=True)
class DraLink:
    """What DRA mode reaches beyond the kubelet: the node's name, where slices go, where claims are read."""

    node_name: str
    #: publish the node's slices (replacing the ones it has): True if anything was written; raises on a refusal
    publish: Callable[[SlicesAt], bool]
    claims: ClaimSource
    #: the device plugins' holdings (resource -> IDs) from pod resources; None when unknown
    held: Callable[[], Mapping[str, frozenset[str]] | None] = dict


class DraServing:
    """One DRA driver for every pool of the tree: registration, ``dra/v1``, and the slices kept in step."""

    def __init__(self, settings: DaemonSettings, tree: DeviceTree, isolated: frozenset[int], link: DraLink, *,
                 recheck: float) -> None:
        self._link, self._isolated, self._recheck = link, isolated, recheck
        self._config_ok = settings.config_problem is None
        self.sockets = DriverSockets(settings)
        self.checkpoint = checkpoint_path(settings)
        self._tree: DeviceTree = tree
        self._refused: frozenset[str] = frozenset()
        #: the tree but the refused pools: what the slices and the health stream hold
        self._served: DeviceTree = {}
        self._plugin: DraPlugin | None = None
        #: the PoolServers interface: DRA mode has no device-plugin servers
        self.servers: dict[str, PoolServer] = {}
        self._published = False
        self._wake = threading.Condition()
        self._dirty = False
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._watch = HealthWatch()

    # --- the supervisor's interface (PoolServers') ------------------------------------------

    def serve(self, tree: DeviceTree, *, refused: frozenset[str] = frozenset(),
              wires: Mapping[str, bytes] | None = None) -> None:
        """Serve both sockets and publish ``tree`` but the ``refused`` pools (``wires``: device plugins' only)."""
        if self._plugin is None:  # one plugin for the process: its prepared claims outlive re-serving
            self._plugin = DraPlugin(tree, self._link.claims, ClaimFile(self.checkpoint),
                                     pool_name=self._link.node_name, where=str(self.checkpoint))
        self.sockets.start(self._plugin, ready=lambda: self._published, config_ok=self._config_ok,
                           on_registered=self._registered, watch=self._watch)
        self._want(tree, refused)
        if self._thread is None:
            self._thread = threading.Thread(target=self._publish_loop, name="cmk-dra-publish", daemon=True)
            self._thread.start()

    def update(self, resource: str, devices: PoolDevices) -> None:
        self._want({**self._tree, resource: devices}, self._refused)

    def stop(self, *, wait: bool = True) -> None:
        """Stop both servers and remove their sockets (the kubelet then drops the plugin); the slices stay.

        A restarted daemon publishes them again; one leaving DRA mode deletes them at its start.
        """
        self.sockets.stop()
        if not wait:  # the process is exiting: the publisher goes with it
            with self._wake:
                self._stopping = True
                self._wake.notify()

    def registered_resources(self) -> frozenset[str]:
        """Every pool served, once the kubelet registered the driver and its slices are published."""
        if not self.sockets.registered or not self._published:
            return frozenset()
        return frozenset(self._tree) - self._refused

    def kubelet_restarted(self, gone: set[str], kubelet_socket_created: bool) -> str:
        """Nothing to do: a new kubelet's plugin watcher finds the registration socket where it is."""
        return ""

    def register_lost(self) -> None:
        """No streams in DRA mode."""

    @property
    def prepared(self) -> int:
        """Claims prepared now (for the log and ``cmk describe``)."""
        return 0 if self._plugin is None else len(self._plugin.prepared)

    # --- the slices ----------------------------------------------------------------------------

    def _want(self, tree: DeviceTree, refused: frozenset[str]) -> None:
        served = {resource: devices for resource, devices in tree.items() if resource not in refused}
        self._watch.update(device_health(served, self._link.node_name))
        with self._wake:
            self._tree, self._refused, self._served, self._dirty = tree, refused, served, True
            self._wake.notify()

    def _slices(self, tree: DeviceTree, generation: int) -> list[dict[str, Any]]:
        return resource_slices(tree, self._isolated, node_name=self._link.node_name, generation=generation)

    def _publish_loop(self) -> None:
        """Publish at every change, and every :data:`RESYNC` seconds, since others delete the slices.

        The kubelet deletes its node's slices when it starts (no driver is registered then), so a
        publish follows every registration too; one whose content the API server has already writes
        nothing (two requests). Retried while the API server refuses.
        """
        last: DeviceTree | None = None
        retry, holding = RETRY, False
        known: Mapping[str, frozenset[str]] = {}
        while True:
            with self._wake:
                if not self._dirty and not self._stopping:
                    self._wake.wait(self._recheck if holding else RESYNC)  # a held device freed: publish it
                if self._stopping:
                    return
                self._dirty = False
                served = self._served
            read = self._link.held()
            holding = read is None or any(read.values())
            held = known if read is None else read  # unread: as last read (none at the first, said so)
            known = held
            want = unheld(served, held)
            try:
                wrote = self._link.publish(partial(self._slices, want))
            except Exception as err:  # noqa: BLE001 - the API server's refusal or any surprise: say it, try again
                events.warning("slices_unpublished", f"cannot publish the ResourceSlices of node {self._link.node_name}: "
                               f"{err} (retrying in {retry:g} s)", node=self._link.node_name, error=str(err),
                               retry_seconds=retry)
                with self._wake:
                    self._wake.wait(retry)
                    self._dirty = True
                retry = min(retry * 2, RETRY_MAX)
                continue
            retry, self._published = RETRY, True
            if wrote or want != last:
                devices = {d.resource: d.healthy for d in want.values()}
                out = sum(len(ids) for ids in held.values())
                events.info("slices_published", f"published the ResourceSlices of node {self._link.node_name}: "
                            + ", ".join(f"{r} {n}" for r, n in devices.items())
                            + (f"; {out} devices still held by device-plugin containers left out" if out else ""),
                            node=self._link.node_name, devices=devices, held_out=out)
            last = want

    def _registered(self) -> None:
        """From a gRPC thread: the kubelet registered the driver (after its restart, its slices are gone)."""
        with self._wake:
            self._dirty = True
            self._wake.notify()


class DriverSockets:
    """The driver's two sockets: the plugin watcher's registration and the ``dra/v1`` service."""

    def __init__(self, settings: DaemonSettings) -> None:
        self.registration_socket = settings.plugins_registry_dir / REGISTRATION_SOCKET
        self.service_socket = service_socket(settings.plugins_dir)
        self._registration: Registration | None = None
        self._servers: list[grpc.Server] = []

    def start(self, plugin: DraPlugin, *, ready: Callable[[], bool], config_ok: bool,
              on_registered: Callable[[], None] | None = None, watch: HealthWatch | None = None) -> None:
        """Serve ``plugin`` (and ``watch``, the devices' health), then registration: the kubelet dials the service
        as soon as it hears of it.

        ``ready``: what the service socket's health check (``cmk probe``) says beyond the registration.
        """
        self.service_socket.parent.mkdir(parents=True, exist_ok=True)
        self.registration_socket.parent.mkdir(parents=True, exist_ok=True)
        health = ReadyHealth(DRIVER_NAME, lambda: self.registered and ready(), lambda: config_ok)
        self._servers.append(serve(self.service_socket, plugin, health, watch))
        self._registration = Registration(self.service_socket, on_registered=on_registered)
        self._servers.append(serve(self.registration_socket, self._registration))
        events.info("dra_serving", f"serving DRA driver {DRIVER_NAME} on {self.service_socket}, registration at "
                    f"{self.registration_socket}", driver=DRIVER_NAME, socket=str(self.service_socket),
                    registration=str(self.registration_socket))

    def stop(self) -> None:
        """Stop both and remove the sockets: the kubelet's plugin watcher then drops the driver."""
        for server in self._servers:
            server.stop(None).wait()
        self._servers.clear()
        for socket in (self.registration_socket, self.service_socket):
            socket.unlink(missing_ok=True)
        self._registration = None

    @property
    def registered(self) -> bool:
        """The kubelet said it registered the driver on the sockets served now."""
        registration = self._registration
        return registration is not None and bool(registration.status.registered)


class NoNewClaims:
    """The claim source of a node back in device-plugin mode: its slices are gone, so nothing new is prepared."""

    def allocated(self, namespace: str, name: str, uid: str) -> Sequence[AllocatedDevice]:
        raise ClaimError(f"this node serves the cmk pools through device plugins now (mode device-plugin), so claim "
                         f"{namespace}/{name} cannot be prepared here: delete the pod so it is scheduled again")


class LeftoverClaims:
    """Device-plugin mode on a node whose DRA mode left prepared claims: their pods still run on those cores.

    Until the kubelet unprepares the last of them (their pods deleted), the driver stays registered
    so it can, nothing new is prepared, and the claims' cores stay out of the device plugins
    (``claimed``), so no CPU is given twice across a switch back.
    """

    def __init__(self, settings: DaemonSettings, tree: DeviceTree, on_unprepared: Callable[[], None]) -> None:
        self.sockets = DriverSockets(settings)
        self.checkpoint = checkpoint_path(settings)
        self._plugin = DraPlugin(tree, NoNewClaims(), ClaimFile(self.checkpoint), pool_name="",
                                 where=str(self.checkpoint), on_unprepared=on_unprepared)

    @classmethod
    def found(cls, settings: DaemonSettings, tree: DeviceTree,
              on_unprepared: Callable[[], None]) -> LeftoverClaims | None:
        """The leftover claims of this node's checkpoint; None when it holds none."""
        leftover = cls(settings, tree, on_unprepared)
        return leftover if leftover.claimed() is not None else None

    def start(self) -> None:
        claims = len(self._plugin.prepared)
        events.warning("dra_claims_left", f"{claims} claims DRA mode prepared are still held ({self.checkpoint}): their "
                       "cores stay out of the device plugins until the kubelet unprepares them (delete their pods)",
                       claims=claims, checkpoint=str(self.checkpoint))
        self.sockets.start(self._plugin, ready=lambda: True, config_ok=True)

    def claimed(self) -> frozenset[int] | None:
        """The CPUs prepared claims still hold; None once none is held."""
        prepared = self._plugin.prepared
        return frozenset(cpu for devices in prepared.values() for d in devices for cpu in d.cpus) if prepared else None

    def stop(self) -> None:
        self.sockets.stop()


def service_socket(plugins_dir: Path) -> Path:
    """The ``dra/v1`` socket in the kubelet's plugins directory (``cmk probe`` dials it too)."""
    return plugins_dir / DRIVER_NAME / SERVICE_SOCKET


def checkpoint_path(settings: DaemonSettings) -> Path:
    """Where DRA mode keeps its prepared claims (device-plugin mode reads it to keep their CPUs out)."""
    return settings.plugins_dir / DRIVER_NAME / CHECKPOINT
