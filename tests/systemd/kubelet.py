"""The host's side of the systemd tier's kubelet node: its control plane, its images and what it deploys.

Each kernel's VM runs containerd and the kubelet (:mod:`tests.systemd.kubelet_guest`); etcd, the API server,
the controller manager and the scheduler run here, one set per VM (:class:`tests.cluster.node.ControlPlane`),
listening on 127.0.0.1 only. qemu's user network carries the guest's connections to them: the guest dials
:data:`tests.systemd.steps.KUBE_GATEWAY`, qemu connects to this machine's loopback. Nothing reaches the guest
from here, so the guest does its own ``exec`` (``ctr tasks exec``) and the host only reads its result.

The images are the cluster tier's (:mod:`tests.cluster.images`: the pause binary the cluster build compiled,
the static busybox, ``.ci/build-image``'s product image), as archives in the share; the product's manifests
are ``deploy/base`` with the test overlay's image and threads per core, the node-local paths unmoved (the VM
is a machine of its own), rendered here because the guest has no kustomize of its own beside kubectl.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.cluster import images
from tests.cluster.deploy import (
    DEPLOY,
    example,
    ordinary_pod,
    workload_pod,
    write_overlay,
)
from tests.cluster.node import (
    PAUSE_IMAGE,
    ControlPlane,
    node_wide_base_spec,
)
from tests.systemd import steps, vm

#: The guest's install dir: the DaemonSet's hostPath and the base spec's hook path, as deploy/base has them.
GUEST_INSTALL_DIR = "/opt/bin"
#: One thread per core: qemu's vCPUs are cores of their own.
THREADS_PER_CORE = 1
#: The DaemonSet's probes under TCG: ``cmk probe`` is a Python start, 5-15 s here where a node takes 0.2 s, so the
#: base's 5 s timeout fails every probe and the daemon never becomes Ready. Only the timeouts and the startup
#: probe's allowance change; what the probes run stays the base's.
PROBE_TIMEOUT_UNDER_TCG = 60
STARTUP_FAILURES_UNDER_TCG = 60
EXCLUSIVE_CORES = "cmk.intel.com/exclusive-cores"


def start_control_plane(bin_dir: Path, logs: Path) -> ControlPlane:
    """A control plane the guest can reach (its certificate names the gateway), with deploy/admission applied.

    The caller tears it down (:meth:`ControlPlane.down`); one that fails to start is torn down here, then raises.
    """
    plane = ControlPlane(bin_dir, logs, serving_addresses=(steps.KUBE_GATEWAY,), node_name=steps.KUBE_NODE)
    try:
        plane.up_control_plane()
        plane.kubectl("apply", "-k", str(DEPLOY / "admission"))
    except BaseException:
        plane.down()
        raise
    return plane


@dataclass(frozen=True)
class Archives:
    """The images the guest imports, in the share: the product's (its name and archive), the pause and busybox ones."""

    product: str
    product_archive: Path
    others: tuple[Path, ...]


def image_archives(share: Path) -> Archives:
    directory = share / "images"
    directory.mkdir(exist_ok=True)
    product, archive = images.product_archive(directory / "product.tar")
    return Archives(product, archive, (images.pause_archive(images.cluster_bin() / "pause", directory / "pause.tar"),
                                       images.busybox_archive(directory / "busybox.tar")))


def pods() -> dict[str, dict[str, Any]]:
    """Each pod of :data:`steps.KUBE_KINDS` and :data:`steps.STATIC_KINDS` by kind."""
    guaranteed = ordinary_pod("cmk-guaranteed")
    guaranteed["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1", "memory": "32Mi"},
                                                        "limits": {"cpu": "1", "memory": "32Mi"}}
    return {"pinned": workload_pod(example("pod-cdi-only.yaml"), {EXCLUSIVE_CORES}, THREADS_PER_CORE),
            "ordinary": ordinary_pod("cmk-systemd-ordinary"),
            "guaranteed": guaranteed}


def resizes(manifests: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The in-place resize of each pod under policy none: the pinned pod's memory doubled (the kubelet then sends
    the container's whole resources again, its CPU quota among them), the ordinary pod's cpu request doubled."""
    pinned = copy.deepcopy(manifests["pinned"]["spec"]["containers"][0]["resources"])
    memory = {"memory": "32Mi"}
    ordinary = {"requests": {"cpu": "20m"}}
    assert pinned["limits"]["memory"] != memory["memory"]
    return {"pinned": {"requests": memory, "limits": memory}, "ordinary": ordinary}


def stretched(spec: dict[str, Any]) -> dict[str, Any]:
    """A base spec whose hooks get TCG's time (:data:`tests.systemd.steps.HOOK_TIMEOUT_UNDER_TCG`): the node-wide
    hook records an ordinary pod's units with systemd, six ``systemctl`` starts of 1.5-2.5 s each here."""
    for hook in spec["hooks"]["createRuntime"]:
        hook["timeout"] = max(hook.get("timeout", 0), steps.HOOK_TIMEOUT_UNDER_TCG)
    return spec


def under_tcg(rendered: str) -> str:
    """The rendered manifests as one JSON ``List``, the DaemonSet's probes given TCG's time (:data:`PROBE_TIMEOUT_UNDER_TCG`)."""
    import yaml
    items = [doc for doc in yaml.safe_load_all(rendered) if doc]
    for item in items:
        if item["kind"] != "DaemonSet":
            continue
        for container in item["spec"]["template"]["spec"]["containers"]:
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                if probe in container:
                    container[probe]["timeoutSeconds"] = PROBE_TIMEOUT_UNDER_TCG
            if "startupProbe" in container:
                container["startupProbe"]["failureThreshold"] = STARTUP_FAILURES_UNDER_TCG
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items})


def kube_plan(plane: ControlPlane, share: Path, label: str, archives: Archives) -> dict[str, Any]:
    """What the guest program needs: kubeconfigs reaching ``plane``, the base spec, the manifests, the images."""
    server = f"https://{steps.KUBE_GATEWAY}:{plane.ports['apiserver']}"
    admin = share / f"{label}.admin.kubeconfig"
    admin.write_text(plane.kubeconfig_text("admin", server))
    overlay = write_overlay(plane, archives.product, THREADS_PER_CORE, paths={})
    manifests = pods()
    return {
        "bin": vm.KUBE_BIN,
        "host_bin": str(plane.bin),
        "admin_kubeconfig": str(admin),
        "kubelet_kubeconfig": plane.kubeconfig_text("kubelet", server),
        "base_spec": stretched(node_wide_base_spec(plane.bin, GUEST_INSTALL_DIR)),
        "pause_image": PAUSE_IMAGE,
        "archives": [str(a) for a in archives.others],
        "product_archive": str(archives.product_archive),
        "product_manifest": under_tcg(plane.kubectl("kustomize", str(overlay)).stdout),
        "pods": manifests,
        "resizes": resizes(manifests),
        "result": str(share / f"{label}.kubelet.json"),
    }
