"""The stand-in's Topology Manager rules with literal values (hints, merge per policy, affinity split)."""

from __future__ import annotations

import random

import pytest

from deviceplugin.standin.nodedevices import Device
from deviceplugin.standin.pods import AdmissionError, choose_devices
from deviceplugin.standin.topologymanager import (
    Hint,
    TopologyPolicy,
    device_hints,
    merge,
    resource_hints,
    split_by_affinity,
)

NODES = (0, 1)
# Three devices on node 0, one on node 1.
DEVICES = {"a": Device("a", "Healthy", (0,)), "b": Device("b", "Healthy", (0,)),
           "c": Device("c", "Healthy", (0,)), "d": Device("d", "Healthy", (1,))}


def test_hints_hold_every_mask_that_fits_and_prefer_the_smallest_possible():
    assert device_hints(NODES, DEVICES, DEVICES, (), 1) == [
        Hint(frozenset({0}), True), Hint(frozenset({1}), True), Hint(frozenset({0, 1}), False)]
    assert device_hints(NODES, DEVICES, DEVICES, (), 2) == [Hint(frozenset({0}), True), Hint(frozenset({0, 1}), False)]
    assert device_hints(NODES, DEVICES, DEVICES, (), 4) == [Hint(frozenset({0, 1}), True)]


def test_preference_counts_all_devices_but_fit_counts_free_ones():
    # Node 0 could hold 2 on an empty node, so {0,1} is not preferred even when only a and d are free.
    assert device_hints(NODES, DEVICES, {"a", "d"}, (), 2) == [Hint(frozenset({0, 1}), False)]


def test_no_topology_means_no_preference_and_too_few_free_no_affinity():
    bare = {"x": Device("x", "Healthy"), "y": Device("y", "Healthy", empty_topology=True)}
    assert resource_hints(NODES, bare, {"x", "y"}, (), 1) is None
    assert resource_hints(NODES, DEVICES, {"a"}, (), 2) == []


def test_reused_devices_with_empty_topology_rule_out_every_mask_but_nil_ones_do_not():
    devices = {**DEVICES, "nil": Device("nil", "Healthy"), "empty": Device("empty", "Healthy", empty_topology=True)}
    assert device_hints(NODES, devices, {"a"}, {"nil"}, 1) != []
    assert device_hints(NODES, devices, {"a"}, {"empty"}, 1) == []


@pytest.mark.parametrize("policy, admitted, affinity", [
    (TopologyPolicy.NONE, True, None),
    (TopologyPolicy.BEST_EFFORT, True, frozenset({0})),  # the narrowest non-preferred merge
    (TopologyPolicy.RESTRICTED, False, frozenset({0})),
    (TopologyPolicy.SINGLE_NUMA_NODE, False, None),
])
def test_a_request_no_single_node_can_hold_under_each_policy(policy, admitted, affinity):
    # Two resources: 'cores' only fits on node 0, 'nic' only on node 1.
    hints = {"cores": [Hint(frozenset({0}), True), Hint(frozenset({0, 1}), False)],
             "nic": [Hint(frozenset({1}), True), Hint(frozenset({0, 1}), False)]}
    hint, admit = merge(policy, NODES, hints)
    assert admit is admitted and hint.affinity == affinity


def test_merge_takes_the_narrowest_preferred_and_single_numa_node_turns_every_node_into_any():
    hints = {"nic": [Hint(frozenset({1}), True), Hint(frozenset({0, 1}), False)], "other": None}
    assert merge(TopologyPolicy.RESTRICTED, NODES, hints) == (Hint(frozenset({1}), True), True)
    assert merge(TopologyPolicy.SINGLE_NUMA_NODE, NODES, {"x": None}) == (Hint(None, True), True)
    assert merge(TopologyPolicy.BEST_EFFORT, NODES, {"x": []}) == (Hint(frozenset(NODES), False), True)


def test_the_kubelet_fills_from_aligned_devices_first_and_asks_the_plugin_only_among_them():
    asked = []

    def prefer(available, must_include, size):
        asked.append((sorted(available), sorted(must_include), size))
        return ["d", "c"]  # d is not aligned with node 0: ignored

    split = lambda free: split_by_affinity(DEVICES, free, hint=Hint(frozenset({0}), True))
    chosen = choose_devices("r", 2, (), set(DEVICES), prefer, random.Random(0), split)
    assert "d" not in chosen and "c" in chosen and len(chosen) == 2
    assert asked == [(["a", "b", "c"], [], 2)]
    # Needing all aligned devices and more: they are taken first and go to the plugin as must_include.
    asked.clear()
    chosen = choose_devices("r", 4, (), set(DEVICES), prefer, random.Random(0), split)
    assert sorted(chosen) == ["a", "b", "c", "d"] and asked[0][1] == ["a", "b", "c"]


def test_too_few_free_devices_is_the_kubelets_error():
    with pytest.raises(AdmissionError, match="Requested: 5, Available: 4"):
        choose_devices("r", 5, (), set(DEVICES), None, random.Random(0))
