"""``cmk hook`` confines a container: its cpuset cgroup and the affinity of every task of its init process.

Real processes in real cgroup v1 cpusets (this machine's hierarchy); the
cgroup v2 layout, which this machine cannot mount beside v1's cpuset, is
checked with a procfs stand-in naming a cgroup2 path and a directory of
cgroup files, while the affinity is still set on a real multi-threaded process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from deviceplugin.model import hookcontract as hook
from deviceplugin.model.pinnercontract import HOOK_HELP, HookExit
from tests.support.hookrun import (
    THREADED,
    cpu_cgroup,
    cpus_allowed,
    cpuset_cgroup,
    kernel_files,
    process_in,
    read_cpus,
    run_hook,
    state,
    tasks,
    write_config,
)


def test_confines_the_cgroup_and_the_init_process(native_cmk: Path, tmp_path: Path) -> None:
    write_config(tmp_path, ["1"])
    with cpuset_cgroup() as cgroup, process_in(cgroup) as proc:
        assert cpus_allowed(proc.pid) == read_cpus(cgroup.parent / "cpuset.cpus")
        result = run_hook(native_cmk, state(proc.pid, tmp_path), "--cpus=1")
        assert (result.returncode, result.stderr, result.stdout) == (0, b"", b"")
        assert read_cpus(cgroup / "cpuset.cpus") == "1"
        assert cpus_allowed(proc.pid) == "1"


def test_a_container_of_several_devices_gets_their_union_from_each_hook(native_cmk: Path, tmp_path: Path) -> None:
    """Each device's hook runs; each takes the union of every cmk hook entry, so any order ends the same."""
    write_config(tmp_path, ["1", "0"], other_hooks=[{"path": "/usr/bin/true", "args": ["true", "--cpus=5"]}])
    with cpuset_cgroup(cpus="0") as cgroup, process_in(cgroup) as proc:  # the runtime gave it CPU 0 only
        for own in ("1", "0"):
            result = run_hook(native_cmk, state(proc.pid, tmp_path), f"--cpus={own}")
            assert (result.returncode, result.stderr) == (0, b"")
            assert read_cpus(cgroup / "cpuset.cpus") == "0-1"
            assert cpus_allowed(proc.pid) == "0-1"


def test_the_env_is_never_read(native_cmk: Path, tmp_path: Path) -> None:
    """A pod's own env names every pool variable: the hook confines to the hook entries' CPUs alone."""
    forged = ["CMK_CPUS_EXCLUSIVE=0-1", "CMK_CPUS_SHARED=0-1", "CMK_CPUS_INFRA=0-1", "CMK_CPUS_EXCLUSIVE_NON_ISOLCPUS=0-1"]
    write_config(tmp_path, ["1"], env=forged)
    with cpuset_cgroup() as cgroup, process_in(cgroup) as proc:
        assert run_hook(native_cmk, state(proc.pid, tmp_path), "--cpus=1").returncode == 0
        assert (read_cpus(cgroup / "cpuset.cpus"), cpus_allowed(proc.pid)) == ("1", "1")


def test_running_twice_is_harmless(native_cmk: Path, tmp_path: Path) -> None:
    """A runtime may apply the same CDI device's hook more than once."""
    write_config(tmp_path, ["0", "0"])
    with cpuset_cgroup() as cgroup, process_in(cgroup) as proc:
        results = [run_hook(native_cmk, state(proc.pid, tmp_path), "--cpus=0") for _ in range(2)]
        assert [(r.returncode, r.stderr) for r in results] == [(0, b""), (0, b"")]
        assert (read_cpus(cgroup / "cpuset.cpus"), cpus_allowed(proc.pid)) == ("0", "0")


def test_a_process_cannot_widen_its_affinity_past_the_cgroup(native_cmk: Path, tmp_path: Path) -> None:
    write_config(tmp_path, ["1"])
    script = "import os; os.sched_setaffinity(0, {0, 1}); print(sorted(os.sched_getaffinity(0)))"
    with cpuset_cgroup() as cgroup, process_in(cgroup) as proc:
        assert run_hook(native_cmk, state(proc.pid, tmp_path), "--cpus=1").returncode == 0
        # another process of the container: it joins the cgroup, then asks for every CPU
        joins = f'echo $$ > {cgroup}/cgroup.procs && exec "$0" -c "$1"'
        with process_in(None, ["sh", "-c", joins, sys.executable, script]) as workload:
            assert workload.stdout is not None
            assert workload.stdout.read() == "[1]\n"


