"""What recording a container's CPUs with systemd costs its start, beside the hook before it, in one run.

On a node whose cgroup manager is systemd the CDI hook runs ``systemctl show`` and ``systemctl
set-property --runtime`` for the container's scope, its pod's slice and its sandbox's scope
(``docs/design/hook.md``). This boots the systemd tier's VM on the backports kernel (systemd as PID
1, cgroup v2) and starts a pinned pod there (``runc --systemd-cgroup``, a sandbox and a workload
holding the exclusive core's CDI device) ``--rounds`` times with each of three hooks, interleaved so
that drift hits all alike: no hook at all, the hook as it was at ``--before`` (git revision, default
the last one without systemd recording), and this checkout's. Printed per arm: the median and p90 of
``runc run -d`` of the workload (the hooks run inside it), the hook's share (the arm's start minus
the no-hook start of the same round), and the ratios to the hook before. Under TCG every process
start is slow; the ratio, not the seconds, is the figure to read.

    python benchmarks/systemd_hook.py [--rounds 5] [--before 92b1d93]

Needs root, qemu and ``.ci/build-systemd-node``'s root (built if missing); takes 5 to 10 minutes here.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ARMS = ("no hook", "before", "after")


def build_hook_at(revision: str, output: Path) -> None:
    """The static pinner as it was at ``revision``: its C units and generated header from git, this build's flags."""
    from pinner.build import CFLAGS
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision, "pinner/native"],
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        sources = sorted(str(p) for p in Path(tmp, "pinner", "native").glob("*.c"))
        subprocess.run(["musl-gcc", *CFLAGS, "-o", str(output), *sources], check=True)


def arm_plans(prepared: dict[str, Any], share: Path, before: Path) -> dict[str, dict[str, Any]]:
    """Each arm's plan for the guest's ``make_pod``: the CDI spec naming that arm's binary (none: no hooks)."""
    after_path = str(Path(prepared["install_dir"]) / "cmk")
    plans = {"after": prepared}
    before_plan = copy.deepcopy(prepared)
    before_copy = share / "cmk-before"
    before_copy.write_bytes(before.read_bytes())
    before_copy.chmod(0o755)
    for device in before_plan["cdi_spec"]["devices"]:
        for hook in device.get("containerEdits", {}).get("hooks", []):
            if hook["path"] == after_path:
                hook["path"] = str(before_copy)
    plans["before"] = before_plan
    bare = copy.deepcopy(prepared)
    for device in bare["cdi_spec"]["devices"]:
        device.get("containerEdits", {}).pop("hooks", None)
    plans["no hook"] = bare
    return plans


def guest(plan_path: Path) -> int:
    """In the VM: the rounds, each arm once per round, the workload's ``run -d`` timed; JSON to the share."""
    from tests.systemd.guest import (
        KUBEPODS,
        checked,
        facts,
        make_pod,
        progress,
        run,
        start_slice,
    )
    plan = json.loads(plan_path.read_text())
    checked(["systemctl", "start", "dbus.service"])
    start_slice(KUBEPODS, "")
    starts: dict[str, list[float]] = {arm: [] for arm in ARMS}
    work = Path(tempfile.mkdtemp(prefix="bench-", dir="/tmp"))
    for round_ in range(plan["rounds"]):
        for arm in ARMS:
            pod = make_pod("runc", "pinned", plan["arms"][arm], work / f"{round_}-{arm.replace(' ', '-')}")
            starts[arm].append(pod.workload.run_seconds)
            for container in (pod.workload, pod.sandbox):
                container.delete()
            run(["systemctl", "stop", pod.pod_slice])
            progress(f"round {round_ + 1}, {arm}: {pod.workload.run_seconds} s")
    Path(plan["result"]).write_text(json.dumps({"starts": starts, "facts": facts()}))
    return 0


def p90(values: list[float]) -> float:
    return sorted(values)[max(0, round(0.9 * len(values)) - 1)]


def report(starts: dict[str, list[float]], release: str, before: str) -> None:
    shares = {arm: [s - b for s, b in zip(starts[arm], starts["no hook"], strict=True)] for arm in ("before", "after")}
    print(f"kernel {release}, runc --systemd-cgroup, {len(starts['after'])} rounds; the hook before is {before}")
    print(f"{'arm':<9} {'start p50':>10} {'start p90':>10} {'hook p50':>9} {'start / before':>15} {'hook / before':>14}")
    for arm in ARMS:
        start = statistics.median(starts[arm])
        hook = statistics.median(shares[arm]) if arm in shares else 0.0
        ratio = start / statistics.median(starts["before"])
        hook_ratio = f"{hook / statistics.median(shares['before']):.2f}" if arm in shares else "-"
        print(f"{arm:<9} {start:>9.1f}s {p90(starts[arm]):>9.1f}s {hook:>8.1f}s {ratio:>15.2f} {hook_ratio:>14}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="pods per arm (default: 5)")
    parser.add_argument("--before", default="92b1d93", help="git revision of the hook to compare with")
    parser.add_argument("--guest", type=Path, help=argparse.SUPPRESS)  # in the VM: the plan
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    if args.guest:
        return guest(args.guest)
    from tests.support.native import ensure_native_pinner
    from tests.systemd.vm import boot, build, prepare_share

    ensure_native_pinner()
    share = Path(tempfile.mkdtemp(prefix="cmk-systemd-bench-", dir="/tmp"))
    before = share / "cmk-built-before"
    build_hook_at(args.before, before)
    built = build()
    plans = arm_plans(prepare_share(share), share, before)
    started = time.monotonic()
    booted = boot(built, "backports", share, {"rounds": args.rounds, "arms": plans},
                     modules=("benchmarks.systemd_hook --guest",))
    print(f"VM: {time.monotonic() - started:.0f} s in all")
    report(booted.result["starts"], booted.release, args.before)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
