"""The kubelet's own static CPU manager beside cmk's exclusive cores, on one real node, in one run.

The peer is what Kubernetes ships: ``cpuManagerPolicy: static`` gives a Guaranteed container with a
whole ``cpu`` request exclusive CPUs. Our side is the kubelet with the policy ``none`` (what
``cmk host-config`` asks for), the product deployed as README says, and the same pod asking for
``cmk.intel.com/exclusive-cores: 1`` instead. For the static side the kubelet reserves the CPUs
cmk's plan leaves to infra (``reservedSystemCPUs``), so both sides hand out the same CPUs. The infra
record ``cmk install`` wrote stays: the node-wide hook leaves a container whose spec names its CPUs
(as the static policy's do) as the runtime made it, so the static pods print the kubelet's CPUs.

Each side: the same busybox pod (deploy/examples' CDI-only pod, sized to one core) created
``--pods`` times, one at a time; create → Running is timed from just before ``kubectl create`` to
the watch event that shows the pod Running. Printed per side: the median and p90, the ratio to the
static side, the CPUs each pod got (its process's ``Cpus_allowed_list``), and the CPUs a BestEffort
pod started beside the last one may run on.

    python benchmarks/cluster.py [--pods 20]

Needs root, the components ``.ci/build-cluster`` builds (``CMK_CLUSTER_BIN``, else the script is
run) and the machine's cluster lock: it waits while the cluster tier runs.
"""

from __future__ import annotations

import argparse
import copy
import json
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from deviceplugin.model.cpulist import format_cpu_list, parse_cpu_list
from deviceplugin.model.hookcontract import RECORD_NAME
from tests.cluster.deploy import (
    RESOURCE_PREFIX,
    container_ids,
    delete_pod,
    deploy_product,
    example,
    start_pod,
    view,
    workload_pod,
)
from tests.cluster.images import node_with_images
from tests.cluster.node import BUSYBOX_IMAGE, Node


@dataclass(frozen=True)
class Side:
    label: str
    seconds: list[float]  # create -> Running, per pod
    cpus: Counter[str]  # the CPU list each pod's process got -> how many pods
    best_effort: str  # the CPUs a BestEffort pod beside the last pod may run on


class PodWatch:
    """One ``kubectl get pods --watch`` for the run: when each pod was first seen Running."""

    def __init__(self, node: Node) -> None:
        self._process = subprocess.Popen(
            [str(node.bin / "kubectl"), f"--kubeconfig={node.kubeconfig}", "-n", "default", "get", "pods",
             "--watch", "-o", r'jsonpath={.metadata.name} {.status.phase}{"\n"}'],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self._seen: queue.Queue[tuple[float, str, str]] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            name, _, phase = line.strip().partition(" ")
            self._seen.put((time.monotonic(), name, phase))

    def running_at(self, name: str, timeout: float = 180) -> float:
        deadline = time.monotonic() + timeout
        while True:
            at, seen, phase = self._seen.get(timeout=max(0.1, deadline - time.monotonic()))
            if seen == name and phase == "Running":
                return at

    def stop(self) -> None:
        self._process.terminate()
        self._process.wait(timeout=10)


def pod_cpus(node: Node, name: str) -> str:
    (container_id,) = container_ids(node, "default", name).values()
    return format_cpu_list(parse_cpu_list(view(node, container_id).cpus_allowed))


def run_side(node: Node, watch: PodWatch, name: str, label: str, template: dict[str, Any], pods: int) -> Side:
    """``pods`` pods of ``template`` one after another; the last stays while a BestEffort pod starts."""
    seconds: list[float] = []
    cpus: Counter[str] = Counter()
    last = ""
    for index in range(pods):
        if last:
            delete_pod(node, last)
        manifest = copy.deepcopy(template)
        last = manifest["metadata"]["name"] = f"bench-{name}-{index}"
        started = time.monotonic()
        node.kubectl("create", "-f", "-", input=json.dumps(manifest))
        seconds.append(watch.running_at(last) - started)
        cpus[pod_cpus(node, last)] += 1
    best_effort = start_pod(node, best_effort_pod(f"bench-{name}-besteffort"))
    shared = pod_cpus(node, best_effort)
    for pod in (best_effort, last):
        delete_pod(node, pod)
    return Side(label, seconds, cpus, shared)


def static_pod(cmk_pod: dict[str, Any]) -> dict[str, Any]:
    """The same pod with the cmk resource taken out: Guaranteed, whole CPUs, for the static CPU manager."""
    pod = copy.deepcopy(cmk_pod)
    for container in pod["spec"]["containers"]:
        for part in ("requests", "limits"):
            container["resources"][part] = {k: v for k, v in container["resources"][part].items()
                                             if not k.startswith(RESOURCE_PREFIX)}
    return pod


def best_effort_pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"automountServiceAccountToken": False, "restartPolicy": "Never",
                     "securityContext": {"runAsNonRoot": True, "runAsUser": 65534,
                                         "seccompProfile": {"type": "RuntimeDefault"}},
                     "containers": [{"name": "app", "image": BUSYBOX_IMAGE, "imagePullPolicy": "Never",
                                     "command": ["sleep", "3600"],
                                     "securityContext": {"allowPrivilegeEscalation": False,
                                                         "capabilities": {"drop": ["ALL"]}}}]}}


