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

import os
import sys
import tempfile
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNTIME_CDI_DIR = Path("/var/run/cdi")
#: The core the CDI device confines to: the highest CPU this process may use (any machine).
CPU = str(max(os.sched_getaffinity(0)))


def main() -> int:
    sys.path.insert(0, str(ROOT))
    from benchmarks import starts
    from benchmarks.starts import hook_alone, installed_pinner, interleaved, report
    from deviceplugin.host import cdi
    from deviceplugin.model import cdispec
    from tests.support.hookrun import write_config
    from tests.support.podman import RUN, busybox_image

    args = starts.runs_parser(__doc__).parse_args()

    with tempfile.TemporaryDirectory(prefix="cmk-cdi-bench-") as work:
        work_dir = Path(work)
        binary = installed_pinner(work_dir)
        bundle = work_dir / "bundle"
        write_config(bundle, [CPU])
        hook_alone("spawn cmk hook (cgroup + affinity)", [str(binary), "hook", f"--cpus={CPU}"], bundle,
                   args.hook_runs)

        spec = cdi.write_spec(cdispec.build_spec({f"cpus-{CPU}": frozenset({CPU})}, str(binary)), work_dir / "cdi")
        RUNTIME_CDI_DIR.mkdir(parents=True, exist_ok=True)
        link = RUNTIME_CDI_DIR / f"cmk-bench-{uuid.uuid4().hex[:10]}.json"
        link.symlink_to(spec)
        try:
            with busybox_image("cmk-bench") as image:
                env = ["-e", f"CMK_CPUS_EXCLUSIVE={CPU}"]
                runs = interleaved({"podman run --rm /bin/true": [*RUN, "--rm", *env, image, "/bin/true"],
                                    "... with the CDI device": [*RUN, "--rm", "--device",
                                                                cdispec.qualified_name(f"cpus-{CPU}"), *env, image,
                                                                "/bin/true"]}, args.runs)
        finally:
            link.unlink()
        report(f"container start, podman + runc ({args.runs} runs each, interleaved):", runs,
               "podman run --rm /bin/true", "... with the CDI device")
    return 0


if __name__ == "__main__":
    sys.exit(main())
