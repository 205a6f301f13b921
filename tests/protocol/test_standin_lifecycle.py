"""The stand-in's lifecycle rules on their own, against small plugins these tests write.

Container starts replaying cached answers (random merge order, CDI names
resolved against a CDI directory), the version's CDI gate, the endpoint
cleanup after the grace period, a stream the kubelet drops, the orphaning
of a live client by a failed re-registration, and re-admission after a
kubelet restart with the kubelet's two errors.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from api.constants import HEALTHY, UNHEALTHY
from api.v1beta1 import deviceplugin_pb2 as pb
from deviceplugin.errors import CmkError
from deviceplugin.standin import Kubelet, KubeletOptions
from deviceplugin.standin.lifecycle import ContainerStartError
from tests.support.plugins import FOUR, MiniPlugin, R, pod

CDI_NAME = "example.com/cores=all"


class CdiPlugin(MiniPlugin):
    """A MiniPlugin whose Allocate answer names a CDI device, as ours does."""

    def Allocate(self, request: pb.AllocateRequest, context: grpc.ServicerContext) -> pb.AllocateResponse:
        reply = super().Allocate(request, context)
        reply.container_responses[0].cdi_devices.append(pb.CDIDevice(name=CDI_NAME))
        return reply


def write_cdi_spec(cdi_dir: Path) -> Path:
    cdi_dir.mkdir(parents=True, exist_ok=True)
    path = cdi_dir / "example.com-cores.json"
    path.write_text(json.dumps({"cdiVersion": "0.5.0", "kind": "example.com/cores",
                                "devices": [{"name": "all", "containerEdits": {"env": ["X=1"]}}]}))
    return path


class Clock:
    """A monotonic clock the test moves: the grace period passes in no time."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def serve_cdi_plugin(plugin_dir: Path, **settings: object) -> CdiPlugin:
    return CdiPlugin(plugin_dir, **settings).serve()  # type: ignore[arg-type]


@pytest.fixture
def cdi_kubelet(make_kubelet, plugin_dir: Path, tmp_path: Path) -> Callable[..., tuple[Kubelet, CdiPlugin, Path]]:
    made: list[CdiPlugin] = []

    def make(**settings: object) -> tuple[Kubelet, CdiPlugin, Path]:
        cdi_dir = tmp_path / "cdi"
        kubelet = make_kubelet(cdi_dirs=[cdi_dir], **settings)
        plugin = serve_cdi_plugin(plugin_dir)
        made.append(plugin)
        plugin.register()
        kubelet.wait_for(lambda: kubelet.allocatable().get(R) == 4)
        return kubelet, plugin, cdi_dir

    yield make
    for plugin in made:
        plugin.stop()


# -- container starts replay the cached answers ------------------------------------------------------


def test_container_starts_replay_the_cached_answer_without_allocate(kubelet: Kubelet, registered) -> None:
    plugin = registered()
    admitted = kubelet.admit(pod("p", {R: 2}))
    for _ in range(3):
        assert kubelet.start_container("p", "c0").envs == admitted.container("c0").envs
    assert len(plugin.payloads("Allocate")) == 1
    assert kubelet.starts("p", "c0") == 3


def test_each_start_merges_the_answers_in_a_new_random_order(kubelet: Kubelet, registered) -> None:
    registered(resource="example.com/a", envs={"SAME": "from-a"})
    registered(resource="example.com/b", envs={"SAME": "from-b"})
    kubelet.admit(pod("p", {"example.com/a": 1, "example.com/b": 1}))
    winners = {kubelet.start_container("p", "c0").envs["SAME"] for _ in range(20)}
    assert winners == {"from-a", "from-b"}  # first wins, and which is first changes between starts


def test_a_start_fails_when_a_cdi_name_no_longer_resolves(cdi_kubelet) -> None:
    kubelet, _, cdi_dir = cdi_kubelet()
    spec = write_cdi_spec(cdi_dir)
    kubelet.admit(pod("p", {R: 1}))
    assert kubelet.start_container("p", "c0").cdi_devices == (CDI_NAME,)
    spec.unlink()
    with pytest.raises(ContainerStartError, match=f"unresolvable CDI devices {CDI_NAME}"):
        kubelet.start_container("p", "c0")
    write_cdi_spec(cdi_dir)
    kubelet.start_container("p", "c0")


