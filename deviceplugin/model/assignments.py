"""Which container holds which devices, as the kubelet's pod resources API reports it: plain values.

Apart from the client (:mod:`deviceplugin.kubelet.podresources`) so that the
live view (pure) takes them without loading grpc.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


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
    """``allocatable`` is None when the kubelet does not serve GetAllocatableResources."""

    holdings: tuple[Holding, ...]
    allocatable: Mapping[str, frozenset[str]] | None

    def held(self, resource: str) -> frozenset[str]:
        return frozenset(i for h in self.holdings if h.resource == resource for i in h.device_ids)
