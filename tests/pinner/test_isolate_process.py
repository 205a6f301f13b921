"""The pinner becomes the workload: same PID, the affinity the kernel reports, signals arrive directly.

The affinity is read back from outside, as a monitor would: ``/proc/PID/status``
and ``os.sched_getaffinity(PID)`` of the PID the test itself started.
"""

from __future__ import annotations

import os
import shutil
import signal
import time

from deviceplugin.model.cpulist import format_cpu_mask
from tests.pinner.conftest import CPU_A as A
from tests.pinner.conftest import CPU_B as B
from tests.pinner.conftest import Pinner
from tests.support.processes import WAIT_FOR_SIGNAL, environ, pinning, stop


def test_workload_keeps_the_pid_and_is_pinned(pinner: Pinner) -> None:
    proc = pinner.popen(["--pool=exclusive", "sh", "--", "-c", WAIT_FOR_SIGNAL], {"CMK_CPUS_EXCLUSIVE": str(B)})
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "ready\n"
        assert os.readlink(f"/proc/{proc.pid}/exe") == os.path.realpath(shutil.which("sh") or "sh")
        assert os.sched_getaffinity(proc.pid) == {B}
        assert pinning(proc.pid) == (str(B), str(B), format_cpu_mask({B}))
    finally:
        stop(proc)


def test_sigterm_reaches_the_workload(pinner: Pinner) -> None:
    proc = pinner.popen(["--pool=shared", "--", "sh", "-c", WAIT_FOR_SIGNAL], {"CMK_CPUS_SHARED": f"{A},{B}"})
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "ready\n"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 42  # the workload's TERM handler ran in the PID we signalled
    finally:
        stop(proc)


def test_unmodified_program_dies_of_sigterm_itself(pinner: Pinner) -> None:
    proc = pinner.popen(["--pool=exclusive", "sh", "--", "-c", "echo ready; exec sleep 60"], {"CMK_CPUS_EXCLUSIVE": str(A)})
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "ready\n"
        sleep = os.path.realpath(shutil.which("sleep") or "sleep")
        for _ in range(1000):  # until the shell has exec'd sleep (a bounded wait)
            if os.readlink(f"/proc/{proc.pid}/exe") == sleep:
                break
            time.sleep(0.01)
        assert os.readlink(f"/proc/{proc.pid}/exe") == sleep
        assert os.sched_getaffinity(proc.pid) == {A}
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == -signal.SIGTERM
    finally:
        stop(proc)


def test_no_affinity_leaves_the_affinity_alone(pinner: Pinner) -> None:
    proc = pinner.popen(["--pool=exclusive", "--no-affinity", "sh", "--", "-c", WAIT_FOR_SIGNAL],
                        {"CMK_CPUS_EXCLUSIVE": str(B)})
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "ready\n"
        assert os.sched_getaffinity(proc.pid) == os.sched_getaffinity(0)
        assert environ(proc.pid)["CMK_CPUS_ASSIGNED"] == str(B)
    finally:
        stop(proc)


def test_a_main_process_on_the_exclusive_set_starts_a_helper_on_the_shared_set(pinner: Pinner) -> None:
    """One container holding a core and a shared slot: the workload runs on the core, and a helper it starts
    through the pinner again (from inside that narrower affinity) runs on the shared CPUs."""
    helper = " ".join([*pinner.prefix, "--pool=shared", "--", "grep", "^Cpus_allowed_list:", "/proc/self/status"])
    script = f"echo main=$CMK_CPUS_ASSIGNED; {helper}; grep ^Cpus_allowed_list: /proc/self/status"
    env = {"CMK_CPUS_EXCLUSIVE": str(B), "CMK_CPUS_SHARED": str(A)}
    result = pinner.run(["--pool=exclusive", "--", "sh", "-c", script], env)
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.splitlines() == [f"main={B}", f"Cpus_allowed_list:\t{A}", f"Cpus_allowed_list:\t{B}"]
