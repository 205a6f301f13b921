"""The kubelet stand-in's pure rules with literal values: capacity, device choice, answer merging."""

from __future__ import annotations

import random

import pytest

from deviceplugin.standin.nodedevices import Device, NodeDevices
from deviceplugin.standin.pods import (
    AdmissionError,
    ContainerSpec,
    PodSpec,
    choose_devices,
)
from deviceplugin.standin.runoptions import ContainerAnswer, Mount, merge_answers

R = "example.com/cores"


def node_with(*devices: Device, grace: float = 300.0) -> NodeDevices:
    node = NodeDevices(grace)
    node.registered(R)
    node.snapshot(R, devices)
    return node


def test_capacity_is_all_devices_and_allocatable_the_exactly_healthy_ones() -> None:
    node = node_with(Device("a", "Healthy"), Device("b", "Unhealthy"), Device("c", "healthy"))
    assert (node.capacity(0), node.allocatable(0), node.healthy_ids(R)) == ({R: 3}, {R: 1}, {"a"})


def test_a_snapshot_replaces_the_previous_one_and_reports_duplicate_ids() -> None:
    node = node_with(Device("a", "Healthy"), Device("b", "Healthy"))
    problems = node.snapshot(R, [Device("c", "Healthy"), Device("c", "Unhealthy")])
    assert set(node.devices(R)) == {"c"} and len(problems) == 1 and "'c'" in problems[0]


def test_stream_end_turns_devices_unhealthy_then_capacity_zero_after_grace() -> None:
    node = node_with(Device("a", "Healthy"), Device("b", "Healthy"), grace=300)
    node.stream_ended(R, now=1000)
    assert (node.capacity(1299), node.allocatable(1299), node.is_live(R)) == ({R: 2}, {R: 0}, False)
    assert (node.capacity(1300), node.known(R, 1300)) == ({R: 0}, False)
    node.registered(R)
    assert node.is_live(R) and node.capacity(5000) == {R: 2}


def test_a_kubelet_restart_forgets_devices_until_the_next_snapshot() -> None:
    node = node_with(Device("a", "Healthy"))
    node.kubelet_restarted(now=0)
    assert (node.capacity(1), node.is_live(R)) == ({R: 0}, False)


def test_choice_takes_reusable_devices_first_without_asking_the_plugin() -> None:
    asked = []
    chosen = choose_devices(R, 2, {"x", "y", "z"}, {"a"}, lambda *a: asked.append(a) or [], random.Random(0))
    assert len(chosen) == 2 and set(chosen) <= {"x", "y", "z"} and asked == []


def test_choice_asks_with_reused_as_must_include_and_fills_a_shortfall() -> None:
    asked = []

    def prefer(available: list[str], must: list[str], size: int) -> list[str]:
        asked.append((sorted(available), must, size))
        return ["ghost", "b"]

    chosen = choose_devices(R, 3, {"x"}, {"a", "b", "c"}, prefer, random.Random(0))
    assert asked == [(["a", "b", "c", "x"], ["x"], 3)]
    assert chosen[0] == "x" and "b" in chosen and "ghost" not in chosen and len(set(chosen)) == 3


def test_choice_refuses_when_free_healthy_devices_are_too_few() -> None:
    with pytest.raises(AdmissionError, match="Requested: 2, Available: 1"):
        choose_devices(R, 2, (), {"a"}, None, random.Random(0))


def test_merge_keeps_the_first_value_and_records_differing_later_ones() -> None:
    first = ContainerAnswer(envs={"E": "1", "SAME": "s"}, mounts=[Mount("/opt", "/host/a")], annotations={"k": "a"})
    second = ContainerAnswer(
        envs={"E": "2", "SAME": "s", "F": "f"}, mounts=[Mount("/opt", "/host/b"), Mount("/x", "/y")], cdi_devices=["v.com/c=1"]
    )
    merged, conflicts = merge_answers("c", [("r1", first), ("r2", second)])
    assert dict(merged.envs) == {"E": "1", "SAME": "s", "F": "f"}
    assert [m.host_path for m in merged.mounts] == ["/host/a", "/y"] and merged.cdi_devices == ("v.com/c=1",)
    assert [(c.kind, c.key, c.kept, c.dropped, c.dropped_resource) for c in conflicts] == [
        ("env", "E", "1", "2", "r2"),
        ("mount", "/opt", "/host/a", "/host/b", "r2"),
    ]


def test_a_pod_with_repeated_container_names_is_refused() -> None:
    with pytest.raises(AdmissionError, match="repeated: a"):
        PodSpec("p", containers=[ContainerSpec("a")], init_containers=[ContainerSpec("a")])
