"""The node tier's VMs: one boot per machine shape for the whole session, in the tier's turn from the run's start.

Shapes (a) and (b) boot side by side; (c) boots once (a) has said which
kernel command line `cmk host-config` prints. Each boot runs every check of
its shape; the tests then assert on its result one check at a time.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.node.shapes import SHAPES, Shape
from tests.node.vm import Boot, BootError, boot
from tests.support import vmtiers
from tests.support.native import ensure_native_pinner

_BOOTED: list[Boot] = []


def isolcpus_of(cmdline: list[str]) -> str:
    """The CPU list of ``isolcpus=[flags,]CPUS`` in a kernel command line ('' if absent)."""
    for option in cmdline:
        if option.startswith("isolcpus="):
            return ",".join(p for p in option.removeprefix("isolcpus=").split(",") if p[:1].isdigit())
    return ""


class Boots:
    """One future per shape; a shape whose command line comes from another waits for that one."""

    def __init__(self, share: Path, needed: set[str]) -> None:
        self._share = share
        self._pool = ThreadPoolExecutor(max_workers=len(SHAPES), thread_name_prefix="cmk-vm")
        self._futures: dict[str, Future[Boot]] = {}
        for name in sorted(needed, key=lambda n: SHAPES[n].cmdline_from is not None):
            self._start(SHAPES[name])

    def _start(self, shape: Shape) -> None:
        if shape.name in self._futures:
            return
        if shape.cmdline_from:
            self._start(SHAPES[shape.cmdline_from])
        self._futures[shape.name] = self._pool.submit(self._boot, shape)

    def _boot(self, shape: Shape) -> Boot:
        if shape.cmdline_from is None:
            done = boot(shape, shape.cmdline, self._share)
        else:
            source = self._futures[shape.cmdline_from].result()
            planned = source.result.get("figures", {}).get("host_config")
            if not planned:
                raise BootError(f"{shape.cmdline_from} did not report cmk host-config's answer: "
                                f"{source.result.get('checks', {}).get('host_config_plans_the_served_pools')}")
            done = boot(shape, " ".join(planned["kernel_cmdline"]), self._share,
                        {"host_config": planned, "isolcpus": isolcpus_of(planned["kernel_cmdline"])})
        _BOOTED.append(done)
        return done

    def get(self, name: str) -> Boot:
        self._start(SHAPES[name])
        return self._futures[name].result()

    def booted(self) -> Boots:
        """Itself once every boot has ended (the tier's turn, :mod:`tests.support.vmtiers`)."""
        self._pool.shutdown(wait=True)
        return self


_TIER: list[vmtiers.Tier[Boots]] = []


def pytest_collection_finish(session: pytest.Session) -> None:
    if vmtiers.using(session.items, "node_boots") and not session.config.option.collectonly:
        ensure_native_pinner()  # the guest's root is read-only: `cmk install` there copies this build
        needed = vmtiers.params_of(session.items, "node_boots", "shape")
        _TIER.append(vmtiers.Tier("cmk-node-", lambda share: Boots(share, needed).booted()))


@pytest.fixture(scope="session")
def node_boots() -> Iterator[Boots]:
    (tier,) = _TIER
    yield tier.booted()
    tier.finish()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """What each shape's kernel reported, each check's result and time, the hotplug latency, the wall times."""
    if not _BOOTED:
        return
    write = terminalreporter.write_line
    terminalreporter.section("node tier: real kernels")
    for done in sorted(_BOOTED, key=lambda b: b.shape.name):
        kernel, figures = done.result["kernel"], done.result.get("figures", {})
        write(f"{done.shape.name}: booted '{done.cmdline}' in {done.wall_seconds:.0f} s wall "
              f"(guest up {done.result.get('uptime_at_start', 0):.0f} s before the checks, "
              f"checks {done.result.get('guest_seconds', 0):.0f} s, daemon up in "
              f"{figures.get('daemon_start_seconds', '-')} s)"
              + (f"; booted {done.attempts} times: qemu aborted before (see its .attempt1.log)"
                 if done.attempts > 1 else ""))
        write(f"  kernel {kernel['release']}: online {kernel['online']}, isolated {kernel['isolated'] or '-'}, "
              f"nohz_full {kernel['nohz_full'] or '-'}, NUMA {kernel['numa_nodes']}, "
              f"thread siblings {kernel['thread_siblings']}, {kernel['cgroup_fs']} [{kernel['cgroup_controllers']}]")
        for name, check in done.result.get("checks", {}).items():
            first = check["detail"].strip().splitlines()[-1 if not check["ok"] else 0][:200]
            write(f"  {'PASS' if check['ok'] else 'FAIL'} {name} ({check['seconds']} s): {first}")
        if "hotplug_seconds" in figures:
            write(f"  hotplug to health: {figures['hotplug_seconds']}")
        for runtime, rounds in figures.get("escape", {}).items():
            for seen in rounds:
                write(f"  escape attempts, {runtime}, {seen}")
