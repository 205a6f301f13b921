"""The node's container cgroups and their effective cpusets, read from the cpuset hierarchy under the sysfs root.

The cpuset is where the hook confines a container, so this reads the cgroup
tree, not ``/proc`` (no host PID namespace needed): cgroup v1's
``fs/cgroup/cpuset`` if present, else v2's ``fs/cgroup`` when it has the
cpuset controller (a v2 cgroup without cpuset files runs on its nearest
ancestor's CPUs). Bounded against a huge or hostile tree: at most
:data:`MAX_CGROUPS` directories, :data:`MAX_ENTRIES` entries and
:data:`MAX_DEPTH` levels, no symlink followed, a container's own subtree not
entered, every file through the bounded reader. A malformed cpuset file is a
note naming it; a cgroup removed meanwhile is skipped.

Why it works this way: ``docs/design/unconfined.md``.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from deviceplugin.errors import CmkError
from deviceplugin.host.files import (
    PSEUDO_FILE_LIMIT,
    FileProblem,
    check_directory,
    read_file,
    shown,
)
from deviceplugin.model.confinement import Container, container_id
from deviceplugin.model.cpulist import CpuListError, parse_cpu_list
from deviceplugin.model.hookcontract import CONFINED_CGROUP

MAX_DEPTH = 16  # kubepods.slice/kubepods-burstable.slice/...-pod<uid>.slice/<scope> is 4; rootless podman 6
MAX_CGROUPS = 10_000  # directories listed: a node at maxPods 110 has a few hundred
MAX_ENTRIES = 1_000_000  # entries looked at (a v2 cgroup holds ~60 files)
MAX_NOTES = 10
_EFFECTIVE = {1: "cpuset.effective_cpus", 2: "cpuset.cpus.effective"}


class NoHierarchy(CmkError):
    """No cpuset cgroup hierarchy under the sysfs root; the message says where it looked."""


@dataclass(frozen=True)
class CgroupScan:
    """The container cgroups found; ``complete`` False when a bound stopped the walk (then a lower bound)."""

    hierarchy: Path
    version: int
    containers: tuple[Container, ...]
    notes: tuple[str, ...]
    complete: bool


def hierarchy(sysfs_root: Path) -> tuple[Path, int]:
    """The cpuset hierarchy's root directory and its cgroup version."""
    v1, v2 = sysfs_root / "fs" / "cgroup" / "cpuset", sysfs_root / "fs" / "cgroup"
    if check_directory(v1, what="cgroup v1 cpuset hierarchy") and read_file(
            v1 / _EFFECTIVE[1], PSEUDO_FILE_LIMIT, what="cpuset file ") is not None:
        return v1, 1
    controllers = read_file(v2 / "cgroup.controllers", PSEUDO_FILE_LIMIT, what="cgroup v2 controllers file ")
    if controllers is not None and b"cpuset" in controllers.split():
        return v2, 2
    raise NoHierarchy(f"no cpuset cgroup hierarchy under {shown(v2)}: neither cgroup v1's cpuset/ nor cgroup v2 "
                      "with the cpuset controller (mount the host's /sys/fs/cgroup there)")


