"""What the hook's bound costs: container start with this tree's hook beside the hook of an earlier commit.

The bound (``docs/design/hook.md``) adds a cgroup below the container's, a move of
its processes and a read of the pod's children to every confined start. Both
hooks are built here (the earlier one from ``git show REV:pinner/native/``,
with the same flags), each behind a CDI device of its own, and ``podman run
--rm IMAGE /bin/true`` under runc is timed RUNS times per kind, interleaved
so drift hits all kinds alike: plain, with the earlier hook, with this one.
The hooks alone are timed too, against a real process in a real cpuset cgroup.

    python benchmarks/bound_cost.py [--before 0e871b4] [--runs 40] [--hook-runs 200]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CPU = str(max(os.sched_getaffinity(0)))


def build_at(revision: str, work: Path) -> Path:
    """The static pinner of ``revision``, compiled as ``pinner.build`` compiles this tree's."""
    from pinner.build import CFLAGS

    source = work / f"src-{revision}"
    source.mkdir()
    listed = subprocess.run(["git", "ls-tree", "--name-only", f"{revision}:pinner/native"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split()
    names = [name for name in listed if name.endswith((".c", ".h"))]  # one cmk.c once, the units since
    for name in names:
        text = subprocess.run(["git", "show", f"{revision}:pinner/native/{name}"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout
        (source / name).write_text(text)
    output = work / f"cmk-{revision}"
    units = [str(source / name) for name in names if name.endswith(".c")]
    subprocess.run(["musl-gcc", *CFLAGS, "-I", str(source), "-o", str(output), *units], check=True)
    return output


def main() -> int:
    sys.path.insert(0, str(ROOT))
    from benchmarks import starts
    from benchmarks.starts import hook_alone, installed_pinner, interleaved, report
    from deviceplugin.model import hookcontract as hook
    from tests.support.hookrun import write_config
    from tests.support.podman import RUN, busybox_image, hook_devices

    parser = starts.runs_parser(__doc__, runs=40, hook_runs=200)
    parser.add_argument("--before", default="0e871b4", help="the commit whose hook has no bound (default: 0e871b4)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="cmk-bound-bench-") as work:
        work_dir = Path(work)
        now, before = installed_pinner(work_dir), build_at(args.before, work_dir)
        bundle = work_dir / "bundle"
        write_config(bundle, [CPU])
        for name, binary in ((f"hook of {args.before}", before), ("hook with the bound", now)):
            hook_alone(name, [str(binary), "hook", f"--cpus={CPU}"], bundle, args.hook_runs)
        device = {"core": hook.command_line(CPU, exclusive=True)}
        with hook_devices(before, device) as old_kind, hook_devices(now, device) as new_kind, \
                busybox_image("cmk-bench") as image:
            kinds = {"podman run --rm /bin/true": [*RUN, "--rm", image, "/bin/true"],
                     f"... CDI device, hook of {args.before}": [*RUN, "--rm", "--device", f"{old_kind}=core", image,
                                                                "/bin/true"],
                     "... CDI device, hook with the bound": [*RUN, "--rm", "--device", f"{new_kind}=core", image,
                                                             "/bin/true"]}
            runs = interleaved(kinds, args.runs)
        names = list(kinds)
        report(f"container start, podman + runc ({args.runs} runs each, interleaved):", runs, names[1], names[2])
    return 0


if __name__ == "__main__":
    sys.exit(main())
