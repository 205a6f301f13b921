"""``cmk`` run as a user without root's rights: each refusal is one line naming what was denied and saying to run as root."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from deviceplugin.host.nodelock import LOCK_FILE_NAME
from tests.hostile.conftest import Outcome
from tests.hostile.inputs import NOBODY

AS_ROOT = "Permission denied (run as root, or with the capability it needs)\n"


@pytest.fixture
def roots_dir(shared_tmp: Path) -> Path:
    """A directory as /opt or the kubelet's are: root's, mode 0755, so nobody may look but not write."""
    path = shared_tmp / "root-owned"
    path.mkdir(mode=0o755)
    return path


def test_install_into_a_directory_of_roots_says_to_run_as_root(cmk: Callable[..., Outcome], roots_dir: Path) -> None:
    for install_dir, denied in ((roots_dir, f"cannot install {roots_dir / 'cmk'}: "),
                                (roots_dir / "bin", f"cannot create the install directory {roots_dir / 'bin'}: ")):
        outcome = cmk("install", "--install-dir", str(install_dir), uid=NOBODY)
        assert (outcome.status, outcome.stderr) == (1, f"cmk install: error: {denied}{AS_ROOT}"), outcome


def test_the_daemon_on_a_kubelet_dir_of_roots_says_to_run_as_root(cmk: Callable[..., Outcome], roots_dir: Path) -> None:
    outcome = cmk("device-plugin", "--kubelet-dir", str(roots_dir), uid=NOBODY)
    lock = f"cannot open the lock file {roots_dir / LOCK_FILE_NAME}"
    assert (outcome.status, outcome.stderr) == (
        1, f"cmk device-plugin: error: {lock} (--kubelet-dir must be a writable directory): {AS_ROOT}"), outcome
    missing = roots_dir / "device-plugins"
    outcome = cmk("device-plugin", "--kubelet-dir", str(missing), uid=NOBODY)
    assert (outcome.status, outcome.stderr) == (
        1, f"cmk device-plugin: error: cannot use --kubelet-dir {missing}: {AS_ROOT}"), outcome
