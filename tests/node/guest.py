"""The program the node tier runs inside each VM: every check of one shape, one JSON result.

Run as ``python -m tests.node.guest PLAN.json`` by the VM's init, as root,
against the guest kernel's own /sys, /proc and cgroup v2. Each check records
``ok`` and a ``detail`` saying what it saw; one check failing does not stop
the others. The result goes to the directory the host shared into the VM,
where the host-side tests assert on it one check at a time.

Expected values come from the kernel's files, read here directly
(``/sys/devices/system/cpu/isolated``, ``node*/cpulist``,
``thread_siblings_list``), never from the product's own parser.
"""

from __future__ import annotations

import copy
import ctypes
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache, partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deviceplugin.host import nodewide
from deviceplugin.model import hookcontract as cmk_hook
from deviceplugin.model.cpulist import format_cpu_list, parse_cpu_list
from tests.node import oci, shapes
from tests.support import escape
from tests.support.threads import samples_on_each

if TYPE_CHECKING:
    from deviceplugin.standin import Kubelet

REPO = Path(__file__).resolve().parents[2]
SYS = Path("/sys/devices/system")
CGROUP = Path("/sys/fs/cgroup")
RESOURCES = {
    "exclusive": "cmk.intel.com/exclusive-cores",
    "shared": "cmk.intel.com/shared",
    "infra": "cmk.intel.com/infra",
    "exclusive-non-isolcpus": "cmk.intel.com/exclusive-non-isolcpus-cores",
}
ENV = {"exclusive": "CMK_CPUS_EXCLUSIVE", "shared": "CMK_CPUS_SHARED", "infra": "CMK_CPUS_INFRA"}
METRICS_ADDRESS = "127.0.0.1:9464"
WAIT_SECONDS = 120.0  # TCG on a loaded 2-CPU machine is slow; this bounds a hang, not a speed


class CheckFailed(Exception):
    """A check's expectation did not hold; the message says what was seen."""


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


def read(path: Path | str) -> str:
    return Path(path).read_text().strip()


def cpus(text: str) -> frozenset[int]:
    return parse_cpu_list(text) if text.strip() else frozenset()


def show(cpu_set: frozenset[int] | set[int]) -> str:
    return format_cpu_list(cpu_set) or "-"


# -- what the kernel says ---------------------------------------------------------


def kernel_facts() -> dict[str, Any]:
    """The kernel's own view: isolated/nohz_full CPUs, NUMA nodes, SMT siblings, cgroup v2 controllers."""
    online = cpus(read(SYS / "cpu/online"))
    nodes = {int(p.name[4:]): read(p / "cpulist") for p in sorted(SYS.glob("node/node[0-9]*"))}
    siblings = sorted({read(SYS / f"cpu/cpu{c}/topology/thread_siblings_list") for c in online},
                      key=lambda s: min(cpus(s)))
    return {
        "release": os.uname().release,
        "cmdline": read("/proc/cmdline"),
        "online": show(online),
        "isolated": read(SYS / "cpu/isolated"),
        "nohz_full": read(SYS / "cpu/nohz_full") if (SYS / "cpu/nohz_full").exists() else "",
        "numa_nodes": nodes,
        "thread_siblings": siblings,
        "cgroup_fs": _fstype(CGROUP),
        "cgroup_controllers": read(CGROUP / "cgroup.controllers"),
    }


def _fstype(mount_point: Path) -> str:
    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        if fields[1] == str(mount_point):
            return fields[2]
    return ""


def node_of(cpu_set: frozenset[int], facts: dict[str, Any]) -> tuple[int, ...]:
    return tuple(sorted(n for n, text in facts["numa_nodes"].items() if cpu_set & cpus(text)))


# -- the product, running ------------------------------------------------------------


class Node:
    """The daemon (``cmk device-plugin``) serving the real /sys to an in-process kubelet stand-in."""

    def __init__(self, shape: shapes.Shape, work: Path, facts: dict[str, Any], install_dir: Path) -> None:
        self.shape = shape
        self.work = work
        self.facts = facts
        self.plugin_dir = work / "kl"
        self.install_dir = install_dir  # `cmk install` ran on the host: the guest's root is read-only
        self.cdi_dir = work / "cdi"
        self.log = work / "daemon.log"
        self.pod_resources_socket = work / "podres.sock"
        self.kubelet: Kubelet | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.served: set[str] = set()
        self.answers: dict[str, dict[str, Any]] = {}

    def cmk(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "deviceplugin", *args]

    def launch(self) -> None:
        """Start the daemon first thing: a Python start costs seconds under TCG, so it overlaps with this
        program's own imports (the daemon waits for ``kubelet.sock`` to appear)."""
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                self.cmk("device-plugin", "--kubelet-dir", str(self.plugin_dir), "--install-dir",
                         str(self.install_dir), "--cdi-dir", str(self.cdi_dir), "--no-nfd", "--log-level", "INFO",
                         "--pod-resources-socket", str(self.pod_resources_socket),
                         "--metrics-address", METRICS_ADDRESS, "--per-cpu-metrics", *self.shape.pool_flags,
                         *(["--irq-steering", "exclusive"] if shapes.IRQ_STEERING in self.shape.checks else [])),
                cwd=REPO, stdout=log, stderr=subprocess.STDOUT)

    def connect(self) -> None:
        """Serve ``kubelet.sock`` and wait until every socket the daemon serves is registered and advertising.

        Which pools the daemon serves is what it does, not what its outputs' names
        spell: each registered resource whose endpoint is one of the daemon's
        sockets in the plugin directory (the daemon makes them all before it
        registers any), with a live registration and devices in ListAndWatch.
        """
        from deviceplugin.standin import Kubelet, KubeletOptions

        kubelet = self.kubelet = Kubelet(self.plugin_dir, KubeletOptions(pod_resources_socket=self.pod_resources_socket,
                                                                          seed=0))
        kubelet.start()
        deadline = time.monotonic() + WAIT_SECONDS
        while not list(self.cdi_dir.glob("*.json")) and time.monotonic() < deadline:
            expect(self.process is not None and self.process.poll() is None,
                   "the daemon exited:\n" + self.daemon_log()[-2000:])
            time.sleep(0.2)
        expect(bool(self.cdi_specs()), f"the daemon wrote no CDI spec into {self.cdi_dir}")
        kubelet.wait_for(self._all_served, timeout=WAIT_SECONDS, what="the daemon registering every pool it serves")

    def _all_served(self) -> bool:
        """Record and say whether each of the daemon's sockets is a live registration with devices."""
        assert self.kubelet is not None
        sockets = {p.name for p in self.plugin_dir.iterdir() if p.is_socket() and p != self.kubelet.socket}
        live = {r.endpoint: r.resource for r in self.kubelet.registrations()
                if self.kubelet.options(r.resource) is not None}
        capacity = self.kubelet.capacity()
        if not sockets or not all(live.get(s) and capacity.get(live[s], 0) > 0 for s in sockets):
            return False
        self.served = {live[s] for s in sockets}
        return True

    def cdi_specs(self) -> list[dict[str, Any]]:
        return [json.loads(p.read_text()) for p in sorted(self.cdi_dir.glob("*.json"))]

    def planned(self, resource: str) -> bool:
        """A pool the daemon serves on this shape (registered from one of its sockets)."""
        return resource in self.served

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=60)
        if self.kubelet is not None:
            self.kubelet.stop()

    def daemon_log(self) -> str:
        return self.log.read_text(errors="replace")


def admit(node: Node, name: str, containers: dict[str, dict[str, int]]) -> Any:
    from deviceplugin.standin import ContainerSpec, PodSpec

    assert node.kubelet is not None
    return node.kubelet.admit(PodSpec(name, containers=tuple(
        ContainerSpec(c, limits=limits) for c, limits in containers.items())))


