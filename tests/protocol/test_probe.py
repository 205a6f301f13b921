"""`cmk probe` against real gRPC device-plugin servers on real unix sockets.

Each test serves some of the plan's pools with a tiny DevicePlugin server (GetDevicePluginOptions
only: the call the probe and the kubelet's registration make), runs the probe as a process, and
checks its verdict.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from api.v1beta1 import deviceplugin_pb2, deviceplugin_pb2_grpc
from deviceplugin.daemon import socket_name
from deviceplugin.plan import RESOURCE_NAMES, Pool
from tests.topologies import FIXTURES

# cmk-xeon_d boots with isolcpus=0-3,8-11: exclusive {0,8} {1,9} {2,10}, shared {3,11}, infra 4-7,12-15
ROOTS = ["--sysfs-root", str(FIXTURES / "cmk-xeon_d/sys"), "--procfs-root", str(FIXTURES / "cmk-xeon_d/proc")]
SIZES = ["--num-exclusive-cores", "3", "--num-shared-cores", "1"]
SERVED = ("exclusive", "shared", "infra")


class Options(deviceplugin_pb2_grpc.DevicePluginServicer):
    def __init__(self, release: threading.Event | None = None) -> None:
        self.release = release

    def GetDevicePluginOptions(self, request, context):
        if self.release is not None:
            self.release.wait()
        return deviceplugin_pb2.DevicePluginOptions(get_preferred_allocation_available=True)


@pytest.fixture
def plugin_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="cmk-probe-", dir="/tmp"))  # short: unix socket paths are limited
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def serve(plugin_dir: Path) -> Iterator[Callable[..., None]]:
    servers: list[grpc.Server] = []
    release = threading.Event()

    def start(pool: str, *, hang: bool = False) -> None:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        deviceplugin_pb2_grpc.add_DevicePluginServicer_to_server(Options(release if hang else None), server)
        server.add_insecure_port(f"unix://{plugin_dir / socket_name(RESOURCE_NAMES[Pool(pool)])}")
        server.start()
        servers.append(server)

    yield start
    release.set()
    for server in servers:
        server.stop(grace=None)


def probe(plugin_dir: Path, *extra: str, sizes: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "deviceplugin", "probe", "--kubelet-dir", str(plugin_dir),
                           *ROOTS, *(SIZES if sizes else []), *extra],
                          capture_output=True, text=True, timeout=60, check=False)


def test_ready_when_every_planned_pool_answers(plugin_dir, serve):
    for pool in SERVED:
        serve(pool)
    result = probe(plugin_dir)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"ready: exclusive, shared, infra answer in {plugin_dir}"


def test_a_missing_pool_socket_fails_naming_the_pool(plugin_dir, serve):
    serve("exclusive")
    serve("infra")
    result = probe(plugin_dir)
    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()
    assert f"pool shared: no socket at {plugin_dir}/cmk-shared.sock" in line
    assert "exclusive" not in line.split("pool shared")[0]


def test_a_pool_the_plan_does_not_advertise_is_not_required(plugin_dir, serve):
    serve("exclusive")
    serve("infra")
    result = probe(plugin_dir, "--num-exclusive-cores", "4", "--num-shared-cores", "0")
    assert result.returncode == 0, result.stderr
    assert "exclusive, infra" in result.stdout


def test_a_stale_socket_file_nobody_listens_on_fails(plugin_dir, serve):
    serve("exclusive")
    serve("infra")
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(plugin_dir / socket_name(RESOURCE_NAMES[Pool.SHARED])))
    stale.close()  # the file stays, as after a daemon crash
    result = probe(plugin_dir)
    assert result.returncode == 1
    assert "pool shared:" in result.stderr and "does not answer GetDevicePluginOptions (UNAVAILABLE" in result.stderr


def test_a_server_that_hangs_fails_at_the_deadline(plugin_dir, serve):
    serve("exclusive")
    serve("shared", hang=True)
    serve("infra")
    result = probe(plugin_dir, "--timeout", "0.5")
    assert result.returncode == 1
    assert "pool shared:" in result.stderr and "DEADLINE_EXCEEDED" in result.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["--timeout", "0"], "must be more than 0"),
    (["--timeout", "soon"], "expected seconds"),
])
def test_bad_input_is_one_line(plugin_dir, args, message):
    result = probe(plugin_dir, *args)
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert message in line



def test_reads_the_pool_sizes_from_the_daemons_config_file(plugin_dir, serve, tmp_path):
    serve("exclusive")
    serve("infra")
    config = tmp_path / "config.yaml"
    config.write_text("num-exclusive-cores: 4\nnum-shared-cores: 0\n")
    result = probe(plugin_dir, "--config", str(config), sizes=False)
    assert result.returncode == 0, result.stderr
    assert "exclusive, infra" in result.stdout
    config.write_text("num-exclusive-cores: 3\nnum-shared-cores: 1\n")
    result = probe(plugin_dir, "--config", str(config), sizes=False)
    assert result.returncode == 1 and "pool shared:" in result.stderr
