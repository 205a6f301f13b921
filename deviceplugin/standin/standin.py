"""The kubelet stand-in: the device-plugin half of a kubelet, over real unix sockets.

No kubelet can be installed here, yet the daemon must be proven against one.
This class does what ``docs/design/kubelet-contract.md`` says a kubelet 1.28-1.36 does,
and never less strictly: it is the reference the daemon's protocol tests and
``cmk demo`` run against. Pure rules live in ``nodedevices``, ``pods`` and
``answers``; the device manager (``devicemanager``) and the pods
(``admission``) are its two halves; this module starts, stops and restarts
them with the servers and the socket directory.
"""

from __future__ import annotations

import logging
import stat
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Self

import grpc

from api.constants import KUBELET_SOCKET_NAME
from api.podresources.v1 import podresources_pb2_grpc
from api.v1beta1 import deviceplugin_pb2 as pb
from api.v1beta1 import deviceplugin_pb2_grpc as pb_grpc
from deviceplugin.errors import CmkError
from deviceplugin.protocol.server import MAX_SOCKET_PATH
from deviceplugin.standin import lifecycle
from deviceplugin.standin.admission import Admission
from deviceplugin.standin.devicemanager import (
    DeviceManager,
    Registration,
    registration_problem,
)
from deviceplugin.standin.nodedevices import Device
from deviceplugin.standin.options import KubeletOptions
from deviceplugin.standin.plugin_client import PluginOptions
from deviceplugin.standin.podresourcesserver import PodResourcesServicer
from deviceplugin.standin.pods import AdmittedPod, PodSpec
from deviceplugin.standin.runoptions import Conflict, ContainerAnswer

__all__ = ["Kubelet", "KubeletOptions", "Registration", "registration_problem", "remove_sockets"]

log = logging.getLogger(__name__)


SWEEP_GAP_SECONDS = 0.005  # between the listing and each unlink: the window the real sweep leaves open


def remove_sockets(directory: Path, gap: float = SWEEP_GAP_SECONDS) -> None:
    """What a starting kubelet does to the device plugin directory: unlink every socket, keep other files.

    As the kubelet's ``removeContents`` does: list the names first, then stat and unlink each. A
    plugin that rebinds its socket between the listing and the unlink loses the new socket: the
    real kubelet does that to a daemon that reacts to the restart quickly, so the stand-in must too.
    """
    for name in [entry.name for entry in directory.iterdir()]:
        time.sleep(gap)
        path = directory / name
        try:
            if stat.S_ISSOCK(path.stat().st_mode):
                path.unlink()
        except FileNotFoundError:
            pass


def _check_socket_path(path: Path) -> None:
    if len(str(path)) > MAX_SOCKET_PATH:
        raise CmkError(f"socket path {path} is {len(str(path))} characters; unix sockets allow {MAX_SOCKET_PATH}: use a shorter directory")


class _RegistrationServicer(pb_grpc.RegistrationServicer):
    def __init__(self, devices: DeviceManager) -> None:
        self._devices = devices

    def Register(self, request: pb.RegisterRequest, context: grpc.ServicerContext) -> pb.Empty:
        return self._devices.register(request, context)


