"""One exclusive core for a pod four ways, side by side on the cluster tier's real node, in one run.

Issue 31's comparison: (a) device-plugin mode, deploy/examples' CDI-only pod as the tier runs it;
(b) DRA mode (``mode: dra`` in the daemon's config, ``deploy/dra``'s DeviceClasses), the same pod YAML
served through the class's ``extendedResourceName``; (c) DRA mode, the pod asking through a
ResourceClaimTemplate for one device of ``exclusive.cpu.cmk.intel.com``; (d) kubernetes-sigs'
dra-driver-cpu (``dracpu``, built by ``.ci/build-dra-peers``: ``CMK_DRA_PEERS_BIN``) run as a host
process with our DaemonSet removed first (through NRI it sets every container's cpuset, so it needs the
node alone), the pod asking through a template for one CPU of its DeviceClass ``dra.cpu`` with its
``cpu`` request equal to the claim's CPUs, as its README says.

The node comes up with containerd's NRI on (no plugin touches a container until ``dracpu`` starts) and
``/var/run/cdi`` among containerd's CDI directories (``dracpu`` writes its specs there, a fixed path);
its other fixed path, ``/var/lib/kubelet/plugins_registry``, is made the tier kubelet's by a symlink
for the side's length. Each side: ``--pods`` pods one at a time (the node has one exclusive core):
create, wait Running, read, delete. Per side it prints create -> Running p50/p90 from the pod's own
``creationTimestamp`` to its Ready condition (the API server's clock, whole seconds) and by the wall
clock (``kubectl create`` to the watch event showing Running), the CPUs each pod got (its process's
``Cpus_allowed_list`` and its cpuset), the cpuset of a BestEffort pod started beside the last one, the
RSS of the daemon (of its ``daemon`` container) or of ``dracpu``, and, after a kubelet restart, when the
plugins were back (the kubelet's log: device plugins, its line taking the plugin's healthy devices; DRA
drivers, its line registering the driver, written at ``--v=3``, which the restarted kubelet runs with)
and when the first pod created then that the kubelet admits was Running (and how many it refused first).

    python benchmarks/dra_side_by_side.py [--pods 20]

Needs root, the components ``.ci/build-cluster`` builds (``CMK_CLUSTER_BIN``), the peers
(``CMK_DRA_PEERS_BIN``) and the machine's cluster lock: it waits while the cluster tier runs.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime
import json
import os
import queue
import re
import shutil
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.cluster import PodWatch, best_effort_pod, local_plan
from deviceplugin.model.cpulist import format_cpu_list, parse_cpu_list
from deviceplugin.model.resourceslices import DRIVER_NAME
from tests.cluster.deploy import (
    DEPLOY,
    NAMESPACE,
    RESOURCE_PREFIX,
    container_ids,
    delete_pod,
    deploy_product,
    example,
    remove_kustomize_deploy,
    start_pod,
    view,
    workload_pod,
)
from tests.cluster.dra import (
    allocatable,
    config_overlay,
    daemon_rollout,
    dra_peers_bin,
    published,
)
from tests.cluster.images import node_with_images
from tests.cluster.node import NODE_NAME, Node, Process, free_port, wait_for

EXCLUSIVE = f"{RESOURCE_PREFIX}exclusive-cores"
CMK_EXCLUSIVE_CLASS = "exclusive.cpu.cmk.intel.com"
#: dra-driver-cpu's driver and DeviceClass name (its manifests/base/deviceclass-dracpu.part.yaml)
DRACPU_DRIVER = "dra.cpu"
#: the paths dracpu fixes (docs/design/dra-peers.md)
FIXED_REGISTRY = Path("/var/lib/kubelet/plugins_registry")
FIXED_PLUGINS = Path("/var/lib/kubelet/plugins")
FIXED_CDI = Path("/var/run/cdi")
#: a klog header: severity, month and day, wall time (``I1203 15:01:02.123456``)
KLOG_TIME = re.compile(r"^[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d\.\d+)")


# --- pure parts ----------------------------------------------------------------------------------


def percentile(values: list[float], fraction: float) -> float:
    """The ``fraction`` quantile of ``values`` by linear interpolation (p50 is the median)."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * fraction
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def api_time(stamp: str) -> float:
    """An API server time stamp (``2026-12-03T15:01:02Z``) as seconds since the epoch."""
    return datetime.datetime.fromisoformat(stamp).timestamp()


