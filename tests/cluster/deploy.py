"""The product on the real node, deployed as README's user deploys it, and what the tests read back.

The test overlay of ``deploy/base`` changes only what an operator changes for a node: the image
name and pull policy (the image is imported, there is no registry), the node-local paths (the
node's directories are the tier's own; the kubelet's device-plugin directory stays where upstream
fixes it) and the node group's threads per core (one per core on this machine). It is derived
from the rendered base, so a path added to the base is moved too, and :func:`overlay_changes`
says exactly what differs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deviceplugin.protocol.podresources import Unavailable, read_assignments
from tests.cluster.node import (
    BUSYBOX_IMAGE,
    NODE_NAME,
    ComponentFailed,
    ControlPlane,
    Node,
    wait_for,
)
from tests.support.podman import cgroup_dir

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
NAMESPACE = "cmk-system"
DAEMONSET = "cmk-deviceplugin"
RESOURCE_PREFIX = "cmk.intel.com/"
PRODUCT_PREFIX = "localhost/cmk-deviceplugin:"
DAEMON_PODS = "app.kubernetes.io/component=daemon,app.kubernetes.io/name=cmk-deviceplugin"


def node_paths(node: Node) -> dict[str, str]:
    """The base's node-local paths and where they are on this node (longest first: prefixes nest)."""
    paths = {
        "/opt/bin": str(node.install_dir),
        "/etc/containers/oci/hooks.d": str(node.path("hooks.d")),
        "/var/run/cdi": str(node.cdi_dir),
        "/var/lib/kubelet/pod-resources": str(node.kubelet_root / "pod-resources"),
        "/var/lib/kubelet/plugins_registry": str(node.kubelet_root / "plugins_registry"),
        "/var/lib/kubelet/plugins": str(node.kubelet_root / "plugins"),
        "/etc/kubernetes/node-feature-discovery/features.d": str(node.path("nfd-features.d")),
    }
    return dict(sorted(paths.items(), key=lambda item: -len(item[0])))


def moved(value: str, paths: dict[str, str]) -> str:
    for old, new in paths.items():
        if value == old or value.startswith(old + "/"):
            return new + value[len(old):]
        if "=" in value and value.split("=", 1)[1].startswith(old):  # --flag=/path
            flag, rest = value.split("=", 1)
            return f"{flag}={moved(rest, paths)}"
    return value


def _patch_ops(obj: Any, paths: dict[str, str], pointer: str = "") -> list[dict[str, Any]]:
    """JSON patch ops moving every string that names a node-local path."""
    ops: list[dict[str, Any]] = []
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for key, value in items:
        here = f"{pointer}/{str(key).replace('~', '~0').replace('/', '~1')}"
        if isinstance(value, str):
            if moved(value, paths) != value:
                ops.append({"op": "replace", "path": here, "value": moved(value, paths)})
        else:
            ops += _patch_ops(value, paths, here)
    return ops


def render(directory: Path, node: ControlPlane) -> list[dict[str, Any]]:
    result = node.kubectl("kustomize", str(directory))
    return [doc for doc in _yaml_docs(result.stdout) if doc]


def _yaml_docs(text: str) -> list[Any]:
    import yaml
    return list(yaml.safe_load_all(text))


def write_overlay(node: ControlPlane, image: str, threads_per_core: int, paths: dict[str, str]) -> Path:
    """The test overlay of ``deploy/base`` in the node's directory, the node-local ``paths`` moved (none on a
    node that is a machine of its own: the systemd tier's VM); returns its directory."""
    base = render(DEPLOY / "base", node)
    (daemonset,) = [o for o in base if o["kind"] == "DaemonSet"]
    ops = _patch_ops(daemonset["spec"], paths, "/spec")
    pod = daemonset["spec"]["template"]["spec"]
    for kind in ("initContainers", "containers"):
        for index, _ in enumerate(pod.get(kind, [])):
            ops.append({"op": "replace", "path": f"/spec/template/spec/{kind}/{index}/imagePullPolicy",
                        "value": "Never"})
    overlay = node.path("overlay")
    overlay.mkdir()
    name, _, tag = image.rpartition(":")
    (overlay / "kustomization.yaml").write_text(json.dumps({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(DEPLOY / "base", overlay)],  # kustomize refuses absolute roots
        "images": [{"name": "cmk-deviceplugin", "newName": name, "newTag": tag}],
        "patches": [{"target": {"kind": "DaemonSet", "name": DAEMONSET}, "patch": json.dumps(ops)}],
        "configMapGenerator": [{"name": "cmk-node-group", "behavior": "merge",
                                "literals": [f"threads-per-core={threads_per_core}"],
                                "options": {"disableNameSuffixHash": True}}],
    }, indent=2))
    return overlay


