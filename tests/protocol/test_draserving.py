"""The daemon in DRA mode, and back in device-plugin mode after it, over real sockets.

Real daemons, the stand-in kubelet's device plugins and pod resources, and clients built from the
kubelet's ``pluginregistration/v1`` and ``dra/v1`` stubs. The API server's side (publishing, claims)
is a recorder and a table here; ``tests/protocol/test_sliceapi.py`` and the cluster tier hold it. The
switch both ways keeps every CPU given once: a core a device plugin's container holds stays out of the
slices until freed, and a core a DRA claim holds stays out of the device plugins until unprepared.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import grpc
import pytest

from api.dra.v1 import api_pb2 as dra_pb
from api.dra.v1 import api_pb2_grpc as dra_grpc
from api.drahealth.v1alpha1 import api_pb2 as health_pb
from api.drahealth.v1alpha1 import api_pb2_grpc as health_grpc
from api.pluginregistration.v1 import api_pb2 as reg_pb
from api.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from deviceplugin.daemon import Daemon, DaemonSettings, draserving
from deviceplugin.daemon.draserving import DraLink, checkpoint_path
from deviceplugin.model.claims import AllocatedDevice
from deviceplugin.model.modes import ServingMode
from deviceplugin.model.plan import PlanOptions
from deviceplugin.model.resourceslices import DRIVER_NAME, device_name
from deviceplugin.protocol.podresources import read_assignments
from deviceplugin.standin import ContainerSpec, Kubelet, PodSpec
from tests.support.daemon import EXCLUSIVE, INFRA, SHARED, probe, wait_registered
from tests.support.started import StopAfter
from tests.support.topologies import fixture_copy, set_online

NODE = "node-a"


@dataclass
class Api:
    """What the API server would hold: the slices last published, and the claims' allocations."""

    slices: list[dict[str, Any]] = field(default_factory=list)
    refuse: int = 0  # refuse the next N publishes
    published_count: int = 0
    claims: dict[str, list[AllocatedDevice]] = field(default_factory=dict)
    changed: threading.Condition = field(default_factory=threading.Condition)

    def publish(self, slices_at: Callable[[int], list[dict[str, Any]]]) -> bool:
        if self.refuse:
            self.refuse -= 1
            raise RuntimeError("POST resourceslices: 503 Service Unavailable: etcd leader changed")
        with self.changed:
            self.published_count += 1
            new = slices_at(self.published_count)
            wrote, self.slices = [s["spec"]["devices"] for s in new] != [s["spec"]["devices"] for s in self.slices], new
            self.changed.notify_all()
        return wrote

    def published(self, pool: str) -> set[str]:
        return {d["name"] for s in self.slices if s["metadata"]["labels"]["cmk.intel.com/pool"] == pool
                for d in s["spec"]["devices"]}

    def wait(self, check: Callable[[], bool], what: str) -> None:
        with self.changed:
            assert self.changed.wait_for(check, timeout=30), what

    def allocated(self, namespace: str, name: str, uid: str) -> Sequence[AllocatedDevice]:
        return self.claims[name]


@pytest.fixture
def settings(plugin_dir: Path, tmp_path: Path, kubelet: Kubelet) -> Callable[..., DaemonSettings]:
    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path)  # isolcpus=0-3,8-11

    def make(mode: ServingMode) -> DaemonSettings:
        return DaemonSettings(kubelet_dir=plugin_dir, sysfs_root=sysfs, procfs_root=procfs, install_dir="/opt/cmk-test",
                              plan=PlanOptions(num_exclusive_cores=3, num_shared_cores=1), held_recheck=0.1,
                              pod_resources_socket=kubelet.pod_resources_socket, mode=mode,
                              plugins_registry_dir=plugin_dir / "plugins_registry", plugins_dir=plugin_dir / "plugins")

    return make


@pytest.fixture
def daemons() -> Iterator[StopAfter]:
    with StopAfter() as kept:
        yield kept


def holdings(kubelet: Kubelet) -> Callable[[], Mapping[str, frozenset[str]] | None]:
    def held() -> Mapping[str, frozenset[str]]:
        assignments = read_assignments(kubelet.pod_resources_socket, allocatable=False)
        return {resource: assignments.held(resource) for resource in (EXCLUSIVE, SHARED, INFRA)}

    return held


def dra_daemon(settings: DaemonSettings, api: Api, kubelet: Kubelet) -> Daemon:
    return Daemon(settings, dra=DraLink(node_name=NODE, publish=api.publish, claims=api, held=holdings(kubelet)))


