"""The kubelet stand-in: the device-plugin half of a kubelet, over real unix sockets.

No kubelet can be installed here, yet the daemon must be proven against one.
This class does what ``docs/kubelet-contract.md`` says a kubelet 1.28-1.36 does,
and never less strictly: it is the reference the daemon's protocol tests and
``cmk demo`` run against. Pure rules live in ``nodedevices``, ``pods`` and
``answers``; this module only wires them to gRPC, threads and the socket
directory.

Thread safety: one re-entrant condition guards all state; plugin RPCs are
made outside it; pod admissions are serialized like the kubelet's sync loop.
"""

from __future__ import annotations

import logging
import random
import stat
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Self

import grpc

from api.constants import (
    API_VERSION,
    KUBELET_SOCKET_NAME,
    UNHEALTHY,
    validate_resource_name,
)
from api.podresources.v1 import podresources_pb2_grpc
from api.v1beta1 import deviceplugin_pb2 as pb
from api.v1beta1 import deviceplugin_pb2_grpc as pb_grpc
from deviceplugin.errors import CmkError
from deviceplugin.kubelet.server import MAX_SOCKET_PATH
from deviceplugin.standin.answers import Conflict, merge_answers
from deviceplugin.standin.nodedevices import Device, NodeDevices
from deviceplugin.standin.plugin_client import (
    PluginCallError,
    PluginClient,
    PluginOptions,
)
from deviceplugin.standin.podresources import PodResourcesServicer
from deviceplugin.standin.pods import (
    AdmissionError,
    AdmittedContainer,
    AdmittedPod,
    ContainerSpec,
    PodSpec,
    choose_devices,
    shuffled,
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


def remove_sockets(directory: Path) -> None:
    """What a starting kubelet does to the device plugin directory: unlink every socket, keep other files."""
    for entry in directory.iterdir():
        try:
            if stat.S_ISSOCK(entry.lstat().st_mode):
                entry.unlink()
        except FileNotFoundError:
            pass


def _check_socket_path(path: Path) -> None:
    if len(str(path)) > MAX_SOCKET_PATH:
        raise CmkError(f"socket path {path} is {len(str(path))} characters; unix sockets allow {MAX_SOCKET_PATH}: use a shorter directory")


class _RegistrationServicer(pb_grpc.RegistrationServicer):
    def __init__(self, kubelet: Kubelet) -> None:
        self._kubelet = kubelet

    def Register(self, request: pb.RegisterRequest, context: grpc.ServicerContext) -> pb.Empty:
        return self._kubelet._register(request, context)


class Kubelet:
    """A kubelet's device manager serving ``<plugin_dir>/kubelet.sock`` (and pod resources, if asked).

    ``grace_period`` is how long a resource whose stream ended keeps its
    capacity (the kubelet's 5 minutes); ``seed`` fixes the random orders the
    kubelet walks maps and sets in.
    """

    def __init__(
        self,
        plugin_dir: Path,
        *,
        pod_resources_socket: Path | None = None,
        grace_period: float = 300.0,
        dial_timeout: float = 10.0,
        rpc_timeout: float = 30.0,
        seed: int | None = None,
        workers: int = 16,
    ) -> None:
        self.plugin_dir = Path(plugin_dir)
        self.socket = self.plugin_dir / KUBELET_SOCKET_NAME
        self.pod_resources_socket = pod_resources_socket
        for path in (self.socket, pod_resources_socket):
            if path is not None:
                _check_socket_path(path)
        self._dial_timeout = dial_timeout
        self._rpc_timeout = rpc_timeout
        self._workers = workers
        self._rng = random.Random(seed)
        self._cond = threading.Condition(threading.RLock())
        self._admit_lock = threading.Lock()
        self._node = NodeDevices(grace_period)
        self._endpoints: dict[str, _Endpoint] = {}
        self._clients: list[PluginClient] = []
        self._generation = 0  # bumped by stop/restart: events from an older kubelet "process" are ignored
        self._servers: list[grpc.Server] = []
        self._pods: dict[tuple[str, str], AdmittedPod] = {}
        self._registrations: list[Registration] = []
        self._violations: list[str] = []

    # -- life cycle -------------------------------------------------------

    def start(self) -> None:
        """Start like a kubelet: wipe the sockets in the plugin directory, then serve ``kubelet.sock``."""
        with self._cond:
            if self._servers:
                raise RuntimeError("the kubelet stand-in is already serving")
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        remove_sockets(self.plugin_dir)
        servers = [self._serve(self.socket, lambda s: pb_grpc.add_RegistrationServicer_to_server(_RegistrationServicer(self), s))]
        if self.pod_resources_socket is not None:
            self.pod_resources_socket.parent.mkdir(parents=True, exist_ok=True)
            self.pod_resources_socket.unlink(missing_ok=True)
            servicer = PodResourcesServicer(self.pods, self._healthy_devices)
            servers.append(
                self._serve(self.pod_resources_socket, lambda s: podresources_pb2_grpc.add_PodResourcesListerServicer_to_server(servicer, s))
            )
        with self._cond:
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
        with self._cond:
            servers, self._servers = self._servers, []
            clients, self._clients = self._clients, []
            self._endpoints.clear()
            self._generation += 1
            self._cond.notify_all()
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
        with self._cond:
            self._node.kubelet_restarted(time.monotonic())
            self._cond.notify_all()
        self.start()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- registration and ListAndWatch --------------------------------------

    def _register(self, request: pb.RegisterRequest, context: grpc.ServicerContext) -> pb.Empty:
        resource = request.resource_name
        problem = registration_problem(request)
        if problem:
            log.warning("registration refused: %s", problem)
            context.abort(grpc.StatusCode.UNKNOWN, problem)
        with self._cond:
            generation = self._generation
        try:
            # The dial-back and options call happen before Register answers: a plugin
            # whose server has no free worker now never gets its Register answered.
            client = PluginClient(
                resource, self.plugin_dir / request.endpoint, dial_timeout=self._dial_timeout, rpc_timeout=self._rpc_timeout
            )
        except PluginCallError as error:
            context.abort(grpc.StatusCode.UNKNOWN, str(error))
        try:
            options = client.get_options()
        except PluginCallError as error:
            client.close()
            context.abort(grpc.StatusCode.UNKNOWN, str(error))
        registration = Registration(resource, request.endpoint, PluginOptions.from_pb(request.options), options)
        with self._cond:
            if generation != self._generation:
                client.close()
                context.abort(grpc.StatusCode.UNAVAILABLE, "kubelet is restarting; register again on the new kubelet.sock")
            self._endpoints[resource] = _Endpoint(client, options)
            self._clients.append(client)
            self._node.registered(resource)
            self._registrations.append(registration)
            self._cond.notify_all()
        log.info("registered %s at %s with options %s", resource, request.endpoint, options)
        # The kubelet starts its ListAndWatch goroutine before Register returns, so a
        # plugin may see the stream open before its own Register call comes back.
        client.watch(
            lambda devices: self._on_snapshot(resource, generation, devices),
            lambda reason: self._on_stream_end(resource, generation, client, reason),
        )
        return pb.Empty()

    def _on_snapshot(self, resource: str, generation: int, devices: list[Device]) -> None:
        with self._cond:
            if generation != self._generation:
                return
            self._violations.extend(self._node.snapshot(resource, devices))
            self._cond.notify_all()
            now = time.monotonic()
            log.info(
                "%s: capacity %d allocatable %d",
                resource,
                self._node.capacity(now).get(resource, 0),
                self._node.allocatable(now).get(resource, 0),
            )

    def _on_stream_end(self, resource: str, generation: int, client: PluginClient, reason: str) -> None:
        try:
            self._stream_ended(resource, generation, client, reason)
        finally:
            client.close()  # whatever the stream's fate meant for the registration, its channel is done

    def _stream_ended(self, resource: str, generation: int, client: PluginClient, reason: str) -> None:
        with self._cond:
            if client in self._clients:
                self._clients.remove(client)
            current = self._endpoints.get(resource)
            if generation != self._generation or current is None:
                return
            if current.client is not client:
                # The kubelet disconnects whichever client is registered now (runClient ->
                # getClient(name)): an old stream ending late kills the new registration.
                self._violations.append(
                    f"{resource}: an older ListAndWatch stream ended after a newer registration, which made the "
                    "kubelet drop the newer one; stop the old server before registering again"
                )
            del self._endpoints[resource]
            self._node.stream_ended(resource, time.monotonic())
            self._cond.notify_all()
        current.client.close()
        log.warning("%s: ListAndWatch ended (%s); its devices are unhealthy until it registers again", resource, reason)

    # -- what the node reports --------------------------------------------------

    def capacity(self) -> dict[str, int]:
        with self._cond:
            return self._node.capacity(time.monotonic())

    def allocatable(self) -> dict[str, int]:
        with self._cond:
            return self._node.allocatable(time.monotonic())

    def devices(self, resource: str) -> dict[str, Device]:
        """The latest ListAndWatch snapshot of ``resource`` (all unhealthy once its stream ended)."""
        with self._cond:
            return self._node.devices(resource)

    def _healthy_devices(self) -> dict[str, list[Device]]:
        with self._cond:
            now = time.monotonic()
            return {
                r: [d for d in self._node.devices(r).values() if d.healthy]
                for r in self._node.capacity(now)
                if self._node.known(r, now)
            }

    def registrations(self) -> list[Registration]:
        with self._cond:
            return list(self._registrations)

    def options(self, resource: str) -> PluginOptions | None:
        """The options in effect for the live registration of ``resource``."""
        with self._cond:
            endpoint = self._endpoints.get(resource)
            return endpoint.options if endpoint else None

    def violations(self) -> list[str]:
        """Plugin behaviour a real kubelet tolerates silently but that breaks it (tests expect none)."""
        with self._cond:
            return list(self._violations)

    def conflicts(self) -> list[Conflict]:
        """Allocate answer values the kubelet dropped when merging, over all admitted pods."""
        with self._cond:
            return [c for pod in self._pods.values() for c in pod.conflicts]

    def pods(self) -> list[AdmittedPod]:
        with self._cond:
            return [self._pods[key] for key in sorted(self._pods)]

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
        """Block until ``predicate()`` holds (re-checked on every state change); TimeoutError shows the state."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(
                        f"{what} not met within {timeout:g} s; capacity {self.capacity()}, "
                        f"allocatable {self.allocatable()}, registered {[r.resource for r in self._registrations]}"
                    )
                # Capped so that time-based changes (the grace period) are seen too.
                self._cond.wait(min(remaining, 0.1))

    # -- pods ----------------------------------------------------------------------

    def admit(self, pod: PodSpec) -> AdmittedPod:
        """Admit and start ``pod`` as the kubelet's device manager would, or raise AdmissionError.

        A rejected pod holds nothing afterwards: its devices are only
        recorded once every container got its answer.
        """
        with self._admit_lock:
            key = (pod.namespace, pod.name)
            with self._cond:
                if key in self._pods:
                    raise AdmissionError(f"pod {pod.namespace}/{pod.name} is already admitted; delete it first")
            reusable: dict[str, set[str]] = {}
            held: dict[str, set[str]] = {}
            containers: list[AdmittedContainer] = []
            try:
                for init, spec in [(True, c) for c in pod.init_containers] + [(False, c) for c in pod.containers]:
                    admitted = self._admit_container(spec, init, reusable, held)
                    containers.append(admitted)
                    for resource, ids in admitted.device_ids.items():
                        if init:  # the kubelet's devicesToReuse: init devices pass on to later containers
                            reusable.setdefault(resource, set()).update(ids)
                        else:
                            reusable.get(resource, set()).difference_update(ids)
                for container in containers:
                    self._pre_start(container)
            except (AdmissionError, PluginCallError) as error:
                log.warning("pod %s/%s rejected: %s", pod.namespace, pod.name, error)
                raise AdmissionError(f"pod {pod.namespace}/{pod.name} rejected: {error}") from None
            result = AdmittedPod(pod.name, pod.namespace, tuple(containers))
            with self._cond:
                self._pods[key] = result
                self._cond.notify_all()
            return result

    def _admit_container(
        self, spec: ContainerSpec, init: bool, reusable: dict[str, set[str]], held: dict[str, set[str]]
    ) -> AdmittedContainer:
        answers = []
        devices: dict[str, tuple[Device, ...]] = {}
        for resource in shuffled(spec.limits, self._rng):  # Go map order
            count = spec.limits[resource]
            if count <= 0 or validate_resource_name(resource) is not None:
                continue  # cpu, memory and the like are not the device manager's business
            with self._cond:
                endpoint = self._endpoints.get(resource)
                if endpoint is None:
                    state = "its plugin's ListAndWatch ended" if resource in self._node.capacity(time.monotonic()) else "no device plugin registered it"
                    raise AdmissionError(f"container {spec.name!r}: cannot allocate {resource}: {state}")
                in_use = held.get(resource, set()).union(*(p.ids_in_use(resource) for p in self._pods.values()))
                free = self._node.healthy_ids(resource) - in_use
                snapshot = self._node.devices(resource)
            prefer = endpoint.client.preferred if endpoint.options.get_preferred_allocation_available else None
            ids = choose_devices(resource, count, reusable.get(resource, ()), free, prefer, self._rng)
            held.setdefault(resource, set()).update(ids)
            answers.append((resource, endpoint.client.allocate(ids)))
            devices[resource] = tuple(snapshot.get(i, Device(i, UNHEALTHY)) for i in ids)
        merged, conflicts = merge_answers(spec.name, answers)
        for conflict in conflicts:
            log.warning("%s", conflict)
        return AdmittedContainer(spec.name, spec.command, init, devices, merged, tuple(conflicts))

    def _pre_start(self, container: AdmittedContainer) -> None:
        """PreStartContainer before the container starts, for each plugin that asked for it."""
        for resource, ids in container.device_ids.items():
            with self._cond:
                endpoint = self._endpoints.get(resource)
            if endpoint is None:
                raise AdmissionError(f"container {container.name!r}: {resource} plugin went away before the start")
            if endpoint.options.pre_start_required:
                endpoint.client.pre_start(ids)

    def delete_pod(self, name: str, namespace: str = "default") -> None:
        """Forget the pod: its devices are free again. The plugin is not told (there is no deallocate)."""
        with self._cond:
            if self._pods.pop((namespace, name), None) is None:
                raise CmkError(f"no admitted pod {namespace}/{name}; admitted: {[f'{n}/{p}' for n, p in sorted(self._pods)]}")
            self._cond.notify_all()