def test_a_start_without_the_spec_fails_but_the_pod_keeps_its_devices(cdi_kubelet) -> None:
    kubelet, _, _ = cdi_kubelet()
    kubelet.admit(pod("p", {R: 3}))
    with pytest.raises(ContainerStartError, match="unresolvable CDI devices"):
        kubelet.start_container("p", "c0")
    assert [p.name for p in kubelet.pods()] == ["p"]  # CreateContainerError: the pod still holds its devices


def test_the_cdi_gate_is_off_in_1_28_and_drops_the_names(cdi_kubelet) -> None:
    kubelet, _, _ = cdi_kubelet(version="1.28")
    admitted = kubelet.admit(pod("p", {R: 1}))
    assert admitted.container("c0").answer.cdi_devices == ()
    assert kubelet.start_container("p", "c0").cdi_devices == ()  # no spec needed: names never reach the runtime


def test_the_cdi_gate_can_be_turned_on_in_1_28_and_off_in_1_30_only(cdi_kubelet, plugin_dir: Path) -> None:
    kubelet, _, cdi_dir = cdi_kubelet(version="1.28", feature_gates={"DevicePluginCDIDevices": True})
    write_cdi_spec(cdi_dir)
    assert kubelet.admit(pod("p", {R: 1})).container("c0").answer.cdi_devices == (CDI_NAME,)
    assert Kubelet(plugin_dir, KubeletOptions(version="1.30", feature_gates={"DevicePluginCDIDevices": False})).gates == {
        "DevicePluginCDIDevices": False, "KubeletPodResourcesGet": False}
    with pytest.raises(CmkError, match="GA and locked on in kubelet 1.31"):
        Kubelet(plugin_dir, KubeletOptions(version="1.31", feature_gates={"DevicePluginCDIDevices": False}))
    with pytest.raises(CmkError, match="choose one of 1.28, "):
        Kubelet(plugin_dir, KubeletOptions(version="1.27"))


# -- the grace period and the endpoint cleanup -------------------------------------------------------


def test_after_the_grace_period_starts_of_pods_holding_the_resource_fail(make_kubelet, plugins) -> None:
    clock = Clock()
    kubelet = make_kubelet(clock=clock)
    plugin = plugins()
    plugin.register()
    kubelet.wait_for(lambda: kubelet.allocatable().get(R) == 4)
    kubelet.admit(pod("p", {R: 1}))
    plugin.end_stream()
    kubelet.wait_for(lambda: kubelet.allocatable()[R] == 0, what="stream ended")
    clock.now += 299
    kubelet.start_container("p", "c0")  # within the grace period: the stopped endpoint is still there
    assert kubelet.capacity()[R] == 4
    clock.now += 1
    assert kubelet.capacity()[R] == 0
    with pytest.raises(ContainerStartError, match=f"^endpoint not found in cache for a registered resource: {R}$"):
        kubelet.start_container("p", "c0")


def test_pre_start_required_fails_starts_while_the_plugin_is_away(kubelet: Kubelet, registered) -> None:
    plugin = registered(pre_start=True)
    kubelet.admit(pod("p", {R: 1}))
    plugin.end_stream()
    kubelet.wait_for(lambda: kubelet.allocatable()[R] == 0, what="stream ended")
    with pytest.raises(ContainerStartError, match="cannot call PreStartContainer"):
        kubelet.start_container("p", "c0")


# -- streams the kubelet ends, orphaned clients -------------------------------------------------------


def test_a_stream_dropped_by_the_kubelet_is_never_dialled_again(kubelet: Kubelet, registered) -> None:
    plugin = registered()
    kubelet.drop_stream(R)
    assert kubelet.allocatable() == {R: 0} and kubelet.capacity() == {R: 4}
    calls = plugin.names()
    time.sleep(0.5)
    assert plugin.names() == calls  # no dial-back, no new ListAndWatch: recovering is the plugin's job
    plugin.register()
    kubelet.wait_for(lambda: kubelet.allocatable() == {R: 4}, what="registered again")
    assert kubelet.violations() == []


