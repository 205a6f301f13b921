"""The daemon's CDI side: the spec is written at start, named in every Allocate answer, kept at exit.

Real daemons (in-process and ``cmk device-plugin`` processes) against the
kubelet stand-in, which merges the answers of several pools as the kubelet does.
"""

from __future__ import annotations

import json
import signal

import pytest

from deviceplugin.daemon import Daemon, DaemonSettings
from deviceplugin.model import cdispec
from deviceplugin.model import hookcontract as hook
from deviceplugin.model.cpulist import format_cpu_list, parse_cpu_list
from deviceplugin.model.devices import core_device_ids
from deviceplugin.model.plan import CORE_POOLS, PlanOptions, Pool
from deviceplugin.standin import ContainerSpec, PodSpec
from tests.support.daemon import (
    EXCLUSIVE,
    INFRA,
    INSTALL_DIR,
    SHARED,
    daemon_process,
    our_sockets,
    wait_registered,
)
from tests.support.topologies import fixture_copy

SPEC_NAME = "cmk.intel.com-cpus.json"


@pytest.mark.parametrize("unthrottle", [True, False], ids=["cores-marked-exclusive", "no-unthrottle-exclusive"])
def test_spec_has_a_device_per_core_and_slot_pool_each_with_its_cpus_in_its_hook_and_outlives_the_daemon(
        kubelet, plugin_dir, tmp_path, unthrottle):
    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path)
    daemon = Daemon(DaemonSettings(kubelet_dir=plugin_dir, sysfs_root=sysfs, procfs_root=procfs,
                                   install_dir=INSTALL_DIR, plan=PlanOptions(), cdi_dir=tmp_path / "cdi",
                                   unthrottle_exclusive=unthrottle))
    daemon.start()
    try:
        spec = json.loads((tmp_path / "cdi" / SPEC_NAME).read_text())
        assert spec["kind"] == "cmk.intel.com/cpus" and "containerEdits" not in spec
        cpus = {name: core.cpus for core, name in core_device_ids(daemon.plan.all_cores).items()}  # any pool's
        for pool in daemon.tree.values():
            if pool.pool not in CORE_POOLS:
                cpus.update((pool.pool.value, device.cpus) for device in pool.devices.values())
        in_core_pools = {device.id for pool in daemon.tree.values() if pool.pool in CORE_POOLS for device in pool.devices.values()}
        expected = {name: [{"hookName": "createRuntime", "path": f"{INSTALL_DIR}/cmk",
                            "args": hook.command_line(format_cpu_list(c), exclusive=unthrottle and name in in_core_pools),
                            "timeout": 10}]
                    for name, c in cpus.items()}
        assert in_core_pools  # the Xeon D plan has exclusive cores, so the mark is exercised
        assert {d["name"]: d["containerEdits"]["hooks"] for d in spec["devices"]} == expected
    finally:
        daemon.stop()
    assert (tmp_path / "cdi" / SPEC_NAME).exists()  # restarts replay the names while the daemon is away


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
        hooks = {cdispec.qualified_name(d["name"]): d["containerEdits"]["hooks"][0]["args"] for d in spec["devices"]}
        for container in pod.containers:  # the hooks' CPUs are exactly the CPUs the env tells the pinner
            held = parse_cpu_list(",".join(a.removeprefix("--cpus=") for n in container.answer.cdi_devices
                                           for a in hooks[n][2:] if a.startswith("--cpus=")))
            env = parse_cpu_list(",".join(container.answer.envs.values()))
            assert held == env
        assert kubelet.conflicts() == []
    finally:
        daemon.stop()


