"""The systemd tier's VMs: one boot per kernel for the whole session, both side by side.

``.ci/build-systemd-node`` runs first (nothing to do when its cache is
complete), then each kernel boots systemd as PID 1 on cgroup v2 and its guest
program takes every runtime's pods through every step; the tests then assert
on its result one check at a time. A build that fails, or a VM that cannot
boot, fails every test of its kernel with what went wrong.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.support.native import ensure_native_pinner
from tests.systemd import steps, vm

_BOOTED: list[vm.Boot] = []
_SESSION: dict[str, float] = {}


class Boots:
    """The build, then one future per kernel."""

    def __init__(self, share: Path, labels: list[str]) -> None:
        self._share = share
        self._pool = ThreadPoolExecutor(max_workers=len(labels) + 1, thread_name_prefix="cmk-systemd-vm")
        self._ready: Future[tuple[vm.Built, dict[str, Any]]] = self._pool.submit(self._prepare)
        self._futures = {label: self._pool.submit(self._boot, label) for label in labels}

    def _prepare(self) -> tuple[vm.Built, dict[str, Any]]:
        ensure_native_pinner()  # the hook the guest runs: `cmk install` copies this build into the share
        built = vm.build()
        pinner = os.environ.get(vm.PINNER_ENV)
        return built, vm.prepare_share(self._share, Path(pinner) if pinner else None)

    def _boot(self, label: str) -> vm.Boot:
        built, prepared = self._ready.result()
        done = vm.boot(built, label, self._share, prepared)
        _BOOTED.append(done)
        return done

    def get(self, label: str) -> vm.Boot:
        return self._futures[label].result()

    def close(self) -> None:
        self._pool.shutdown(wait=True)


@pytest.fixture(scope="session")
def systemd_boots(request: pytest.FixtureRequest) -> Iterator[Boots]:
    needed = sorted({item.callspec.params["kernel"] for item in request.session.items
                     if "systemd_boots" in getattr(item, "fixturenames", ()) and hasattr(item, "callspec")
                     and "kernel" in item.callspec.params})
    share = Path(tempfile.mkdtemp(prefix="cmk-systemd-", dir="/tmp"))
    started = time.monotonic()
    boots = Boots(share, needed or list(steps.KERNELS))
    yield boots
    boots.close()
    _SESSION["tier_seconds"] = time.monotonic() - started
    if os.environ.get("CMK_SYSTEMD_KEEP"):
        print(f"\nsystemd tier: results and consoles kept in {share}")
    else:
        shutil.rmtree(share, ignore_errors=True)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Each kernel's times, and what the pinned and ordinary containers reached after each step."""
    if not _BOOTED:
        return
    write = terminalreporter.write_line
    terminalreporter.section("systemd tier: systemd as PID 1 on cgroup v2")
    for done in sorted(_BOOTED, key=lambda b: b.label):
        result, facts = done.result, done.result.get("facts", {})
        write(f"{done.label}: kernel {done.release}, {done.wall_seconds:.0f} s wall from vng to power-off "
              f"(guest program started {facts.get('uptime_at_start', 0):.0f} s after boot, ran "
              f"{result.get('guest_seconds', 0):.0f} s); {' '.join(facts.get('systemd', []))}, "
              f"{' '.join(facts.get('runc', []))}, {' '.join(facts.get('crun', []))}")
        for runtime, recorded in result.get("runtimes", {}).items():
            for step, entry in recorded.items():
                for kind, seen in entry.get("containers", {}).items():
                    if "error" in seen:
                        write(f"  {runtime} {step:18} {kind:8} ERROR {seen['error'].strip().splitlines()[-1]}")
                        continue
                    write(f"  {runtime} {step:18} {kind:8} affinity={seen.get('affinity')} "
                          f"scope={seen.get('scope_cpus')!r}/{seen.get('scope_effective')} "
                          f"slice={seen.get('slice_cpus')!r}/{seen.get('slice_effective')} "
                          f"sandbox={seen.get('sandbox_effective')} exec={seen.get('exec')} "
                          f"cpu.max={seen.get('cpu_max')!r}")
    if "tier_seconds" in _SESSION:
        write(f"the tier: {_SESSION['tier_seconds']:.0f} s wall, from the build check to the last power-off")
