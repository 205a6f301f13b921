"""The slot record: which CPUs each slot pool's Allocate answers gave, kept across daemon restarts.

A slot ID (``shared-004``) names no CPUs, and the kubelet keeps a running
container's slot in its checkpoint while the daemon restarts with a new
plan. So the daemon writes down the CPUs its slots handed out, and the next
daemon reads them back to keep those cores out of other pools until the
slots are freed (:mod:`deviceplugin.model.withheld`). One small JSON file
in the device plugin directory (the kubelet deletes only sockets there):
``{"cmk.intel.com/shared": "3,11", ...}``. A missing record means "as planned
now", and so does an unreadable one after one warning line. Releases before
0.1.0 wrote none, so their upgrade must keep the pool flags.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from deviceplugin.errors import CmkError, os_reason
from deviceplugin.host.atomic import write_atomically
from deviceplugin.model.cpulist import CpuListError, format_cpu_list, parse_cpu_list

RECORD_NAME = "cmk-slot-cpus.json"


def read_record(directory: Path) -> dict[str, frozenset[int]] | None:
    """The record in ``directory``; None when there is none. CmkError names a broken one."""
    path = directory / RECORD_NAME
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        raise CmkError(f"cannot read the slot record {path}: {err}; delete it if no slot is in use") from None
    try:
        return {str(resource): parse_cpu_list(str(cpus)) for resource, cpus in dict(data).items()}
    except (CpuListError, TypeError, ValueError) as err:
        raise CmkError(f"slot record {path} is not resource -> cpu list: {err}; delete it if no slot is in use") from None


def write_record(directory: Path, record: Mapping[str, frozenset[int]]) -> Path:
    path = directory / RECORD_NAME
    data = json.dumps({r: format_cpu_list(cpus) for r, cpus in sorted(record.items())}, indent=1) + "\n"
    try:
        write_atomically(path, data.encode(), mode=0o644)
    except OSError as err:
        raise CmkError(f"cannot write the slot record {path}: {os_reason(err)}") from None
    return path