@dataclass(frozen=True)
class Deployment:
    """The deployed product and the plan its daemon's own ``cmk describe`` prints on this node."""

    node: Node
    overlay: Path
    plan: dict[str, Any]  # describe --output json: "topology", "plan"

    @property
    def threads_per_core(self) -> int:
        return int(self.plan["topology"]["threads_per_core_max"])

    def pools(self) -> list[dict[str, Any]]:
        return list(self.plan["plan"]["pools"])

    def served(self) -> set[str]:
        """The resources this node advertises (pools with CPUs)."""
        return {p["resource"] for p in self.pools() if p["advertised"]}

    def device_cpus(self, resource: str, device: str) -> str:
        """The CPUs a device of ``resource`` stands for: its core's for core pools, the pool's for slots."""
        (pool,) = [p for p in self.pools() if p["resource"] == resource]
        return str(pool["devices"].get(device, pool["cpus"]) if pool["unit"] == "cores" else pool["cpus"])


def rollout(node: Node, timeout: int = 240) -> None:
    """``kubectl rollout status`` of the DaemonSet, then the node's status catching up with the kubelet.

    On failure the pods, events and components' logs say why.
    """
    result = node.kubectl("-n", NAMESPACE, "rollout", "status", f"daemonset/{DAEMONSET}", f"--timeout={timeout}s",
                          check=False, timeout=timeout + 30)
    if result.returncode != 0:
        pods = node.kubectl("-n", NAMESPACE, "describe", "pods", check=False).stdout[-4000:]
        raise ComponentFailed(f"rollout of {DAEMONSET}: {result.stderr}\n{pods}\n{node.log_tails()}")
    wait_for("the node's status shows the pools the kubelet registered", lambda: node_shows_registered(node), 90)


def node_shows_registered(node: Node) -> bool:
    """True once the node's capacity and allocatable count each resource's devices as the kubelet does.

    The kubelet's count is its pod resources API's (GetAllocatableResources), not the plan: the
    tests compare the node's status with the plan.

    The DaemonSet is ready as soon as the kubelet holds each pool's stream; the node's status follows
    at the kubelet's next status update.
    """
    try:
        allocatable = read_assignments(node.pod_resources_socket, timeout=2).allocatable or {}
    except Unavailable:
        return False
    status = node.kubectl_json("get", "node", NODE_NAME)["status"]
    held = {resource: str(len(ids)) for resource, ids in allocatable.items() if ids}
    return bool(held) and all(status.get(part, {}).get(resource) == count for resource, count in held.items()
                              for part in ("capacity", "allocatable"))


def deploy_product(node: Node) -> Deployment:
    """README's steps 2 and 3 on ``node``: label, ``kubectl apply -k`` of the test overlay and of
    ``deploy/admission``, the rollout; then the plan the daemon's own ``cmk describe`` prints."""
    # the daemon's image says what this node has; the overlay needs its threads per core up front
    topology = json.loads(subprocess.run(
        [sys.executable, "-m", "deviceplugin", "describe", "--output", "json", "--usage-window", "0"],
        cwd=ROOT, capture_output=True, text=True, check=True).stdout)["topology"]
    node.kubectl("label", "node", NODE_NAME, "cmk.intel.com/cpu-pools=default")
    overlay = write_overlay(node, node.product_image, int(topology["threads_per_core_max"]), node_paths(node))
    node.kubectl("apply", "-k", str(overlay))
    node.kubectl("apply", "-k", str(DEPLOY / "admission"))
    rollout(node)
    described = node.kubectl("-n", NAMESPACE, "exec", f"daemonset/{DAEMONSET}", "-c", "daemon", "--", "cmk",
                             "describe", "--config", "/etc/cmk/config.yaml", "--output", "json",
                             "--usage-window", "0")
    return Deployment(node, overlay, json.loads(described.stdout))


def daemon_pods(node: Node) -> set[str]:
    return {p["metadata"]["uid"] for p in node.kubectl_json("-n", NAMESPACE, "get", "pods", "-l", DAEMON_PODS)["items"]}