def registration(settings: DaemonSettings) -> reg_grpc.RegistrationStub:
    socket = settings.plugins_registry_dir / f"{DRIVER_NAME}-reg.sock"
    return reg_grpc.RegistrationStub(grpc.insecure_channel(f"unix:{socket}"))


def dra_stub(settings: DaemonSettings) -> dra_grpc.DRAPluginStub:
    socket = settings.plugins_dir / DRIVER_NAME / "dra.sock"
    return dra_grpc.DRAPluginStub(grpc.insecure_channel(f"unix:{socket}"))


def test_dra_mode_serves_one_driver_whose_slices_hold_every_pools_devices(settings, kubelet, daemons) -> None:
    api = Api()
    dra = settings(ServingMode.DRA)
    daemon = daemons.start(dra_daemon(dra, api, kubelet))
    api.wait(lambda: bool(api.slices), "slices published")
    for resource, devices in daemon.tree.items():
        assert api.published(str(devices.pool)) == {device_name(i) for i in devices.devices}, resource
    assert not kubelet.registrations()  # no device plugin registered: never both names on one node
    info = registration(dra).GetInfo(reg_pb.InfoRequest(), timeout=5)
    assert (info.type, info.name, info.endpoint) == ("DRAPlugin", DRIVER_NAME,
                                                     str(dra.plugins_dir / DRIVER_NAME / "dra.sock"))
    assert not daemon.registered
    unregistered = probe(dra.kubelet_dir, "--plugins-dir", str(dra.plugins_dir))
    registration(dra).NotifyRegistrationStatus(reg_pb.RegistrationStatus(plugin_registered=True), timeout=5)
    assert daemon.registered  # what the taint's removal and the readiness wait for
    ready = probe(dra.kubelet_dir, "--plugins-dir", str(dra.plugins_dir))
    assert unregistered.returncode == 1 and "has not registered the driver" in unregistered.stderr
    assert ready.returncode == 0, ready.stderr


def test_a_refused_publish_is_retried(settings, kubelet, daemons, monkeypatch) -> None:
    monkeypatch.setattr(draserving, "RETRY", 0.05)
    api = Api(refuse=2)
    daemons.start(dra_daemon(settings(ServingMode.DRA), api, kubelet))
    api.wait(lambda: bool(api.slices), "published after two refusals")
    assert api.refuse == 0


def test_switching_to_dra_keeps_a_core_a_device_plugin_container_holds_out_of_the_slices_until_freed(
        settings, kubelet, daemons) -> None:
    first = daemons.start(Daemon(settings(ServingMode.DEVICE_PLUGIN)))
    wait_registered(kubelet, {EXCLUSIVE, SHARED, INFRA})
    kubelet.admit(PodSpec("holder", (ContainerSpec("app", limits={EXCLUSIVE: 1}),)))
    (held,) = holdings(kubelet)()[EXCLUSIVE]
    first.stop()
    api = Api()
    daemons.start(dra_daemon(settings(ServingMode.DRA), api, kubelet))
    api.wait(lambda: bool(api.slices), "slices published")
    assert device_name(held) not in api.published("exclusive")
    assert len(api.published("exclusive")) == 2
    kubelet.delete_pod("holder")
    api.wait(lambda: device_name(held) in api.published("exclusive"), "the freed core published")


def prepared_then_stopped(settings, kubelet, daemons, pick: Callable[[Any], str]) -> tuple[DaemonSettings, Any]:
    """A DRA-mode daemon that prepared claim ``pinned`` on the exclusive core ``pick(tree)`` names, then stopped."""
    api = Api()
    dra = settings(ServingMode.DRA)
    daemon = daemons.start(dra_daemon(dra, api, kubelet))
    api.wait(lambda: bool(api.slices), "slices published")
    api.claims["pinned"] = [AllocatedDevice("cores", DRIVER_NAME, NODE, device_name(pick(daemon.tree)))]
    claim = dra_pb.Claim(namespace="default", name="pinned", uid="uid-pinned")
    answer = dra_stub(dra).NodePrepareResources(dra_pb.NodePrepareResourcesRequest(claims=[claim]), timeout=5)
    assert not answer.claims["uid-pinned"].error and checkpoint_path(dra).exists()
    daemon.stop()
    return dra, claim


