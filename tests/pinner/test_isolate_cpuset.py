"""The pinner goes by the container's cpuset, whatever affinity it inherited.

Since Linux 6.2 a task that joins a cpuset keeps its affinity, so a container
whose runtime does not reset it (runc < 1.3.1, crun < 1.10) starts on the
runtime's CPUs: on an isolcpus node the housekeeping ones, without the
exclusive pool's. Each test starts the pinner in its own real cpuset cgroup
(v1, a uniquely named child of /sys/fs/cgroup/cpuset), joined before exec as a
runtime does, and reads the result from ``/proc/PID/status``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

from deviceplugin.model.cpulist import format_cpu_list, format_cpu_mask
from tests.pinner.conftest import CPU_A as A
from tests.pinner.conftest import CPU_B as B
from tests.pinner.conftest import CPUSET_V1, Pinner, on_cpus
from tests.support.hookrun import cpuset_cgroup as hook_cgroup
from tests.support.processes import (
    WAIT_FOR_SIGNAL,
    environ,
    pinning,
    status_field,
    stop,
)

BOTH = format_cpu_list({A, B})


@contextlib.contextmanager
def cpuset_cgroup(cpus: str) -> Iterator[Path]:
    """The hook tests' cgroup allowing ``cpus``, emptied first of what a killed shell left running."""
    with hook_cgroup(CPUSET_V1, cpus) as path:
        try:
            yield path
        finally:
            empty(path)


def empty(cgroup: Path) -> None:
    """Kill what is left in ``cgroup`` (a killed shell's orphaned ``sleep``) and wait until it is gone."""
    for _ in range(1000):  # a bounded wait: SIGKILLed tasks leave within milliseconds
        pids = [int(pid) for pid in (cgroup / "cgroup.procs").read_text().split()]
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)
    raise AssertionError(f"{cgroup} still holds processes {pids}")


def join(cgroup: Path, cpus: str | None = None) -> list[str]:
    """A launcher doing what a runtime does before exec: join the container's cgroup, then
    (optionally) get an affinity narrower than its cpuset."""
    script = 'echo $$ > "$0/cgroup.procs" && exec "$@"'
    return ["/bin/sh", "-c", script, str(cgroup), *(on_cpus(cpus) if cpus else [])]


def test_inherited_affinity_without_the_pool_cpu_is_widened_to_the_pool(pinner: Pinner) -> None:
    with cpuset_cgroup(BOTH) as cgroup:
        proc = pinner.popen(["--pool=exclusive", "--", "sh", "-c", WAIT_FOR_SIGNAL],
                            {"CMK_CPUS_EXCLUSIVE": str(B)}, join(cgroup, str(A)))
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline() == "ready\n"
            assert Path(f"/proc/{proc.pid}/cpuset").read_text().strip() == "/" + cgroup.name
            assert pinning(proc.pid) == (str(B), str(B), format_cpu_mask({B}))
        finally:
            stop(proc)


def test_no_affinity_checks_the_cpuset_but_keeps_the_inherited_affinity(pinner: Pinner) -> None:
    with cpuset_cgroup(BOTH) as cgroup:
        proc = pinner.popen(["--pool=exclusive", "--no-affinity", "--", "sh", "-c", WAIT_FOR_SIGNAL],
                            {"CMK_CPUS_EXCLUSIVE": str(B)}, join(cgroup, str(A)))
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline() == "ready\n"
            assert status_field(proc.pid, "Cpus_allowed_list") == str(A)
            assert environ(proc.pid)["CMK_CPUS_ASSIGNED"] == str(B)
        finally:
            stop(proc)


def test_cpus_outside_the_cpuset_are_refused_naming_the_cpuset(pinner: Pinner) -> None:
    with cpuset_cgroup(str(A)) as cgroup:
        result = pinner.run(["--pool=exclusive", "true"], {"CMK_CPUS_EXCLUSIVE": str(B)}, join(cgroup))
    assert (result.returncode, result.stderr) == (
        6, f"cmk isolate: error: CPU {B} of the exclusive pool is not allowed in this container (allowed: {A})\n"
    )


def test_cpus_outside_the_cpuset_are_refused_with_no_affinity_too(pinner: Pinner) -> None:
    with cpuset_cgroup(str(A)) as cgroup:
        result = pinner.run(["--no-affinity", "--pool=shared", "true"], {"CMK_CPUS_SHARED": f"{A},{B}"},
                            join(cgroup))
    assert (result.returncode, result.stderr) == (
        6, f"cmk isolate: error: CPU {B} of the shared pool is not allowed in this container (allowed: {A})\n"
    )


def test_the_whole_cpuset_is_allowed_when_the_inherited_affinity_is_one_cpu(pinner: Pinner) -> None:
    """The message names the cpuset (A and B), not the single CPU the process was started on."""
    outside = B + 1
    with cpuset_cgroup(BOTH) as cgroup:
        result = pinner.run(["--pool=shared", "true"], {"CMK_CPUS_SHARED": f"{A},{B},{outside}"}, join(cgroup, str(A)))
    assert (result.returncode, result.stderr) == (
        6, f"cmk isolate: error: CPU {outside} of the shared pool is not allowed in this container (allowed: {BOTH})\n"
    )
