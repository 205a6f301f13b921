"""Pods, and how the kubelet's device manager picks devices for one container (pure).

The choice follows ``devicesToAllocate`` (the Topology Manager's hint, if
any, comes in as a split of the free devices, see
:mod:`deviceplugin.standin.topologymanager`): first the devices this pod's init containers hold for the
resource (reuse), then, if more are needed and the plugin advertised it, the
plugin's preference among the free healthy devices (unknown IDs ignored),
then any free healthy device to cover a shortfall. The kubelet walks Go
sets, so its orders are random; the stand-in shuffles with a seeded
``random.Random`` so that a plugin relying on an order is caught, and a
test stays reproducible.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from deviceplugin.errors import CmkError
from deviceplugin.standin.nodedevices import Device
from deviceplugin.standin.runoptions import Conflict, ContainerAnswer

Prefer = Callable[[list[str], list[str], int], Sequence[str]]
"""GetPreferredAllocation: (available, must_include, size) -> the plugin's preferred IDs."""


class AdmissionError(CmkError):
    """The kubelet rejected the pod (UnexpectedAdmissionError); the message says why."""


@dataclass(frozen=True)
class ContainerSpec:
    """``restart_always`` on an init container makes it a sidecar (``restartPolicy: Always``)."""

    name: str
    command: tuple[str, ...] = ()
    limits: Mapping[str, int] = field(default_factory=dict)
    restart_always: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "command", tuple(self.command))
        object.__setattr__(self, "limits", MappingProxyType(dict(self.limits)))


@dataclass(frozen=True)
class PodSpec:
    name: str
    containers: tuple[ContainerSpec, ...]
    init_containers: tuple[ContainerSpec, ...] = ()
    namespace: str = "default"

    def __post_init__(self) -> None:
        object.__setattr__(self, "containers", tuple(self.containers))
        object.__setattr__(self, "init_containers", tuple(self.init_containers))
        names = [c.name for c in (*self.init_containers, *self.containers)]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise AdmissionError(f"pod {self.name!r}: container names must be unique, repeated: {', '.join(duplicates)}")


@dataclass(frozen=True)
class AdmittedContainer:
    """What one container got: its devices per resource and the merged Allocate answers."""

    name: str
    command: tuple[str, ...]
    init: bool
    devices: Mapping[str, tuple[Device, ...]]
    answer: ContainerAnswer
    conflicts: tuple[Conflict, ...] = ()
    sidecar: bool = False
    #: The per-resource Allocate answers the kubelet checkpoints and replays at every start.
    answers: tuple[tuple[str, ContainerAnswer], ...] = ()

    @property
    def device_ids(self) -> dict[str, tuple[str, ...]]:
        return {resource: tuple(d.id for d in devices) for resource, devices in self.devices.items()}

    @property
    def envs(self) -> Mapping[str, str]:
        return self.answer.envs


@dataclass(frozen=True)
class AdmittedPod:
    name: str
    namespace: str
    containers: tuple[AdmittedContainer, ...]

    def container(self, name: str) -> AdmittedContainer:
        for container in self.containers:
            if container.name == name:
                return container
        raise KeyError(f"pod {self.name!r} has no container {name!r}; it has {[c.name for c in self.containers]}")

    @property
    def app_containers(self) -> tuple[AdmittedContainer, ...]:
        return tuple(c for c in self.containers if not c.init)

    @property
    def listed_containers(self) -> tuple[AdmittedContainer, ...]:
        """What pod resources ``List`` shows: sidecars and app containers, never plain init containers."""
        return tuple(c for c in self.containers if not c.init or c.sidecar)

    def ids_in_use(self, resource: str) -> set[str]:
        return {d.id for c in self.containers for d in c.devices.get(resource, ())}

    @property
    def conflicts(self) -> tuple[Conflict, ...]:
        return tuple(x for c in self.containers for x in c.conflicts)


def shuffled(ids: Iterable[str], rng: random.Random) -> list[str]:
    """Go set iteration order: random, but reproducible from the stand-in's seed."""
    result = sorted(ids)
    rng.shuffle(result)
    return result


#: ``filterByAffinity`` over the available IDs: (aligned with the hint, on other nodes, without topology).
Split = Callable[[set[str]], tuple[list[str], list[str], list[str]]]


def choose_devices(
    resource: str,
    required: int,
    reusable: Iterable[str],
    free_healthy: Iterable[str],
    prefer: Prefer | None,
    rng: random.Random,
    split: Split | None = None,
) -> list[str]:
    """The device IDs one container gets for ``resource``, the kubelet's way (``devicesToAllocate``).

    ``free_healthy`` excludes devices held by any pod, this one included;
    ``reusable`` are the IDs this pod's init containers hold (the kubelet's
    ``devicesToReuse``), which need no health check. ``split`` applies the
    Topology Manager's hint (None: no hint, every device is "no affinity").
    With more aligned devices than needed the plugin chooses among the
    aligned ones (``available`` = aligned + taken); otherwise every aligned
    device is taken first and ``must_include`` carries them to the plugin.
    """
    chosen: list[str] = []

    def take_from(ids: Iterable[str]) -> bool:
        for device_id in ids:
            if len(chosen) == required:
                break
            if device_id not in chosen:
                chosen.append(device_id)
        return len(chosen) == required

    if take_from(shuffled(reusable, rng)):
        return chosen
    available = set(free_healthy) - set(chosen)
    needed = required - len(chosen)
    if len(available) < needed:
        raise AdmissionError(
            f"requested number of devices unavailable for {resource}. Requested: {needed}, Available: {len(available)}"
        )
    aligned, unaligned, without = split(available) if split is not None else ([], [], sorted(available))

    def preferred_among(candidates: set[str]) -> list[str]:
        if prefer is None:
            return []
        answer = prefer(shuffled(candidates | set(chosen), rng), shuffled(chosen, rng), required)
        # Unknown or busy IDs in the answer are ignored, exactly as the kubelet intersects with its set.
        return shuffled(set(answer) & candidates, rng)

    if needed < len(aligned):
        if take_from(preferred_among(set(aligned))) or take_from(shuffled(aligned, rng)):
            return chosen
        raise AdmissionError(f"unexpectedly allocated less resources than required. Requested: {required}, "
                             f"Got: {len(chosen)}")
    if take_from(shuffled(aligned, rng)) or take_from(preferred_among(available)):
        return chosen
    if take_from(shuffled(unaligned, rng)) or take_from(shuffled(without, rng)):
        return chosen
    raise AdmissionError(f"unexpectedly allocated less resources than required. Requested: {required}, "
                         f"Got: {len(chosen)}")
