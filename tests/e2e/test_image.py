"""The image, built the way CI builds it (.ci/build-image: debootstrap base, buildah bud), and what it holds.

The script itself runs `cmk --version`, `cmk describe` and `cmk install` inside the image and fails on
any error; these tests check its report and then open the image to check what it must and must not hold.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.native import PT_INTERP, program_header_types

ROOT = Path(__file__).resolve().parents[2]
IMAGE = f"localhost/cmk-deviceplugin:test-{os.getpid()}"

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def build() -> Iterator[subprocess.CompletedProcess[str]]:
    result = subprocess.run([str(ROOT / ".ci/build-image")], cwd=ROOT, env={**os.environ, "CMK_IMAGE": IMAGE},
                            capture_output=True, text=True, timeout=900, check=False)
    yield result
    subprocess.run(["buildah", "rmi", IMAGE], capture_output=True, check=False)


@pytest.fixture(scope="module")
def rootfs(build: subprocess.CompletedProcess[str]) -> Iterator[Path]:
    assert build.returncode == 0, build.stdout + build.stderr
    ctr = subprocess.run(["buildah", "from", IMAGE], capture_output=True, text=True, check=True).stdout.strip()
    mnt = subprocess.run(["buildah", "mount", ctr], capture_output=True, text=True, check=True).stdout.strip()
    yield Path(mnt)
    subprocess.run(["buildah", "umount", ctr], capture_output=True, check=False)
    subprocess.run(["buildah", "rm", ctr], capture_output=True, check=False)


def has_interpreter(path: Path) -> bool:
    """True if the ELF file asks for a dynamic loader (a PT_INTERP program header)."""
    return PT_INTERP in program_header_types(path)


def test_build_runs_the_checks_inside_the_image(build):
    assert build.returncode == 0, build.stdout + build.stderr
    out = build.stdout
    assert "cmk 0.1.0" in out
    assert "Pool plan" in out and "cmk.intel.com/infra" in out  # cmk describe on this machine
    assert "installed /tmp/cmk-install-check/cmk" in out
    assert re.search(r"== image \S+: size [\d.]+ [kMG]B; .* total \d+ s", out), out


def test_image_runs_as_non_root_by_default(build):
    assert build.returncode == 0, build.stdout + build.stderr
    user = build.stdout.split("-- user\n", 1)[1].splitlines()[0]
    assert user == "65532"


def test_packaged_pinner_is_static(rootfs):
    (pinner,) = rootfs.glob("opt/cmk/lib/python3*/site-packages/pinner/bin/cmk")
    assert os.access(pinner, os.X_OK)
    assert not has_interpreter(pinner)
    # the check can fail: the image's own interpreter is dynamically linked
    (python,) = [p for p in rootfs.glob("usr/bin/python3.*")
                 if re.fullmatch(r"python3\.\d+", p.name) and not p.is_symlink()]
    assert has_interpreter(python)


def test_image_holds_no_toolchain_and_no_pip(rootfs):
    for tool in ("usr/bin/gcc", "usr/bin/musl-gcc", "usr/bin/cc", "opt/cmk/bin/pip"):
        assert not (rootfs / tool).exists(), tool
    assert (rootfs / "opt/cmk/bin/cmk").exists()


def test_the_image_is_labelled_with_the_release(build):
    """The tag a registry shows and the labels `docker inspect` shows name deviceplugin.__version__."""
    from deviceplugin import __version__

    assert build.returncode == 0, build.stdout + build.stderr
    inspected = json.loads(subprocess.run(["buildah", "inspect", "--type", "image", IMAGE],
                                          capture_output=True, text=True, check=True).stdout)
    labels = inspected["OCIv1"]["config"]["Labels"]
    assert labels["org.opencontainers.image.version"] == __version__
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert re.fullmatch(r"[0-9a-f]{40}|unknown", labels["org.opencontainers.image.revision"])
    assert f"org.opencontainers.image.version={__version__}" in build.stdout