def test_cgroup_v2_layout_and_every_thread_pinned(native_cmk: Path, tmp_path: Path) -> None:
    """A ``0::`` line names the cgroup below the unified mount; the parent's ``cpuset.cpus.effective`` bounds it."""
    bundle, proc_root, cgroup_root = tmp_path / "bundle", tmp_path / "proc", tmp_path / "cgroup2"
    write_config(bundle, ["1"])
    container = cgroup_root / "kubepods" / "pod1" / "ctr"
    container.mkdir(parents=True)
    (container.parent / "cpuset.cpus.effective").write_text("0-1\n")
    (container / "cpuset.cpus").write_text("")
    with process_in(None, [sys.executable, "-c", THREADED]) as proc:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        (proc_root / str(proc.pid)).mkdir(parents=True)
        (proc_root / str(proc.pid) / "cgroup").write_text("0::/kubepods/pod1/ctr\n")
        (proc_root / str(proc.pid) / "task").symlink_to(f"/proc/{proc.pid}/task")  # the real threads
        leaf = kernel_files(container, proc.pid)
        result = run_hook(native_cmk, state(proc.pid, bundle), "--cpus=1", f"--proc-root={proc_root}",
                          "--cgroup-root", str(cgroup_root))
        assert (result.returncode, result.stderr) == (0, b"")
        assert (container / "cpuset.cpus").read_text() == "1\n"
        assert (leaf / "cgroup.procs").read_text() == str(proc.pid)  # v2: no cpuset files of its own
        assert len(tasks(proc.pid)) == 4
        assert {cpus_allowed(task) for task in tasks(proc.pid)} == {"1"}


def test_mountinfo_locates_a_subtree_mount_with_an_escaped_path(native_cmk: Path, tmp_path: Path) -> None:
    """A cgroup2 mount of ``/kubepods`` at ``.../cgroup two`` shows ``/kubepods/pod1/ctr`` as ``pod1/ctr``."""
    bundle, proc_root, mount = tmp_path / "bundle", tmp_path / "proc", tmp_path / "cgroup two"
    write_config(bundle, ["0"])
    container = mount / "pod1" / "ctr"
    container.mkdir(parents=True)
    (container.parent / "cpuset.cpus.effective").write_text("0-1\n")
    (container / "cpuset.cpus").write_text("0-1\n")
    escaped = str(mount).replace(" ", "\\040")
    (proc_root / "self").mkdir(parents=True)
    (proc_root / "self" / "mountinfo").write_text(
        "22 1 0:5 / / rw - ext4 /dev/sda1 rw\n"
        "36 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime shared:9 - cgroup cgroup rw,cpuset\n"
        f"41 31 0:38 /kubepods {escaped} rw,nosuid shared:14 master:2 - cgroup2 cgroup2 rw,nsdelegate\n"
    )
    with process_in(None) as proc:
        (proc_root / str(proc.pid)).mkdir()
        (proc_root / str(proc.pid) / "cgroup").write_text("0::/kubepods/pod1/ctr\n")
        kernel_files(container, proc.pid)
        result = run_hook(native_cmk, state(proc.pid, bundle), "--cpus", "0", "--proc-root", str(proc_root))
        assert (result.returncode, result.stderr) == (0, b"")
        assert (container / "cpuset.cpus").read_text() == "0\n"
        assert cpus_allowed(proc.pid) == "0"


def test_a_child_cgroup_using_other_cpus_makes_the_write_fail(native_cmk: Path, tmp_path: Path) -> None:
    """The kernel refuses to shrink a v1 cpuset below a child's CPUs: the hook reports it, status 10."""
    write_config(tmp_path, ["1"])
    with cpuset_cgroup() as cgroup, cpuset_cgroup(cgroup, cpus="0"), process_in(cgroup) as proc:
        result = run_hook(native_cmk, state(proc.pid, tmp_path), "--cpus=1")
        assert result.returncode == HookExit.CGROUP_WRITE
        assert result.stderr.decode() == (
            f"cmk hook: error: cannot write the container's CPUs to {cgroup}/cpuset.cpus: device or resource busy\n"
        )
        assert read_cpus(cgroup / "cpuset.cpus") == read_cpus(cgroup.parent / "cpuset.cpus")


