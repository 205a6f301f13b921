"""Fixtures for protocol tests: a kubelet stand-in serving real unix sockets in a short temporary directory."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from deviceplugin.standin import Kubelet, KubeletOptions
from tests.support.apiserver import api_server  # noqa: F401  (the API server stand-in)
from tests.support.daemon import start_daemon  # noqa: F401  (fixtures the protocol tests share)
from tests.support.plugins import plugins, registered  # noqa: F401
from tests.support.started import StopAfter


@pytest.fixture
def plugin_dir() -> Iterator[Path]:
    """A fresh device plugin directory with a short path (unix socket paths are limited to 107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="cmk-kl-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def make_kubelet(plugin_dir: Path) -> Iterator[Callable[..., Kubelet]]:
    """Start a stand-in with custom settings: ``make_kubelet(grace_period=0.2)``; stopped after the test."""
    with StopAfter() as kept:
        def make(**settings: object) -> Kubelet:
            settings = {"seed": 0, "pod_resources_socket": plugin_dir / "pod-resources.sock", **settings}
            return kept.start(Kubelet(plugin_dir, KubeletOptions(**settings)))  # type: ignore[arg-type]

        yield make


@pytest.fixture
def kubelet(make_kubelet: Callable[..., Kubelet]) -> Kubelet:
    """A started stand-in serving ``<plugin_dir>/kubelet.sock`` and pod resources on ``pod-resources.sock``."""
    return make_kubelet()


@pytest.fixture
def wait_for(kubelet: Kubelet) -> Callable[..., None]:
    """``wait_for(lambda: kubelet.allocatable().get(R) == 2)``: block until the stand-in's state satisfies it."""
    return kubelet.wait_for
