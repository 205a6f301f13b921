"""The systemd tier's VMs: one boot per kernel for the whole session, both side by side.

``.ci/build-systemd-node`` runs first (nothing to do when its cache is
complete), then each kernel boots systemd as PID 1 on cgroup v2 and its guest
program takes every runtime's pods through every step; the tests then assert
on its result one check at a time. A build that fails, or a VM that cannot
boot, fails every test of its kernel with what went wrong.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.cluster import images
from tests.cluster.node import ControlPlane, SignalTeardown
from tests.support import vmtiers
from tests.support.native import ensure_native_pinner
from tests.systemd import kubelet, steps, vm

_BOOTED: list[vm.Boot] = []
#: The kubelet node's tests: when any is selected, each boot runs the kubelet node too.
KUBELET_TESTS = "test_kubelet_node.py"
#: The kubelet node runs 20 to 25 minutes per VM under TCG on a 2-CPU machine, more than the whole CI budget
#: allows beside the rest: it is collected only when this is set (docs/dev/tests.md).
KUBELET_ENV = "CMK_SYSTEMD_KUBELET"
collect_ignore = [] if os.environ.get(KUBELET_ENV) else [KUBELET_TESTS]
_SESSION: dict[str, float] = {}


class Boots:
    """The build, then one future per kernel; with ``kubelet``, each boot runs the kubelet node after the steps,
    against a control plane of its own on this machine (:mod:`tests.systemd.kubelet`)."""

    def __init__(self, share: Path, labels: list[str], kubelet: bool) -> None:
        self._share, self._kubelet = share, kubelet
        self.planes: dict[str, ControlPlane] = {}
        self._pool = ThreadPoolExecutor(max_workers=len(labels) + 1, thread_name_prefix="cmk-systemd-vm")
        self._ready: Future[tuple[vm.Built, dict[str, Any], kubelet.Archives | None]] = self._pool.submit(self._prepare)
        self._futures = {label: self._pool.submit(self._boot, label) for label in labels}

    def _prepare(self) -> tuple[vm.Built, dict[str, Any], kubelet.Archives | None]:
        ensure_native_pinner()  # the hook the guest runs: `cmk install` copies this build into the share
        built = vm.build()
        pinner = os.environ.get(vm.PINNER_ENV)
        prepared = vm.prepare_share(self._share, Path(pinner) if pinner else None)
        return built, prepared, kubelet.image_archives(self._share) if self._kubelet else None

    def _boot(self, label: str) -> vm.Boot:
        built, prepared, archives = self._ready.result()
        kube = None
        if archives is not None:
            self.planes[label] = kubelet.start_control_plane(images.cluster_bin(), self._share / f"{label}-logs")
            kube = kubelet.kube_plan(self.planes[label], self._share, label, archives)
        modules = (vm.GUEST_MODULE, vm.KUBELET_MODULE) if kube else (vm.GUEST_MODULE,)
        done = vm.boot(built, label, self._share, prepared, modules, kube)
        _BOOTED.append(done)
        return done

    def get(self, label: str) -> vm.Boot:
        return self._futures[label].result()

    def booted(self) -> Boots:
        """Itself once every boot has ended (the tier's turn, :mod:`tests.support.vmtiers`)."""
        self._pool.shutdown(wait=True)
        return self

    def close(self) -> list[str]:
        """Every boot waited for, then every control plane down; what could not be removed."""
        self._pool.shutdown(wait=True)
        return [problem for plane in self.planes.values() for problem in plane.down()]


class Tier(vmtiers.Tier[Boots]):
    """The tier's boots; with the kubelet node, a SIGTERM or Ctrl-C stops its control planes too (this session's
    children), and its VMs."""

    def __init__(self, items: list[pytest.Item]) -> None:
        needed = sorted(vmtiers.params_of(items, "systemd_boots", "kernel")) or list(steps.KERNELS)
        with_kubelet = any(item.path.name == KUBELET_TESTS for item in items)
        super().__init__("cmk-systemd-", lambda share: Boots(share, needed, with_kubelet).booted())
        self._finishing = False
        self._teardown = SignalTeardown(self._close).__enter__() if with_kubelet else None

    def _close(self) -> list[str]:
        if not self._finishing:  # a signal: no test will read the VMs' results
            vmtiers.stop()
        return self.booted().close()

    def finish(self) -> list[str]:
        """Every boot waited for and its control planes down, once: what could not be removed."""
        if self.ended:
            return []
        self._finishing = True
        problems = self._teardown.run() if self._teardown else self._close()
        if self._teardown:
            self._teardown.__exit__()
        keep = bool(os.environ.get("CMK_SYSTEMD_KEEP"))
        self.end(keep)
        _SESSION["tier_seconds"] = self.seconds
        if keep:
            print(f"\nsystemd tier: results and consoles kept in {self.share}")
        return problems


_TIER: list[Tier] = []


def pytest_collection_finish(session: pytest.Session) -> None:
    if vmtiers.using(session.items, "systemd_boots") and not session.config.option.collectonly:
        _TIER.append(Tier(session.items))


@pytest.fixture(scope="session")
def systemd_boots() -> Iterator[Boots]:
    (tier,) = _TIER
    yield tier.booted()
    problems = tier.finish()
    assert not problems, f"the kubelet node's control planes left: {problems}"


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
    for done in sorted(_BOOTED, key=lambda b: b.label):
        node = done.kubelet
        if node is None:
            continue
        write(f"{done.label}: the kubelet node ran {node.get('guest_seconds', 0):.0f} s; phases (s): "
              + ", ".join(f"{name} {seconds:g}" for name, seconds in node.get("phases", {}).items())
              + (" ; FAILED: " + node["error"].strip().splitlines()[-1] if "error" in node else ""))
        for step, entry in node.get("steps", {}).items():
            write(f"  {step:16} {entry.get('seconds', 0):6.1f} s  " + "  ".join(
                f"{kind} {seen.get('affinity')}/{seen.get('scope_effective')}/{seen.get('bound_effective')}/"
                f"{seen.get('exec')}/{seen.get('cpu_max')}" for kind, seen in entry.get("containers", {}).items()))
        for step, seen in node.get("static", {}).items():
            if isinstance(seen, dict) and "guaranteed" in seen:
                write(f"  static {step:9} guaranteed {seen['guaranteed'].get('affinity')} (kubelet's "
                      f"{seen['guaranteed'].get('spec_cpus')}), ordinary {seen['ordinary'].get('affinity')}")
    if not os.environ.get(KUBELET_ENV):
        write(f"the kubelet node ({KUBELET_TESTS}) was not collected: {KUBELET_ENV}=1 runs it")
    if "tier_seconds" in _SESSION:
        write(f"the tier: {_SESSION['tier_seconds']:.0f} s wall, from the build check to the last power-off")
