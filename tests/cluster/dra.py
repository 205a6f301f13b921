"""DRA mode on the real node: the rollouts that switch it, what the API server holds, the peer driver.

The daemon is switched as an operator switches it: ``mode: dra`` in its config file, re-applied
with ``kubectl apply -k`` (the ConfigMap's hash changes the pod template, the DaemonSet controller
replaces the daemon), ``deploy/dra``'s DeviceClasses applied once. The alignment check gives the
daemon a view of this machine with two NUMA nodes (a copy of its sysfs, each core on a node of its
own: this machine has one node) and runs the kubelet's e2e DRA test driver beside it, built from its
Go module by ``.ci/build-dra-peers``, as the "NIC" whose devices sit on NUMA nodes 0 and 1.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from deviceplugin.model.resourceslices import DRIVER_NAME
from tests.cluster.deploy import DAEMONSET, DEPLOY, NAMESPACE, ROOT
from tests.cluster.node import NODE_NAME, ComponentFailed, Node, Process, tail, wait_for

#: The kubelet's e2e test driver's name and what our test publishes for it.
PEER_DRIVER = "test-driver.cdi.k8s.io"
NIC_CLASS = "nic.test-driver.cdi.k8s.io"
NIC_SLICE = f"{NODE_NAME}-test-nics"
#: Where the daemon container sees the two-NUMA copy of this machine's sysfs.
TWO_NUMA_SYSFS = "/cmk-two-numa/sys"


def dra_peers_bin() -> Path:
    """``CMK_DRA_PEERS_BIN``, else what ``.ci/build-dra-peers`` prints (it builds once, then reuses)."""
    if os.environ.get("CMK_DRA_PEERS_BIN"):
        return Path(os.environ["CMK_DRA_PEERS_BIN"])
    result = subprocess.run([str(ROOT / ".ci/build-dra-peers"), "dra-test-driver"], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ComponentFailed(f".ci/build-dra-peers failed:\n{result.stderr[-3000:]}")
    return Path(result.stdout.strip().splitlines()[-1])


def config_overlay(node: Node, base: Path, name: str, extra: str, *,
                   patches: list[dict[str, Any]] | None = None) -> Path:
    """An overlay of ``base`` whose daemon config is the shipped one plus ``extra`` (YAML lines), its daemon
    reaching the API server (:func:`api_patch`), and the DaemonSet changed by the JSON patch ops ``patches``."""
    import yaml

    daemonset = next(d for d in yaml.safe_load_all(node.kubectl("kustomize", str(base)).stdout)
                     if d and d["kind"] == "DaemonSet")
    ops = api_patch(daemonset, node) + (patches or [])
    overlay = node.path(name)
    overlay.mkdir(exist_ok=True)
    (overlay / "config.yaml").write_text((DEPLOY / "base" / "config.yaml").read_text() + extra)
    (overlay / "kustomization.yaml").write_text(json.dumps({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(base, overlay)],
        "configMapGenerator": [{"name": "cmk-config", "behavior": "replace", "files": ["config.yaml"]}],
        "patches": [{"target": {"kind": "DaemonSet", "name": DAEMONSET}, "patch": json.dumps(ops)}]}))
    return overlay


def daemon_rollout(node: Node, timeout: int = 240) -> None:
    """``kubectl rollout status`` of the DaemonSet alone (DRA mode puts no capacity in the node's status)."""
    result = node.kubectl("-n", NAMESPACE, "rollout", "status", f"daemonset/{DAEMONSET}", f"--timeout={timeout}s",
                          check=False, timeout=timeout + 30)
    if result.returncode != 0:
        pods = node.kubectl("-n", NAMESPACE, "describe", "pods", check=False).stdout[-3000:]
        log = "\n".join(daemon_log(node).splitlines()[-30:])
        raise ComponentFailed(f"rollout of {DAEMONSET}: {result.stderr}\n{pods}\n--- the daemon's log\n{log}\n"
                              f"{node.log_tails()}")


def our_slices(node: Node) -> list[dict[str, Any]]:
    """The node's ResourceSlices of our driver, as the API server holds them."""
    found = node.kubectl_json("get", "resourceslices", "--field-selector",
                              f"spec.nodeName={NODE_NAME},spec.driver={DRIVER_NAME}")
    return list(found["items"])


def published(node: Node) -> dict[str, set[str]]:
    """CMK pool -> the device names our slices of the newest generation publish."""
    slices = our_slices(node)
    newest = max((s["spec"]["pool"]["generation"] for s in slices), default=0)
    devices: dict[str, set[str]] = {}
    for item in slices:
        if item["spec"]["pool"]["generation"] == newest:
            pool = item["metadata"]["labels"]["cmk.intel.com/pool"]
            devices.setdefault(pool, set()).update(d["name"] for d in item["spec"].get("devices", []))
    return devices


def allocatable(node: Node, resource: str) -> str | None:
    return node.kubectl_json("get", "node", NODE_NAME)["status"].get("allocatable", {}).get(resource)


def daemon_log(node: Node) -> str:
    return node.kubectl("-n", NAMESPACE, "logs", f"daemonset/{DAEMONSET}", "-c", "daemon", "--tail=-1",
                        check=False).stdout


def pod_claims(node: Node, pod: str) -> list[dict[str, Any]]:
    """The ResourceClaims of ``pod`` (namespace default): those it names, those made from its templates, and
    the one the scheduler made for its extended resources (``status.extendedResourceClaimStatus``)."""
    found = node.kubectl_json("get", "pod", pod)
    status = found["status"]
    names = [c["resourceClaimName"] for c in found["spec"].get("resourceClaims", []) if c.get("resourceClaimName")]
    names += [c["resourceClaimName"] for c in status.get("resourceClaimStatuses", []) if c.get("resourceClaimName")]
    extended = status.get("extendedResourceClaimStatus")
    if extended:
        names.append(extended["resourceClaimName"])
    return [node.kubectl_json("get", "resourceclaim", name) for name in names]


def allocated_devices(claim: dict[str, Any]) -> list[dict[str, Any]]:
    """``status.allocation.devices.results`` of a claim (none while unallocated)."""
    return list(((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results", []))


def unschedulable_message(node: Node, pod: str) -> str:
    """The scheduler's message on a pod it could not place ("" while it has not said so)."""
    for condition in node.kubectl_json("get", "pod", pod)["status"].get("conditions", []):
        if condition["type"] == "PodScheduled" and condition["status"] == "False":
            return str(condition.get("message", ""))
    return ""


def wait_unschedulable(node: Node, pod: str, timeout: float = 90) -> str:
    try:
        wait_for(f"the scheduler says why pod {pod} cannot be placed", lambda: bool(unschedulable_message(node, pod)),
                 timeout)
    except TimeoutError as err:
        described = node.kubectl("get", "pod", pod, "-o", "yaml", check=False).stdout[-5000:]
        status = json.dumps(node.kubectl_json("get", "node", NODE_NAME)["status"].get("allocatable"))
        claims = node.kubectl("get", "resourceclaims", "-A", "-o", "yaml", check=False).stdout[-3000:]
        raise AssertionError(f"{err}\n{described}\nallocatable {status}\n{claims}\n"
                             f"{tail(node.logs / 'kube-scheduler.log', 30)}\n{tail(node.logs / 'kubelet.log', 40)}") from None
    return unschedulable_message(node, pod)


def two_numa_sysfs(dest: Path, sysfs: Path = Path("/sys")) -> Path:
    """A copy of this machine's CPU topology in which the cores alternate between NUMA nodes 0 and 1.

    Only what the daemon reads: the cpu directory's lists, each CPU's ``online``, ``topology`` and
    ``cache``, and a ``node`` directory of two nodes. The CPU numbers are the machine's, so what the
    hook pins is real.
    """
    cpu_root = sysfs / "devices/system/cpu"
    out = dest / "devices/system/cpu"
    out.mkdir(parents=True)
    for name in ("online", "possible", "present", "offline", "isolated", "nohz_full", "kernel_max"):
        if (cpu_root / name).exists():
            shutil.copyfile(cpu_root / name, out / name)
    cpus = sorted(int(p.name[3:]) for p in cpu_root.glob("cpu[0-9]*"))
    cores: list[str] = []
    node_cpus: dict[int, list[int]] = {0: [], 1: []}
    for cpu in cpus:
        source, target = cpu_root / f"cpu{cpu}", out / f"cpu{cpu}"
        target.mkdir()
        if (source / "online").exists():
            shutil.copyfile(source / "online", target / "online")
        shutil.copytree(source / "topology", target / "topology")
        for index in sorted((source / "cache").glob("index[0-9]*")):
            wanted = [f for f in ("level", "type", "id", "shared_cpu_list", "shared_cpu_map") if (index / f).exists()]
            (target / "cache" / index.name).mkdir(parents=True)
            for name in wanted:
                shutil.copyfile(index / name, target / "cache" / index.name / name)
        siblings = (source / "topology" / "core_cpus_list").read_text().strip()
        if siblings not in cores:
            cores.append(siblings)
        node_cpus[cores.index(siblings) % 2].append(cpu)
    nodes = dest / "devices/system/node"
    nodes.mkdir(parents=True)
    (nodes / "online").write_text("0-1\n")
    (nodes / "possible").write_text("0-1\n")
    for number, members in node_cpus.items():
        (nodes / f"node{number}").mkdir()
        (nodes / f"node{number}" / "cpulist").write_text(",".join(map(str, members)) + "\n")
    return dest


def _daemon_container(daemonset: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    containers = daemonset["spec"]["template"]["spec"]["containers"]
    ((index, container),) = [(i, c) for i, c in enumerate(containers) if c["name"] == "daemon"]
    return index, container


def api_patch(daemonset: dict[str, Any], node: Node) -> list[dict[str, Any]]:
    """JSON patch ops letting the daemon reach the API server as :func:`tests.cluster.postrender.reach_api` does:
    the tier has no kube-proxy for the service address, and its API server listens on the host's loopback."""
    index, container = _daemon_container(daemonset)
    env = [{"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
           {"name": "KUBERNETES_SERVICE_PORT", "value": str(node.ports["apiserver"])}]
    pointer = f"/spec/template/spec/containers/{index}/env"
    ops: list[dict[str, Any]] = [{"op": "add", "path": "/spec/template/spec/hostNetwork", "value": True}]
    if "env" in container:
        return ops + [{"op": "add", "path": f"{pointer}/-", "value": item} for item in env]
    return [*ops, {"op": "add", "path": pointer, "value": env}]


def sysfs_patch(daemonset: dict[str, Any], host_path: Path) -> list[dict[str, Any]]:
    """JSON patch ops mounting ``host_path`` read-only at :data:`TWO_NUMA_SYSFS` in every container that reads
    the config (the install init container plans the infra record with it too)."""
    pod = daemonset["spec"]["template"]["spec"]
    mount = {"name": "two-numa-sys", "mountPath": TWO_NUMA_SYSFS, "readOnly": True}
    ops: list[dict[str, Any]] = [{"op": "add", "path": "/spec/template/spec/volumes/-",
                                  "value": {"name": "two-numa-sys", "hostPath": {"path": str(host_path),
                                                                                 "type": "Directory"}}}]
    for kind in ("initContainers", "containers"):
        for index, _ in enumerate(pod.get(kind, [])):
            ops.append({"op": "add", "path": f"/spec/template/spec/{kind}/{index}/volumeMounts/-", "value": mount})
    return ops


def nic_objects(numa_nodes: list[int]) -> list[dict[str, Any]]:
    """A DeviceClass for the peer's devices and its slice: one "NIC" per NUMA node, in that order, with the
    standard attribute.

    ``spec.nodeSelector`` rather than ``nodeName``: the test driver's own slice controller prunes
    slices with its node's ``nodeName`` it did not write (docs/design/dra-peers.md).
    """
    device_class = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": NIC_CLASS},
                    "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{PEER_DRIVER}"'}}]}}
    resource_slice = {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": NIC_SLICE},
        "spec": {"driver": PEER_DRIVER, "pool": {"name": "test-nics", "generation": 1, "resourceSliceCount": 1},
                 "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                     {"key": "metadata.name", "operator": "In", "values": [NODE_NAME]}]}]},
                 "devices": [{"name": f"nic-{n}", "attributes": {"resource.kubernetes.io/numaNode": {"int": n}}}
                             for n in numa_nodes]}}
    return [device_class, resource_slice]


def start_test_driver(node: Node, bin_dir: Path) -> Process:
    """The kubelet's e2e DRA test driver as a kubelet plugin of this node, registered with the real kubelet."""
    (node.kubelet_root / "plugins" / PEER_DRIVER).mkdir(parents=True, exist_ok=True)  # it binds there, never makes it
    process = Process("dra-test-driver", [
        str(bin_dir / "dra-test-driver"), f"--kubeconfig={node.kubeconfig}", "kubelet-plugin",
        f"--node-name={NODE_NAME}", f"--plugin-registration-path={node.kubelet_root / 'plugins_registry'}",
        f"--datadir={node.kubelet_root / 'plugins'}", f"--cdi-dir={node.cdi_dir}", "--num-devices=0"],
        node.logs / "dra-test-driver.log")
    process.start()
    node.processes["dra-test-driver"] = process
    registry = node.kubelet_root / "plugins_registry"
    wait_for("the test driver serves its registration socket",
             lambda: any(p.name.startswith(PEER_DRIVER) for p in registry.iterdir()), 60, alive=process.check_alive)
    return process
