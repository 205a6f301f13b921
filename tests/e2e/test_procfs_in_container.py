"""The premise of the per-CPU metrics: an unprivileged container confined to one CPU still reads the
node's counters for every CPU in its own /proc (stat, interrupts, softirqs are not namespaced)."""

from __future__ import annotations

from pathlib import Path

from deviceplugin.host.procstats import read_sample
from deviceplugin.host.sysfs import discover
from deviceplugin.model.cpustats import DEVICE, LOCAL
from tests.support.podman import run

FILES = ("stat", "interrupts", "softirqs")


def test_a_confined_unprivileged_container_sees_every_cpus_node_wide_counters(image, container_name, tmp_path):
    online = discover(Path("/sys"), Path("/proc")).online
    host = read_sample(Path("/proc"))
    script = "; ".join(f"cat /proc/{name}; echo @@@" for name in FILES)
    result = run("--name", container_name, "--cpuset-cpus", str(min(online)), "--cap-drop", "all",
                 "--user", "65534:65534", "--security-opt", "no-new-privileges", "--read-only",
                 image, "sh", "-c", script)
    procfs = tmp_path / "proc"
    procfs.mkdir()
    for name, text in zip(FILES, result.stdout.split("@@@\n")):
        (procfs / name).write_text(text)
    seen = read_sample(procfs)
    assert set(seen.times) == set(seen.interrupts) == set(seen.softirqs) == online  # not just its one CPU
    for cpu in online:  # the node's counters (read a moment earlier on the host), not the container's own
        assert seen.times[cpu].busy >= host.times[cpu].busy > 0
        assert all(seen.interrupts[cpu][k] >= host.interrupts[cpu][k] for k in (DEVICE, LOCAL))
        assert all(seen.softirqs[cpu][k] >= host.softirqs[cpu][k] for k in (DEVICE, LOCAL))
