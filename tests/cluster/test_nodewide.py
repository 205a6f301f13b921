"""An ordinary pod (no cmk.intel.com resource) is born on the infra CPUs: containerd's base spec runs the node-wide hook."""

from __future__ import annotations

from pathlib import Path

from deviceplugin.model.cpulist import parse_cpu_list
from tests.cluster.deploy import (
    Deployment,
    container_ids,
    delete_pod,
    ordinary_pod,
    start_pod,
    view,
)


def test_an_ordinary_pod_runs_on_the_infra_cpus_only(deployed: Deployment) -> None:
    node = deployed.node
    record = (node.install_dir / "cmk-infra-cpus").read_text().strip()
    (infra,) = [p["cpus"] for p in deployed.pools() if p["pool"] == "infra"]
    assert parse_cpu_list(record) == parse_cpu_list(infra)
    name = start_pod(node, ordinary_pod("cmk-cluster-ordinary"))
    try:
        (container_id,) = container_ids(node, "default", name).values()
        seen = view(node, container_id)
        hooks = seen.spec["hooks"]["createRuntime"]
        assert [h["args"] for h in hooks] == [["cmk", "hook", f"--node-wide={node.install_dir / 'cmk-infra-cpus'}"]]
        assert parse_cpu_list(seen.cpus_allowed) == parse_cpu_list(seen.cpuset) == parse_cpu_list(infra)
        online = parse_cpu_list(Path("/sys/devices/system/cpu/online").read_text().strip())
        assert parse_cpu_list(infra) < online  # the check can fail: without the hook it would be every CPU
    finally:
        delete_pod(node, name)