def local_plan() -> dict[str, Any]:
    """``cmk describe`` on this machine: its threads per core and the plan's infra CPUs."""
    described: dict[str, Any] = json.loads(subprocess.run(
        [sys.executable, "-m", "deviceplugin", "describe", "--output", "json", "--usage-window", "0",
         "--config", str(ROOT / "deploy" / "base" / "config.yaml")],
        cwd=ROOT, capture_output=True, text=True, check=True).stdout)
    return described


def report(sides: list[Side], exclusive: str) -> None:
    floor = statistics.median(sides[0].seconds)
    print(f"\n{'side':<34} {'p50 s':>7} {'p90 s':>7} {'ratio':>6}  {'CPUs each pod got':<22} BestEffort pod may run on")
    for side in sides:
        p50 = statistics.median(side.seconds)
        p90 = statistics.quantiles(side.seconds, n=10)[-1] if len(side.seconds) > 1 else p50
        got = ", ".join(f"{cpus} x{n}" for cpus, n in side.cpus.most_common())
        overlap = parse_cpu_list(side.best_effort) & parse_cpu_list(exclusive)
        shares = f"{side.best_effort} ({'shares ' + format_cpu_list(overlap) if overlap else 'none of them'})"
        print(f"{side.label:<34} {p50:>7.2f} {p90:>7.2f} {p50 / floor:>6.2f}  {got:<22} {shares}")
    print(f"(CPUs cmk's plan gives the exclusive pool here: {exclusive}; {len(sides[0].seconds)} pods per side)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=20, help="pods per side (default 20)")
    args = parser.parse_args()
    if args.pods < 1:
        parser.error("--pods must be at least 1")
    described = local_plan()
    pools = {p["pool"]: p for p in described["plan"]["pools"]}
    infra, exclusive = pools["infra"]["cpus"], pools["exclusive"]["cpus"]
    if not pools["exclusive"]["advertised"]:
        print("cluster benchmark: this machine's plan has no exclusive core to compare", file=sys.stderr)
        return 1
    threads = int(described["topology"]["threads_per_core_max"])
    with tempfile.TemporaryDirectory(prefix="cmk-bench-cluster-") as work, node_with_images(Path(work)) as node:
        watch = PodWatch(node)
        try:
            cmk_template = workload_pod(example("pod-cdi-only.yaml"), {f"{RESOURCE_PREFIX}exclusive-cores"}, threads)
            # The static side is a node without the daemon. The infra record stays: the kubelet names
            # each container's CPUs in its spec, and the node-wide hook leaves such a container as it is.
            assert (node.install_dir / RECORD_NAME).is_file()
            node.reconfigure_kubelet(cpuManagerPolicy="static", reservedSystemCPUs=infra)
            sides = [run_side(node, watch, "static", f"kubelet static policy, cpu: {threads}",
                              static_pod(cmk_template), args.pods)]
            node.reconfigure_kubelet(cpuManagerPolicy="none", reservedSystemCPUs=None)
            deploy_product(node)
            sides.append(run_side(node, watch, "cmk", "cmk.intel.com/exclusive-cores: 1", cmk_template, args.pods))
        finally:
            watch.stop()
    report(sides, exclusive)
    return 0


if __name__ == "__main__":
    sys.exit(main())
