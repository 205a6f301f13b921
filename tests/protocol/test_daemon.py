"""The real daemon against the kubelet stand-in over real unix sockets, on real topology dumps.

In-process daemons for the protocol itself; ``python -m deviceplugin
device-plugin`` subprocesses where the process's own life matters (SIGTERM,
bad flags, a kubelet that is away). Fixture copies get isolcpus written in.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from api.v1beta1 import deviceplugin_pb2 as pb
from deviceplugin.daemon import Daemon, DaemonSettings, socket_name
from deviceplugin.host.sysfs import discover
from deviceplugin.model.devices import device_tree
from deviceplugin.model.plan import RESOURCE_NAMES, PlanOptions, Pool, plan_pools
from deviceplugin.standin import AdmissionError, ContainerSpec, PodSpec
from tests.support.daemon import (
    EXCLUSIVE,
    INFRA,
    INSTALL_DIR,
    NON_ISOL,
    SHARED,
    copy_with_isolcpus,
    cpus_of,
    daemon_process,
    device_ids,
    expected_nodes,
    our_sockets,
    stub,
    three_pool_pod,
    wait_registered,
)
from tests.support.records import logged
from tests.support.topologies import fixture_copy, set_online

# --- registration, capacity, topology --------------------------------------------------------

def test_every_pool_registers_with_the_same_options_it_answers(kubelet, plugin_dir, start_daemon, tmp_path):
    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path)  # booted with isolcpus=0-3,8-11
    start_daemon(sysfs, procfs, excl_non_isolcpus=frozenset({4}))
    wait_registered(kubelet, {EXCLUSIVE, NON_ISOL, SHARED, INFRA})
    registrations = {r.resource: r for r in kubelet.registrations()}
    assert set(registrations) == {EXCLUSIVE, NON_ISOL, SHARED, INFRA}
    for resource, registration in registrations.items():
        # The stand-in answered Register only after dialing back and calling GetDevicePluginOptions.
        assert registration.request_options == registration.options
        assert registration.options.get_preferred_allocation_available == (resource in (EXCLUSIVE, NON_ISOL))
        assert not registration.options.pre_start_required
    assert kubelet.violations() == []


def test_cmk_xeon_d_capacity_and_allocatable_per_pool(kubelet, start_daemon, tmp_path):
    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path)
    start_daemon(sysfs, procfs, num_exclusive_cores=3, num_shared_cores=1, shared_slots=5)
    wait_registered(kubelet, {EXCLUSIVE, SHARED, INFRA})
    assert kubelet.capacity() == kubelet.allocatable() == {EXCLUSIVE: 3, SHARED: 5, INFRA: 110}
    assert device_ids(kubelet)[EXCLUSIVE] == ["core-n0-p0-c0", "core-n0-p0-c1", "core-n0-p0-c2"]


FIXTURE_NAMES = ["hwloc-32intel64-2p8co2t+8ve", "hwloc-64amd64-4s2n4ca2co", "hwloc-256ppc-8n8s4t",
                 "hwloc-fakecpuid1f-64intel64-2p4d2n2c2t", "hwloc-16em64t-4s2c2t-offlines"]


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_capacity_topology_info_and_ids_on_real_dumps(name, kubelet, start_daemon, tmp_path):
    sysfs, procfs = copy_with_isolcpus(name, tmp_path)
    start_daemon(sysfs, procfs)
    plan = plan_pools(discover(sysfs, procfs), PlanOptions())
    served = {RESOURCE_NAMES[p]: plan.advertised(p) for p in Pool if plan.advertised(p)}
    wait_registered(kubelet, set(served))
    assert kubelet.capacity() == kubelet.allocatable() == served
    node_of = expected_nodes(name)
    exclusive = kubelet.devices(EXCLUSIVE)
    cores = device_tree(plan, discover(sysfs, procfs).online)[EXCLUSIVE].cores
    assert {frozenset(core.cpus) for core in plan.pools[Pool.EXCLUSIVE]} == {cores[i].cpus for i in exclusive}
    for device in exclusive.values():
        assert device.numa_nodes == (node_of[cores[device.id].first],)
        assert {node_of[cpu] for cpu in cores[device.id].cpus} == set(device.numa_nodes)
        assert len(device.id) <= 63
    for resource in (SHARED, INFRA):
        pool_nodes = {node_of[c] for c in plan.cpus(Pool.SHARED if resource == SHARED else Pool.INFRA)}
        assert {d.numa_nodes for d in kubelet.devices(resource).values()} == {tuple(sorted(pool_nodes))}


# --- preferred allocation, Allocate ------------------------------------------------------------

PREFER_DUMP = "hwloc-64amd64-4s2n4ca2co"  # 8 NUMA nodes of 8 single-thread cores


@pytest.fixture(scope="module")
def preferring_daemon(tmp_path_factory) -> Iterator[tuple[Path, dict[str, int]]]:
    import shutil
    import tempfile

    tmp = tmp_path_factory.mktemp("prefer")
    sysfs, procfs = copy_with_isolcpus(PREFER_DUMP, tmp)
    plugin_dir = Path(tempfile.mkdtemp(prefix="cmk-pa-", dir="/tmp"))
    daemon = Daemon(DaemonSettings(kubelet_dir=plugin_dir, sysfs_root=sysfs, procfs_root=procfs,
                                   install_dir=INSTALL_DIR))
    daemon.start()
    node_of = expected_nodes(PREFER_DUMP)
    nodes = {i: node_of[core.first] for i, core in daemon.tree[EXCLUSIVE].cores.items()}
    yield plugin_dir, nodes
    daemon.stop()
    shutil.rmtree(plugin_dir, ignore_errors=True)


@st.composite
def preference_requests(draw, ids: list[str]):
    available = draw(st.lists(st.sampled_from(ids), min_size=1, unique=True))
    must = draw(st.lists(st.sampled_from(available), unique=True, max_size=len(available)))
    size = draw(st.integers(min_value=max(1, len(must)), max_value=len(available)))
    return available, must, size


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_preferred_allocation_properties_through_grpc(preferring_daemon, data):
    plugin_dir, nodes = preferring_daemon
    available, must, size = data.draw(preference_requests(sorted(nodes)))
    reply = stub(plugin_dir, EXCLUSIVE).GetPreferredAllocation(pb.PreferredAllocationRequest(
        container_requests=[pb.ContainerPreferredAllocationRequest(
            available_deviceIDs=available, must_include_deviceIDs=must, allocation_size=size)]))
    chosen = list(reply.container_responses[0].deviceIDs)
    assert len(chosen) == len(set(chosen)) == size
    assert set(chosen) <= set(available) and set(must) <= set(chosen)
    assert all(i in nodes for i in chosen)  # whole cores: every answer is a core device we advertise
    must_nodes = {nodes[i] for i in must}
    one_node_fits = any(
        sum(1 for i in available if nodes[i] == node) >= size and must_nodes <= {node} for node in set(nodes.values())
    )
    if one_node_fits:
        assert len({nodes[i] for i in chosen}) == 1


def test_preferred_allocation_rejects_a_request_it_cannot_meet(preferring_daemon):
    plugin_dir, nodes = preferring_daemon
    with pytest.raises(grpc.RpcError) as info:
        stub(plugin_dir, EXCLUSIVE).GetPreferredAllocation(pb.PreferredAllocationRequest(
            container_requests=[pb.ContainerPreferredAllocationRequest(
                available_deviceIDs=sorted(nodes)[:2], must_include_deviceIDs=["cpus-9999"],
                allocation_size=2)]))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "cpus-9999" in info.value.details()


def test_allocate_envs_match_the_cores_of_the_ids(kubelet, start_daemon, tmp_path):
    sysfs, procfs = copy_with_isolcpus("hwloc-32intel64-2p8co2t+8ve", tmp_path)
    daemon = start_daemon(sysfs, procfs, num_shared_cores=2)
    wait_registered(kubelet, {EXCLUSIVE, SHARED, INFRA})
    pod = kubelet.admit(three_pool_pod(exclusive=3))
    dataplane = pod.container("dataplane")
    ids = dataplane.device_ids[EXCLUSIVE]
    cpus = sorted(frozenset().union(*(cpus_of(i, sysfs, procfs) for i in ids)))
    assert dataplane.envs["CMK_CPUS_EXCLUSIVE"] == ",".join(map(str, cpus))
    assert pod.container("controlplane").envs == {
        "CMK_CPUS_SHARED": ",".join(map(str, sorted(daemon.plan.cpus(Pool.SHARED))))}
    monitor = pod.container("monitor")
    assert monitor.envs["CMK_CPUS_INFRA"] == ",".join(map(str, sorted(daemon.plan.cpus(Pool.INFRA))))
    assert set(monitor.envs) == {"CMK_CPUS_INFRA", "CMK_CPUS_SHARED"}
    for container in pod.containers:
        assert [(m.container_path, m.host_path, m.read_only) for m in container.answer.mounts] == \
            [("/opt/bin", INSTALL_DIR, True)]
    assert kubelet.conflicts() == []
    assert kubelet.allocatable()[EXCLUSIVE] == kubelet.capacity()[EXCLUSIVE]  # allocatable is not "free"
    kubelet.delete_pod("demo")
    again = kubelet.admit(three_pool_pod(name="again", exclusive=len(daemon.tree[EXCLUSIVE].devices)))
    assert len(again.container("dataplane").device_ids[EXCLUSIVE]) == len(daemon.tree[EXCLUSIVE].devices)


def test_unknown_ids_are_rejected_naming_them(kubelet, plugin_dir, start_daemon, tmp_path):
    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path)
    start_daemon(sysfs, procfs)
    wait_registered(kubelet, {EXCLUSIVE, SHARED, INFRA})
    with pytest.raises(grpc.RpcError) as info:
        stub(plugin_dir, EXCLUSIVE).Allocate(pb.AllocateRequest(container_requests=[
            pb.ContainerAllocateRequest(devices_ids=["core-n0-p0-c0", "cpus-4.12", "bogus"])]))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "unknown device IDs: bogus, cpus-4.12" in info.value.details()


def test_init_container_devices_are_reused_by_the_app_container(kubelet, start_daemon, tmp_path):
    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path)
    start_daemon(sysfs, procfs, num_exclusive_cores=3, num_shared_cores=1)
    wait_registered(kubelet, {EXCLUSIVE, SHARED, INFRA})
    pod = kubelet.admit(PodSpec("reuse", init_containers=(ContainerSpec("init", limits={EXCLUSIVE: 2}),),
                                containers=(ContainerSpec("app", limits={EXCLUSIVE: 2}),)))
    init, app = pod.container("init"), pod.container("app")
    assert sorted(init.device_ids[EXCLUSIVE]) == sorted(app.device_ids[EXCLUSIVE])
    assert init.envs == app.envs
    with pytest.raises(AdmissionError):  # only one core is left for a second pod asking two
        kubelet.admit(PodSpec("second", containers=(ContainerSpec("c", limits={EXCLUSIVE: 2}),)))


# --- restarts, health -------------------------------------------------------------------------

def test_kubelet_restart_reregisters_every_pool_with_the_same_ids(kubelet, start_daemon, tmp_path):
    sysfs, procfs = copy_with_isolcpus("hwloc-32intel64-2p8co2t+8ve", tmp_path)
    start_daemon(sysfs, procfs)
    served = {EXCLUSIVE, SHARED, INFRA}
    wait_registered(kubelet, served)
    before, capacity = device_ids(kubelet), kubelet.capacity()
    for round_ in (2, 3):
        kubelet.restart()
        wait_registered(kubelet, served, count=round_)
        assert device_ids(kubelet) == before and kubelet.allocatable() == capacity
    assert sorted(r.resource for r in kubelet.registrations()) == sorted([*served] * 3)  # once per restart
    assert kubelet.violations() == []


def test_a_kubelet_restart_whose_sweep_removes_a_rebound_socket_is_counted_once(kubelet, plugin_dir, start_daemon,
                                                                                 tmp_path, caplog):
    # The real kubelet's start-up sweep lists the directory, then unlinks: a socket the daemon rebound at
    # the first one's going would be removed too. Here the same order by hand: the kubelet stops, a socket
    # of ours goes (the daemon stops serving and waits for a kubelet), the new kubelet.sock comes.
    sysfs, procfs = copy_with_isolcpus("hwloc-32intel64-2p8co2t+8ve", tmp_path)
    caplog.set_level(logging.INFO, logger="deviceplugin")
    start_daemon(sysfs, procfs)
    served = {EXCLUSIVE, SHARED, INFRA}
    wait_registered(kubelet, served)
    kubelet.stop()
    (plugin_dir / socket_name(EXCLUSIVE)).unlink()
    kubelet.wait_for(lambda: logged(caplog.records, "serving_again"), what="the daemon stopping its servers")
    kubelet.start()
    wait_registered(kubelet, served, count=2)
    assert [e["reason"] for e in logged(caplog.records, "serving_again")] == ["a plugin socket of ours was removed"]
    assert len(logged(caplog.records, "kubelet_restart")) == 1
    assert kubelet.violations() == []


def test_daemon_restart_serves_the_same_ids(kubelet, plugin_dir, start_daemon, tmp_path):
    sysfs, procfs = copy_with_isolcpus("hwloc-fakecpuid1f-64intel64-2p4d2n2c2t", tmp_path)
    first = start_daemon(sysfs, procfs)
    served = set(first.tree)
    wait_registered(kubelet, served)
    before = device_ids(kubelet)
    first.stop()
    assert not [p for p in plugin_dir.iterdir() if p.name.startswith("cmk-") and p.name.endswith(".sock")]
    kubelet.wait_for(lambda: all(v == 0 for v in kubelet.allocatable().values()), what="streams ended")
    start_daemon(sysfs, procfs)
    wait_registered(kubelet, served, count=2)
    kubelet.wait_for(lambda: kubelet.allocatable() == kubelet.capacity(), what="healthy again")
    assert device_ids(kubelet) == before


def test_cpu_offline_makes_its_device_unhealthy_and_online_healthy_again(kubelet, start_daemon, tmp_path):
    sysfs, procfs = copy_with_isolcpus("hwloc-32intel64-2p8co2t+8ve", tmp_path)
    daemon = start_daemon(sysfs, procfs)
    wait_registered(kubelet, {EXCLUSIVE, SHARED, INFRA})
    device_id = sorted(daemon.tree[EXCLUSIVE].devices)[1]
    cpu = max(cpus_of(device_id, sysfs, procfs))
    total = kubelet.capacity()[EXCLUSIVE]

    set_online(sysfs, cpu, False)
    kubelet.wait_for(lambda: kubelet.devices(EXCLUSIVE)[device_id].health == "Unhealthy", what="unhealthy")
    assert kubelet.allocatable()[EXCLUSIVE] == total - 1 and kubelet.capacity()[EXCLUSIVE] == total
    assert [i for i, d in kubelet.devices(EXCLUSIVE).items() if not d.healthy] == [device_id]
    with pytest.raises(AdmissionError):
        kubelet.admit(PodSpec("all", containers=(ContainerSpec("c", limits={EXCLUSIVE: total}),)))

    set_online(sysfs, cpu, True)
    kubelet.wait_for(lambda: kubelet.devices(EXCLUSIVE)[device_id].health == "Healthy", what="healthy")
    assert kubelet.allocatable()[EXCLUSIVE] == total
    kubelet.admit(PodSpec("all", containers=(ContainerSpec("c", limits={EXCLUSIVE: total}),)))


def test_a_shared_cpu_offline_makes_every_shared_slot_unhealthy(kubelet, start_daemon, tmp_path):
    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path)
    daemon = start_daemon(sysfs, procfs, shared_slots=4)
    wait_registered(kubelet, {EXCLUSIVE, SHARED, INFRA})
    set_online(sysfs, min(daemon.plan.cpus(Pool.SHARED)), False)
    kubelet.wait_for(lambda: kubelet.allocatable()[SHARED] == 0, what="shared unhealthy")
    assert kubelet.capacity()[SHARED] == 4 and kubelet.allocatable()[INFRA] == 110


# --- the process: SIGTERM, bad input, no kubelet ----------------------------------------------


def test_sigterm_stops_serving_removes_sockets_and_exits_0(kubelet, plugin_dir, tmp_path):
    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path)
    process = daemon_process(plugin_dir, sysfs, procfs)
    try:
        wait_registered(kubelet, {EXCLUSIVE, SHARED, INFRA})
        assert our_sockets(plugin_dir) == ["cmk-exclusive-cores.sock", "cmk-infra.sock", "cmk-shared.sock"]
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=10)
    finally:
        process.kill()
    assert process.returncode == 0, stderr
    assert our_sockets(plugin_dir) == []
    kubelet.wait_for(lambda: all(v == 0 for v in kubelet.allocatable().values()), what="streams ended")
    assert "registered cmk.intel.com/exclusive-cores" in stderr and "Traceback" not in stderr


def test_daemon_waits_for_a_kubelet_that_is_away_and_registers_when_it_comes(make_kubelet, plugin_dir, tmp_path):
    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path)
    process = daemon_process(plugin_dir, sysfs, procfs, "--shared-slots", "3")
    lines: list[str] = []
    outage = threading.Event()

    def read_stderr() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            lines.append(line)
            if "cannot register" in line:
                outage.set()

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    try:
        # No kubelet yet: the daemon says so once and keeps serving and retrying, it does not exit.
        assert outage.wait(30), f"no 'cannot register' line while the kubelet is away: {''.join(lines)}"
        assert process.poll() is None, "".join(lines)
        kubelet = make_kubelet()
        wait_registered(kubelet, {EXCLUSIVE, SHARED, INFRA})
        assert kubelet.capacity()[SHARED] == 3
    finally:
        process.terminate()
        process.wait(timeout=10)
        reader.join(timeout=10)
    assert process.returncode == 0
    assert "".join(lines).count("cannot register") == 1  # one line per outage, not one per retry or per pool


def test_config_file_feeds_the_plan_and_flags_win(kubelet, plugin_dir, tmp_path):
    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path)
    config = tmp_path / "cmk.yaml"
    config.write_text("num-exclusive-cores: 2\nshared-slots: 7\ninfra-slots: 9\n")
    process = daemon_process(plugin_dir, sysfs, procfs, "--config", str(config), "--infra-slots", "4")
    try:
        wait_registered(kubelet, {EXCLUSIVE, SHARED, INFRA})
        assert kubelet.capacity() == {EXCLUSIVE: 2, SHARED: 7, INFRA: 4}
    finally:
        process.terminate()
        process.communicate(timeout=10)


@pytest.mark.parametrize(("flags", "config", "message"), [
    (["--num-exclusive-cores", "9"], None, "asked for 9 exclusive cores"),
    ([], "num-exclusive-cores: many\n", "key 'num-exclusive-cores': expected a whole number"),
    ([], "exclusive_cores: 2\n", "unknown key 'exclusive_cores'"),
])
def test_bad_plan_or_config_is_one_line_and_serves_nothing(kubelet, plugin_dir, tmp_path, flags, config, message):
    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path)
    if config is not None:
        (tmp_path / "bad.yaml").write_text(config)
        flags = [*flags, "--config", str(tmp_path / "bad.yaml")]
    process = daemon_process(plugin_dir, sysfs, procfs, *flags)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode != 0
    assert stderr.count("\n") == 1 and stderr.startswith("cmk device-plugin: error: ") and message in stderr
    assert our_sockets(plugin_dir) == [] and kubelet.registrations() == []


def test_an_unusable_kubelet_dir_is_one_line_not_a_traceback(tmp_path):
    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path)
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    process = daemon_process(not_a_dir, sysfs, procfs)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode != 0
    assert stderr.startswith("cmk device-plugin: error: cannot use --kubelet-dir") and stderr.count("\n") == 1


def test_running_out_of_inotify_instances_is_one_error_and_nothing_left_served(plugin_dir, tmp_path, monkeypatch):
    """uid 0 shares fs.inotify.max_user_instances with every root process on a node. Exhausting the
    real limit here would break other processes on this machine, so the watcher's start fails as the
    kernel would make it fail (EMFILE), and the daemon must turn that into one CmkError and clean up."""
    import errno

    from deviceplugin.errors import CmkError
    from deviceplugin.host import watchers as watcher

    def no_instances(self):
        raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))

    monkeypatch.setattr(watcher.PluginDirWatcher, "start", no_instances)
    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path)
    daemon = Daemon(DaemonSettings(kubelet_dir=plugin_dir, sysfs_root=sysfs, procfs_root=procfs))
    with pytest.raises(CmkError, match="cannot watch for kubelet restarts and CPU hotplug: Too many open files "
                                       r"\(raise the sysctl fs.inotify.max_user_instances\)"):
        daemon.start()
    daemon.stop()
    assert not list(plugin_dir.glob("cmk-*.sock"))
