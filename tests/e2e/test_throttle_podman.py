"""A container holding only exclusive cores loses its CFS quota; nothing else does (podman + runc, cgroup v1).

The issue's case: a two-CPU cpuset (every CPU this machine lets us use) with
``--cpus 1``, the common mistake of one CPU of quota for a core of two
threads, and two busy threads. The hook comes from a CDI device of our own
kind whose args are what the daemon writes for a core (``--exclusive``) or
for a slot pool (no mark). Asserted on the kernel's ``nr_throttled`` counts,
not on timing: other tests load this machine.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from deviceplugin.model import hookcontract as hook
from deviceplugin.model.cpulist import format_cpu_list
from tests.support.podman import (
    cgroup_dir,
    container_pid,
    cpu_stat,
    hook_devices,
    podman,
    run,
    weighty_cgroup_parent,
)

pytestmark = pytest.mark.e2e

#: The most CFS weight cgroup v1 allows, for the container and its parent: its two threads get both CPUs however
#: loaded the machine is, so a quota of one CPU is exceeded in every period.
SHARES = "262144"
#: Two threads that never sleep; "ready" once both run.
BUSY = ("sh", "-c", "(while :; do :; done) & echo ready; while :; do :; done")


@pytest.fixture(scope="module")
def every_cpu() -> str:
    cpus = os.sched_getaffinity(0)
    if len(cpus) < 2:
        pytest.fail(f"the throttling test needs a two-CPU cpuset; this machine lets us use {format_cpu_list(cpus)}")
    return format_cpu_list(frozenset(sorted(cpus)[:2]))


@pytest.fixture(scope="module")
def kind(install_dir: Path, every_cpu: str) -> Iterator[str]:
    with hook_devices(install_dir / "cmk", {"core": hook.command_line(every_cpu, exclusive=True),
                                            "slot": hook.command_line(every_cpu)}) as name:
        yield name


@pytest.fixture
def parent(container_name: str) -> Iterator[str]:
    """The container's cgroup parent, removed after the container."""
    with weighty_cgroup_parent() as name:
        yield name
        podman("rm", "-f", "-t", "0", container_name, check=False)


def start_busy(name: str, image: str, cpus: str, parent: str, *devices: str) -> int:
    """A container of two busy threads on ``cpus`` with one CPU of quota, holding the CDI ``devices``."""
    flags = [flag for device in devices for flag in ("--device", device)]
    result = run("-d", "--name", name, "--cgroup-parent", parent, "--cpuset-cpus", cpus, "--cpus", "1",
                 "--cpu-shares", SHARES, *flags, image, *BUSY, check=False)
    assert result.returncode == 0, result.stderr
    return container_pid(name)


def wait_for_periods(pid: int, periods: int) -> dict[str, int]:
    """cpu.stat once the quota has been enforced over ``periods`` periods (a bounded wait)."""
    for _ in range(300):
        stat = cpu_stat(pid)
        if stat["nr_periods"] >= periods:
            return stat
        time.sleep(0.1)
    raise AssertionError(f"the quota saw only {stat['nr_periods']} periods in 30 s")


def test_a_container_of_slots_keeps_its_quota_and_is_throttled(image: str, kind: str, every_cpu: str,
                                                               container_name: str, parent: str) -> None:
    pid = start_busy(container_name, image, every_cpu, parent, f"{kind}=slot")
    assert (cgroup_dir(pid, "cpu") / "cpu.cfs_quota_us").read_text().strip() == "100000"
    stat = wait_for_periods(pid, 10)
    assert stat["nr_throttled"] > 0, stat


def test_a_container_of_exclusive_cores_has_no_quota_and_is_never_throttled(
        image: str, kind: str, every_cpu: str, container_name: str, parent: str) -> None:
    pid = start_busy(container_name, image, every_cpu, parent, f"{kind}=core")
    cpu = cgroup_dir(pid, "cpu")
    assert (cpu / "cpu.cfs_quota_us").read_text().strip() == "-1"
    assert (cpu / "cpu.cfs_period_us").read_text().strip() == "100000"
    usage = int((cgroup_dir(pid, "cpuacct") / "cpuacct.usage").read_text())
    for _ in range(300):  # the threads have run for at least a second of CPU time between them
        if int((cgroup_dir(pid, "cpuacct") / "cpuacct.usage").read_text()) - usage > 1_000_000_000:
            break
        time.sleep(0.1)
    assert cpu_stat(pid)["nr_throttled"] == 0


def test_a_core_beside_a_slot_keeps_its_quota(image: str, kind: str, every_cpu: str, container_name: str,
                                              parent: str) -> None:
    pid = start_busy(container_name, image, every_cpu, parent, f"{kind}=core", f"{kind}=slot")
    assert (cgroup_dir(pid, "cpu") / "cpu.cfs_quota_us").read_text().strip() == "100000"
