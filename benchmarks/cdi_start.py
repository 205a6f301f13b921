"""Container start time with and without the CDI device whose hook confines the container.

``podman run --rm IMAGE /bin/true`` under runc, RUNS times each, interleaved
so drift hits both alike: once plain, once with ``--device
cmk.intel.com/cpus=cpus-N`` (one core's device: the runtime reads the spec,
runs its ``cmk hook --cpus=N`` at createRuntime, which writes the cgroup and
pins the process). Both get the same ``CMK_CPUS_EXCLUSIVE`` env. Printed: median and p90 of each, their
difference and ratio (target: the hook adds under 20 ms).

The hook alone is timed too, spawn to exit against a real process in a real
cpuset cgroup, beside spawning ``/bin/true`` the same way, because a
millisecond is well inside podman's own run-to-run noise.

    python benchmarks/cdi_start.py [--runs 50] [--hook-runs 300]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNTIME_CDI_DIR = Path("/var/run/cdi")
CPU = "1"


def timed(argv: list[str], stdin: bytes | None = None) -> float:
    start = time.perf_counter()
    result = subprocess.run(argv, input=stdin, capture_output=True, check=False)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"benchmark command failed: {' '.join(argv)}: {result.stderr.decode().strip()}")
    return elapsed


def figures(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered) * 1000, ordered[int(0.9 * (len(ordered) - 1))] * 1000


def report(title: str, rows: dict[str, list[float]], base: str, other: str) -> None:
    print(title)
    for name, samples in rows.items():
        median, p90 = figures(samples)
        print(f"  {name:<34} median {median:8.2f} ms   p90 {p90:8.2f} ms")
    base_median, other_median = figures(rows[base])[0], figures(rows[other])[0]
    print(f"  added by the hook: {other_median - base_median:+.2f} ms median, ratio {other_median / base_median:.3f}x")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50, help="podman runs of each kind (default: 50)")
    parser.add_argument("--hook-runs", type=int, default=300, help="direct hook runs (default: 300)")
    args = parser.parse_args()

    sys.path.insert(0, str(ROOT))
    from deviceplugin.host import cdi
    from deviceplugin.host.install import install_pinner
    from pinner.build import DEFAULT_OUTPUT, build
    from tests.e2e.podman import RUN, busybox_image
    from tests.pinner.hookrun import cpuset_cgroup, process_in, state, write_config

    if not DEFAULT_OUTPUT.is_file():
        build(DEFAULT_OUTPUT)
    with tempfile.TemporaryDirectory(prefix="cmk-cdi-bench-") as work:
        work_dir = Path(work)
        binary = install_pinner(DEFAULT_OUTPUT, work_dir / "opt-bin")

        bundle = work_dir / "bundle"
        write_config(bundle, [str(CPU)])
        direct: dict[str, list[float]] = {"spawn /bin/true": [], "spawn cmk hook (cgroup + affinity)": []}
        with cpuset_cgroup() as cgroup, process_in(cgroup) as proc:
            stdin = state(proc.pid, bundle).encode()
            for _ in range(args.hook_runs):
                direct["spawn /bin/true"].append(timed(["/bin/true"], stdin))
                direct["spawn cmk hook (cgroup + affinity)"].append(timed([str(binary), "hook", f"--cpus={CPU}"], stdin))
        report(f"the hook alone ({args.hook_runs} runs each, interleaved):", direct, "spawn /bin/true",
               "spawn cmk hook (cgroup + affinity)")

        spec = cdi.write_spec(cdi.build_spec({f"cpus-{CPU}": frozenset({CPU})}, str(binary)), work_dir / "cdi")
        RUNTIME_CDI_DIR.mkdir(parents=True, exist_ok=True)
        link = RUNTIME_CDI_DIR / f"cmk-bench-{uuid.uuid4().hex[:10]}.json"
        link.symlink_to(spec)
        try:
            with busybox_image("cmk-bench") as image:
                plain = [*RUN, "--rm", "-e", f"CMK_CPUS_EXCLUSIVE={CPU}", image, "/bin/true"]
                device = [*RUN, "--rm", "--device", cdi.device_name(f"cpus-{CPU}"), "-e", f"CMK_CPUS_EXCLUSIVE={CPU}",
                          image, "/bin/true"]
                timed(plain), timed(device)  # warm podman's caches for both
                runs: dict[str, list[float]] = {"podman run --rm /bin/true": [], "... with the CDI device": []}
                for _ in range(args.runs):
                    runs["podman run --rm /bin/true"].append(timed(plain))
                    runs["... with the CDI device"].append(timed(device))
        finally:
            link.unlink()
        report(f"container start, podman + runc ({args.runs} runs each, interleaved):", runs,
               "podman run --rm /bin/true", "... with the CDI device")
    return 0


if __name__ == "__main__":
    sys.exit(main())
