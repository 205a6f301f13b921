"""`cmk probe` against real gRPC device-plugin servers on real unix sockets.

Each test serves some pools with a tiny DevicePlugin server (GetDevicePluginOptions only: the call
the probe and the kubelet's registration make) at the daemon's socket names, runs the probe as a
process, and checks its verdict; one runs the real daemon and takes a CPU offline under it.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from api.health.v1 import health_pb2, health_pb2_grpc
from api.v1beta1 import deviceplugin_pb2, deviceplugin_pb2_grpc
from deviceplugin.daemon import socket_name
from deviceplugin.model.plan import RESOURCE_NAMES, Pool
from tests.support.commands import cmk
from tests.support.daemon import probe

SERVED = ("exclusive", "shared", "infra")


class Options(deviceplugin_pb2_grpc.DevicePluginServicer):
    def __init__(self, release: threading.Event | None = None) -> None:
        self.release = release

    def GetDevicePluginOptions(self, request, context):
        if self.release is not None:
            self.release.wait()
        return deviceplugin_pb2.DevicePluginOptions(get_preferred_allocation_available=True)


class Health(health_pb2_grpc.HealthServicer):
    """What the daemon's servers answer: SERVING only while the kubelet streams from the pool."""

    def __init__(self, streaming: bool) -> None:
        self.streaming = streaming

    def Check(self, request, context):
        status = health_pb2.HealthCheckResponse.SERVING if self.streaming else health_pb2.HealthCheckResponse.NOT_SERVING
        return health_pb2.HealthCheckResponse(status=status)


@pytest.fixture
def serve(plugin_dir: Path) -> Iterator[Callable[..., None]]:
    servers: list[grpc.Server] = []
    release = threading.Event()

    def start(pool: str, *, hang: bool = False, streaming: bool = True) -> None:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        deviceplugin_pb2_grpc.add_DevicePluginServicer_to_server(Options(release if hang else None), server)
        health_pb2_grpc.add_HealthServicer_to_server(Health(streaming), server)
        server.add_insecure_port(f"unix://{plugin_dir / socket_name(RESOURCE_NAMES[Pool(pool)])}")
        server.start()
        servers.append(server)

    yield start
    release.set()
    for server in servers:
        server.stop(grace=None)


def test_ready_when_every_served_pool_answers(plugin_dir, serve):
    for pool in SERVED:
        serve(pool)
    result = probe(plugin_dir)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == (
        f"ready: cmk-exclusive-cores.sock, cmk-shared.sock, cmk-infra.sock answer in {plugin_dir}, "
        "each streaming to the kubelet")


def test_a_pool_whose_stream_the_kubelet_ended_fails(plugin_dir, serve):
    serve("exclusive")
    serve("shared", streaming=False)
    result = probe(plugin_dir)
    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()
    assert "cmk-shared.sock answers but the kubelet holds no ListAndWatch stream to it (not registered)" in line
    assert "cmk-exclusive-cores.sock" not in line


def test_a_real_daemon_is_ready_only_once_the_kubelet_streams_from_every_pool(plugin_dir, tmp_path):
    """Before: sockets that answered made the probe pass while no kubelet had registered anything."""
    from deviceplugin.daemon import Daemon, DaemonSettings
    from deviceplugin.standin import Kubelet
    from tests.support.topologies import fixture_copy

    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path)
    daemon = Daemon(DaemonSettings(kubelet_dir=plugin_dir, sysfs_root=sysfs, procfs_root=procfs))
    daemon.start()
    try:
        result = probe(plugin_dir)
        assert result.returncode == 1 and "not registered" in result.stderr
        with Kubelet(plugin_dir) as kubelet:
            kubelet.wait_for(lambda: daemon.registered, what="registered")
            result = probe(plugin_dir)
            assert result.returncode == 0, result.stderr
    finally:
        daemon.stop()