def remove_kustomize_deploy(node: Node) -> None:
    """The session's deployment less its namespace: a second DaemonSet would only wait for the node lock."""
    node.kubectl("-n", NAMESPACE, "delete", "daemonset,configmap,serviceaccount,networkpolicy",
                 "-l", "app.kubernetes.io/part-of=cmk-deviceplugin", "--cascade=foreground", "--wait=true",
                 "--timeout=120s", timeout=150)
    wait_for("the daemon pods are gone", lambda: not daemon_pods(node), 120)


def overlay_changes(node: Node, overlay: Path) -> list[tuple[str, Any, Any]]:
    """Every leaf that differs between the rendered base and the overlay: (``kind/name:pointer``, base, overlay)."""
    def leaves(obj: Any, pointer: str = "") -> dict[str, Any]:
        if isinstance(obj, dict):
            return {k: v for key, value in obj.items() for k, v in leaves(value, f"{pointer}/{key}").items()}
        if isinstance(obj, list):
            return {k: v for i, value in enumerate(obj) for k, v in leaves(value, f"{pointer}/{i}").items()}
        return {pointer: obj}

    def flat(docs: list[dict[str, Any]]) -> dict[str, Any]:
        return {f"{d['kind']}/{d['metadata']['name']}:{p}": v for d in docs for p, v in leaves(d).items()}

    before, after = flat(render(DEPLOY / "base", node)), flat(render(overlay, node))
    return sorted((k, before.get(k), after.get(k)) for k in before.keys() | after.keys()
                  if before.get(k) != after.get(k))


# --- reading the node back --------------------------------------------------------------------


@dataclass(frozen=True)
class ContainerView:
    """One running container as the host sees it."""

    pid: int
    cpus_allowed: str  # Cpus_allowed_list of its first process
    cpuset: str  # its cpuset cgroup's cpuset.cpus
    spec: dict[str, Any]  # the OCI config.json containerd gave runc


def container_ids(node: Node, namespace: str, pod: str) -> dict[str, str]:
    """Container name -> containerd ID, from the pod's status."""
    status = node.kubectl_json("-n", namespace, "get", "pod", pod)["status"]
    return {c["name"]: c["containerID"].split("://", 1)[1] for c in status.get("containerStatuses", [])
            if c.get("containerID")}


def view(node: Node, container_id: str) -> ContainerView:
    tasks = node.ctr("tasks", "ls").stdout.splitlines()[1:]
    (pid,) = [int(line.split()[1]) for line in tasks if line.split()[0] == container_id]
    status = Path(f"/proc/{pid}/status").read_text()
    allowed = next(line.split(":", 1)[1].strip() for line in status.splitlines()
                   if line.startswith("Cpus_allowed_list"))
    cpuset = (cgroup_dir(pid, "cpuset") / "cpuset.cpus").read_text().strip()
    bundle = node.path("containerd", "state", "io.containerd.runtime.v2.task", "k8s.io", container_id, "config.json")
    return ContainerView(pid, allowed, cpuset, json.loads(bundle.read_text()))


def devices_of(node: Node, namespace: str, pod: str) -> dict[str, dict[str, tuple[str, ...]]]:
    """Container -> resource -> device IDs, from the kubelet's pod resources API."""
    found: dict[str, dict[str, tuple[str, ...]]] = {}
    for holding in read_assignments(node.pod_resources_socket, allocatable=False).holdings:
        if holding.namespace == namespace and holding.pod == pod:
            found.setdefault(holding.container, {})[holding.resource] = holding.device_ids
    return found


def describe_node(node: Node) -> str:
    return node.kubectl("describe", "node", NODE_NAME).stdout


def describe_section(text: str, title: str) -> dict[str, list[str]]:
    """``kubectl describe node``'s ``title:`` block as resource -> its columns."""
    lines = text.splitlines()
    start = lines.index(f"{title}:") + 1
    rows: dict[str, list[str]] = {}
    for line in lines[start:]:
        if line and not line.startswith(" "):
            break
        cells = line.split()
        if cells and cells[0] not in ("Resource", "--------"):
            rows[cells[0].rstrip(":")] = cells[1:]
    return rows


def millicores(quantity: Any) -> int:
    """A cpu quantity as the examples write it ("2", 3, "250m") in millicores."""
    text = str(quantity)
    return int(text[:-1]) if text.endswith("m") else int(text) * 1000


