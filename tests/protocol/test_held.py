"""A daemon started under another plan or ID scheme never hands out a core the kubelet still holds.

Real daemons against the stand-in (real gRPC, real pod resources): a pod
holds devices, the daemon is replaced, and a second pod must not get the
first one's CPUs; once the holder is deleted the core is back in its pool.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from deviceplugin.daemon import Daemon, DaemonSettings
from deviceplugin.host.slotrecord import RECORD_NAME
from deviceplugin.model import devices as device_model
from deviceplugin.model.cpulist import parse_cpu_list
from deviceplugin.model.plan import PlanOptions
from deviceplugin.standin import AdmissionError, ContainerSpec, Kubelet, PodSpec
from tests.support.daemon import EXCLUSIVE, INFRA, SHARED, wait_registered
from tests.support.records import logged
from tests.support.started import StopAfter
from tests.support.topologies import fixture_copy, take_offline_as_the_kernel_does

INSTALL_DIR = "/opt/cmk-test"


@pytest.fixture
def run_daemon(kubelet: Kubelet, plugin_dir: Path, tmp_path: Path,
               caplog: pytest.LogCaptureFixture) -> Iterator[Callable[..., Daemon]]:
    """``run_daemon(**plan)``: a daemon on CMK's Xeon D reading the stand-in's pod resources; its lines in ``caplog``."""
    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path)  # isolcpus=0-3,8-11
    caplog.set_level(logging.INFO, logger="deviceplugin")
    with StopAfter() as kept:
        def run(**plan: object) -> Daemon:
            caplog.clear()  # each daemon's own lines
            return kept.start(Daemon(DaemonSettings(
                kubelet_dir=plugin_dir, sysfs_root=sysfs, procfs_root=procfs, install_dir=INSTALL_DIR,
                plan=PlanOptions(**plan),  # type: ignore[arg-type]
                pod_resources_socket=kubelet.pod_resources_socket, held_recheck=0.1)))

        yield run


def replace_daemon(kubelet: Kubelet, run: Callable[..., Daemon], old: Daemon,
                   resources: frozenset[str] = frozenset({EXCLUSIVE, SHARED, INFRA}), **plan: object) -> Daemon:
    old.stop()
    new = run(**plan)
    wait_registered(kubelet, set(resources), count=2)
    return new


def cpus(env: str) -> frozenset[int]:
    return parse_cpu_list(env)


def test_a_core_moved_from_exclusive_to_shared_while_held_stays_out_until_freed(kubelet, run_daemon, plugin_dir,
                                                                                caplog):
    first = run_daemon(num_exclusive_cores=3, num_shared_cores=1)  # exclusive {0,8} {1,9} {2,10}
    wait_registered(kubelet, {EXCLUSIVE, SHARED, INFRA})
    holder = kubelet.admit(PodSpec("holder", (ContainerSpec("app", limits={EXCLUSIVE: 3}),)))
    held = cpus(holder.container("app").envs["CMK_CPUS_EXCLUSIVE"])
    assert held == {0, 1, 2, 8, 9, 10}

    second = replace_daemon(kubelet, run_daemon, first, num_exclusive_cores=2, num_shared_cores=2)
    # The new plan puts {2,10} into shared; the holder still runs on it.
    user = kubelet.admit(PodSpec("user", (ContainerSpec("app", limits={SHARED: 1}),)))
    shared = cpus(user.container("app").envs["CMK_CPUS_SHARED"])
    assert shared == {3, 11} and not shared & held
    withheld = logged(caplog.records, "core_withheld")
    assert [(w["core"], w["pool"], w["resource"], w["level"]) for w in withheld] == [("2,10", "shared", EXCLUSIVE,
                                                                                       "warning")]

    kubelet.delete_pod("holder")
    kubelet.delete_pod("user")
    # Released, and served: the daemon forgets the hold before its servers take the new snapshot (its tree last).
    kubelet.wait_for(lambda: not second.withheld and {2, 10} <= {cpu for d in second.tree[SHARED].devices.values()
                                                                 for cpu in d.cpus}, what="core released and served")
    again = kubelet.admit(PodSpec("again", (ContainerSpec("app", limits={SHARED: 1}),)))
    assert cpus(again.container("app").envs["CMK_CPUS_SHARED"]) == {2, 3, 10, 11}
    assert [e["pool"] for e in logged(caplog.records, "core_released")] == ["shared"]


def test_cores_held_under_an_old_release_id_are_not_handed_out_again(kubelet, run_daemon, monkeypatch):
    # The release before 2026-12 named every core by its CPUs (cpus-1.9).
    with monkeypatch.context() as old_release:
        old_release.setattr(device_model, "core_device_ids",
                            lambda cores: {core: device_model.cpu_list_id(core) for core in cores})
        first = run_daemon(num_exclusive_cores=3, num_shared_cores=1)
        wait_registered(kubelet, {EXCLUSIVE, SHARED, INFRA})
        holder = kubelet.admit(PodSpec("holder", (ContainerSpec("app", limits={EXCLUSIVE: 1}),)))
    (old_id,) = holder.container("app").device_ids[EXCLUSIVE]
    assert old_id.startswith("cpus-")
    held = cpus(holder.container("app").envs["CMK_CPUS_EXCLUSIVE"])

    replace_daemon(kubelet, run_daemon, first, num_exclusive_cores=3, num_shared_cores=1)
    assert all(i.startswith("core-") for i in kubelet.devices(EXCLUSIVE))
    with pytest.raises(AdmissionError, match="Requested: 3, Available: 2"):
        kubelet.admit(PodSpec("greedy", (ContainerSpec("app", limits={EXCLUSIVE: 3}),)))
    rest = kubelet.admit(PodSpec("rest", (ContainerSpec("app", limits={EXCLUSIVE: 2}),)))
    assert not cpus(rest.container("app").envs["CMK_CPUS_EXCLUSIVE"]) & held

    kubelet.delete_pod("holder")
    kubelet.wait_for(lambda: len(kubelet.devices(EXCLUSIVE)) == 3, what="the old core advertised again")


def test_held_slots_keep_their_cpus_out_of_exclusive_across_a_plan_change(kubelet, run_daemon, plugin_dir):
    first = run_daemon(num_exclusive_cores=2, num_shared_cores=2)  # shared {2,10} {3,11}
    wait_registered(kubelet, {EXCLUSIVE, SHARED, INFRA})
    assert json.loads((plugin_dir / RECORD_NAME).read_text())[SHARED] == "2-3,10-11"
    slot = kubelet.admit(PodSpec("slot", (ContainerSpec("app", limits={SHARED: 1}),)))
    on = cpus(slot.container("app").envs["CMK_CPUS_SHARED"])

    replace_daemon(kubelet, run_daemon, first, frozenset({EXCLUSIVE, INFRA}),
                   num_exclusive_cores=4, num_shared_cores=0)
    excl = kubelet.admit(PodSpec("excl", (ContainerSpec("app", limits={EXCLUSIVE: 2}),)))
    assert not cpus(excl.container("app").envs["CMK_CPUS_EXCLUSIVE"]) & on
    assert len(kubelet.devices(EXCLUSIVE)) == 2  # {2,10} and {3,11} wait for the slot's holder


def test_describe_names_the_withheld_core(kubelet, run_daemon, tmp_path, caplog):
    import subprocess
    import sys

    from tests.support.daemon import REPO

    first = run_daemon(num_exclusive_cores=3, num_shared_cores=1)
    wait_registered(kubelet, {EXCLUSIVE, SHARED, INFRA})
    kubelet.admit(PodSpec("holder", (ContainerSpec("app", limits={EXCLUSIVE: 3}),)))
    replace_daemon(kubelet, run_daemon, first, num_exclusive_cores=2, num_shared_cores=2)
    lines = [r.getMessage() for r in caplog.records if "withheld" in r.getMessage()]
    assert len(lines) == 1 and "core {2,10} withheld from shared" in lines[0]
    sysfs = first.settings.sysfs_root
    out = subprocess.run([sys.executable, "-m", "deviceplugin", "describe", "--sysfs-root", str(sysfs),
                          "--procfs-root", str(first.settings.procfs_root), "--num-exclusive-cores", "2",
                          "--num-shared-cores", "2", "--pod-resources-socket", str(kubelet.pod_resources_socket)],
                         cwd=REPO, capture_output=True, text=True, timeout=60, check=True).stdout
    assert "note: core {2,10} withheld from shared: cmk.intel.com/exclusive-cores core-n0-p0-c2 is still held" in out


def test_a_core_held_across_a_restart_with_one_thread_offline_is_not_free(kubelet, run_daemon):
    """The issue's first defect: with CPU 9 offline at start, core {1,9} came back as a new, free ID."""
    first = run_daemon(num_exclusive_cores=3, num_shared_cores=1)
    wait_registered(kubelet, {EXCLUSIVE, SHARED, INFRA})
    holder = kubelet.admit(PodSpec("holder", (ContainerSpec("app", limits={EXCLUSIVE: 3}),)))
    before = sorted(kubelet.devices(EXCLUSIVE))
    take_offline_as_the_kernel_does(first.settings.sysfs_root, 9)
    replace_daemon(kubelet, run_daemon, first, num_exclusive_cores=3, num_shared_cores=1)
    assert sorted(kubelet.devices(EXCLUSIVE)) == before  # the same IDs: the kubelet still counts them taken
    with pytest.raises(AdmissionError, match="Requested: 1, Available: 0"):
        kubelet.admit(PodSpec("second", (ContainerSpec("app", limits={EXCLUSIVE: 1}),)))
    assert cpus(holder.container("app").envs["CMK_CPUS_EXCLUSIVE"]) == {0, 1, 2, 8, 9, 10}
