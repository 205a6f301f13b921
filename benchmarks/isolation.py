"""Jitter on the CPU a pod is given, measured as the field measures it, beside the peers, on one real node.

``cyclictest`` (Debian's rt-tests: ``-m -p 80 -i 1000 -t 1 -q -h 20000``, one SCHED_FIFO thread waking
every 1 ms for ``--seconds``) runs in a Guaranteed pod (``cpu: 1``) while three noisy neighbours run
in ordinary BestEffort pods: ``stress-ng --cpu 2`` (CPU), ``--cache 1`` (cache) and ``--timer 1
--timer-freq 100000`` (timer interrupts). The cases, one after another on one node:

a. no pinning: the kubelet's CPU manager policy ``none``, the node-wide hook without an infra record (it
   then leaves every container as it was created), no daemon;
b. the kubelet's static CPU manager (``reservedSystemCPUs``: the CPUs cmk's plan leaves to infra), the
   Guaranteed pod getting its exclusive CPU from the kubelet;
c. the product deployed as README says, the pod asking for ``cmk.intel.com/exclusive-cores: 1``, the
   neighbours confined to infra by the node-wide hook;
d. (c) with the daemon's ``irq-steering: [exclusive]`` (the config key of ``--irq-steering``) and the
   host's ``/proc/irq`` mounted as ``deploy/overlays/irq-steering`` mounts it, where this checkout's
   daemon has the flag; the daemon's own log lines on IRQs are printed;
e. nri-plugins' balloons policy through containerd's NRI (``--balloons PATH``: the ``balloons``
   binary, built as docs/dev/benchmarks.md says): reserved ``cpuset:0``-style (the plan's infra CPUs),
   the pod annotated into a one-CPU ``isolated`` balloon, the neighbours into ``reserved``.

Per case: cyclictest's max and p99 latency (from its histogram, 1 µs buckets), the involuntary context
switches of its threads (``nonvoluntary_ctxt_switches`` in the host's ``/proc/PID/task/*/status``,
the last reading before it exits) and the interrupts on the measured CPU (read once a second: the
growth of ``/proc/interrupts``' column of the CPU the measuring thread was on at that second's end,
scaled to the run's length), the steal time of that CPU (/proc/stat: what the hypervisor took from this
VM), each case's ratio to case (a), and where the measuring thread ran (in
case (a) it may float). The neighbours start first and run for the whole measurement. In case (d)
the note says how many IRQ masks still include the measured CPU half-way through, and the benchmark
writes back any mask the daemon did not give back before it was removed.

What the measuring container is given: ``CAP_SYS_NICE`` (SCHED_FIFO) and ``CAP_IPC_LOCK`` (``-m``:
mlockall), not ``privileged``; and, since this kernel has RT group scheduling (``cpu.rt_runtime_us``)
and a new cgroup gets no RT time, the benchmark grants 200 ms/s of RT time down the container's ``cpu``
cgroup path from the host before cyclictest starts (``kubectl exec``, which joins that cgroup).

    python benchmarks/isolation.py [--seconds 60] [--cases abcde] [--balloons PATH]

Needs root, the components ``.ci/build-cluster`` builds (``CMK_CLUSTER_BIN``), buildah, rt-tests and
stress-ng on the host (their binaries and libraries make the image), and the machine's cluster lock.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from deviceplugin.model.cpulist import format_cpu_list, parse_cpu_list
from deviceplugin.model.hookcontract import RECORD_NAME
from tests.cluster.deploy import (
    NAMESPACE,
    RESOURCE_PREFIX,
    Deployment,
    container_ids,
    delete_pod,
    deploy_product,
    rollout,
    start_pod,
    view,
)
from tests.cluster.images import node_with_images
from tests.cluster.node import Node, free_port, wait_for
from tests.support.podman import cgroup_dir

JITTER_IMAGE = "localhost/cmk-cluster/jitter:bookworm"
TOOLS = (Path("/usr/bin/cyclictest"), Path("/usr/bin/stress-ng"))
BUSYBOX = Path("/bin/busybox")  # Debian's busybox-static: the image's sh and sleep
HISTOGRAM_US = 20000  # cyclictest -h: 1 µs buckets up to 20 ms, the rest counted as overflows
RT_RUNTIME_US = 200000  # per cpu.rt_period_us (1 s) on each level of the measuring container's cgroup path
NEIGHBOURS = {
    "cpu": ["--cpu", "2"],
    "cache": ["--cache", "1"],
    "timer": ["--timer", "1", "--timer-freq", "100000"],
}
BALLOON_ANNOTATION = "balloon.balloons.resource-policy.nri.io"
CASES = {
    "a": "(a) no pinning (policy none, no hook)",
    "b": "(b) kubelet static, Guaranteed cpu: 1",
    "c": "(c) cmk.intel.com/exclusive-cores: 1",
    "d": "(d) (c) + irq-steering: [exclusive]",
    "e": "(e) nri-plugins balloons (NRI)",
}


@dataclass(frozen=True)
class Figures:
    case: str
    max_us: int
    p99_us: int | None  # None: beyond the histogram
    samples: int
    nonvoluntary: int  # cyclictest's threads
    irqs: int  # on the measured CPU while cyclictest ran
    steal_ms: int  # time the hypervisor ran something else on that CPU (/proc/stat's steal)
    seconds: float  # between the two /proc/interrupts readings
    ran_on: Counter[int]  # the measuring thread's CPU, sampled once a second
    note: str = ""


@dataclass(frozen=True)
class Skipped:
    case: str
    why: str


# --- the image ----------------------------------------------------------------------------------


def libraries(binary: Path) -> set[Path]:
    """The shared objects ``ldd`` says ``binary`` loads, the dynamic loader included."""
    found = set()
    for line in subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=True).stdout.splitlines():
        for word in line.split():
            if word.startswith("/"):
                found.add(Path(word))
    return found


def jitter_archive(work: Path) -> Path:
    """An image of cyclictest and stress-ng as Debian built them (their binaries and ``ldd``'s libraries) and
    a static busybox, as a docker-archive for ``ctr images import``: the tier's way, no registry."""
    missing = [str(p) for p in (*TOOLS, BUSYBOX) if not p.is_file()]
    if missing:
        raise SystemExit(f"isolation benchmark: {', '.join(missing)} missing: apt-get install rt-tests stress-ng "
                         "busybox-static")
    rootfs = work / "jitter-rootfs"
    for directory in ("bin", "usr/bin", "proc", "sys", "dev", "tmp"):
        (rootfs / directory).mkdir(parents=True, exist_ok=True)
    for path in {*TOOLS, *(lib for tool in TOOLS for lib in libraries(tool))}:
        target = rootfs / path.relative_to("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path.resolve(), target)
    shutil.copy2(BUSYBOX, rootfs / "bin" / "busybox")
    for applet in ("sh", "sleep", "cat"):
        (rootfs / "bin" / applet).symlink_to("busybox")
    (rootfs / "lib64").mkdir(exist_ok=True)
    if not (rootfs / "lib64" / "ld-linux-x86-64.so.2").exists() and Path("/lib64/ld-linux-x86-64.so.2").exists():
        shutil.copy2(Path("/lib64/ld-linux-x86-64.so.2").resolve(), rootfs / "lib64" / "ld-linux-x86-64.so.2")
    archive = work / "jitter.tar"
    container = buildah("from", "scratch")
    image = f"{JITTER_IMAGE}-{os.getpid()}"
    try:
        buildah("copy", container, f"{rootfs}/", "/")
        buildah("commit", "--quiet", container, image)
        buildah("push", "--quiet", image, f"docker-archive:{archive}:{JITTER_IMAGE}")
    finally:
        subprocess.run(["buildah", "rm", container], capture_output=True, check=False)
        subprocess.run(["buildah", "rmi", image], capture_output=True, check=False)
    shutil.rmtree(rootfs)
    return archive


def buildah(*args: str) -> str:
    result = subprocess.run(["buildah", *args], capture_output=True, text=True, timeout=600, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"buildah {' '.join(args)}: {result.stderr.strip()}")
    return result.stdout.strip()


# --- pods ---------------------------------------------------------------------------------------


def measuring_pod(name: str, extra: dict[str, str], annotations: dict[str, str]) -> dict[str, Any]:
    """Guaranteed, one whole CPU (and ``extra`` resources), asleep until cyclictest is exec'd into it."""
    resources = {"cpu": "1", "memory": "64Mi", **extra}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "annotations": annotations},
            "spec": {"automountServiceAccountToken": False, "terminationGracePeriodSeconds": 1,
                     "restartPolicy": "Never",
                     # what deploy/admission asks of a pod holding a cmk.intel.com resource; the same in every case
                     "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                     "containers": [{"name": "app", "image": JITTER_IMAGE, "imagePullPolicy": "Never",
                                     "command": ["sleep", "3600"],
                                     "resources": {"requests": resources, "limits": resources},
                                     "securityContext": {"capabilities": {"add": ["SYS_NICE", "IPC_LOCK"]}}}]}}


