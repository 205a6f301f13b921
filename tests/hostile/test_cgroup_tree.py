"""A hostile cgroup tree in a dump: ``cmk describe`` still answers at once, naming each bad file in a note."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from tests.hostile.conftest import CPU_LIMIT, Outcome
from tests.hostile.inputs import FILE_KINDS, NOBODY, plant
from tests.support.topologies import fixture_copy


def test_describe_over_a_cgroup_tree_of_every_hostile_kind(cmk: Callable[..., Outcome], shared_tmp: Path) -> None:
    sysfs, procfs = fixture_copy("cmk-xeon_d", shared_tmp, isolcpus="0-3,8-11")
    root = sysfs / "fs/cgroup/cpuset"
    root.mkdir(parents=True)
    (root / "cpuset.effective_cpus").write_text("0-15\n")
    for i in range(len(FILE_KINDS)):
        (root / "kubepods" / f"{i:064x}").mkdir(parents=True)
    (root / "kubepods" / ("f" * 64)).mkdir()
    (root / "kubepods" / ("f" * 64) / "cpuset.effective_cpus").write_text("0-15\n")  # one sound, unconfined
    for directory in [shared_tmp, *shared_tmp.rglob("*")]:
        if directory.is_dir():
            directory.chmod(directory.stat().st_mode | 0o755)  # searchable by nobody
    planted = {kind: plant(root / "kubepods" / f"{i:064x}" / "cpuset.effective_cpus", kind)
               for i, kind in enumerate(FILE_KINDS)}
    outcome = cmk("describe", "--sysfs-root", str(sysfs), "--procfs-root", str(procfs), "--usage-window", "0",
                  "--num-exclusive-cores", "3", "-o", "json", uid=NOBODY)
    assert not outcome.hung and outcome.status == 0 and outcome.cpu < CPU_LIMIT, outcome
    section = json.loads(outcome.stdout)["unconfined"]
    assert [c["id"] for c in section["containers"]] == ["f" * 12]
    notes = " ".join(section["notes"])
    assert [kind for kind in FILE_KINDS if str(planted[kind]) not in notes] == [], notes
