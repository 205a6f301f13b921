"""The node-wide hook's two files next to the installed binary: its OCI hooks.d declaration and the infra record.

The runtime runs the declared hook (``cmk hook --node-wide=RECORD``) at the
``createRuntime`` of *every* container (podman and CRI-O read ``hooks.d``
directories, ``when: {always: true}``; containerd takes the same entry from a
runtime handler's ``base_runtime_spec``). A container holding none of our CDI
devices is confined to the CPUs in RECORD: the infra pool's, one cpu list.

Only ``cmk install`` and the daemon write RECORD, atomically (temp file and
rename: a hook reading it sees the old list or the new one, whole), and only
when its content changes, so the plan a running container was born under is
never rewritten for nothing. :func:`declaration` and :func:`record_text` are
pure; the rest is the I/O.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from deviceplugin.host.atomic import write_atomically
from deviceplugin.model import hookcontract as hook
from deviceplugin.model.cpulist import format_cpu_list

#: The hooks.d file ``cmk install`` writes beside the binary and into ``--hooks-dir``.
DECLARATION_NAME = "cmk-node-wide.json"
#: The hooks.d format version podman and CRI-O read (containers/common ``pkg/hooks/1.0.0``).
HOOKS_VERSION = "1.0.0"
HOOK_TIMEOUT_SECONDS = 10


def record_path(install_dir: Path | str) -> Path:
    """The infra record beside the installed binary."""
    return Path(install_dir) / hook.RECORD_NAME


def record_text(infra: Iterable[int]) -> str:
    """The record's whole content: the infra CPUs as one kernel cpu list and a newline."""
    cpus = frozenset(infra)
    if not cpus:
        raise ValueError("the infra record needs CPUs")
    return format_cpu_list(cpus) + "\n"


def hook_entry(hook_path: str, record: str) -> dict[str, Any]:
    """The OCI hook entry (``path``, ``args``, ``timeout``): the same in hooks.d and in a base runtime spec."""
    if not hook_path.startswith("/") or not record.startswith("/"):
        raise ValueError(f"the hook and its record need absolute host paths, not {hook_path!r} and {record!r}")
    return {"path": hook_path, "args": hook.node_wide_command_line(record), "timeout": HOOK_TIMEOUT_SECONDS}


def declaration(hook_path: str, record: str) -> dict[str, Any]:
    """The hooks.d declaration: our hook at createRuntime of every container."""
    return {"version": HOOKS_VERSION, "hook": hook_entry(hook_path, record), "when": {"always": True},
            "stages": ["createRuntime"]}


def write_record(install_dir: Path | str, infra: Iterable[int]) -> bool:
    """Write the record atomically unless it already holds these CPUs; True if it was written."""
    path, text = record_path(install_dir), record_text(infra)
    try:
        if path.read_text() == text:
            return False
    except (OSError, UnicodeDecodeError):
        pass  # absent or unreadable: write it whole
    write_atomically(path, text.encode(), mode=0o644)
    return True


def write_declaration(directory: Path, hook_path: str, record: str) -> Path:
    """Write the declaration into ``directory`` atomically (the temp name does not end in .json)."""
    target = directory / DECLARATION_NAME
    directory.mkdir(parents=True, exist_ok=True)
    write_atomically(target, (json.dumps(declaration(hook_path, record), indent=2) + "\n").encode(), mode=0o644)
    return target