def neighbour_pod(name: str, args: list[str], annotations: dict[str, str]) -> dict[str, Any]:
    """An ordinary BestEffort pod running one stress-ng stressor for the whole case."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "annotations": annotations},
            "spec": {"automountServiceAccountToken": False, "terminationGracePeriodSeconds": 1,
                     "restartPolicy": "Never",
                     "containers": [{"name": "app", "image": JITTER_IMAGE, "imagePullPolicy": "Never",
                                     "command": ["stress-ng", *args, "--timeout", "3600", "--quiet"]}]}}


# --- what the host reads ------------------------------------------------------------------------


def cpu_interrupts(text: str | None = None) -> list[int]:
    """Each CPU's column of ``/proc/interrupts`` summed (device lines and the named ones: LOC, RES, ...)."""
    lines = (text if text is not None else Path("/proc/interrupts").read_text()).splitlines()
    columns = len(lines[0].split())
    totals = [0] * columns
    for line in lines[1:]:
        counts = line.split(":", 1)[1].split() if ":" in line else []
        if len(counts) >= columns and all(c.isdigit() for c in counts[:columns]):
            for cpu in range(columns):
                totals[cpu] += int(counts[cpu])
    return totals


def cpu_steal(text: str | None = None) -> dict[int, int]:
    """Each CPU's steal time in clock ticks (``/proc/stat``'s eighth column): what a VM's CPU lost to its host."""
    steal = {}
    for line in (text if text is not None else Path("/proc/stat").read_text()).splitlines():
        name, *fields = line.split()
        if name.startswith("cpu") and name[3:].isdigit() and len(fields) >= 8:
            steal[int(name[3:])] = int(fields[7])
    return steal


