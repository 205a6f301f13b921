"""The CDI spec file: read at the daemon's start, written atomically beside the runtime's other specs.

Only reading and writing: the spec's names and content are
:mod:`deviceplugin.model.cdispec`'s. Why it works this way: ``docs/design/cdi-spec.md``.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from deviceplugin.errors import CmkError, os_reason
from deviceplugin.host.atomic import write_atomically
from deviceplugin.host.files import FileProblem, read_file
from deviceplugin.model.cdispec import SPEC_FILE_NAME

DEFAULT_CDI_DIR = Path("/var/run/cdi")

#: A spec of 8,192 cores is about 2 MiB; anything far larger was not written by a daemon.
MAX_SPEC_BYTES = 16 * 1024 * 1024
_SPEC_MODE = 0o644


def read_spec(cdi_dir: Path) -> dict[str, Any] | None:
    """The spec a daemon wrote before (None: none, or unreadable: the new one replaces it whole).

    Read through the bounded reader: a FIFO or a huge file there must not hang or exhaust the daemon.
    """
    try:
        data = read_file(cdi_dir / SPEC_FILE_NAME, MAX_SPEC_BYTES, what="CDI spec ")
        spec = json.loads(data) if data is not None else None
    except (FileProblem, ValueError):
        return None
    return spec if isinstance(spec, dict) else None


def write_spec(spec: Mapping[str, Any], cdi_dir: Path, *, on_disk: Mapping[str, Any] | None = None) -> Path:
    """Write ``spec`` to ``cdi_dir/SPEC_FILE_NAME`` atomically: a runtime reading it sees old or new, whole.

    The temp file's name does not end in ``.json``, so a runtime scanning the
    directory meanwhile skips it. ``on_disk`` is the file as :func:`read_spec`
    found it: when that is ``spec`` already (a daemon restart with the same
    plan), the file stays.
    """
    target = cdi_dir / SPEC_FILE_NAME
    if on_disk == spec and _mode(target) == _SPEC_MODE:
        return target
    try:
        write_atomically(target, spec_text(spec).encode(), mode=_SPEC_MODE)
    except OSError as err:
        raise _dir_error(cdi_dir, err) from None
    return target


def spec_text(spec: Mapping[str, Any]) -> str:
    """The spec as JSON a person can read: indented, with one line per device. Pure.

    ``json.dumps(indent=2)`` runs the pure-Python encoder: 0.24 s for the
    8,192 devices of 8,192 CPUs, each spread over a dozen lines. Each
    device on one line goes through the C encoder, a sixth of the time.
    """
    devices = spec.get("devices")
    if not isinstance(devices, list) or not devices:
        return json.dumps(spec, indent=2) + "\n"
    head = json.dumps({key: value for key, value in spec.items() if key != "devices"}, indent=2)
    lines = ",\n".join("    " + json.dumps(device) for device in devices)
    return f'{head.removesuffix("}").rstrip()}{"," if len(spec) > 1 else ""}\n  "devices": [\n{lines}\n  ]\n}}\n'


def _mode(path: Path) -> int | None:
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return None


def _dir_error(cdi_dir: Path, err: OSError) -> CmkError:
    return CmkError(
        f"cannot write the CDI spec into {cdi_dir}: {os_reason(err)}: mount the runtime's CDI directory "
        "writable and name it with --cdi-dir, or run with --no-cdi"
    )

