"""The CDI spec that makes the container runtime run ``cmk hook`` for our containers, with their CPUs.

One spec file per node daemon, kind ``cmk.intel.com/cpus``, one device per CPU
set the daemon hands out: one per core of the core pools, named after the
kubelet device ID (``cmk.intel.com/cpus=cpus-1.9``), and one per slot pool
(``cmk.intel.com/cpus=shared``: every slot of a pool has the pool's CPUs).
Each device's ``containerEdits`` add a ``createRuntime`` hook carrying that
device's CPUs, ``cmk hook --cpus=1,9``. An Allocate answer names the CDI
device of every device ID it was given
(``deviceplugin.model.answers.cdi_device_names``); the runtime
(containerd 1.7+ with ``enable_cdi``, CRI-O 1.23+, podman) applies the spec
before it creates the container.

Why the CPUs travel in the hooks and not in the env: the kubelet appends the
pod spec's own ``env`` after the plugins' env, so a pod can set any
``CMK_CPUS_*`` name itself; it cannot set an OCI hook. Hooks reach
``config.json`` only from the runtime's own configuration, its hooks
directories and CDI specs, and a CDI device only from the CRI request's
``CDIDevices`` (filled by the kubelet from Allocate answers) or the CRI
*container* annotations, which the kubelet builds from device-plugin
annotations and its own keys, never from the pod's (README, "Security: what
is trusted", has the runtime functions). A container holding several devices
gets several hooks; each takes the union of all of them, so each computes the
same CPUs and the order they run in does not matter.

Device IDs are stable (derived from the topology), so the kubelet's replayed
answers still resolve after a daemon restart. The spec is O(cores) devices: a
slot pool is one device, however many slots it advertises.

Why ``cdiVersion`` 0.5.0: it is the newest version the CDI library bundled
with podman 4.3 and containerd 1.7 accepts (they refuse a spec whose version
they do not know), newer libraries still read it, and everything used here
(device-level edits, ``createRuntime`` hooks with a timeout) exists since 0.3.0.

:func:`build_spec` is pure (the names come from
``deviceplugin.model.answers``, which the Allocate answers use too); :func:`write_spec` and
:func:`remove_spec` are the only I/O, done at daemon start and shutdown, never
inside Allocate.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from deviceplugin.errors import CmkError
from deviceplugin.host.atomic import write_atomically
from deviceplugin.host.install import INSTALLED_NAME
from deviceplugin.model.answers import CDI_KIND, cdi_device
from deviceplugin.model.devices import DeviceTree
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
    """The fully qualified name an Allocate answer returns: ``cmk.intel.com/cpus=cpus-1.9``."""
    return f"{KIND}={device}"


def hook_path(install_dir: str) -> str:
    """The host path of the binary ``cmk install --install-dir`` put there: the hook the runtime runs."""
    return f"{install_dir.rstrip('/')}/{INSTALLED_NAME}"


def spec_devices(tree: DeviceTree) -> dict[str, frozenset[int]]:
    """Every CDI device the daemon's pools can name, with its CPUs."""
    return {cdi_device(devices, device.id): device.cpus
            for devices in tree.values() for device in devices.devices.values()}


def build_spec(devices: Mapping[str, frozenset[int]], hook_path: str) -> dict[str, Any]:
    """The spec naming ``devices`` (name -> CPUs), each of whose hooks runs the host's ``hook_path``.

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
                        "args": hook.command_line(format_cpu_list(cpus)),
                        "timeout": HOOK_TIMEOUT_SECONDS,
                    }],
                },
            }
            for name, cpus in devices.items()
        ],
    }


def write_spec(spec: Mapping[str, Any], cdi_dir: Path) -> Path:
    """Write ``spec`` to ``cdi_dir/SPEC_FILE_NAME`` atomically: a runtime reading it sees old or new, whole.

    The temp file's name does not end in ``.json``, so a runtime scanning the
    directory meanwhile skips it.
    """
    target = cdi_dir / SPEC_FILE_NAME
    try:
        write_atomically(target, (json.dumps(spec, indent=2) + "\n").encode(), mode=0o644)
    except OSError as err:
        raise _dir_error(cdi_dir, err) from None
    return target


def remove_spec(cdi_dir: Path) -> None:
    """Remove our spec file; a missing one is fine (shutdown after a failed start)."""
    try:
        (cdi_dir / SPEC_FILE_NAME).unlink(missing_ok=True)
    except OSError as err:
        raise _dir_error(cdi_dir, err) from None


def _dir_error(cdi_dir: Path, err: OSError) -> CmkError:
    return CmkError(
        f"cannot write the CDI spec into {cdi_dir}: {err.strerror}: mount the runtime's CDI directory "
        "writable and name it with --cdi-dir, or run with --no-cdi"
    )