def grant_rt_runtime(pid: int) -> None:
    """RT time on each level of ``pid``'s ``cpu`` cgroup path, parents first (a child may not hold more)."""
    leaf = cgroup_dir(pid, "cpu")
    root = Path("/sys/fs/cgroup/cpu")
    levels = [root / Path(*leaf.relative_to(root).parts[:n]) for n in range(1, len(leaf.relative_to(root).parts) + 1)]
    for level in levels:
        runtime = level / "cpu.rt_runtime_us"
        if runtime.exists() and int(runtime.read_text()) < RT_RUNTIME_US:
            runtime.write_text(str(RT_RUNTIME_US))


def find_process(comm: str, cgroup: Path, timeout: float = 30) -> int:
    """The process named ``comm`` whose ``cpu`` cgroup is ``cgroup`` (exec'd into the container)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            with contextlib.suppress(OSError, ValueError):
                if (proc / "comm").read_text().strip() == comm and cgroup_dir(int(proc.name), "cpu") == cgroup:
                    return int(proc.name)
        time.sleep(0.1)
    raise TimeoutError(f"no {comm} process in {cgroup} within {timeout:g} s")


def task_readings(pid: int) -> tuple[int, dict[int, int]]:
    """Involuntary context switches summed over ``pid``'s threads, and each thread's last CPU."""
    nonvoluntary, cpus = 0, {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError, IndexError, ValueError):
            for line in (task / "status").read_text().splitlines():
                if line.startswith("nonvoluntary_ctxt_switches:"):
                    nonvoluntary += int(line.split()[1])
            stat = (task / "stat").read_text()
            cpus[int(task.name)] = int(stat.rsplit(")", 1)[1].split()[36])  # field 39: processor
    return nonvoluntary, cpus


def parse_cyclictest(output: str) -> tuple[int, int | None, int]:
    """(max µs, p99 µs or None when it lies beyond the histogram, samples) from ``cyclictest -q -h N``."""
    counts: list[tuple[int, int]] = []
    maximum = overflows = 0
    for line in output.splitlines():
        if re.fullmatch(r"\d+ \d+", line.strip()):
            bucket, count = (int(x) for x in line.split())
            counts.append((bucket, count))
        elif line.startswith("# Max Latencies:"):
            maximum = int(line.split(":")[1].split()[0])
        elif line.startswith("# Histogram Overflows:"):
            overflows = int(line.split(":")[1].split()[0])
    samples = sum(c for _, c in counts) + overflows
    if not samples:
        raise ValueError(f"no histogram in cyclictest's output:\n{output[-2000:]}")
    seen = 0
    for bucket, count in counts:
        seen += count
        if seen >= 0.99 * samples:
            return maximum, bucket, samples
    return maximum, None, samples


# --- one case -----------------------------------------------------------------------------------


@dataclass
class Bench:
    node: Node
    cpu: int  # the measured CPU: the exclusive pool's
    seconds: int
    annotations: dict[str, str]
    probe: Callable[[], str] | None = None  # read while cyclictest runs; said in the note

    def case(self, case: str, extra: dict[str, str], note: str = "") -> Figures:
        """The neighbours, then cyclictest in the measuring pod; every pod deleted after."""
        names = []
        try:
            for kind, args in NEIGHBOURS.items():
                names.append(f"noisy-{kind}")  # deleted after even if it never becomes Ready
                start_pod(self.node, neighbour_pod(names[-1], args, self.neighbour_annotations()))
            time.sleep(3)  # the stressors up to speed
            names.append("jitter")
            start_pod(self.node, measuring_pod(names[-1], extra, self.measuring_annotations()))
            return self.measure(case, names[-1], note)
        finally:
            for name in names:
                delete_pod(self.node, name)

    def neighbour_annotations(self) -> dict[str, str]:
        return {BALLOON_ANNOTATION: "reserved"} if self.annotations else {}

    def measuring_annotations(self) -> dict[str, str]:
        return dict(self.annotations)

    def measure(self, case: str, pod: str, note: str) -> Figures:
        (container_id,) = container_ids(self.node, "default", pod).values()
        container = view(self.node, container_id)
        grant_rt_runtime(container.pid)
        argv = [str(self.node.bin / "kubectl"), f"--kubeconfig={self.node.kubeconfig}", "exec", pod, "--",
                "cyclictest", "-m", "-p", "80", "-i", "1000", "-t", "1", "-q", "-h", str(HISTOGRAM_US),
                "-D", str(self.seconds)]
        output = self.node.path(f"cyclictest-{case}.out")  # a file: the histogram outgrows a pipe's buffer
        with open(output, "w") as out:
            run = subprocess.Popen(argv, stdout=out, stderr=subprocess.PIPE, text=True)
        pid = find_process("cyclictest", cgroup_dir(container.pid, "cpu"))
        before, stolen_before, started = cpu_interrupts(), cpu_steal(), time.monotonic()
        ended, nonvoluntary, irqs, stolen = started, 0, 0, 0
        ran_on: Counter[int] = Counter()
        probed = ""
        while run.poll() is None:
            if self.probe is not None and not probed and time.monotonic() - started > self.seconds / 2:
                probed = self.probe()
            time.sleep(1)
            with contextlib.suppress(OSError):
                nonvoluntary, cpus = task_readings(pid)
                now, stolen_now, ended = cpu_interrupts(), cpu_steal(), time.monotonic()
                # the measuring thread is the last one (the main thread only waits); each second's
                # interrupts are counted on the CPU it was on at the second's end
                cpu = cpus[max(cpus)] if len(cpus) > 1 else self.cpu
                ran_on[cpu] += 1
                irqs += now[cpu] - before[cpu]
                stolen += stolen_now[cpu] - stolen_before[cpu]
                before, stolen_before = now, stolen_now
        _, err = run.communicate()
        if run.returncode != 0:
            raise RuntimeError(f"cyclictest in {pod}: status {run.returncode}\n{err[-2000:]}")
        maximum, p99, samples = parse_cyclictest(output.read_text())
        allowed = format_cpu_list(parse_cpu_list(container.cpus_allowed))
        steal_ms = stolen * 1000 // os.sysconf("SC_CLK_TCK")
        return Figures(case, maximum, p99, samples, nonvoluntary, irqs, steal_ms, ended - started, ran_on,
                       "; ".join(filter(None, [note or f"pod's CPUs {allowed}", probed])))


# --- the node's settings for each case ----------------------------------------------------------


@contextlib.contextmanager
def record_aside(node: Node) -> Iterator[None]:
    """The infra record moved away: the node-wide hook then leaves each container as it was created."""
    record = node.install_dir / RECORD_NAME
    aside = node.path("infra-record-aside")
    moved = record.is_file()
    if moved:
        record.rename(aside)
    try:
        yield
    finally:
        if moved and aside.is_file():
            aside.rename(record)


def daemon_steers() -> bool:
    """Whether this checkout's daemon has ``--irq-steering`` (case d)."""
    result = subprocess.run([sys.executable, "-m", "deviceplugin", "device-plugin", "--help"], cwd=ROOT,
                            capture_output=True, text=True, check=False)
    return "--irq-steering" in result.stdout


