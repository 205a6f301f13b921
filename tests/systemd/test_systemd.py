"""The product under systemd as PID 1 on cgroup v2, where systemd owns the pod's slice and the container's scope.

Each test is one check of what the guest program saw (``tests/systemd/guest.py``)
on one kernel, under one runtime, after one step: the pinned container must stay
on the exclusive CPU everywhere (its init, its scope, its pod slice, a process
exec'd later) without a CFS quota, the ordinary one on the infra CPU, whatever
systemd re-applies. A VM that cannot boot fails every test of its kernel.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.systemd import steps
from tests.systemd.steps import as_cpus, show

CASES = [(kernel, runtime, step, kind, check) for kernel in steps.KERNELS for runtime in steps.RUNTIMES
         for step in steps.STEPS for kind in steps.KINDS for check in steps.checks_of(kind, step)]


def result_of(boots: Any, kernel: str) -> dict[str, Any]:
    result: dict[str, Any] = boots.get(kernel).result
    assert "error" not in result, f"the guest program failed on {kernel}:\n{result['error']}"
    return result


def context(result: dict[str, Any], runtime: str, step: str, seen: dict[str, Any]) -> str:
    """Everything the guest saw of that container after that step, and what systemd logged about cpusets."""
    shown = {k: v for k, v in seen.items() if k not in ("lines", "escape")}
    overall = result.get("steps", {}).get(step, {})
    failed = [c for c in overall.get("commands", []) + seen.get("commands", []) if c.get("exit")]
    return (f"\n  seen: {json.dumps(shown)}"
            + (f"\n  failed commands: {json.dumps(failed)}" if failed else "")
            + "".join(f"\n  journal: {line}" for line in overall.get("journal", [])))


@pytest.mark.parametrize("kernel", steps.KERNELS)
def test_booted_systemd_on_cgroup2(systemd_boots, kernel):
    facts = result_of(systemd_boots, kernel)["facts"]
    assert facts["pid1_comm"] == "systemd", f"PID 1 is {facts['pid1_comm']!r} ({facts['pid1_exe']})"
    assert facts["cgroup_fs"] == "cgroup2", f"/sys/fs/cgroup is {facts['cgroup_fs']!r}, not cgroup v2 alone"
    assert "cpuset" in facts["cgroup_controllers"].split(), f"controllers: {facts['cgroup_controllers']}"
    assert as_cpus(facts["online"]) == frozenset(range(steps.VM_CPUS)), f"online CPUs {facts['online']}"
    major, minor = (int(part) for part in facts["release"].split(".")[:2])
    if kernel == "bookworm":
        assert (major, minor) == (6, 1), f"bookworm's kernel is {facts['release']}"
    else:
        assert major >= 7, f"the backports kernel is {facts['release']}, not past 6.19"


@pytest.mark.parametrize(("kernel", "runtime", "step", "kind", "check"), CASES,
                         ids=[f"{k}/{r}/{s}/{c}-{x}" for k, r, s, c, x in CASES])
def test_after_step(systemd_boots, kernel, runtime, step, kind, check):
    result = result_of(systemd_boots, kernel)
    where = f"{kernel} ({result['facts']['release']}), {runtime}, after {step}"
    seen = result.get("runtimes", {}).get(runtime, {}).get(step, {}).get("containers", {}).get(kind)
    assert seen is not None, f"{where}: the guest recorded nothing for the {kind} container"
    assert "error" not in seen, f"{where}: the {kind} pod failed:\n{seen['error']}{context(result, runtime, step, seen)}"
    want = steps.KINDS[kind]
    if check == "cpu_max":
        assert seen["cpu_max"].startswith("max "), (
            f"{where}: {steps.SEEN[check]} of the {kind} container is {seen['cpu_max']!r}: throttled, though its "
            f"hook is --exclusive{context(result, runtime, step, seen)}")
    elif check.startswith("escape_"):
        attempt = seen.get("escape", {}).get(check.removeprefix("escape_"), {})
        how = check.removeprefix("escape_").replace("_", " ")
        assert attempt.get("steps", {}).get("mount") == "ok", (
            f"{where}: the {kind} container's attacker ({how}) did not get as far as its mount, so it proves "
            f"nothing: {attempt}")
        reached = as_cpus(attempt["affinity"])
        assert reached == want, (f"{where}: the {kind} container's attacker ({how}) reached CPUs "
                                 f"{attempt['affinity']!r}; it holds {show(want)}: {attempt['steps']}"
                                 f"{context(result, runtime, step, seen)}")
    else:
        text = seen.get(check, "<not recorded>")
        assert as_cpus(text) == want, (f"{where}: {steps.SEEN[check]} of the {kind} container is {text!r}, it holds "
                                       f"{show(want)}{context(result, runtime, step, seen)}")


@pytest.mark.parametrize(("kernel", "kind"), [(k, c) for k in steps.KERNELS for c in steps.KINDS])
def test_a_scope_widened_anyway_is_reported_as_widened(systemd_boots, kernel, kind):
    """The detection (``cmk describe``, ``cmk_unconfined_containers{reason="widened"}``) on the real tree: nothing
    while the hook's record holds, ``widened`` once the scope is widened through systemd all the same (runc's
    layout; crun's puts the hook's cgroup one level lower: see docs/dev/tests.md)."""
    result = result_of(systemd_boots, kernel)
    seen = result.get("detection", {}).get(f"runc/{kind}")
    assert seen is not None, f"{kernel}: the guest recorded no detection for runc's {kind} container"
    assert seen["before"] == "", f"{kernel}: runc's {kind} container reported as {seen['before']!r} while confined"
    assert seen["after"] == "widened", (
        f"{kernel}: runc's {kind} container, its scope widened to {seen['scope_effective']!r}, reported as "
        f"{seen['after']!r}, not 'widened'")
