"""A root process of a confined container cannot widen its cpuset, whatever namespaces it makes (issue 20).

Real processes in real cgroup v1 cpusets: the attacker of ``tests/support/escape.c``
(a new user, mount and cgroup namespace, by ``unshare`` or by one raw ``clone``;
the cpuset hierarchy mounted there, its root written with every CPU) runs in
the cgroup the hook confined, as a container's init process would, and must
end on the hook's CPUs. The control case runs the same attacker in a cgroup
narrowed the way the hook narrowed containers before the bound: it widens, so
these tests can fail.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from deviceplugin.model import hookcontract as hook
from deviceplugin.model.cpulist import format_cpu_list
from tests.support import escape
from tests.support.hookrun import (
    cpuset_cgroup,
    read_cpus,
    run_hook,
    state,
    write_config,
)


@pytest.fixture(scope="session")
def attacker(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return escape.build(tmp_path_factory.mktemp("escape") / "escape")


@contextmanager
def waiting_in(cgroup: Path, argv: list[str]) -> Iterator[subprocess.Popen[str]]:
    """``argv`` started in ``cgroup`` but held until its stdin gets a line, as runc holds a container's init."""
    proc = subprocess.Popen(["sh", "-c", 'read go && exec "$@"', "sh", *argv], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        (cgroup / "cgroup.procs").write_text(str(proc.pid))
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=10)


def release(proc: subprocess.Popen[str]) -> escape.Attempt:
    out, _ = proc.communicate("go\n", timeout=60)
    return escape.parse(out)


def two_cpus() -> tuple[str, str, str]:
    """(the CPU a container is given, another, every CPU this process may use): the attack needs two or more."""
    online = frozenset(os.sched_getaffinity(0))
    if len(online) < 2:
        pytest.fail("these tests need two CPUs: one for the container, one it must not reach")
    return str(min(online)), str(max(online)), format_cpu_list(online)


@pytest.mark.parametrize("mode", escape.MODES)
def test_the_hooked_container_stays_on_its_cpus(native_cmk: Path, attacker: Path, tmp_path: Path, mode: str) -> None:
    cpu, _, _ = two_cpus()
    write_config(tmp_path, [cpu])
    with cpuset_cgroup() as cgroup, waiting_in(cgroup, [str(attacker), mode]) as proc:
        result = run_hook(native_cmk, state(proc.pid, tmp_path), f"--cpus={cpu}")
        assert (result.returncode, result.stderr) == (0, b"")
        attempt = release(proc)
        assert (attempt.steps["mount"], attempt.affinity) == ("ok", cpu)  # it got as far as the mount
        assert not attempt.widened_cgroup, attempt
        leaf = cgroup / hook.CONFINED_CGROUP
        assert (read_cpus(cgroup / "cpuset.cpus"), read_cpus(leaf / "cpuset.cpus")) == (cpu, cpu)


@pytest.mark.parametrize("mode", escape.MODES)
def test_without_the_bound_the_same_process_widens_its_cgroup(attacker: Path, mode: str) -> None:
    """The control: the container's own cgroup narrowed (what the hook did before) is no bound."""
    cpu, _, everything = two_cpus()
    with cpuset_cgroup(cpus=cpu) as cgroup, waiting_in(cgroup, [str(attacker), mode]) as proc:
        attempt = release(proc)
        assert attempt.widened_cgroup and attempt.affinity == everything, attempt


def test_the_processes_move_below_the_container_cgroup_once(native_cmk: Path, tmp_path: Path) -> None:
    """Each CDI device's hook runs (two here): the second finds the process below and confines from the same cgroup."""
    cpu, _, _ = two_cpus()
    write_config(tmp_path, [cpu, cpu])
    with cpuset_cgroup() as cgroup, waiting_in(cgroup, ["true"]) as proc:
        for _ in range(2):
            result = run_hook(native_cmk, state(proc.pid, tmp_path), f"--cpus={cpu}")
            assert (result.returncode, result.stderr) == (0, b"")
        leaf = cgroup / hook.CONFINED_CGROUP
        assert (leaf / "cgroup.procs").read_text().split() == [str(proc.pid)]
        assert (cgroup / "cgroup.procs").read_text() == ""
        assert not (leaf / hook.CONFINED_CGROUP).exists()