IRQ_OVERLAY = ROOT / "deploy" / "overlays" / "irq-steering" / "kustomization.yaml"
IRQBALANCE_DIR = Path("/run/irqbalance")  # the overlay's hostPath (DirectoryOrCreate)


def steer(deployment: Deployment) -> None:
    """(c)'s deployment with ``irq-steering: [exclusive]`` in the daemon's config, and the host's ``/proc/irq``
    and irqbalance directory mounted as ``deploy/overlays/irq-steering`` mounts them (its ``--irq-dir`` too;
    its ``--irq-steering`` flag is the config key here), rolled out."""
    import yaml
    overlay = deployment.overlay
    config = yaml.safe_load((ROOT / "deploy" / "base" / "config.yaml").read_text()) or {}
    config["irq-steering"] = ["exclusive"]
    (overlay / "config.yaml").write_text(yaml.safe_dump(config))
    (shipped,) = yaml.safe_load(IRQ_OVERLAY.read_text())["patches"]
    ops = [op for op in yaml.safe_load(shipped["patch"]) if not str(op.get("value", "")).startswith("--irq-steering")]
    kustomization = json.loads((overlay / "kustomization.yaml").read_text())
    kustomization["patches"].append({"target": shipped["target"], "patch": json.dumps(ops)})
    kustomization.setdefault("configMapGenerator", []).append(
        {"name": "cmk-config", "behavior": "replace", "files": ["config.yaml"]})
    (overlay / "kustomization.yaml").write_text(json.dumps(kustomization, indent=2))
    deployment.node.kubectl("apply", "-k", str(overlay))
    rollout(deployment.node)


