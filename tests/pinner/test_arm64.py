"""The arm64 static pinner: cross-built with Debian's toolchain, it passes the pinner tables under qemu-aarch64.

Every container on an arm64 node gets this build at ``/opt/bin/cmk``. The
tables (isolate, the hook's fixtures, ``--socket-id`` on every dump) run
unchanged in a pytest of their own whose ``native_cmk`` is a wrapper that
execs the arm64 binary under ``qemu-aarch64-static`` (user-mode: its
syscalls are this kernel's, and the command it execs runs natively). A
machine without the cross toolchain or qemu fails here, naming the packages.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from pinner.build import CROSS_PACKAGES, BuildError, build_cross
from tests.pinner.conftest import ENV_OTHER_PINNER, ROOT
from tests.support.native import PT_INTERP, program_header_types

QEMU = "qemu-aarch64-static"
EM_AARCH64 = 183
TABLES = ["tests/pinner/test_isolate_table.py", "tests/pinner/test_hook_fixtures.py",
          "tests/pinner/test_isolate_sockets.py"]


@pytest.fixture(scope="module")
def arm64_cmk(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which(QEMU) is None:
        pytest.fail(f"{QEMU} is not installed (apt-get install qemu-user-static {CROSS_PACKAGES['arm64']})")
    output = tmp_path_factory.mktemp("arm64") / "cmk"
    try:
        build_cross("arm64", output)
    except BuildError as err:
        pytest.fail(str(err))
    return output


def test_the_arm64_pinner_is_a_static_aarch64_executable(arm64_cmk: Path) -> None:
    data = arm64_cmk.read_bytes()
    assert struct.unpack_from("<H", data, 18)[0] == EM_AARCH64
    assert PT_INTERP not in program_header_types(arm64_cmk)


def test_the_arm64_pinner_passes_the_pinner_tables_under_qemu(arm64_cmk: Path, tmp_path: Path) -> None:
    wrapper = tmp_path / "cmk"
    wrapper.write_text(f'#!/bin/sh\nexec {shutil.which(QEMU)} {arm64_cmk} "$@"\n')
    wrapper.chmod(0o755)
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TABLES],
                            env={**os.environ, ENV_OTHER_PINNER: str(wrapper)}, cwd=ROOT, capture_output=True,
                            text=True, timeout=1800, check=False)
    summary = result.stdout.strip().splitlines()[-1]
    assert result.returncode == 0 and "skipped" not in summary, result.stdout[-4000:]
    print(f"arm64 under qemu: {summary}")
