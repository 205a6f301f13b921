"""No CPU in two live containers, under a seeded churn of admissions, deletions, restarts and hotplug.

Why it works this way: ``docs/design/tests-churn.md``.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from functools import partial

import pytest

from api.constants import HEALTHY, UNHEALTHY
from deviceplugin.host.sysfs import discover
from deviceplugin.model import devices as device_model
from deviceplugin.model.answers import DeviceRequestError, allocate_answer
from deviceplugin.model.cpulist import parse_cpu_list
from deviceplugin.model.devices import DeviceTree, device_tree
from deviceplugin.model.plan import (
    CORE_POOLS,
    RESOURCE_NAMES,
    PlanError,
    PlanOptions,
    Pool,
    SlotScope,
    plan_pools,
)
from deviceplugin.model.policy import preferred_allocation
from deviceplugin.model.topology import Topology
from deviceplugin.model.withheld import POOL_OF, learn_holds
from deviceplugin.standin.nodedevices import Device, NodeDevices
from deviceplugin.standin.pods import AdmissionError, choose_devices
from deviceplugin.standin.topologymanager import (
    TopologyPolicy,
    merge,
    resource_hints,
    split_by_affinity,
)
from tests.support.topologies import FIXTURES, offline_view

EVENTS = 10_000
KINDS = ("admit", "delete", "daemon_restart", "kubelet_restart", "reboot", "cpu_offline", "cpu_online", "recheck")
WEIGHTS = (30, 22, 8, 4, 2, 12, 12, 10)


@dataclass
class Container:
    pod: str
    resource: str
    ids: tuple[str, ...]
    cpus: frozenset[int]


@dataclass
class Node:
    """One node: the kubelet's side (devices, pods) and the daemon's (plan, tree, holds, record)."""

    full: Topology
    rng: random.Random
    kubelet: NodeDevices = field(default_factory=lambda: NodeDevices(300.0))
    pods: dict[str, list[Container]] = field(default_factory=dict)
    offline: set[int] = field(default_factory=set)
    isolated: frozenset[int] = frozenset()
    record: dict[str, frozenset[int]] = field(default_factory=dict)
    counts: Counter = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)
    serial: int = 0
    policy: TopologyPolicy = TopologyPolicy.NONE

    @property
    def numa_nodes(self) -> tuple[int, ...]:
        return tuple(sorted(self.full.numa_nodes))

    # -- the daemon ----------------------------------------------------------------

    def start_daemon(self, options: PlanOptions) -> None:
        topology = offline_view(self.full, frozenset(self.offline), self.isolated)
        try:
            self.plan = plan_pools(topology, options)
        except PlanError:  # a bad plan: the daemon refuses to start; the old one is gone already
            self.plan = None
            return
        self.online = topology.online
        self.recorded, self.held_at_start = dict(self.record), self.held()
        self.learn()

    def learn(self) -> None:
        """The daemon's read of pod resources: withheld cores, the tree it serves, the record it writes."""
        if self.plan is None:
            return
        holds = learn_holds(self.plan, self.held(), self.recorded, self.held_at_start)
        self.counts["withheld"] += len(holds.withheld)
        self.record = dict(holds.record)
        self.tree: DeviceTree = device_tree(self.plan, self.online, frozenset(w.core for w in holds.withheld))
        self.advertise()

    def advertise(self) -> None:
        for resource in RESOURCE_NAMES.values():
            if resource in self.tree:
                self.kubelet.registered(resource)
                self.kubelet.snapshot(resource, [
                    Device(d.id, HEALTHY if d.healthy else UNHEALTHY, tuple(sorted(d.numa_nodes)))
                    for d in self.tree[resource].devices.values()])

    def stop_daemon(self) -> None:
        for resource in RESOURCE_NAMES.values():
            self.kubelet.stream_ended(resource, 0.0)

    def hotplug(self) -> None:
        if self.plan is not None:
            topology = offline_view(self.full, frozenset(self.offline), self.isolated)
            self.online = topology.online
            self.learn()

    # -- the kubelet ---------------------------------------------------------------

    def held(self) -> dict[str, frozenset[str]]:
        held: dict[str, set[str]] = {}
        for containers in self.pods.values():
            for c in containers:
                held.setdefault(c.resource, set()).update(c.ids)
        return {r: frozenset(ids) for r, ids in held.items()}

    def admit(self) -> None:
        self.serial += 1
        name = f"pod-{self.serial}"
        wants = self.rng.choice([(Pool.EXCLUSIVE, self.rng.randint(1, 2)), (Pool.SHARED, 1), (Pool.INFRA, 1),
                                 (Pool.EXCLUSIVE, 1)])
        resource, count = RESOURCE_NAMES[wants[0]], wants[1]
        if self.plan is None or resource not in self.tree or not self.kubelet.is_live(resource):
            self.counts["rejected"] += 1
            return
        devices = self.tree[resource]
        free = self.kubelet.healthy_ids(resource) - self.held().get(resource, frozenset())
        prefer = None
        if devices.preferred_allocation:
            def prefer(available, must, size):
                return preferred_allocation(devices.cores, available, must, size)
        snapshot = self.kubelet.devices(resource)
        hints = {resource: resource_hints(self.numa_nodes, snapshot, free, (), count)}
        hint, admit = merge(self.policy, self.numa_nodes, hints)
        if not admit:
            self.counts["topology_affinity_error"] += 1
            return
        split = None if hint.affinity is None else partial(split_by_affinity, snapshot, hint=hint)
        try:
            ids = choose_devices(resource, count, (), free, prefer, self.rng, split)
            answer = allocate_answer(devices, ids, install_dir="/opt/bin")
        except (AdmissionError, DeviceRequestError):
            self.counts["rejected"] += 1
            return
        (env,) = answer.envs.values()
        self.pods[name] = [Container(name, resource, tuple(ids), parse_cpu_list(env))]
        self.counts["admitted"] += 1

    def delete(self) -> None:
        if self.pods:
            del self.pods[self.rng.choice(sorted(self.pods))]
            self.counts["deleted"] += 1

    # -- the invariant -------------------------------------------------------------------

    def check(self, step: int, kind: str) -> None:
        live = [c for containers in self.pods.values() for c in containers]
        owner: dict[int, Container] = {}
        for c in live:
            for cpu in c.cpus:
                other = owner.get(cpu)
                if other is None:
                    owner[cpu] = c
                elif not (other.resource == c.resource and POOL_OF[c.resource] not in CORE_POOLS):
                    self.violations.append(f"step {step} ({kind}): CPU {cpu} in {other.pod} {other.resource} "
                                           f"{other.ids} and {c.pod} {c.resource} {c.ids}")


