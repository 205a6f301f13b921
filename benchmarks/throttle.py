"""CFS throttling of a container on two CPUs, with and without the hook removing its quota (podman + runc).

Four containers on a two-CPU cpuset (the first two CPUs this machine lets us
use), each for SECONDS, each holding a CDI device of the real hook: marked
``--exclusive`` as the daemon marks a whole exclusive core's device (the hook
removes the quota), or unmarked as a slot pool's (the quota stays):

- ``--cpus 1`` and two busy threads: the common mistake, one CPU of quota for
  a core of two threads;
- ``--cpus 2`` (the quota equals the CPUs) and two bursty threads (busy, then
  a 20 ms sleep, over and over).

Printed: the kernel's ``nr_periods``, ``nr_throttled`` and throttled time from
the container's ``cpu.stat``, and the CPU time it got. The containers run
under a cgroup parent of the highest CFS weight, so other load on the machine
does not starve them below their quota.

    python benchmarks/throttle.py [--seconds 4]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUSY = "(while :; do :; done) & echo ready; while :; do :; done"
#: Each thread: about 30 ms of shell arithmetic, then 20 ms asleep.
BURSTY = ("burst() { while :; do i=0; while [ $i -lt 3000 ]; do i=$((i+1)); done; sleep 0.02; done; }; "
          "burst & echo ready; burst")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="how long each container runs (default: 4)")
    args = parser.parse_args()

    sys.path.insert(0, str(ROOT))
    from deviceplugin.host.installedpinner import install_pinner
    from deviceplugin.model import hookcontract as hook
    from deviceplugin.model.cpulist import format_cpu_list
    from pinner.build import DEFAULT_OUTPUT, build
    from tests.support.podman import (
        busybox_image,
        cgroup_dir,
        container_pid,
        cpu_stat,
        hook_devices,
        podman,
        run,
        weighty_cgroup_parent,
    )

    cpus = format_cpu_list(frozenset(sorted(os.sched_getaffinity(0))[:2]))
    if not DEFAULT_OUTPUT.is_file():
        build(DEFAULT_OUTPUT)
    with tempfile.TemporaryDirectory(prefix="cmk-throttle-bench-") as work, busybox_image("cmk-throttle") as image:
        binary = install_pinner(DEFAULT_OUTPUT, Path(work))
        devices = {"core": hook.command_line(cpus, exclusive=True), "slot": hook.command_line(cpus)}
        with hook_devices(binary, devices) as kind:
            print(f"cpuset {cpus}, {args.seconds:g} s each, period 100 ms")
            print(f"  {'threads':<8} {'quota':<8} {'device':<22} {'cfs_quota_us':>12} {'nr_periods':>10} "
                  f"{'nr_throttled':>12} {'throttled':>10} {'cpu time':>9}")
            for threads, script, quota in (("busy", BUSY, "1"), ("bursty", BURSTY, "2")):
                for device, label in (("slot", "unmarked (slot pool)"), ("core", "--exclusive (core)")):
                    name = f"cmk-throttle-{uuid.uuid4().hex[:10]}"
                    with weighty_cgroup_parent() as parent:
                        try:
                            run("-d", "--name", name, "--cgroup-parent", parent, "--cpuset-cpus", cpus,
                                "--cpus", quota, "--cpu-shares", "262144", "--device", f"{kind}={device}",
                                image, "sh", "-c", script)
                            pid = container_pid(name)
                            acct = cgroup_dir(pid, "cpuacct") / "cpuacct.usage"
                            before, usage = cpu_stat(pid), int(acct.read_text())
                            time.sleep(args.seconds)
                            after, used = cpu_stat(pid), int(acct.read_text()) - usage
                            limit = (cgroup_dir(pid, "cpu") / "cpu.cfs_quota_us").read_text().strip()
                        finally:
                            podman("rm", "-f", "-t", "0", name, check=False)
                    periods = after["nr_periods"] - before["nr_periods"]
                    throttled = after["nr_throttled"] - before["nr_throttled"]
                    seconds = (after["throttled_time"] - before["throttled_time"]) / 1e9
                    print(f"  {threads:<8} {'--cpus ' + quota:<8} {label:<22} {limit:>12} {periods:>10} "
                          f"{throttled:>12} {seconds:>9.2f}s {used / 1e9:>8.2f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
