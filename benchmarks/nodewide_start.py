"""What the node-wide hook adds to every container start (it runs for all of them: target under 1 ms).

Two measurements, each side by side with its baseline, interleaved so drift
hits both alike:

- the hook alone: spawn to exit of ``cmk hook --node-wide=RECORD`` confining a
  real process in a real cpuset cgroup to the record's CPUs (what the runtime
  waits for at createRuntime), beside spawning ``/bin/true`` the same way;
- a whole start: ``podman run --rm IMAGE /bin/true`` under runc, plain, with
  ``--hooks-dir`` holding a declaration of ``/bin/true`` (what any hook costs
  podman and runc), and with the node-wide declaration (podman runs it as
  CRI-O does); the differences are within podman's own noise.

    python benchmarks/nodewide_start.py [--runs 50] [--hook-runs 300]
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    sys.path.insert(0, str(ROOT))
    from benchmarks import starts
    from benchmarks.starts import hook_alone, installed_pinner, interleaved, report
    from deviceplugin.host import nodewide
    from deviceplugin.model import hookcontract as hook
    from tests.support.hookrun import write_config
    from tests.support.podman import PODMAN, RUN, busybox_image

    args = starts.runs_parser(__doc__).parse_args()

    infra = frozenset({min(os.sched_getaffinity(0))})
    with tempfile.TemporaryDirectory(prefix="cmk-nodewide-bench-") as work:
        work_dir = Path(work)
        binary = installed_pinner(work_dir)
        nodewide.write_record(binary.parent, infra)
        record = str(nodewide.record_path(binary.parent))
        hooks_dir, noop_dir = work_dir / "hooks.d", work_dir / "noop-hooks.d"
        nodewide.write_declaration(hooks_dir, str(binary), record)
        noop = nodewide.declaration("/bin/true", record)
        noop["hook"]["args"] = ["true"]
        noop_dir.mkdir()
        (noop_dir / nodewide.DECLARATION_NAME).write_text(json.dumps(noop))

        bundle = work_dir / "bundle"
        write_config(bundle, [], other_hooks=[nodewide.hook_entry(str(binary), record)])
        hook_alone("spawn cmk hook --node-wide (cgroup + affinity)",
                   [str(binary), *hook.node_wide_command_line(record)[1:]], bundle, args.hook_runs)

        with busybox_image("cmk-nodewide-bench") as image:
            def command(hooks: Path | None) -> list[str]:
                flags = ["--hooks-dir", str(hooks)] if hooks else []
                return [*PODMAN, *flags, *RUN[len(PODMAN):], "--rm", image, "/bin/true"]

            runs = interleaved({"podman run --rm /bin/true": command(None),
                                "... with a /bin/true hook (--hooks-dir)": command(noop_dir),
                                "... with the node-wide hook (--hooks-dir)": command(hooks_dir)}, args.runs)
        base, noop_name, ours = runs
        report(f"container start, podman + runc ({args.runs} runs each, interleaved):", runs, base, ours)
        print(f"  beside a /bin/true hook: {statistics.median(runs[ours]) * 1000 - statistics.median(runs[noop_name]) * 1000:+.2f} ms median")
    return 0


if __name__ == "__main__":
    sys.exit(main())