def klog_time(line: str, year: int) -> float | None:
    """When a klog line (the kubelet's log, UTC here) was written, as seconds since the epoch; None for another line."""
    found = KLOG_TIME.match(line)
    if found is None:
        return None
    month, day, hour, minute, second = found.groups()
    whole = datetime.datetime(year, int(month), int(day), int(hour), int(minute), tzinfo=datetime.UTC)
    return whole.timestamp() + float(second)


def dra_registered(driver: str) -> Callable[[str], bool]:
    """The kubelet's line registering DRA driver ``driver`` (its DRA plugin manager, at ``--v=3``)."""
    return lambda line: '"Registered DRA plugin"' in line and f'driverName="{driver}"' in line


def device_plugin_serving(resource: str) -> Callable[[str], bool]:
    """The kubelet's line taking a registered device plugin's healthy devices for ``resource``.

    Not the pod resources API's allocatable: right after a restart it lists the checkpoint's devices.
    """
    return lambda line: ('"Processed device updates for resource"' in line and f'resourceName="{resource}"' in line
                         and "healthyCount=0" not in line)


def first_at(lines: list[str], wanted: Callable[[str], bool], year: int) -> float | None:
    """When the first of the kubelet's ``lines`` that is ``wanted`` was written."""
    for line in lines:
        if wanted(line):
            return klog_time(line, year)
    return None


def claim_template(name: str, request: dict[str, Any]) -> dict[str, Any]:
    """A ResourceClaimTemplate of one request named ``cpus``."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": name},
            "spec": {"spec": {"devices": {"requests": [{"name": "cpus", "exactly": request}]}}}}


def claim_pod(pod: dict[str, Any], template: str) -> dict[str, Any]:
    """``pod`` with its cmk.intel.com limits replaced by one claim from ``template`` for its one container
    (its ``cpu`` kept: the claim's CPUs, as dra-driver-cpu's README asks)."""
    changed = copy.deepcopy(pod)
    (container,) = changed["spec"]["containers"]
    for part in ("requests", "limits"):
        container["resources"][part] = {k: v for k, v in container["resources"][part].items()
                                        if not k.startswith(RESOURCE_PREFIX)}
    container["resources"]["claims"] = [{"name": "cpus"}]
    changed["spec"]["resourceClaims"] = [{"name": "cpus", "resourceClaimTemplateName": template}]
    return changed


def dracpu_class() -> dict[str, Any]:
    """dra-driver-cpu's DeviceClass ``dra.cpu`` (no ``extendedResourceName``: it ships none)."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": DRACPU_DRIVER},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRACPU_DRIVER}"'}}]}}


@dataclass(frozen=True)
class PodFigures:
    api_seconds: float  # creationTimestamp -> Ready's lastTransitionTime
    wall_seconds: float  # kubectl create -> the watch shows Running
    cpus_allowed: str  # Cpus_allowed_list of its process
    cpuset: str  # its cpuset cgroup's cpuset.cpus


@dataclass(frozen=True)
class Side:
    label: str
    pods: list[PodFigures]
    best_effort: str  # the cpuset of a BestEffort pod started beside the last pod
    held: str  # the last pod's CPUs (its cpuset) while the BestEffort pod ran
    rss_kib: int
    restart_ready: float | None  # kubelet restart -> devices back / driver registered (s)
    restart_pod: float | None  # kubelet restart -> the first pod created once ready that runs is Running (s)
    restart_refused: int  # pods created once ready that the kubelet refused before that one


def ratio(value: float | None, base: float | None) -> str:
    return f"{value / base:.2f}x" if value is not None and base else "-"


