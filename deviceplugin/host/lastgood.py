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
from dataclasses import asdict
from pathlib import Path

from deviceplugin.host.atomic import write_atomically
from deviceplugin.model.plan import Mode, PlanOptions

FILE_NAME = "cmk-last-good-plan.json"


def path_in(kubelet_dir: Path) -> Path:
    return kubelet_dir / FILE_NAME


def to_json(options: PlanOptions) -> str:
    values = asdict(options)
    values["excl_non_isolcpus"] = sorted(options.excl_non_isolcpus)
    values["exclusive_mode"], values["shared_mode"] = str(options.exclusive_mode), str(options.shared_mode)
    return json.dumps({"plan": values}, indent=2, sort_keys=True) + "\n"


def from_json(text: str) -> PlanOptions:
    """Raises ValueError (or KeyError/TypeError) on a file that is not ours or not whole."""
    values = dict(json.loads(text)["plan"])
    values["excl_non_isolcpus"] = frozenset(int(cpu) for cpu in values["excl_non_isolcpus"])
    values["exclusive_mode"], values["shared_mode"] = Mode(values["exclusive_mode"]), Mode(values["shared_mode"])
    return PlanOptions(**values)


def save(kubelet_dir: Path, options: PlanOptions) -> None:
    """Remember ``options``; OSError propagates (the caller logs it: serving matters more)."""
    write_atomically(path_in(kubelet_dir), to_json(options).encode(), mode=0o644)


def load(kubelet_dir: Path) -> PlanOptions | None:
    """The remembered options, or None when there are none (or they cannot be read)."""
    try:
        return from_json(path_in(kubelet_dir).read_text())
    except (OSError, ValueError, KeyError, TypeError):
        return None
