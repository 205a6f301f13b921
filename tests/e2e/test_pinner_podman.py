"""The seed's pod command line in a container with no Python and no libc, under podman + runc.

The image holds only Debian's static busybox. ``cmk install`` fills a host
directory that is mounted read-only at ``/opt/bin``, the env is what an
Allocate answer gives, the container is not privileged and has no host
``/proc``; the CPUs are read from the host's ``/proc/PID/status`` of the
container's process.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.podman import RUN, env_flags, podman

pytestmark = pytest.mark.e2e

SEED_COMMAND = ["/opt/bin/cmk", "isolate", "--pool=exclusive", "--namespace=cmk-namespace", "sleep", "--", "inf"]
ALLOCATE_ENV = {"CMK_CPUS_EXCLUSIVE": "1", "CMK_CPUS_SHARED": "0", "CMK_CPUS_INFRA": "0"}


def mount(install_dir: Path) -> list[str]:
    return ["-v", f"{install_dir}:/opt/bin:ro"]


def test_seed_command_line_pins_the_container_process(image: str, install_dir: Path, container_name: str) -> None:
    started = subprocess.run(
        [*RUN, "-d", "--name", container_name, *mount(install_dir), *env_flags(ALLOCATE_ENV), image, *SEED_COMMAND],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert started.returncode == 0, started.stderr
    pid = int(podman("inspect", "--format", "{{.State.Pid}}", container_name).stdout)
    assert pid > 0
    with open(f"/proc/{pid}/status") as f:
        status = dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)
    assert status["Cpus_allowed_list"] == "1"
    assert status["Name"] == "sleep"  # the pinner exec'd in place: the container's process is the workload
    with open(f"/proc/{pid}/environ", "rb") as f:
        environ = f.read().split(b"\0")
    assert b"CMK_CPUS_ASSIGNED=1" in environ and b"CMK_CPUS_ASSIGNED_MASK=2" in environ
    pid_one = podman("exec", container_name, "cat", "/proc/1/cmdline").stdout
    assert pid_one == "sleep\0inf\0"
    inspect = podman("inspect", "--format", "{{.HostConfig.Privileged}}", container_name).stdout.strip()
    assert inspect == "false"


def test_affinity_inherited_from_the_runtime_does_not_hide_the_pool_cpus(
    image: str, install_dir: Path, container_name: str
) -> None:
    """runc < 1.3.1 on Linux 6.2+: the container keeps the affinity podman was started with (CPU 0,
    as the housekeeping CPUs on an isolcpus node), narrower than its cpuset (0-1). The pinner still
    pins to the pool's CPU 1, which only the cpuset allows."""
    on_cpu0 = ["taskset", "-c", "0", *RUN, "--cpuset-cpus", "0-1"]
    plain = subprocess.run(
        [*on_cpu0, "--rm", image, "grep", "^Cpus_allowed_list:", "/proc/self/status"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert (plain.returncode, plain.stdout) == (0, "Cpus_allowed_list:\t0\n"), plain.stderr  # the runtime's affinity
    started = subprocess.run(
        [*on_cpu0, "-d", "--name", container_name, *mount(install_dir), *env_flags(ALLOCATE_ENV), image, *SEED_COMMAND],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert started.returncode == 0, started.stderr
    pid = int(podman("inspect", "--format", "{{.State.Pid}}", container_name).stdout)
    with open(f"/proc/{pid}/status") as f:
        status = dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)
    assert (status["Name"], status["Cpus_allowed_list"]) == ("sleep", "1")


def test_pod_deletion_sigterm_reaches_the_workload_as_pid_1(
    image: str, install_dir: Path, container_name: str
) -> None:
    script = 'trap "exit 42" TERM; echo ready; while :; do sleep 1; done'
    started = subprocess.run(
        [*RUN, "-d", "--name", container_name, *mount(install_dir), *env_flags(ALLOCATE_ENV), image,
         "/opt/bin/cmk", "isolate", "--pool=shared", "sh", "--", "-c", script],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert started.returncode == 0, started.stderr
    for _ in range(500):  # a bounded wait for the trap to be set
        if "ready" in podman("logs", container_name).stdout:
            break
    podman("stop", "-t", "30", container_name)
    assert podman("inspect", "--format", "{{.State.ExitCode}}", container_name).stdout.strip() == "42"


def test_missing_allocation_fails_with_one_line_in_the_container(image: str, install_dir: Path) -> None:
    result = subprocess.run(
        [*RUN, "--rm", *mount(install_dir), image, *SEED_COMMAND],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert result.returncode == 4
    assert result.stderr == (
        "cmk isolate: error: this container holds no exclusive CPUs (CMK_CPUS_EXCLUSIVE is not set): "
        "request cmk.intel.com/exclusive-cores in resources.limits\n"
    )


def test_image_has_no_python_and_no_libc(image: str) -> None:
    result = subprocess.run(
        [*RUN, "--rm", image, "sh", "-c", "ls /usr/bin/python3 /lib/*/libc.so.6 /lib/ld-musl-* 2>&1; echo end"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("No such file or directory") == 3 and result.stdout.endswith("end\n")
