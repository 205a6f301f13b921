"""deploy/examples' exclusive-and-shared pod on the real node: one container holding a core and a slot at once.

What the container got is read from the kubelet (pod resources: which devices), the daemon's plan
(which CPUs they are), containerd (the container's ``config.json``: its env and hooks) and the kernel
(cpusets, affinities, the CFS quota). The container runs on the union of its two sets; each pool's
Allocate answer names its own set; its main process, started through ``cmk isolate --pool=exclusive``,
runs on the core alone, and the helper it starts through ``cmk isolate`` with the slot's pool on the
slot's CPUs; the hook keeps its quota (not all of its CPUs are whole cores).

The slot is the shared pool's where this node serves one. A node of two cores (this machine) cannot:
infra keeps the first core and exclusive takes the other, and a plan asking for a shared core too is
refused. There the container's slot is infra's, the slot pool this node serves: the same shape for
every part that sees it (two answers merged, two ``cmk hook`` entries of which one is ``--exclusive``,
two pinner pools, a held set that is the union), as the seed pod's containers are one per pool served.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from deviceplugin.model import hookcontract as hook
from deviceplugin.model.cpulist import parse_cpu_list
from deviceplugin.model.pinnercontract import POOLS
from deviceplugin.model.plan import RESOURCE_NAMES, Pool
from tests.cluster.deploy import (
    DAEMONSET,
    NAMESPACE,
    RESOURCE_PREFIX,
    ContainerView,
    Deployment,
    container_ids,
    delete_pod,
    devices_of,
    example,
    millicores,
    start_pod,
    view,
    workload_pod,
)
from tests.cluster.node import wait_for
from tests.support.podman import cgroup_dir

EXCLUSIVE, SHARED, INFRA = (RESOURCE_NAMES[pool] for pool in (Pool.EXCLUSIVE, Pool.SHARED, Pool.INFRA))
EXAMPLE = "pod-exclusive-and-shared.yaml"


def mixed_manifest(deployed: Deployment) -> dict[str, Any]:
    """The example made runnable here, its slot infra's where this node serves no shared pool."""
    manifest = example(EXAMPLE)
    if SHARED not in deployed.served():
        text = json.dumps(manifest).replace(SHARED, INFRA).replace(f"--pool={Pool.SHARED}", f"--pool={Pool.INFRA}")
        manifest = json.loads(text)
    pod = workload_pod(manifest, deployed.served(), deployed.threads_per_core)
    assert len(pod["spec"]["containers"]) == 1, f"this node serves {sorted(deployed.served())}: no core and slot"
    return pod


@dataclass(frozen=True)
class Mixed:
    """The running pod: its container's devices, the CPUs of each, and the container as the host sees it."""

    pod: str
    manifest: dict[str, Any]
    slot: str  # the slot's resource: cmk.intel.com/shared, or infra's on a node without a shared pool
    held: dict[str, tuple[str, ...]]
    core_cpus: frozenset[int]
    slot_cpus: frozenset[int]
    container_id: str
    seen: ContainerView

    @property
    def slot_pool(self) -> str:
        return self.slot.removeprefix(RESOURCE_PREFIX)


@pytest.fixture(scope="module")
def mixed(deployed: Deployment) -> Iterator[Mixed]:
    manifest = mixed_manifest(deployed)
    (container,) = manifest["spec"]["containers"]
    (slot,) = [r for r in container["resources"]["limits"] if r.startswith(RESOURCE_PREFIX) and r != EXCLUSIVE]
    name = start_pod(deployed.node, manifest)
    try:
        held = devices_of(deployed.node, "default", name)["app"]

        def cpus(resource: str) -> frozenset[int]:
            return frozenset().union(*(parse_cpu_list(deployed.device_cpus(resource, d)) for d in held[resource]))

        (container_id,) = container_ids(deployed.node, "default", name).values()
        yield Mixed(name, manifest, slot, held, cpus(EXCLUSIVE), cpus(slot), container_id,
                    view(deployed.node, container_id))
    finally:
        delete_pod(deployed.node, name)


def test_the_container_holds_one_core_and_one_slot_whose_cpus_differ(mixed: Mixed) -> None:
    assert {resource: len(ids) for resource, ids in mixed.held.items()} == {EXCLUSIVE: 1, mixed.slot: 1}
    assert mixed.core_cpus and mixed.slot_cpus and not mixed.core_cpus & mixed.slot_cpus


def test_its_cpuset_is_the_union_of_its_devices_cpus(mixed: Mixed) -> None:
    assert parse_cpu_list(mixed.seen.cpuset) == mixed.core_cpus | mixed.slot_cpus


def test_its_env_names_each_set_and_its_hooks_mark_only_the_core_exclusive(mixed: Mixed) -> None:
    env = dict(item.split("=", 1) for item in mixed.seen.spec["process"]["env"])
    assert parse_cpu_list(env[POOLS[str(Pool.EXCLUSIVE)].env]) == mixed.core_cpus
    assert parse_cpu_list(env[POOLS[mixed.slot_pool].env]) == mixed.slot_cpus
    entries = [h["args"] for h in mixed.seen.spec["hooks"]["createRuntime"]
               if any(a.startswith("--cpus=") for a in h["args"])]
    marked = [(parse_cpu_list(next(a for a in args if a.startswith("--cpus=")).removeprefix("--cpus=")),
               hook.EXCLUSIVE_OPTION in args) for args in entries]
    assert sorted(marked, key=lambda entry: entry[1]) == [(mixed.slot_cpus, False), (mixed.core_cpus, True)]


