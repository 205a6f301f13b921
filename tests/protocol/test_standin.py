"""The kubelet stand-in against a minimal device plugin, both over real unix sockets.

The plugin here is a real gRPC DevicePlugin server with a few devices that
logs every call in order, so each test can check what the stand-in did on the
wire, not just what it reports.
"""

from __future__ import annotations

import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest
from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from api.constants import HEALTHY, UNHEALTHY
from api.podresources.v1 import podresources_pb2 as pr
from api.podresources.v1 import podresources_pb2_grpc as pr_grpc
from api.v1beta1 import deviceplugin_pb2 as pb
from deviceplugin.standin import AdmissionError, Kubelet
from tests.support.plugins import (
    FOUR,
    MiniPlugin,
    R,
    pod,
)


class DirectoryEvents:
    """inotify events of a directory (via watchdog, a second reader beside the daemon's own), as (kind, file name) pairs."""

    def __init__(self, directory: Path) -> None:
        self._seen: list[tuple[str, str]] = []
        self._cond = threading.Condition()
        handler = FileSystemEventHandler()
        handler.on_any_event = self._record  # type: ignore[method-assign]
        self._observer = Observer()
        self._observer.schedule(handler, str(directory))
        self._observer.start()

    def _record(self, event: FileSystemEvent) -> None:
        with self._cond:
            self._seen.append((event.event_type, Path(str(event.src_path)).name))
            self._cond.notify_all()

    def wait_for(self, *expected: tuple[str, str], timeout: float = 30) -> None:
        """Wait until ``expected`` occurred in this order (other events may come between)."""

        def occurred() -> bool:
            remaining = iter(self._seen)
            return all(any(e == want for e in remaining) for want in expected)

        with self._cond:
            assert self._cond.wait_for(occurred, timeout), f"expected {expected} in order, saw {self._seen}"

    def stop(self) -> None:
        self._observer.stop()
        self._observer.join()


def register_error(plugin: MiniPlugin, **kw: object) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        plugin.register(**kw)  # type: ignore[arg-type]
    return caught.value


# -- registration ------------------------------------------------------------------------


def test_register_rejects_a_version_other_than_v1beta1(kubelet: Kubelet, plugins) -> None:
    plugin = plugins()
    error = register_error(plugin, version="v1alpha")
    assert "v1alpha" in error.details()
    assert "GetDevicePluginOptions" not in plugin.names()
    assert kubelet.registrations() == []


@pytest.mark.parametrize(
    "name",
    ["cores", "Example.com/cores", "kubernetes.io/cores", "example.kubernetes.io/cores", "example.com/-cores", "example.com/" + "c" * 64],
)
def test_register_rejects_an_invalid_extended_resource_name(kubelet: Kubelet, plugins, name: str) -> None:
    plugin = plugins()
    error = register_error(plugin, resource=name)
    assert "invalid extended resource name" in error.details()
    assert kubelet.capacity() == {}


@pytest.mark.parametrize("endpoint", ["", "../plugin.sock", "sub/plugin.sock", "/tmp/plugin.sock"])
def test_register_rejects_an_endpoint_that_is_not_a_bare_file_name(kubelet: Kubelet, plugins, endpoint: str) -> None:
    error = register_error(plugins(), endpoint=endpoint)
    assert "bare socket file name" in error.details()


def test_register_fails_when_the_plugin_cannot_be_dialled_back(make_kubelet, plugins) -> None:
    kubelet = make_kubelet(dial_timeout=0.5)
    error = register_error(plugins(), endpoint="nobody-listens.sock")
    assert "cannot dial" in error.details()
    assert kubelet.registrations() == []


def test_options_are_fetched_by_dialling_back_while_register_is_pending(kubelet: Kubelet, registered) -> None:
    plugin = registered()
    names = plugin.names()
    sent, options, returned = names.index("register-sent"), names.index("GetDevicePluginOptions"), names.index("register-returned")
    assert sent < options < returned
    assert options < names.index("ListAndWatch")


