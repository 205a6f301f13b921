"""What every e2e test shares: the busybox-only image (built once), the host's install dir, container names."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.native import ensure_native_pinner
from tests.support.nodewide import node  # noqa: F401  (a fixture the node-wide tests share)
from tests.support.podman import PodmanMissing, busybox_image, podman

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def image() -> Iterator[str]:
    try:
        with busybox_image() as name:
            yield name
    except PodmanMissing as err:
        pytest.fail(str(err))


@pytest.fixture(scope="session")
def install_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The host's install directory, filled by the real ``cmk install``."""
    ensure_native_pinner()
    target = tmp_path_factory.mktemp("opt-bin")
    result = subprocess.run(
        [sys.executable, "-m", "deviceplugin", "install", "--install-dir", str(target)],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0, result.stderr
    return target


@pytest.fixture
def container_name() -> Iterator[str]:
    name = f"cmk-e2e-{uuid.uuid4().hex[:10]}"
    try:
        yield name
    finally:
        podman("rm", "-f", "-t", "0", name, check=False)
