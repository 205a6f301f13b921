"""podman + runc as this VM runs them, and a local image holding only Debian's static busybox.

Shared by the e2e tests and ``benchmarks/cdi_start.py``. No registry is
reachable, so the image is a ``podman import`` of a rootfs holding
``/bin/busybox`` and links to the applets used: no Python, no libc.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from tests.support.native import PT_INTERP, program_header_types

BUSYBOX = Path("/bin/busybox")  # Debian's busybox-static
# crun refuses this VM's hybrid cgroup layout; the ulimits keep runc within the VM's limits
PODMAN = ["podman", "--runtime", "runc", "--cgroup-manager=cgroupfs"]
RUN = [*PODMAN, "run", "--network", "none", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]
APPLETS = ("sh", "sleep", "cat", "true", "taskset", "grep")


class PodmanMissing(Exception):
    """podman, runc or a static busybox is not installed; the message names the package."""


def podman(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*PODMAN, *args], capture_output=True, text=True, timeout=120, check=check)


def run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``podman run`` with this VM's runtime flags."""
    return subprocess.run([*RUN, *args], capture_output=True, text=True, timeout=120, check=check)


def env_flags(env: Mapping[str, str]) -> list[str]:
    return [flag for name, value in env.items() for flag in ("-e", f"{name}={value}")]


def check_tools() -> None:
    for tool in ("podman", "runc"):
        if shutil.which(tool) is None:
            raise PodmanMissing(f"{tool} is not installed (apt-get install podman runc)")
    if not BUSYBOX.is_file() or PT_INTERP in program_header_types(BUSYBOX):
        raise PodmanMissing(f"{BUSYBOX} is not a static busybox (apt-get install busybox-static)")


@contextmanager
def busybox_image(prefix: str = "cmk-e2e") -> Iterator[str]:
    """A uniquely named local image whose whole filesystem is static busybox and its applet links; removed after."""
    check_tools()
    with tempfile.TemporaryDirectory(prefix=f"{prefix}-image-") as work:
        rootfs = Path(work) / "rootfs"
        for directory in ("bin", "opt/bin", "proc", "sys", "dev", "tmp"):
            (rootfs / directory).mkdir(parents=True)
        shutil.copy2(BUSYBOX, rootfs / "bin" / "busybox")
        for name in APPLETS:
            (rootfs / "bin" / name).symlink_to("busybox")
        tarball = Path(work) / "rootfs.tar"
        subprocess.run(["tar", "-C", str(rootfs), "-cf", str(tarball), "."], check=True)
        name = f"localhost/{prefix}-{uuid.uuid4().hex[:10]}:latest"
        podman("import", str(tarball), name)
    try:
        yield name
    finally:
        podman("rmi", "-f", name, check=False)


CGROUP_V1 = Path("/sys/fs/cgroup")
RUNTIME_CDI_DIR = Path("/etc/cdi")


def cgroup_dir(pid: int, controller: str) -> Path:
    """The v1 ``controller`` cgroup directory of process ``pid``, read on the host."""
    with open(f"/proc/{pid}/cgroup") as f:
        path = next(line.rstrip("\n").split(":", 2)[2] for line in f if controller in line.split(":")[1].split(","))
    return CGROUP_V1 / controller / path.lstrip("/")


def container_pid(name: str) -> int:
    return int(podman("inspect", "--format", "{{.State.Pid}}", name).stdout)


def cpu_stat(pid: int) -> dict[str, int]:
    """The CFS bandwidth counters (``nr_periods``, ``nr_throttled``, ``throttled_time``) of ``pid``'s cpu cgroup."""
    text = (cgroup_dir(pid, "cpu") / "cpu.stat").read_text()
    return {key: int(value) for key, value in (line.split() for line in text.splitlines())}


@contextmanager
def hook_devices(binary: Path, devices: Mapping[str, list[str]]) -> Iterator[str]:
    """A CDI spec of our hook under a kind of its own (device -> the hook's args); yields the kind, removed after."""
    import json

    from deviceplugin.model.cdispec import CDI_VERSION

    kind = f"e2e-{uuid.uuid4().hex[:10]}.cmk.test/cpus"
    spec = {"cdiVersion": CDI_VERSION, "kind": kind, "devices": [
        {"name": name, "containerEdits": {"hooks": [
            {"hookName": "createRuntime", "path": str(binary), "args": args, "timeout": 10}]}}
        for name, args in devices.items()]}
    RUNTIME_CDI_DIR.mkdir(parents=True, exist_ok=True)
    path = RUNTIME_CDI_DIR / f"{kind.replace('/', '_')}.json"
    path.write_text(json.dumps(spec))
    try:
        yield kind
    finally:
        path.unlink()


@contextmanager
def weighty_cgroup_parent() -> Iterator[str]:
    """A uniquely named cgroup parent for ``--cgroup-parent`` whose CFS weight is v1's highest (262144).

    Its containers' threads then get the CPUs of their cpuset however loaded the machine is (CFS
    weights compete level by level: a heavy container under podman's default parent would share
    that parent's ordinary weight). Removed after, from every hierarchy podman made it in.
    """
    with scratch_cgroup_parent() as parent:
        (CGROUP_V1 / "cpu" / parent.lstrip("/")).mkdir()
        (CGROUP_V1 / "cpu" / parent.lstrip("/") / "cpu.shares").write_text("262144")
        yield parent


@contextmanager
def scratch_cgroup_parent() -> Iterator[str]:
    """A uniquely named ``--cgroup-parent`` (``/cmk-e2e-...``), removed after from every hierarchy podman made it in."""
    name = f"cmk-e2e-{uuid.uuid4().hex[:10]}"
    try:
        yield f"/{name}"
    finally:
        for hierarchy in CGROUP_V1.iterdir():
            top = hierarchy / name
            if not top.is_dir():
                continue
            for directory, _, _ in os.walk(top, topdown=False):  # children first (podman leaves conmon's)
                _remove_cgroup(hierarchy, Path(directory))


def _remove_cgroup(hierarchy: Path, directory: Path) -> None:
    """Move what is left in ``directory`` to the root and remove it; an exiting conmon may hold it a moment."""
    for _ in range(100):
        for pid in (directory / "cgroup.procs").read_text().split():
            try:
                (hierarchy / "cgroup.procs").write_text(pid)
            except ProcessLookupError:
                pass  # exited meanwhile
        try:
            directory.rmdir()
            return
        except OSError as err:
            if err.errno != errno.EBUSY:
                raise
            time.sleep(0.1)
    directory.rmdir()  # the last try raises


def run_with_hooks(hooks_dir: Path | None, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``podman run`` as :func:`run`, reading OCI hooks declarations from ``hooks_dir`` (as CRI-O's hooks_dir)."""
    hooks = ["--hooks-dir", str(hooks_dir)] if hooks_dir is not None else []
    argv = [*PODMAN, *hooks, *RUN[len(PODMAN):], *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=check)


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (a container's shell and the loops it forked)."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        for tid in os.listdir(f"/proc/{current}/task"):
            try:
                todo += [int(c) for c in Path(f"/proc/{current}/task/{tid}/children").read_text().split()]
            except FileNotFoundError:
                pass
    return found