def test_a_failed_reregistration_orphans_the_live_client(make_kubelet, plugins) -> None:
    kubelet = make_kubelet(dial_timeout=0.5)
    plugin = plugins()
    plugin.register()
    kubelet.wait_for(lambda: kubelet.allocatable().get(R) == 4)
    with pytest.raises(grpc.RpcError, match="cannot dial device plugin"):
        plugin.register(endpoint="nobody-listens.sock")
    assert kubelet.orphaned(R)
    plugin.set_devices([("d0", UNHEALTHY, (0,)), *FOUR[1:]])  # the orphan's stream still feeds the manager
    kubelet.wait_for(lambda: kubelet.allocatable()[R] == 3, what="update through the orphaned stream")
    plugin.end_stream()
    time.sleep(0.5)
    assert kubelet.allocatable()[R] == 3  # no disconnect is processed for an orphan: capacity stays as it was
    plugin.stop()
    plugin.serve().register()  # a new server: the ended one would end its next stream at once
    kubelet.wait_for(lambda: not kubelet.orphaned(R) and kubelet.allocatable()[R] == 3, what="registered anew")


class BrokenOptions(MiniPlugin):
    """A second server of the same resource whose GetDevicePluginOptions fails."""

    def GetDevicePluginOptions(self, request: pb.Empty, context: grpc.ServicerContext) -> pb.DevicePluginOptions:
        context.abort(grpc.StatusCode.UNAVAILABLE, "options are broken here")


def test_a_reregistration_whose_options_call_fails_orphans_the_live_client(kubelet: Kubelet, registered, plugin_dir: Path) -> None:
    plugin = registered()
    broken = BrokenOptions(plugin_dir)
    broken.endpoint = "broken.sock"
    broken.serve()
    try:
        with pytest.raises(grpc.RpcError, match="failed to get device plugin options"):
            broken.register()
        assert kubelet.orphaned(R)
        assert len(kubelet.admit(pod("p", {R: 2})).container("c0").device_ids[R]) == 2  # Allocate still reaches it
        assert plugin.payloads("Allocate")
    finally:
        broken.stop()


# -- re-admission after a kubelet restart ------------------------------------------------------------


def test_readmission_fails_only_not_running_containers_before_the_plugin_is_back(kubelet, registered):
    registered()
    kubelet.admit(pod("running", {R: 1}))
    kubelet.admit(pod("crashed", {R: 1}))
    kubelet.exit_container("crashed", "c0")
    kubelet.restart()
    failed = kubelet.readmit()
    assert failed == {("default", "crashed"): "pod default/crashed rejected: no healthy devices present; "
                                              f"cannot allocate unhealthy devices {R}"}
    assert [p.name for p in kubelet.pods()] == ["running"]


def test_readmission_fails_a_container_whose_devices_came_back_unhealthy(kubelet: Kubelet, registered) -> None:
    plugin = registered()
    held = kubelet.admit(pod("p", {R: 4})).container("c0").device_ids[R]
    kubelet.exit_container("p", "c0")
    kubelet.restart()
    plugin.stop()
    plugin.set_devices([(held[0], UNHEALTHY, (0,)), *[(i, HEALTHY, (0,)) for i in held[1:]]])
    plugin.serve().register()
    kubelet.wait_for(lambda: kubelet.allocatable().get(R) == 3, what="back with one device unhealthy")
    assert kubelet.readmit() == {("default", "p"): "pod default/p rejected: previously allocated devices are no "
                                                   f"longer healthy; cannot allocate unhealthy devices {R}"}


def test_readmission_after_the_plugin_is_back_healthy_keeps_the_pod_without_allocate(kubelet: Kubelet, registered) -> None:
    plugin = registered()
    kubelet.admit(pod("p", {R: 2}))
    kubelet.exit_container("p", "c0")
    kubelet.restart()
    plugin.stop()
    plugin.serve().register()
    kubelet.wait_for(lambda: kubelet.allocatable().get(R) == 4)
    assert kubelet.readmit() == {}
    kubelet.start_container("p", "c0")
    assert len(plugin.payloads("Allocate")) == 1