def test_help_is_the_generated_text(native_cmk: Path) -> None:
    result = run_hook(native_cmk, b"", "--help")
    assert (result.returncode, result.stdout.decode()) == (0, HOOK_HELP)


def first_cpu() -> str:
    return str(min(os.sched_getaffinity(0)))


@pytest.mark.parametrize(("marks", "quota"), [
    ((True,), "-1"),
    ((True, True), "-1"),
    ((True, False), "50000"),  # also holds a shared or infra device: keeps its quota
    ((False,), "50000"),  # the daemon left the mark out (--no-unthrottle-exclusive)
], ids=["one-exclusive-core", "two-exclusive-cores", "core-and-slot", "unmarked"])
def test_the_cfs_quota_goes_only_when_every_entry_is_an_exclusive_core(
        native_cmk: Path, tmp_path: Path, marks: tuple[bool, ...], quota: str) -> None:
    cpu = first_cpu()
    write_config(tmp_path, [cpu] * len(marks), exclusive=marks)
    own = hook.command_line(cpu, exclusive=marks[0])[2:]
    with cpuset_cgroup() as cpuset, cpu_cgroup(50_000) as cpu_cg, process_in(cpuset) as proc:
        (cpu_cg / "cgroup.procs").write_text(str(proc.pid))
        result = run_hook(native_cmk, state(proc.pid, tmp_path), *own)
        assert (result.returncode, result.stderr) == (0, b"")
        assert (read_cpus(cpu_cg / "cpu.cfs_quota_us"), read_cpus(cpu_cg / "cpu.cfs_period_us")) == (quota, "100000")
        assert read_cpus(cpuset / "cpuset.cpus") == cpu


def exclusive_hook_on_v2(native_cmk: Path, tmp_path: Path, cgroup: str,
                         quotas: Callable[[Path], object]) -> tuple[subprocess.CompletedProcess[bytes], Path]:
    """The hook on one exclusive core, for a process in the cgroup v2 directory ``cgroup`` of a tree in
    ``tmp_path`` whose quota files ``quotas(container)`` wrote; the hook's result and that directory."""
    bundle, proc_root, cgroup_root = tmp_path / "bundle", tmp_path / "proc", tmp_path / "cgroup2"
    write_config(bundle, ["0"], exclusive=[True])
    container = cgroup_root / cgroup
    container.mkdir(parents=True)
    (container.parent / "cpuset.cpus.effective").write_text("0-1\n")
    (container / "cpuset.cpus").write_text("")
    quotas(container)
    with process_in(None) as proc:
        (proc_root / str(proc.pid)).mkdir(parents=True)
        (proc_root / str(proc.pid) / "cgroup").write_text(f"0::/{cgroup}\n")
        kernel_files(container, proc.pid)
        return run_hook(native_cmk, state(proc.pid, bundle), "--cpus=0", "--exclusive", f"--proc-root={proc_root}",
                        f"--cgroup-root={cgroup_root}"), container


def test_cgroup_v2_quota_becomes_max_in_the_same_directory(native_cmk: Path, tmp_path: Path) -> None:
    def quotas(container: Path) -> None:
        (container.parent / "cpu.max").write_text("200000 100000\n")
        (container / "cpu.max").write_text("100000 100000\n")

    result, container = exclusive_hook_on_v2(native_cmk, tmp_path, "kubepods/pod1/ctr", quotas)
    assert (result.returncode, result.stderr) == (0, b"")
    assert (container / "cpu.max").read_text() == "max\n"
    assert (container.parent / "cpu.max").read_text() == "200000 100000\n"  # the pod's quota stays


def test_an_unwritable_quota_refuses_the_start_in_one_line(native_cmk: Path, tmp_path: Path) -> None:
    result, _ = exclusive_hook_on_v2(native_cmk, tmp_path, "pod1/ctr",
                                     lambda container: (container / "cpu.max").mkdir())  # not a regular file
    assert result.returncode == HookExit.QUOTA
    assert result.stderr.decode().startswith("cmk hook: error: cannot remove the CFS quota of the container's ")
    assert result.stderr.count(b"\n") == 1
