"""``cmk demo``'s walkthrough: the whole product on this machine with no cluster, start to finish, then gone.

The real daemon serves its pools to the kubelet stand-in over real unix
sockets in a temporary directory, the real ``cmk install`` code puts the
static pinner in a temporary install directory, the stand-in admits the
seed pod as a kubelet would, and each container's command runs as a real
process: ``/opt/bin/cmk`` mapped through the Allocate answer's mount, with
the env the answer gave. The affinity shown is read back from
``/proc/PID/status`` once the pinner has exec'd the workload, never echoed
from the env, and the demo fails if it differs from the CPUs the devices name.

Everything it starts is registered on one ExitStack the moment it exists,
and unwound on every exit path (success, error, Ctrl-C, SIGTERM) with those
signals ignored meanwhile, so no process, socket or directory outlives it.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from deviceplugin.daemon import Daemon, DaemonSettings
from deviceplugin.errors import CmkError
from deviceplugin.host.installedpinner import (
    BUILD_DOCS,
    built_pinner,
    install_pinner,
    unbuilt,
)
from deviceplugin.host.sysfs import discover
from deviceplugin.model.answers import ENV_NAMES
from deviceplugin.model.cpulist import format_cpu_list, parse_cpu_list
from deviceplugin.model.node import plan_node
from deviceplugin.model.pinnercontract import IsolateExit
from deviceplugin.model.plan import PlanOptions, Pool
from deviceplugin.model.topology import Topology
from deviceplugin.standin import (
    AdmittedContainer,
    ContainerSpec,
    Kubelet,
    KubeletOptions,
    PodSpec,
)
from deviceplugin.view import seedpod as view

#: The workload's PATH inside the "container" (a common image default).
CONTAINER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
START_TIMEOUT = 10.0  # s for the pools to register, and for a pinner to exec its workload
STOP_TIMEOUT = 5.0  # s a workload gets after SIGTERM before SIGKILL

Write = Callable[[str], None]


@dataclass(frozen=True, kw_only=True)
class DemoSettings:
    sysfs_root: Path = Path("/sys")
    procfs_root: Path = Path("/proc")
    plan: PlanOptions = field(default_factory=PlanOptions)
    hold: float = 0.0
    stdin: TextIO | None = None  # a line here ends the hold early (Enter at a terminal; a test writes one)

    @property
    def this_machine(self) -> bool:
        """False for a dump: its CPUs need not be this machine's, so a refused pinner is what the demo shows."""
        return self.sysfs_root.resolve() == Path("/sys").resolve()


@dataclass
class _Running:
    """One container's process, what it was told, and what the kernel says it got."""

    container: view.DemoContainer
    admitted: AdmittedContainer
    popen: subprocess.Popen[bytes]
    argv: tuple[str, ...]
    cpus: frozenset[int]
    unpinnable: str  # why the pinner will refuse the CPUs here; "" when it can pin them
    affinity: str = ""  # Cpus_allowed_list once the workload runs
    refusal: str = ""  # the pinner's one-line error when it refused, as ``unpinnable`` predicted