IRQ_DIR = Path("/proc/irq")


def irq_masks() -> dict[str, str]:
    """Every IRQ's ``smp_affinity_list`` and ``default_smp_affinity``, as the host shows them."""
    masks = {path.parent.name: path.read_text().strip() for path in IRQ_DIR.glob("*/smp_affinity_list")}
    masks["default"] = (IRQ_DIR / "default_smp_affinity").read_text().strip()
    return masks


def naming(cpu: int, masks: dict[str, str]) -> str:
    """How many device IRQ masks include ``cpu``, of how many."""
    lists = [mask for irq, mask in masks.items() if irq != "default"]
    return f"{sum(cpu in parse_cpu_list(mask) for mask in lists)} of {len(lists)} IRQ masks include CPU {cpu}"


def restore_masks(found: dict[str, str]) -> list[str]:
    """Write back each mask that differs from ``found``; returns the IRQs written."""
    written = []
    for irq, mask in found.items():
        path = IRQ_DIR / ("default_smp_affinity" if irq == "default" else f"{irq}/smp_affinity_list")
        with contextlib.suppress(OSError):
            if path.read_text().strip() != mask:
                path.write_text(mask)
                written.append(irq)
    return written


def steering_said(node: Node) -> str:
    """The daemon's log lines on IRQs since it started."""
    logs = node.kubectl("-n", NAMESPACE, "logs", "daemonset/cmk-deviceplugin", "-c", "daemon", check=False).stdout
    return "\n".join(line for line in logs.splitlines() if re.search(r"irq", line, re.IGNORECASE))


