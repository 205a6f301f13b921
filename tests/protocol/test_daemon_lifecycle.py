"""The daemon through a kubelet's whole life: dropped streams, restarts racing a Register, a second
daemon, the CDI spec while the daemon is away, the plugin directory re-made, honest registration state.

Each test here failed before its fix. Real daemons (in-process, or ``cmk device-plugin`` processes where
the process's life matters) against the kubelet stand-in over real unix sockets.
"""

from __future__ import annotations

import json
import logging
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from api.constants import KUBELET_SOCKET_NAME
from deviceplugin.daemon import Daemon, DaemonSettings, socket_name
from deviceplugin.errors import CmkError
from deviceplugin.model import cdispec
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
from tests.support.records import logged
from tests.support.topologies import fixture_copy

SERVED = {EXCLUSIVE, SHARED, INFRA}


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 30) -> None:
    """For a kubelet that is a process: no stand-in object here to wait on."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.05)


def wait_for_file(path: Path, timeout: float = 30) -> None:
    """The CLI writes the NFD file once serving has started: after the registrations the kubelet sees."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} not written within {timeout} s"
        time.sleep(0.05)


def registrations(kubelet, resource: str) -> int:
    return [r.resource for r in kubelet.registrations()].count(resource)


def cdi_daemon(plugin_dir: Path, tmp_path: Path, **plan: object) -> Daemon:
    from deviceplugin.model.plan import PlanOptions

    dump = tmp_path / "dump"
    root = dump / "cmk-xeon_d"
    sysfs, procfs = (root / "sys", root / "proc") if root.exists() else fixture_copy("cmk-xeon_d", dump)
    return Daemon(DaemonSettings(kubelet_dir=plugin_dir, sysfs_root=sysfs, procfs_root=procfs,
                                 install_dir=INSTALL_DIR, plan=PlanOptions(**plan), cdi_dir=tmp_path / "cdi"))


# --- streams the kubelet ends ------------------------------------------------------------------------

def test_a_pool_whose_stream_the_kubelet_dropped_registers_again(kubelet, start_daemon, tmp_path):
    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path)
    daemon = start_daemon(sysfs, procfs)
    wait_registered(kubelet, SERVED)
    capacity = kubelet.capacity()
    kubelet.drop_stream(SHARED)
    kubelet.wait_for(lambda: registrations(kubelet, SHARED) == 2 and kubelet.allocatable() == capacity,
                     what="shared registered again")
    assert [registrations(kubelet, r) for r in (EXCLUSIVE, INFRA)] == [1, 1]  # only the dropped pool
    assert daemon.registered and kubelet.violations() == []


def test_registered_means_the_kubelet_holds_the_stream(kubelet, start_daemon, tmp_path, monkeypatch):
    """Before: a pool counted as registered for good once Register had returned to the same kubelet."""
    from deviceplugin.standin import devicemanager

    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path)
    daemon = start_daemon(sysfs, procfs)
    wait_registered(kubelet, SERVED)
    # The daemon records a pool once its Register returned, which can come after the kubelet's first
    # snapshot of the stream: its own view is awaited, not read at the kubelet's moment.
    kubelet.wait_for(lambda: daemon.registered_resources() == SERVED, what="the daemon's view: all registered")
    original = devicemanager.registration_problem
    monkeypatch.setattr(devicemanager, "registration_problem", lambda request: (
        "refused by this test" if request.resource_name == SHARED else original(request)))
    kubelet.drop_stream(SHARED)  # the same kubelet stays up, and refuses the pool from now on
    kubelet.wait_for(lambda: not daemon.servers[SHARED].streaming, what="stream ended on the daemon's side")
    assert daemon.registered_resources() == {EXCLUSIVE, INFRA} and not daemon.registered


def test_one_pool_refused_by_the_kubelet_does_not_hold_the_others_up(make_kubelet, plugin_dir, tmp_path):
    """Before: pools registered one after the other, so one refused pool kept the rest away for good."""
    from deviceplugin.standin import devicemanager

    refused = EXCLUSIVE
    original = devicemanager.registration_problem
    devicemanager.registration_problem = lambda request: (  # type: ignore[assignment]
        "refused by this test" if request.resource_name == refused else original(request))
    try:
        kubelet = make_kubelet()
        daemon = cdi_daemon(plugin_dir, tmp_path)
        daemon.start()
        try:
            wait_registered(kubelet, {SHARED, INFRA})
            # the daemon records a pool once its Register returned, which can follow the kubelet's snapshot
            kubelet.wait_for(lambda: daemon.registered_resources() == {SHARED, INFRA},
                             what="the daemon's view: the two pools registered")
            assert registrations(kubelet, refused) == 0 and daemon.registered_resources() == {SHARED, INFRA}
        finally:
            daemon.stop()
    finally:
        devicemanager.registration_problem = original