def random_plan(rng: random.Random) -> PlanOptions:
    return PlanOptions(num_exclusive_cores=rng.randint(0, 4), num_shared_cores=rng.randint(0, 2),
                       shared_slots=rng.choice([4, 110]), infra_slots=rng.choice([4, 110]),
                       slot_scope=rng.choice(list(SlotScope)))


def run_churn(seed: int, events: int = EVENTS, dump: str = "cmk-xeon_d") -> Node:
    """``dump`` booted with its own isolcpus, or (none there) with every core isolated but the first."""
    full = discover(FIXTURES / dump / "sys", FIXTURES / dump / "proc")
    rng = random.Random(seed)
    base = full.isolated or full.online - full.cores[0].cpus
    node = Node(full, rng, isolated=base)
    # An old release first (every core named by its CPUs, nothing withheld): pods admitted under it.
    old_names = device_model.core_device_ids
    device_model.core_device_ids = lambda cores: {c: device_model.cpu_list_id(c) for c in cores}
    try:
        node.plan = plan_pools(offline_view(full, frozenset(), base), PlanOptions(num_exclusive_cores=3, num_shared_cores=1))
        node.online = full.online
        node.tree = device_tree(node.plan, node.online)
        node.advertise()
        for _ in range(6):
            node.admit()
    finally:
        device_model.core_device_ids = old_names
    node.counts["old_release_pods"] = len(node.pods)
    node.stop_daemon()
    # The upgrade, with the same flags: the old release kept no slot record, so what its slots gave is
    # only known as "the plan", and a plan change must wait for the next rollout (docs/user/upgrade-uninstall.md, held cores).
    node.start_daemon(PlanOptions(num_exclusive_cores=3, num_shared_cores=1))
    node.check(0, "upgrade")
    cpus = sorted(full.online - {0})
    for step in range(1, events + 1):
        kind = rng.choices(KINDS, WEIGHTS)[0]
        node.counts[kind] += 1
        if kind == "admit":
            node.admit()
        elif kind == "delete":
            node.delete()
        elif kind == "daemon_restart":
            node.stop_daemon()
            node.start_daemon(random_plan(rng))
        elif kind == "kubelet_restart":  # perhaps with another Topology Manager policy
            node.kubelet.kubelet_restarted(0.0)
            node.policy = rng.choice(list(TopologyPolicy))
            if node.plan is not None:
                node.learn()  # the daemon sees kubelet.sock anew, reads pod resources, registers again
        elif kind == "reboot":  # the kernel may come up with other isolcpus; pods come back from the checkpoint
            node.stop_daemon()
            node.kubelet.kubelet_restarted(0.0)
            half = frozenset(cpu for core in rng.sample(full.cores, len(full.cores) // 2) for cpu in core.cpus)
            node.isolated = rng.choice([base, frozenset(), half - full.cores[0].cpus])
            node.start_daemon(random_plan(rng))
        elif kind == "cpu_offline":
            node.offline.add(rng.choice(cpus))
            node.hotplug()
        elif kind == "cpu_online" and node.offline:
            node.offline.discard(rng.choice(sorted(node.offline)))
            node.hotplug()
        elif kind == "recheck":
            node.learn()
        node.check(step, kind)
    return node


@pytest.mark.parametrize("dump", ["cmk-xeon_d", "hwloc-32intel64-2p8co2t+8ve"])  # 1 and 2 NUMA nodes
def test_no_cpu_is_in_two_live_containers_over_ten_thousand_churn_events(dump):
    node = run_churn(seed=20261201, dump=dump)
    counts = node.counts
    print(f"churn counts ({dump}):", dict(sorted(counts.items())), "violations:", len(node.violations))
    assert node.violations == []
    assert sum(counts[k] for k in KINDS) == EVENTS
    assert counts["admitted"] > 1000 and counts["daemon_restart"] > 500 and counts["reboot"] > 100
    assert counts["cpu_offline"] > 1000 and counts["withheld"] > 0 and counts["old_release_pods"] > 0


def test_the_churn_catches_a_daemon_that_withholds_nothing(monkeypatch):
    """The same churn with the withheld rule switched off finds CPUs in two containers: the check can fail."""
    from deviceplugin.model import withheld

    monkeypatch.setattr(withheld, "withheld_cores", lambda plan, held, slot_cpus=None: ())
    node = run_churn(seed=20261201, events=2000)
    assert node.violations
