"""``cmk hook --node-wide=RECORD``: every container confined, from trusted inputs only (real cgroup v1 cpusets).

The runtime runs it for every container (hooks.d or a base runtime spec). A
container with ``cmk hook --cpus`` entries (its CDI devices) gets exactly
their union; one without gets the infra CPUs of the node's record.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from deviceplugin.model import hookcontract as hook
from deviceplugin.model.cpulist import format_cpu_list
from deviceplugin.model.pinnercontract import HookExit
from tests.support.hookrun import (
    cpu_cgroup,
    cpus_allowed,
    cpuset_cgroup,
    process_in,
    read_cpus,
    run_hook,
    state,
    write_config,
)


@pytest.fixture
def cpus() -> tuple[str, str]:
    """(the lowest CPU, the highest): an infra and an exclusive CPU on any machine with two."""
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.fail(f"the node-wide tests need two CPUs; this machine lets us use {format_cpu_list(set(allowed))}")
    return str(allowed[0]), str(allowed[-1])


def node_wide(record: Path) -> str:
    return hook.node_wide_command_line(str(record))[2]


def test_a_container_without_cmk_entries_gets_the_infra_cpus(native_cmk: Path, tmp_path: Path,
                                                             cpus: tuple[str, str]) -> None:
    infra, _ = cpus
    record = tmp_path / hook.RECORD_NAME
    record.write_text(f"{infra}\n")
    write_config(tmp_path, [], other_hooks=[{"path": "/opt/bin/cmk", "args": hook.node_wide_command_line(str(record))}])
    with cpuset_cgroup() as cgroup, process_in(cgroup) as proc:
        result = run_hook(native_cmk, state(proc.pid, tmp_path), node_wide(record))
        assert (result.returncode, result.stderr) == (0, b"")
        assert (read_cpus(cgroup / "cpuset.cpus"), cpus_allowed(proc.pid)) == (infra, infra)


def test_a_pinned_container_gets_its_entries_union_whatever_the_record_says(native_cmk: Path, tmp_path: Path,
                                                                            cpus: tuple[str, str]) -> None:
    infra, exclusive = cpus
    record = tmp_path / hook.RECORD_NAME
    record.write_text(f"{infra}\n")
    write_config(tmp_path, [exclusive])
    with cpuset_cgroup() as cgroup, process_in(cgroup) as proc:
        for args in ([node_wide(record)], [f"--cpus={exclusive}"], [node_wide(record)]):  # any order, same CPUs
            result = run_hook(native_cmk, state(proc.pid, tmp_path), *args)
            assert (result.returncode, result.stderr) == (0, b"")
            assert (read_cpus(cgroup / "cpuset.cpus"), cpus_allowed(proc.pid)) == (exclusive, exclusive)


def test_a_pinned_container_never_needs_the_record(native_cmk: Path, tmp_path: Path, cpus: tuple[str, str]) -> None:
    _, exclusive = cpus
    write_config(tmp_path, [exclusive])
    with cpuset_cgroup() as cgroup, process_in(cgroup) as proc:
        result = run_hook(native_cmk, state(proc.pid, tmp_path), node_wide(tmp_path / "absent"))
        assert (result.returncode, result.stderr) == (0, b"")
        assert read_cpus(cgroup / "cpuset.cpus") == exclusive


def test_without_a_record_an_ordinary_container_starts_as_created(native_cmk: Path, tmp_path: Path) -> None:
    """Before the daemon or cmk install ever ran (the daemon's own pod included): nothing refused, nothing changed."""
    write_config(tmp_path, [])
    with cpuset_cgroup() as cgroup, process_in(cgroup) as proc:
        before = read_cpus(cgroup / "cpuset.cpus"), cpus_allowed(proc.pid)
        result = run_hook(native_cmk, state(proc.pid, tmp_path), node_wide(tmp_path / hook.RECORD_NAME))
        assert (result.returncode, result.stderr) == (0, b"")
        assert (read_cpus(cgroup / "cpuset.cpus"), cpus_allowed(proc.pid)) == before


def test_a_container_whose_cpus_the_kubelet_chose_starts_as_created(native_cmk: Path, tmp_path: Path,
                                                                    cpus: tuple[str, str]) -> None:
    """The kubelet's static CPU manager names every container's CPUs in its spec and keeps rewriting them.

    Confining such a container to infra would fight it (a Guaranteed pod on infra until the
    kubelet's next reconcile), so the node-wide hook leaves it as the runtime made it; a blank
    ``cpus`` names none (policy none), and the container is confined as ever.
    """
    infra, exclusive = cpus
    record = tmp_path / hook.RECORD_NAME
    record.write_text(f"{infra}\n")
    for cpuset, confined in ((exclusive, False), (" ", True), ("", True)):
        write_config(tmp_path, [], cpuset=cpuset)
        with cpuset_cgroup() as cgroup, process_in(cgroup) as proc:
            before = read_cpus(cgroup / "cpuset.cpus"), cpus_allowed(proc.pid)
            result = run_hook(native_cmk, state(proc.pid, tmp_path), node_wide(record))
            assert (result.returncode, result.stderr) == (0, b"")
            after = read_cpus(cgroup / "cpuset.cpus"), cpus_allowed(proc.pid)
            assert after == ((infra, infra) if confined else before), repr(cpuset)


def test_a_pinned_container_gets_its_entries_whatever_cpus_its_spec_names(native_cmk: Path, tmp_path: Path,
                                                                         cpus: tuple[str, str]) -> None:
    infra, exclusive = cpus
    record = tmp_path / hook.RECORD_NAME
    record.write_text(f"{infra}\n")
    write_config(tmp_path, [exclusive], cpuset=infra)
    with cpuset_cgroup() as cgroup, process_in(cgroup) as proc:
        result = run_hook(native_cmk, state(proc.pid, tmp_path), node_wide(record))
        assert (result.returncode, result.stderr) == (0, b"")
        assert (read_cpus(cgroup / "cpuset.cpus"), cpus_allowed(proc.pid)) == (exclusive, exclusive)


@pytest.mark.parametrize("content", [b"", b"\n", b"0-x\n", b"infra=0\n", b"0\x001\n", b"1-0\n"],
                         ids=["empty", "blank", "not-a-list", "key-value", "nul", "reversed"])
def test_a_malformed_record_refuses_the_start_in_one_line(native_cmk: Path, tmp_path: Path, content: bytes) -> None:
    record = tmp_path / hook.RECORD_NAME
    record.write_bytes(content)
    write_config(tmp_path, [])
    with cpuset_cgroup() as cgroup, process_in(cgroup) as proc:
        before = read_cpus(cgroup / "cpuset.cpus")
        result = run_hook(native_cmk, state(proc.pid, tmp_path), node_wide(record))
        assert result.returncode == HookExit.RECORD
        line = result.stderr.decode(errors="replace")
        assert line.startswith(f"cmk hook: error: the node's infra record {record} holds ") and line.count("\n") == 1
        assert line.rstrip("\n").endswith(hook.RECORD_HINT)
        assert read_cpus(cgroup / "cpuset.cpus") == before


def test_a_record_that_is_a_directory_refuses_the_start(native_cmk: Path, tmp_path: Path) -> None:
    record = tmp_path / hook.RECORD_NAME
    record.mkdir()
    write_config(tmp_path, [])
    with cpuset_cgroup() as cgroup, process_in(cgroup) as proc:
        result = run_hook(native_cmk, state(proc.pid, tmp_path), node_wide(record))
        assert result.returncode == HookExit.RECORD
        assert result.stderr.decode().startswith(f"cmk hook: error: cannot read the node's infra record {record}: ")


@pytest.mark.parametrize("args", [["--node-wide=/r", "--cpus=0"], ["--node-wide=/r", "--exclusive"], ["--node-wide="]],
                         ids=["with-cpus", "with-exclusive", "no-path"])
def test_node_wide_options_that_make_no_sense_are_usage_errors(native_cmk: Path, args: list[str]) -> None:
    result = run_hook(native_cmk, "{}", *args)
    assert result.returncode == HookExit.USAGE
    assert result.stderr.startswith(b"cmk hook: error: --node-wide ") and result.stderr.count(b"\n") == 1


def test_the_node_wide_hook_removes_the_quota_of_exclusive_cores_too(native_cmk: Path, tmp_path: Path,
                                                                     cpus: tuple[str, str]) -> None:
    _, exclusive = cpus
    write_config(tmp_path, [exclusive], exclusive=[True])
    with cpuset_cgroup() as cpuset, cpu_cgroup(50_000) as cpu, process_in(cpuset) as proc:
        (cpu / "cgroup.procs").write_text(str(proc.pid))
        result = run_hook(native_cmk, state(proc.pid, tmp_path), node_wide(tmp_path / "absent"))
        assert (result.returncode, result.stderr) == (0, b"")
        assert read_cpus(cpu / "cpu.cfs_quota_us") == "-1"


def test_an_ordinary_container_keeps_its_quota(native_cmk: Path, tmp_path: Path, cpus: tuple[str, str]) -> None:
    infra, _ = cpus
    record = tmp_path / hook.RECORD_NAME
    record.write_text(infra)
    write_config(tmp_path, [])
    with cpuset_cgroup() as cpuset, cpu_cgroup(50_000) as cpu, process_in(cpuset) as proc:
        (cpu / "cgroup.procs").write_text(str(proc.pid))
        assert run_hook(native_cmk, state(proc.pid, tmp_path), node_wide(record)).returncode == 0
        assert read_cpus(cpu / "cpu.cfs_quota_us") == "50000"
