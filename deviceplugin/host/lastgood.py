"""The last plan options a daemon served with, kept so a bad config never takes a node's pools away.

A DaemonSet rollout with ``maxSurge: 0`` stops the running daemon before the
new one reads its config: a validating init container would run too late. So
the daemon writes the plan options it started serving with to
``<kubelet dir>/cmk-last-good-plan.json`` and, when a later start finds the
config or the plan it makes bad, serves that plan instead (saying so in an
error line, ``cmk_config_fallback`` and the readiness probe, which halts the
rollout on the first node).
"""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Any

from deviceplugin.host.atomic import write_atomically
from deviceplugin.model.plan import PlanOptions
from deviceplugin.model.settings import Declared, declared

FILE_NAME = "cmk-last-good-plan.json"


def path_in(kubelet_dir: Path) -> Path:
    return kubelet_dir / FILE_NAME


def _encoded(value: Any) -> Any:
    """A setting's value as JSON: a CPU set as a sorted list; enums and numbers as they are."""
    return sorted(value) if isinstance(value, frozenset) else value


def _decoded(item: Declared, value: Any) -> Any:
    """A setting's JSON value back, typed and checked against its declaration (the file is an edge too)."""
    kind = item.kind
    if value is None and kind is not item.type:  # ``int | None``: not given
        return None
    if kind is int:
        if type(value) is not int or not item.within(value):
            raise ValueError(f"{item.name}: {value!r} is out of bounds")
        return value
    if isinstance(kind, type) and issubclass(kind, StrEnum):
        return kind(value)
    if kind == frozenset[int]:
        return frozenset(int(cpu) for cpu in value)
    raise TypeError(f"{item.name}: no last-good form for type {kind}")


def to_json(options: PlanOptions) -> str:
    """``{"plan": {field: value}}``: the form every release since the last-good plan wrote."""
    values = {item.dest: _encoded(getattr(options, item.dest)) for item in declared(PlanOptions)}
    return json.dumps({"plan": values}, indent=2, sort_keys=True) + "\n"


def from_json(text: str) -> PlanOptions:
    """Raises ValueError (or KeyError/TypeError) on a file that is not ours or not whole.

    A setting the file lacks (written before it existed) takes its default; one it has that this
    release does not know makes the file not ours.
    """
    values = dict(json.loads(text)["plan"])
    settings = {item.dest: item for item in declared(PlanOptions)}
    unknown = set(values) - set(settings)
    if unknown:
        raise KeyError(f"unknown settings {sorted(unknown)}")
    return PlanOptions(**{dest: _decoded(settings[dest], value) for dest, value in values.items()})


def save(kubelet_dir: Path, options: PlanOptions) -> None:
    """Remember ``options``; OSError propagates (the caller logs it: serving matters more)."""
    write_atomically(path_in(kubelet_dir), to_json(options).encode(), mode=0o644)


def load(kubelet_dir: Path) -> PlanOptions | None:
    """The remembered options, or None when there are none (or they cannot be read)."""
    try:
        return from_json(path_in(kubelet_dir).read_text())
    except (OSError, ValueError, KeyError, TypeError):
        return None
