"""Run the real ``cmk hook`` against real processes in real cpuset cgroups (v1, as on this machine).

What runc leaves behind at ``createRuntime``: the container's init process
already in a cgroup of its own, a bundle directory holding ``config.json``,
and the OCI state to write on the hook's stdin.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

from deviceplugin.model import hookcontract as hook

CPUSET_ROOT = Path("/sys/fs/cgroup/cpuset")
CPU_ROOT = Path("/sys/fs/cgroup/cpu")
# Sleeps in three threads besides the main one, so a test can check every task is pinned.
THREADED = (
    "import threading, time\n"
    "for _ in range(3): threading.Thread(target=time.sleep, args=(600,), daemon=True).start()\n"
    "print('ready', flush=True)\n"
    "time.sleep(600)\n"
)


def state(pid: int, bundle: Path) -> str:
    """The OCI state runc writes on a createRuntime hook's stdin."""
    return json.dumps({"ociVersion": "1.0.2", "id": "c1", "status": "creating", "pid": pid, "bundle": str(bundle),
                       "annotations": {}})


def cmk_hook_entry(cpus: str, exclusive: bool = False) -> dict[str, object]:
    """A createRuntime entry as the runtime copies it from one of the daemon's CDI devices."""
    return {"path": "/opt/bin/cmk", "args": hook.command_line(cpus, exclusive=exclusive), "timeout": 10}


def write_config(bundle: Path, cpus: Sequence[str], env: Sequence[str] = ("PATH=/bin",),
                 other_hooks: Sequence[dict[str, object]] = (), exclusive: Sequence[bool] = (),
                 cpuset: str | None = None) -> None:
    """config.json with one ``cmk hook --cpus=`` createRuntime entry per item of ``cpus`` (one per CDI device).

    ``exclusive[i]`` marks entry i ``--exclusive`` (a whole exclusive core's device); ``cpuset`` is the
    ``linux.resources.cpu.cpus`` the kubelet's static CPU manager has the runtime write.
    """
    bundle.mkdir(parents=True, exist_ok=True)
    marks = [*exclusive, *[False] * (len(cpus) - len(exclusive))]
    config: dict[str, object] = {
        "ociVersion": "1.0.2", "process": {"args": ["sleep", "inf"], "env": list(env), "cwd": "/"},
        "hooks": {"createRuntime": [*other_hooks, *(cmk_hook_entry(c, m) for c, m in zip(cpus, marks))]}}
    if cpuset is not None:
        config["linux"] = {"resources": {"cpu": {"cpus": cpuset}}}
    (bundle / "config.json").write_text(json.dumps(config))


def run_hook(binary: Path, stdin: str | bytes, *args: str) -> subprocess.CompletedProcess[bytes]:
    data = stdin.encode() if isinstance(stdin, str) else stdin
    return subprocess.run([str(binary), "hook", *args], input=data, capture_output=True, timeout=30, check=False)


def read_cpus(path: Path) -> str:
    return path.read_text().strip()


def cpus_allowed(pid: int) -> str:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Cpus_allowed_list:"):
                return line.split(":", 1)[1].strip()
    raise AssertionError(f"/proc/{pid}/status has no Cpus_allowed_list")


def tasks(pid: int) -> list[int]:
    return sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))


@contextmanager
def cpuset_cgroup(parent: Path = CPUSET_ROOT, cpus: str | None = None) -> Iterator[Path]:
    """A uniquely named cpuset cgroup with the parent's memory nodes and ``cpus`` (default: the parent's)."""
    if not (parent / "cpuset.cpus").is_file() or not os.access(parent / "cpuset.cpus", os.W_OK):
        pytest.fail(f"{parent} is not a writable cgroup v1 cpuset hierarchy (the hook tests need root and one)")
    path = parent / f"cmk-hook-test-{uuid.uuid4().hex[:12]}"
    path.mkdir()
    try:
        (path / "cpuset.mems").write_text(read_cpus(parent / "cpuset.mems"))
        (path / "cpuset.cpus").write_text(cpus if cpus is not None else read_cpus(parent / "cpuset.cpus"))
        yield path
    finally:
        for directory, _, _ in os.walk(path, topdown=False):  # children first
            for pid in Path(directory, "cgroup.procs").read_text().split():
                (CPUSET_ROOT / "cgroup.procs").write_text(pid)  # a leftover goes back to the root
            os.rmdir(directory)


def kernel_files(container: Path, pid: int) -> Path:
    """In a directory standing in for a v2 container cgroup holding ``pid``, the files the kernel would have made.

    Its ``cgroup.procs`` lists ``pid``, and the child the hook creates already
    has an empty ``cgroup.procs`` (mkdir in a plain directory makes none).
    Returns that child, whose ``cgroup.procs`` then shows what the hook moved.
    """
    (container / "cgroup.procs").write_text(f"{pid}\n")
    leaf = container / hook.CONFINED_CGROUP
    leaf.mkdir()
    (leaf / "cgroup.procs").write_text("")
    return leaf


@contextmanager
def cpu_cgroup(quota_us: int, period_us: int = 100_000) -> Iterator[Path]:
    """A uniquely named v1 cpu cgroup with a CFS quota, as runc makes for ``--cpus``; removed after."""
    if not os.access(CPU_ROOT / "cpu.cfs_quota_us", os.W_OK):
        pytest.fail(f"{CPU_ROOT} is not a writable cgroup v1 cpu hierarchy (the quota tests need root and one)")
    path = CPU_ROOT / f"cmk-hook-test-{uuid.uuid4().hex[:12]}"
    path.mkdir()
    try:
        (path / "cpu.cfs_period_us").write_text(str(period_us))
        (path / "cpu.cfs_quota_us").write_text(str(quota_us))
        yield path
    finally:
        for pid in (path / "cgroup.procs").read_text().split():
            (CPU_ROOT / "cgroup.procs").write_text(pid)
        os.rmdir(path)


@contextmanager
def process_in(cgroup: Path | None, argv: Sequence[str] = ("sleep", "600")) -> Iterator[subprocess.Popen[str]]:
    """A live process, moved into ``cgroup`` (as runc puts the container's init process in its cgroup)."""
    proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, text=True)
    try:
        if cgroup is not None:
            (cgroup / "cgroup.procs").write_text(str(proc.pid))
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=10)
        if proc.stdout:
            proc.stdout.close()
