"""The DRA side-by-side benchmark's pure parts, and the node bring-up's switches it needs (NRI, a CDI directory)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from benchmarks.dra_side_by_side import (
    PodFigures,
    Side,
    api_time,
    claim_pod,
    claim_template,
    device_plugin_serving,
    dra_registered,
    first_at,
    klog_time,
    percentile,
    table,
)
from tests.cluster.node import Node

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
       "spec": {"containers": [{"name": "app", "resources": {
           "requests": {"cmk.intel.com/exclusive-cores": "1", "cpu": "2", "memory": "16Mi"},
           "limits": {"cmk.intel.com/exclusive-cores": "1", "cpu": "2", "memory": "16Mi"}}}]}}


def test_percentile_interpolates_between_ranks() -> None:
    assert percentile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert percentile([float(n) for n in range(1, 11)], 0.9) == 9.1
    assert percentile([5.0], 0.9) == 5.0


def test_api_time_reads_the_api_servers_utc_stamps() -> None:
    assert api_time("2026-12-03T15:01:02Z") - api_time("2026-12-03T15:00:59Z") == 3


def test_klog_time_reads_the_header_and_ignores_other_lines() -> None:
    line = 'I1203 15:01:02.250000   4242 registration.go:80] "Register new plugin" name="dra.cpu"'
    assert klog_time(line, 2026) == api_time("2026-12-03T15:01:02Z") + 0.25
    assert klog_time("Flag --v has been deprecated", 2026) is None


def test_first_at_takes_the_kubelets_first_registration_of_the_dra_driver_only() -> None:
    lines = ['I1203 15:00:01.000000 1 x.go:1] "Adding socket path" path="/k/plugins_registry/dra.cpu-reg.sock"',
             'I1203 15:00:02.000000 1 x.go:1] "Registered DRA plugin" driverName="cpu.cmk.intel.com" endpoint="/a"',
             'I1203 15:00:03.000000 1 x.go:1] "Registered DRA plugin" driverName="dra.cpu" endpoint="/b"',
             'I1203 15:00:04.000000 1 x.go:1] "Registered DRA plugin" driverName="dra.cpu" endpoint="/b"']
    assert first_at(lines, dra_registered("dra.cpu"), 2026) == api_time("2026-12-03T15:00:03Z")
    assert first_at(lines[:2], dra_registered("dra.cpu"), 2026) is None


def test_a_device_plugin_is_serving_once_the_kubelet_took_healthy_devices_of_its_resource() -> None:
    serving = device_plugin_serving("cmk.intel.com/exclusive-cores")
    assert not serving('I1 server.go:161] "Got registration request from device plugin with resource" '
                       'resourceName="cmk.intel.com/exclusive-cores"')
    assert not serving('I1 manager.go:319] "Processed device updates for resource" '
                       'resourceName="cmk.intel.com/exclusive-cores" totalCount=1 healthyCount=0')
    assert not serving('I1 manager.go:319] "Processed device updates for resource" '
                       'resourceName="cmk.intel.com/infra" totalCount=110 healthyCount=110')
    assert serving('I1 manager.go:319] "Processed device updates for resource" '
                   'resourceName="cmk.intel.com/exclusive-cores" totalCount=1 healthyCount=1')


def test_claim_pod_swaps_the_extended_resource_for_one_claim_and_keeps_cpu() -> None:
    pod = claim_pod(POD, "t")
    (container,) = pod["spec"]["containers"]
    assert container["resources"]["requests"] == {"cpu": "2", "memory": "16Mi"}
    assert container["resources"]["limits"] == {"cpu": "2", "memory": "16Mi"}
    assert container["resources"]["claims"] == [{"name": "cpus"}]
    assert pod["spec"]["resourceClaims"] == [{"name": "cpus", "resourceClaimTemplateName": "t"}]
    assert "cmk.intel.com/exclusive-cores" in POD["spec"]["containers"][0]["resources"]["limits"]  # a copy


def test_claim_template_holds_one_request_named_as_the_pod_uses_it() -> None:
    template = claim_template("t", {"deviceClassName": "dra.cpu", "capacity": {"requests": {"dra.cpu/cpu": "1"}}})
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    assert request["name"] == "cpus" and request["exactly"]["deviceClassName"] == "dra.cpu"


def _side(label: str, wall: float, rss_kib: int, ready: float | None, cpuset: str = "1") -> Side:
    pods = [PodFigures(1.0, wall, cpuset, cpuset), PodFigures(2.0, wall, cpuset, cpuset)]
    return Side(label, pods, "0", cpuset, rss_kib, ready, 4.0, 0)


def test_table_gives_each_figure_its_ratio_to_the_first_side_and_says_what_the_best_effort_pod_shares() -> None:
    lines = table([_side("(a)", 2.0, 2048, 1.0), _side("(d)", 3.0, 1024, None, cpuset="0-1")])
    wall = next(line for line in lines if line.startswith("create->Running p50, wall s"))
    assert "2.00 (1.00x)" in wall and "3.00 (1.50x)" in wall
    rss = next(line for line in lines if line.startswith("driver/daemon RSS MiB"))
    assert "2.00 (1.00x)" in rss and "1.00 (0.50x)" in rss
    ready = next(line for line in lines if line.startswith("kubelet restart->plugin ready s"))
    assert "n/a (-)" in ready
    beside = next(line for line in lines if line.startswith("BestEffort pod beside it"))
    assert "0 (not on them)" in beside and "0 (shares 0)" in beside


def test_the_node_turns_nri_on_and_reads_extra_cdi_dirs_only_when_asked(tmp_path: Path) -> None:
    default = tomllib.loads(Node(tmp_path, tmp_path, base=tmp_path).containerd_config())
    asked = tomllib.loads(Node(tmp_path, tmp_path, base=tmp_path, nri=True,
                               extra_cdi_dirs=(Path("/var/run/cdi"),)).containerd_config())
    assert default["plugins"]["io.containerd.nri.v1.nri"]["disable"] is True
    assert asked["plugins"]["io.containerd.nri.v1.nri"]["disable"] is False
    cri = "io.containerd.cri.v1.runtime"
    assert default["plugins"][cri]["cdi_spec_dirs"] == [str(tmp_path / "cdi")]
    assert asked["plugins"][cri]["cdi_spec_dirs"] == [str(tmp_path / "cdi"), "/var/run/cdi"]
