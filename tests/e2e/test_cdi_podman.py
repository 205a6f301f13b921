"""An unmodified container is confined by the CDI device's hook under podman + runc, checked from the host.

The spec is the one the daemon writes, in a temporary CDI dir; podman 4.3
reads specs only from /etc/cdi and /var/run/cdi, so a uniquely named link
there points at it for the test's duration. The image holds only static
busybox: nothing in the container pins anything, the runtime's hook does.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from deviceplugin import cdi
from pinner import hook
from tests.e2e.podman import env_flags, podman, run

pytestmark = pytest.mark.e2e

RUNTIME_CDI_DIR = Path("/var/run/cdi")
POOLS = ("exclusive", "shared")


@dataclass(frozen=True)
class Spec:
    path: Path


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory, install_dir: Path) -> Iterator[Spec]:
    cdi_dir = tmp_path_factory.mktemp("cdi")
    path = cdi.write_spec(cdi.build_spec(POOLS, str(install_dir / "cmk")), cdi_dir)
    RUNTIME_CDI_DIR.mkdir(parents=True, exist_ok=True)
    link = RUNTIME_CDI_DIR / f"cmk-e2e-{uuid.uuid4().hex[:10]}.json"
    link.symlink_to(path)
    try:
        yield Spec(path)
    finally:
        link.unlink()


def host_view(name: str) -> tuple[int, str, str]:
    """(PID, Cpus_allowed_list, its cpuset cgroup's cpuset.cpus) of the container's process, read on the host."""
    pid = int(podman("inspect", "--format", "{{.State.Pid}}", name).stdout)
    with open(f"/proc/{pid}/status") as f:
        allowed = next(line.split(":", 1)[1].strip() for line in f if line.startswith("Cpus_allowed_list:"))
    with open(f"/proc/{pid}/cgroup") as f:
        path = next(line.rstrip("\n").split(":", 2)[2] for line in f if "cpuset" in line.split(":")[1].split(","))
    cpus = (Path("/sys/fs/cgroup/cpuset") / path.lstrip("/") / "cpuset.cpus").read_text().strip()
    return pid, allowed, cpus


def start(name: str, devices: list[str], env: dict[str, str], image: str, *command: str) -> None:
    flags = [flag for device in devices for flag in ("--device", device)]
    result = run("-d", "--name", name, *flags, *env_flags(env), image, *command, check=False)
    assert result.returncode == 0, result.stderr
    for _ in range(1000):  # a bounded wait for the script's first line
        if "ready" in podman("logs", name).stdout:
            return
    raise AssertionError(f"container {name} never printed ready: {podman('logs', name).stderr}")


SLEEPER = ("sh", "-c", "echo ready; exec sleep inf")


def test_hook_confines_the_cgroup_and_the_process(spec: Spec, image: str, container_name: str) -> None:
    start(container_name, [cdi.device_name("exclusive")], {"CMK_CPUS_EXCLUSIVE": "1"}, image, *SLEEPER)
    _, allowed, cpus = host_view(container_name)
    assert (allowed, cpus) == ("1", "1")


def test_a_process_asking_for_every_cpu_stays_confined(spec: Spec, image: str, container_name: str) -> None:
    script = "taskset -p 3 $$ > /dev/null; echo ready; exec sleep inf"
    start(container_name, [cdi.device_name("exclusive")], {"CMK_CPUS_EXCLUSIVE": "1"}, image, "sh", "-c", script)
    podman("exec", container_name, "taskset", "-p", "3", "1")  # and again from outside its first process
    _, allowed, cpus = host_view(container_name)
    assert (allowed, cpus) == ("1", "1")


def test_two_pools_give_the_union_and_one_hook(spec: Spec, image: str, container_name: str) -> None:
    devices = [cdi.device_name(pool) for pool in POOLS]
    start(container_name, devices, {"CMK_CPUS_EXCLUSIVE": "1", "CMK_CPUS_SHARED": "0"}, image, *SLEEPER)
    _, allowed, cpus = host_view(container_name)
    assert (allowed, cpus) == ("0-1", "0-1")
    container_id = podman("inspect", "--format", "{{.Id}}", container_name).stdout.strip()
    config = json.loads(Path(f"/var/lib/containers/storage/overlay-containers/{container_id}/userdata/config.json")
                        .read_text())
    assert [h["args"] for h in config["hooks"]["createRuntime"]] == [list(hook.ARGS)]
    assert config["process"]["env"].count(cdi.CONFINED_ENV) == 1


def test_a_container_without_cpus_in_its_env_does_not_start(spec: Spec, image: str) -> None:
    result = run("--rm", "--device", cdi.device_name("shared"), image, "sh", "-c", "echo started", check=False)
    assert result.returncode != 0
    assert "started" not in result.stdout
    expected = re.compile(
        r"cmk hook: error: the container's env \(process\.env in /\S+/userdata/config\.json\) sets none of "
        + re.escape(f"{hook.ENV_LIST}: nothing to confine it to; {hook.NO_CPUS_HINT}")
        + "$"
    )
    assert any(expected.search(line) for line in result.stderr.splitlines()), result.stderr
