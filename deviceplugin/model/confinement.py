"""Which containers run unconfined by the node-wide hook: cgroup names and cpusets in, verdicts out. Pure.

A container that started before the hook was installed keeps the cpuset it
was born with, its parent's: under the kubelet's CPU manager policy ``none``
every CPU of the node, exclusive cores included. :func:`unconfined` states
the rule that tells it from a container the hook confined. A container the
hook did confine carries the cgroup the hook made below its own
(``deviceplugin.model.hookcontract.CONFINED_CGROUP``): if its cpuset reaches exclusive CPUs all
the same, something rewrote it after the hook, and it is reported as
widened, not as started before the hook. Container cgroups
are named as the runtimes name them (checked against their source), the last
path component carrying the 64-hex container ID; conmon's cgroups
(``crio-conmon-<id>.scope``, ``libpod-conmon-<id>.scope``) are not containers.

Why it works this way: ``docs/design/unconfined.md``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from deviceplugin.model.plan import CORE_POOLS, PoolPlan

if TYPE_CHECKING:
    from deviceplugin.model.assignments import Assignments
    from deviceplugin.model.devices import DeviceTree

#: cgroupfs ``<id>`` (containerd, docker), ``crio-<id>``, ``libpod-<id>``; systemd ``<prefix>-<id>.scope``.
_CONTAINER = re.compile(r"(?:(?:cri-containerd|crio|libpod|docker)-)?([0-9a-f]{64})(?:\.scope)?")
SHORT_ID = 12  # as crictl, podman and docker show IDs


def container_id(name: str) -> str | None:
    """The 64-hex container ID a runtime put in this cgroup directory name, or None (not a container)."""
    match = _CONTAINER.fullmatch(name)
    return match.group(1) if match else None


@dataclass(frozen=True)
class Container:
    """One container cgroup: its ID, its path below the hierarchy's root (``/libpod_parent/libpod-<id>``), its CPUs."""

    id: str
    cgroup: str
    cpus: frozenset[int]
    #: the hook ran for it: the cgroup it makes below the container's exists
    hooked: bool = False


class Reason:
    """Why a container is unconfined: the values of ``cmk_unconfined_containers``' ``reason`` label."""

    STARTED_BEFORE_HOOK = "started_before_hook"
    WIDENED = "widened"


@dataclass(frozen=True)
class Unconfined:
    """A container the hook did not confine, and the exclusive-pool CPUs its cpuset reaches."""

    container: Container
    exclusive: frozenset[int]

    @property
    def reason(self) -> str:
        return Reason.WIDENED if self.container.hooked else Reason.STARTED_BEFORE_HOOK


def exclusive_cpus(plan: PoolPlan) -> frozenset[int]:
    """E: the CPUs of both core pools."""
    return frozenset(cpu for pool in CORE_POOLS for cpu in plan.cpus(pool))


def held_sets(tree: DeviceTree, assignments: Assignments) -> frozenset[frozenset[int]]:
    """Per container the kubelet lists, the union of its devices' CPUs: what the hook gave it."""
    per_container: dict[tuple[str, str, str], set[int]] = {}
    for holding in assignments.holdings:
        devices = tree.get(holding.resource)
        if devices is not None:
            key = (holding.namespace, holding.pod, holding.container)
            per_container.setdefault(key, set()).update(devices.cpus_of(holding.device_ids))
    return frozenset(frozenset(cpus) for cpus in per_container.values())


def unconfined(containers: Iterable[Container], exclusive: frozenset[int],
               held: frozenset[frozenset[int]] | None = None) -> list[Unconfined]:
    """The containers the hook did not confine, in the order given, with the exclusive CPUs each reaches.

    The hook gives a container the union of its CDI devices' CPUs (whole
    exclusive cores, a shared or infra slot's CPUs) or, holding none, the
    infra record's CPUs, which hold no exclusive CPU (``pinner/native/hook.c``).
    With E = ``exclusive`` (both core pools) and X a container's effective
    cpuset, the container is unconfined when X reaches E, X is not within E
    (what a container holding cores alone gets), and X is not one of ``held``,
    the CPU sets the kubelet says single containers hold (what a container
    holding cores and a slot gets). ``held`` None (the kubelet unread): such a
    container is listed too. Missed: a never-confined container whose X equals
    one container's holdings. Never listed: X reaching no exclusive CPU.
    """
    found = []
    for container in containers:
        reached = container.cpus & exclusive
        if not reached or container.cpus <= exclusive or (held is not None and container.cpus in held):
            continue
        found.append(Unconfined(container, reached))
    return found
