"""The kubelet's Topology Manager as far as device plugins meet it (pure, container scope).

Why it works this way: ``docs/design/standin-topology-manager.md``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from itertools import combinations, product

from deviceplugin.standin.nodedevices import Device


class TopologyPolicy(StrEnum):
    NONE = "none"
    BEST_EFFORT = "best-effort"
    RESTRICTED = "restricted"
    SINGLE_NUMA_NODE = "single-numa-node"


#: The kubelet's admission failure reason and message for a rejected merge.
TOPOLOGY_AFFINITY_ERROR = "TopologyAffinityError"
TOPOLOGY_AFFINITY_MESSAGE = "Resources cannot be allocated with Topology locality"


@dataclass(frozen=True)
class Hint:
    """A NUMA node mask (None: any node) and whether it is a preferred one."""

    affinity: frozenset[int] | None
    preferred: bool


def masks(nodes: Sequence[int]) -> Iterator[frozenset[int]]:
    """Every non-empty node set, smallest first (``bitmask.IterateBitMasks``)."""
    for size in range(1, len(nodes) + 1):
        for combo in combinations(sorted(nodes), size):
            yield frozenset(combo)


def _bits(mask: frozenset[int]) -> int:
    return sum(1 << node for node in mask)


def narrower(a: frozenset[int], b: frozenset[int]) -> bool:
    """``IsNarrowerThan``: fewer nodes, or as many and a lower mask value."""
    return len(a) < len(b) or (len(a) == len(b) and _bits(a) < _bits(b))


def has_alignment(devices: Mapping[str, Device]) -> bool:
    """``deviceHasTopologyAlignment``: some device has a non-empty TopologyInfo."""
    return any(d.numa_nodes for d in devices.values())


def device_hints(nodes: Sequence[int], devices: Mapping[str, Device], available: Iterable[str],
                 reusable: Iterable[str], request: int) -> list[Hint]:
    """``generateDeviceTopologyHints``: hints for ``request`` devices of one resource."""
    with_devices = sorted({n for d in devices.values() for n in d.numa_nodes})
    if with_devices and len(with_devices) < len(nodes):
        nodes = with_devices
    smallest = len(nodes)
    found: list[frozenset[int]] = []
    available, reusable = list(available), list(reusable)
    for mask in masks(nodes):
        if sum(1 for d in devices.values() if mask & set(d.numa_nodes)) >= request and len(mask) < smallest:
            smallest = len(mask)
        matching = 0
        fits = True
        for device_id in reusable:
            device = devices.get(device_id)
            if device is None or not device.has_topology:
                continue
            if not mask & set(device.numa_nodes):
                fits = False
                break
            matching += 1
        if not fits:
            continue
        matching += sum(1 for i in available if i in devices and mask & set(devices[i].numa_nodes))
        if matching >= request:
            found.append(mask)
    return [Hint(mask, len(mask) == smallest) for mask in found]


def resource_hints(nodes: Sequence[int], devices: Mapping[str, Device], free: Iterable[str],
                   reusable: Iterable[str], request: int) -> list[Hint] | None:
    """``GetTopologyHints`` for one resource of a container with nothing allocated yet."""
    if not has_alignment(devices):
        return None
    free, reusable = set(free), set(reusable)
    if len(free | reusable) < request:
        return []
    return device_hints(nodes, devices, free, reusable, request)


def _filtered(hints: Mapping[str, list[Hint] | None]) -> list[list[Hint]]:
    """``filterProvidersHints``: no preference -> one preferred any-node hint; no affinity -> one unpreferred."""
    if not hints:
        return [[Hint(None, True)]]
    result = []
    for resource in sorted(hints):
        found = hints[resource]
        if found is None:
            result.append([Hint(None, True)])
        elif not found:
            result.append([Hint(None, False)])
        else:
            result.append(found)
    return result


def _merge(nodes: Sequence[int], filtered: list[list[Hint]]) -> Hint:
    every = frozenset(nodes)
    best: Hint | None = None
    for permutation in product(*filtered):
        affinity = every
        for hint in permutation:
            affinity &= hint.affinity if hint.affinity is not None else every
        merged = Hint(affinity, all(hint.preferred for hint in permutation))
        if not affinity:
            continue
        if best is None or (merged.preferred and not best.preferred) or merged.preferred == best.preferred and narrower(affinity, best.affinity or every):
            best = merged
    return best or Hint(every, False)


def merge(policy: TopologyPolicy, nodes: Sequence[int], hints: Mapping[str, list[Hint] | None]) -> tuple[Hint, bool]:
    """The policy's merged hint for one container and whether the pod is admitted."""
    if policy is TopologyPolicy.NONE:
        return Hint(None, False), True
    filtered = _filtered(hints)
    if policy is TopologyPolicy.SINGLE_NUMA_NODE:
        filtered = [[h for h in found if h.preferred and (h.affinity is None or len(h.affinity) == 1)]
                    for found in filtered]
        best = _merge(nodes, filtered)
        if best.affinity == frozenset(nodes):
            best = Hint(None, best.preferred)
        return best, best.preferred
    best = _merge(nodes, filtered)
    return best, policy is TopologyPolicy.BEST_EFFORT or best.preferred


def split_by_affinity(devices: Mapping[str, Device], available: Iterable[str], *,
                      hint: Hint) -> tuple[list[str], list[str], list[str]]:
    """``filterByAffinity``: (in the hint's nodes, on other nodes, without topology).

    Nodes inside the hint come first, each group's nodes ordered by how many
    available devices they hold (most first, then node id); a device on two
    nodes can be in the first two lists.
    """
    available = list(available)
    if not has_alignment(devices) or hint.affinity is None:
        return [], [], sorted(available)
    per_node: dict[int, list[str]] = {}
    for device_id in sorted(available):
        for node in devices[device_id].numa_nodes or (-1,):
            per_node.setdefault(node, []).append(device_id)

    def order(node: int) -> tuple[int, int, int]:
        group = 2 if node == -1 else (0 if node in (hint.affinity or ()) else 1)
        return (group, -len(per_node[node]), node)

    aligned: list[str] = []
    unaligned: list[str] = []
    without: list[str] = []
    for node in sorted(per_node, key=order):
        target = without if node == -1 else aligned if node in hint.affinity else unaligned
        target.extend(i for i in per_node[node] if i not in target)
    return aligned, unaligned, without