def spec_cpus(node: Node, names: tuple[str, ...] | list[str]) -> frozenset[int]:
    """The CPUs the daemon's spec file gives the CDI devices ``names`` (an Allocate answer's), as the hook takes them."""
    expect(bool(names), "the Allocate answer names no CDI device")
    return oci.hook_cpus(oci.apply_cdi({}, node.cdi_specs(), names))


# -- the checks ------------------------------------------------------------------


def check_kernel(node: Node, plan: dict[str, Any]) -> str:
    facts, shape = node.facts, node.shape
    want_isolated = shape.isolated if shape.isolated is not None else plan["isolcpus"]
    expect(cpus(facts["isolated"]) == cpus(want_isolated),
           f"isolated CPUs {facts['isolated']!r}, the command line asked for {want_isolated!r}")
    expect(len(facts["numa_nodes"]) == shape.numa_nodes,
           f"NUMA nodes {facts['numa_nodes']}, expected {shape.numa_nodes}")
    widths = {len(cpus(s)) for s in facts["thread_siblings"]}
    expect(widths == {shape.threads_per_core},
           f"thread siblings {facts['thread_siblings']}, expected {shape.threads_per_core} per core")
    expect(facts["cgroup_fs"] == "cgroup2" and "cpuset" in facts["cgroup_controllers"].split(),
           f"/sys/fs/cgroup is {facts['cgroup_fs']!r} with controllers {facts['cgroup_controllers']!r}")
    return (f"isolated {facts['isolated'] or '-'}, nohz_full {facts['nohz_full'] or '-'}, NUMA {facts['numa_nodes']}, "
            f"siblings {facts['thread_siblings']}, {facts['cgroup_fs']} [{facts['cgroup_controllers']}]")


def check_devices(node: Node, plan: dict[str, Any]) -> str:
    """Each exclusive device is one whole core whose TopologyInfo is the node sysfs puts it in."""
    assert node.kubelet is not None
    facts = node.facts
    resource = RESOURCES["exclusive"]
    devices = node.kubelet.devices(resource)
    expect(bool(devices), f"no {resource} devices")
    pod = admit(node, "per-device", {f"d{i}": {resource: 1} for i in range(len(devices))})
    siblings = {cpus(s) for s in facts["thread_siblings"]}
    seen = []
    try:
        for container in pod.containers:
            (device,) = container.devices[resource]
            core = cpus(container.answer.envs[ENV["exclusive"]])
            hooked = spec_cpus(node, container.answer.cdi_devices)
            expect(hooked == core, f"device {device.id}: its CDI devices {list(container.answer.cdi_devices)} "
                                   f"carry --cpus {show(hooked)}, the answer's env {show(core)}")
            expect(core in siblings, f"device {device.id} holds CPUs {show(core)}, not one core's threads "
                                     f"({facts['thread_siblings']})")
            expect(device.numa_nodes == node_of(core, facts),
                   f"device {device.id} (CPUs {show(core)}) has TopologyInfo {device.numa_nodes}, sysfs puts it "
                   f"in node {node_of(core, facts)}")
            expect(device.health == "Healthy", f"device {device.id} is {device.health}")
            seen.append(f"{device.id}={show(core)}@node{','.join(map(str, device.numa_nodes))}")
        for pool in ("shared", "infra"):
            res = RESOURCES[pool]
            if node.planned(res):
                nodes = {d.numa_nodes for d in node.kubelet.devices(res).values()}
                expect(len(nodes) == 1, f"{res} slots carry different TopologyInfo {nodes}")
                seen.append(f"{pool} slots@node{','.join(map(str, nodes.pop()))}")
    finally:
        node.kubelet.delete_pod("per-device")
    return ", ".join(seen)


def check_pools(node: Node, plan: dict[str, Any]) -> str:
    """The pools' CPUs, as the Allocate answers name them, are the kernel's isolated and housekeeping CPUs."""
    assert node.kubelet is not None
    facts = node.facts
    exclusive = len(node.kubelet.devices(RESOURCES["exclusive"]))
    containers = {"exclusive": {RESOURCES["exclusive"]: exclusive}, "infra": {RESOURCES["infra"]: 1}}
    if node.planned(RESOURCES["shared"]):
        containers["shared"] = {RESOURCES["shared"]: 1}
    pod = admit(node, "pools", containers)
    try:
        got = {c.name: cpus(c.answer.envs[ENV[c.name]]) for c in pod.containers}
        node.answers = {c.name: {"envs": dict(c.answer.envs), "mounts": [(m.container_path, m.host_path, m.read_only)
                                                                          for m in c.answer.mounts],
                                 "cdi": list(c.answer.cdi_devices)} for c in pod.containers}
        for c in pod.containers:
            hooked = spec_cpus(node, c.answer.cdi_devices)
            expect(hooked == got[c.name], f"{c.name}: the spec gives its CDI devices {list(c.answer.cdi_devices)} "
                                          f"--cpus {show(hooked)}, the answer's env {show(got[c.name])}")
    finally:
        node.kubelet.delete_pod("pools")
    online, isolated = cpus(facts["online"]), cpus(facts["isolated"])
    shared = got.get("shared", frozenset())
    expect(not (got["exclusive"] & shared) and not (got["infra"] & (got["exclusive"] | shared)),
           f"pools overlap: {({k: show(v) for k, v in got.items()})}")
    if isolated:
        expect(got["exclusive"] | shared == isolated,
               f"exclusive {show(got['exclusive'])} + shared {show(shared)} != isolated {show(isolated)}")
        expect(got["infra"] == online - isolated,
               f"infra {show(got['infra'])} != the non-isolated CPUs {show(online - isolated)}")
    else:
        cpu0_core = cpus(read(SYS / f"cpu/cpu{min(online)}/topology/thread_siblings_list"))
        expect(got["exclusive"] | shared | got["infra"] == online,
               f"pools {({k: show(v) for k, v in got.items()})} do not cover the online CPUs {show(online)}")
        expect(cpu0_core <= got["infra"], f"infra {show(got['infra'])} lacks the first CPU's core {show(cpu0_core)}")
    return ", ".join(f"{k} {show(v)}" for k, v in got.items()) + f" (isolated {show(isolated)})"


def _health_is(kubelet: Kubelet, resource: str, device: str, health: str) -> bool:
    return kubelet.devices(resource)[device].health == health


def check_hotplug(node: Node, plan: dict[str, Any], figures: dict[str, Any]) -> str:
    """Offline a CPU of an exclusive core and online it again; the stand-in sees its device flip each time."""
    assert node.kubelet is not None
    kubelet, resource = node.kubelet, RESOURCES["exclusive"]
    pod = admit(node, "hotplug", {"c": {resource: 1}})
    (device,) = pod.container("c").devices[resource]
    core = cpus(pod.container("c").answer.envs[ENV["exclusive"]])
    kubelet.delete_pod("hotplug")
    cpu = max(core)
    online_file = SYS / f"cpu/cpu{cpu}/online"
    latencies: dict[str, float] = {}
    written: dict[str, float] = {}
    for value, health in (("0", "Unhealthy"), ("1", "Healthy")):
        start = time.monotonic()
        written[health] = time.time()
        online_file.write_text(value)
        kubelet.wait_for(partial(_health_is, kubelet, resource, device.id, health), timeout=30,
                         what=f"{device.id} {health} after cpu{cpu}/online={value}")
        latencies[health] = round(time.monotonic() - start, 3)
    time.sleep(0.2)  # let the log line land
    log = node.daemon_log()
    expect("watching kernel uevents" in log, "the daemon did not watch kernel uevents:\n" + log[-2000:])
    for action in ("offline", "online"):
        expect(f"kernel uevent: cpu{cpu} {action}" in log,
               f"no 'kernel uevent: cpu{cpu} {action}' in the daemon's log:\n" + log[-2000:])
    # Where the time goes: the daemon's log line for the uevent carries the time it was read.
    uevent = {health: round(_logged_at(log, f"kernel uevent: cpu{cpu} {action}") - written[health], 3)
              for health, action in (("Unhealthy", "offline"), ("Healthy", "online"))}
    figures["hotplug_seconds"] = {"cpu": cpu, "device": device.id, "to_health": latencies,
                                  "to_daemon_reading_the_uevent": uevent}
    return (f"cpu{cpu} offline -> {device.id} Unhealthy at the stand-in in {latencies['Unhealthy']:.3f} s "
            f"(uevent read by the daemon after {uevent['Unhealthy']:.3f} s), online -> Healthy in "
            f"{latencies['Healthy']:.3f} s (uevent after {uevent['Healthy']:.3f} s)")


