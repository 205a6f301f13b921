"""The real node users run: a kubelet and containerd under systemd as PID 1, cgroup v2, the systemd cgroup driver.

Each test is one check of what :mod:`tests.systemd.kubelet_guest` saw on one kernel: the node as an operator sets
it up (``cgroupDriver: systemd``, ``failCgroupV1`` at its default, ``SystemdCgroup = true``), the DaemonSet rolled
out with the node's capacity as the daemon's own plan, deploy/examples' seed pod on its device's CPUs through
containerd's CDI edits and an ordinary pod on infra through the node-wide hook, each staying there after every
step of :data:`tests.systemd.steps.KUBELET_STEPS`; then the kubelet's static CPU manager beside the daemon,
whose Guaranteed pod keeps the CPU the kubelet gave it.
"""

from __future__ import annotations

from typing import Any

import pytest

from deviceplugin.model.cpulist import parse_cpu_list
from tests.systemd import steps
from tests.systemd.steps import as_cpus, show

EXCLUSIVE = "cmk.intel.com/exclusive-cores"
CASES = [(kernel, step, kind, check) for kernel in steps.KERNELS for step in steps.KUBELET_STEPS
         for kind in steps.KUBE_KINDS for check in steps.KUBELET_CHECKS[kind]]


def node_result(boots: Any, kernel: str) -> dict[str, Any]:
    """The kubelet node's result on ``kernel``; a failure names what the guest saw."""
    result: dict[str, Any] | None = boots.get(kernel).kubelet
    assert result is not None, f"the kubelet node wrote no result on {kernel} (see the console)"
    assert "error" not in result, f"the kubelet node failed on {kernel}:\n{result['error']}"
    return result


def pool(result: dict[str, Any], name: str) -> dict[str, Any]:
    (found,) = [p for p in result["describe"]["plan"]["pools"] if p["pool"] == name]
    return found


def hook_cpus(seen: dict[str, Any]) -> frozenset[int]:
    """The CPUs the CDI edits' ``cmk hook --cpus=LIST`` name in the container's config.json."""
    cpus = [arg.removeprefix("--cpus=") for hook in seen["hooks"] for arg in hook.split() if arg.startswith("--cpus=")]
    return frozenset().union(*(parse_cpu_list(c) for c in cpus))


@pytest.mark.parametrize("kernel", steps.KERNELS)
def test_the_node_runs_the_systemd_driver_on_cgroup_v2_and_is_ready(systemd_boots: Any, kernel: str) -> None:
    result = node_result(systemd_boots, kernel)
    facts, node = result["facts"], result["node"]
    assert (facts["pid1_comm"], facts["cgroup_fs"]) == ("systemd", "cgroup2")  # the mount's type, v2 alone
    assert node["kubelet_config"]["cgroupDriver"] == "systemd"
    assert "failCgroupV1" not in node["kubelet_config"], "failCgroupV1 must stay at its default (true since 1.35)"
    assert "SystemdCgroup = true" in node["containerd_config"]
    assert node["node_info"]["kernelVersion"] == facts["release"]


@pytest.mark.parametrize("kernel", steps.KERNELS)
def test_capacity_and_allocatable_are_the_daemons_plan(systemd_boots: Any, kernel: str) -> None:
    result = node_result(systemd_boots, kernel)
    planned = {p["resource"]: str(p["advertised"]) for p in result["describe"]["plan"]["pools"] if p["advertised"]}
    assert EXCLUSIVE in planned
    assert result["capacity"] == {"capacity": planned, "allocatable": planned}


@pytest.mark.parametrize("kernel", steps.KERNELS)
def test_the_seed_pod_runs_on_its_devices_cpus_through_the_cdi_edits(systemd_boots: Any, kernel: str) -> None:
    result = node_result(systemd_boots, kernel)
    seen = result["steps"]["start"]["containers"]["pinned"]
    cpus = hook_cpus(seen)
    devices = {parse_cpu_list(c) for c in pool(result, "exclusive")["devices"].values()}
    assert cpus in devices, f"the CDI edits name {show(cpus)}, no device of the exclusive pool ({devices})"
    assert as_cpus(seen["affinity"]) == cpus


@pytest.mark.parametrize("kernel", steps.KERNELS)
def test_an_ordinary_pod_runs_on_infra_through_the_node_wide_hook(systemd_boots: Any, kernel: str) -> None:
    result = node_result(systemd_boots, kernel)
    seen = result["steps"]["start"]["containers"]["ordinary"]
    infra = parse_cpu_list(pool(result, "infra")["cpus"])
    assert parse_cpu_list(result["record"]) == infra
    assert any("--node-wide=" in hook for hook in seen["hooks"]), seen["hooks"]
    assert as_cpus(seen["affinity"]) == infra
    assert infra < parse_cpu_list(result["facts"]["online"])  # can fail: without the hook it is every CPU


@pytest.mark.parametrize(("kernel", "step", "kind", "check"), CASES)
def test_each_pod_keeps_its_cpus_after_each_step(systemd_boots: Any, kernel: str, step: str, kind: str,
                                                 check: str) -> None:
    result = node_result(systemd_boots, kernel)
    entry = result["steps"][step]
    assert "error" not in entry, f"{step} failed on {kernel}:\n{entry['error']}"
    seen = entry["containers"][kind]
    assert "error" not in seen, seen["error"]
    started = result["steps"]["start"]["containers"][kind]
    if check == "cpu_max":
        quota = seen["cpu_max"].split()
        cpus = len(hook_cpus(started))
        # max, or after an in-place resize the kubelet's quota again: its cpu limit, all of its CPUs (the
        # cmk-exclusive-cpu policy's rule), which the pod's own quota bounds anyway and which does not throttle
        # (docs/user/cdi-hook.md). A quota below its CPUs throttles its exclusive cores.
        assert quota[0] == "max" or int(quota[0]) >= cpus * int(quota[1]), (
            f"after {step} the pinned container's cpu.max is {seen['cpu_max']!r}, below its {cpus} CPU(s): its "
            f"exclusive cores are throttled (systemd holds {seen['systemd']})")
        return
    wanted = hook_cpus(started) if kind == "pinned" else parse_cpu_list(pool(result, "infra")["cpus"])
    assert as_cpus(seen[check]) == wanted, (
        f"after {step} on {kernel}, {steps.SEEN[check]} of the {kind} pod is {seen[check]!r}, not {show(wanted)} "
        f"(systemd holds {seen['systemd']})")


@pytest.mark.parametrize("kernel", steps.KERNELS)
@pytest.mark.parametrize("step", ["start", "daemon-reload"])
def test_the_static_cpu_managers_guaranteed_pod_keeps_the_kubelets_cpu(systemd_boots: Any, kernel: str,
                                                                       step: str) -> None:
    result = node_result(systemd_boots, kernel)
    seen = result["static"][step]
    checkpoint = seen["checkpoint"]
    assert checkpoint.get("policyName") == "static"
    (given,) = [cpus for containers in checkpoint.get("entries", {}).values() for cpus in containers.values()]
    guaranteed, ordinary = seen["guaranteed"], seen["ordinary"]
    assert guaranteed["spec_cpus"] and as_cpus(guaranteed["spec_cpus"]) == parse_cpu_list(given)
    for check in ("affinity", "scope_effective", "exec"):
        assert as_cpus(guaranteed[check]) == parse_cpu_list(given), (check, guaranteed[check], given)
        assert as_cpus(ordinary[check]) == parse_cpu_list(checkpoint["defaultCpuSet"]), (check, ordinary[check])
