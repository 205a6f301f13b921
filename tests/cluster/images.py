"""The node's images, as archives for ``ctr images import``: no registry is reachable here.

The pause image is the static ``pause`` binary ``.ci/build-cluster`` compiled from the Kubernetes
module's ``build/pause/linux/pause.c``; the workload image is the e2e tier's static busybox
(:func:`tests.support.podman.busybox_image`, podman and buildah share their storage); the product's is
what ``.ci/build-image`` builds, as README's users build it. Each leaves buildah's storage as found.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

from tests.cluster.node import (
    BUSYBOX_IMAGE,
    PAUSE_IMAGE,
    ComponentFailed,
    Node,
    running_node,
)
from tests.support.podman import busybox_image

ROOT = Path(__file__).resolve().parents[2]
PRODUCT_IMAGE = f"localhost/cmk-deviceplugin:cluster-{os.getpid()}"


def _buildah(*args: str) -> str:
    result = subprocess.run(["buildah", *args], capture_output=True, text=True, timeout=600, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"buildah {' '.join(args)}: {result.stderr.strip()}")
    return result.stdout.strip()


def _archive(image: str, name: str, target: Path) -> Path:
    """``image`` from buildah's storage as a docker-archive tarball tagged ``name``."""
    target.unlink(missing_ok=True)  # docker-archive refuses to add to an existing tarball
    _buildah("push", "--quiet", image, f"docker-archive:{target}:{name}")
    return target


def pause_archive(pause_binary: Path, target: Path) -> Path:
    work = _buildah("from", "scratch")
    try:
        _buildah("copy", work, str(pause_binary), "/pause")
        _buildah("config", "--entrypoint", '["/pause"]', "--user", "65535:65535", work)
        image = f"{PAUSE_IMAGE}-{os.getpid()}"
        _buildah("commit", "--quiet", work, image)
    finally:
        subprocess.run(["buildah", "rm", work], capture_output=True, check=False)
    try:
        return _archive(image, PAUSE_IMAGE, target)
    finally:
        subprocess.run(["buildah", "rmi", image], capture_output=True, check=False)


def busybox_archive(target: Path) -> Path:
    with busybox_image("cmk-cluster") as image:
        return _archive(image, BUSYBOX_IMAGE, target)


def product_archive(target: Path) -> tuple[str, Path]:
    """``.ci/build-image`` into a tag of this session's own, exported, then dropped from buildah's storage.

    ``CMK_CLUSTER_IMAGE`` names an image already built from this tree instead (kept), for a quick rerun.
    """
    if os.environ.get("CMK_CLUSTER_IMAGE"):
        image = os.environ["CMK_CLUSTER_IMAGE"]
        return image, _archive(image, image, target)
    result = subprocess.run([str(ROOT / ".ci/build-image")], cwd=ROOT, env={**os.environ, "CMK_IMAGE": PRODUCT_IMAGE},
                            capture_output=True, text=True, timeout=1200, check=False)
    if result.returncode != 0:
        raise RuntimeError(f".ci/build-image failed:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}")
    try:
        return PRODUCT_IMAGE, _archive(PRODUCT_IMAGE, PRODUCT_IMAGE, target)
    finally:
        subprocess.run(["buildah", "rmi", PRODUCT_IMAGE], capture_output=True, check=False)


def cluster_bin() -> Path:
    """Where the node's binaries are: ``.ci/test`` exports it; run alone, the build script says (and builds)."""
    if os.environ.get("CMK_CLUSTER_BIN"):
        return Path(os.environ["CMK_CLUSTER_BIN"])
    result = subprocess.run([str(ROOT / ".ci/build-cluster")], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ComponentFailed(f".ci/build-cluster failed:\n{result.stderr[-3000:]}")
    return Path(result.stdout.strip().splitlines()[-1])


@contextlib.contextmanager
def node_with_images(work: Path, *, nri: bool = False, extra_cdi_dirs: Sequence[Path] = ()) -> Iterator[Node]:
    """The node up with the pause, busybox and product images imported (``work``: the archives' and logs' room);
    ``nri`` and ``extra_cdi_dirs`` as :class:`~tests.cluster.node.Node` takes them."""
    binaries = cluster_bin()
    product, archive = product_archive(work / "product.tar")
    archives = [pause_archive(binaries / "pause", work / "pause.tar"), busybox_archive(work / "busybox.tar"), archive]
    with running_node(binaries, work / "logs", archives, product_image=product, nri=nri,
                      extra_cdi_dirs=extra_cdi_dirs) as up:
        for path in archives:
            path.unlink()
        yield up
