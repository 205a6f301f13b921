"""The stand-in's pods: admission through Allocate, PreStartContainer, starts replaying cached answers, re-admission.

The other half of the kubelet's device manager (:mod:`deviceplugin.standin.devicemanager`):
it takes devices from the plugins registered there, under that half's lock,
and serializes admissions like the kubelet's sync loop.
"""

from __future__ import annotations

import logging
import random
import threading
from dataclasses import replace
from functools import partial
from pathlib import Path

from api.constants import UNHEALTHY, validate_resource_name
from deviceplugin.errors import CmkError
from deviceplugin.standin import lifecycle
from deviceplugin.standin.cdiresolve import unresolvable
from deviceplugin.standin.devicemanager import DeviceManager
from deviceplugin.standin.lifecycle import ContainerStartError
from deviceplugin.standin.nodedevices import Device
from deviceplugin.standin.options import KubeletOptions
from deviceplugin.standin.plugin_client import PluginCallError
from deviceplugin.standin.pods import (
    AdmissionError,
    AdmittedContainer,
    AdmittedPod,
    ContainerSpec,
    PodSpec,
    choose_devices,
    shuffled,
)
from deviceplugin.standin.runoptions import Conflict, ContainerAnswer, merge_answers
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


class Admission:
    """The admitted pods, the containers started and exited, and the random order the kubelet walks them in."""

    def __init__(self, devices: DeviceManager, options: KubeletOptions, *, cdi_enabled: bool) -> None:
        self._devices = devices
        self._cdi_enabled = cdi_enabled
        self._cdi_dirs = None if options.cdi_dirs is None else tuple(Path(d) for d in options.cdi_dirs)
        self._rng = random.Random(options.seed)
        self._admit_lock = threading.Lock()
        self._pods: dict[tuple[str, str], AdmittedPod] = {}
        self._not_running: set[tuple[str, str, str]] = set()
        self._starts: dict[tuple[str, str, str], int] = {}
        self.topology_policy = TopologyPolicy(options.topology_policy)
        self.numa_nodes = tuple(sorted(options.numa_nodes))

    def conflicts(self) -> list[Conflict]:
        """Allocate answer values the kubelet dropped when merging, over all admitted pods."""
        with self._devices.cond:
            return [c for pod in self._pods.values() for c in pod.conflicts]

    def pods(self) -> list[AdmittedPod]:
        with self._devices.cond:
            return [self._pods[key] for key in sorted(self._pods)]

    # -- pods ----------------------------------------------------------------------

    def admit(self, pod: PodSpec) -> AdmittedPod:
        """Admit and start ``pod`` as the kubelet's device manager would, or raise AdmissionError.

        A rejected pod holds nothing afterwards: its devices are only
        recorded once every container got its answer.
        """
        with self._admit_lock:
            key = (pod.namespace, pod.name)
            with self._devices.cond:
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
            with self._devices.cond:
                self._pods[key] = result
                self._devices.cond.notify_all()
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
            with self._devices.cond:
                if not self._devices.node.ever_seen(resource):
                    continue  # the node status lacks it: admitted without Allocate, no env, no mount

                endpoint = self._devices.endpoint(resource)
                if endpoint is None:
                    state = "its plugin's ListAndWatch ended" if resource in self._devices.node.capacity(self._devices.clock()) else "no device plugin registered it"
                    raise AdmissionError(f"container {spec.name!r}: cannot allocate {resource}: {state}")
                in_use = held.get(resource, set()).union(*(p.ids_in_use(resource) for p in self._pods.values()))
                free = self._devices.node.healthy_ids(resource) - in_use
                snapshot = self._devices.node.devices(resource)
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
        if not self._cdi_enabled:
            merged = replace(merged, cdi_devices=())
        return AdmittedContainer(spec.name, spec.command, init, devices, merged, tuple(conflicts),
                                 sidecar=init and spec.restart_always, answers=tuple(cached))

    def _topology_hint(self, spec: ContainerSpec, reusable: dict[str, set[str]],
                       held: dict[str, set[str]]) -> Hint | None:
        """The Topology Manager's merged hint for the container (None with policy none); rejects as the kubelet does."""
        if self.topology_policy is TopologyPolicy.NONE:
            return None
        hints: dict[str, list[Hint] | None] = {}
        with self._devices.cond:
            for resource, count in spec.limits.items():
                if validate_resource_name(resource) is not None or not self._devices.node.ever_seen(resource):
                    continue
                in_use = held.get(resource, set()).union(*(p.ids_in_use(resource) for p in self._pods.values()))
                free = self._devices.node.healthy_ids(resource) - in_use
                hints[resource] = resource_hints(self.numa_nodes, self._devices.node.devices(resource), free,
                                                 reusable.get(resource, set()), count)
        hint, admit = merge(self.topology_policy, self.numa_nodes, hints)
        if not admit:
            raise AdmissionError(f"container {spec.name!r}: {TOPOLOGY_AFFINITY_ERROR}: {TOPOLOGY_AFFINITY_MESSAGE} "
                                 f"(policy {self.topology_policy}, hints {hints})")
        return hint

    def _pre_start(self, container: AdmittedContainer) -> None:
        """PreStartContainer before the container starts, for each plugin that asked for it."""
        for resource, ids in container.device_ids.items():
            with self._devices.cond:
                endpoint = self._devices.endpoint(resource)
            if endpoint is None:
                raise AdmissionError(f"container {container.name!r}: {resource} plugin went away before the start")
            if endpoint.options.pre_start_required:
                endpoint.client.pre_start(ids)

    def delete_pod(self, name: str, namespace: str = "default") -> None:
        """Forget the pod: its devices are free again. The plugin is not told (there is no deallocate)."""
        with self._devices.cond:
            if self._pods.pop((namespace, name), None) is None:
                raise CmkError(f"no admitted pod {namespace}/{name}; admitted: {[f'{n}/{p}' for n, p in sorted(self._pods)]}")
            self._devices.cond.notify_all()

    # -- container starts, kubelet restarts -----------------------------------------

    def start_container(self, pod: str, container: str, namespace: str = "default") -> ContainerAnswer:
        """A start or restart of an admitted container: the cached answers replayed, no Allocate.

        Raises :class:`ContainerStartError` with the kubelet's (or runtime's)
        message when the resource's endpoint was cleaned up, when PreStartContainer
        is required but the plugin is away, or when a CDI name does not resolve.
        """
        key = (namespace, pod, container)
        with self._devices.cond:
            admitted = self._pods.get((namespace, pod))
            if admitted is None:
                raise CmkError(f"no admitted pod {namespace}/{pod}")
            spec = admitted.container(container)
            now = self._devices.clock()
            for resource in sorted(spec.device_ids):
                if not self._devices.node.known(resource, now):
                    raise ContainerStartError(lifecycle.endpoint_gone(resource))
                live = self._devices.endpoint(resource)
                options = live.options if live else self._devices.last_options(resource)
                if options.pre_start_required and live is None:
                    raise ContainerStartError(f"endpoint {resource} is stopped: cannot call PreStartContainer")
            merged, conflicts = lifecycle.replay(container, spec.answers, self._rng,
                                                 cdi_enabled=self._cdi_enabled)
            endpoints = {r: self._devices.endpoint(r) for r in spec.device_ids}
            live_pre_start = [(endpoint, ids) for r, ids in sorted(spec.device_ids.items())
                              if (endpoint := endpoints[r]) is not None and endpoint.options.pre_start_required]
        try:
            for endpoint, ids in live_pre_start:
                endpoint.client.pre_start(ids)
        except PluginCallError as error:
            raise ContainerStartError(str(error)) from None
        if self._cdi_dirs is not None and merged.cdi_devices:
            missing = unresolvable(merged.cdi_devices, self._cdi_dirs)
            if missing:
                raise ContainerStartError(lifecycle.unresolvable_cdi(missing))
        with self._devices.cond:
            self._starts[key] = self._starts.get(key, 0) + 1
            self._not_running.discard(key)
            self._devices.cond.notify_all()
        for conflict in conflicts:
            log.warning("%s", conflict)
        return merged

    def exit_container(self, pod: str, container: str, namespace: str = "default") -> None:
        """The container exited (crashed, or finished): not running until it is started again."""
        with self._devices.cond:
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
        with self._devices.cond:
            for key, admitted in list(self._pods.items()):
                for container in admitted.app_containers:
                    if (key[0], key[1], container.name) not in self._not_running:
                        continue
                    for resource, ids in sorted(container.device_ids.items()):
                        error = lifecycle.readmission_error(resource, ids, self._devices.node.healthy_ids(resource))
                        if error and key not in failed:
                            failed[key] = f"pod {key[0]}/{key[1]} rejected: {error}"
                if key in failed:
                    del self._pods[key]
            self._devices.cond.notify_all()
        for error in failed.values():
            log.warning("%s", error)
        return failed

    def starts(self, pod: str, container: str, namespace: str = "default") -> int:
        """How many times start_container succeeded for this container."""
        with self._devices.cond:
            return self._starts.get((namespace, pod, container), 0)
