"""The kubelet node in the systemd tier's VM: containerd and the kubelet under systemd, the product deployed.

Run as ``python3 -m tests.systemd.kubelet_guest PLAN.json`` after :mod:`tests.systemd.guest`, in the same boot,
with the root's own python3 (standard library and the small pure modules of this repository only). The node is
what docs/user/node-configurations.md's "cgroup v2, systemd" row asks of an operator: containerd as a unit with
``SystemdCgroup = true``, CDI on and the node-wide hook in its base spec, the kubelet as a unit with
``cgroupDriver: systemd`` and ``failCgroupV1`` at its default. The control plane runs on the host, reached
through qemu's user network (:data:`tests.systemd.steps.KUBE_GATEWAY` is the host's loopback as the guest
sees it). The manifests are the host's renderings of deploy/base and deploy/examples. What it records per
step: :data:`tests.systemd.steps.KUBELET_STEPS`; judging is the host's job, nothing here asserts.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import ssl
import subprocess
import sys
import time
import traceback
import urllib.parse
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from deviceplugin.model.hookcontract import RECORD_NAME
from tests.systemd import steps
from tests.systemd.guest import (
    CGROUP,
    allowed_of,
    checked,
    command,
    container_cgroup,
    facts,
    progress,
    read,
    run,
    wait_for_systemd,
    writer,
)

#: Under TCG a pod start takes tens of seconds and the daemon's image minutes to unpack: bounds a hang.
WAIT_SECONDS = 600
CONTAINERD_SOCKET = "/run/containerd/containerd.sock"
KUBELET_ROOT = Path("/var/lib/kubelet")
KUBELET_CONFIG = KUBELET_ROOT / "config.json"
BASE_SPEC = Path("/etc/containerd/cmk-base-spec.json")
INSTALL_DIR = Path("/opt/bin")
CDI_SPEC = Path("/var/run/cdi/cmk.intel.com-cpus.json")
TASKS = Path("/run/containerd/io.containerd.runtime.v2.task/k8s.io")
#: The kubelet's lines about a resize and the device manager (a resize re-admits the pod, devices included).
KUBELET_DEVICE_LINES = re.compile(r"resize|devicemanager|device plugin|unhealthy|ListAndWatch|endpoint", re.IGNORECASE)
#: The writable places of a node (the VM's root is read-only): the kubelet's, containerd's and the CNI's state,
#: the DaemonSet's hostPaths, the logs.
WRITABLE = ("/var/lib", "/var/log", "/opt", "/etc/kubernetes", "/etc/containers", "/etc/containerd", "/etc/cni")
RUNTIME = 'plugins."io.containerd.cri.v1.runtime"'
CONTAINERD_CONFIG = f"""\
version = 3
[plugins."io.containerd.nri.v1.nri"]
  disable = true
[{RUNTIME}]
  enable_cdi = true
  cdi_spec_dirs = ["/var/run/cdi"]
[{RUNTIME}.cni]
  bin_dirs = ["/usr/lib/cni"]
  conf_dir = "/etc/cni/net.d"
[{RUNTIME}.containerd]
  default_runtime_name = "runc"