@contextmanager
def pod(cpus: str) -> Iterator[tuple[Path, Path]]:
    """(a pod cgroup, its container's cgroup) beside a sandbox child confined to ``cpus``, as the node-wide hook leaves it."""
    with cpuset_cgroup() as pod_cgroup, cpuset_cgroup(pod_cgroup, cpus=cpus), cpuset_cgroup(pod_cgroup) as container:
        yield pod_cgroup, container


def test_a_process_that_joins_the_container_later_is_bound_by_the_pod(native_cmk: Path, attacker: Path,
                                                                       tmp_path: Path) -> None:
    """kubectl exec puts a process in the container's own cgroup: the pod, narrowed to its children, bounds it."""
    cpu, _, everything = two_cpus()
    write_config(tmp_path, [cpu])
    with pod(cpu) as (pod_cgroup, container), waiting_in(container, ["true"]) as init:
        assert read_cpus(pod_cgroup / "cpuset.cpus") == everything
        result = run_hook(native_cmk, state(init.pid, tmp_path), f"--cpus={cpu}")
        assert (result.returncode, result.stderr) == (0, b"")
        assert read_cpus(pod_cgroup / "cpuset.cpus") == cpu  # what its sandbox and container hold
        with waiting_in(container, [str(attacker), "unshare"]) as joined:
            attempt = release(joined)
        assert (attempt.steps["mount"], attempt.widened_cgroup, attempt.affinity) == ("ok", False, cpu), attempt


def test_a_later_container_widens_the_pod_by_its_own_cpus(native_cmk: Path, tmp_path: Path) -> None:
    """A pod narrowed to its first containers gets a new container's CPUs from its own parent, then the union."""
    cpu, other, everything = two_cpus()
    write_config(tmp_path / "a", [cpu])
    write_config(tmp_path / "b", [other])
    with pod(cpu) as (pod_cgroup, first), waiting_in(first, ["true"]) as init:
        assert run_hook(native_cmk, state(init.pid, tmp_path / "a"), f"--cpus={cpu}").returncode == 0
        assert read_cpus(pod_cgroup / "cpuset.cpus") == cpu
        with cpuset_cgroup(pod_cgroup) as second, waiting_in(second, ["true"]) as init2:
            result = run_hook(native_cmk, state(init2.pid, tmp_path / "b"), f"--cpus={other}")
            assert (result.returncode, result.stderr) == (0, b"")
            assert (read_cpus(second / "cpuset.cpus"), read_cpus(pod_cgroup / "cpuset.cpus")) == (other, everything)


def test_an_unconfined_sandbox_named_by_the_runtime_gets_the_containers_cpus_and_the_pod_is_narrowed(
        native_cmk: Path, attacker: Path, tmp_path: Path) -> None:
    """containerd gives pause containers no base-spec hook: the annotation it writes names the sandbox."""
    cpu, _, everything = two_cpus()
    sandbox_id = "5a" * 32
    write_config(tmp_path, [cpu])
    config = json.loads((tmp_path / "config.json").read_text())
    config["annotations"] = {hook.SANDBOX_ANNOTATIONS[0]: sandbox_id}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with cpuset_cgroup() as pod_cgroup, cpuset_cgroup(pod_cgroup) as container, \
            waiting_in(container, ["true"]) as init:
        sandbox = pod_cgroup / sandbox_id
        sandbox.mkdir()
        try:
            (sandbox / "cpuset.mems").write_text(read_cpus(pod_cgroup / "cpuset.mems"))
            (sandbox / "cpuset.cpus").write_text(everything)  # born with the pod's CPUs: every one
            result = run_hook(native_cmk, state(init.pid, tmp_path), f"--cpus={cpu}")
            assert (result.returncode, result.stderr) == (0, b"")
            assert (read_cpus(sandbox / "cpuset.cpus"), read_cpus(pod_cgroup / "cpuset.cpus")) == (cpu, cpu)
            with waiting_in(container, [str(attacker), "clone"]) as joined:
                attempt = release(joined)
            assert (attempt.steps["mount"], attempt.affinity) == ("ok", cpu), attempt
        finally:
            sandbox.rmdir()