def workload_pod(manifest: dict[str, Any], served: set[str], threads_per_core: int) -> dict[str, Any]:
    """A shipped example made runnable here: the local busybox image, containers only for pools this node
    serves, and the exclusive containers' cpu sized to this node's threads per core (the example says
    "cpu = its hardware threads (2 on SMT machines)"). A container that also holds a slot keeps what its
    limit adds above its requests (its time on the slot's CPUs) on top of its cores' threads."""
    pod = json.loads(json.dumps(manifest))
    kept = []
    for container in pod["spec"]["containers"]:
        resources = container["resources"]
        limits = resources["limits"]
        wanted = {r for r in limits if r.startswith(RESOURCE_PREFIX)}
        if not wanted <= served:
            continue
        container["image"] = BUSYBOX_IMAGE
        container["imagePullPolicy"] = "Never"
        cores = sum(int(limits[r]) for r in wanted if "exclusive" in r)
        if cores and len(wanted) > sum(1 for r in wanted if "exclusive" in r):  # cores and a slot
            extra = millicores(limits["cpu"]) - millicores(resources["requests"]["cpu"])
            resources["requests"]["cpu"] = str(cores * threads_per_core)
            limits["cpu"] = f"{cores * threads_per_core * 1000 + extra}m"
        elif cores:
            for part in ("requests", "limits"):
                resources[part]["cpu"] = str(cores * threads_per_core)
        kept.append(container)
    pod["spec"]["containers"] = kept
    return pod


def ordinary_pod(name: str) -> dict[str, Any]:
    """A pod holding no cmk.intel.com resource (Burstable: a cpu request, no limit): the node-wide hook's."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"automountServiceAccountToken": False, "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "app", "image": BUSYBOX_IMAGE, "imagePullPolicy": "Never",
                                     "command": ["sleep", "3600"],
                                     "resources": {"requests": {"cpu": "10m", "memory": "8Mi"}}}]}}


def cdi_device_name(resource: str, device_id: str) -> str:
    """The CDI device (its name in the daemon's spec) an Allocate answer names for one device: docs/user/cdi-hook.md."""
    return device_id if "exclusive" in resource else resource.removeprefix(RESOURCE_PREFIX)


def cdi_spec(node: Node) -> dict[str, Any]:
    """The daemon's CDI spec in the directory that is containerd's only ``cdi_spec_dirs`` entry."""
    (path,) = node.cdi_dir.glob("cmk.intel.com-cpus.json")
    spec: dict[str, Any] = json.loads(path.read_text())
    return spec


def start_pod(node: Node, manifest: dict[str, Any], timeout: int = 120) -> str:
    """Create ``manifest`` (namespace default) and wait until it is Ready; returns its name."""
    name = str(manifest["metadata"]["name"])
    node.kubectl("apply", "-f", "-", input=json.dumps(manifest))
    result = node.kubectl("wait", "--for=condition=Ready", f"pod/{name}", f"--timeout={timeout}s", check=False,
                          timeout=timeout + 30)
    if result.returncode != 0:
        described = node.kubectl("describe", "pod", name, check=False).stdout[-3000:]
        raise AssertionError(f"pod {name} not Ready: {result.stderr}\n{described}")
    return name


def delete_pod(node: Node, name: str) -> None:
    node.kubectl("delete", "pod", name, "--ignore-not-found", "--grace-period=1", "--wait=true", "--timeout=120s",
                 timeout=150)


def example(name: str) -> dict[str, Any]:
    import yaml
    manifest: dict[str, Any] = yaml.safe_load((DEPLOY / "examples" / name).read_text())
    return manifest


@dataclass(frozen=True)
class PinnedState:
    """What a pinned pod's containers are at one moment: process, affinity and cpuset each, and restarts."""

    containers: dict[str, tuple[int, str, str]]  # name -> (pid, Cpus_allowed_list, cpuset.cpus)
    restarts: int


def pinned_state(node: Node, pod: str) -> PinnedState:
    status = node.kubectl_json("get", "pod", pod)["status"]
    seen = {c: view(node, i) for c, i in container_ids(node, "default", pod).items()}
    return PinnedState({c: (v.pid, v.cpus_allowed, v.cpuset) for c, v in seen.items()},
                       sum(c["restartCount"] for c in status["containerStatuses"]))


def start_pinned_pod(node: Node, served: set[str], threads_per_core: int) -> str:
    """deploy/examples' CDI-only pod (an unmodified command on one exclusive core), Ready."""
    return start_pod(node, workload_pod(example("pod-cdi-only.yaml"), served, threads_per_core))