def summarise_steering(said: str) -> str:
    refused = [line for line in said.splitlines() if "irq_unmovable" in line or "cannot be pointed" in line]
    wrote = re.findall(r"wrote (\d+) IRQ masks for ([^;\"]*)", said)
    errors = sorted({m for line in refused for m in re.findall(r"\(([^()]*)\): the kernel", line)})
    held = [(count, cpus) for count, cpus in wrote if not cpus.startswith("no ")]
    steered = f"wrote {held[0][0]} masks for {held[0][1]}" if held else "wrote no mask for held CPUs"
    return f"daemon: {steered}, {len(refused)} IRQs refused ({', '.join(errors) or '-'})"


def undeploy(deployment: Deployment) -> None:
    node = deployment.node
    node.kubectl("delete", "-k", str(ROOT / "deploy" / "admission"), "--ignore-not-found", "--wait=true")
    node.kubectl("delete", "-k", str(deployment.overlay), "--ignore-not-found", "--wait=true", timeout=240)
    wait_for("the daemon's pods gone", lambda: not node.kubectl(
        "get", "pods", "-A", "-l", "app.kubernetes.io/name=cmk-deviceplugin", "-o", "name").stdout.strip(), 120)


@contextlib.contextmanager
def balloons(node: Node, binary: Path, reserved: str) -> Iterator[None]:
    """containerd restarted with NRI on (its socket in the node's directory), balloons connected to it."""
    config_file = node.path("containerd", "config.toml")
    socket = node.path("nri", "nri.sock")
    socket.parent.mkdir()
    original = config_file.read_text()
    nri_off = '[plugins."io.containerd.nri.v1.nri"]\n  disable = true\n'
    if nri_off not in original:
        raise RuntimeError(f"no NRI section to turn on in {config_file}")
    config_file.write_text(original.replace(nri_off, '[plugins."io.containerd.nri.v1.nri"]\n  disable = false\n'
                                            f'  socket_path = "{socket}"\n'))
    restart_containerd(node)
    policy = node.path("balloons.yaml")
    policy.write_text(json.dumps({
        "apiVersion": "config.nri/v1alpha1", "kind": "BalloonsPolicy", "metadata": {"name": "default"},
        "spec": {"reservedResources": {"cpu": f"cpuset:{reserved}"}, "pinCPU": True, "pinMemory": False,
                 "reservedPoolNamespaces": ["kube-system"],
                 "balloonTypes": [{"name": "isolated", "minCPUs": 1, "maxCPUs": 1, "preferNewBalloons": True}]},
    }, indent=2))
    # balloons mounts a directory of its state into each container with rslave propagation, which
    # containerd allows only from a shared or slave mount: a node booted by systemd has / shared, this
    # machine's / is private, so the state directory becomes a shared mount of its own (unmounted after)
    state = node.path("balloons-state")
    state.mkdir()
    subprocess.run(["mount", "--bind", str(state), str(state)], check=True)
    subprocess.run(["mount", "--make-rshared", str(state)], check=True)
    log = node.logs / "balloons.log"
    containerd_log = node.logs / "containerd.log"
    offset = containerd_log.stat().st_size
    with open(log, "ab") as out:
        process = subprocess.Popen(
            [str(binary), f"--config-file={policy}", f"--nri-socket={socket}",
             f"--state-dir={state}", f"--pid-file={node.path('balloons.pid')}"],
            stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True)
    try:
        def connected() -> bool:
            if process.poll() is not None:
                raise RuntimeError(f"balloons exited (status {process.returncode}): "
                                   + log.read_text(errors="replace")[-1500:])
            with open(containerd_log, "rb") as text:
                text.seek(offset)
                return b"plugin" in text.read().lower()
        wait_for("balloons connected to containerd's NRI", connected, 60)
        time.sleep(3)
        yield
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        subprocess.run(["umount", "-R", str(state)], capture_output=True, check=False)


