"""The self-contained pinner in the host's install directory (what ``cmk install`` and the daemon use).

The Allocate answer mounts that directory into workload containers (at
``/opt/bin`` by default, as CMK did), so ``/opt/bin/cmk isolate`` works in
images with no Python and no libc. The copy is atomic (a temp file in the
directory, then rename): a container starting at that moment sees the old
binary or the new one, never half of one, and a running one keeps its inode.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from deviceplugin.errors import CmkError, os_reason
from deviceplugin.host.atomic import write_atomically
from deviceplugin.model.cdispec import INSTALLED_NAME

DEFAULT_INSTALL_DIR = Path("/opt/bin")

#: Directories the install dir may not be: every container gets it mounted, so it must hold only the pinner.
SYSTEM_DIRS = frozenset({
    "/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32", "/media", "/mnt",
    "/opt", "/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/usr/bin", "/usr/lib",
    "/usr/lib32", "/usr/lib64", "/usr/libexec", "/usr/libx32", "/usr/local", "/usr/local/bin",
    "/usr/local/lib", "/usr/local/sbin", "/usr/sbin", "/usr/share", "/var", "/var/lib", "/var/log",
    "/var/run", "/var/tmp",
})
#: ... nor anything under these: kernel interfaces, host configuration, secrets, kubelet and pod state.
SYSTEM_TREES = ("/proc/", "/sys/", "/dev/", "/etc/", "/boot/", "/root/", "/home/", "/run/", "/var/run/",
                "/var/lib/kubelet/", "/var/lib/containerd/", "/var/lib/containers/")
_MAX_PATH = 4095  # PATH_MAX less the NUL
#: The system trees' roots themselves, as directories.
_SYSTEM_ROOTS = frozenset(tree.rstrip("/") for tree in SYSTEM_TREES)


def _check_host_path(text: str) -> None:
    """ValueError unless ``text`` is a printable, normalised absolute path (no ``..``, ``.``, ``//``, trailing /)."""
    shown = repr(text)
    if not text.isprintable():
        raise ValueError(f"must not hold control characters (newline, NUL...), got {shown[:80]}")
    if not text.startswith("/"):
        raise ValueError(f"must be an absolute host path, got {shown}")
    if len(text) > _MAX_PATH:
        raise ValueError(f"must be at most {_MAX_PATH} characters, got {len(text)}")
    parts = text.split("/")[1:]
    if ".." in parts or "." in parts or (text != "/" and "" in parts):
        normal = "/" + "/".join(part for part in parts if part not in ("", "."))
        raise ValueError(f"must be a normalised path (no '..', '.', '//' or trailing '/'), got {shown}; "
                         f"write the directory itself{f', e.g. {normal!r}' if '..' not in parts else ''}")


def checked_install_dir(text: str) -> str:
    """``text`` if it is fit to be the install dir, else ValueError saying why (pure: no I/O).

    A normalised absolute path (what a mount source and a reader of the Allocate
    answer see is what was written), printable, not a system directory: the
    Allocate answer mounts it into every container.
    """
    _check_host_path(text)
    if text in SYSTEM_DIRS or (text + "/").startswith(SYSTEM_TREES):
        raise ValueError(f"must not be a system directory (every container gets it mounted), got {text!r}; "
                         f"use a directory of its own such as {DEFAULT_INSTALL_DIR}")
    return text


def checked_hooks_dir(text: str) -> str:
    """``text`` if it is fit to be a hooks.d directory, else ValueError saying why (pure: no I/O).

    The runtime reads it by this absolute path, so the same path rules as the
    install dir; it lives under /etc or /usr/share like the runtimes' own
    (``/etc/containers/oci/hooks.d``), but is never a system directory itself:
    every ``*.json`` there is read as a hook declaration.
    """
    _check_host_path(text)
    if text in SYSTEM_DIRS or text in _SYSTEM_ROOTS:
        raise ValueError(f"must be a hooks.d directory of its own, not the system directory {text!r}; "
                         "podman and CRI-O read /etc/containers/oci/hooks.d")
    return text


def built_pinner() -> Path:
    """Where the package build (or ``python -m pinner.build``) put the static pinner."""
    from pinner.build import DEFAULT_OUTPUT

    return DEFAULT_OUTPUT


#: Where the README says what the pinner's build needs; every message about a missing pinner points there.
BUILD_DOCS = "README.md, section Install"


def build_command(source: Path) -> str:
    """The command that builds the pinner where this ``cmk`` looks for it: an installed package's place too,
    from any directory (run in a checkout, a bare ``python -m pinner.build`` builds into the checkout)."""
    return f"python -m pinner.build --output {shlex.quote(str(source))}"


def unbuilt(source: Path) -> str | None:
    """Why there is no pinner to install, or None when ``source`` is there.

    A package built without a C compiler installs without it (pip shows the
    build's warning only with ``-v``), so ``cmk describe`` and ``cmk demo``
    note it and ``cmk install`` refuses with it.
    """
    if source.is_file():
        return None
    return f"the self-contained pinner was not built ({source} is missing, as after a build without a C compiler)"


def unbuilt_note(source: Path) -> str | None:
    """``cmk describe``'s note when the pinner is missing: what it stops, and where the fix is written."""
    problem = unbuilt(source)
    return problem and (f"{problem}, so 'cmk install' cannot put {INSTALLED_NAME} on this node for workloads "
                        f"to run; {BUILD_DOCS} says how to build it")


def install_pinner(source: Path, install_dir: Path) -> Path:
    """Copy ``source`` to ``install_dir/cmk`` (mode 0755) atomically; returns the installed path."""
    problem = unbuilt(source)
    if problem:
        raise CmkError(
            f"{problem}: build it with '{build_command(source)}' (needs musl-tools or a C compiler with a static "
            f"libc; {BUILD_DOCS}), then run 'cmk install' again"
        )
    try:
        install_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise CmkError(f"cannot create the install directory {install_dir}: {os_reason(err)}") from None
    target = install_dir / INSTALLED_NAME
    try:
        data = source.read_bytes()
    except OSError as err:
        raise CmkError(f"cannot read the built pinner {source}: {os_reason(err)}") from None
    try:
        write_atomically(target, data, mode=0o755)
    except OSError as err:
        raise CmkError(f"cannot install {target}: {os_reason(err)}") from None
    return target