def test_a_register_in_flight_across_a_restart_never_reaches_the_new_server(make_kubelet, plugin_dir, tmp_path):
    """The kubelet dials back half a second after a Register arrived; meanwhile the daemon's socket goes
    (as when a kubelet restarts) and the daemon serves anew. Before: the new server was bound at once and
    the old Register's dial-back connected it, a second client of the pool."""
    kubelet = make_kubelet(dial_delay=0.5, dial_timeout=1.0)
    daemon = cdi_daemon(plugin_dir, tmp_path)
    daemon.start()
    try:
        (plugin_dir / socket_name(SHARED)).unlink()  # while every Register is still in flight
        wait_registered(kubelet, SERVED)
        kubelet.wait_for(lambda: daemon.registered, what="registered with the new servers")
        assert kubelet.violations() == []
    finally:
        daemon.stop()


def test_a_kubelet_starting_the_moment_the_sockets_are_bound_gets_every_pool(make_kubelet, plugin_dir, tmp_path):
    """A starting kubelet deletes every plugin socket, then listens. Before: the daemon watched the
    directory only after serving, so a kubelet starting in between deleted the new sockets unseen, each
    Register found its socket gone and stopped, and no pool was served again (1 run in 6 under load)."""
    kubelets = []

    class KubeletStartsAtBind(Daemon):
        def _serve(self) -> None:
            super()._serve()
            if not kubelets:
                kubelets.append(make_kubelet())

    settings = cdi_daemon(plugin_dir, tmp_path).settings
    daemon = KubeletStartsAtBind(settings)
    daemon.start()
    try:
        wait_registered(kubelets[0], SERVED)
        assert sorted(our_sockets(plugin_dir)) == ["cmk-exclusive-cores.sock", "cmk-infra.sock", "cmk-shared.sock"]
    finally:
        daemon.stop()


def test_a_socket_the_starting_kubelet_unlinks_right_after_the_rebind_is_served_again(kubelet, plugin_dir, tmp_path,
                                                                                       monkeypatch):
    """A real kubelet 1.36 restarting unlinked the daemon's sockets one by one while the daemon, seeing the
    first go, was already serving anew: one new socket was unlinked between its bind and the daemon's stat
    of it. Before: that start raised, the daemon served nothing and waited for its liveness probe (63 s on
    the cluster tier). The unlink is done here at that very point, once, as the kubelet's cleanup did."""
    import deviceplugin.daemon.serving as daemon_module
    from deviceplugin.protocol.server import PoolServer

    unlinked: list[str] = []

    class UnlinkedAfterBind(PoolServer):
        def _bound_inode(self) -> int | None:
            if restarting and not unlinked:
                unlinked.append(self.socket_path.name)
                self.socket_path.unlink()
            return super()._bound_inode()

    restarting = False
    monkeypatch.setattr(daemon_module, "PoolServer", UnlinkedAfterBind)
    daemon = cdi_daemon(plugin_dir, tmp_path)
    daemon.start()
    try:
        wait_registered(kubelet, SERVED)
        restarting = True
        kubelet.stop()  # the old kubelet exits; the daemon's streams end and its Register retries fail
        time.sleep(1.0)  # the new kubelet process starts a moment later (0.45 s on the cluster tier)
        kubelet.restart()
        wait_registered(kubelet, SERVED, count=2)
        assert unlinked and sorted(our_sockets(plugin_dir)) == ["cmk-exclusive-cores.sock", "cmk-infra.sock",
                                                                 "cmk-shared.sock"]
        assert kubelet.violations() == []
    finally:
        daemon.stop()


