"""The kubelet stand-in: the device-plugin half of a kubelet, over real unix sockets.

No kubelet can be installed here, yet the daemon must be proven against one.
This class does what ``docs/design/kubelet-contract.md`` says a kubelet 1.28-1.36 does,
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
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import partial
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
from deviceplugin.protocol.server import MAX_SOCKET_PATH
from deviceplugin.standin import lifecycle
from deviceplugin.standin.answers import Conflict, ContainerAnswer, merge_answers
from deviceplugin.standin.cdiresolve import unresolvable
from deviceplugin.standin.lifecycle import VERSIONS, ContainerStartError
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
from deviceplugin.standin.topologymanager import (
    TOPOLOGY_AFFINITY_ERROR,
    TOPOLOGY_AFFINITY_MESSAGE,
    Hint,
    TopologyPolicy,
    merge,
    resource_hints,
    split_by_affinity,
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
    def __init__(self, kubelet: Kubelet) -> None:
        self._kubelet = kubelet

    def Register(self, request: pb.RegisterRequest, context: grpc.ServicerContext) -> pb.Empty:
        return self._kubelet._register(request, context)


class Kubelet:
    """A kubelet's device manager serving ``<plugin_dir>/kubelet.sock`` (and pod resources, if asked).

    ``grace_period`` is how long a resource whose stream ended keeps its
    capacity (the kubelet's 5 minutes), measured on ``clock`` (a test passes
    its own to jump over it); ``seed`` fixes the random orders the kubelet
    walks maps and sets in. ``version`` (1.28 .. 1.36) and ``feature_gates``
    set what differs by version (``lifecycle.feature_gates``); ``cdi_dirs``
    are the runtime's CDI spec directories container starts resolve names
    against (None: the runtime has CDI off and ignores the names). ``static_cpus``
    non-empty: the kubelet runs CPU manager policy ``static`` handing out those
    CPUs (its pod resources API lists them); empty: policy ``none``.
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
        topology_policy: TopologyPolicy = TopologyPolicy.NONE,
        numa_nodes: Sequence[int] = (0,),
        clock: Callable[[], float] = time.monotonic,
        version: str = VERSIONS[-1],
        feature_gates: Mapping[str, bool] | None = None,
        cdi_dirs: Sequence[Path] | None = None,
        dial_delay: float = 0.0,
        static_cpus: Sequence[int] = (),
    ) -> None:
        self.plugin_dir = Path(plugin_dir)
        self.version = version
        self.gates = lifecycle.feature_gates(version, feature_gates)
        self._clock = clock
        self._cdi_dirs = None if cdi_dirs is None else tuple(Path(d) for d in cdi_dirs)
        self._dial_delay = dial_delay
        self.static_cpus = tuple(static_cpus)
        self._last_options: dict[str, PluginOptions] = {}
        self._not_running: set[tuple[str, str, str]] = set()
        self._starts: dict[tuple[str, str, str], int] = {}
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
        self.topology_policy = TopologyPolicy(topology_policy)
        self.numa_nodes = tuple(sorted(numa_nodes))

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
            servicer = PodResourcesServicer(self.pods, self._healthy_devices, get_enabled=self.gates[lifecycle.GET_GATE],
                                            static_cpus=self.static_cpus)
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
            self._node.kubelet_restarted(self._clock())
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
            with self._cond:
                self._violations.append(
                    f"{resource}: a Register sent before the plugin replaced its socket {request.endpoint} "
                    "completed against the new server; finish (or fail) a Register before binding the socket again"
                )
        registration = Registration(resource, request.endpoint, PluginOptions.from_pb(request.options), options)
        with self._cond:
            if generation != self._generation:
                client.close()
                context.abort(grpc.StatusCode.UNAVAILABLE, "kubelet is restarting; register again on the new kubelet.sock")
            self._endpoints[resource] = _Endpoint(client, options)
            self._last_options[resource] = options
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

    def _connect_failed(self, resource: str, generation: int) -> None:
        """The kubelet's connectClient failing: it deregisters whatever client holds the name.

        The new client had already replaced the older one in the registry, so the
        older live client is orphaned: the device manager keeps its endpoint (its
        devices stay as they were, Allocate still reaches it), but the end of its
        stream is never processed as a disconnect.
        """
        with self._cond:
            current = self._endpoints.get(resource)
            if generation == self._generation and current is not None and not current.orphaned:
                self._endpoints[resource] = replace(current, orphaned=True)
                log.warning("%s: re-registration failed; the live client is orphaned", resource)

    def orphaned(self, resource: str) -> bool:
        """Whether the resource's endpoint is a client the kubelet no longer tracks (see ``_connect_failed``)."""
        with self._cond:
            endpoint = self._endpoints.get(resource)
            return endpoint is not None and endpoint.orphaned

    def _on_snapshot(self, resource: str, generation: int, devices: list[Device]) -> None:
        with self._cond:
            if generation != self._generation:
                return
            self._violations.extend(self._node.snapshot(resource, devices))
            self._cond.notify_all()
            now = self._clock()
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
            self._node.stream_ended(resource, self._clock())
            self._cond.notify_all()
        current.client.close()
        log.warning("%s: ListAndWatch ended (%s); its devices are unhealthy until it registers again", resource, reason)

    def drop_stream(self, resource: str) -> None:
        """End one plugin's ListAndWatch from the kubelet's side, as a broken connection does.

        The kubelet then disconnects the resource (devices unhealthy, the grace
        period starts) and never dials the plugin again: recovering is the
        plugin's job. Returns once the kubelet has processed the end.
        """
        with self._cond:
            endpoint = self._endpoints.get(resource)
            if endpoint is None:
                raise CmkError(f"{resource} has no live stream to drop; live: {sorted(self._endpoints)}")
        endpoint.client.close()
        self.wait_for(lambda: self._endpoints.get(resource) is not endpoint, what=f"{resource} stream ended")

    # -- what the node reports --------------------------------------------------

    def capacity(self) -> dict[str, int]:
        with self._cond:
            return self._node.capacity(self._clock())

    def allocatable(self) -> dict[str, int]:
        with self._cond:
            return self._node.allocatable(self._clock())

    def devices(self, resource: str) -> dict[str, Device]:
        """The latest ListAndWatch snapshot of ``resource`` (all unhealthy once its stream ended)."""
        with self._cond:
            return self._node.devices(resource)

    def _healthy_devices(self) -> dict[str, list[Device]]:
        with self._cond:
            now = self._clock()
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

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 30.0, what: str = "condition") -> None:
        """Block until ``predicate()`` holds (re-checked on every state change); TimeoutError shows the state.

        The timeout bounds a hang, not a speed: a daemon starting on a loaded
        2-CPU CI machine took over 10 s to register (it returns as soon as the
        predicate holds, so a generous bound costs a passing test nothing).
        """
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
                        if init and not spec.restart_always:  # devicesToReuse: plain init devices pass on
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
        hint = self._topology_hint(spec, reusable, held)
        cached = []
        for resource in shuffled(spec.limits, self._rng):  # Go map order
            count = spec.limits[resource]
            if count <= 0 or validate_resource_name(resource) is not None:
                continue  # cpu, memory and the like are not the device manager's business
            with self._cond:
                if not self._node.ever_seen(resource):
                    continue  # the node status lacks it: admitted without Allocate, no env, no mount

                endpoint = self._endpoints.get(resource)
                if endpoint is None:
                    state = "its plugin's ListAndWatch ended" if resource in self._node.capacity(self._clock()) else "no device plugin registered it"
                    raise AdmissionError(f"container {spec.name!r}: cannot allocate {resource}: {state}")
                in_use = held.get(resource, set()).union(*(p.ids_in_use(resource) for p in self._pods.values()))
                free = self._node.healthy_ids(resource) - in_use
                snapshot = self._node.devices(resource)
            prefer = endpoint.client.preferred if endpoint.options.get_preferred_allocation_available else None
            ids = choose_devices(resource, count, reusable.get(resource, ()), free, prefer, self._rng,
                                 None if hint is None else partial(split_by_affinity, snapshot, hint=hint))
            held.setdefault(resource, set()).update(ids)
            answer = endpoint.client.allocate(ids)
            answers.append((resource, answer))
            cached.append((resource, answer))
            devices[resource] = tuple(snapshot.get(i, Device(i, UNHEALTHY)) for i in ids)
        merged, conflicts = merge_answers(spec.name, answers)
        for conflict in conflicts:
            log.warning("%s", conflict)
        if not self.gates[lifecycle.CDI_GATE]:
            merged = replace(merged, cdi_devices=())
        return AdmittedContainer(spec.name, spec.command, init, devices, merged, tuple(conflicts),
                                 sidecar=init and spec.restart_always, answers=tuple(cached))

    def _topology_hint(self, spec: ContainerSpec, reusable: dict[str, set[str]],
                       held: dict[str, set[str]]) -> Hint | None:
        """The Topology Manager's merged hint for the container (None with policy none); rejects as the kubelet does."""
        if self.topology_policy is TopologyPolicy.NONE:
            return None
        hints: dict[str, list[Hint] | None] = {}
        with self._cond:
            for resource, count in spec.limits.items():
                if validate_resource_name(resource) is not None or not self._node.ever_seen(resource):
                    continue
                in_use = held.get(resource, set()).union(*(p.ids_in_use(resource) for p in self._pods.values()))
                free = self._node.healthy_ids(resource) - in_use
                hints[resource] = resource_hints(self.numa_nodes, self._node.devices(resource), free,
                                                 reusable.get(resource, set()), count)
        hint, admit = merge(self.topology_policy, self.numa_nodes, hints)
        if not admit:
            raise AdmissionError(f"container {spec.name!r}: {TOPOLOGY_AFFINITY_ERROR}: {TOPOLOGY_AFFINITY_MESSAGE} "
                                 f"(policy {self.topology_policy}, hints {hints})")
        return hint

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

    # -- container starts, kubelet restarts -----------------------------------------

    def start_container(self, pod: str, container: str, namespace: str = "default") -> ContainerAnswer:
        """A start or restart of an admitted container: the cached answers replayed, no Allocate.

        Raises :class:`ContainerStartError` with the kubelet's (or runtime's)
        message when the resource's endpoint was cleaned up, when PreStartContainer
        is required but the plugin is away, or when a CDI name does not resolve.
        """
        key = (namespace, pod, container)
        with self._cond:
            admitted = self._pods.get((namespace, pod))
            if admitted is None:
                raise CmkError(f"no admitted pod {namespace}/{pod}")
            spec = admitted.container(container)
            now = self._clock()
            for resource in sorted(spec.device_ids):
                if not self._node.known(resource, now):
                    raise ContainerStartError(lifecycle.endpoint_gone(resource))
                live = self._endpoints.get(resource)
                options = live.options if live else self._last_options.get(resource, PluginOptions())
                if options.pre_start_required and live is None:
                    raise ContainerStartError(f"endpoint {resource} is stopped: cannot call PreStartContainer")
            merged, conflicts = lifecycle.replay(container, spec.answers, self._rng,
                                                 cdi_enabled=self.gates[lifecycle.CDI_GATE])
            live_pre_start = [(self._endpoints[r], ids) for r, ids in sorted(spec.device_ids.items())
                              if r in self._endpoints and self._endpoints[r].options.pre_start_required]
        try:
            for endpoint, ids in live_pre_start:
                endpoint.client.pre_start(ids)
        except PluginCallError as error:
            raise ContainerStartError(str(error)) from None
        if self._cdi_dirs is not None and merged.cdi_devices:
            missing = unresolvable(merged.cdi_devices, self._cdi_dirs)
            if missing:
                raise ContainerStartError(lifecycle.unresolvable_cdi(missing))
        with self._cond:
            self._starts[key] = self._starts.get(key, 0) + 1
            self._not_running.discard(key)
            self._cond.notify_all()
        for conflict in conflicts:
            log.warning("%s", conflict)
        return merged

    def exit_container(self, pod: str, container: str, namespace: str = "default") -> None:
        """The container exited (crashed, or finished): not running until it is started again."""
        with self._cond:
            admitted = self._pods.get((namespace, pod))
            if admitted is None:
                raise CmkError(f"no admitted pod {namespace}/{pod}")
            admitted.container(container)
            self._not_running.add((namespace, pod, container))

    def readmit(self) -> dict[tuple[str, str], str]:
        """The admission pass of a kubelet that just started, over every admitted pod.

        App containers reported running are skipped; any other holding a device
        goes through the kubelet's checks and fails the pod with its error.
        Init containers are not re-checked (see docs/dev/standin.md's list of what the
        stand-in does not model). Failed pods are removed (the kubelet marks them Failed and
        frees their devices). Returns (namespace, name) -> error of each failed pod.
        """
        failed: dict[tuple[str, str], str] = {}
        with self._cond:
            for key, admitted in list(self._pods.items()):
                for container in admitted.app_containers:
                    if (key[0], key[1], container.name) not in self._not_running:
                        continue
                    for resource, ids in sorted(container.device_ids.items()):
                        error = lifecycle.readmission_error(resource, ids, self._node.healthy_ids(resource))
                        if error and key not in failed:
                            failed[key] = f"pod {key[0]}/{key[1]} rejected: {error}"
                if key in failed:
                    del self._pods[key]
            self._cond.notify_all()
        for error in failed.values():
            log.warning("%s", error)
        return failed

    def starts(self, pod: str, container: str, namespace: str = "default") -> int:
        """How many times start_container succeeded for this container."""
        with self._cond:
            return self._starts.get((namespace, pod, container), 0)


def _inode(path: Path) -> int | None:
    try:
        return path.stat().st_ino
    except OSError:
        return None
