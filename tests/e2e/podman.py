"""podman + runc as this VM runs them, and a local image holding only Debian's static busybox.

Shared by the e2e tests and ``benchmarks/cdi_start.py``. No registry is
reachable, so the image is a ``podman import`` of a rootfs holding
``/bin/busybox`` and links to the applets used: no Python, no libc.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from tests.pinner.native import PT_INTERP, program_header_types

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