def test_dial_back_needs_a_free_worker_while_register_is_pending(make_kubelet, plugins) -> None:
    kubelet = make_kubelet(rpc_timeout=3.0)
    # The first registration's ListAndWatch stream keeps one worker busy for good.
    lonely = plugins(workers=1)
    lonely.register()
    kubelet.wait_for(lambda: "ListAndWatch" in lonely.names())
    error = register_error(lonely)
    assert "GetDevicePluginOptions" in error.details()
    assert lonely.names().count("GetDevicePluginOptions") == 1

    roomy = plugins(workers=2, resource="example.com/other")
    roomy.register()
    kubelet.wait_for(lambda: "ListAndWatch" in roomy.names())
    roomy.register()
    assert roomy.names().count("GetDevicePluginOptions") == 2
    assert [r.resource for r in kubelet.registrations()].count("example.com/other") == 2


def test_the_options_reply_is_used_and_the_request_options_recorded(kubelet: Kubelet, plugins) -> None:
    plugin = plugins(preferred=True)
    plugin.register(options=pb.DevicePluginOptions())  # request says nothing; the reply advertises preference
    kubelet.wait_for(lambda: kubelet.allocatable().get(R) == 4)
    (registration,) = kubelet.registrations()
    assert registration.request_options.get_preferred_allocation_available is False
    assert registration.options.get_preferred_allocation_available is True
    kubelet.admit(pod("p", {R: 1}))
    assert "GetPreferredAllocation" in plugin.names()


# -- ListAndWatch, capacity and health -----------------------------------------------------------


def test_capacity_counts_every_device_and_allocatable_only_exactly_healthy_ones(kubelet: Kubelet, registered) -> None:
    registered(devices=[("a", HEALTHY, (0,)), ("b", UNHEALTHY, (0,)), ("c", "healthy", (1,)), ("d", "OK", ())])
    assert kubelet.capacity() == {R: 4}
    assert kubelet.allocatable() == {R: 1}


def test_every_snapshot_replaces_the_devices_with_their_topology(kubelet: Kubelet, registered) -> None:
    plugin = registered()
    plugin.set_devices([("d0", UNHEALTHY, (0,)), ("d9", HEALTHY, (0, 1))])
    kubelet.wait_for(lambda: set(kubelet.devices(R)) == {"d0", "d9"})
    devices = kubelet.devices(R)
    assert (devices["d0"].health, devices["d9"].numa_nodes) == (UNHEALTHY, (0, 1))
    assert (kubelet.capacity(), kubelet.allocatable()) == ({R: 2}, {R: 1})


def test_stream_end_leaves_capacity_but_no_allocatable_and_pods_are_rejected(kubelet: Kubelet, registered) -> None:
    plugin = registered()
    plugin.end_stream()
    kubelet.wait_for(lambda: kubelet.allocatable() == {R: 0})
    assert kubelet.capacity() == {R: 4}
    assert {d.health for d in kubelet.devices(R).values()} == {UNHEALTHY}
    with pytest.raises(AdmissionError, match="ListAndWatch ended"):
        kubelet.admit(pod("p", {R: 1}))
    assert "Allocate" not in plugin.names()


def test_capacity_reads_zero_once_the_grace_period_passes_without_registration(make_kubelet, plugins) -> None:
    kubelet = make_kubelet(grace_period=0.2)
    plugin = plugins()
    plugin.register()
    kubelet.wait_for(lambda: kubelet.capacity() == {R: 4})
    plugin.end_stream()
    kubelet.wait_for(lambda: kubelet.capacity() == {R: 0}, what="capacity 0 after the grace period")
    assert kubelet.allocatable() == {R: 0}


# -- admission ------------------------------------------------------------------------------------