def test_a_container_holding_a_core_and_a_shared_slot_gets_each_set_and_a_restart_replays_them(
        kubelet, plugin_dir, tmp_path):
    """Two answers for one container, merged in the kubelet's random order: each names its own set, only the
    core's hook is --exclusive (so the hook keeps the container's quota), and a restart replays the same."""
    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path)
    daemon = Daemon(DaemonSettings(kubelet_dir=plugin_dir, sysfs_root=sysfs, procfs_root=procfs,
                                   install_dir=INSTALL_DIR, plan=PlanOptions(num_exclusive_cores=3, num_shared_cores=1),
                                   cdi_dir=tmp_path / "cdi"))
    daemon.start()
    try:
        wait_registered(kubelet, {EXCLUSIVE, SHARED, INFRA})
        pod = kubelet.admit(PodSpec("mixed", containers=(ContainerSpec("app", limits={EXCLUSIVE: 1, SHARED: 1}),)))
        app = pod.container("app")
        core = daemon.tree[EXCLUSIVE].cpus_of(app.device_ids[EXCLUSIVE])
        shared = daemon.plan.cpus(Pool.SHARED)
        assert core and shared and not core & shared
        assert {name: parse_cpu_list(cpus) for name, cpus in app.envs.items()} == {
            "CMK_CPUS_EXCLUSIVE": core, "CMK_CPUS_SHARED": shared}
        assert [(m.container_path, m.host_path) for m in app.answer.mounts] == [("/opt/bin", INSTALL_DIR)]
        spec = json.loads((tmp_path / "cdi" / SPEC_NAME).read_text())
        hooks = {cdispec.qualified_name(d["name"]): d["containerEdits"]["hooks"][0]["args"] for d in spec["devices"]}
        marked = {frozenset(parse_cpu_list(hooks[n][2].removeprefix("--cpus="))): hook.EXCLUSIVE_OPTION in hooks[n]
                  for n in app.answer.cdi_devices}
        assert marked == {core: True, shared: False}
        assert kubelet.conflicts() == []
        replayed = kubelet.start_container("mixed", "app")
        assert (dict(replayed.envs), sorted(replayed.cdi_devices)) == (dict(app.envs), sorted(app.answer.cdi_devices))
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
        assert {h["path"] for d in spec["devices"] for h in d["containerEdits"]["hooks"]} == {"/host/opt/bin/cmk"}
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


def test_a_device_kept_from_a_forged_earlier_spec_gets_only_our_hook_and_its_cpus(kubelet, plugin_dir, tmp_path):
    """A kept device is rebuilt from its CPUs: a hook path elsewhere, extra arguments or edits never survive."""
    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path)
    cdi_dir = tmp_path / "cdi"
    cdi_dir.mkdir()
    forged = {"cdiVersion": "0.5.0", "kind": cdispec.KIND, "devices": [
        {"name": "dropped-pool", "containerEdits": {
            "env": [cdispec.CONFINED_ENV, "LD_PRELOAD=/tmp/x.so"],
            "mounts": [{"hostPath": "/", "containerPath": "/host"}],
            "deviceNodes": [{"path": "/dev/mem"}],
            "hooks": [{"hookName": "createRuntime", "path": "/tmp/elsewhere/cmk",
                       "args": [*hook.command_line("3,11"), "--node-wide=/etc/shadow", "--exclusive"], "timeout": 99},
                      {"hookName": "prestart", "path": "/bin/sh", "args": ["sh", "-c", "true"]}]}},
        {"name": "no-cpus-hook", "containerEdits": {"hooks": [{"hookName": "createRuntime", "path": "/bin/sh",
                                                               "args": ["sh", "-c", "--cpus=0-63"]}]}},
        {"name": "bad-list", "containerEdits": {"hooks": [{"hookName": "createRuntime", "path": "/opt/cmk",
                                                           "args": [*hook.ARGS, "--cpus=0-99999999"]}]}},
    ]}
    (cdi_dir / SPEC_NAME).write_text(json.dumps(forged))
    daemon = Daemon(DaemonSettings(kubelet_dir=plugin_dir, sysfs_root=sysfs, procfs_root=procfs,
                                   install_dir=INSTALL_DIR, plan=PlanOptions(), cdi_dir=cdi_dir))
    daemon.start()
    try:
        spec = json.loads((cdi_dir / SPEC_NAME).read_text())
    finally:
        daemon.stop()
    devices = {d["name"]: d for d in spec["devices"]}
    assert devices["dropped-pool"] == {"name": "dropped-pool", "containerEdits": {
        "env": [cdispec.CONFINED_ENV],
        "hooks": [{"hookName": "createRuntime", "path": f"{INSTALL_DIR}/cmk", "args": hook.command_line("3,11"),
                   "timeout": 10}]}}
    # not `cmk hook --cpus=LIST`: nothing to rebuild it from, so its name stays unresolvable
    assert "no-cpus-hook" not in devices and "bad-list" not in devices
