"""``cmk_unconfined_containers`` from a cgroup tree in a dump, with the stand-in's pod resources over a real socket."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from deviceplugin.daemon import Daemon
from deviceplugin.model.confinement import Reason, exclusive_cpus
from deviceplugin.model.plan import Pool
from deviceplugin.observe.cgroupmetrics import UnconfinedCollector
from deviceplugin.observe.metrics import Metrics, PoolCollector
from deviceplugin.standin import ContainerSpec, Kubelet, PodSpec
from tests.support.cgroups import container, cpuset_root
from tests.support.daemon import (
    EXCLUSIVE,
    INFRA,
    SHARED,
    cpus_of,
    wait_registered,
)
from tests.support.metrics import lint, parse
from tests.support.topologies import fixture_copy

UP = ("cmk_cgroup_scan_up", frozenset())
COUNT, WIDENED = (("cmk_unconfined_containers", frozenset({("reason", reason)}))
                  for reason in (Reason.STARTED_BEFORE_HOOK, Reason.WIDENED))


def registry_of(daemon: Daemon, kubelet: Kubelet, confinement: UnconfinedCollector) -> CollectorRegistry:
    """The daemon's metrics with ``confinement`` and the stand-in's pod resources."""
    collector = PoolCollector(tree=lambda: daemon.tree, plan=daemon.plan, registered=daemon.registered_resources,
                              pod_resources=kubelet.pod_resources_socket, confinement=confinement)
    return Metrics(collector, daemon.tree).registry


def xeon_d_daemon(kubelet: Kubelet, start_daemon, tmp_path: Path) -> tuple[Path, Path, Daemon]:
    """(sysfs, procfs, the daemon serving them) on a copy of the Xeon D dump (isolcpus=0-3,8-11), its three pools
    registered."""
    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path)
    daemon = start_daemon(sysfs, procfs, num_exclusive_cores=3, num_shared_cores=1)
    wait_registered(kubelet, {EXCLUSIVE, SHARED, INFRA})
    return sysfs, procfs, daemon


def test_the_count_follows_the_cgroup_tree_and_what_the_kubelet_says_containers_hold(kubelet: Kubelet,
                                                                                     start_daemon,
                                                                                     tmp_path):
    sysfs, procfs, daemon = xeon_d_daemon(kubelet, start_daemon, tmp_path)
    registry = registry_of(daemon, kubelet, UnconfinedCollector(sysfs_root=sysfs, exclusive=exclusive_cpus(daemon.plan),
                                                                rescan_seconds=0))  # every scrape walks: the tree changes
    samples = parse(generate_latest(registry).decode())
    assert samples[UP] == 0 and COUNT not in samples and WIDENED not in samples  # no cgroup tree: left out, not 0

    root = cpuset_root(sysfs)
    container(root, "a" * 64, range(16))  # born before the hook: the whole node
    container(root, "b" * 64, daemon.plan.cpus(Pool.INFRA))  # the infra record
    pod = kubelet.admit(PodSpec("mixed", containers=(ContainerSpec("fwd", limits={EXCLUSIVE: 1, INFRA: 1}),)))
    fwd = pod.container("fwd")
    core = frozenset(cpu for i in fwd.device_ids[EXCLUSIVE] for cpu in cpus_of(i, sysfs, procfs))
    container(root, "c" * 64, core | daemon.plan.cpus(Pool.INFRA))  # what the hook gives fwd
    container(root, "d" * 64, core)  # a core alone
    text = generate_latest(registry).decode()
    lint(text)
    samples = parse(text)
    assert (samples[UP], samples[COUNT], samples[WIDENED]) == (1, 1, 0)  # only the node-wide one

    container(root, "e" * 64, range(16), hooked=True)  # the hook confined it, then its cpuset was rewritten
    samples = parse(generate_latest(registry).decode())
    assert (samples[COUNT], samples[WIDENED]) == (1, 1)

    kubelet.stop()  # holdings unknown: fwd's core-and-infra cpuset cannot be told from an unconfined one
    samples = parse(generate_latest(registry).decode())
    assert (samples[UP], samples[COUNT], samples[WIDENED]) == (1, 2, 1)


def test_a_scrape_reuses_the_last_walk_until_the_holdings_change_or_it_is_stale(kubelet: Kubelet,
                                                                                start_daemon,
                                                                                tmp_path):
    sysfs, _, daemon = xeon_d_daemon(kubelet, start_daemon, tmp_path)
    root = cpuset_root(sysfs)
    container(root, "a" * 64, range(16))
    now = [0.0]
    registry = registry_of(daemon, kubelet, UnconfinedCollector(sysfs_root=sysfs, exclusive=exclusive_cpus(daemon.plan),
                                                                rescan_seconds=30, clock=lambda: now[0]))
    assert parse(generate_latest(registry).decode())[COUNT] == 1

    container(root, "b" * 64, range(16))  # another one, started with no device: the holdings stay the same
    now[0] = 29.0
    assert parse(generate_latest(registry).decode())[COUNT] == 1, "the last walk still answers"
    now[0] = 30.0
    assert parse(generate_latest(registry).decode())[COUNT] == 2, "stale: walked again"

    container(root, "c" * 64, range(16))
    kubelet.admit(PodSpec("pinned", containers=(ContainerSpec("fwd", limits={EXCLUSIVE: 1}),)))
    assert parse(generate_latest(registry).decode())[COUNT] == 3, "the holdings changed: walked again"