class _Walk:
    def __init__(self, root: Path, version: int, max_cgroups: int, max_entries: int) -> None:
        self.root, self.version = root, version
        self.cgroups_left, self.entries_left = max_cgroups, max_entries
        self.containers: list[Container] = []
        self.notes: list[str] = []
        self.dropped = 0
        self.complete = True
        # A node's containers share a handful of cpusets: one set per distinct text, not one per container
        # (3,300 containers held 3 MB of equal frozensets between scrapes).
        self._parsed: dict[bytes, frozenset[int]] = {}

    def note(self, text: str) -> None:
        if len(self.notes) < MAX_NOTES:
            self.notes.append(text)
        else:
            self.dropped += 1

    def cpus(self, relative: str) -> frozenset[int] | None:
        """The effective CPUs of cgroup ``relative`` (its nearest ancestor's on v2 without cpuset files)."""
        name = _EFFECTIVE[self.version]
        parts = relative.strip("/").split("/")
        for keep in range(len(parts), -1, -1):
            # os.path, not pathlib: pathlib interns every part (see hooked)
            path = os.path.join(self.root, *parts[:keep], name)
            try:
                raw = read_file(path, PSEUDO_FILE_LIMIT, what="cpuset file ")
            except FileProblem as err:
                self.note(f"{err}: container skipped")
                return None
            if raw is None:
                if keep == len(parts) and (self.version == 1 or not os.path.isdir(os.path.join(self.root, *parts))):
                    return None  # removed meanwhile: the container exited
                continue
            if raw in self._parsed:
                return self._parsed[raw]
            try:
                cpus = self._parsed[raw] = parse_cpu_list(raw.decode("ascii"))
                return cpus
            except (UnicodeDecodeError, CpuListError) as err:
                reason = err.detail if isinstance(err, CpuListError) else "it is not ASCII text"
                self.note(f"{shown(path)} is not a cpu list ({reason}): container skipped")
                return None
        return None

    def hooked(self, relative: str) -> bool:
        """The hook ran for container ``relative``: the cgroup it moves the container's processes into is there."""
        try:
            # os.path, not Path.joinpath: pathlib interns each part, and 3,300 container IDs grew the
            # interpreter's table of interned strings by 1 MB that it never gives back
            return stat.S_ISDIR(os.lstat(os.path.join(self.root, relative.lstrip("/"), CONFINED_CGROUP)).st_mode)
        except OSError:
            return False

    def directory(self, relative: str, depth: int, max_depth: int) -> list[str]:
        """Records the containers directly below ``relative``; the other subdirectories to walk."""
        self.cgroups_left -= 1
        below: list[str] = []
        try:
            with os.scandir(os.path.join(self.root, relative.lstrip("/")) if relative else self.root) as entries:
                for entry in entries:
                    self.entries_left -= 1
                    if self.entries_left < 0:
                        return below
                    try:
                        if not entry.is_dir(follow_symlinks=False):
                            continue
                    except OSError:
                        continue
                    path = f"{relative}/{entry.name}"
                    found = container_id(entry.name)
                    if found is not None:
                        cpus = self.cpus(path)
                        if cpus is not None:
                            self.containers.append(Container(found, path, cpus, self.hooked(path)))
                    elif depth + 1 < max_depth:
                        below.append(path)
                    else:
                        self.stop(f"not walked below depth {max_depth}: {shown(path)}")
        except FileNotFoundError:
            pass  # removed meanwhile
        except OSError as err:
            self.note(f"cannot list {shown(self.root / relative.lstrip('/'))}: {err.strerror or err}")
        return below

    def stop(self, why: str) -> None:
        self.complete = False
        self.note(why)


def scan(sysfs_root: Path, *, max_depth: int = MAX_DEPTH, max_cgroups: int = MAX_CGROUPS,
         max_entries: int = MAX_ENTRIES) -> CgroupScan:
    """Every container cgroup in the cpuset hierarchy, with its effective CPUs, sorted by path."""
    root, version = hierarchy(sysfs_root)
    walk = _Walk(root, version, max_cgroups, max_entries)
    pending = [("", 0)]
    while pending:
        if walk.cgroups_left <= 0:
            walk.stop(f"stopped after listing {max_cgroups} cgroups: the list may be incomplete")
            break
        relative, depth = pending.pop()
        pending += [(path, depth + 1) for path in walk.directory(relative, depth, max_depth)]
        if walk.entries_left < 0:
            walk.stop(f"stopped after {max_entries} directory entries: the list may be incomplete")
            break
    notes = walk.notes + ([f"and {walk.dropped} more notes"] if walk.dropped else [])
    return CgroupScan(root, version, tuple(sorted(walk.containers, key=lambda c: c.cgroup)), tuple(notes),
                      walk.complete)
