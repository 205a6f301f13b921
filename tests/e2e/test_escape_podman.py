"""No root container widens its cpuset under podman + runc on this machine's cgroup v1 (issue 20).

The attacker (``tests/support/escape.c``) runs as the container's uid 0, not
privileged: with the default capabilities, with ``--cap-drop ALL``, and with
seccomp unconfined; by ``unshare`` and by one raw ``clone``. A pinned
container (a core's CDI device) must end on its core and an ordinary one (the
node-wide hook) on the infra CPUs, read from the host: the affinity the
attacker ends with, and its container cgroup's ``cpuset.cpus``. Without any
the hook's bound (``docs/hook.md``) the attacker reaches every CPU: the
pinner tier's control case (``tests/pinner/test_hook_escape.py``) shows it on
the same kernel, and these tests fail with the hook of before the bound.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from deviceplugin.host import nodewide
from pinner import hook
from pinner.cpulist import format_cpu_list
from tests.e2e.podman import (
    cgroup_dir,
    container_pid,
    hook_devices,
    podman,
    run_with_hooks,
)
from tests.e2e.test_cdi_podman import plan_cpus
from tests.support import escape

pytestmark = pytest.mark.e2e

ATTACKER = "/escape"
SECURITY = {
    "default": (),
    "cap-drop-all": ("--cap-drop", "ALL"),
    "seccomp-unconfined": ("--security-opt", "seccomp=unconfined"),
}


@dataclass(frozen=True)
class Node:
    hooks_dir: Path
    kind: str  # a CDI kind whose device "core" carries the exclusive core's hook
    core: str
    infra: str
    attacker: Path


@pytest.fixture(scope="module")
def node(install_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    core, infra = plan_cpus()
    work = tmp_path_factory.mktemp("escape")
    hooks_dir, record_dir = work / "hooks.d", work / "record"
    record_dir.mkdir()
    nodewide.write_record(record_dir, infra)
    nodewide.write_declaration(hooks_dir, str(install_dir / "cmk"), str(nodewide.record_path(record_dir)))
    attacker = escape.build(work / "escape")
    with hook_devices(install_dir / "cmk", {"core": hook.command_line(format_cpu_list(core), exclusive=True)}) as kind:
        yield Node(hooks_dir, kind, format_cpu_list(core), format_cpu_list(infra), attacker)


def attack(node: Node, image: str, name: str, mode: str, security: str, *, pinned: bool) -> tuple[escape.Attempt, str]:
    """(what the attacker reached, its container cgroup's cpuset.cpus read on the host after it tried)."""
    device = ("--device", f"{node.kind}=core") if pinned else ()
    script = f"{ATTACKER} {mode}; echo done; exec sleep inf"
    result = run_with_hooks(node.hooks_dir, "-d", "--name", name, *SECURITY[security], *device,
                            "-v", f"{node.attacker}:{ATTACKER}:ro", image, "sh", "-c", script, check=False)
    assert result.returncode == 0, result.stderr
    for _ in range(600):  # a bounded wait for the attacker's line
        logs = podman("logs", name).stdout
        if "done" in logs:
            break
        time.sleep(0.05)
    pid = container_pid(name)
    cgroup = cgroup_dir(pid, "cpuset")
    if cgroup.name == hook.CONFINED_CGROUP:
        cgroup = cgroup.parent
    return escape.parse(logs), (cgroup / "cpuset.cpus").read_text().strip()


@pytest.mark.parametrize("security", SECURITY)
@pytest.mark.parametrize("mode", escape.MODES)
@pytest.mark.parametrize("pinned", [True, False], ids=["pinned", "ordinary"])
def test_a_root_container_stays_on_its_cpus(node: Node, image: str, container_name: str, mode: str, security: str,
                                           pinned: bool) -> None:
    attempt, cgroup_cpus = attack(node, image, container_name, mode, security, pinned=pinned)
    expected = node.core if pinned else node.infra
    assert (attempt.affinity, cgroup_cpus) == (expected, expected), attempt
    assert not attempt.widened_cgroup, attempt