class Kubelet:
    """A kubelet serving ``<plugin_dir>/kubelet.sock`` (and pod resources, if asked): its two halves, started together.

    ``options`` (:class:`KubeletOptions`) says what differs from a default kubelet.
    """

    def __init__(self, plugin_dir: Path, options: KubeletOptions | None = None) -> None:
        options = options or KubeletOptions()
        self.plugin_dir = Path(plugin_dir)
        self.version = options.version
        self.gates = lifecycle.feature_gates(options.version, options.feature_gates)
        self._static_cpus = tuple(options.static_cpus)
        self.socket = self.plugin_dir / KUBELET_SOCKET_NAME
        self.pod_resources_socket = options.pod_resources_socket
        for path in (self.socket, options.pod_resources_socket):
            if path is not None:
                _check_socket_path(path)
        self._workers = options.workers
        self._servers: list[grpc.Server] = []
        self._devices = DeviceManager(self.plugin_dir, options)
        self._pods = Admission(self._devices, options, cdi_enabled=self.gates[lifecycle.CDI_GATE])
        self.topology_policy, self.numa_nodes = self._pods.topology_policy, self._pods.numa_nodes

    # -- life cycle -------------------------------------------------------

    def start(self) -> None:
        """Start like a kubelet: wipe the sockets in the plugin directory, then serve ``kubelet.sock``."""
        with self._devices.cond:
            if self._servers:
                raise RuntimeError("the kubelet stand-in is already serving")
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        remove_sockets(self.plugin_dir)
        registration = _RegistrationServicer(self._devices)
        servers = [self._serve(self.socket, lambda s: pb_grpc.add_RegistrationServicer_to_server(registration, s))]
        if self.pod_resources_socket is not None:
            self.pod_resources_socket.parent.mkdir(parents=True, exist_ok=True)
            self.pod_resources_socket.unlink(missing_ok=True)
            servicer = PodResourcesServicer(self.pods, self._devices.healthy_devices,
                                            get_enabled=self.gates[lifecycle.GET_GATE],
                                            static_cpus=self._static_cpus)
            servers.append(
                self._serve(self.pod_resources_socket, lambda s: podresources_pb2_grpc.add_PodResourcesListerServicer_to_server(servicer, s))
            )
        with self._devices.cond:
            self._servers = servers
        log.info("kubelet stand-in serving %s", self.socket)

    def _serve(self, path: Path, add: Callable[[grpc.Server], None]) -> grpc.Server:
        server = grpc.server(ThreadPoolExecutor(max_workers=self._workers, thread_name_prefix="kubelet"))
        add(server)
        try:
            bound = server.add_insecure_port(f"unix://{path}")
        except RuntimeError:
            bound = 0
        if not bound:
            raise CmkError(f"cannot listen on {path}: check that the directory is writable and nothing else serves there")
        server.start()
        return server

    def stop(self) -> None:
        """The kubelet process ends: its servers and plugin connections go away, its sockets are unlinked."""
        with self._devices.cond:  # re-entrant: servers and endpoints end in one step, as before the split
            servers, self._servers = self._servers, []
            clients = self._devices.end()
        for server in servers:
            server.stop(None).wait()
        for client in clients:
            client.close()
        for path in (self.socket, self.pod_resources_socket):
            if path is not None:
                path.unlink(missing_ok=True)

    def restart(self) -> None:
        """A kubelet restart: pods keep their devices (checkpoint), every resource reads 0 until re-registered."""
        self.stop()
        self._devices.restarted()
        self.start()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the device manager half ------------------------------------------------

    def capacity(self) -> dict[str, int]:
        return self._devices.capacity()

    def allocatable(self) -> dict[str, int]:
        return self._devices.allocatable()

    def devices(self, resource: str) -> dict[str, Device]:
        return self._devices.devices(resource)

    def registrations(self) -> list[Registration]:
        return self._devices.registrations()

    def options(self, resource: str) -> PluginOptions | None:
        return self._devices.options(resource)

    def violations(self) -> list[str]:
        return self._devices.violations()

    def orphaned(self, resource: str) -> bool:
        return self._devices.orphaned(resource)

    def drop_stream(self, resource: str) -> None:
        self._devices.drop_stream(resource)

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 30.0, what: str = "condition") -> None:
        self._devices.wait_for(predicate, timeout, what)

    # -- the pods half ---------------------------------------------------------------

    def admit(self, pod: PodSpec) -> AdmittedPod:
        return self._pods.admit(pod)

    def pods(self) -> list[AdmittedPod]:
        return self._pods.pods()

    def conflicts(self) -> list[Conflict]:
        return self._pods.conflicts()

    def delete_pod(self, name: str, namespace: str = "default") -> None:
        self._pods.delete_pod(name, namespace)

    def start_container(self, pod: str, container: str, namespace: str = "default") -> ContainerAnswer:
        return self._pods.start_container(pod, container, namespace)

    def exit_container(self, pod: str, container: str, namespace: str = "default") -> None:
        self._pods.exit_container(pod, container, namespace)

    def readmit(self) -> dict[tuple[str, str], str]:
        return self._pods.readmit()

    def starts(self, pod: str, container: str, namespace: str = "default") -> int:
        return self._pods.starts(pod, container, namespace)
