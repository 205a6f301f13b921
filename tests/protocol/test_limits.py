"""The slot bound holds on the wire: the largest slot pool's ListAndWatch message, serialized for real."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from deviceplugin.daemon import Daemon, DaemonSettings
from deviceplugin.errors import CmkError
from deviceplugin.model.devices import Device, PoolDevices, slot_device_ids
from deviceplugin.model.limits import MAX_SLOTS
from deviceplugin.model.plan import RESOURCE_NAMES, PlanOptions, Pool
from deviceplugin.protocol.server import (
    LIST_MESSAGE_LIMIT,
    list_message,
    list_message_problem,
)
from tests.support.topologies import fixture_copy

KUBELET_LIMIT = 4 * 1024 * 1024  # the kubelet's default gRPC max receive message size


def slot_pool(count: int, nodes: int, *, healthy: bool) -> PoolDevices:
    ids = slot_device_ids(Pool.SHARED, count)
    devices = {i: Device(i, frozenset(range(64)), frozenset(range(nodes)), healthy) for i in ids}
    return PoolDevices(Pool.SHARED, RESOURCE_NAMES[Pool.SHARED], MappingProxyType(devices), MappingProxyType({}))


def test_the_largest_slot_pool_lists_in_a_third_of_the_kubelets_limit():
    """MAX_SLOTS devices, the longest slot ID, every one Unhealthy, on 16 NUMA nodes with 4-digit ids."""
    ids = slot_device_ids(Pool.SHARED, MAX_SLOTS)
    longest = max(ids, key=len)
    devices = {i: Device(i, frozenset({0}), frozenset(range(1008, 1024)), False) for i in ids}
    pool = PoolDevices(Pool.SHARED, RESOURCE_NAMES[Pool.SHARED], MappingProxyType(devices), MappingProxyType({}))
    size = len(list_message(pool).SerializeToString())
    assert len(longest) == len("shared-9999")
    assert size < KUBELET_LIMIT / 3, size
    assert size <= LIST_MESSAGE_LIMIT and list_message_problem(pool) is None


def test_a_message_past_the_limit_is_refused_in_one_line():
    pool = slot_pool(MAX_SLOTS * 4, 64, healthy=True)
    assert len(list_message(pool).SerializeToString()) > LIST_MESSAGE_LIMIT
    problem = list_message_problem(pool)
    assert problem is not None and "advertise fewer slots" in problem and "\n" not in problem


def test_the_daemon_refuses_a_socket_path_past_sun_path_before_grpc_sees_it(tmp_path):
    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path)
    kubelet_dir = tmp_path / ("d" * 120)
    with pytest.raises(CmkError, match=r"unix sockets allow 107: use a shorter --kubelet-dir"):
        Daemon(DaemonSettings(kubelet_dir=kubelet_dir, sysfs_root=sysfs, procfs_root=procfs,
                              plan=PlanOptions(shared_slots=MAX_SLOTS)))