def test_preferred_allocation_is_asked_with_the_free_devices_and_honoured(kubelet: Kubelet, registered) -> None:
    def prefer(available: list[str], must: list[str], size: int) -> list[str]:
        return [i for i in ("d3", "d1", "d0", "d2") if i in available][:size]

    plugin = registered(preferred=True, prefer=prefer)
    assert kubelet.admit(pod("first", {R: 1})).container("c0").device_ids[R] == ("d3",)
    got = kubelet.admit(pod("second", {R: 2}))
    assert set(got.container("c0").device_ids[R]) == {"d1", "d0"}
    available, must, size = plugin.payloads("GetPreferredAllocation")[1]
    assert (sorted(available), must, size) == (["d0", "d1", "d2"], [], 2)
    assert plugin.payloads("Allocate")[1] == ["d0", "d1"]


def test_a_short_preferred_answer_is_filled_up_by_the_kubelet(kubelet: Kubelet, registered) -> None:
    registered(preferred=True, prefer=lambda available, must, size: ["d2"])
    ids = kubelet.admit(pod("p", {R: 3})).container("c0").device_ids[R]
    assert len(ids) == 3 and "d2" in ids and set(ids) <= {"d0", "d1", "d2", "d3"}


def test_unknown_ids_in_the_preferred_answer_are_ignored(kubelet: Kubelet, registered) -> None:
    plugin = registered(preferred=True, prefer=lambda available, must, size: ["ghost", "d1"])
    ids = kubelet.admit(pod("p", {R: 2})).container("c0").device_ids[R]
    assert "d1" in ids and "ghost" not in ids and len(ids) == 2
    assert "ghost" not in plugin.payloads("Allocate")[0]


def test_no_preferred_allocation_call_unless_advertised(kubelet: Kubelet, registered) -> None:
    plugin = registered(preferred=False)
    kubelet.admit(pod("p", {R: 2}))
    assert "GetPreferredAllocation" not in plugin.names()
    assert len(plugin.payloads("Allocate")) == 1


def test_only_healthy_free_devices_are_given_and_a_shortage_rejects(kubelet: Kubelet, registered) -> None:
    registered(devices=[("a", HEALTHY, ()), ("b", UNHEALTHY, ()), ("c", HEALTHY, ())])
    assert set(kubelet.admit(pod("p", {R: 2})).container("c0").device_ids[R]) == {"a", "c"}
    with pytest.raises(AdmissionError, match="Requested: 1, Available: 0"):
        kubelet.admit(pod("q", {R: 1}))


def test_an_allocate_error_rejects_the_pod_and_releases_its_devices(kubelet: Kubelet, registered) -> None:
    plugin = registered(fail_allocate_call=2)
    with pytest.raises(AdmissionError, match="refusing"):
        kubelet.admit(pod("p", {R: 2}, {R: 2}))
    assert kubelet.pods() == []
    assert set(kubelet.admit(pod("q", {R: 4})).container("c0").device_ids[R]) == {"d0", "d1", "d2", "d3"}
    assert len(plugin.payloads("Allocate")) == 3


def test_app_containers_reuse_init_container_devices_through_must_include(kubelet: Kubelet, registered) -> None:
    plugin = registered(preferred=True)
    admitted = kubelet.admit(pod("p", {R: 3}, init=[{R: 2}]))
    init_ids = set(admitted.container("init0").device_ids[R])
    app_ids = set(admitted.container("c0").device_ids[R])
    assert init_ids < app_ids and len(app_ids) == 3
    available, must, size = plugin.payloads("GetPreferredAllocation")[1]
    assert (set(must), size) == (init_ids, 3)
    assert set(available) == {"d0", "d1", "d2", "d3"}  # the 2 free ones plus the reused ones
    assert set(plugin.payloads("Allocate")[1]) == app_ids  # answered again for the reused IDs
    with pytest.raises(AdmissionError):
        kubelet.admit(pod("q", {R: 2}))  # the pod holds 3 of 4, not 5