[{RUNTIME}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
  # docs/user/node-wide-hook.md: the node-wide hook through the handler's base spec
  base_runtime_spec = "{BASE_SPEC}"
[{RUNTIME}.containerd.runtimes.runc.options]
  SystemdCgroup = true
  BinaryName = "/usr/sbin/runc"
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = "{{pause}}"
"""
#: The units as containerd's and kubeadm's packages ship them (containerd.service: Delegate=yes, KillMode=process).
UNITS = {
    "containerd.service": """\
[Unit]
Description=containerd
[Service]
ExecStart={bin}/containerd --config /etc/containerd/config.toml
Delegate=yes
KillMode=process
Restart=always
OOMScoreAdjust=-999
LimitNOFILE=infinity
TasksMax=infinity
""",
    "kubelet.service": f"""\
[Unit]
Description=kubelet
After=containerd.service
[Service]
ExecStart={{bin}}/kubelet --config={KUBELET_CONFIG} --kubeconfig={{kubeconfig}} --hostname-override={{node}} --v=2
Restart=always
RestartSec=2
""",
}


def kubelet_config(**changes: Any) -> dict[str, Any]:
    """The node's KubeletConfiguration: the systemd driver, ``failCgroupV1`` unset (its default refuses v1)."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "cgroupDriver": "systemd",
        "containerRuntimeEndpoint": f"unix://{CONTAINERD_SOCKET}",
        "cpuManagerPolicy": "none",  # cmk host-config's kubelet setting
        "failSwapOn": False,
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,  # imported images stay
        "evictionHard": {"memory.available": "50Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                         "nodefs.inodesFree": "1%"},
        "readOnlyPort": 0, "healthzBindAddress": "127.0.0.1",
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},
        "shutdownGracePeriod": "0s", "resolvConf": "",
        "runtimeRequestTimeout": "10m",  # TCG
        **changes,
    }