def _logged_at(log: str, message: str) -> float:
    """The ``time=`` of the daemon's first log line holding ``message``, as a UNIX time."""
    from datetime import datetime

    line = next(line for line in log.splitlines() if message in line)
    stamp = line.split("time=", 1)[1].split()[0].strip('"')
    return datetime.fromisoformat(stamp).timestamp()


def _pinner(node: Node, argv: list[str]) -> str:
    """Run a pinner on the exclusive pool with the exclusive Allocate answer's env; it must exec in place."""
    envs = node.answers["exclusive"]["envs"]
    want = cpus(envs[ENV["exclusive"]])
    isolated = cpus(node.facts["isolated"])
    script = 'echo "pid $$"; grep Cpus_allowed_list /proc/self/status'
    process = subprocess.Popen([*argv, "--pool=exclusive", "sh", "--", "-c", script],
                               env={"PATH": "/usr/bin:/bin", **envs}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, cwd=REPO)
    out, err = process.communicate(timeout=WAIT_SECONDS)
    expect(process.returncode == 0, f"exit {process.returncode}: {err.strip()}")
    lines = dict(line.split(None, 1) for line in out.strip().splitlines())
    expect(lines.get("pid") == str(process.pid), f"the command ran as pid {lines.get('pid')}, the pinner was "
                                                 f"{process.pid}: it did not exec in place")
    allowed = cpus(lines["Cpus_allowed_list:"])
    expect(allowed == want, f"Cpus_allowed_list {show(allowed)}, the Allocate answer gave {show(want)}")
    expect(not isolated or allowed <= isolated, f"pinned to {show(allowed)}, not within isolated {show(isolated)}")
    return f"pid {process.pid} exec'd in place on CPUs {show(allowed)} (isolated {show(isolated)})"


def check_static_pinner(node: Node, plan: dict[str, Any]) -> str:
    return _pinner(node, [str(node.install_dir / "cmk"), "isolate"])


def _rootfs(path: Path) -> None:
    """A root holding Debian's static busybox and the applets the container's script uses."""
    (path / "bin").mkdir(parents=True)
    for d in ("proc", "sys", "dev", "tmp", "opt/bin"):
        (path / d).mkdir(parents=True, exist_ok=True)
    shutil.copy2("/bin/busybox", path / "bin/busybox")
    for applet in ("sh", "grep", "cat", "taskset", "sleep", "echo"):
        (path / "bin" / applet).symlink_to("busybox")


@dataclass(frozen=True)
class Running:
    """A container runc/crun started, as the host sees it: its init's pid, its lines so far, its cgroup."""

    pid: int
    lines: list[str]
    cgroup: str
    allowed: frozenset[int]
    effective: frozenset[int]


@cache
def _default_config(runtime: str, work: Path) -> dict[str, Any]:
    """``runtime spec``'s config.json, once per runtime: each run of a Go binary costs a second under TCG."""
    directory = Path(tempfile.mkdtemp(prefix=f"{runtime}-spec-", dir=work))
    subprocess.run([runtime, "spec"], cwd=directory, check=True, capture_output=True)
    return json.loads((directory / "config.json").read_text())


def _bundle(node: Node, runtime: str, name: str, script: str) -> dict[str, Any]:
    """The runtime's own default config.json for a busybox root running ``script`` in cgroup ``/name``."""
    bundle = node.work / name
    _rootfs(bundle / "rootfs")
    config = copy.deepcopy(_default_config(runtime, node.work))
    config["process"].update(args=["sh", "-c", script], terminal=False)
    config["process"]["env"] = ["PATH=/bin"]
    config["root"] = {"path": "rootfs", "readonly": True}
    config["linux"]["cgroupsPath"] = f"/{name}"
    return config


@contextmanager
def running_all(node: Node, runtime: str, bundles: dict[str, dict[str, Any]]) -> Iterator[list[Running]]:
    """``runtime run`` each bundle (name to config.json), all at once, until each script printed ``ready``.

    Each is deleted by force after (one Go binary start each under TCG, not two).
    """
    state = node.work / f"{runtime}-state"
    started = []
    try:
        for name, config in bundles.items():
            bundle = node.work / name
            (bundle / "config.json").write_text(json.dumps(config, indent=1))
            with (bundle / "stdout").open("w") as stdout, (bundle / "stderr").open("w") as stderr:
                started.append((name, bundle, subprocess.Popen(
                    [runtime, "--root", str(state), "run", "--pid-file", str(bundle / "pid"), "--bundle", str(bundle),
                     name], stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr)))
        yield [_ready(runtime, bundle, process) for _, bundle, process in started]
    finally:
        for name, _, process in started:
            subprocess.run([runtime, "--root", str(state), "delete", "--force", name], check=False,
                           capture_output=True)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _ready(runtime: str, bundle: Path, process: subprocess.Popen[bytes]) -> Running:
    """The container of ``bundle`` once its script printed ``ready``, as the host sees it."""
    out, pid_file = bundle / "stdout", bundle / "pid"

    def up() -> bool:  # crun may write --pid-file after the script has started printing
        return "ready" in out.read_text() and pid_file.is_file() and bool(read(pid_file))

    deadline = time.monotonic() + WAIT_SECONDS
    while not up() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    lines = out.read_text().splitlines()
    expect(up(), f"{runtime} run (exit {process.poll()}): {' | '.join(lines)} "
                 f"{(bundle / 'stderr').read_text().strip()}")
    pid = int(read(pid_file))
    status = {k: v.strip() for k, _, v in (line.partition(":") for line in
                                           Path(f"/proc/{pid}/status").read_text().splitlines())}
    path = Path(f"/proc/{pid}/cgroup").read_text().strip().split("::", 1)[1]
    container = CGROUP / path.lstrip("/")
    if container.name == cmk_hook.CONFINED_CGROUP:  # the hook moved its processes below: no cpuset files there
        container = container.parent
    return Running(pid, lines, path, cpus(status["Cpus_allowed_list"]), cpus(read(container / "cpuset.cpus.effective")))


@contextmanager
def running(node: Node, runtime: str, name: str, config: dict[str, Any]) -> Iterator[Running]:
    """One container of :func:`running_all`."""
    with running_all(node, runtime, {name: config}) as (ran,):
        yield ran


def inside(line: str) -> frozenset[int]:
    """The CPUs of a ``Cpus_allowed_list:`` line the container's script printed."""
    return cpus(line.split(":", 1)[1])


