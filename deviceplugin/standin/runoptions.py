"""Allocate answers and how the kubelet merges several of them into one container's run options.

A container asking for several extended resources gets one Allocate answer
per plugin. The kubelet (``deviceRunContainerOptions``) walks them in map
order, which is random, and for each env name, annotation key, mount
container path and device container path keeps the first value it sees and
drops later ones silently (it only logs a conflict). CDI device names are
de-duplicated. The stand-in does the same and also *records* every dropped
conflicting value, so tests can assert that our plugins never collide.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType


@dataclass(frozen=True)
class Mount:
    container_path: str
    host_path: str
    read_only: bool = False


@dataclass(frozen=True)
class DeviceNode:
    """A ``DeviceSpec`` of the Allocate answer (named apart from the ListAndWatch device)."""

    container_path: str
    host_path: str
    permissions: str = ""


def _frozen(mapping: Mapping[str, str] | None) -> Mapping[str, str]:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True)
class ContainerAnswer:
    """One ``ContainerAllocateResponse``, or the merge of several."""

    envs: Mapping[str, str] = field(default_factory=dict)
    mounts: tuple[Mount, ...] = ()
    devices: tuple[DeviceNode, ...] = ()
    annotations: Mapping[str, str] = field(default_factory=dict)
    cdi_devices: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "envs", _frozen(self.envs))
        object.__setattr__(self, "annotations", _frozen(self.annotations))
        object.__setattr__(self, "mounts", tuple(self.mounts))
        object.__setattr__(self, "devices", tuple(self.devices))
        object.__setattr__(self, "cdi_devices", tuple(self.cdi_devices))


@dataclass(frozen=True)
class Conflict:
    """A value the kubelet dropped because an earlier answer for the same container set the key differently."""

    container: str
    kind: str  # "env", "annotation", "mount" or "device"
    key: str
    kept: str
    dropped: str
    dropped_resource: str

    def __str__(self) -> str:
        return (
            f"container {self.container!r}: {self.kind} {self.key!r} from {self.dropped_resource} "
            f"was {self.dropped!r} but {self.kept!r} was already set; the kubelet drops it"
        )


def merge_answers(container: str, answers: Sequence[tuple[str, ContainerAnswer]]) -> tuple[ContainerAnswer, list[Conflict]]:
    """Merge ``(resource, answer)`` pairs in the given order, first answer wins, conflicts recorded."""
    envs: dict[str, str] = {}
    annotations: dict[str, str] = {}
    mount_hosts: dict[str, str] = {}
    device_hosts: dict[str, str] = {}
    mounts: list[Mount] = []
    devices: list[DeviceNode] = []
    cdi: list[str] = []
    conflicts: list[Conflict] = []

    def take(kind: str, resource: str, seen: dict[str, str], key: str, value: str) -> bool:
        """Keep ``value`` unless ``key`` is already set; record it if it differed from the kept one."""
        if key not in seen:
            seen[key] = value
            return True
        if seen[key] != value:
            conflicts.append(Conflict(container, kind, key, seen[key], value, resource))
        return False

    for resource, answer in answers:
        for key, value in answer.envs.items():
            take("env", resource, envs, key, value)
        for key, value in answer.annotations.items():
            take("annotation", resource, annotations, key, value)
        for mount in answer.mounts:
            if take("mount", resource, mount_hosts, mount.container_path, mount.host_path):
                mounts.append(mount)
        for device in answer.devices:
            if take("device", resource, device_hosts, device.container_path, device.host_path):
                devices.append(device)
        cdi.extend(name for name in answer.cdi_devices if name not in cdi)
    merged = ContainerAnswer(envs=envs, mounts=tuple(mounts), devices=tuple(devices), annotations=annotations,
                             cdi_devices=tuple(cdi))
    return merged, conflicts
