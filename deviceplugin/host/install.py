"""The self-contained pinner in the host's install directory (what ``cmk install`` and the daemon use).

The Allocate answer mounts that directory into workload containers (at
``/opt/bin`` by default, as CMK did), so ``/opt/bin/cmk isolate`` works in
images with no Python and no libc. The copy is atomic (a temp file in the
directory, then rename): a container starting at that moment sees the old
binary or the new one, never half of one, and a running one keeps its inode.
"""

from __future__ import annotations

from pathlib import Path

from deviceplugin.errors import CmkError
from deviceplugin.host.atomic import write_atomically

DEFAULT_INSTALL_DIR = Path("/opt/bin")
INSTALLED_NAME = "cmk"


def built_pinner() -> Path:
    """Where the package build (or ``python -m pinner.build``) put the static pinner."""
    from pinner.build import DEFAULT_OUTPUT

    return DEFAULT_OUTPUT


def install_pinner(source: Path, install_dir: Path) -> Path:
    """Copy ``source`` to ``install_dir/cmk`` (mode 0755) atomically; returns the installed path."""
    if not source.is_file():
        raise CmkError(
            f"the self-contained pinner was not built ({source} is missing): build it with "
            "'python -m pinner.build' (needs musl-tools or a C compiler with a static libc), then run 'cmk install' again"
        )
    try:
        install_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise CmkError(f"cannot create the install directory {install_dir}: {err.strerror}") from None
    target = install_dir / INSTALLED_NAME
    try:
        data = source.read_bytes()
    except OSError as err:
        raise CmkError(f"cannot read the built pinner {source}: {err.strerror}") from None
    try:
        write_atomically(target, data, mode=0o755)
    except OSError as err:
        raise CmkError(f"cannot install {target}: {err.strerror}") from None
    return target