def allowed(pid: int) -> frozenset[int]:
    status = Path(f"/proc/{pid}/status").read_text()
    (line,) = [line for line in status.splitlines() if line.startswith("Cpus_allowed_list:")]
    return parse_cpu_list(line.split(":", 1)[1].strip())


def children(pid: int) -> list[int]:
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def test_the_main_process_runs_on_the_core_and_the_helper_it_started_on_the_slot(deployed: Deployment,
                                                                                mixed: Mixed) -> None:
    assert parse_cpu_list(mixed.seen.cpus_allowed) == mixed.core_cpus  # cmk isolate --pool=exclusive, exec'd
    helpers: list[frozenset[int]] = []

    def helper_pinned() -> bool:
        helpers[:] = [allowed(child) for child in children(mixed.seen.pid)]
        return helpers == [mixed.slot_cpus]
    try:
        wait_for("the helper pinned to the slot's CPUs", helper_pinned, 30)
    except TimeoutError:
        pytest.fail(f"the helper's CPUs: {helpers}, not [{sorted(mixed.slot_cpus)}]")
    logs = deployed.node.kubectl("logs", mixed.pod).stdout  # what each was told: CMK_CPUS_ASSIGNED
    said = dict(re.findall(r"^(data plane|control): (\S+)$", logs, re.MULTILINE))
    assert {who: parse_cpu_list(cpus) for who, cpus in said.items()} == {
        "data plane": mixed.core_cpus, "control": mixed.slot_cpus}, logs


@pytest.mark.parametrize("pool", ["exclusive", "slot"])
def test_cmk_isolate_exec_d_later_pins_to_each_pools_cpus(deployed: Deployment, mixed: Mixed, pool: str) -> None:
    """``kubectl exec`` joins the container's cgroup (the pod bounds it): each pool still gets only its own set."""
    name = str(Pool.EXCLUSIVE) if pool == "exclusive" else mixed.slot_pool
    want = mixed.core_cpus if pool == "exclusive" else mixed.slot_cpus
    result = deployed.node.kubectl("exec", mixed.pod, "--", "/opt/bin/cmk", "isolate", f"--pool={name}", "--",
                                   "grep", "^Cpus_allowed_list:", "/proc/self/status")
    assert parse_cpu_list(result.stdout.split(":", 1)[1].strip()) == want


def test_it_keeps_its_cfs_quota(mixed: Mixed) -> None:
    """Its slot's CPUs are shared: the hook removes no quota, which is the container's cpu limit."""
    cpu = cgroup_dir(mixed.seen.pid, "cpu")
    period = int((cpu / "cpu.cfs_period_us").read_text())
    (container,) = mixed.manifest["spec"]["containers"]
    limit = millicores(container["resources"]["limits"]["cpu"])
    assert int((cpu / "cpu.cfs_quota_us").read_text()) == limit * period // 1000


def test_describe_lists_it_in_both_pools_and_not_as_unconfined(deployed: Deployment, mixed: Mixed) -> None:
    described = json.loads(deployed.node.kubectl(
        "-n", NAMESPACE, "exec", f"daemonset/{DAEMONSET}", "-c", "daemon", "--", "cmk", "describe", "--config",
        "/etc/cmk/config.yaml", "--output", "json", "--usage-window", "0", "--pod-resources-socket",
        str(deployed.node.pod_resources_socket)).stdout)
    shown = {pool["resource"]: [c for c in pool["containers"] if c["pod"] == mixed.pod]
             for pool in described["live"]["pools"]}
    for resource, cpus in ((EXCLUSIVE, mixed.core_cpus), (mixed.slot, mixed.slot_cpus)):
        (container,) = shown[resource]
        assert (container["container"], parse_cpu_list(container["cpus"])) == ("app", cpus), resource
    unconfined = described["unconfined"]
    assert unconfined["available"] and unconfined["complete"], unconfined
    assert mixed.container_id not in {c["full_id"] for c in unconfined["containers"]}, unconfined["containers"]


def test_the_api_server_refuses_it_with_a_cpu_limit_of_just_its_cores_threads(deployed: Deployment,
                                                                              mixed: Mixed) -> None:
    """A kept quota of only the cores' threads would throttle the core whenever the slot's CPUs are used."""
    manifest = json.loads(json.dumps(mixed.manifest))
    manifest["metadata"]["name"] = "cmk-mixed-quota-of-the-cores"
    (container,) = manifest["spec"]["containers"]
    container["resources"]["limits"]["cpu"] = container["resources"]["requests"]["cpu"]
    result = deployed.node.kubectl("apply", "--dry-run=server", "-f", "-", input=json.dumps(manifest), check=False)
    assert result.returncode != 0, result.stdout
    assert "cmk-exclusive-cpu" in result.stderr and "and a shared or infra slot" in result.stderr, result.stderr
