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


def test_host_config_over_a_systemd_and_cgroup_root_of_every_hostile_kind(cmk: Callable[..., Outcome],
                                                                          shared_tmp: Path) -> None:
    """``run/systemd/system`` and ``fs/cgroup/cgroup.controllers`` of every kind: host-config only stats them.

    Only a directory at ``run/systemd/system`` is systemd (its ``sd_booted`` test), and there the
    ``cgroup.controllers`` directory counts as cgroup v2: the one case that prints systemd's driver.
    """
    outcomes = {}
    for kind, uid in FILE_KINDS.items():
        case = shared_tmp / kind.replace("/", "_").replace(" ", "-")
        sysfs, procfs = fixture_copy("cmk-xeon_d", case, isolcpus="0-3,8-11")
        (case / "run" / "systemd").mkdir(parents=True)
        (sysfs / "fs" / "cgroup").mkdir(parents=True)
        for directory in [case, *case.rglob("*")]:
            if directory.is_dir():
                directory.chmod(directory.stat().st_mode | 0o755)  # searchable by nobody
        plant(case / "run" / "systemd" / "system", kind)
        plant(sysfs / "fs" / "cgroup" / "cgroup.controllers", kind)
        outcomes[kind] = cmk("host-config", "--sysfs-root", str(sysfs), "--procfs-root", str(procfs),
                             "--run-root", str(case / "run"), "-o", "json", uid=uid)
    bad = {kind: outcome for kind, outcome in outcomes.items()
           if outcome.hung or outcome.status != 0 or outcome.cpu >= CPU_LIMIT or outcome.stderr}
    assert bad == {}, bad
    drivers = {kind: json.loads(outcome.stdout)["cgroup"]["driver"] for kind, outcome in outcomes.items()}
    assert drivers == {kind: "systemd" if kind == "directory" else "cgroupfs" for kind in FILE_KINDS}
