"""The VM tiers (``tests/node``, ``tests/systemd``) boot in the background from the start of the run, in turn.

Under TCG each tier's VMs keep both CPUs busy for minutes. Booted when pytest reached their tests,
they ran after every other tier while the machine was half idle: pytest runs one test at a time,
and the cluster tier mostly waits on its node. So each tier starts its boots here the moment
pytest knows which tests run (its conftest's ``pytest_collection_finish``); the tiers boot one
after the other, so no more than one tier's VMs share the CPUs with the tests that run meanwhile,
and ``tests/conftest.py`` runs their tests last, when what the guests wrote is in or nearly. A run
that ends before a tier's tests (``-x``, a Ctrl-C) stops every VM rather than wait for it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Generic, TypeVar

import pytest

#: The tiers whose tests only read what their VMs wrote: run after every other test.
LAST = ("node", "systemd")

B = TypeVar("B")
_TURNS = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cmk-vm-tier")
_LOCK = threading.Lock()
_RUNNING: set[subprocess.Popen[bytes]] = set()
_STOPPED = threading.Event()


class Tier(Generic[B]):
    """One tier's boots (``boot(share)``, to their end) in its turn, and the share they write into."""

    def __init__(self, prefix: str, boot: Callable[[Path], B]) -> None:
        self.share = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
        #: the tier's own time: from its turn's start to its last VM's end
        self.seconds = 0.0
        self._boots = _TURNS.submit(self._turn, boot)
        self.ended = False
        _TIERS.append(self)

    def _turn(self, boot: Callable[[Path], B]) -> B:
        began = time.monotonic()
        try:
            return boot(self.share)
        finally:
            self.seconds = time.monotonic() - began

    def booted(self) -> B:
        """The boots once every VM of the tier has ended."""
        return self._boots.result()

    def end(self, keep: bool = False) -> None:
        """The VMs waited for, the share removed (unless ``keep``)."""
        self.ended = True
        self._boots.exception()
        if not keep:
            shutil.rmtree(self.share, ignore_errors=True)

    def finish(self) -> list[str]:
        """The tier's end, once (a tier with more to tear down says more); what could not be removed."""
        if not self.ended:
            self.end()
        return []


_TIERS: list[Tier[Any]] = []


def session_ended() -> None:
    """At the session's end (``pytest_sessionfinish``): a tier whose tests did not finish (``-x``, a Ctrl-C) has
    every VM stopped rather than waited for, then its end."""
    unended = [tier for tier in _TIERS if not tier.ended]
    if unended:
        stop()
    for tier in unended:
        tier.finish()


def using(items: Iterable[pytest.Item], fixture: str) -> list[pytest.Item]:
    """The tests that use ``fixture``."""
    return [item for item in items if fixture in getattr(item, "fixturenames", ())]


def params_of(items: Iterable[pytest.Item], fixture: str, name: str) -> set[str]:
    """Every value of the parameter ``name`` among the tests that use ``fixture``."""
    return {item.callspec.params[name] for item in using(items, fixture)
            if hasattr(item, "callspec") and name in item.callspec.params}


@contextmanager
def started(command: list[str], **popen: object) -> Iterator[subprocess.Popen[bytes] | None]:
    """``command`` (a VM, in a process group of its own) for the ``with`` body, its whole group killed after;
    None once the session has stopped the VMs (:func:`stop`)."""
    with _LOCK:
        if _STOPPED.is_set():
            process = None
        else:
            process = subprocess.Popen(command, start_new_session=True, **popen)  # type: ignore[call-overload]
            _RUNNING.add(process)
    try:
        yield process
    finally:
        if process is not None:
            with _LOCK:
                _RUNNING.discard(process)
            _kill(process)


def stop() -> None:
    """Every VM killed now, and none started after: the session ended before its tiers' tests."""
    with _LOCK:
        _STOPPED.set()
        running = list(_RUNNING)
    for process in running:
        _kill(process)


def _kill(process: subprocess.Popen[bytes]) -> None:
    if process.returncode is None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()
