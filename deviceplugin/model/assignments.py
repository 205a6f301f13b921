"""Which container holds which devices, as the kubelet's pod resources API reports it: plain values.

Apart from the client (:mod:`deviceplugin.protocol.podresources`) so that the
live view (pure) takes them without loading grpc.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from deviceplugin.model.cpulist import format_cpu_list


@dataclass(frozen=True)
class Holding:
    """One container's devices of one resource (deduplicated across the NUMA entries List gives)."""

    namespace: str
    pod: str
    container: str
    resource: str
    device_ids: tuple[str, ...]


@dataclass(frozen=True)
class Assignments:
    """``allocatable`` is None when the kubelet does not serve GetAllocatableResources.

    ``kubelet_cpus``: GetAllocatableResources' ``cpu_ids``, the CPUs the kubelet's own CPU manager
    hands out; the kubelet lists them only under its ``static`` policy (None: not read).
    """

    holdings: tuple[Holding, ...]
    allocatable: Mapping[str, frozenset[str]] | None
    kubelet_cpus: frozenset[int] | None = None

    def held(self, resource: str) -> frozenset[str]:
        return frozenset(i for h in self.holdings if h.resource == resource for i in h.device_ids)


#: The fix, named in every line that says the kubelet's CPU manager pins CPUs itself.
CPU_MANAGER_FIX = ("set the kubelet's cpuManagerPolicy: none (stop the kubelet, remove "
                   "/var/lib/kubelet/cpu_manager_state, start it; cmk host-config prints the setting)")


def cpu_manager_problem(kubelet_cpus: frozenset[int] | None) -> str | None:
    """Why exclusive pools must not be served next to the kubelet's static CPU manager; None if it pins nothing.

    Under ``static`` the kubelet gives Guaranteed pods with whole CPUs exclusive CPUs of its own choosing from
    the CPUs it lists, ours among them: a container holding our exclusive core would share it.
    """
    if not kubelet_cpus:
        return None
    return (f"the kubelet's CPU manager policy is static (pod resources GetAllocatableResources lists CPUs "
            f"{format_cpu_list(kubelet_cpus)}): it pins Guaranteed pods onto the CPUs the exclusive pools hand "
            f"out, so they are not served: {CPU_MANAGER_FIX}")
