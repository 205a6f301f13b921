"""Hostile gRPC requests to the daemon's plugin servers: an answer or a clear status, fast, never a crash.

A real in-process daemon on real unix sockets (no kubelet: its servers
listen before registering). Every case gets a deadline of :data:`DEADLINE`;
DEADLINE_EXCEEDED counts as a hang, UNKNOWN as a servicer that raised (the
traceback of the gRPC world), a details text with a newline as a multi-line
error. Afterwards each server still answers.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from api.v1beta1 import deviceplugin_pb2 as pb
from api.v1beta1 import deviceplugin_pb2_grpc as pb_grpc
from deviceplugin.daemon import Daemon, DaemonSettings, socket_name
from deviceplugin.model.plan import RESOURCE_NAMES, PlanOptions, Pool
from tests.support.topologies import fixture_copy

DEADLINE = 5.0  # a hang, not a timing: 10,000 containers under a loaded 2-CPU machine take about 1 s
CLEAR = {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED,
         grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.FAILED_PRECONDITION}
#: 63 is the kubelet's ID limit; these go past it, hold odd characters or are plainly foreign.
ODD_IDS = ["", "x" * 64, "x" * 100_000, "cpus-99999", "shared-999999", "infra-", "../../etc", "ünïcödé", "\x00",
           "cpus-0.8\n", " cpus-0.8"]


@pytest.fixture(scope="module")
def stubs() -> Iterator[dict[str, pb_grpc.DevicePluginStub]]:
    base = Path(tempfile.mkdtemp(prefix="cmk-grpc-"))  # short: unix socket paths are at most 107 bytes
    sysfs, procfs = fixture_copy("cmk-xeon_d", base, isolcpus="0-3,8-11")
    daemon = Daemon(DaemonSettings(kubelet_dir=base / "p", sysfs_root=sysfs, procfs_root=procfs,
                                   install_dir="/opt/cmk-test/bin", plan=PlanOptions(shared_slots=4)))
    daemon.start()
    channels = {resource: grpc.insecure_channel(f"unix://{base / 'p' / socket_name(resource)}")
                for resource in daemon.tree}
    try:
        yield {resource: pb_grpc.DevicePluginStub(channel) for resource, channel in channels.items()}
    finally:
        for channel in channels.values():
            channel.close()
        daemon.stop()
        shutil.rmtree(base, ignore_errors=True)


def allocate(*containers: list[str]) -> pb.AllocateRequest:
    return pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=ids) for ids in containers])


def preferred(available: list[str], must: list[str], size: int, containers: int = 1) -> pb.PreferredAllocationRequest:
    request = pb.ContainerPreferredAllocationRequest(available_deviceIDs=available, must_include_deviceIDs=must,
                                                     allocation_size=size)
    return pb.PreferredAllocationRequest(container_requests=[request] * containers)


def cases(valid: str) -> dict[str, tuple[str, object]]:
    """case -> (method, request) for a server one of whose device IDs is ``valid``."""
    table: dict[str, tuple[str, object]] = {
        "Allocate empty": ("Allocate", pb.AllocateRequest()),
        "Allocate a container with no IDs": ("Allocate", allocate([])),
        "Allocate the same ID twice": ("Allocate", allocate([valid, valid])),
        "Allocate 10,000 containers": ("Allocate", allocate(*[[valid]] * 10_000)),
        "Allocate 100,000 IDs": ("Allocate", allocate([valid] * 100_000)),
        "Allocate past 4 MiB": ("Allocate", allocate(["x" * 1024] * 5000)),
        "Allocate foreign and known IDs": ("Allocate", allocate([valid, "cpus-99999"])),
        "PreferredAllocation empty": ("GetPreferredAllocation", pb.PreferredAllocationRequest()),
        "PreferredAllocation size -1": ("GetPreferredAllocation", preferred([valid], [], -1)),
        "PreferredAllocation size 0": ("GetPreferredAllocation", preferred([valid], [], 0)),
        "PreferredAllocation size 2^31-1": ("GetPreferredAllocation", preferred([valid], [], 2**31 - 1)),
        "PreferredAllocation must not available": ("GetPreferredAllocation", preferred([valid], ["cpus-99"], 1)),
        "PreferredAllocation nothing available": ("GetPreferredAllocation", preferred([], [], 1)),
        "PreferredAllocation 100,000 available": ("GetPreferredAllocation", preferred([valid] * 100_000, [], 1)),
        "PreferredAllocation 10,000 containers": ("GetPreferredAllocation", preferred([valid], [valid], 1, 10_000)),
        "PreStartContainer empty": ("PreStartContainer", pb.PreStartContainerRequest()),
        "PreStartContainer unknown IDs": ("PreStartContainer", pb.PreStartContainerRequest(devices_ids=ODD_IDS[:3])),
        "GetDevicePluginOptions": ("GetDevicePluginOptions", pb.Empty()),
    }
    for number, odd in enumerate(ODD_IDS):
        table[f"Allocate odd ID {number} {odd[:12]!r}"] = ("Allocate", allocate([odd]))
        table[f"PreferredAllocation odd ID {number} {odd[:12]!r}"] = (
            "GetPreferredAllocation", preferred([odd, valid], [odd], 1))
    return table


def call(stub: pb_grpc.DevicePluginStub, method: str, request: object) -> tuple[grpc.StatusCode, str]:
    rpc: Callable[..., object] = getattr(stub, method)
    try:
        rpc(request, timeout=DEADLINE)
    except grpc.RpcError as err:
        return err.code(), err.details() or ""
    return grpc.StatusCode.OK, ""


@pytest.mark.parametrize("pool", [Pool.EXCLUSIVE, Pool.SHARED, Pool.INFRA])
def test_hostile_requests_get_an_answer_or_a_clear_status(stubs: dict[str, pb_grpc.DevicePluginStub],
                                                          pool: Pool) -> None:
    resource = RESOURCE_NAMES[pool]
    stub = stubs[resource]
    valid = {Pool.EXCLUSIVE: "cpus-0.8", Pool.SHARED: "shared-000", Pool.INFRA: "infra-000"}[pool]
    bad = {}
    table = cases(valid)
    for case, (method, request) in table.items():
        code, details = call(stub, method, request)
        if code not in CLEAR or "\n" in details:
            bad[case] = f"{code.name}: {details[:200]}"
    # the stream opens and sends the devices at once
    stream = stub.ListAndWatch(pb.Empty(), timeout=DEADLINE)
    assert next(iter(stream)).devices
    stream.cancel()
    assert call(stub, "GetDevicePluginOptions", pb.Empty())[0] == grpc.StatusCode.OK  # still serving
    assert not bad, f"{len(bad)} of {len(table)} cases: " + json.dumps(bad, indent=1)
