"""The daemon's CDI side: the spec is written at start, named in every Allocate answer, kept at exit.

Real daemons (in-process and ``cmk device-plugin`` processes) against the
kubelet stand-in, which merges the answers of several pools as the kubelet does.
"""

from __future__ import annotations

import json
import signal

from deviceplugin.daemon import Daemon, DaemonSettings
from deviceplugin.host import cdi
from deviceplugin.model.plan import PlanOptions, Pool
from deviceplugin.standin import ContainerSpec, PodSpec
from pinner import hook
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


def test_spec_names_every_pool_and_the_installed_hook_and_outlives_the_daemon(kubelet, plugin_dir, tmp_path):
    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path)
    daemon = Daemon(DaemonSettings(kubelet_dir=plugin_dir, sysfs_root=sysfs, procfs_root=procfs,
                                   install_dir=INSTALL_DIR, plan=PlanOptions(), cdi_dir=tmp_path / "cdi"))
    daemon.start()
    try:
        spec = json.loads((tmp_path / "cdi" / SPEC_NAME).read_text())
        assert spec["kind"] == "cmk.intel.com/cpus"
        assert sorted(d["name"] for d in spec["devices"]) == sorted(p.value for p in Pool)
        assert spec["containerEdits"]["hooks"] == [
            {"hookName": "createRuntime", "path": f"{INSTALL_DIR}/cmk", "args": list(hook.ARGS), "timeout": 10}]
    finally:
        daemon.stop()
    assert (tmp_path / "cdi" / SPEC_NAME).exists()  # restarts replay the names while the daemon is away


def test_allocate_names_each_pools_cdi_device_and_they_merge(kubelet, plugin_dir, tmp_path):
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
        assert pod.container("dataplane").answer.cdi_devices == ("cmk.intel.com/cpus=exclusive",)
        assert sorted(pod.container("monitor").answer.cdi_devices) == [
            "cmk.intel.com/cpus=infra", "cmk.intel.com/cpus=shared"]
        spec = json.loads((tmp_path / "cdi" / SPEC_NAME).read_text())
        declared = {cdi.device_name(d["name"]) for d in spec["devices"]}
        assert {n for c in pod.containers for n in c.answer.cdi_devices} <= declared
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


def test_the_cli_writes_the_spec_by_default_and_sigterm_keeps_it(kubelet, plugin_dir, tmp_path):
    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path)
    cdi_dir = tmp_path / "cdi"
    process = daemon_process(plugin_dir, sysfs, procfs, "--cdi-dir", str(cdi_dir), "--install-dir", "/host/opt/bin")
    try:
        wait_registered(kubelet, {EXCLUSIVE, SHARED, INFRA})
        spec = json.loads((cdi_dir / SPEC_NAME).read_text())
        assert spec["containerEdits"]["hooks"][0]["path"] == "/host/opt/bin/cmk"
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=10)
    finally:
        process.kill()
    assert process.returncode == 0, stderr
    assert [p.name for p in cdi_dir.iterdir()] == [SPEC_NAME]


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