def test_no_daemon_socket_at_all_fails(plugin_dir):
    (plugin_dir / "kubelet.sock").touch()  # the kubelet's socket is not ours
    result = probe(plugin_dir, "--plugins-dir", str(plugin_dir / "plugins"))
    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()
    assert (f"no cmk device-plugin socket in {plugin_dir} and no DRA driver socket in {plugin_dir / 'plugins'}: "
            "the daemon is not serving") in line


def test_a_stale_socket_file_nobody_listens_on_fails(plugin_dir, serve):
    serve("exclusive")
    serve("infra")
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(plugin_dir / socket_name(RESOURCE_NAMES[Pool.SHARED])))
    stale.close()  # the file stays, as after a daemon crash
    result = probe(plugin_dir)
    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()
    assert "cmk-shared.sock does not answer GetDevicePluginOptions (UNAVAILABLE" in line
    assert "cmk-exclusive-cores.sock" not in line and "cmk-infra.sock" not in line


def test_a_server_that_hangs_fails_at_the_deadline(plugin_dir, serve):
    serve("exclusive")
    serve("shared", hang=True)
    serve("infra")
    result = probe(plugin_dir, "--timeout", "0.5")
    assert result.returncode == 1
    assert "cmk-shared.sock" in result.stderr and "DEADLINE_EXCEEDED" in result.stderr


def test_the_probe_does_not_replan_so_an_offline_core_cannot_fail_it(plugin_dir, tmp_path):
    """The reviewer's crash loop: a re-planning probe failed once an isolated core went offline.

    The real daemon serves xeon_d's pools; then both threads of the shared core go offline, so a plan
    made now could not find the 4 isolated cores the daemon's flags ask for. The probe still passes,
    and the daemon reports the core Unhealthy instead.
    """
    from deviceplugin.daemon import Daemon, DaemonSettings
    from deviceplugin.host.sysfs import discover
    from deviceplugin.model.plan import PlanError, PlanOptions, plan_pools
    from deviceplugin.standin import Kubelet
    from tests.support.topologies import fixture_copy, set_online

    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path)
    options = PlanOptions(num_exclusive_cores=3, num_shared_cores=1)
    daemon = Daemon(DaemonSettings(kubelet_dir=plugin_dir, sysfs_root=sysfs, procfs_root=procfs, plan=options))
    kubelet = Kubelet(plugin_dir)
    kubelet.start()
    daemon.start()
    try:
        kubelet.wait_for(lambda: daemon.registered, what="registered")
        for cpu in (3, 11):
            set_online(sysfs, cpu, False)
        with pytest.raises(PlanError):
            plan_pools(discover(sysfs, procfs), options)
        result = probe(plugin_dir)
        assert result.returncode == 0, result.stderr
        assert "cmk-exclusive-cores.sock, cmk-shared.sock, cmk-infra.sock" in result.stdout
        deadline = time.monotonic() + 10
        while not _shared_core_unhealthy(daemon) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _shared_core_unhealthy(daemon), "the daemon reports the offline core Unhealthy instead"
    finally:
        daemon.stop()
        kubelet.stop()


def _shared_core_unhealthy(daemon) -> bool:
    shared = daemon.tree[RESOURCE_NAMES[Pool.SHARED]]
    return shared.healthy == 0 and len(shared.devices) > 0


@pytest.mark.parametrize(("args", "message"), [
    (["--timeout", "0"], "must be more than 0"),
    (["--timeout", "soon"], "expected seconds"),
    (["--num-exclusive-cores", "3"], "unrecognized arguments: --num-exclusive-cores 3"),
])
def test_bad_input_is_one_line(plugin_dir, args, message):
    result = probe(plugin_dir, *args)
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert message in line


def test_the_help_says_the_probe_dials_the_served_sockets_not_a_plan():
    """It never plans (see the test above), so its help must not promise "every planned pool"."""
    for argv in (["--help"], ["probe", "--help"]):
        shown = cmk(*argv).stdout
        assert "the daemon's device-plugin sockets answer (every one it serves" in " ".join(shown.split())
        assert "planned" not in shown