def _pinned(node: Node, config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with the exclusive Allocate answer and its CDI devices applied, and a pod env claiming every CPU."""
    answer = node.answers["exclusive"]
    config = oci.apply_answer(config, answer["envs"], answer["mounts"], [], {})
    # The kubelet appends the pod's own env after the plugins': a pod claiming every CPU must not widen it.
    config["process"]["env"].append(f"{ENV['exclusive']}={format_cpu_list(cpus(node.facts['online']))}")
    return oci.apply_cdi(config, node.cdi_specs(), answer["cdi"])


def node_wide(node: Node, config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with the hooks.d declaration ``cmk install`` wrote beside the binary applied, as podman/CRI-O do."""
    declarations = oci.read_hooks_dirs([node.install_dir])
    expect(nodewide.DECLARATION_NAME in declarations,
           f"no {nodewide.DECLARATION_NAME} with an existing hook binary in {node.install_dir}")
    return oci.apply_hooks(config, declarations)


def infra_record(node: Node) -> frozenset[int]:
    """The record the daemon wrote, which must hold the CPUs of its infra Allocate answer."""
    record = cpus(read(nodewide.record_path(node.install_dir)))
    infra = cpus(node.answers["infra"]["envs"][ENV["infra"]])
    expect(record == infra, f"the infra record holds {show(record)}, the daemon's infra answer {show(infra)}")
    return record


def _hook(node: Node, runtime: str, figures: dict[str, Any]) -> str:
    """A bundle carrying the daemon's CDI edits and the Allocate answer; runc/crun run it; the hook confines it."""
    want = cpus(node.answers["exclusive"]["envs"][ENV["exclusive"]])
    online = cpus(node.facts["online"])
    name = f"cmk-node-{runtime}-{os.getpid()}"
    script = ("grep Cpus_allowed_list /proc/self/status; "
              f"taskset -p -c {show(online)} $$ >/dev/null 2>&1; echo taskset $?; "
              "grep Cpus_allowed_list /proc/self/status; echo ready; exec sleep 600")
    config = _pinned(node, _bundle(node, runtime, name, script))
    hooked = oci.hook_cpus(config)
    expect(hooked == want, f"config.json's cmk hook entries carry --cpus {show(hooked)}, Allocate gave {show(want)}")
    with running(node, runtime, name, config) as ran:
        pass
    expect(ran.allowed == want and inside(ran.lines[0]) == want,
           f"Cpus_allowed_list {show(ran.allowed)} (inside: {show(inside(ran.lines[0]))}), Allocate gave {show(want)}")
    expect(ran.effective == want, f"{ran.cgroup}/cpuset.cpus.effective is {show(ran.effective)}, "
                                  f"Allocate gave {show(want)}")
    expect(inside(ran.lines[2]) == want, f"taskset -c {show(online)} inside widened it to {show(inside(ran.lines[2]))}")
    return (f"{runtime}: pid {ran.pid} in {ran.cgroup}: Cpus_allowed_list {show(ran.allowed)}, cpuset.cpus.effective "
            f"{show(ran.effective)}; after 'taskset -p -c {show(online)}' ({ran.lines[1]}) still "
            f"{show(inside(ran.lines[2]))}")


def check_hook_runc(node: Node, plan: dict[str, Any], figures: dict[str, Any]) -> str:
    return _hook(node, "runc", figures)


def check_hook_crun(node: Node, plan: dict[str, Any], figures: dict[str, Any]) -> str:
    return _hook(node, "crun", figures)


def _ordinary_script(node: Node, then: str) -> str:
    """An ordinary container's script: its CPUs, whether taskset reaches the exclusive CPUs, a widening, ``then``."""
    exclusive = cpus(node.answers["exclusive"]["envs"][ENV["exclusive"]])
    online = cpus(node.facts["online"])
    return (f"grep Cpus_allowed_list /proc/self/status; taskset -c {show(exclusive)} true 2>/dev/null; "
            f"echo reach $?; taskset -p -c {show(online)} $$ >/dev/null 2>&1; "
            f"grep Cpus_allowed_list /proc/self/status; {then}echo ready; exec sleep 600")


def _on_infra(node: Node, runtime: str, ran: Running) -> str:
    """Expect an ordinary container under the node-wide hook on the infra record's CPUs, unable to leave them."""
    infra = infra_record(node)
    exclusive = show(cpus(node.answers["exclusive"]["envs"][ENV["exclusive"]]))
    expect(ran.allowed == infra and inside(ran.lines[0]) == infra,
           f"Cpus_allowed_list {show(ran.allowed)} (inside: {show(inside(ran.lines[0]))}), infra is {show(infra)}")
    expect(ran.effective == infra, f"{ran.cgroup}/cpuset.cpus.effective is {show(ran.effective)}, infra {show(infra)}")
    expect(ran.lines[1].startswith("reach ") and ran.lines[1] != "reach 0",
           f"'taskset -c {exclusive} true' inside ran on the exclusive CPUs")
    expect(inside(ran.lines[2]) == infra, f"taskset -p inside widened it to {show(inside(ran.lines[2]))}")
    return (f"{runtime}: Cpus_allowed_list and cpuset.cpus.effective {show(infra)} = the infra record; "
            f"'taskset -c {exclusive} true' inside: {ran.lines[1]}; after 'taskset -p -c {node.facts['online']}' "
            f"still {show(inside(ran.lines[2]))}")


def _ordinary(node: Node, runtime: str) -> str:
    """A container holding no cmk device, only the node-wide hook applied: born on infra, cannot reach exclusive."""
    name = f"cmk-node-ordinary-{runtime}-{os.getpid()}"
    with running(node, runtime, name, node_wide(node, _bundle(node, runtime, name, _ordinary_script(node, "")))) as ran:
        pass
    return _on_infra(node, runtime, ran)


def check_ordinary_runc(node: Node, plan: dict[str, Any]) -> str:
    return _ordinary(node, "runc")


def check_ordinary_crun(node: Node, plan: dict[str, Any]) -> str:
    return _ordinary(node, "crun")


def _both_hooks(node: Node, runtime: str) -> str:
    """A pinned container with its CDI edits and the node-wide hook: it gets exactly what the CDI hook gives it."""
    want = cpus(node.answers["exclusive"]["envs"][ENV["exclusive"]])
    name = f"cmk-node-pinned-{runtime}-{os.getpid()}"
    script = "grep Cpus_allowed_list /proc/self/status; echo ready; exec sleep 600"
    config = node_wide(node, _pinned(node, _bundle(node, runtime, name, script)))
    hooks = [entry["args"][2:] for entry in config["hooks"]["createRuntime"]]
    expect(any(a[0].startswith(f"{cmk_hook.NODE_WIDE_OPTION}=") for a in hooks) and oci.hook_cpus(config) == want,
           f"config.json's createRuntime hooks {hooks}: not the CDI hook's --cpus={show(want)} and the node-wide one")
    with running(node, runtime, name, config) as ran:
        pass
    expect((ran.allowed, ran.effective, inside(ran.lines[0])) == (want, want, want),
           f"Cpus_allowed_list {show(ran.allowed)}, cpuset.cpus.effective {show(ran.effective)}, inside "
           f"{show(inside(ran.lines[0]))}: the CDI hook gives {show(want)}")
    return f"{runtime}: hooks {hooks} -> Cpus_allowed_list and cpuset.cpus.effective {show(want)}, the CDI hook's"


def check_both_hooks_runc(node: Node, plan: dict[str, Any]) -> str:
    return _both_hooks(node, "runc")


def check_both_hooks_crun(node: Node, plan: dict[str, Any]) -> str:
    return _both_hooks(node, "crun")


#: The capabilities containerd's and Docker's default spec give a container (``runc spec``'s are three).
DEFAULT_CAPS = ["CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW", "CAP_SETGID",
                "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL",
                "CAP_AUDIT_WRITE"]
ATTACKER = "/escape"
MS_REMOUNT = 32


def _attacked(node: Node, runtime: str, name: str, pod: str, config: dict[str, Any]) -> dict[str, Any]:
    """``config`` in cgroup ``/pod/name``, uid 0 with the default capabilities and no seccomp profile, the attacker
    (``tests/support/escape.c``, built on the host beside the pinner) bind-mounted at :data:`ATTACKER`."""
    config["linux"]["cgroupsPath"] = f"/{pod}/{name}"
    config["linux"].pop("seccomp", None)
    caps = config["process"].setdefault("capabilities", {})
    for kind in ("bounding", "effective", "permitted"):
        caps[kind] = DEFAULT_CAPS
    (node.work / name / "rootfs" / ATTACKER.lstrip("/")).touch()
    config["mounts"].append({"destination": ATTACKER, "type": "bind", "source": str(node.install_dir / "escape"),
                             "options": ["bind", "ro"]})
    return config


@contextmanager
def pod_cgroup(name: str, sandbox: frozenset[int]) -> Iterator[Path]:
    """A pod's cgroup whose sandbox child holds ``sandbox``, as a pod's is after the node-wide hook ran for it."""
    pod = CGROUP / name
    pod.mkdir()
    try:
        (pod / "cgroup.subtree_control").write_text("+cpuset")
        (pod / "sandbox").mkdir()
        (pod / "sandbox" / "cpuset.cpus").write_text(show(sandbox))
        yield pod
    finally:
        for directory in (pod / "sandbox", pod):
            directory.rmdir()


def nsdelegate() -> bool:
    return "nsdelegate" in next(line for line in read("/proc/self/mountinfo").splitlines()
                                if line.split()[4] == str(CGROUP)).split(" - ", 1)[1]


def _escape_once(node: Node, runtime: str, round_: str) -> list[str]:
    """A pinned and an ordinary container, each attacked at start (unshare, clone) and by a process exec'd later."""
    seen = []
    kinds = {"pinned": (_pinned, cpus(node.answers["exclusive"]["envs"][ENV["exclusive"]])),
             "ordinary": (node_wide, infra_record(node))}
    for kind, (apply, want) in kinds.items():
        name, pod = f"cmk-escape-{kind}-{runtime}-{round_}", f"cmk-pod-{kind}-{runtime}-{round_}-{os.getpid()}"
        script = f"{ATTACKER} unshare; {ATTACKER} clone; echo ready; exec sleep 600"
        config = _attacked(node, runtime, name, pod, apply(node, _bundle(node, runtime, name, script)))
        with pod_cgroup(pod, want), running(node, runtime, name, config) as ran:
            state = node.work / f"{runtime}-state"
            joined = subprocess.run([runtime, "--root", str(state), "exec", name, ATTACKER, "unshare"],
                                    capture_output=True, text=True, timeout=WAIT_SECONDS, check=False)
            effective = cpus(read(CGROUP / pod / name / "cpuset.cpus.effective"))
        attempts = [escape.parse(line) for line in ran.lines if line.startswith("escape: ")]
        attempts.append(escape.parse(joined.stdout + joined.stderr))
        for attempt, how in zip(attempts, ("at start by unshare", "at start by clone", "exec'd later, by unshare")):
            reached = cpus(attempt.affinity)
            expect(attempt.steps.get("mount") == "ok", f"{runtime} {kind} {how}: the attack did not get as far as "
                                                       f"its mount, so it proves nothing: {attempt}")
            expect(reached == want, f"{runtime} {kind} {how} reached CPUs {show(reached)}; it holds {show(want)}: "
                                    f"{attempt.steps}")
            seen.append(f"{kind} {how}: write={attempt.steps.get('write')} affinity={attempt.affinity}")
        expect(effective == want, f"{runtime} {kind}: cpuset.cpus.effective {show(effective)} after the attacks; "
                                  f"it holds {show(want)}")
    return seen


def remount_cgroup2(delegate: bool) -> None:
    """Remount the unified hierarchy with ``nsdelegate`` or without it: mount(2) itself, since a remount's data
    replaces the superblock's flags, while mount(8) may merge in the options it finds."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(b"none", str(CGROUP).encode(), b"cgroup2", MS_REMOUNT, b"nsdelegate" if delegate else b"") != 0:
        raise OSError(ctypes.get_errno(), f"remount of {CGROUP} with nsdelegate={delegate}")
    expect(nsdelegate() == delegate, f"remounting {CGROUP} with nsdelegate={delegate} did not take")


def _escape(node: Node, runtime: str, figures: dict[str, Any]) -> str:
    """The cgroup-namespace escape of issue 20 against runc/crun on cgroup v2, with and without ``nsdelegate``."""
    booted = nsdelegate()
    details = []
    try:
        for delegate in (booted, not booted):
            remount_cgroup2(delegate)
            seen = _escape_once(node, runtime, "on" if delegate else "off")
            details.append(f"nsdelegate={'on' if delegate else 'off'}{' (as booted)' if delegate == booted else ''}: "
                           + "; ".join(seen))
    finally:
        remount_cgroup2(booted)
    figures.setdefault("escape", {})[runtime] = details
    return " | ".join(details)


def check_escape_runc(node: Node, plan: dict[str, Any], figures: dict[str, Any]) -> str:
    return _escape(node, "runc", figures)


def check_escape_crun(node: Node, plan: dict[str, Any], figures: dict[str, Any]) -> str:
    return _escape(node, "crun", figures)


#: More busy loops than the infra CPUs of the shapes without isolcpus: unconfined, the scheduler spreads them.
NOISY_LOOPS = 3
SAMPLE_SECONDS = 3.0


def _noisy(node: Node, runtime: str, figures: dict[str, Any]) -> str:
    """Two noisy ordinary containers side by side, one without the node-wide hook and one with it.

    The one without runs on exclusive CPUs (the baseline); the one with is an
    ordinary container on the infra CPUs (as :func:`_ordinary` checks) whose
    threads never run on an exclusive CPU. Side by side halves the time
    under TCG, and only crowds the hooked one's loops onto infra harder.
    """
    exclusive = cpus(node.answers["exclusive"]["envs"][ENV["exclusive"]])
    name = f"cmk-node-noisy-{runtime}-{os.getpid()}"
    loops = "".join("(while :; do :; done) & " for _ in range(NOISY_LOOPS))
    bundles = {name: _bundle(node, runtime, name, _ordinary_script(node, loops)),
               f"{name}-hooked": node_wide(node, _bundle(node, runtime, f"{name}-hooked",
                                                         _ordinary_script(node, loops)))}
    with running_all(node, runtime, bundles) as (free, hooked):
        procs = {ran.pid: CGROUP / ran.cgroup.lstrip("/") / "cgroup.procs" for ran in (free, hooked)}
        os.setpriority(os.PRIO_PROCESS, 0, -15)  # six busy loops on four vCPUs would starve the sampler
        try:
            counts = samples_on_each({pid: partial(_cgroup_procs, path) for pid, path in procs.items()}, exclusive,
                                     SAMPLE_SECONDS)
        finally:
            os.setpriority(os.PRIO_PROCESS, 0, 0)
    baseline, confined = counts[free.pid], counts[hooked.pid]
    figures.setdefault("noisy_samples_on_exclusive", {})[runtime] = {
        "exclusive": show(exclusive), "loops": NOISY_LOOPS, "seconds": SAMPLE_SECONDS,
        "baseline": list(baseline), "node_wide_hook": list(confined)}
    seen = (f"{runtime}, {NOISY_LOOPS} busy loops each, side by side, samples on exclusive CPUs {show(exclusive)}: "
            f"without the hook {baseline[0]} of {baseline[1]}, with the node-wide hook {confined[0]} of {confined[1]}")
    expect(baseline[0] > 0, f"{seen}: the baseline never used an exclusive CPU, so it proves nothing")
    expect(confined[0] == 0 and confined[1] > 0, seen)
    return f"{seen}; {_on_infra(node, runtime, hooked)}"


def _cgroup_procs(path: Path) -> list[int]:
    return [int(pid) for pid in read(path).split()]


def check_noisy_runc(node: Node, plan: dict[str, Any], figures: dict[str, Any]) -> str:
    return _noisy(node, "runc", figures)


def check_noisy_crun(node: Node, plan: dict[str, Any], figures: dict[str, Any]) -> str:
    return _noisy(node, "crun", figures)


#: `cmk` commands whose JSON a check reads, started at boot so they overlap with the daemon's start.
BACKGROUND = {
    shapes.HOST_CONFIG: ("host-config", *shapes.HOST_CONFIG_FLAGS),
    shapes.NO_REBOOT: ("host-config", *shapes.HOST_CONFIG_FLAGS),
    shapes.DESCRIBE: ("describe", *shapes.POOL_FLAGS, "--pod-resources-socket", "/nonexistent/kubelet.sock"),
}
_started: dict[tuple[str, ...], subprocess.Popen[str]] = {}


def start_cmk_json(args: tuple[str, ...]) -> None:
    if args not in _started:
        _started[args] = subprocess.Popen([sys.executable, "-m", "deviceplugin", *args, "--output", "json"],
                                          cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _cmk_json(*args: str) -> dict[str, Any]:
    start_cmk_json(args)
    process = _started[args]
    out, err = process.communicate(timeout=WAIT_SECONDS)
    expect(process.returncode == 0, f"cmk {' '.join(args)}: exit {process.returncode}: {err.strip()}")
    return json.loads(out)


def check_host_config(node: Node, plan: dict[str, Any], figures: dict[str, Any]) -> str:
    """host-config for these pool flags plans the pools this node serves, and prints the line shape (c) boots."""
    answer = _cmk_json(*BACKGROUND[shapes.HOST_CONFIG])
    figures["host_config"] = answer
    served = {k: show(cpus(v["envs"][ENV[k]])) for k, v in node.answers.items()}
    planned = {k: show(cpus(v)) for k, v in answer["pools"].items() if v}
    expect(planned == served, f"host-config planned {planned}, the daemon serves {served}")
    return f"pools {planned}; kernel command line {' '.join(answer['kernel_cmdline'])}"


def check_describe(node: Node, plan: dict[str, Any], figures: dict[str, Any]) -> str:
    described = _cmk_json(*BACKGROUND[shapes.DESCRIBE])
    got = {p["pool"]: show(cpus(p["cpus"])) for p in described["plan"]["pools"] if p["cpus"]}
    want = {k: show(cpus(v)) for k, v in plan["host_config"]["pools"].items() if v}
    expect(described["plan"]["source"] == "isolcpus", f"describe plans from {described['plan']['source']}")
    expect(got == want, f"describe reports {got}, host-config planned {want}")
    return f"describe: pools {got} from {described['plan']['source']}"


def check_no_reboot(node: Node, plan: dict[str, Any], figures: dict[str, Any]) -> str:
    answer = _cmk_json(*BACKGROUND[shapes.HOST_CONFIG])
    expect(answer["reboot_needed"] is False, f"host-config still says reboot needed: {answer['notes']}")
    expect(answer["kernel_cmdline"] == plan["host_config"]["kernel_cmdline"],
           f"host-config now prints {answer['kernel_cmdline']}, before {plan['host_config']['kernel_cmdline']}")
    return f"reboot_needed false; current isolcpus {answer['current_isolcpus']}; notes {answer['notes']}"


def _unheld_busy_seconds(cpu: int) -> float:
    """The daemon's ``cmk_cpu_unheld_busy_seconds_total`` of ``cpu`` (0 while it has no series)."""
    with urllib.request.urlopen(f"http://{METRICS_ADDRESS}/metrics", timeout=WAIT_SECONDS) as answer:
        text = answer.read().decode()
    found = re.search(rf'^cmk_cpu_unheld_busy_seconds_total{{[^}}]*cpu="{cpu}"[^}}]*}} (\S+)$', text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def check_usage(node: Node, plan: dict[str, Any], figures: dict[str, Any]) -> str:
    """A busy loop on an exclusive CPU no container holds shows as a leak in /metrics and describe; a held core does not.

    One loop only: under TCG each spinning vCPU takes a whole host CPU, and
    describe needs one left to start in time.
    """
    assert node.kubelet is not None
    pod = admit(node, "usage", {"c": {RESOURCES["exclusive"]: 1}})
    try:
        held = cpus(pod.container("c").answer.envs[ENV["exclusive"]])
        free = sorted(cpus(node.answers["exclusive"]["envs"][ENV["exclusive"]]) - held)
        expect(bool(free), f"no exclusive CPU is left unheld beside {show(held)}")
        leak = free[0]
        before = _unheld_busy_seconds(leak)  # this scrape starts the daemon's leak count
        loop = subprocess.Popen(["taskset", "-c", str(leak), "sh", "-c", "while :; do :; done"])
        try:
            args = ["describe", *node.shape.pool_flags, "--pod-resources-socket", str(node.pod_resources_socket),
                    "--usage-window", "2", "--output", "json"]
            done = subprocess.run([sys.executable, "-m", "deviceplugin", *args], cwd=REPO, capture_output=True,
                                  text=True, timeout=3 * WAIT_SECONDS, check=False)
            counted = _unheld_busy_seconds(leak) - before
            held_counted = sum(_unheld_busy_seconds(cpu) for cpu in held)
        finally:
            loop.kill()
            loop.wait()
    finally:
        node.kubelet.delete_pod("usage")
    expect(done.returncode == 0, f"cmk describe: exit {done.returncode}: {done.stderr.strip()}")
    expect(counted > 0.5, f"cmk_cpu_unheld_busy_seconds_total of CPU {leak} grew {counted} s while it spun unheld")
    expect(held_counted == 0, f"the held CPUs {show(held)} counted {held_counted} s of leak")
    usage = json.loads(done.stdout)["usage"]
    expect(usage["available"] and usage["holdings_known"], f"describe's usage: {usage}")
    pools = {p["pool"]: cpus(p["cpus"]) for p in usage["pools"]}
    served = {k: cpus(v["envs"][ENV[k]]) for k, v in node.answers.items()}
    expect(all(pools.get(k) == v for k, v in served.items()), f"describe's usage pools {pools}, served {served}")
    leaks = {entry["cpu"]: entry["busy_percent"] for entry in usage["leaks"]}
    expect(leaks.get(leak, 0) >= 20, f"describe's leaks {leaks} lack the spinning unheld CPU {leak}")
    expect(not held & leaks.keys(), f"describe's leaks {leaks} name the held CPUs {show(held)}")
    figures["usage"] = {"leak_cpu": leak, "metrics_unheld_seconds": round(counted, 2), "describe_leaks": leaks,
                        "device_irqs_per_second": {e["cpu"]: e["device_interrupts_per_second"]
                                                   for e in usage["interrupted"]}}
    return (f"unheld CPU {leak}: {counted:.2f} s of leak in /metrics, {leaks[leak]} % busy in describe; "
            f"held {show(held)}: none; device IRQs/s on isolated or exclusive CPUs {figures['usage']['device_irqs_per_second']}")


def _device_interrupts() -> dict[str, list[int]]:
    """/proc/interrupts' numbered rows: IRQ -> its count on each CPU (the kernel's own table, not the product's)."""
    lines = read("/proc/interrupts").splitlines()
    width = len(lines[0].split())
    rows: dict[str, list[int]] = {}
    for line in lines[1:]:
        name, _, rest = line.partition(":")
        if name.strip().isdigit():
            rows[name.strip()] = [int(n) for n in rest.split()[:width]]
    return rows


def _on(rows: dict[str, list[int]], cpu_set: frozenset[int]) -> int:
    return sum(counts[cpu] for counts in rows.values() for cpu in cpu_set if cpu < len(counts))


def _metric_sum(name: str, **labels: str) -> float:
    """The sum of one family's samples whose labels include ``labels``, from the daemon's /metrics."""
    with urllib.request.urlopen(f"http://{METRICS_ADDRESS}/metrics", timeout=WAIT_SECONDS) as answer:
        text = answer.read().decode()
    total = 0.0
    for found in re.finditer(rf"^{name}{{([^}}]*)}} (\S+)$", text, re.MULTILINE):
        have = dict(re.findall(r'(\w+)="([^"]*)"', found.group(1)))
        if all(have.get(k) == v for k, v in labels.items()):
            total += float(found.group(2))
    return total


def _disk_load(directory: Path, seconds: float) -> int:
    """Small synced writes into the host's shared directory: each is a virtio-9p request, so an interrupt."""
    path = directory / "irq-load.bin"
    done, deadline = 0, time.monotonic() + seconds
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        while time.monotonic() < deadline:
            os.pwrite(fd, b"x" * 4096, (done % 64) * 4096)
            os.fsync(fd)
            done += 1
    finally:
        os.close(fd)
        path.unlink()
    return done


def _phase(directory: Path, exclusive: frozenset[int], seconds: float) -> dict[str, Any]:
    """Device interrupts on ``exclusive`` while the disk is busy: from /proc/interrupts and from the metrics."""
    metric = partial(_metric_sum, "cmk_pool_interrupts_total", kind="device", pool="exclusive")
    rows, counted, t = _device_interrupts(), metric(), time.monotonic()
    writes = _disk_load(directory, seconds)
    after_rows, after_counted, wall = _device_interrupts(), metric(), time.monotonic() - t
    by_irq = {irq: _on({irq: counts}, exclusive) - _on({irq: rows.get(irq, [])}, exclusive)
              for irq, counts in after_rows.items()}
    busiest = max(after_rows, key=lambda irq: sum(after_rows[irq]) - sum(rows.get(irq, [0])))
    return {"writes": writes, "seconds": round(wall, 2), "proc": _on(after_rows, exclusive) - _on(rows, exclusive),
            "metric": after_counted - counted, "per_second": round((after_counted - counted) / wall, 1),
            "by_irq": {irq: n for irq, n in by_irq.items() if n}, "busiest": busiest}


def _irq_names(irqs: dict[str, int]) -> dict[str, str]:
    """IRQ -> its /proc/interrupts line's last field (the device's queue name)."""
    lines = {line.split(":", 1)[0].strip(): line.split()[-1] for line in read("/proc/interrupts").splitlines()[1:]}
    return {irq: lines.get(irq, "?") for irq in irqs}


def _masks() -> dict[str, frozenset[int]]:
    found = {}
    for entry in Path("/proc/irq").iterdir():
        if entry.name.isdigit():
            found[entry.name] = cpus(read(entry / "smp_affinity_list"))
    return found


def check_irq_steering(node: Node, plan: dict[str, Any], figures: dict[str, Any]) -> str:
    """While a pod holds the exclusive cores, real virtio interrupts stay off them; their masks come back after.

    Before: the disk's IRQ is pointed at the exclusive CPUs (as a tuning agent
    or the kernel may leave it) and counted there under synced writes. Then a
    pod holds every exclusive core, the daemon (``--irq-steering exclusive``)
    narrows the masks, and the same load must put no device interrupt on them
    except from IRQs the daemon logged as unmovable. Deleting the pod gives
    every mask back as found. /proc/interrupts and the daemon's
    ``cmk_pool_interrupts_total`` must count the same in each phase.
    """
    assert node.kubelet is not None
    share = Path(plan["result"]).parent
    exclusive = cpus(node.answers["exclusive"]["envs"][ENV["exclusive"]])
    record = node.plugin_dir / "cmk-irq-masks.json"
    node.kubelet.wait_for(lambda: not record.exists(), timeout=WAIT_SECONDS,
                          what="the earlier checks' pods gone and their IRQ masks given back")
    disk = _phase(share, exclusive, 2)["busiest"]
    Path(f"/proc/irq/{disk}/smp_affinity_list").write_text(show(exclusive))
    found = _masks()
    before = _phase(share, exclusive, 10)
    expect(before["by_irq"].get(disk, 0) > 0, f"IRQ {disk} pointed at {show(exclusive)} landed none there: {before}")
    count = len(node.kubelet.devices(RESOURCES["exclusive"]))
    admit(node, "irq", {"c": {RESOURCES["exclusive"]: count}})
    try:
        node.kubelet.wait_for(lambda: not _masks()[disk] & exclusive, timeout=WAIT_SECONDS,
                              what=f"the daemon steering IRQ {disk} off the held CPUs")
        unmovable = set(re.findall(r"IRQ (\d+) cannot be pointed", node.daemon_log()))
        narrowed = _masks()
        stray = {irq: show(m) for irq, m in narrowed.items() if m & exclusive and irq not in unmovable}
        expect(not stray, f"masks still naming the held CPUs {show(exclusive)}: {stray}")
        # x86 moves an MSI at its next interrupt, which may still arrive where it was: let each fire once.
        _disk_load(share, 2)
        after = _phase(share, exclusive, 10)
    finally:
        node.kubelet.delete_pod("irq")
    node.kubelet.wait_for(lambda: _masks() == found, timeout=WAIT_SECONDS,
                          what="every IRQ mask given back as found once the pod is gone")
    moved = {irq: n for irq, n in after["by_irq"].items() if irq not in unmovable}
    expect(not moved, f"device interrupts on the held CPUs {show(exclusive)} after steering: {moved} "
                      f"({_irq_names(moved)}; masks {({irq: show(narrowed[irq]) for irq in moved if irq in narrowed})})")
    for phase in (before, after):
        expect(phase["metric"] == phase["proc"] or abs(phase["metric"] - phase["proc"]) <= 0.05 * phase["proc"] + 5,
               f"cmk_pool_interrupts_total counted {phase['metric']}, /proc/interrupts {phase['proc']}: {phase}")
    figures["irq_steering"] = {"irq": disk, "exclusive": show(exclusive), "before": before, "after": after,
                               "unmovable": sorted(unmovable), "narrowed": len([m for m in found
                                                                               if narrowed[m] != found[m]])}
    return (f"IRQ {disk} on {show(exclusive)}: {before['by_irq'].get(disk, 0)} interrupts in {before['seconds']} s "
            f"before, {after['by_irq'].get(disk, 0)} in {after['seconds']} s held and steered "
            f"({figures['irq_steering']['narrowed']} masks narrowed, unmovable {sorted(unmovable) or 'none'}); "
            f"metric {before['per_second']}/s then {after['per_second']}/s")


IRQBALANCE_SOCKETS = Path("/run/irqbalance")
#: The daemon's log lines asking irqbalance to ban held CPUs, and to lift the ban once none is held.
BANNED = "asked irqbalance .* off held CPUs"
LIFTED = "asked irqbalance .* off no held CPUs"


@contextmanager
def irqbalance_running(work: Path) -> Iterator[subprocess.Popen[bytes]]:
    """Debian's irqbalance in the foreground, rebalancing every second, until its socket listens."""
    IRQBALANCE_SOCKETS.mkdir(parents=True, exist_ok=True)
    log = work / "irqbalance.log"
    with log.open("wb") as out:
        process = subprocess.Popen(["irqbalance", "--foreground", "--interval=1"], stdout=out,
                                   stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + WAIT_SECONDS
        while not (IRQBALANCE_SOCKETS / f"irqbalance{process.pid}.sock").exists():
            if process.poll() is not None or time.monotonic() > deadline:
                raise CheckFailed(f"irqbalance (exit {process.returncode}) never listened in {IRQBALANCE_SOCKETS}: "
                                  f"{log.read_text(errors='replace')[-1500:]}")
            time.sleep(0.2)
        progress(f"irqbalance {process.pid} listens")
        yield process
    finally:
        process.terminate()
        process.wait(timeout=30)


def _irqbalance_says(pid: int, command: str) -> None:
    """One command on irqbalance's socket, as its own irqbalance-ui sends it."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(str(IRQBALANCE_SOCKETS / f"irqbalance{pid}.sock"))
        conn.sendall(command.encode())


def check_irqbalance(node: Node, plan: dict[str, Any], figures: dict[str, Any]) -> str:
    """With irqbalance running, the daemon writes no mask: it bans the held CPUs through irqbalance's socket,
    and irqbalance moves the disk's interrupts off them while the pod holds them.

    Only what irqbalance balances moves: IRQs nothing requested keep their
    all-CPU masks (they never fire), so the proof is the busy disk IRQ's mask
    and count, with every other IRQ's count on the held CPUs reported.
    """
    assert node.kubelet is not None
    share = Path(plan["result"]).parent
    exclusive = cpus(node.answers["exclusive"]["envs"][ENV["exclusive"]])
    record = node.plugin_dir / "cmk-irq-masks.json"
    node.kubelet.wait_for(lambda: not record.exists(), timeout=WAIT_SECONDS, what="no mask of the daemon's left")
    with irqbalance_running(node.work) as irqbalance:
        disk = _phase(share, exclusive, 2)["busiest"]
        # Before: irqbalance told (as an operator could) to keep off every other CPU, so it puts the disk on these.
        online = cpus(node.facts["online"])
        _irqbalance_says(irqbalance.pid, f"settings cpus {show(online - exclusive)}")
        node.kubelet.wait_for(lambda: _masks()[disk] <= exclusive, timeout=WAIT_SECONDS,
                              what=f"irqbalance placing the disk's IRQ {disk} on {show(exclusive)}")
        before = _phase(share, exclusive, 5)
        expect(before["by_irq"].get(disk, 0) > 0, f"the disk's IRQ {disk} on {show(exclusive)} landed none there")
        asked, lifted = (len(re.findall(line, node.daemon_log())) for line in (BANNED, LIFTED))
        count = len(node.kubelet.devices(RESOURCES["exclusive"]))
        admit(node, "irqbalance", {"c": {RESOURCES["exclusive"]: count}})
        try:
            node.kubelet.wait_for(lambda: len(re.findall(BANNED, node.daemon_log())) > asked,
                                  timeout=WAIT_SECONDS, what="the daemon asking irqbalance to ban the held CPUs")
            node.kubelet.wait_for(lambda: not _masks()[disk] & exclusive, timeout=WAIT_SECONDS,
                                  what=f"irqbalance moving the disk's IRQ {disk} off the banned CPUs {show(exclusive)}")
            _disk_load(share, 2)
            held = _phase(share, exclusive, 10)
            mask = _masks()[disk]
            wrote = record.exists()
        finally:
            node.kubelet.delete_pod("irqbalance")
        node.kubelet.wait_for(lambda: len(re.findall(LIFTED, node.daemon_log())) > lifted, timeout=WAIT_SECONDS,
                              what="the daemon lifting irqbalance's ban once the pod is gone")
        expect(irqbalance.poll() is None, "irqbalance exited while the daemon talked to it")
    expect(not wrote, f"the daemon wrote IRQ masks ({record}) while irqbalance ran")
    expect(held["by_irq"].get(disk, 0) == 0, f"the disk's IRQ {disk} (mask {show(mask)}) interrupted the banned "
                                             f"CPUs {show(exclusive)} {held['by_irq'].get(disk)} times under irqbalance")
    others = {irq: n for irq, n in held["by_irq"].items() if irq != disk}
    figures["irqbalance"] = {"exclusive": show(exclusive), "disk": disk, "mask": show(mask), "before": before,
                             "held": held}
    return (f"irqbalance banned {show(exclusive)} at the daemon's word and moved the disk's IRQ {disk} to "
            f"{show(mask)}: {before['by_irq'][disk]} of its interrupts there in {before['seconds']} s before, 0 in {held['seconds']} s of disk load ({held['writes']} synced "
            f"writes) after, other IRQs there {others or 'none'} ({_irq_names(others)}); no mask written by the daemon")


CHECKS: dict[str, Callable[..., str]] = {
    shapes.KERNEL: check_kernel,
    shapes.DEVICES: check_devices,
    shapes.POOLS: check_pools,
    shapes.HOTPLUG: check_hotplug,
    shapes.STATIC_PINNER: check_static_pinner,
    shapes.HOOK_RUNC: check_hook_runc,
    shapes.HOOK_CRUN: check_hook_crun,
    shapes.ORDINARY_RUNC: check_ordinary_runc,
    shapes.ORDINARY_CRUN: check_ordinary_crun,
    shapes.BOTH_HOOKS_RUNC: check_both_hooks_runc,
    shapes.BOTH_HOOKS_CRUN: check_both_hooks_crun,
    shapes.NOISY_RUNC: check_noisy_runc,
    shapes.NOISY_CRUN: check_noisy_crun,
    shapes.HOST_CONFIG: check_host_config,
    shapes.DESCRIBE: check_describe,
    shapes.NO_REBOOT: check_no_reboot,
    shapes.USAGE: check_usage,
    shapes.ESCAPE_RUNC: check_escape_runc,
    shapes.ESCAPE_CRUN: check_escape_crun,
    shapes.IRQ_STEERING: check_irq_steering,
    shapes.IRQBALANCE: check_irqbalance,
}
#: Checks that need the daemon serving.
NEEDS_DAEMON = {shapes.DEVICES, shapes.POOLS, shapes.HOTPLUG, shapes.STATIC_PINNER,
                shapes.HOOK_RUNC, shapes.HOOK_CRUN, shapes.HOST_CONFIG, shapes.USAGE, *shapes.NODE_WIDE,
                shapes.ESCAPE_RUNC, shapes.ESCAPE_CRUN, shapes.IRQ_STEERING, shapes.IRQBALANCE}
#: The order that lets later checks use earlier answers (pinners and hooks use the pools' answers).
ORDER = [shapes.KERNEL, shapes.POOLS, shapes.DEVICES, shapes.HOST_CONFIG, shapes.STATIC_PINNER,
         shapes.HOOK_RUNC, shapes.HOOK_CRUN, *shapes.NODE_WIDE, shapes.ESCAPE_RUNC,
         shapes.ESCAPE_CRUN, shapes.HOTPLUG, shapes.USAGE, shapes.IRQ_STEERING, shapes.IRQBALANCE,
         shapes.DESCRIBE, shapes.NO_REBOOT]


def progress(message: str) -> None:
    """One line on the VM's console (the host keeps it beside the result), so a hang shows where."""
    print(f"[cmk-node {float(read('/proc/uptime').split()[0]):7.1f}] {message}", file=sys.stderr, flush=True)


def run(plan: dict[str, Any]) -> dict[str, Any]:
    shape = shapes.SHAPES[plan["shape"]]
    started = time.monotonic()
    facts = kernel_facts()
    result: dict[str, Any] = {"shape": shape.name, "kernel": facts, "checks": {}, "figures": {},
                              "uptime_at_start": float(read("/proc/uptime").split()[0])}
    work = Path(tempfile.mkdtemp(prefix="cmk-node-", dir="/tmp"))
    node = Node(shape, work, facts, Path(plan["install_dir"]))
    checks = plan.get("checks", shape.checks)
    try:
        if NEEDS_DAEMON & set(checks):
            t = time.monotonic()
            progress("starting the daemon")
            node.launch()
        for name in checks:
            if name in BACKGROUND:
                start_cmk_json(BACKGROUND[name])
        if NEEDS_DAEMON & set(checks):
            node.connect()
            result["figures"]["daemon_start_seconds"] = round(time.monotonic() - t, 2)
        for name in sorted(checks, key=ORDER.index):
            progress(name)
            t = time.monotonic()
            try:
                function = CHECKS[name]
                args = (node, plan, result["figures"]) if function.__code__.co_argcount == 3 else (node, plan)
                result["checks"][name] = {"ok": True, "detail": function(*args)}
            except CheckFailed as failed:
                result["checks"][name] = {"ok": False, "detail": str(failed)}
            except Exception:  # noqa: BLE001 - recorded for the host-side test to show
                result["checks"][name] = {"ok": False, "detail": traceback.format_exc()}
            result["checks"][name]["seconds"] = round(time.monotonic() - t, 2)
    except Exception:  # noqa: BLE001
        result["error"] = traceback.format_exc() + "\ndaemon log:\n" + (
            node.daemon_log()[-3000:] if node.log.exists() else "(none)")
    finally:
        try:
            node.stop()
        except Exception:  # noqa: BLE001
            result.setdefault("error", traceback.format_exc())
    result["guest_seconds"] = round(time.monotonic() - started, 2)
    progress(f"done in {result['guest_seconds']} s")
    return result


def main(argv: list[str]) -> int:
    plan_path = Path(argv[0])
    plan = json.loads(plan_path.read_text())
    result = run(plan)
    out = Path(plan["result"])
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1))
    tmp.rename(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
