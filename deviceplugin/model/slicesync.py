"""Which writes turn the node's listed ResourceSlices into the wanted ones, and at which pool generation. Pure values.

A consumer (the scheduler) uses only the slices of a pool's highest ``spec.pool.generation``. So a
slice left at an older generation beside rewritten ones is ignored, and a change that takes more
than one write must move every slice to a new generation. The rule is the one of
``k8s.io/dynamic-resource-allocation/resourceslice``'s controller (``syncPool``): the generation is
kept when the change is at most one update and nothing new (one atomic write), else it is the
highest listed plus one, and every slice is written at it; a listed slice below the highest
generation counts as changed. Content compared: labels, owner references and the spec without the
generation, so a republish of equal content writes nothing, whatever generation the caller asked for.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Slice = dict[str, Any]


@dataclass(frozen=True)
class SliceChanges:
    """The writes, in the order the controller makes them: obsolete slices deleted first, then updates, then creates.

    ``update`` holds the listed objects with the wanted content (their ``metadata`` otherwise kept,
    ``resourceVersion`` included, for a PUT); ``delete`` the listed objects no wanted slice names.
    """

    create: tuple[Slice, ...]
    update: tuple[Slice, ...]
    delete: tuple[Mapping[str, Any], ...]
    generation: int


def _generation(resource_slice: Mapping[str, Any]) -> int:
    return int(resource_slice["spec"]["pool"]["generation"])


def _content(resource_slice: Mapping[str, Any]) -> tuple[Any, Any, Any]:
    spec = copy.deepcopy(resource_slice["spec"])
    del spec["pool"]["generation"]
    metadata = resource_slice["metadata"]
    return metadata.get("labels") or {}, metadata.get("ownerReferences") or [], spec


def _owned(wanted: Mapping[str, Any], owner: Mapping[str, Any] | None, generation: int) -> Slice:
    result = copy.deepcopy(dict(wanted))
    if owner is not None:
        result["metadata"]["ownerReferences"] = [dict(owner)]
    result["spec"]["pool"]["generation"] = generation
    return result


def next_generation(listed: Sequence[Mapping[str, Any]]) -> int:
    """One above the highest generation of the listed slices (1 for none): the least a rewrite of the pool uses."""
    return max((_generation(s) for s in listed), default=0) + 1


def slice_changes(listed: Sequence[Mapping[str, Any]], wanted: Sequence[Mapping[str, Any]], *,
                  owner: Mapping[str, Any] | None, least_generation: int = 1) -> SliceChanges:
    """The writes that make ``listed`` (the node's slices of the driver, as the API server listed them) ``wanted``.

    ``owner``: the ownerReference every slice carries (None: none). ``least_generation``: the lowest
    generation a write may use (the caller's; a pool that already has a higher one keeps counting from it).
    """
    current = {s["metadata"]["name"]: s for s in listed}
    top = max((_generation(s) for s in listed), default=0)
    names = {w["metadata"]["name"] for w in wanted}
    delete = tuple(s for name, s in current.items() if name not in names)
    new = [w for w in wanted if w["metadata"]["name"] not in current]
    changed = [w for w in wanted if w["metadata"]["name"] in current
               and (_generation(current[w["metadata"]["name"]]) < top
                    or _content(current[w["metadata"]["name"]]) != _content(_owned(w, owner, 0)))]
    if not new and not delete and len(changed) <= 1:
        generation, rewrite = top, changed
    else:  # more than one write: all at a new generation, so no consumer mixes two
        generation, rewrite = max(top + 1, least_generation), [w for w in wanted if w["metadata"]["name"] in current]
    update = []
    for w in rewrite:
        target = _owned(w, owner, generation)
        update.append({**current[w["metadata"]["name"]], "spec": target["spec"],
                       "metadata": {**current[w["metadata"]["name"]]["metadata"], **target["metadata"]}})
    return SliceChanges(create=tuple(_owned(w, owner, generation) for w in new), update=tuple(update),
                        delete=delete, generation=generation)
