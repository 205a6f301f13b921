"""``DRAResourceHealth`` over a real unix socket, read with the kubelet's own dra-health/v1alpha1 stubs.

The daemon's side in DRA mode (every device, an offline CPU's core turning Unhealthy) is in
``test_draserving.py``; here the stream itself: a report at once, the same again when nothing changed
(the kubelet forgets a report older than its timeout), a change at once, and a stream the kubelet
dropped giving its worker back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from api.drahealth.v1alpha1 import api_pb2 as health_pb
from api.drahealth.v1alpha1 import api_pb2_grpc as health_grpc
from deviceplugin.model.drahealth import TIMEOUT_SECONDS, DeviceHealth
from deviceplugin.protocol.drahealth import HealthWatch
from deviceplugin.protocol.server import listen

WORKERS = 2
CORE = DeviceHealth("node-a", "core-n0-p0-c1", True)
SLOT = DeviceHealth("node-a", "shared-000", True)


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[[float], tuple[HealthWatch, health_grpc.DRAResourceHealthStub]]]:
    """``serve(resend)``: a watch of two healthy devices on a real socket, and a client of it."""
    stops: list[Callable[[], None]] = []

    def start(resend: float) -> tuple[HealthWatch, health_grpc.DRAResourceHealthStub]:
        watch = HealthWatch((CORE, SLOT), resend=resend)
        socket = tmp_path / "dra.sock"
        server = listen(socket, "cannot listen",
                        lambda s: health_grpc.add_DRAResourceHealthServicer_to_server(watch, s),
                        thread_prefix="test-health", workers=WORKERS)
        channel = grpc.insecure_channel(f"unix:{socket}")
        stops.append(lambda: (channel.close(), server.stop(None).wait()))
        return watch, health_grpc.DRAResourceHealthStub(channel)

    yield start
    for stop in stops:
        stop()


def seen(report: health_pb.NodeWatchResourcesResponse) -> list[tuple[str, str, int, str]]:
    return [(d.device.pool_name, d.device.device_name, d.health, d.message) for d in report.devices]


def test_a_stream_reports_every_device_at_once_then_again_unchanged_before_the_kubelet_forgets_it(serve) -> None:
    _, stub = serve(0.2)
    stream = stub.NodeWatchResources(health_pb.NodeWatchResourcesRequest(), timeout=10)
    first, again = next(stream), next(stream)
    want = [("node-a", "core-n0-p0-c1", health_pb.HEALTHY, ""), ("node-a", "shared-000", health_pb.HEALTHY, "")]
    assert seen(first) == seen(again) == want
    assert {d.health_check_timeout_seconds for d in first.devices} == {TIMEOUT_SECONDS}
    assert all(d.last_updated_time >= f.last_updated_time > 0 for d, f in zip(again.devices, first.devices))
    stream.cancel()


def test_a_change_is_reported_with_its_message(serve) -> None:
    watch, stub = serve(30)  # nothing but the change can wake the stream within the call's deadline
    stream = stub.NodeWatchResources(health_pb.NodeWatchResourcesRequest(), timeout=10)
    next(stream)
    watch.update((DeviceHealth("node-a", "core-n0-p0-c1", False, "a CPU of exclusive device core-n0-p0-c1 is offline"),
                  SLOT))
    assert seen(next(stream))[0] == ("node-a", "core-n0-p0-c1", health_pb.UNHEALTHY,
                                     "a CPU of exclusive device core-n0-p0-c1 is offline")
    stream.cancel()


def test_a_stream_the_kubelet_dropped_gives_its_worker_back(serve) -> None:
    _, stub = serve(30)
    for _ in range(WORKERS * 3):  # more streams than workers, one after the other
        stream = stub.NodeWatchResources(health_pb.NodeWatchResourcesRequest(), timeout=10)
        assert seen(next(stream))
        stream.cancel()
