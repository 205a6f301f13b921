"""The CDI spec that makes the container runtime run ``cmk hook`` for our containers, with their CPUs.

Why it works this way: ``docs/design/cdi-spec.md``.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Collection, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from deviceplugin.errors import CmkError
from deviceplugin.host.atomic import write_atomically
from deviceplugin.host.files import FileProblem, read_file
from deviceplugin.host.install import INSTALLED_NAME
from deviceplugin.model.answers import CDI_KIND, cdi_device
from deviceplugin.model.devices import DeviceTree
from deviceplugin.model.plan import CORE_POOLS
from pinner import hook
from pinner.cpulist import format_cpu_list

CDI_VERSION = "0.5.0"
KIND = CDI_KIND
VENDOR, _, CLASS = KIND.partition("/")
#: One file per node daemon; the runtime reads every *.json in its CDI dirs.
SPEC_FILE_NAME = f"{VENDOR}-{CLASS}.json"
DEFAULT_CDI_DIR = Path("/var/run/cdi")
#: Set in every container that got one of our devices: the runtime's hook confined it (informational only:
#: a pod can set it too, so nothing trusts it).
CONFINED_ENV = "CMK_CDI_CONFINED=1"
#: The runtime kills the hook and fails the start after this; the hook takes about a millisecond.
HOOK_TIMEOUT_SECONDS = 10
HOOK_STAGE = "createRuntime"


def device_name(device: str) -> str:
    """The fully qualified name an Allocate answer returns: ``cmk.intel.com/cpus=core-n0-p0-c1``."""
    return f"{KIND}={device}"


def hook_path(install_dir: str) -> str:
    """The host path of the binary ``cmk install --install-dir`` put there: the hook the runtime runs."""
    return f"{install_dir.rstrip('/')}/{INSTALLED_NAME}"


def spec_devices(tree: DeviceTree, cores: Mapping[str, frozenset[int]] = MappingProxyType({})) -> dict[str, frozenset[int]]:
    """Every CDI device the daemon's pools can name, with its CPUs; ``cores`` (core ID -> CPUs) adds cores in no core pool now."""
    devices = dict(cores)
    devices.update((cdi_device(pool, device.id), device.cpus)
                   for pool in tree.values() for device in pool.devices.values())
    return devices


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


def exclusive_devices(tree: DeviceTree) -> frozenset[str]:
    """The CDI devices of whole exclusive cores (both core pools): nobody else runs on their CPUs."""
    return frozenset(cdi_device(devices, device.id) for devices in tree.values() if devices.pool in CORE_POOLS
                     for device in devices.devices.values())


def build_spec(devices: Mapping[str, frozenset[int]], hook_path: str,
               exclusive: Collection[str] = frozenset()) -> dict[str, Any]:
    """The spec naming ``devices`` (name -> CPUs), each of whose hooks runs the host's ``hook_path``.

    The hooks of the devices named in ``exclusive`` carry ``--exclusive``.

    ``hook_path`` is the binary's path on the host (the install dir + ``/cmk``):
    the runtime runs the hook in its own namespaces, not the container's.
    """
    if not devices:
        raise ValueError("a CDI spec needs at least one device")
    if not hook_path.startswith("/"):
        raise ValueError(f"the hook path must be absolute (a host path), not {hook_path!r}")
    empty = [name for name, cpus in devices.items() if not cpus]
    if empty:
        raise ValueError(f"a CDI device needs CPUs for its hook: {', '.join(empty)}")
    return {
        "cdiVersion": CDI_VERSION,
        "kind": KIND,
        "devices": [
            {
                "name": name,
                "containerEdits": {
                    "env": [CONFINED_ENV],
                    "hooks": [{
                        "hookName": HOOK_STAGE,
                        "path": hook_path,
                        "args": hook.command_line(format_cpu_list(cpus), exclusive=name in exclusive),
                        "timeout": HOOK_TIMEOUT_SECONDS,
                    }],
                },
            }
            for name, cpus in devices.items()
        ],
    }


def write_spec(spec: Mapping[str, Any], cdi_dir: Path, *, on_disk: Mapping[str, Any] | None = None) -> Path:
    """Write ``spec`` to ``cdi_dir/SPEC_FILE_NAME`` atomically: a runtime reading it sees old or new, whole.

    The temp file's name does not end in ``.json``, so a runtime scanning the
    directory meanwhile skips it. ``on_disk`` is the file as :func:`read_spec`
    found it: when that is ``spec`` already (a daemon restart with the same
    plan), the file stays, saving the indented dump (0.2 s on 8,192 CPUs).
    """
    target = cdi_dir / SPEC_FILE_NAME
    if on_disk == spec and _mode(target) == _SPEC_MODE:
        return target
    try:
        write_atomically(target, (json.dumps(spec, indent=2) + "\n").encode(), mode=_SPEC_MODE)
    except OSError as err:
        raise _dir_error(cdi_dir, err) from None
    return target


def _mode(path: Path) -> int | None:
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return None


def remove_spec(cdi_dir: Path) -> None:
    """Remove our spec file (uninstalling); a missing one is fine."""
    try:
        (cdi_dir / SPEC_FILE_NAME).unlink(missing_ok=True)
    except OSError as err:
        raise _dir_error(cdi_dir, err) from None


def _dir_error(cdi_dir: Path, err: OSError) -> CmkError:
    return CmkError(
        f"cannot write the CDI spec into {cdi_dir}: {err.strerror}: mount the runtime's CDI directory "
        "writable and name it with --cdi-dir, or run with --no-cdi"
    )