def seconds(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def got(side: Side) -> str:
    """The CPUs each pod got: ``1 x20``, or every distinct (allowed list / cpuset) pair with its count."""
    pairs: dict[str, int] = {}
    for pod in side.pods:
        key = pod.cpuset if pod.cpus_allowed == pod.cpuset else f"{pod.cpus_allowed}/{pod.cpuset}"
        pairs[key] = pairs.get(key, 0) + 1
    return ", ".join(f"{key} x{count}" for key, count in sorted(pairs.items()))


def shares(side: Side) -> str:
    overlap = parse_cpu_list(side.best_effort) & parse_cpu_list(side.held)
    return f"{side.best_effort} ({'shares ' + format_cpu_list(overlap) if overlap else 'not on them'})"


def table(sides: list[Side]) -> list[str]:
    """One row per figure, one column per side, each figure beside its ratio to the first side."""
    base = sides[0]
    rows: list[tuple[str, Callable[[Side], float | None]]] = [
        ("create->Ready p50, API s", lambda s: percentile([p.api_seconds for p in s.pods], 0.5)),
        ("create->Ready p90, API s", lambda s: percentile([p.api_seconds for p in s.pods], 0.9)),
        ("create->Running p50, wall s", lambda s: percentile([p.wall_seconds for p in s.pods], 0.5)),
        ("create->Running p90, wall s", lambda s: percentile([p.wall_seconds for p in s.pods], 0.9)),
        ("driver/daemon RSS MiB", lambda s: s.rss_kib / 1024),
        ("kubelet restart->plugin ready s", lambda s: s.restart_ready),
        ("kubelet restart->new pod Running s", lambda s: s.restart_pod),
        ("pods refused after the restart", lambda s: s.restart_refused),
    ]
    width = max(24, *(len(s.label) for s in sides))
    lines = [f"{'':<34} " + " ".join(f"{s.label:<{width}}" for s in sides)]
    for title, figure in rows:
        cells = []
        for side in sides:
            value = figure(side)
            cells.append(f"{seconds(value)} ({ratio(value, figure(base))})")
        lines.append(f"{title:<34} " + " ".join(f"{c:<{width}}" for c in cells))
    lines.append(f"{'CPUs each pod got':<34} " + " ".join(f"{got(s):<{width}}" for s in sides))
    lines.append(f"{'BestEffort pod beside it':<34} " + " ".join(f"{shares(s):<{width}}" for s in sides))
    return lines


# --- on the node ---------------------------------------------------------------------------------


def vm_rss_kib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")))


def daemon_pid(node: Node) -> int:
    pods = node.kubectl_json("-n", NAMESPACE, "get", "pods", "-l", "app.kubernetes.io/component=daemon")["items"]
    (pod,) = [p["metadata"]["name"] for p in pods if p["status"].get("phase") == "Running"]
    return view(node, container_ids(node, NAMESPACE, pod)["daemon"]).pid


def running_at(node: Node, watch: PodWatch, name: str) -> float:
    """When the watch saw pod ``name`` Running; a pod that does not run within 3 minutes ends the run with
    what ``kubectl describe`` says of it."""
    try:
        return watch.running_at(name, timeout=180)
    except queue.Empty:
        described = node.kubectl("describe", "pod", name, check=False).stdout[-3000:]
        raise RuntimeError(f"pod {name} did not run within 180 s:\n{described}") from None


def run_pod(node: Node, watch: PodWatch, manifest: dict[str, Any]) -> PodFigures:
    """Create ``manifest``, wait until it runs and is Ready, and read what it got."""
    name = manifest["metadata"]["name"]
    started = time.monotonic()
    node.kubectl("create", "-f", "-", input=json.dumps(manifest))
    wall = running_at(node, watch, name) - started
    node.kubectl("wait", "--for=condition=Ready", f"pod/{name}", "--timeout=120s", timeout=150)
    found = node.kubectl_json("get", "pod", name)
    (ready,) = [c for c in found["status"]["conditions"] if c["type"] == "Ready"]
    api = api_time(ready["lastTransitionTime"]) - api_time(found["metadata"]["creationTimestamp"])
    (container_id,) = container_ids(node, "default", name).values()
    seen = view(node, container_id)
    return PodFigures(api, wall, format_cpu_list(parse_cpu_list(seen.cpus_allowed)),
                      format_cpu_list(parse_cpu_list(seen.cpuset)))


@dataclass(frozen=True)
class Way:
    """One way of getting the core: its pod, and how to tell the plugins are back after a kubelet restart."""

    key: str
    label: str
    pod: dict[str, Any]
    ready: Callable[[str], bool]  # the kubelet's log line saying the plugins are back
    pid: Callable[[], int]  # the daemon's or driver's process
    recover: Callable[[], None] = lambda: None  # after a restart that left nothing served: the way back


def ready_after(node: Node, restarted: float, wanted: Callable[[str], bool], timeout: float = 60) -> float | None:
    """Seconds from ``restarted`` (wall clock) to the kubelet's first ``wanted`` log line after it; None if none came."""
    log = node.processes["kubelet"].log
    year = datetime.datetime.now(datetime.UTC).year
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = [line for line in log.read_text(errors="replace").splitlines()
                 if (klog_time(line, year) or 0) >= restarted]
        at = first_at(lines, wanted, year)
        if at is not None:
            return at - restarted
        time.sleep(0.1)
    return None


def first_pod_running(node: Node, way: Way, started: float, timeout: float = 60) -> tuple[float | None, int]:
    """Pods of ``way`` created one after another until one runs: (monotonic ``started`` -> it is Running, or
    None when none ran within ``timeout``; how many the kubelet refused first). A device plugin's pod can fail
    admission after a restart; a DRA driver whose slices the restarted kubelet deleted serves none."""
    refused = 0
    deadline = time.monotonic() + timeout
    while True:
        manifest = copy.deepcopy(way.pod)
        name = manifest["metadata"]["name"] = f"bench-{way.key}-after-restart-{refused}"
        node.kubectl("create", "-f", "-", input=json.dumps(manifest))
        while True:
            phase = node.kubectl("get", "pod", name, "-o", "jsonpath={.status.phase}", check=False, timeout=10).stdout
            if phase == "Running":
                at = time.monotonic()
                delete_pod(node, name)
                return at - started, refused
            if phase == "Failed":
                delete_pod(node, name)
                refused += 1
                break
            if time.monotonic() > deadline:
                described = node.kubectl("describe", "pod", name, check=False).stdout.splitlines()[-2:]
                print(f"{way.label}: no pod ran within {timeout:g} s of the kubelet restart: {described}", flush=True)
                delete_pod(node, name)
                return None, refused
            time.sleep(0.1)


def run_way(node: Node, watch: PodWatch, way: Way, pods: int) -> Side:
    """``pods`` pods one after another; the last stays while a BestEffort pod starts; then a kubelet restart."""
    figures: list[PodFigures] = []
    last = ""
    for index in range(pods):
        if last:
            delete_pod(node, last)
        manifest = copy.deepcopy(way.pod)
        last = manifest["metadata"]["name"] = f"bench-{way.key}-{index}"
        figures.append(run_pod(node, watch, manifest))
    best_effort = start_pod(node, best_effort_pod(f"bench-{way.key}-besteffort"))
    (container_id,) = container_ids(node, "default", best_effort).values()
    shared = format_cpu_list(parse_cpu_list(view(node, container_id).cpuset))
    rss = vm_rss_kib(way.pid())
    for pod in (best_effort, last):
        delete_pod(node, pod)
    started = node.restart_kubelet()
    restarted = time.time() - (time.monotonic() - started)
    ready = ready_after(node, restarted, way.ready)
    wait_for("the node is Ready after the kubelet restart", node.node_ready, 120)
    after, refused = first_pod_running(node, way, started)
    if after is None:
        way.recover()
    return Side(way.label, figures, shared, figures[-1].cpuset, rss, ready, after, refused)


def restart_daemon(node: Node) -> None:
    """The daemon pod deleted and rolled out again: it publishes the node's slices at its start."""
    node.kubectl("-n", NAMESPACE, "delete", "pod", "-l", "app.kubernetes.io/component=daemon", "--wait=true")
    daemon_rollout(node)
    wait_for("the restarted daemon's slices", lambda: "exclusive" in published(node), 90)


def switch_to_dra(node: Node, overlay: Path) -> None:
    """``mode: dra`` rolled out as an operator does, until the slices are up and the device plugins' name is gone."""
    node.kubectl("apply", "-k", str(DEPLOY / "dra"))
    node.kubectl("apply", "-k", str(config_overlay(node, overlay, "overlay-dra", "mode: dra\n")))
    daemon_rollout(node)
    wait_for("the node's slices are published", lambda: "exclusive" in published(node), 90)
    wait_for("the kubelet's allocatable of the device plugins' names is 0",
             lambda: allocatable(node, EXCLUSIVE) in (None, "0"), 120)


@contextlib.contextmanager
def dracpu_running(node: Node, bin_dir: Path) -> Iterator[Process]:
    """``dracpu`` as a host process of this node, its fixed registration path the tier kubelet's; on the way
    out it is stopped and what this made is removed (the symlink, its plugin directory, its CDI specs)."""
    made: list[Path] = []
    cdi_before = set(FIXED_CDI.iterdir())
    FIXED_REGISTRY.parent.mkdir(parents=True, exist_ok=True)
    if not FIXED_REGISTRY.exists() and not FIXED_REGISTRY.is_symlink():
        FIXED_REGISTRY.symlink_to(node.kubelet_root / "plugins_registry")
        made.append(FIXED_REGISTRY)
    if not FIXED_PLUGINS.exists():
        made.append(FIXED_PLUGINS)
    port = free_port()
    process = Process("dracpu", [str(bin_dir / "dracpu"), f"--kubeconfig={node.kubeconfig}",
                                 f"--hostname-override={NODE_NAME}", f"--bind-address=127.0.0.1:{port}", "--v=4"],
                      node.logs / "dracpu.log")
    node.kubectl("apply", "-f", "-", input=json.dumps(dracpu_class()))
    try:
        process.start()
        node.processes["dracpu"] = process
        wait_for("dracpu's /healthz", lambda: healthy(port), 90, alive=process.check_alive)
        wait_for("dracpu's slice", lambda: bool(node.kubectl_json(
            "get", "resourceslices", "--field-selector", f"spec.nodeName={NODE_NAME},spec.driver={DRACPU_DRIVER}")
            ["items"]), 60, alive=process.check_alive)
        yield process
    finally:
        process.stop()
        node.processes.pop("dracpu", None)
        node.kubectl("delete", "deviceclass", DRACPU_DRIVER, "--ignore-not-found", check=False)
        for path in made:
            if path.is_symlink():
                path.unlink()
            else:
                shutil.rmtree(path, ignore_errors=True)
        for spec in set(FIXED_CDI.iterdir()) - cdi_before:
            spec.unlink(missing_ok=True)


def healthy(port: int) -> bool:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as answer:
        return bool(answer.status == 200)


def measure(node: Node, pods: int, threads: int) -> list[Side]:
    watch = PodWatch(node)
    node.kubelet_verbosity = 3  # from the first restart on: the kubelet logs each DRA plugin it registers
    try:
        deployed = deploy_product(node)
        pod = workload_pod(example("pod-cdi-only.yaml"), deployed.served(), threads)
        sides = [run_way(node, watch, Way("dp", "(a) device plugin", pod, device_plugin_serving(EXCLUSIVE),
                                          lambda: daemon_pid(node)), pods)]
        switch_to_dra(node, deployed.overlay)
        sides.append(run_way(node, watch, Way("dra-ext", "(b) DRA, extended name", pod,
                                              dra_registered(DRIVER_NAME), lambda: daemon_pid(node),
                                              lambda: restart_daemon(node)), pods))
        node.kubectl("apply", "-f", "-", input=json.dumps(claim_template(
            "bench-cmk-core", {"deviceClassName": CMK_EXCLUSIVE_CLASS, "count": 1})))
        sides.append(run_way(node, watch, Way("dra-claim", "(c) DRA, claim", claim_pod(pod, "bench-cmk-core"),
                                              dra_registered(DRIVER_NAME), lambda: daemon_pid(node),
                                              lambda: restart_daemon(node)), pods))
        # dracpu sets every container's cpuset through NRI: it gets the node alone
        remove_kustomize_deploy(node)
        node.kubectl("delete", "-k", str(DEPLOY / "dra"), "--ignore-not-found", check=False)
        node.kubectl("apply", "-f", "-", input=json.dumps(claim_template(
            "bench-dracpu", {"deviceClassName": DRACPU_DRIVER, "capacity": {"requests": {"dra.cpu/cpu": str(threads)}}})))
        with dracpu_running(node, dra_peers_bin()) as driver:
            popen = driver.popen
            assert popen is not None
            sides.append(run_way(node, watch, Way("dracpu", "(d) dra-driver-cpu v0.2.0", claim_pod(pod, "bench-dracpu"),
                                                  dra_registered(DRACPU_DRIVER), lambda: popen.pid), pods))
        return sides
    finally:
        watch.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=20, help="pods per side (default 20)")
    args = parser.parse_args()
    if args.pods < 2:
        parser.error("--pods must be at least 2 (a p90 of one pod says nothing)")
    described = local_plan()
    pools = {p["pool"]: p for p in described["plan"]["pools"]}
    if not pools["exclusive"]["advertised"]:
        print("DRA side by side: this machine's plan has no exclusive core to compare", file=sys.stderr)
        return 1
    threads = int(described["topology"]["threads_per_core_max"])
    cdi_made = not FIXED_CDI.exists()
    FIXED_CDI.mkdir(parents=True, exist_ok=True)
    try:
        work = Path(tempfile.mkdtemp(prefix="cmk-bench-dra-"))  # the components' logs stay for a look after
        print(f"components' logs: {work / 'logs'}", flush=True)
        with node_with_images(work, nri=True, extra_cdi_dirs=(FIXED_CDI,)) as node:
            sides = measure(node, args.pods, threads)
    finally:
        if cdi_made:
            shutil.rmtree(FIXED_CDI, ignore_errors=True)
    print()
    print("\n".join(table(sides)))
    print(f"({args.pods} pods per side, one at a time; ratios to (a); cmk's exclusive pool here: "
          f"{pools['exclusive']['cpus']}, {os.cpu_count()} CPUs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