def test_two_app_containers_split_the_init_container_devices(kubelet: Kubelet, registered) -> None:
    plugin = registered()
    admitted = kubelet.admit(pod("p", {R: 1}, {R: 1}, init=[{R: 2}]))
    c0, c1 = (set(admitted.container(n).device_ids[R]) for n in ("c0", "c1"))
    assert c0 | c1 == set(admitted.container("init0").device_ids[R]) and not c0 & c1
    assert len(plugin.payloads("Allocate")) == 3
    assert kubelet.admit(pod("q", {R: 2})).container("c0").device_ids[R]


def test_envs_of_several_plugins_merge_first_wins_and_conflicts_are_recorded(kubelet: Kubelet, registered) -> None:
    registered(resource="example.com/a", envs={"SHARED": "from-a", "SAME": "1"})
    registered(resource="example.com/b", envs={"SHARED": "from-b", "SAME": "1"})
    container = kubelet.admit(pod("p", {"example.com/a": 1, "example.com/b": 2, "cpu": 1})).container("c0")
    envs = dict(container.envs)
    assert envs["IDS_A"] == ",".join(sorted(container.device_ids["example.com/a"]))
    assert envs["IDS_B"] == ",".join(sorted(container.device_ids["example.com/b"]))
    assert envs["SAME"] == "1"
    (conflict,) = kubelet.conflicts()
    # Go map order decides which plugin's answer comes first; whichever did, its value is the one kept
    value_of = {"example.com/a": "from-a", "example.com/b": "from-b"}
    (first,) = set(value_of) - {conflict.dropped_resource}
    assert (conflict.kind, conflict.key, conflict.kept, conflict.dropped) == (
        "env", "SHARED", value_of[first], value_of[conflict.dropped_resource])
    assert envs["SHARED"] == value_of[first]


def test_pre_start_is_called_only_when_required(kubelet: Kubelet, registered) -> None:
    wanting = registered(resource="example.com/a", pre_start=True)
    silent = registered(resource="example.com/b")
    admitted = kubelet.admit(pod("p", {"example.com/a": 1, "example.com/b": 1}))
    assert wanting.payloads("PreStartContainer") == [list(admitted.container("c0").device_ids["example.com/a"])]
    assert wanting.names().index("Allocate") < wanting.names().index("PreStartContainer")
    assert "PreStartContainer" not in silent.names()


def test_deleting_a_pod_frees_its_devices_without_telling_the_plugin(kubelet: Kubelet, registered) -> None:
    plugin = registered()
    kubelet.admit(pod("p", {R: 4}))
    calls = len(plugin.calls)
    kubelet.delete_pod("p")
    assert len(plugin.calls) == calls
    assert len(kubelet.admit(pod("q", {R: 4})).container("c0").device_ids[R]) == 4


# -- kubelet restart ------------------------------------------------------------------------------


def test_restart_deletes_every_socket_serves_anew_and_keeps_pods(kubelet: Kubelet, registered, plugin_dir: Path) -> None:
    plugin = registered()
    held = kubelet.admit(pod("p", {R: 3})).container("c0").device_ids[R]
    (plugin_dir / "kubelet_internal_checkpoint").write_text("{}")
    events = DirectoryEvents(plugin_dir)
    try:
        kubelet.restart()
        # What a plugin watching the directory sees: its socket deleted, kubelet.sock created anew.
        events.wait_for(("deleted", "kubelet.sock"), ("deleted", plugin.endpoint), ("created", "kubelet.sock"))
    finally:
        events.stop()
    assert not (plugin_dir / plugin.endpoint).exists()
    assert (plugin_dir / "kubelet_internal_checkpoint").exists()
    assert stat.S_ISSOCK((plugin_dir / "kubelet.sock").stat().st_mode)
    assert (kubelet.capacity(), kubelet.allocatable()) == ({R: 0}, {R: 0})

    allocations = len(plugin.payloads("Allocate"))
    plugin.stop()
    plugin.serve().register()
    kubelet.wait_for(lambda: kubelet.allocatable() == {R: 4})
    assert kubelet.pods()[0].container("c0").device_ids[R] == held
    assert len(plugin.payloads("Allocate")) == allocations  # the checkpoint, not a new Allocate
    with pytest.raises(AdmissionError, match="Available: 1"):
        kubelet.admit(pod("q", {R: 2}))
    assert kubelet.violations() == []


