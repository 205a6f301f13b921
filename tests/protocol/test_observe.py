"""What an operator sees, against the real daemon and the kubelet stand-in over real sockets.

``cmk describe``'s live view as a subprocess after the stand-in admitted and
deleted pods; ``/metrics`` scraped over HTTP and parsed with Prometheus's own
text parser, compared with the stand-in's state; the NFD feature file and
its removal on SIGTERM; the JSON log lines carrying each event.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest

from api.v1beta1 import deviceplugin_pb2 as pb
from deviceplugin import __version__
from deviceplugin.model.cpulist import format_cpu_list
from deviceplugin.model.plan import Mode, Pool
from deviceplugin.standin import ContainerSpec, Kubelet, PodSpec
from tests.support.daemon import (
    EXCLUSIVE,
    INFRA,
    REPO,
    SHARED,
    copy_with_isolcpus,
    cpus_of,
    daemon_process,
    stub,
    three_pool_pod,
    wait_registered,
)
from tests.support.metrics import (
    POOLS,
    Logs,
    eventually,
    metered_daemon,
    pool_values,
    scrape,
    value,
)
from tests.support.topologies import fixture_copy, set_online

SPREAD_DUMP = "hwloc-fakecpuid1f-64intel64-2p4d2n2c2t"  # SMT2, many NUMA nodes: spread puts each core on its own
SPREAD_PLAN = {"exclusive_mode": Mode.SPREAD, "num_exclusive_cores": 4, "shared_slots": 3, "infra_slots": 3}
SPREAD_CONFIG = "exclusive-mode: spread\nnum-exclusive-cores: 4\nshared-slots: 3\ninfra-slots: 3\n"


def describe(sysfs: Path, procfs: Path, socket: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "deviceplugin", "describe", "--sysfs-root", str(sysfs), "--procfs-root", str(procfs),
         "--pod-resources-socket", str(socket), *flags],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False)


def live_pools(result: subprocess.CompletedProcess[str]) -> dict[str, dict[str, Any]]:
    assert result.returncode == 0, result.stderr
    live = json.loads(result.stdout)["live"]
    assert live["available"], live
    return {pool["pool"]: pool for pool in live["pools"]}


# --- describe's live view --------------------------------------------------------------------

def test_describe_live_view_follows_admissions_and_deletions(kubelet, start_daemon, tmp_path):
    sysfs, procfs = copy_with_isolcpus(SPREAD_DUMP, tmp_path)
    daemon = start_daemon(sysfs, procfs, **SPREAD_PLAN)
    wait_registered(kubelet, {EXCLUSIVE, SHARED, INFRA})
    (tmp_path / "cmk.yaml").write_text(SPREAD_CONFIG)
    flags = ("--config", str(tmp_path / "cmk.yaml"), "-o", "json")
    socket = kubelet.pod_resources_socket
    tree = daemon.tree

    pods = {live["pool"]: live for live in [*live_pools(describe(sysfs, procfs, socket, *flags)).values()]}
    assert {p: (v["capacity"], v["allocated"], v["free"], v["unhealthy"]) for p, v in pods.items()} == {
        "exclusive": (4, 0, 4, 0), "shared": (3, 0, 3, 0), "infra": (3, 0, 3, 0)}

    demo = kubelet.admit(three_pool_pod("demo", exclusive=2))
    other = kubelet.admit(PodSpec("other", namespace="batch", containers=(
        ContainerSpec("worker", limits={EXCLUSIVE: 1}),)))
    pools = live_pools(describe(sysfs, procfs, socket, *flags))
    exclusive = pools["exclusive"]
    held = {(c["namespace"], c["pod"], c["container"]): c for c in exclusive["containers"]}
    assert set(held) == {("default", "demo", "dataplane"), ("batch", "other", "worker")}
    for key, pod, name in ((("default", "demo", "dataplane"), demo, "dataplane"),
                           (("batch", "other", "worker"), other, "worker")):
        ids = pod.container(name).device_ids[EXCLUSIVE]
        assert sorted(held[key]["devices"]) == sorted(ids)
        # CPUs come from the daemon's device model: the cores the plan put behind those IDs.
        assert held[key]["cpus"] == format_cpu_list(cpu for i in ids for cpu in tree[EXCLUSIVE].devices[i].cpus)
    taken = {i for c in exclusive["containers"] for i in c["devices"]}
    free = {i for node in exclusive["free_by_numa_node"].values() for i in node["devices"]}
    assert free == set(tree[EXCLUSIVE].devices) - taken and len(free) == 1
    (free_id,) = free
    (node,) = tree[EXCLUSIVE].devices[free_id].numa_nodes
    assert exclusive["free_by_numa_node"] == {str(node): {"count": 1, "devices": [free_id]}}
    assert (exclusive["allocated"], exclusive["free"]) == (3, 1)
    shared = pools["shared"]
    assert {(c["pod"], c["container"]) for c in shared["containers"]} == {("demo", "controlplane"), ("demo", "monitor")}
    assert all(c["cpus"] == format_cpu_list(daemon.plan.cpus(Pool.SHARED)) for c in shared["containers"])
    assert (shared["allocated"], shared["free"]) == (2, 1)

    kubelet.delete_pod("demo")
    pools = live_pools(describe(sysfs, procfs, socket, *flags))
    exclusive = pools["exclusive"]
    assert [(c["pod"], c["container"]) for c in exclusive["containers"]] == [("other", "worker")]
    assert (exclusive["allocated"], exclusive["free"], exclusive["unhealthy"]) == (1, 3, 0)
    assert pools["shared"]["containers"] == [] and pools["shared"]["free"] == 3

    # A CPU goes offline after the daemon planned: describe, planning now, names that core by its online
    # thread; the kubelet does not count that ID allocatable, and a note names the offline CPU.
    offline = max(tree[EXCLUSIVE].devices[free_id].cpus)
    set_online(sysfs, offline, False)
    kubelet.wait_for(lambda: kubelet.devices(EXCLUSIVE)[free_id].health == "Unhealthy", what="unhealthy")
    live = json.loads(describe(sysfs, procfs, socket, *flags).stdout)["live"]
    exclusive = {p["pool"]: p for p in live["pools"]}["exclusive"]
    (unhealthy,) = exclusive["unhealthy_devices"]
    assert unhealthy["reason"] == "not allocatable at the kubelet"
    assert unhealthy["cpus"] == format_cpu_list(tree[EXCLUSIVE].devices[free_id].cpus - {offline})
    assert (exclusive["allocated"], exclusive["free"], exclusive["unhealthy"]) == (1, 2, 1)
    assert live["notes"][0].startswith(f"CPUs {offline} are offline")
    set_online(sysfs, offline, True)
    kubelet.wait_for(lambda: kubelet.devices(EXCLUSIVE)[free_id].health == "Healthy", what="healthy")

    table = describe(sysfs, procfs, socket, "--config", str(tmp_path / "cmk.yaml"))
    assert table.returncode == 0, table.stderr
    rows = [line.split() for line in table.stdout.splitlines()]
    assert ["exclusive", "1/4", "3", "0"] in [row[:4] for row in rows]
    holder = next(row for row in rows if row[:3] == ["exclusive", "batch/other", "worker"])
    assert holder[3:] == [*other.container("worker").device_ids[EXCLUSIVE], held[("batch", "other", "worker")]["cpus"]]
    assert "  no container holds a CMK device" not in table.stdout and "unhealthy in" not in table.stdout


def test_describe_flags_a_pool_the_kubelet_does_not_count_allocatable(kubelet, start_daemon, tmp_path):
    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path)
    daemon = start_daemon(sysfs, procfs, shared_slots=2)
    wait_registered(kubelet, {EXCLUSIVE, SHARED, INFRA})
    daemon.stop()  # every stream ends: the kubelet marks every device unhealthy
    kubelet.wait_for(lambda: all(v == 0 for v in kubelet.allocatable().values()), what="streams ended")
    pools = live_pools(describe(sysfs, procfs, kubelet.pod_resources_socket, "--shared-slots", "2", "-o", "json"))
    assert {u["reason"] for u in pools["shared"]["unhealthy_devices"]} == {"resource not registered with the kubelet"}
    assert (pools["shared"]["unhealthy"], pools["shared"]["free"]) == (2, 0)


def test_describe_without_a_kubelet_shows_the_plan_and_one_note(tmp_path):
    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path)
    missing = tmp_path / "no-kubelet.sock"
    table = describe(sysfs, procfs, missing)
    assert table.returncode == 0 and table.stderr == ""
    notes = [line for line in table.stdout.splitlines() if "live view" in line]
    assert notes == [(f"live view unavailable (showing the plan only): no socket at {missing} (is the kubelet "
                      "running, and the directory mounted?)")]
    assert "Pool plan" in table.stdout
    as_json = json.loads(describe(sysfs, procfs, missing, "-o", "json").stdout)
    assert as_json["live"] == {"available": False, "socket": str(missing), "reason": notes[0].split(": ", 1)[1]}


# --- the daemon process: metrics, JSON logs, NFD --------------------------------------------


def test_metrics_and_json_logs_follow_the_kubelet(kubelet: Kubelet, plugin_dir, tmp_path):
    daemon = metered_daemon(kubelet, plugin_dir, tmp_path)
    process, logs, sysfs, procfs = daemon.process, daemon.logs, daemon.sysfs, daemon.procfs
    try:
        address = logs.wait_for("metrics_serving")["address"]
        assert address.startswith("127.0.0.1:")
        wait_registered(kubelet, {EXCLUSIVE, SHARED, INFRA})
        samples = eventually(address, lambda s: all(v == 1 for v in pool_values(s, "cmk_pool_registered").values()),
                             "registered")
        assert pool_values(samples, "cmk_pool_capacity_devices") == kubelet.capacity() == {
            EXCLUSIVE: 3, SHARED: 4, INFRA: 110}
        assert pool_values(samples, "cmk_pool_allocatable_devices") == kubelet.allocatable()
        assert pool_values(samples, "cmk_pool_allocated_devices") == {EXCLUSIVE: 0, SHARED: 0, INFRA: 0}
        assert pool_values(samples, "cmk_pool_unhealthy_devices") == {EXCLUSIVE: 0, SHARED: 0, INFRA: 0}
        assert value(samples, "cmk_pod_resources_up") == 1
        assert {r: value(samples, "cmk_registrations_total", resource=r) for r in POOLS} == dict.fromkeys(POOLS, 1)
        assert value(samples, "cmk_kubelet_restarts_total") == 0
        assert value(samples, "cmk_pool_cpus", pool="exclusive", numa_node="0") == 6
        assert value(samples, "cmk_pool_cpus", pool="infra", numa_node="0") == 8
        assert {e["resource"] for e in logs.events("registered")} == set(POOLS)

        pod = kubelet.admit(three_pool_pod("demo", exclusive=2))
        samples = scrape(address)
        assert pool_values(samples, "cmk_pool_allocated_devices") == {EXCLUSIVE: 2, SHARED: 2, INFRA: 1}
        # One Allocate per container and resource: dataplane; controlplane and monitor (shared); monitor (infra).
        assert value(samples, "cmk_allocate_duration_seconds_count", pool="exclusive") == 1
        assert value(samples, "cmk_allocate_duration_seconds_count", pool="shared") == 2
        assert value(samples, "cmk_allocate_duration_seconds_count", pool="infra") == 1
        assert value(samples, "cmk_preferred_allocation_duration_seconds_count", pool="exclusive") == 1
        ids = sorted(pod.container("dataplane").device_ids[EXCLUSIVE])
        allocated = logs.wait_for("allocated", lambda e: e["resource"] == EXCLUSIVE)
        assert sorted(allocated["devices"]) == ids and allocated["pool"] == "exclusive"
        assert allocated["cpus"] == format_cpu_list(cpu for i in ids for cpu in cpus_of(i, sysfs, procfs))
        resolved = logs.wait_for("allocation_resolved", lambda e: e["resource"] == EXCLUSIVE)
        assert (resolved["namespace"], resolved["pod"], resolved["container"]) == ("default", "demo", "dataplane")
        assert sorted(resolved["devices"]) == ids

        kubelet.delete_pod("demo")
        assert pool_values(scrape(address), "cmk_pool_allocated_devices") == {EXCLUSIVE: 0, SHARED: 0, INFRA: 0}

        kubelet.restart()
        wait_registered(kubelet, {EXCLUSIVE, SHARED, INFRA}, count=2)
        # At least twice, not exactly: a starting kubelet deletes the plugin sockets one by one, so on a loaded
        # machine it can delete those the daemon has just bound anew, and the daemon serves (and registers) once more.
        samples = eventually(address, lambda s: all(value(s, "cmk_registrations_total", resource=r) >= 2
                                                    for r in POOLS), "second registrations")
        assert value(samples, "cmk_kubelet_restarts_total") == 1
        assert logs.wait_for("kubelet_restart")["level"] == "info"

        with pytest.raises(grpc.RpcError):
            stub(plugin_dir, EXCLUSIVE).Allocate(pb.AllocateRequest(
                container_requests=[pb.ContainerAllocateRequest(devices_ids=["bogus"])]))
        assert value(scrape(address), "cmk_allocate_errors_total", pool="exclusive") == 1
        refused = logs.wait_for("allocate_refused")
        assert refused["level"] == "warning" and refused["devices"] == ["bogus"]

        set_online(sysfs, 9, False)  # the second thread of core {1,9}
        kubelet.wait_for(lambda: kubelet.devices(EXCLUSIVE)["core-n0-p0-c1"].health == "Unhealthy", what="unhealthy")
        samples = scrape(address)
        assert value(samples, "cmk_pool_unhealthy_devices", pool="exclusive", resource=EXCLUSIVE) == 1
        assert pool_values(samples, "cmk_pool_allocatable_devices") == kubelet.allocatable()
        change = logs.wait_for("health_changed")
        assert (change["device"], change["healthy"], change["cpus"]) == ("core-n0-p0-c1", False, "1,9")

        kubelet.stop()  # the kubelet is away: allocated is left out rather than reported as 0
        samples = scrape(address)
        assert value(samples, "cmk_pod_resources_up") == 0
        assert pool_values(samples, "cmk_pool_allocated_devices") == dict.fromkeys(POOLS)
        assert value(samples, "cmk_pool_capacity_devices", pool="exclusive", resource=EXCLUSIVE) == 3
    finally:
        process.terminate()
        process.wait(timeout=20)
        logs.join()
    assert process.returncode == 0
    assert {"time", "level", "logger", "event", "msg"} <= set(logs.events("registered")[0])


def test_nfd_file_describes_the_node_and_is_kept_expiring_on_sigterm(kubelet, plugin_dir, tmp_path):
    """A rollout stops the daemon before the next starts: removing the file would flap the node's labels."""
    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path)  # isolcpus=0-3,8-11
    features = plugin_dir / "features.d"
    process = daemon_process(plugin_dir, sysfs, procfs, "--num-exclusive-cores", "3", "--shared-slots", "5")
    try:
        wait_registered(kubelet, {EXCLUSIVE, SHARED, INFRA})
        kubelet.wait_for(lambda: (features / "cmk.intel.com").exists(), what="feature file")
        lines = (features / "cmk.intel.com").read_text().splitlines()
        assert not any(line.startswith("# +") for line in lines)  # no expiry while it serves
        assert [p.name for p in features.iterdir()] == ["cmk.intel.com"]  # no temp file left behind
        labels = dict(line.split("=", 1) for line in lines if not line.startswith("#"))
        assert labels == {
            "cmk.intel.com/isolcpus": "true",
            "cmk.intel.com/sst-bf": "false",
            "cmk.intel.com/sst-cp": "false",
            "cmk.intel.com/numa-nodes": "1",
            "cmk.intel.com/exclusive-cores": "3",
            "cmk.intel.com/exclusive-non-isolcpus-cores": "0",
            "cmk.intel.com/shared-cores": "1",
            "cmk.intel.com/shared-slots": "5",
            "cmk.intel.com/infra-cores": "4",
            "cmk.intel.com/infra-slots": "110",
        }
        stopped_at = datetime.now(UTC).replace(microsecond=0)
        process.terminate()
        _, stderr = process.communicate(timeout=20)
    finally:
        process.kill()
    assert process.returncode == 0, stderr
    assert [p.name for p in features.iterdir()] == ["cmk.intel.com"]
    kept = (features / "cmk.intel.com").read_text().splitlines()
    assert kept[0].startswith("# +expiry-time=")  # NFD's directive, RFC 3339 in UTC as source/local parses it
    expiry = datetime.strptime(kept[0].partition("=")[2], "%Y-%m-%dT%H:%M:%S%z")
    assert stopped_at + timedelta(minutes=59) <= expiry <= stopped_at + timedelta(minutes=61)
    assert [line for line in kept if not line.startswith("#")] == [line for line in lines if not line.startswith("#")]
    text_lines = stderr.splitlines()
    assert any(" event=nfd_expiring " in line and f"path={features / 'cmk.intel.com'}" in line for line in text_lines)
    assert any(" event=registered resource=cmk.intel.com/exclusive-cores " in line for line in text_lines)