def reconfigure_kubelet(node: Node, **settings: Any) -> None:
    """:meth:`Node.reconfigure_kubelet` on fresh ports: the tier's ports are ephemeral ones, and while the
    kubelet is down a client connection (this benchmark's kubectl) may take its old port as a local one,
    as a first run of this benchmark saw ("bind: address already in use" for healthz)."""
    for name in ("kubelet", "kubelet-healthz"):
        node.ports[name] = free_port()
    node.reconfigure_kubelet(**settings, port=node.ports["kubelet"], healthzPort=node.ports["kubelet-healthz"])


def restart_containerd(node: Node) -> None:
    containerd = node.processes["containerd"]
    containerd.stop()
    containerd.start()
    wait_for("containerd answering", lambda: node.ctr("version", check=False).returncode == 0, 60,
             alive=containerd.check_alive)


# --- the run ------------------------------------------------------------------------------------


def local_plan() -> dict[str, Any]:
    described: dict[str, Any] = json.loads(subprocess.run(
        [sys.executable, "-m", "deviceplugin", "describe", "--output", "json", "--usage-window", "0",
         "--config", str(ROOT / "deploy" / "base" / "config.yaml")],
        cwd=ROOT, capture_output=True, text=True, check=True).stdout)
    return described


def run_cases(node: Node, cases: str, seconds: int, balloons_binary: Path | None) -> list[Figures | Skipped]:
    pools = {p["pool"]: p for p in local_plan()["plan"]["pools"]}
    infra, exclusive = pools["infra"]["cpus"], pools["exclusive"]["cpus"]
    cpu = min(parse_cpu_list(exclusive))
    bench = Bench(node, cpu, seconds, {})
    exclusive_core = {f"{RESOURCE_PREFIX}exclusive-cores": "1"}
    results: list[Figures | Skipped] = []

    def attempt(case: str, body: Callable[[], Figures | Skipped]) -> None:
        if case not in cases:
            return
        print(f"isolation: {CASES[case]} ...", file=sys.stderr, flush=True)
        try:
            results.append(body())
        except Exception as err:  # noqa: BLE001 -- one case failing says why in the table; the others still run
            results.append(Skipped(case, "failed: " + " | ".join(str(err).strip().splitlines()[:4])[:600]))

    with record_aside(node):
        attempt("a", lambda: bench.case("a", {}))

        def static() -> Figures:
            reconfigure_kubelet(node, cpuManagerPolicy="static", reservedSystemCPUs=infra)
            try:
                return bench.case("b", {})
            finally:
                reconfigure_kubelet(node, cpuManagerPolicy="none", reservedSystemCPUs=None)
        attempt("b", static)

    deployment: Deployment | None = None
    irqbalance_dir_was_there = IRQBALANCE_DIR.exists()
    if {"c", "d"} & set(cases):
        deployment = deploy_product(node)
        attempt("c", lambda: bench.case("c", exclusive_core))

        def steered() -> Figures | Skipped:
            if not daemon_steers():
                return Skipped("d", "this checkout's daemon has no --irq-steering")
            assert deployment is not None
            found = irq_masks()
            try:
                steer(deployment)
                bench.probe = lambda: naming(cpu, irq_masks())
                figures = bench.case("d", exclusive_core)
                bench.probe = None
                said = steering_said(node)
                print(f"isolation: the daemon on IRQs:\n{said or '(nothing)'}", file=sys.stderr, flush=True)
                with contextlib.suppress(TimeoutError):  # the pod is gone: the daemon gives the masks back
                    wait_for("the IRQ masks given back", lambda: irq_masks() == found, 60)
                back = "the daemon gave every mask back" if irq_masks() == found else "masks NOT given back"
                return dataclasses.replace(figures, note=f"{figures.note}; {summarise_steering(said)}; {back}")
            finally:
                written = restore_masks(found)
                if written:
                    print(f"isolation: wrote back the masks of IRQs {', '.join(written)}", file=sys.stderr)
        attempt("d", steered)
        undeploy(deployment)
        if not irqbalance_dir_was_there:  # the overlay's DirectoryOrCreate made it
            with contextlib.suppress(OSError):
                IRQBALANCE_DIR.rmdir()

    def balloon() -> Figures | Skipped:
        if balloons_binary is None:
            return Skipped("e", "no --balloons binary given")
        with record_aside(node), balloons(node, balloons_binary, infra):
            bench.annotations = {BALLOON_ANNOTATION: "isolated"}
            try:
                return bench.case("e", {})
            finally:
                bench.annotations = {}
    attempt("e", balloon)
    return results