# -- pod resources ----------------------------------------------------------------------------------


def test_pod_resources_list_devices_per_numa_node_and_allocatable_healthy_ones(
    kubelet: Kubelet, registered, plugin_dir: Path
) -> None:
    registered(
        preferred=True,
        prefer=lambda available, must, size: ["d1", "d2", "d4"],
        devices=[*FOUR[:3], ("d3", UNHEALTHY, (1,)), ("d4", HEALTHY, ())],
    )
    kubelet.admit(pod("p", {R: 3}, {"cpu": 2}))
    with grpc.insecure_channel(f"unix://{plugin_dir / 'pod-resources.sock'}") as channel:
        lister = pr_grpc.PodResourcesListerStub(channel)
        (listed,) = lister.List(pr.ListPodResourcesRequest(), timeout=5).pod_resources
        allocatable = lister.GetAllocatableResources(pr.AllocatableResourcesRequest(), timeout=5)
    assert (listed.name, listed.namespace, [c.name for c in listed.containers]) == ("p", "default", ["c0", "c1"])
    c0, c1 = listed.containers
    assert [(d.resource_name, list(d.device_ids), [n.ID for n in d.topology.nodes]) for d in c0.devices] == [
        (R, ["d4"], []),
        (R, ["d1"], [0]),
        (R, ["d2"], [1]),
    ]
    assert list(c0.cpu_ids) == [] and list(c1.devices) == []
    assert sorted(d.device_ids[0] for d in allocatable.devices) == ["d0", "d1", "d2", "d4"]
    assert list(allocatable.cpu_ids) == []


# -- command line -------------------------------------------------------------------------------------


def test_command_line_serves_logs_registration_and_capacity_and_stops_on_sigterm(plugin_dir: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "deviceplugin.standin", "--plugin-dir", str(plugin_dir)],
        stderr=subprocess.PIPE,
        text=True,
    )
    plugin = MiniPlugin(plugin_dir)
    try:
        deadline = time.monotonic() + 20
        while not (plugin_dir / "kubelet.sock").exists():
            assert process.poll() is None and time.monotonic() < deadline, "stand-in did not start"
            time.sleep(0.05)
        plugin.serve().register()
        lines = []
        while not any("capacity 4 allocatable 4" in line for line in lines):
            line = process.stderr.readline()
            assert line, f"stand-in ended early: {lines}"
            lines.append(line)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
    finally:
        plugin.stop()
        if process.poll() is None:
            process.kill()
        process.stderr.close()
    assert any(f"registered {R}" in line for line in lines)
    assert not (plugin_dir / "kubelet.sock").exists()


def test_command_line_stops_on_sigterm_however_soon_it_comes(plugin_dir: Path) -> None:
    """SIGTERM right as it starts serving, five times: each run exits 0 and removes its socket."""
    for _ in range(5):
        process = subprocess.Popen([sys.executable, "-m", "deviceplugin.standin", "--plugin-dir", str(plugin_dir)],
                                   stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 20
            while not (plugin_dir / "kubelet.sock").exists():
                assert process.poll() is None and time.monotonic() < deadline, "stand-in did not start"
                time.sleep(0.01)
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=20) == 0
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        assert not (plugin_dir / "kubelet.sock").exists()


def test_command_line_bad_plugin_dir_is_one_line_without_traceback(plugin_dir: Path) -> None:
    blocker = plugin_dir / "a-file"
    blocker.write_text("")
    result = subprocess.run(
        [sys.executable, "-m", "deviceplugin.standin", "--plugin-dir", str(blocker / "sub")],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert str(blocker) in result.stderr