def cpus_allowed_list(pid: int) -> str:
    """``Cpus_allowed_list`` of ``/proc/PID/status``: the affinity the kernel enforces."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return line.partition(":")[2].strip()
    raise CmkError(f"/proc/{pid}/status has no Cpus_allowed_list line")


def _exe(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None


def hold(seconds: float, stdin: TextIO | None) -> None:
    """Sleep ``seconds``, or less if a line arrives on ``stdin``; a closed stdin (``< /dev/null``) just sleeps."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        if stdin is None:
            time.sleep(left)
            return
        readable, _, _ = select.select([stdin], [], [], left)
        if readable:
            if stdin.readline():
                return
            stdin = None  # end of file: nobody will press Enter


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextmanager
def _signals_ignored() -> Iterator[None]:
    """Keep a second Ctrl-C (or SIGTERM) from cutting the cleanup short."""
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in _STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextmanager
def _signals_deferred() -> Iterator[None]:
    """Hold Ctrl-C/SIGTERM back while something is created and its cleanup registered, then deliver it.

    Masking the signal would not do: Python runs its handlers in the main
    thread whichever thread the kernel picked, so the exception could still
    land between ``Popen`` returning and the cleanup being registered.
    """
    pending: list[int] = []
    previous = {s: signal.signal(s, lambda signum, _frame: pending.append(signum)) for s in _STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for pending_signal in dict.fromkeys(pending):
            signal.raise_signal(pending_signal)


def _quietly(what: str, action: Callable[[], object]) -> Callable[[], None]:
    """A cleanup step that reports its failure and lets the next step run."""
    def step() -> None:
        try:
            action()
        except Exception as err:  # noqa: BLE001 - cleanup must go on
            print(f"cmk demo: cleanup: {what} failed: {err}", file=sys.stderr)
    return step


def _stop_process(popen: subprocess.Popen[bytes]) -> int:
    """SIGTERM, as the kubelet does at pod deletion; SIGKILL after the grace period; reaped."""
    if popen.poll() is None:
        popen.terminate()
        try:
            popen.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait()
    if popen.stderr is not None:
        popen.stderr.close()
    return popen.returncode


def _exit_text(status: int) -> str:
    if status < 0:
        return f"ended by {signal.Signals(-status).name}"
    return f"exited with status {status}"


class Demo:
    def __init__(self, settings: DemoSettings, write: Write) -> None:
        self.settings = settings
        self._write = write
        self._stack = ExitStack()
        self._running: list[_Running] = []

    # --- the walkthrough ----------------------------------------------------------------

    def run(self) -> int:
        """The walkthrough; returns how many containers ran pinned (0: the demo showed no pinning at all)."""
        try:
            return self._walkthrough()
        finally:
            with _signals_ignored():
                self._stack.close()

    def _walkthrough(self) -> int:
        """The seven sections, in order; each leaves what it started on the ExitStack. How many ran pinned."""
        s = self.settings
        this_machine = s.this_machine
        node = plan_node(discover(s.sysfs_root, s.procfs_root), s.plan)
        with _signals_deferred():
            workdir = Path(tempfile.mkdtemp(prefix="cmk-demo-"))
            self._stack.callback(_quietly(f"removing {workdir}", lambda: shutil.rmtree(workdir)))
        install_dir = workdir / "opt-bin"
        daemon = Daemon(DaemonSettings(kubelet_dir=workdir / "device-plugins", sysfs_root=s.sysfs_root,
                                       procfs_root=s.procfs_root, install_dir=str(install_dir), plan=s.plan),
                        node=node)
        containers = view.demo_containers(daemon.plan, cores=len(node.topology.cores))

        self.out("cmk demo: the seed pod on this machine, with no cluster")
        self._section("1. Start the device plugin and a kubelet stand-in")
        kubelet, pinner = self._start_node(daemon, node.topology, this_machine, workdir, install_dir)

        self._section("2. The node, as kubectl describe node shows it")
        self._node(kubelet, full=True)

        self._section(f"3. Admit pod {view.POD_NAME}: one container per pool, one device each")
        admitted = self._admit(kubelet, containers)

        self._section("4. Run each container's command through the pinner, with its Allocate env")
        self._run_containers(admitted, pinner, this_machine)

        self._section("5. The node while the pod holds its devices")
        self._node(kubelet)
        if s.hold > 0:
            self._hold()

        self._section("6. Delete the pod: SIGTERM its processes, free its devices")
        self._delete_pod(kubelet)
        self._node(kubelet)

        self._section("7. Stop and clean up")
        return self._clean_up(workdir)

    # --- the sections ---------------------------------------------------------------------

    def _start_node(self, daemon: Daemon, topology: Topology, this_machine: bool, workdir: Path,
                    install_dir: Path) -> tuple[Kubelet, Path]:
        """Section 1: the pinner installed, the stand-in and the daemon started, every pool registered."""
        pinner = self._install_pinner(workdir, install_dir)
        kubelet = Kubelet(workdir / "device-plugins", KubeletOptions(seed=0))
        # A gRPC server or call left behind by an exception can block its finalizer forever:
        # starting (and, below, admitting) completes before a Ctrl-C is acted on; both take milliseconds.
        with _signals_deferred():
            self._stack.callback(_quietly("stopping the kubelet stand-in", kubelet.stop))
            kubelet.start()
            self._stack.callback(_quietly("stopping the device plugin", daemon.stop))
            daemon.start()
        expected = {resource: len(devices.devices) for resource, devices in daemon.tree.items()}
        try:
            kubelet.wait_for(lambda: daemon.registered and all(kubelet.capacity().get(r) == n for r, n in expected.items()),
                             timeout=START_TIMEOUT, what="every pool registered")
        except TimeoutError as err:
            raise CmkError(f"the device plugin did not register with the kubelet stand-in: {err}") from None
        pools = ", ".join(f"{r} ({view.unit(d.pool, len(d.devices))})" for r, d in daemon.tree.items())
        self.out(*view.table([
            ["topology", self._topology_text(topology, this_machine)],
            ["pool plan", view.plan_summary(daemon.plan)],
            ["work dir", f"{workdir} (removed at the end)"],
            ["pinner", f"{pinner} (put there by cmk install; containers see it as {view.PINNER})"],
            ["kubelet", f"stand-in serving {kubelet.socket}"],
            ["device plugin", f"registered {pools}"],
        ]))
        for note in daemon.plan.notes:
            self.out(f"  note: {note}")
        return kubelet, pinner

    def _admit(self, kubelet: Kubelet, containers: tuple[view.DemoContainer, ...]
               ) -> list[tuple[view.DemoContainer, AdmittedContainer]]:
        """Section 3: the seed pod admitted, with each container's devices and Allocate answer."""
        for container in containers:
            if container.note:
                self.out(f"  note: {container.note}")
        with _signals_deferred():
            pod = kubelet.admit(PodSpec(view.POD_NAME, tuple(
                ContainerSpec(c.name, c.command, {c.resource: 1}) for c in containers)))
            self._stack.callback(_quietly("deleting the pod", lambda: self._delete_pod(kubelet, report=False)))
        admitted = [(c, pod.container(c.name)) for c in containers]
        rows = [["CONTAINER", "REQUESTS (limits)", "DEVICES", "ALLOCATE ANSWER (env)"]]
        for container, got in admitted:
            rows.append([container.name, f"{container.resource}: 1", " ".join(got.device_ids[container.resource]),
                         " ".join(f"{k}={v}" for k, v in sorted(got.envs.items()))])
        self.out(*view.table(rows))
        for mount in sorted({(m.container_path, m.host_path, m.read_only) for _, g in admitted for m in g.answer.mounts}):
            self.out(f"  mount (every answer): {mount[0]} <- {mount[1]}{' (read-only)' if mount[2] else ''}")
        return admitted

    def _run_containers(self, admitted: list[tuple[view.DemoContainer, AdmittedContainer]], pinner: Path,
                        this_machine: bool) -> None:
        """Section 4: each command through the pinner, its affinity read back from /proc."""
        if not this_machine:
            self.out("  note: the topology is a dump, not this machine, so the Allocate answers name the dump's CPUs. "
                     "Where this machine has the same CPU numbers the pinner pins to them for real; where it has "
                     "not, the pinner refuses to start the workload (as in a container whose cpuset lacks them) "
                     "and the demo shows its refusal instead of an affinity")
        self.out(*view.table([["CONTAINER", f"COMMAND ({view.PINNER} runs from the mount above)"]]
                             + [[c.name, " ".join(c.command)] for c, _ in admitted]))
        allowed = frozenset(os.sched_getaffinity(0))
        for container, got in admitted:
            self._start(container, got, allowed=allowed)
        for running in self._running:
            self._await_exec(running, pinner)
        self._show_processes()

    def _hold(self) -> None:
        """Section 5's pause, so the processes can be inspected from another terminal."""
        pids = " ".join(str(r.popen.pid) for r in self._running if not r.refusal) or "none running"
        self.out("", f"holding {self.settings.hold:g} s (PIDs: {pids}): inspect them, e.g. taskset -cp PID; "
                     "Enter goes on now, Ctrl-C stops and cleans up")
        hold(self.settings.hold, self.settings.stdin)

    def _clean_up(self, workdir: Path) -> int:
        """Section 7: everything unwound, and the one-line verdict; how many containers ran pinned."""
        with _signals_ignored():
            self._stack.close()
        self.out(f"  device plugin stopped (sockets removed), kubelet stand-in stopped, {workdir} removed")
        pinned = sum(1 for r in self._running if not r.refusal)
        self.out("", f"done: {pinned} of {len(self._running)} containers ran pinned to the CPUs their devices name"
                     + ("" if pinned == len(self._running) else
                        f"; the pinner refused {len(self._running) - pinned} whose CPUs are not this machine's to give here"))
        return pinned

    # --- steps ----------------------------------------------------------------------------

    def out(self, *lines: str) -> None:
        for line in lines:
            self._write(line)

    def _section(self, title: str) -> None:
        self.out("", title)

    @staticmethod
    def _topology_text(topology: Topology, this_machine: bool) -> str:
        where = "this machine" if this_machine else "a dump, not this machine"
        nodes = len(topology.numa_nodes)
        isolated = format_cpu_list(topology.isolated) or "none"
        return (f"{where} ({len(topology.online)} CPUs online: {format_cpu_list(topology.online)}; "
                f"{len(topology.cores)} cores; {nodes} NUMA node{'s' if nodes != 1 else ''}; isolated: {isolated})")

    def _install_pinner(self, workdir: Path, install_dir: Path) -> Path:
        """The real ``cmk install`` into the demo's install dir; builds the pinner first if it never was."""
        source = built_pinner()
        problem = unbuilt(source)
        if problem:
            from pinner.build import BuildError, build

            try:
                compiler, _ = build(workdir / "build" / "cmk")
            except BuildError as err:
                raise CmkError(f"{problem}, and building it for this run failed: {err} ({BUILD_DOCS})") from None
            self.out(f"  note: {problem}; this run built one with {compiler} in its work dir, but 'cmk install' "
                     f"will not find it ({BUILD_DOCS} says how to build it)")
            source = workdir / "build" / "cmk"
        return install_pinner(source, install_dir)

    def _node(self, kubelet: Kubelet, *, full: bool = False) -> None:
        allocated: dict[str, int] = {}
        for pod in kubelet.pods():
            for container in pod.containers:
                for resource, ids in container.device_ids.items():
                    allocated[resource] = allocated.get(resource, 0) + len(ids)
        allocatable = kubelet.allocatable()
        lines = view.node_status(kubelet.capacity(), allocatable, allocated)
        if not full:
            lines = lines[lines.index("Allocated resources:"):]
        self.out(*("  " + line for line in lines))
        self.out(f"  {view.free_line(allocatable, allocated)}")
        if not full:
            self.out("  (Capacity and Allocatable are unchanged: like a kubelet, they count healthy devices, held or not)")

    def _start(self, container: view.DemoContainer, got: AdmittedContainer, *, allowed: frozenset[int]) -> None:
        cpus = parse_cpu_list(got.envs[ENV_NAMES[container.pool]])
        argv = view.host_argv(container.command, [(m.container_path, m.host_path) for m in got.answer.mounts])
        with _signals_deferred():  # no window where the process exists and nothing would stop it
            popen = subprocess.Popen(argv, env={"PATH": CONTAINER_PATH, **got.envs}, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
            self._stack.callback(_quietly(f"stopping pid {popen.pid}", lambda: _stop_process(popen)))
        self._running.append(_Running(container, got, popen, tuple(argv), cpus, view.unpinnable_reason(cpus, allowed=allowed)))

    def _await_exec(self, running: _Running, pinner: Path) -> None:
        """Wait until the pinner became the workload, then read the affinity the kernel holds."""
        popen, name = running.popen, running.container.name
        deadline = time.monotonic() + START_TIMEOUT
        while _exe(popen.pid) in (None, os.path.realpath(pinner)):
            if popen.poll() is not None:
                error = popen.stderr.read().decode(errors="replace").strip() if popen.stderr else ""
                if running.unpinnable and popen.returncode == IsolateExit.NOT_ALLOWED:
                    running.refusal = error
                    return
                raise CmkError(f"container {name}: the pinner {_exit_text(popen.returncode)}: {error or 'no message'}")
            if time.monotonic() > deadline:
                raise CmkError(f"container {name}: the pinner (pid {popen.pid}) did not exec its workload within {START_TIMEOUT:g} s")
            time.sleep(0.005)
        running.affinity = cpus_allowed_list(popen.pid)
        actual = parse_cpu_list(running.affinity)
        if actual != running.cpus:
            raise CmkError(f"container {name}: pid {popen.pid} runs on CPUs {running.affinity} "
                           f"but its devices name {format_cpu_list(running.cpus)}")

    def _show_processes(self) -> None:
        rows = [["CONTAINER", "PID", "DEVICES", "CPUS (devices)", "AFFINITY (taskset -cp PID, read from /proc)"]]
        for r in self._running:
            refused = f"none: the pinner refused (exit {IsolateExit.NOT_ALLOWED}), no workload runs"
            rows.append([r.container.name, "-" if r.refusal else str(r.popen.pid),
                         " ".join(r.admitted.device_ids[r.container.resource]), format_cpu_list(r.cpus),
                         refused if r.refusal else view.affinity_text(r.popen.pid, r.affinity)])
        self.out("", *view.table(rows))
        for r in self._running:
            if r.refusal:
                self.out(f"  {r.container.name}: {r.unpinnable}; the pinner said: {r.refusal}")
        exclusive = [r for r in self._running if r.container.pool == Pool.EXCLUSIVE and not r.refusal]
        others = frozenset().union(*(r.cpus for r in self._running if r.container.pool != Pool.EXCLUSIVE))
        for r in exclusive:
            shared_cpus = r.cpus & others
            self.out(f"  the exclusive container's CPUs ({format_cpu_list(r.cpus)}) "
                     + (f"overlap the others' on {format_cpu_list(shared_cpus)}" if shared_cpus
                        else f"are no other container's (theirs: {format_cpu_list(others)})"))

    def _delete_pod(self, kubelet: Kubelet, *, report: bool = True) -> None:
        """What pod deletion does: the kubelet SIGTERMs every container, then frees the pod's devices."""
        for r in self._running:
            already = r.popen.returncode is not None
            status = _stop_process(r.popen)
            if report and not already:
                self.out(f"  {r.container.name}: SIGTERM pid {r.popen.pid}: {_exit_text(status)}")
        if any(p.name == view.POD_NAME for p in kubelet.pods()):
            kubelet.delete_pod(view.POD_NAME)
            if report:
                self.out(f"  pod {view.POD_NAME} deleted: its devices are free again", "")
