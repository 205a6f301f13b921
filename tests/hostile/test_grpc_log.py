"""gRPC's C core never adds its own line to a one-line error (a real ``cmk`` process, its env untouched)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.topologies import FIXTURES


def test_a_socket_path_past_sun_path_is_one_line_without_the_grpc_core_log(tmp_path: Path) -> None:
    kubelet_dir = tmp_path / ("d" * 110)
    env = {key: value for key, value in os.environ.items() if key != "GRPC_VERBOSITY"}
    result = subprocess.run([sys.executable, "-m", "deviceplugin", "device-plugin", "--sysfs-root",
                             str(FIXTURES / "cmk-xeon_d/sys"), "--kubelet-dir", str(kubelet_dir), "--no-nfd",
                             "--no-cdi"], capture_output=True, text=True, timeout=30, env=env, check=False)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1, result.stderr
    assert "unix sockets allow 107: use a shorter --kubelet-dir" in result.stderr
    assert "add_port" not in result.stderr


def test_the_cli_silences_the_grpc_core_before_grpc_loads() -> None:
    code = ("import os, sys; os.environ.pop('GRPC_VERBOSITY', None); from deviceplugin.cli import main; "
            "main(['probe', '--kubelet-dir', '/nonexistent']); print(os.environ['GRPC_VERBOSITY'])")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=False)
    assert result.stdout.strip() == "NONE", result
