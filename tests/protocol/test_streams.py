"""A plugin server serves one ListAndWatch stream, the newest: extra streams never starve Allocate.

The kubelet holds one stream per plugin. Before, each stream anyone opened held one of the
server's workers for as long as it lasted, so a dozen of them left none for Allocate, which then
missed its deadline. A real daemon, the kubelet stand-in, and real gRPC over the unix sockets.
"""

from __future__ import annotations

import threading
from pathlib import Path

import grpc

from api.v1beta1 import deviceplugin_pb2 as pb
from api.v1beta1 import deviceplugin_pb2_grpc as pb_grpc
from deviceplugin.daemon import socket_name
from deviceplugin.protocol.server import WORKERS
from tests.support.daemon import (
    EXCLUSIVE,
    INFRA,
    SHARED,
    wait_registered,
)
from tests.support.topologies import fixture_copy

EXTRA = 12  # more than the server has workers
DEADLINE = 5.0


class Stream:
    """One ListAndWatch stream on its own channel, read to its end by a thread."""

    def __init__(self, socket: Path) -> None:
        self.channel = grpc.insecure_channel(f"unix:{socket}")
        self.call = pb_grpc.DevicePluginStub(self.channel).ListAndWatch(pb.Empty())
        self.first = threading.Event()
        self.ended = threading.Event()
        self.code: grpc.StatusCode | None = None
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            for _ in self.call:
                self.first.set()
            self.code = grpc.StatusCode.OK
        except grpc.RpcError as err:
            self.code = err.code()
        finally:
            self.ended.set()

    def close(self) -> None:
        self.call.cancel()
        self.channel.close()


def test_a_dozen_extra_streams_leave_allocate_its_workers_and_each_new_one_replaces_the_last(
        kubelet, plugin_dir, start_daemon, tmp_path):
    assert EXTRA > WORKERS
    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path)
    daemon = start_daemon(sysfs, procfs)
    wait_registered(kubelet, {EXCLUSIVE, SHARED, INFRA})
    socket = plugin_dir / socket_name(EXCLUSIVE)
    streams = []
    try:
        for _ in range(EXTRA):
            streams.append(Stream(socket))
            streams[-1].first.wait(1.0)  # served (or, before, left waiting for a worker)
        ids = [min(kubelet.devices(EXCLUSIVE))]
        with grpc.insecure_channel(f"unix:{socket}") as channel:
            reply = pb_grpc.DevicePluginStub(channel).Allocate(pb.AllocateRequest(
                container_requests=[pb.ContainerAllocateRequest(devices_ids=ids)]), timeout=DEADLINE)
        assert len(reply.container_responses) == 1
        assert streams[-1].first.is_set()  # the newest stream is served
        # every stream but the newest was ended by the server, with OK, as the kubelet's was
        assert all(s.ended.wait(DEADLINE) and s.code == grpc.StatusCode.OK for s in streams[:-1])
        assert not streams[-1].ended.is_set()
        kubelet.wait_for(lambda: kubelet.allocatable().get(EXCLUSIVE, 0) == 0, what="the kubelet's stream replaced")
        # once the foreign stream goes, the pool is the kubelet's again: the daemon registers it anew
        streams[-1].close()
        kubelet.wait_for(lambda: kubelet.allocatable().get(EXCLUSIVE, 0) > 0 and daemon.registered,
                         what="exclusive registered again")
        assert kubelet.violations() == []
    finally:
        for stream in streams:
            stream.close()