class Kube:
    """The host's control plane: reads through its REST API (a kubectl start costs 5-10 s under TCG), changes
    through kubectl (the host's build, shared read-only); and ctr on this node."""

    def __init__(self, plan: dict[str, Any]) -> None:
        self.bin = Path(plan["kube"]["bin"])
        self.kubeconfig = plan["kube"]["admin_kubeconfig"]
        self.node = steps.KUBE_NODE
        config = json.loads(Path(self.kubeconfig).read_text())
        cluster = config["clusters"][0]["cluster"]
        self.server, self.token = cluster["server"], config["users"][0]["user"]["token"]
        self.tls = ssl.create_default_context(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())

    def kubectl(self, *args: str, input: str | None = None, timeout: float = WAIT_SECONDS) -> str:
        done = subprocess.run([str(self.bin / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args], input=input,
                              capture_output=True, text=True, timeout=timeout + 30, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: exit {done.returncode}: {done.stderr.strip()[-1500:]}")
        return done.stdout

    def api(self, path: str) -> Any:
        """GET ``path`` from the API server (``/api/v1/...``), its JSON."""
        request = urllib.request.Request(self.server + path, headers={"Authorization": f"Bearer {self.token}"})
        with urllib.request.urlopen(request, context=self.tls, timeout=60) as answer:
            return json.load(answer)

    def node_object(self) -> Any:
        return self.api(f"/api/v1/nodes/{self.node}")

    def pod(self, name: str, namespace: str = "default") -> Any:
        return self.api(f"/api/v1/namespaces/{namespace}/pods/{name}")

    def pods(self, namespace: str, selector: str) -> list[Any]:
        return list(self.api(f"/api/v1/namespaces/{namespace}/pods?labelSelector={urllib.parse.quote(selector)}")
                    ["items"])

    def ctr(self, *args: str) -> str:
        return checked([str(self.bin / "ctr"), "--address", CONTAINERD_SOCKET, "-n", "k8s.io", *args], WAIT_SECONDS)

    def wait(self, what: str, check: Callable[[], bool], timeout: float = WAIT_SECONDS) -> float:
        """Poll ``check`` until it holds; the seconds it took (RuntimeError naming ``what`` after ``timeout``)."""
        began = time.monotonic()
        while True:
            try:
                if check():
                    return round(time.monotonic() - began, 1)
            except (RuntimeError, OSError, ValueError, KeyError):
                pass
            if time.monotonic() - began > timeout:
                raise RuntimeError(f"{what}: not within {timeout} s; {self.diagnosis()}")
            time.sleep(2)

    def diagnosis(self) -> str:
        pods = run([str(self.bin / "kubectl"), f"--kubeconfig={self.kubeconfig}", "describe", "pods", "-A"]).stdout
        kubelet = run(["journalctl", "--no-pager", "-u", "kubelet", "-n", "25"]).stdout
        return f"pods:\n{pods[-2500:]}\nkubelet:\n{kubelet[-2500:]}"

    def node_ready(self) -> bool:
        status = self.node_object()["status"]
        return any(c["type"] == "Ready" and c["status"] == "True" for c in status["conditions"])

    def pod_ready(self, name: str, namespace: str = "default") -> bool:
        status = self.pod(name, namespace)["status"]
        return any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions", []))

    def container_id(self, pod: str, namespace: str = "default", container: str | None = None) -> str:
        statuses = self.pod(pod, namespace)["status"]["containerStatuses"]
        (found,) = [s for s in statuses if container in (None, s["name"])]
        return str(found["containerID"].split("://", 1)[1])

    @staticmethod
    def pid(container_id: str) -> int:
        """The container's init, as its shim recorded it in the task's bundle."""
        return int((TASKS / container_id / "init.pid").read_text())


# -- bring-up -------------------------------------------------------------------------------


def bring_up(plan: dict[str, Any], kube: Kube, phases: dict[str, float]) -> None:
    """The network, the writable places, containerd and the images, the kubelet; until the node is Ready."""
    began = time.monotonic()
    run(["systemctl", "stop", "kubepods.slice"])  # the first program's pods: the kubelet starts on its own
    checked(["modprobe", "virtio_net"])
    checked(["modprobe", "overlay"])
    interface = next(p.name for p in sorted(Path("/sys/class/net").iterdir()) if p.name != "lo")
    for argv in (["ip", "link", "set", "lo", "up"], ["ip", "link", "set", interface, "up"],
                 ["ip", "addr", "add", steps.KUBE_GUEST_ADDRESS, "dev", interface],
                 ["ip", "route", "add", "default", "via", steps.KUBE_GATEWAY]):
        checked(argv)
    for place in WRITABLE:
        checked(["mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", place])
    for directory in (KUBELET_ROOT, Path("/etc/cni/net.d"), INSTALL_DIR):
        directory.mkdir(parents=True, exist_ok=True)
    # docs/user/node-wide-hook.md's order: the pinner and the record on the node before containerd names the hook
    for item in Path(plan["install_dir"]).iterdir():
        shutil.copy2(item, INSTALL_DIR / item.name)
    BASE_SPEC.write_text(json.dumps(plan["kube"]["base_spec"]))
    Path("/etc/containerd/config.toml").write_text(CONTAINERD_CONFIG.format(pause=plan["kube"]["pause_image"]))
    Path("/etc/cni/net.d/10-cmk.conflist").write_text(json.dumps({
        "cniVersion": "1.0.0", "name": "cmk",
        "plugins": [{"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": False,
                     "ipam": {"type": "host-local", "ranges": [[{"subnet": steps.KUBE_POD_SUBNET}]]}}],
    }))
    kubeconfig = KUBELET_ROOT / "kubeconfig"
    kubeconfig.write_text(plan["kube"]["kubelet_kubeconfig"])
    write_kubelet_config(kubelet_config())
    for name, text in UNITS.items():
        Path("/run/systemd/system", name).write_text(text.format(bin=kube.bin, kubeconfig=kubeconfig,
                                                                 node=steps.KUBE_NODE))
    checked(["systemctl", "daemon-reload"], WAIT_SECONDS)
    checked(["systemctl", "start", "containerd.service"], WAIT_SECONDS)
    kube.wait("containerd answering", lambda: bool(kube.ctr("version")), 120)
    phases["containerd"] = round(time.monotonic() - began, 1)
    progress(f"containerd answers ({phases['containerd']} s)")
    for archive in plan["kube"]["archives"]:  # the sandbox's and the pods' images, before the kubelet wants them
        kube.ctr("images", "import", "--local", archive)
    with ThreadPoolExecutor(max_workers=1) as importer:  # the daemon's image while the kubelet comes up
        imported = importer.submit(kube.ctr, "images", "import", "--local", plan["kube"]["product_archive"])
        checked(["systemctl", "start", "kubelet.service"])
        phases["kubelet_ready"] = kube.wait(f"node {steps.KUBE_NODE} Ready", kube.node_ready)
        imported.result()
    phases["images"] = round(time.monotonic() - began - phases["containerd"], 1)


def write_kubelet_config(config: dict[str, Any]) -> None:
    KUBELET_CONFIG.write_text(json.dumps(config, indent=1))


def deploy(plan: dict[str, Any], kube: Kube, phases: dict[str, float]) -> None:
    """README's deploy steps with the host's rendering of the test overlay: label, apply, the rollout."""
    kube.kubectl("label", "node", steps.KUBE_NODE, "cmk.intel.com/cpu-pools=default")
    kube.kubectl("apply", "-f", "-", input=plan["kube"]["product_manifest"])
    began = time.monotonic()
    progress("the DaemonSet applied")
    kube.kubectl("-n", "cmk-system", "rollout", "status", "daemonset/cmk-deviceplugin", f"--timeout={WAIT_SECONDS}s")
    phases["rollout"] = round(time.monotonic() - began, 1)
    phases["registered"] = kube.wait("the node's capacity shows the pools", lambda: bool(cmk_capacity(kube)))


def stretch_cdi_timeouts() -> list[int]:
    """The daemon's CDI spec with its hooks given TCG's time (:data:`tests.systemd.steps.HOOK_TIMEOUT_UNDER_TCG`),
    rewritten as the daemon writes it (a new file renamed over it); the timeouts it had. The daemon writes its
    spec at its start only, so this holds until the next rollout."""
    spec = json.loads(CDI_SPEC.read_text())
    hooks = [hook for device in spec["devices"] for hook in device.get("containerEdits", {}).get("hooks", [])]
    before = sorted({hook.get("timeout", 0) for hook in hooks})
    for hook in hooks:
        hook["timeout"] = max(hook.get("timeout", 0), steps.HOOK_TIMEOUT_UNDER_TCG)
    partial = CDI_SPEC.with_name(f".{CDI_SPEC.name}.tcg")
    partial.write_text(json.dumps(spec))
    partial.rename(CDI_SPEC)
    return before


def cmk_capacity(kube: Kube) -> dict[str, dict[str, str]]:
    status = kube.node_object()["status"]
    return {part: {k: v for k, v in status.get(part, {}).items() if k.startswith("cmk.intel.com/")}
            for part in ("capacity", "allocatable") if any(k.startswith("cmk.intel.com/") for k in status.get(part, {}))}


def daemon_describe(kube: Kube) -> dict[str, Any]:
    """The daemon's own ``cmk describe`` in its container (``ctr tasks exec``: nothing reaches this node's kubelet)."""
    (pod,) = kube.pods("cmk-system", "app.kubernetes.io/name=cmk-deviceplugin")
    container = kube.container_id(pod["metadata"]["name"], "cmk-system", "daemon")
    out = kube.ctr("tasks", "exec", "--exec-id", f"describe-{time.monotonic_ns()}", container, "cmk", "describe",
                   "--config", "/etc/cmk/config.yaml", "--output", "json", "--usage-window", "0")
    described: dict[str, Any] = json.loads(out)
    return described


# -- observing a pod ------------------------------------------------------------------------


def observe(kube: Kube, pod: str) -> dict[str, Any]:
    """The pod's container as the node has it: its init's CPUs, its scope's and its bound's effective cpusets, its
    quota, a process exec'd into it later that asks for every CPU, what systemd holds for its scope and pod slice,
    and the hooks containerd put in its config.json."""
    seen: dict[str, Any] = {}
    try:
        container = kube.container_id(pod)
        seen["container_id"] = container
        pid = kube.pid(container)
    except (RuntimeError, KeyError, ValueError, OSError) as err:
        return {"error": f"{pod}: {err}"}
    seen["init_pid"] = pid
    seen["affinity"] = allowed_of(read(f"/proc/{pid}/status"))
    own = container_cgroup(read(f"/proc/{pid}/cgroup")) or CGROUP
    seen["scope"] = own.name
    seen["scope_effective"] = read(own / "cpuset.cpus.effective")
    seen["bound_effective"] = read(own.parent / "cpuset.cpus.effective")
    seen["pod_slice"] = own.parent.name
    seen["cpu_max"] = read(own / "cpu.max")
    seen["memory_max"] = read(own / "memory.max")
    seen["systemd"] = " ".join(run(["systemctl", "show", "-p", "Id", "-p", "AllowedCPUs", "-p", "CPUQuotaPerSecUSec",
                                    own.name, own.parent.name]).stdout.split())
    online = read("/sys/devices/system/cpu/online")
    done = run([str(kube.bin / "ctr"), "--address", CONTAINERD_SOCKET, "-n", "k8s.io", "tasks", "exec", "--exec-id",
                f"look-{time.monotonic_ns()}", container, "sh", "-c",
                f"taskset -p -c {online} $$ >/dev/null 2>&1; grep Cpus_allowed_list /proc/self/status"])
    seen["exec"] = allowed_of(done.stdout) if done.returncode == 0 else f"<exit {done.returncode}: {done.stderr[-200:]}>"
    try:
        spec = json.loads((TASKS / container / "config.json").read_text())
        seen["hooks"] = [" ".join([h["path"], *h.get("args", [])[1:]])
                         for h in spec.get("hooks", {}).get("createRuntime", [])]
        seen["spec_cpus"] = spec.get("linux", {}).get("resources", {}).get("cpu", {}).get("cpus", "")
    except (OSError, ValueError) as err:
        seen["hooks"] = [f"<{err}>"]
    return seen


# -- the steps ------------------------------------------------------------------------------


def name_of(plan: dict[str, Any], kind: str) -> str:
    """The name of the pod of ``kind`` (:data:`tests.systemd.steps.KUBE_PODS`) the host rendered."""
    return str(plan["kube"]["pods"][kind]["metadata"]["name"])


def container_of(plan: dict[str, Any], kind: str) -> str:
    return str(plan["kube"]["pods"][kind]["spec"]["containers"][0]["name"])


def observe_all(kube: Kube, plan: dict[str, Any], kinds: tuple[str, ...]) -> dict[str, Any]:
    """Each pod observed, side by side (each look starts ``ctr`` and ``systemctl``: seconds under TCG)."""
    with ThreadPoolExecutor(max_workers=len(kinds)) as pool:
        looks = {kind: pool.submit(observe, kube, name_of(plan, kind)) for kind in kinds}
        return {kind: look.result() for kind, look in looks.items()}


def start_pod(kube: Kube, manifest: dict[str, Any]) -> float:
    kube.kubectl("apply", "-f", "-", input=json.dumps(manifest))
    name = manifest["metadata"]["name"]
    return kube.wait(f"pod {name} Ready", lambda: kube.pod_ready(name))


def resize(kube: Kube, pod: str, container: str, resources: dict[str, Any]) -> dict[str, Any]:
    """An in-place resize (the pod's ``resize`` subresource, GA since 1.35) and its outcome once the kubelet acted."""
    began = time.monotonic()
    patch = {"spec": {"containers": [{"name": container, "resources": resources}]}}
    kube.kubectl("patch", "pod", pod, "--subresource", "resize", "--type", "strategic", "-p", json.dumps(patch))

    def applied() -> bool:
        status = kube.pod(pod)["status"]
        (state,) = [c for c in status["containerStatuses"] if c["name"] == container]
        actual = state.get("resources", {})
        done = all(actual.get(part, {}).get(name) == value for part, wanted in resources.items()
                   for name, value in wanted.items())
        return done and not any(c["type"] in ("PodResizePending", "PodResizeInProgress")
                                for c in status.get("conditions", []))
    kube.wait(f"pod {pod} resized", applied)
    events = kube.api(f"/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3D{pod}")["items"]
    return {"seconds": round(time.monotonic() - began, 1),
            "events": [f"{e['reason']}: {e['message'][-300:]}" for e in events if "esize" in e["reason"]]}


def restart_kubelet(kube: Kube) -> dict[str, Any]:
    began = time.monotonic()
    checked(["systemctl", "restart", "kubelet.service"])
    time.sleep(10)  # the old status may still say Ready
    kube.wait("the node Ready after the kubelet's restart", kube.node_ready)
    return {"seconds": round(time.monotonic() - began, 1)}


def rollout_restart(kube: Kube) -> dict[str, Any]:
    began = time.monotonic()
    kube.kubectl("-n", "cmk-system", "rollout", "restart", "daemonset/cmk-deviceplugin")
    kube.kubectl("-n", "cmk-system", "rollout", "status", "daemonset/cmk-deviceplugin", f"--timeout={WAIT_SECONDS}s")
    return {"seconds": round(time.monotonic() - began, 1)}


def step_action(kube: Kube, plan: dict[str, Any], step: str) -> dict[str, Any]:
    """``step``'s own action (:data:`tests.systemd.steps.KUBELET_STEPS`); what it did."""
    if step in ("daemon-reload", "daemon-reexec"):
        done = command(["systemctl", step])
        wait_for_systemd()
        return done
    if step == "resize":
        return {kind: resize(kube, name_of(plan, kind), container_of(plan, kind), resources)
                for kind, resources in plan["kube"]["resizes"].items()}
    if step == "kubelet-restart":
        return restart_kubelet(kube)
    if step == "rollout":
        return {**rollout_restart(kube), "cdi_hook_timeouts": stretch_cdi_timeouts()}
    return {}


def static_cpu_manager(plan: dict[str, Any], kube: Kube, result: dict[str, Any], write: Callable[[], None]) -> None:
    """The kubelet's static CPU manager beside the daemon (its infra record written): a Guaranteed pod and an
    ordinary one keep the CPUs the kubelet gave them, at the start and after a daemon-reload."""
    for kind in steps.KUBE_KINDS:
        kube.kubectl("delete", "pod", name_of(plan, kind), "--grace-period=0", "--force", "--wait=true", f"--timeout={WAIT_SECONDS}s")
    checked(["systemctl", "stop", "kubelet.service"])
    (KUBELET_ROOT / "cpu_manager_state").unlink(missing_ok=True)  # the kubelet refuses another policy's checkpoint
    # the static policy keeps ceil(reserved) whole CPUs for its shared pool (CPU 0 here); 100m leaves 1.9 CPUs
    # allocatable, room for a one-CPU Guaranteed pod beside the daemon (reservedSystemCPUs would leave 1.0)
    write_kubelet_config(kubelet_config(cpuManagerPolicy="static", kubeReserved={"cpu": "100m"}))
    checked(["systemctl", "start", "kubelet.service"])
    time.sleep(10)
    kube.wait("the node Ready with the static CPU manager", kube.node_ready)
    record: dict[str, Any] = {"record": read(INSTALL_DIR / RECORD_NAME)}
    for kind in steps.STATIC_KINDS:
        start_pod(kube, plan["kube"]["pods"][kind])
    for step in ("start", "daemon-reload"):
        if step == "daemon-reload":
            step_action(kube, plan, step)
            time.sleep(2)
        record[step] = observe_all(kube, plan, steps.STATIC_KINDS)
        record[step]["checkpoint"] = json.loads(read(KUBELET_ROOT / "cpu_manager_state") or "{}")
        result["static"] = record
        write()
        progress(f"static CPU manager, {step}: {json.dumps({k: v.get('affinity') for k, v in record[step].items() if isinstance(v, dict)})}")


def run_node(plan: dict[str, Any], result: dict[str, Any], write: Callable[[], None]) -> None:
    kube = Kube(plan)
    phases: dict[str, float] = {}
    result["phases"] = phases
    bring_up(plan, kube, phases)
    progress(f"node Ready: {phases}")
    result["node"] = {"kubelet_config": json.loads(KUBELET_CONFIG.read_text()),
                      "containerd_config": Path("/etc/containerd/config.toml").read_text(),
                      "node_info": kube.node_object()["status"]["nodeInfo"]}
    write()
    deploy(plan, kube, phases)
    result["cdi_spec"] = json.loads(read(CDI_SPEC) or "{}")
    result["hook_timeout"] = {"cdi_spec": stretch_cdi_timeouts(), "used": steps.HOOK_TIMEOUT_UNDER_TCG}
    result["capacity"] = cmk_capacity(kube)
    result["record"] = read(INSTALL_DIR / RECORD_NAME)
    progress(f"deployed: {phases}; capacity {result['capacity']}")
    write()
    with ThreadPoolExecutor(max_workers=1) as describing:  # a Python start in the daemon's container: minutes here
        described = describing.submit(daemon_describe, kube)
        for kind in steps.KUBE_KINDS:
            phases[f"{kind}_start"] = start_pod(kube, plan["kube"]["pods"][kind])
        result["describe"] = described.result()
    result["steps"] = {}
    for step in steps.KUBELET_STEPS:
        began = time.monotonic()
        entry: dict[str, Any] = {}
        try:
            entry["action"] = step_action(kube, plan, step)
        except Exception:  # noqa: BLE001 - the host shows it on this step's tests
            entry["error"] = traceback.format_exc()[-3000:]
        time.sleep(2)  # systemd applies a unit's cgroup context from its event loop
        entry["containers"] = observe_all(kube, plan, steps.KUBE_KINDS)
        entry["seconds"] = round(time.monotonic() - began, 1)
        result["steps"][step] = entry
        write()
        progress(f"{step}: {entry['seconds']} s; " + ", ".join(
            f"{kind} {seen.get('affinity')}/{seen.get('scope_effective')}/{seen.get('bound_effective')}/"
            f"{seen.get('exec')}/{seen.get('cpu_max')}" for kind, seen in entry["containers"].items()))
    static_cpu_manager(plan, kube, result, write)


def logs(result: dict[str, Any]) -> None:
    """What the host shows when a check fails: the daemon's log tail, the kubelet's lines about its devices."""
    daemon = sorted(Path("/var/log/pods").glob("cmk-system_*/daemon/*.log"))
    result["daemon_log"] = [line[-300:] for path in daemon for line in read(path).splitlines()[-60:]]
    done = run(["journalctl", "--no-pager", "-o", "cat", "-u", "kubelet"])
    result["kubelet_device_lines"] = [line[-400:] for line in done.stdout.splitlines()
                                      if KUBELET_DEVICE_LINES.search(line)][-80:]


def main(argv: list[str]) -> int:
    plan = json.loads(Path(argv[1]).read_text())
    result: dict[str, Any] = {"kernel": plan["kernel"]}
    write = writer(Path(plan["kube"]["result"]), result)

    try:
        result["facts"] = facts()
        run_node(plan, result, write)
    except Exception:  # noqa: BLE001 - the host shows it on every test of this kernel
        result["error"] = traceback.format_exc()
        progress(result["error"])
    logs(result)
    write()
    run(["systemctl", "stop", "kubelet.service"])
    run(["systemctl", "kill", "--signal=SIGKILL", "kubepods.slice"])
    progress(f"kubelet node done in {result['guest_seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
