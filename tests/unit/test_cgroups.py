"""The cgroup scan on real directory trees in tmp: v1 and v2 layouts as the runtimes make them, and hostile ones."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from deviceplugin.host.cgroups import NoHierarchy, scan
from deviceplugin.host.files import FileProblem
from tests.hostile.inputs import plant

A, B, C, D = ("a" * 64, "b" * 64, "c" * 64, "d" * 64)


def cgroup(root: Path, relative: str, cpus: str | None, name: str = "cpuset.effective_cpus") -> Path:
    """A cgroup directory with its effective-CPUs file (None: no cpuset files, as v2 without the controller)."""
    path = root / relative.strip("/")
    path.mkdir(parents=True, exist_ok=True)
    if cpus is not None:
        (path / name).write_text(cpus + "\n")
        (path / "cpuset.cpus").write_text(cpus + "\n")
        (path / "tasks").write_text("")
    return path


def v1_tree(sysfs: Path) -> Path:
    """Podman 4.3's cgroupfs layout seen on this machine, a kubelet's cgroupfs pods, conmon beside them."""
    root = sysfs / "fs/cgroup/cpuset"
    cgroup(root, "", "0-3")
    cgroup(root, "libpod_parent", "0-3")
    cgroup(root, f"libpod_parent/libpod-{A}", "0-3")  # born before the hook
    cgroup(root, "libpod_parent/conmon", "0-3")
    cgroup(root, "kubepods/burstable/pod1234", "0-3")
    cgroup(root, f"kubepods/burstable/pod1234/{B}", "0")  # confined to infra
    cgroup(root, f"kubepods/burstable/pod1234/crio-{C}", "2-3")
    (sysfs / "fs/cgroup/unified").mkdir()  # the hybrid layout's v2 tree, without cpuset
    return root


def v2_tree(sysfs: Path) -> Path:
    """systemd's slices under cgroup v2: cpuset enabled down to the pods, one scope without it."""
    root = sysfs / "fs/cgroup"
    effective = "cpuset.cpus.effective"
    cgroup(root, "", "0-7", effective)
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    pod = "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice"
    cgroup(root, "kubepods.slice", "0-7", effective)
    cgroup(root, "kubepods.slice/kubepods-burstable.slice", "0-7", effective)
    cgroup(root, pod, "0-6", effective)
    cgroup(root, f"{pod}/cri-containerd-{A}.scope", "0-1", effective)
    cgroup(root, f"{pod}/crio-conmon-{B}.scope", "0-7", effective)
    cgroup(root, f"{pod}/crio-{B}.scope", None)  # no cpuset files: runs on the pod's 0-6
    cgroup(root, f"machine.slice/libpod-{C}.scope", "4", effective)
    cgroup(root, f"machine.slice/libpod-{C}.scope/container", "4", effective)  # nested: not entered
    cgroup(root, f"machine.slice/libpod-conmon-{C}.scope", "0-7", effective)
    cgroup(root, "system.slice/containerd.service", "0-7", effective)
    return root


def found(sysfs: Path) -> dict[str, str]:
    from deviceplugin.model.cpulist import format_cpu_list

    return {c.cgroup: format_cpu_list(c.cpus) for c in scan(sysfs).containers}


def test_v1_finds_the_containers_of_every_runtimes_cgroupfs_layout_and_not_conmon(tmp_path: Path) -> None:
    root = v1_tree(tmp_path)
    result = scan(tmp_path)
    assert (result.hierarchy, result.version, result.complete, result.notes) == (root, 1, True, ())
    assert {c.cgroup: (c.id, c.cpus) for c in result.containers} == {
        f"/libpod_parent/libpod-{A}": (A, frozenset(range(4))),
        f"/kubepods/burstable/pod1234/{B}": (B, frozenset({0})),
        f"/kubepods/burstable/pod1234/crio-{C}": (C, frozenset({2, 3})),
    }


def test_v2_takes_the_nearest_cpuset_of_a_container_without_one_and_skips_conmon_and_nested(tmp_path: Path) -> None:
    v2_tree(tmp_path)
    pod = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice"
    result = scan(tmp_path)
    assert (result.version, result.complete) == (2, True)
    assert found(tmp_path) == {f"{pod}/cri-containerd-{A}.scope": "0-1", f"{pod}/crio-{B}.scope": "0-6",
                               f"/machine.slice/libpod-{C}.scope": "4"}


