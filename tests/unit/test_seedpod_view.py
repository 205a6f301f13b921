"""``cmk demo``'s pod and text on literal plans: which pool each container draws from, and what is shown."""

from __future__ import annotations

import pytest

from deviceplugin.model.plan import PlanOptions, Pool, plan_pools
from deviceplugin.model.topology import build_topology
from deviceplugin.view.seedpod import (
    affinity_text,
    demo_containers,
    free_line,
    host_argv,
    node_status,
    plan_summary,
    unpinnable_reason,
)

TWO_CPUS = build_topology([(0,), (1,)])  # this CI machine: 2 CPUs, no isolcpus
XEON_D = build_topology([(i, i + 8) for i in range(8)], isolated=(0, 1, 2, 3, 8, 9, 10, 11))


def test_seed_pod_has_one_container_per_pool_when_every_pool_exists():
    plan = plan_pools(XEON_D, PlanOptions(num_exclusive_cores=3, num_shared_cores=1))
    containers = demo_containers(plan, cores=8)
    assert [(c.name, c.pool, c.note) for c in containers] == [
        ("exclusive", Pool.EXCLUSIVE, ""), ("shared", Pool.SHARED, ""), ("infra", Pool.INFRA, "")]
    assert containers[1].command == (
        "/opt/bin/cmk", "isolate", "--pool=shared", "--namespace=cmk-namespace", "sleep", "--", "inf")
    assert containers[0].resource == "cmk.intel.com/exclusive-cores"


def test_two_cpus_without_isolcpus_run_the_shared_container_from_infra_and_say_why():
    plan = plan_pools(TWO_CPUS)
    exclusive, shared, infra = demo_containers(plan, cores=2)
    assert (exclusive.pool, shared.pool, infra.pool) == (Pool.EXCLUSIVE, Pool.INFRA, Pool.INFRA)
    assert shared.note == (
        "shared: not advertised on this machine (2 cores, none isolated: the plan gives exclusive {1}, infra {0}); "
        "the pod's shared container requests cmk.intel.com/infra and runs --pool=infra instead")
    assert "--pool=infra" in shared.command and shared.resource == "cmk.intel.com/infra"


def test_no_exclusive_pool_also_falls_back_to_infra():
    plan = plan_pools(XEON_D, PlanOptions(num_exclusive_cores=0, num_shared_cores=1))
    exclusive = demo_containers(plan, cores=8)[0]
    assert exclusive.pool == Pool.INFRA and exclusive.note.startswith("exclusive: not advertised")


def test_plan_summary_lists_advertised_pools_with_their_cores():
    plan = plan_pools(XEON_D, PlanOptions(num_exclusive_cores=2, num_shared_cores=1))
    assert plan_summary(plan) == "exclusive {0,8} {1,9}, shared {2,10}, infra {4,12} {5,13} {6,14} {7,15}"


def test_host_argv_maps_the_pinner_through_the_answers_mount():
    command = ("/opt/bin/cmk", "isolate", "--pool=infra", "sleep", "--", "inf")
    assert host_argv(command, [("/opt/bin", "/tmp/x/opt-bin")]) == [
        "/tmp/x/opt-bin/cmk", "isolate", "--pool=infra", "sleep", "--", "inf"]
    # the longest matching container path wins, as with nested bind mounts
    assert host_argv(command, [("/opt", "/a"), ("/opt/bin/", "/b/")])[0] == "/b/cmk"


def test_host_argv_refuses_a_command_under_no_mount():
    with pytest.raises(ValueError, match="/opt/bin/cmk is under no mount of the Allocate answer"):
        host_argv(("/opt/bin/cmk",), [("/opt/binaries", "/x")])


def test_unpinnable_reason_names_the_cpus_this_machine_lacks():
    allowed = frozenset({0, 1})
    assert unpinnable_reason(frozenset({1}), allowed=allowed) == ""
    assert unpinnable_reason(frozenset({0, 8}), allowed=allowed) == (
        "CPU 8 of its 0,8 is not among this machine's CPUs allowed here (0-1)")
    assert unpinnable_reason(frozenset({3, 11}), allowed=allowed) == (
        "its CPUs 3,11 are not among this machine's CPUs allowed here (0-1)")


def test_affinity_text_is_what_taskset_cp_prints():
    assert affinity_text(1234, "1") == "pid 1234's current affinity list: 1"


def test_node_status_has_kubectls_blocks_for_cmk_resources_only():
    capacity = {"cmk.intel.com/infra": 110, "cmk.intel.com/exclusive-cores": 1, "example.com/gpu": 2}
    lines = node_status(capacity, capacity, {"cmk.intel.com/infra": 2})
    assert lines == [
        "Capacity:",
        "  cmk.intel.com/exclusive-cores:  1",
        "  cmk.intel.com/infra:            110",
        "Allocatable:",
        "  cmk.intel.com/exclusive-cores:  1",
        "  cmk.intel.com/infra:            110",
        "Allocated resources:",
        "  Resource                       Requests  Limits",
        "  --------                       --------  ------",
        "  cmk.intel.com/exclusive-cores  0         0",
        "  cmk.intel.com/infra            2         2",
    ]


def test_free_line_is_allocatable_minus_allocated():
    allocatable = {"cmk.intel.com/exclusive-cores": 1, "cmk.intel.com/infra": 110}
    assert free_line(allocatable, {"cmk.intel.com/infra": 2}) == (
        "Free devices: exclusive-cores 1 of 1, infra 108 of 110")
