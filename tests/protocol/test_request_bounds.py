"""What a request repeats back is bounded: errors and log lines name a few of its IDs and count the rest.

A real ``cmk device-plugin`` process at debug level, real gRPC over its unix
sockets; its stderr is read whole once it stopped, so every line it wrote is measured.
"""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from api.v1beta1 import deviceplugin_pb2 as pb
from deviceplugin.standin import Kubelet
from tests.support.daemon import (
    EXCLUSIVE,
    SHARED,
    daemon_process,
    stub,
    wait_registered,
)
from tests.support.topologies import fixture_copy

#: A whole error (the kubelet puts it in a pod event) and a whole log line: far below what 100,000 IDs make.
MAX_DETAILS = 1024
MAX_LINE = 4096
MANY = 100_000
LONG_ID = "x" * MANY


@dataclass
class Logged:
    process: subprocess.Popen[str]
    log: Path


@pytest.fixture
def daemon(kubelet: Kubelet, plugin_dir: Path, tmp_path: Path) -> Iterator[Logged]:
    """The daemon, its stderr into a file: a pipe nobody reads would stall it on its first long line."""
    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path)
    log = tmp_path / "daemon.log"
    with log.open("w") as stderr:
        process = daemon_process(plugin_dir, sysfs, procfs, "--no-cdi", "--log-level", "DEBUG", "--log-format",
                                 "json", stderr=stderr)
    try:
        wait_registered(kubelet, {EXCLUSIVE, SHARED})
        yield Logged(process, log)
    finally:
        process.kill()
        process.communicate(timeout=30)


def stopped(daemon: Logged) -> list[dict[str, object]]:
    """Stop the daemon; every line it wrote, each checked to be one bounded JSON object."""
    daemon.process.send_signal(signal.SIGTERM)
    daemon.process.communicate(timeout=30)
    lines = daemon.log.read_text().splitlines()
    longest = max(lines, key=len)
    assert len(longest) <= MAX_LINE, f"a {len(longest)}-character line: {longest[:300]}"
    return [json.loads(line) for line in lines]


def allocate(*ids: str) -> pb.AllocateRequest:
    return pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=ids)])


def prefer(available: list[str], must: list[str], size: int) -> pb.PreferredAllocationRequest:
    return pb.PreferredAllocationRequest(container_requests=[pb.ContainerPreferredAllocationRequest(
        available_deviceIDs=available, must_include_deviceIDs=must, allocation_size=size)])


def refused(call: Callable[..., object], request: object) -> str:
    with pytest.raises(grpc.RpcError) as info:
        call(request, timeout=30)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    details = info.value.details() or ""
    assert len(details) <= MAX_DETAILS
    return details


def unknown(prefix: str) -> list[str]:
    return [f"{prefix}-{n}" for n in range(MANY)]


def test_100000_unknown_ids_are_refused_with_the_first_few_and_a_count(plugin_dir, daemon):
    details = refused(stub(plugin_dir, EXCLUSIVE).Allocate, allocate(*unknown("cpus")))
    assert details == (f"{EXCLUSIVE}: unknown device IDs: cpus-0, cpus-1, cpus-10, cpus-100, cpus-1000"
                       f" and {MANY - 5} more")
    (line,) = [e for e in stopped(daemon) if e.get("event") == "allocate_refused"]
    assert line["devices"] == ["cpus-0", "cpus-1", "cpus-10", "cpus-100", "cpus-1000"]
    assert line["requested"] == MANY


def test_a_foreign_id_of_100000_characters_is_shown_clipped(plugin_dir, daemon):
    details = refused(stub(plugin_dir, EXCLUSIVE).Allocate, allocate(LONG_ID))
    assert details == f"{EXCLUSIVE}: unknown device IDs: {'x' * 63}... ({MANY} characters)"
    stopped(daemon)


def test_no_log_line_repeats_a_request_whole(plugin_dir, kubelet, daemon):
    exclusive, shared = stub(plugin_dir, EXCLUSIVE), stub(plugin_dir, SHARED)
    known = min(kubelet.devices(EXCLUSIVE))
    refused(shared.Allocate, allocate(*unknown("shared")))
    exclusive.Allocate(allocate(*[known] * MANY), timeout=30)  # answered: the same known ID 100,000 times
    exclusive.GetPreferredAllocation(prefer([known] * MANY + [LONG_ID], [], 1), timeout=30)
    details = refused(exclusive.GetPreferredAllocation, prefer([known], unknown("cpus"), MANY))
    assert details.endswith(f" and {MANY - 5} more are not devices of this pool")
    events = {e.get("event"): e for e in stopped(daemon)}
    assert {"allocate_refused", "allocated", "preferred_allocation", "preferred_allocation_refused"} <= set(events)
    assert events["allocated"]["devices"] == [known]  # each device once: the pod resources match needs no more
    assert events["preferred_allocation"]["available"] == [known]  # what the policy chose from