def test_after_a_kubelet_restart_nothing_is_served_until_the_new_kubelet_sock_accepts(make_kubelet, plugin_dir,
                                                                                     tmp_path, caplog):
    """A killed kubelet leaves its kubelet.sock behind with nobody listening; the next one unlinks every socket
    in the directory, in the order it listed them, and only then listens on a new kubelet.sock. Before: at the
    first socket of its own to go, the daemon bound new ones and registered at once, while the sweep went on
    (which could unlink them again) and nothing accepted on kubelet.sock but a dead kubelet's file. Here the
    sweep reaches the daemon's sockets first and the new kubelet listens a second later: meanwhile the daemon
    binds nothing; then it serves once and every pool registers once."""
    old = subprocess.Popen([sys.executable, "-m", "deviceplugin.standin", "--plugin-dir", str(plugin_dir)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    daemon = cdi_daemon(plugin_dir, tmp_path)
    caplog.set_level(logging.INFO, logger="deviceplugin")
    try:
        wait_until((plugin_dir / KUBELET_SOCKET_NAME).exists, "the first kubelet (a process) listening")
        daemon.start()
        wait_until(lambda: daemon.registered, "registered with the first kubelet")
        caplog.clear()
        old.kill()  # SIGKILL: its kubelet.sock stays, refusing connections
        old.wait(timeout=10)
        assert (plugin_dir / KUBELET_SOCKET_NAME).exists()
        for name in our_sockets(plugin_dir):  # the new kubelet's sweep, the daemon's sockets first
            (plugin_dir / name).unlink()
        time.sleep(1.0)
        assert our_sockets(plugin_dir) == [], "the daemon served before any kubelet listened"
        kubelet = make_kubelet()  # its sweep unlinks the dead kubelet's socket; then it listens
        wait_registered(kubelet, SERVED)
        kubelet.wait_for(lambda: daemon.registered, what="the daemon's view: registered with the new kubelet")
        assert sorted(r.resource for r in kubelet.registrations()) == sorted(SERVED)  # once each
        assert [e["reason"] for e in logged(caplog.records, "serving_again")] == \
            ["a plugin socket of ours was removed"]
        assert kubelet.violations() == []
    finally:
        daemon.stop()
        if old.poll() is None:
            old.kill()
            old.wait()


# --- the plugin directory re-made ------------------------------------------------------------------

def test_the_plugin_directory_deleted_and_created_again_is_noticed(make_kubelet, plugin_dir, tmp_path):
    kubelet = make_kubelet()
    daemon = cdi_daemon(plugin_dir, tmp_path)
    daemon.start()
    try:
        wait_registered(kubelet, SERVED)
        kubelet.stop()
        for _ in range(50):  # as `rm -rf` does: the daemon may remove a socket of its own meanwhile
            shutil.rmtree(plugin_dir, ignore_errors=True)
            if not plugin_dir.exists():
                break
        plugin_dir.mkdir()
        time.sleep(0.2)
        kubelet = make_kubelet()
        wait_registered(kubelet, SERVED)
        assert sorted(our_sockets(plugin_dir)) == ["cmk-exclusive-cores.sock", "cmk-infra.sock", "cmk-shared.sock"]
        assert (plugin_dir / "cmk-device-plugin.lock").exists()
    finally:
        daemon.stop()


# --- one daemon per node ---------------------------------------------------------------------------

def test_a_second_daemon_refuses_to_start_naming_the_first_and_touches_nothing(kubelet, plugin_dir, tmp_path):
    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path)
    first = daemon_process(plugin_dir, sysfs, procfs)
    try:
        wait_registered(kubelet, SERVED)
        sockets = {name: (plugin_dir / name).stat().st_ino for name in our_sockets(plugin_dir)}
        wait_for_file(plugin_dir / "features.d" / "cmk.intel.com")
        nfd = (plugin_dir / "features.d" / "cmk.intel.com").read_text()
        second = daemon_process(plugin_dir, sysfs, procfs)
        _, stderr = second.communicate(timeout=60)
        assert second.returncode == 1
        (line,) = stderr.splitlines()
        assert line.startswith(f"cmk device-plugin: error: another cmk device-plugin (pid {first.pid} on ")
        assert "only one daemon may serve a node" in line
        assert {name: (plugin_dir / name).stat().st_ino for name in our_sockets(plugin_dir)} == sockets
        assert (plugin_dir / "features.d" / "cmk.intel.com").read_text() == nfd
        assert (plugin_dir / "cdi" / cdispec.SPEC_FILE_NAME).exists()
        assert [registrations(kubelet, r) for r in sorted(SERVED)] == [1, 1, 1]
    finally:
        first.terminate()
        first.communicate(timeout=10)


def test_the_lock_dies_with_its_holder(kubelet, plugin_dir, tmp_path):
    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path)
    first = daemon_process(plugin_dir, sysfs, procfs)
    wait_registered(kubelet, SERVED)
    first.send_signal(signal.SIGKILL)  # no cleanup at all: the lock file stays, the lock does not
    first.communicate(timeout=10)
    second = daemon_process(plugin_dir, sysfs, procfs)
    try:
        wait_registered(kubelet, SERVED, count=2)
    finally:
        second.terminate()
        _, stderr = second.communicate(timeout=10)
    assert second.returncode == 0, stderr


def test_an_in_process_second_daemon_is_refused_before_it_writes(kubelet, plugin_dir, tmp_path):
    first = cdi_daemon(plugin_dir, tmp_path)
    first.start()
    try:
        second = cdi_daemon(plugin_dir, tmp_path / "other")
        with pytest.raises(CmkError, match=r"another cmk device-plugin \(pid \d+ on "):
            second.start()
        second.stop()
        assert not (tmp_path / "other" / "cdi").exists()
        wait_registered(kubelet, SERVED)
    finally:
        first.stop()