def test_back_in_device_plugin_mode_a_claims_core_stays_out_until_the_kubelet_unprepares_it(
        settings, kubelet, daemons) -> None:
    dra, claim = prepared_then_stopped(settings, kubelet, daemons, lambda tree: min(tree[EXCLUSIVE].devices))

    back = daemons.start(Daemon(settings(ServingMode.DEVICE_PLUGIN)))
    wait_registered(kubelet, {EXCLUSIVE, SHARED, INFRA})
    assert set(kubelet.devices(EXCLUSIVE)) == {i for i in back.tree[EXCLUSIVE].devices}
    assert kubelet.allocatable()[EXCLUSIVE] == 2  # the claimed core is advertised unhealthy
    refused = dra_stub(dra).NodePrepareResources(dra_pb.NodePrepareResourcesRequest(
        claims=[dra_pb.Claim(namespace="default", name="late", uid="uid-late")]), timeout=5)
    assert "device plugins now" in refused.claims["uid-late"].error
    dra_stub(dra).NodeUnprepareResources(dra_pb.NodeUnprepareResourcesRequest(claims=[claim]), timeout=5)
    kubelet.wait_for(lambda: kubelet.allocatable().get(EXCLUSIVE) == 3, what="the unprepared core served")
    kubelet.wait_for(lambda: not (dra.plugins_registry_dir / f"{DRIVER_NAME}-reg.sock").exists(),
                     what="the driver deregistered")


def test_a_leftover_claims_core_stays_out_even_where_the_new_plan_puts_it_in_another_pool(
        settings, kubelet, daemons) -> None:
    dra, claim = prepared_then_stopped(settings, kubelet, daemons, lambda tree: next(
        i for i, d in tree[EXCLUSIVE].devices.items() if d.cpus == {2, 10}))

    moved = replace(settings(ServingMode.DEVICE_PLUGIN), plan=PlanOptions(num_exclusive_cores=2, num_shared_cores=2))
    back = daemons.start(Daemon(moved))  # the new plan puts {2,10} into shared
    wait_registered(kubelet, {EXCLUSIVE, SHARED, INFRA})
    assert not {2, 10} & {cpu for d in back.tree[SHARED].devices.values() if d.healthy for cpu in d.cpus}
    dra_stub(dra).NodeUnprepareResources(dra_pb.NodeUnprepareResourcesRequest(claims=[claim]), timeout=5)
    kubelet.wait_for(lambda: {2, 10} <= {cpu for d in back.tree[SHARED].devices.values() for cpu in d.cpus},
                     what="the unprepared core back in its new pool")


def test_each_registration_publishes_again_since_a_starting_kubelet_deletes_the_nodes_slices(
        settings, kubelet, daemons) -> None:
    api = Api()
    dra = settings(ServingMode.DRA)
    daemons.start(dra_daemon(dra, api, kubelet))
    api.wait(lambda: bool(api.slices), "slices published")
    with api.changed:
        api.slices, count = [], api.published_count  # what the kubelet's start does to them
    registration(dra).NotifyRegistrationStatus(reg_pb.RegistrationStatus(plugin_registered=True), timeout=5)
    api.wait(lambda: api.published_count > count and bool(api.slices), "published again after the registration")


def test_the_kubelet_hears_every_devices_health_and_a_core_whose_cpu_goes_offline_turns_unhealthy(
        settings, kubelet, daemons) -> None:
    """DRAResourceHealth on the service socket: every device of every pool, named as the slices name them; a core
    with a thread offline leaves the slices and is reported Unhealthy (a pod holding it shows that in its status)."""
    api = Api()
    dra = settings(ServingMode.DRA)
    daemon = daemons.start(dra_daemon(dra, api, kubelet))
    api.wait(lambda: bool(api.slices), "slices published")
    socket = dra.plugins_dir / DRIVER_NAME / "dra.sock"
    stub = health_grpc.DRAResourceHealthStub(grpc.insecure_channel(f"unix:{socket}"))
    stream = stub.NodeWatchResources(health_pb.NodeWatchResourcesRequest(), timeout=30)
    first = {(d.device.pool_name, d.device.device_name): d.health for d in next(stream).devices}
    assert first == {(NODE, device_name(i)): health_pb.HEALTHY for devices in daemon.tree.values()
                     for i in devices.devices}
    device_id = min(daemon.tree[EXCLUSIVE].devices)
    set_online(dra.sysfs_root, max(daemon.tree[EXCLUSIVE].devices[device_id].cpus), False)
    unhealthy: list[tuple[str, str]] = []
    while not unhealthy:  # the next report after the change (the stream's deadline bounds the wait)
        unhealthy = [(d.device.device_name, d.message) for d in next(stream).devices if d.health != health_pb.HEALTHY]
    assert unhealthy == [(device_name(device_id), f"a CPU of exclusive device {device_id} is offline")]
    api.wait(lambda: device_name(device_id) not in api.published("exclusive"), "the core out of the slices")
    stream.cancel()