def test_v2_without_the_cpuset_controller_and_no_tree_are_one_line_each(tmp_path: Path) -> None:
    with pytest.raises(NoHierarchy, match="no cpuset cgroup hierarchy under .*fs/cgroup"):
        scan(tmp_path)
    (tmp_path / "fs/cgroup").mkdir(parents=True)
    (tmp_path / "fs/cgroup/cgroup.controllers").write_text("cpu io memory pids\n")
    with pytest.raises(NoHierarchy):
        scan(tmp_path)


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "too large", "directory", "symlink loop", "socket",
                                  "invalid utf-8"])
def test_a_hostile_cpuset_file_is_a_note_naming_it_and_the_scan_goes_on(tmp_path: Path, kind: str) -> None:
    root = v1_tree(tmp_path)
    bad = plant(root / f"libpod_parent/libpod-{A}/cpuset.effective_cpus", kind)
    result = scan(tmp_path)
    assert f"/libpod_parent/libpod-{A}" not in {c.cgroup for c in result.containers}
    assert len(result.containers) == 2
    assert len(result.notes) == 1 and str(bad) in result.notes[0] and "\n" not in result.notes[0]


@pytest.mark.parametrize("text", ["0-x", "3-1", "0-99999999", "0,,1", "٣"])
def test_a_malformed_cpuset_is_a_note_with_the_reason(tmp_path: Path, text: str) -> None:
    root = v1_tree(tmp_path)
    (root / f"libpod_parent/libpod-{A}/cpuset.effective_cpus").write_text(text)
    notes = scan(tmp_path).notes
    assert len(notes) == 1 and "is not a cpu list (" in notes[0] and "container skipped" in notes[0]


def test_the_hierarchy_itself_hostile_is_a_file_problem(tmp_path: Path) -> None:
    (tmp_path / "fs/cgroup").mkdir(parents=True)
    os.mkfifo(tmp_path / "fs/cgroup/cpuset")
    with pytest.raises(FileProblem, match="FIFO"):
        scan(tmp_path)
    (tmp_path / "fs/cgroup/cpuset").unlink()
    cgroup(tmp_path / "fs/cgroup/cpuset", "", None)
    os.mkfifo(tmp_path / "fs/cgroup/cpuset/cpuset.effective_cpus")
    with pytest.raises(FileProblem, match="FIFO"):
        scan(tmp_path)


def test_symlinks_are_not_followed_and_a_loop_cannot_trap_the_walk(tmp_path: Path) -> None:
    root = v1_tree(tmp_path)
    (root / "kubepods/loop").symlink_to(root)
    (root / f"libpod-{D}").symlink_to(root / f"libpod_parent/libpod-{A}")
    assert len(scan(tmp_path).containers) == 3


def test_a_deep_tree_stops_at_the_depth_bound_and_says_the_list_may_be_incomplete(tmp_path: Path) -> None:
    root = v1_tree(tmp_path)
    deep = cgroup(root, "/".join(["d"] * 40), "0-3")
    cgroup(deep, C, "0-3")
    result = scan(tmp_path, max_depth=8)
    assert not result.complete and any("depth 8" in n for n in result.notes)
    assert len(result.containers) == 3


def test_wide_trees_stop_at_the_cgroup_and_entry_bounds(tmp_path: Path) -> None:
    root = v1_tree(tmp_path)
    for i in range(50):
        cgroup(root, f"wide/g{i}/h", "0")
    by_cgroups = scan(tmp_path, max_cgroups=20)
    assert not by_cgroups.complete and any("20 cgroups" in n for n in by_cgroups.notes)
    for i in range(3000):
        (root / "wide" / f"f{i}").write_text("")
    by_entries = scan(tmp_path, max_entries=1000)
    assert not by_entries.complete and any("1000 directory entries" in n for n in by_entries.notes)


def test_notes_are_capped_and_counted(tmp_path: Path) -> None:
    root = v1_tree(tmp_path)
    for i in range(30):
        cgroup(root, f"many/{i:064x}", "bad")
    notes = scan(tmp_path).notes
    assert len(notes) == 11 and notes[-1] == "and 20 more notes"


def test_a_cgroup_removed_during_the_walk_is_skipped(tmp_path: Path) -> None:
    root = v1_tree(tmp_path)
    gone = root / f"libpod_parent/libpod-{D}"  # a directory entry without its files: removed meanwhile
    gone.mkdir()
    result = scan(tmp_path)
    assert len(result.containers) == 3 and result.notes == ()


def test_a_fifo_cannot_block_the_scan(tmp_path: Path) -> None:
    root = v1_tree(tmp_path)
    plant(root / f"kubepods/burstable/pod1234/{B}/cpuset.effective_cpus", "fifo")
    done = threading.Event()
    threading.Thread(target=lambda: (scan(tmp_path), done.set()), daemon=True).start()
    assert done.wait(10), "the scan blocked on a FIFO"
