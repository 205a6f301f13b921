"""Cores the kubelet still holds under another ID or pool stay out of every pool (pure rules)."""

from __future__ import annotations

from deviceplugin.model.devices import device_tree
from deviceplugin.model.plan import RESOURCE_NAMES, PlanOptions, Pool, plan_pools
from deviceplugin.model.topology import build_topology
from deviceplugin.model.withheld import withheld_cores

EXCLUSIVE, SHARED, INFRA = (RESOURCE_NAMES[p] for p in (Pool.EXCLUSIVE, Pool.SHARED, Pool.INFRA))

# Eight cores (i, i+8) like CMK's Xeon D, cores 0-3 isolated.
TOPOLOGY = build_topology([(i, i + 8) for i in range(8)], isolated=[0, 1, 2, 3, 8, 9, 10, 11])


def plan(exclusive: int, shared: int):
    return plan_pools(TOPOLOGY, PlanOptions(num_exclusive_cores=exclusive, num_shared_cores=shared))


def all_cpus(tree, resource):
    return frozenset().union(*(d.cpus for d in tree[resource].devices.values()))


def test_an_old_release_id_keeps_its_core_out_even_in_its_own_pool():
    new = plan(3, 1)
    withheld = withheld_cores(new, {EXCLUSIVE: ["cpus-1.9"]})
    assert [(w.core.cpus, w.planned, w.device_id) for w in withheld] == [({1, 9}, Pool.EXCLUSIVE, "cpus-1.9")]
    tree = device_tree(new, TOPOLOGY.online, frozenset(w.core for w in withheld))
    assert sorted(tree[EXCLUSIVE].devices) == ["core-n0-p0-c0", "core-n0-p0-c2"]
    assert "older release" in withheld[0].message and "cpus-1.9" in withheld[0].message


def test_a_core_the_plan_moves_out_of_its_holders_pool_is_in_no_pool():
    new = plan(2, 2)  # exclusive {0,8} {1,9}; shared {2,10} {3,11}
    withheld = withheld_cores(new, {EXCLUSIVE: ["core-n0-p0-c2", "core-n0-p0-c0"]})
    assert [(w.core.cpus, w.planned) for w in withheld] == [({2, 10}, Pool.SHARED)]
    tree = device_tree(new, TOPOLOGY.online, frozenset(w.core for w in withheld))
    assert all_cpus(tree, SHARED) == {3, 11}
    assert "core-n0-p0-c0" in tree[EXCLUSIVE].devices  # still exclusive: the kubelet knows it is taken


def test_held_slots_keep_the_previous_pool_cpus_out_of_other_pools_only():
    new = plan(4, 0)  # the shared core {3,11} of the previous plan is exclusive now
    withheld = withheld_cores(new, {SHARED: ["shared-004"]}, {SHARED: frozenset({3, 11})})
    assert [(w.core.cpus, w.planned, w.resource) for w in withheld] == [({3, 11}, Pool.EXCLUSIVE, SHARED)]
    same = plan(3, 1)
    assert withheld_cores(same, {SHARED: ["shared-004"]}, {SHARED: frozenset({3, 11})}) == ()


def test_nothing_held_or_only_current_ids_withholds_nothing():
    new = plan(3, 1)
    assert withheld_cores(new, {}) == ()
    assert withheld_cores(new, {EXCLUSIVE: ["core-n0-p0-c1"], SHARED: ["shared-000"], "vendor.com/nic": ["x"]}) == ()


def test_a_slot_pool_with_every_core_withheld_has_only_unhealthy_slots():
    new = plan(3, 1)
    withheld = withheld_cores(new, {EXCLUSIVE: ["cpus-3.11"]})
    tree = device_tree(new, TOPOLOGY.online, frozenset(w.core for w in withheld))
    assert tree[SHARED].healthy == 0 and all_cpus(tree, SHARED) == frozenset()