def report(results: list[Figures | Skipped], cpu_label: str, seconds: int) -> None:
    base = next((r for r in results if isinstance(r, Figures) and r.case == "a"), None)

    def ratio(value: float | None, floor: float | None) -> str:
        return f"{value / floor:.2f}" if value is not None and floor else "-"

    print(f"\ncyclictest {seconds} s, 1 ms interval, SCHED_FIFO 80; neighbours: stress-ng "
          + ", ".join(" ".join(a) for a in NEIGHBOURS.values()) + f"; measured CPU {cpu_label}")
    print(f"{'case':<40} {'max us':>7} {'p99 us':>7} {'invol cs':>9} {'IRQs':>8}  "
          f"{'max/a':>6} {'p99/a':>6} {'cs/a':>6} {'IRQ/a':>6} {'steal ms':>8}  where the thread ran; note")
    for r in results:
        if isinstance(r, Skipped):
            print(f"{CASES[r.case]:<40} {'-':>7} {'-':>7} {'-':>9} {'-':>8}  not run: {r.why}")
            continue
        p99 = str(r.p99_us) if r.p99_us is not None else f">{HISTOGRAM_US}"
        ran = ", ".join(f"CPU {c}: {n}" for c, n in sorted(r.ran_on.items()))
        irqs = round(r.irqs * seconds / r.seconds) if r.seconds else r.irqs  # per the measured duration
        base_irqs = round(base.irqs * seconds / base.seconds) if base and base.seconds else None
        print(f"{CASES[r.case]:<40} {r.max_us:>7} {p99:>7} {r.nonvoluntary:>9} {irqs:>8}  "
              f"{ratio(r.max_us, base.max_us if base else None):>6} "
              f"{ratio(r.p99_us, base.p99_us if base else None):>6} "
              f"{ratio(r.nonvoluntary, base.nonvoluntary if base else None):>6} "
              f"{ratio(irqs, base_irqs):>6} {r.steal_ms:>8}  {ran}; {r.note}; {r.samples} samples")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=60, help="cyclictest's duration per case (default 60)")
    parser.add_argument("--cases", default="abcde", help="which cases to run (default abcde)")
    parser.add_argument("--balloons", type=Path, help="nri-plugins' balloons binary, for case (e)")
    parser.add_argument("--logs", type=Path, help="keep the components' logs and cyclictest's output here")
    args = parser.parse_args()
    if set(args.cases) - set(CASES):
        parser.error(f"--cases: letters of {''.join(CASES)}")
    pools = {p["pool"]: p for p in local_plan()["plan"]["pools"]}
    if not pools["exclusive"]["advertised"]:
        print("isolation benchmark: this machine's plan has no exclusive core to measure", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="cmk-bench-isolation-") as work, node_with_images(Path(work)) as node:
        node.ctr("images", "import", "--local", str(jitter_archive(Path(work))))
        try:
            results = run_cases(node, args.cases, args.seconds, args.balloons)
        finally:
            if args.logs:
                shutil.copytree(node.logs, args.logs, dirs_exist_ok=True)
                for output in node.base.glob("cyclictest-*.out"):
                    shutil.copy2(output, args.logs)
    report(results, pools["exclusive"]["cpus"], args.seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
