"""Processes a test starts and reads back from /proc: their environment, status fields, and how they stop."""

from __future__ import annotations

import subprocess

WAIT_FOR_SIGNAL = 'trap "exit 42" TERM; echo ready; while :; do sleep 0.05; done'


def status_field(pid: int, name: str) -> str:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key == name:
                return value.strip()
    raise AssertionError(f"/proc/{pid}/status has no {name}")


def environ(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/environ", "rb") as f:
        entries = f.read().split(b"\0")
    return dict(e.decode().partition("=")[::2] for e in entries if e)


def pinning(pid: int) -> tuple[str, str, str]:
    """What a pinned process shows: the CPUs it may run on, and the list and mask the pinner exported to it."""
    env = environ(pid)
    return status_field(pid, "Cpus_allowed_list"), env.get("CMK_CPUS_ASSIGNED", ""), env.get("CMK_CPUS_ASSIGNED_MASK", "")


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=10)
    if proc.stdout:
        proc.stdout.close()

