"""The daemon's CDI side: the spec is written at start, named in every Allocate answer, removed at exit.

Real daemons (in-process and ``cmk device-plugin`` processes) against the
kubelet stand-in, which merges the answers of several pools as the kubelet does.
"""

from __future__ import annotations

import json
import signal

from deviceplugin.daemon import Daemon, DaemonSettings
from deviceplugin.host import cdi
from deviceplugin.model.plan import PlanOptions
from deviceplugin.standin import ContainerSpec, PodSpec
from pinner import hook
from pinner.cpulist import format_cpu_list, parse_cpu_list
from tests.protocol.test_daemon import (
    EXCLUSIVE,
    INFRA,
    INSTALL_DIR,
    SHARED,
    daemon_process,
    our_sockets,
    wait_registered,
)
from tests.topologies import fixture_copy

SPEC_NAME = "cmk.intel.com-cpus.json"


def test_spec_has_a_device_per_core_and_slot_pool_each_with_its_cpus_in_its_hook(kubelet, plugin_dir, tmp_path):
    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path)
    daemon = Daemon(DaemonSettings(kubelet_dir=plugin_dir, sysfs_root=sysfs, procfs_root=procfs,
                                   install_dir=INSTALL_DIR, plan=PlanOptions(), cdi_dir=tmp_path / "cdi"))
    daemon.start()
    try:
        spec = json.loads((tmp_path / "cdi" / SPEC_NAME).read_text())
        assert spec["kind"] == "cmk.intel.com/cpus" and "containerEdits" not in spec
        expected = {}
        for pool in daemon.tree.values():
            for device in pool.devices.values():
                name = device.id if pool.pool.value.startswith("exclusive") else pool.pool.value
                expected[name] = [{"hookName": "createRuntime", "path": f"{INSTALL_DIR}/cmk",
                                   "args": hook.command_line(format_cpu_list(device.cpus)), "timeout": 10}]
        assert {d["name"]: d["containerEdits"]["hooks"] for d in spec["devices"]} == expected
    finally:
        daemon.stop()
    assert not (tmp_path / "cdi" / SPEC_NAME).exists()


def test_allocate_names_the_cdi_device_of_every_id_and_they_merge(kubelet, plugin_dir, tmp_path):
    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path)
    daemon = Daemon(DaemonSettings(kubelet_dir=plugin_dir, sysfs_root=sysfs, procfs_root=procfs,
                                   install_dir=INSTALL_DIR, cdi_dir=tmp_path / "cdi"))
    daemon.start()
    try:
        wait_registered(kubelet, {EXCLUSIVE, SHARED, INFRA})
        pod = kubelet.admit(PodSpec("cdi", containers=(
            ContainerSpec("dataplane", limits={EXCLUSIVE: 2}),
            ContainerSpec("monitor", limits={INFRA: 1, SHARED: 1}),
        )))
        dataplane = pod.container("dataplane")
        assert sorted(dataplane.answer.cdi_devices) == sorted(
            f"cmk.intel.com/cpus={i}" for i in dataplane.device_ids[EXCLUSIVE])
        assert sorted(pod.container("monitor").answer.cdi_devices) == [
            "cmk.intel.com/cpus=infra", "cmk.intel.com/cpus=shared"]
        spec = json.loads((tmp_path / "cdi" / SPEC_NAME).read_text())
        hooks = {cdi.device_name(d["name"]): d["containerEdits"]["hooks"][0]["args"] for d in spec["devices"]}
        for container in pod.containers:  # the hooks' CPUs are exactly the CPUs the env tells the pinner
            held = parse_cpu_list(",".join(a.removeprefix("--cpus=") for n in container.answer.cdi_devices
                                           for a in hooks[n][2:]))
            env = parse_cpu_list(",".join(container.answer.envs.values()))
            assert held == env
        assert kubelet.conflicts() == []
    finally:
        daemon.stop()


def test_without_cdi_no_spec_and_no_cdi_devices(kubelet, plugin_dir, tmp_path):
    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path)
    process = daemon_process(plugin_dir, sysfs, procfs, "--no-cdi", "--cdi-dir", str(tmp_path / "cdi"))
    try:
        wait_registered(kubelet, {EXCLUSIVE, SHARED, INFRA})
        pod = kubelet.admit(PodSpec("plain", containers=(ContainerSpec("c", limits={EXCLUSIVE: 1}),)))
        assert pod.container("c").answer.cdi_devices == ()
        assert not (tmp_path / "cdi").exists()
    finally:
        process.terminate()
        process.communicate(timeout=10)


def test_the_cli_writes_the_spec_by_default_and_sigterm_removes_it(kubelet, plugin_dir, tmp_path):
    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path)
    cdi_dir = tmp_path / "cdi"
    process = daemon_process(plugin_dir, sysfs, procfs, "--cdi-dir", str(cdi_dir), "--install-dir", "/host/opt/bin")
    try:
        wait_registered(kubelet, {EXCLUSIVE, SHARED, INFRA})
        spec = json.loads((cdi_dir / SPEC_NAME).read_text())
        assert {h["path"] for d in spec["devices"] for h in d["containerEdits"]["hooks"]} == {"/host/opt/bin/cmk"}
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=10)
    finally:
        process.kill()
    assert process.returncode == 0, stderr
    assert list(cdi_dir.iterdir()) == []


def test_an_unwritable_cdi_dir_is_one_line_and_serves_nothing(kubelet, plugin_dir, tmp_path):
    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path)
    (tmp_path / "file").write_text("")
    process = daemon_process(plugin_dir, sysfs, procfs, "--cdi-dir", str(tmp_path / "file" / "cdi"))
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 1
    assert stderr == (
        f"cmk device-plugin: error: cannot write the CDI spec into {tmp_path}/file/cdi: Not a directory: mount the "
        "runtime's CDI directory writable and name it with --cdi-dir, or run with --no-cdi\n"
    )
    assert our_sockets(plugin_dir) == [] and kubelet.registrations() == []