def test_no_nfd_writes_no_feature_file(kubelet, plugin_dir, tmp_path):
    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path)
    process = daemon_process(plugin_dir, sysfs, procfs, "--no-nfd")
    try:
        wait_registered(kubelet, {EXCLUSIVE, SHARED, INFRA})
    finally:
        process.terminate()
        process.communicate(timeout=20)
    assert process.returncode == 0
    assert not (plugin_dir / "features.d").exists()


def test_the_section_a_node_took_is_logged_and_exported_with_its_generation(kubelet, plugin_dir, tmp_path,
                                                                             monkeypatch):
    """One ConfigMap for a fleet: the daemon takes its node's section (NODE_NAME, as the downward API sets it)."""
    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path)
    config = tmp_path / "config.yaml"
    config.write_text("default:\n  num-exclusive-cores: 1\nnodes:\n  - names: [other]\n"
                      "    config: {num-exclusive-cores: 3}\n  - nameRegex: 'xeon-.*'\n"
                      "    config: {num-exclusive-cores: 2}\n")
    monkeypatch.setenv("NODE_NAME", "xeon-7")
    process = daemon_process(plugin_dir, sysfs, procfs, "--config", str(config), "--metrics-address", "127.0.0.1:0",
                             "--log-format", "json")
    logs = Logs(process)
    try:
        active = logs.wait_for("config_active")
        address = logs.wait_for("metrics_serving")["address"]
        wait_registered(kubelet, {EXCLUSIVE, SHARED, INFRA})
        assert kubelet.capacity()[EXCLUSIVE] == 2
        samples = scrape(address)
    finally:
        process.terminate()
        process.wait(timeout=20)
        logs.join()
    assert {k: active[k] for k in ("path", "section", "node")} == {"path": str(config), "section": "nodes[1]",
                                                                   "node": "xeon-7"}
    assert value(samples, "cmk_config_info", section="nodes[1]", generation=active["generation"]) == 1
    assert [key for key in samples if key[0] == "cmk_config_info"] == [
        ("cmk_config_info", frozenset({("section", "nodes[1]"), ("generation", active["generation"])}))]


