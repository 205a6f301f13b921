"""Hand-made cpuset cgroup trees for the unconfined-container checks: containers with their CPUs, hooked or not."""

from __future__ import annotations

from pathlib import Path

from deviceplugin.model import hookcontract as hook
from deviceplugin.model.cpulist import format_cpu_list


def container(root: Path, name: str, cpus: object, *, hooked: bool = False) -> None:
    path = root / "kubepods" / name
    path.mkdir(parents=True)
    (path / "cpuset.effective_cpus").write_text(format_cpu_list(cpus) + "\n")  # type: ignore[arg-type]
    if hooked:
        (path / hook.CONFINED_CGROUP).mkdir()  # the hook ran for it


def cpuset_root(sysfs: Path) -> Path:
    """A cgroup v1 cpuset hierarchy under the dump, holding all 16 CPUs and no container yet."""
    root = sysfs / "fs/cgroup/cpuset"
    root.mkdir(parents=True)
    (root / "cpuset.effective_cpus").write_text("0-15\n")
    return root