def test_a_daemon_removes_only_the_nfd_file_it_wrote(kubelet, plugin_dir, tmp_path):
    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path)
    process = daemon_process(plugin_dir, sysfs, procfs)
    nfd = plugin_dir / "features.d" / "cmk.intel.com"
    try:
        wait_registered(kubelet, SERVED)
        wait_for_file(nfd)
        (plugin_dir / "features.d" / ".other").write_text("written by someone else\n")
        (plugin_dir / "features.d" / ".other").replace(nfd)
    finally:
        process.terminate()
        _, stderr = process.communicate(timeout=10)
    assert process.returncode == 0, stderr
    assert nfd.read_text() == "written by someone else\n"


# --- the CDI spec outlives the daemon -----------------------------------------------------------

def test_containers_restart_while_the_daemon_is_away(make_kubelet, plugin_dir, tmp_path):
    """Before: the spec went with the daemon, so every restart of a pinned container failed meanwhile."""
    kubelet = make_kubelet(cdi_dirs=[tmp_path / "cdi"])
    daemon = cdi_daemon(plugin_dir, tmp_path)
    daemon.start()
    wait_registered(kubelet, SERVED)
    pod = kubelet.admit(PodSpec("p", containers=(ContainerSpec("c", limits={EXCLUSIVE: 1, SHARED: 1}),)))
    (core,) = pod.container("c").device_ids[EXCLUSIVE]
    kubelet.start_container("p", "c")
    daemon.stop()
    kubelet.wait_for(lambda: all(v == 0 for v in kubelet.allocatable().values()), what="daemon away")
    answer = kubelet.start_container("p", "c")  # replayed from the checkpoint, names resolved by the runtime
    assert sorted(answer.cdi_devices) == [f"cmk.intel.com/cpus={core}", "cmk.intel.com/cpus=shared"]


def test_the_spec_keeps_every_device_so_a_plan_change_keeps_checkpointed_names(make_kubelet, plugin_dir, tmp_path):
    kubelet = make_kubelet(cdi_dirs=[tmp_path / "cdi"])
    daemon = cdi_daemon(plugin_dir, tmp_path)
    daemon.start()
    wait_registered(kubelet, SERVED)
    kubelet.admit(PodSpec("p", containers=(ContainerSpec("c", limits={SHARED: 1}),)))
    daemon.stop()
    replanned = cdi_daemon(plugin_dir, tmp_path, num_shared_cores=0)  # the new plan serves no shared pool
    replanned.start()
    try:
        assert SHARED not in replanned.tree
        spec = json.loads((tmp_path / "cdi" / cdispec.SPEC_FILE_NAME).read_text())
        assert "shared" in {d["name"] for d in spec["devices"]}  # kept from the spec on disk
        kubelet.start_container("p", "c")
    finally:
        replanned.stop()


# --- a bad config never takes the pools away ---------------------------------------------------

@pytest.mark.parametrize("bad", ["num-exclusive-cores: 99\n", "num-exclusive-cores: [\n", "exclusive_cores: 2\n"])
def test_a_bad_config_serves_the_last_good_plan_and_fails_readiness(kubelet, plugin_dir, tmp_path, bad):
    """Before: the new daemon exited on the bad config after the rollout had stopped the old one."""
    from tests.support.daemon import probe

    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path)
    config = tmp_path / "config.yaml"
    config.write_text("num-exclusive-cores: 2\n")
    first = daemon_process(plugin_dir, sysfs, procfs, "--config", str(config))
    try:
        wait_registered(kubelet, SERVED)
        wait_for_file(plugin_dir / "cmk-last-good-plan.json")
    finally:
        first.terminate()
        first.communicate(timeout=10)
    config.write_text(bad)
    second = daemon_process(plugin_dir, sysfs, procfs, "--config", str(config))
    try:
        wait_registered(kubelet, SERVED, count=2)
        assert kubelet.capacity()[EXCLUSIVE] == 2
        assert probe(plugin_dir).returncode == 0  # alive and registered: no restart loop
        ready = probe(plugin_dir, "--require-good-config")
        assert ready.returncode == 1 and "refused its config and serves its last good plan" in ready.stderr
    finally:
        second.terminate()
        _, stderr = second.communicate(timeout=10)
    assert second.returncode == 0
    (refused,) = [line for line in stderr.splitlines() if "serving the last good plan" in line]
    assert "level=error" in refused and str(config) in refused
