"""What the DaemonSet's daemon itself sees inside a real kubelet's container: its metrics and its unconfined scan.

The kubelet (1.36, ``pkg/securitycontext`` defaultMaskedPaths) binds /dev/null over the
container's /proc/interrupts; busy time must still be measured. containerd builds a pod sandbox's
spec from its own defaults, never from the handler's ``base_runtime_spec``
(``internal/cri/server/podsandbox/helpers.go``), so no hook runs for pause containers: the hook of
each pod's containers confines the sandbox the runtime's annotation names (``docs/design/hook.md``, "The
pod's sandbox"), and the daemon's scan finds no container outside the hooks.
"""

from __future__ import annotations

import json
import re

from deviceplugin.model.cpulist import parse_cpu_list
from tests.cluster.deploy import DAEMONSET, NAMESPACE, Deployment

METRICS = "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:9464/metrics').read().decode())"
MASKED = "import os, stat; print(stat.S_ISCHR(os.stat('/proc/interrupts').st_mode))"


def in_daemon(deployed: Deployment, *argv: str) -> str:
    return deployed.node.kubectl("-n", NAMESPACE, "exec", f"daemonset/{DAEMONSET}", "-c", "daemon", "--",
                                 *argv).stdout


def test_the_daemon_measures_busy_time_with_its_proc_interrupts_masked(deployed: Deployment) -> None:
    assert in_daemon(deployed, "python3", "-c", MASKED).strip() == "True"  # the premise: the kubelet masks it
    metrics = in_daemon(deployed, "python3", "-c", METRICS)
    assert re.search(r"^cmk_cpu_stats_up 1\.0$", metrics, re.MULTILINE), metrics[:2000]
    busy = set(re.findall(r'^cmk_pool_busy_seconds_total\{[^}]*pool="([a-z-]+)"', metrics, re.MULTILINE))
    assert busy >= {p["pool"] for p in deployed.pools() if parse_cpu_list(p["cpus"])}, metrics[:2000]


def test_no_container_is_outside_the_hooks_pod_sandboxes_included(deployed: Deployment) -> None:
    running = {line.split()[0] for line in deployed.node.ctr("tasks", "ls").stdout.splitlines()[1:]
               if line.split()[2] == "RUNNING"}  # an exited sandbox has no cgroup left to scan
    sandboxes = running & set(deployed.node.ctr("containers", "ls", "-q",
                                                'labels."io.cri-containerd.kind"==sandbox').stdout.split())
    described = json.loads(in_daemon(deployed, "cmk", "describe", "--config", "/etc/cmk/config.yaml", "--output",
                                     "json", "--usage-window", "0"))["unconfined"]
    assert described["available"] and described["complete"]
    assert sandboxes and described["containers"] == [], described["containers"]


def test_the_real_kubelet_lists_no_cpus_under_policy_none_and_the_node_name_selects_the_section(
        deployed: Deployment) -> None:
    """Item 5's premise on a real kubelet (GetAllocatableResources' cpu_ids empty under none: every pool served),
    and item 3's: the DaemonSet's downward-API NODE_NAME reaches describe inside the daemon's container."""
    from tests.cluster.node import NODE_NAME

    described = json.loads(in_daemon(deployed, "cmk", "describe", "--config", "/etc/cmk/config.yaml", "--output",
                                     "json", "--usage-window", "0", "--pod-resources-socket",
                                     str(deployed.node.pod_resources_socket)))  # the tier moves the kubelet's root
    assert described["live"]["available"], described["live"]
    assert described["live"]["kubelet_cpu_manager"] == "none"
    assert not any("CPU manager" in note for note in described["live"]["notes"])
    served = {p["pool"] for p in deployed.pools() if parse_cpu_list(p["cpus"])}
    assert {p["pool"] for p in described["live"]["pools"]} == served
    assert described["config"]["node"] == NODE_NAME and described["config"]["section"] == "default"