def test_a_config_error_in_json_mode_is_one_json_line(kubelet, plugin_dir, tmp_path):
    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path)
    process = daemon_process(plugin_dir, sysfs, procfs, "--log-format", "json", "--num-exclusive-cores", "9")
    _, stderr = process.communicate(timeout=30)
    assert process.returncode != 0
    (line,) = stderr.splitlines()
    record = json.loads(line)
    assert record["event"] == "config_error" and record["level"] == "error"
    assert "asked for 9 exclusive cores" in record["error"] and record["msg"] == record["error"]
    assert kubelet.registrations() == []


def test_a_busy_metrics_port_is_one_line_and_serves_nothing(kubelet, plugin_dir, tmp_path):
    import socket

    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        process = daemon_process(plugin_dir, sysfs, procfs, "--metrics-address", f"127.0.0.1:{port}")
        _, stderr = process.communicate(timeout=30)
    assert process.returncode != 0
    assert stderr.startswith(f"cmk device-plugin: error: cannot serve metrics on 127.0.0.1:{port}")
    assert stderr.count("\n") == 1 and kubelet.registrations() == []


def test_the_daemon_names_its_release_once_started_and_in_cmk_build_info(kubelet: Kubelet, plugin_dir, tmp_path):
    daemon = metered_daemon(kubelet, plugin_dir, tmp_path)
    try:
        address = daemon.logs.wait_for("metrics_serving")["address"]
        samples = scrape(address)
    finally:
        daemon.process.terminate()
        daemon.process.wait(timeout=20)
        daemon.logs.join()
    # once the start went through (a failed start stays a single line), before any allocation
    events = [line.get("event") for line in daemon.logs.lines]
    assert events.count("starting") == 1 and events.index("serving") < events.index("starting")
    first = daemon.logs.lines[events.index("starting")]
    assert first["version"] == __version__
    assert first["msg"].startswith(f"cmk-deviceplugin {__version__} starting")
    assert value(samples, "cmk_build_info", version=__version__, python=platform.python_version(),
                 machine=platform.machine()) == 1
