"""The CDI spec that makes the container runtime run ``cmk hook`` for our containers.

One spec file per node daemon, kind ``cmk.intel.com/cpus``, one device per
served pool (``cmk.intel.com/cpus=exclusive``, ``...=shared`` ...). Each
pool's Allocate answer names its pool's device; the runtime (containerd 1.7+
with ``enable_cdi``, CRI-O 1.23+, podman) applies the spec before it creates
the container.

Why one device per pool and the hook in the spec-level ``containerEdits``:
the hook needs nothing from the device (it reads the container's CPUs from
the env the Allocate answers set), and a container holding several pools
gets several of our devices. The CDI library applies a spec's own edits once
per container however many of its devices are injected, so the hook runs
once; each device carries only a harmless identical env entry (CDI requires
every device to edit something, and equal env entries merge). Per-device-ID
devices would add hundreds of identical entries on a big node for nothing.
The hook is idempotent anyway, should a runtime apply it twice.

Why ``cdiVersion`` 0.5.0: it is the newest version the CDI library bundled
with podman 4.3 and containerd 1.7 accepts (they refuse a spec whose version
they do not know), newer libraries still read it, and everything used here
(spec-level edits, ``createRuntime`` hooks with a timeout) exists since 0.3.0.

Why the daemon never removes it: the kubelet replays every container's cached
Allocate answer, CDI names included, at each start and restart, also while the
daemon is away (a rollout, a crash loop, a drain) and after an upgrade, and
the runtime refuses a name it cannot resolve. So the spec names every pool the
project has, whether served now or not, and stays until the node is
uninstalled (README "Uninstalling").

:func:`build_spec` is pure; :func:`write_spec` (daemon start) and
:func:`remove_spec` (uninstalling) are the only I/O, never inside Allocate.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from deviceplugin.errors import CmkError
from deviceplugin.host.atomic import write_atomically
from deviceplugin.host.install import INSTALLED_NAME
from pinner import hook

CDI_VERSION = "0.5.0"
VENDOR = "cmk.intel.com"
CLASS = "cpus"
KIND = f"{VENDOR}/{CLASS}"
#: One file per node daemon; the runtime reads every *.json in its CDI dirs.
SPEC_FILE_NAME = f"{VENDOR}-{CLASS}.json"
DEFAULT_CDI_DIR = Path("/var/run/cdi")
#: Set in every container that got one of our devices: the runtime's hook confined it.
CONFINED_ENV = "CMK_CDI_CONFINED=1"
#: The runtime kills the hook and fails the start after this; the hook takes about a millisecond.
HOOK_TIMEOUT_SECONDS = 10
HOOK_STAGE = "createRuntime"


def device_name(device: str) -> str:
    """The fully qualified name an Allocate answer returns: ``cmk.intel.com/cpus=exclusive``."""
    return f"{KIND}={device}"


def hook_path(install_dir: str) -> str:
    """The host path of the binary ``cmk install --install-dir`` put there: the hook the runtime runs."""
    return f"{install_dir.rstrip('/')}/{INSTALLED_NAME}"


def build_spec(devices: Iterable[str], hook_path: str) -> dict[str, Any]:
    """The spec naming ``devices`` (pool names), whose hook runs the host's ``hook_path``.

    ``hook_path`` is the binary's path on the host (the install dir + ``/cmk``):
    the runtime runs the hook in its own namespaces, not the container's.
    """
    names = list(dict.fromkeys(devices))
    if not names:
        raise ValueError("a CDI spec needs at least one device")
    if not hook_path.startswith("/"):
        raise ValueError(f"the hook path must be absolute (a host path), not {hook_path!r}")
    return {
        "cdiVersion": CDI_VERSION,
        "kind": KIND,
        "devices": [{"name": name, "containerEdits": {"env": [CONFINED_ENV]}} for name in names],
        "containerEdits": {
            "hooks": [
                {
                    "hookName": HOOK_STAGE,
                    "path": hook_path,
                    "args": list(hook.ARGS),
                    "timeout": HOOK_TIMEOUT_SECONDS,
                }
            ]
        },
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
