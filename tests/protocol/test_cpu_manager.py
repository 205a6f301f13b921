"""The kubelet's static CPU manager, detected through the real pod resources API as the stand-in serves it.

Under ``static`` the kubelet's ``GetAllocatableResources`` lists the CPUs it hands out itself
(``cpu_ids``); under ``none`` it lists none. The daemon must not serve exclusive cores next to a
kubelet that pins Guaranteed pods onto them, and must say the fix in one line.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from deviceplugin.daemon import Daemon, DaemonSettings
from deviceplugin.model.plan import RESOURCE_NAMES, PlanOptions, Pool
from deviceplugin.standin import Kubelet
from tests.support.commands import cmk
from tests.support.records import logged
from tests.support.started import StopAfter
from tests.support.topologies import fixture_copy

EXCLUSIVE, SHARED, INFRA = (RESOURCE_NAMES[p] for p in (Pool.EXCLUSIVE, Pool.SHARED, Pool.INFRA))
#: What the kubelet's static policy lists on the xeon_d dump with reservedSystemCPUs 0,8.
STATIC_CPUS = [cpu for cpu in range(16) if cpu not in (0, 8)]


@pytest.fixture
def serve(plugin_dir: Path, tmp_path: Path,
          caplog: pytest.LogCaptureFixture) -> Iterator[Callable[[Kubelet, Path | None], Daemon]]:
    """An in-process daemon on a copy of xeon_d reading ``socket``; stopped after. Its lines are in ``caplog``."""
    caplog.set_level(logging.INFO, logger="deviceplugin")
    with StopAfter() as kept:
        def start(kubelet: Kubelet, socket: Path | None) -> Daemon:
            sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path / f"dump{len(kept)}")
            return kept.start(Daemon(DaemonSettings(
                kubelet_dir=plugin_dir, sysfs_root=sysfs, procfs_root=procfs, install_dir="/opt/cmk-test/bin",
                plan=PlanOptions(num_exclusive_cores=3), pod_resources_socket=socket, held_recheck=0.2)))

        yield start


def registered(kubelet: Kubelet, resources: set[str]) -> None:
    kubelet.wait_for(lambda: {r.resource for r in kubelet.registrations()} >= resources
                     and all(kubelet.allocatable().get(r, 0) > 0 for r in resources), what=f"{sorted(resources)}")


def test_under_the_static_policy_the_exclusive_pool_is_not_served_and_the_fix_is_named(make_kubelet, serve,
                                                                                         plugin_dir, caplog):
    kubelet = make_kubelet(static_cpus=STATIC_CPUS)
    daemon = serve(kubelet, kubelet.pod_resources_socket)
    registered(kubelet, {SHARED, INFRA})
    assert daemon.refused == {EXCLUSIVE}
    kubelet.wait_for(lambda: daemon.registered, what="the daemon counts the pools it serves as registered")
    assert EXCLUSIVE not in {r.resource for r in kubelet.registrations()}
    assert not (plugin_dir / "cmk-exclusive-cores.sock").exists()
    (static,) = logged(caplog.records, "cpu_manager_static")
    assert static["refused"] == (EXCLUSIVE,) and static["level"] == "error"
    assert static["msg"] == (
        "not serving cmk.intel.com/exclusive-cores: the kubelet's CPU manager policy is static (pod resources "
        "GetAllocatableResources lists CPUs 1-7,9-15): it pins Guaranteed pods onto the CPUs the exclusive pools "
        "hand out, so they are not served: set the kubelet's cpuManagerPolicy: none (stop the kubelet, remove "
        "/var/lib/kubelet/cpu_manager_state, start it; cmk host-config prints the setting)")


def test_under_the_none_policy_every_pool_is_served(make_kubelet, serve, caplog):
    kubelet = make_kubelet()
    daemon = serve(kubelet, kubelet.pod_resources_socket)
    registered(kubelet, {EXCLUSIVE, SHARED, INFRA})
    assert daemon.refused == frozenset()
    assert not logged(caplog.records, "cpu_manager_static") + logged(caplog.records, "cpu_manager_unknown")


def test_the_kubelet_restarted_with_policy_none_gets_the_exclusive_pool(make_kubelet, serve):
    """Changing the policy means restarting the kubelet: the daemon checks again when it re-registers."""
    static = make_kubelet(static_cpus=STATIC_CPUS)
    daemon = serve(static, static.pod_resources_socket)
    registered(static, {SHARED, INFRA})
    static.stop()
    fixed = make_kubelet()  # the same directory and pod resources socket, policy none
    registered(fixed, {EXCLUSIVE, SHARED, INFRA})
    assert daemon.refused == frozenset()


def test_pod_resources_unreadable_serves_the_exclusive_pool_and_says_why(make_kubelet, serve, tmp_path, caplog):
    kubelet = make_kubelet(static_cpus=STATIC_CPUS)
    serve(kubelet, tmp_path / "no-such.sock")
    registered(kubelet, {EXCLUSIVE, SHARED, INFRA})
    (unknown,) = logged(caplog.records, "cpu_manager_unknown")
    assert unknown["msg"].startswith(f"cannot tell the kubelet's CPU manager policy (no socket at {tmp_path}")
    assert unknown["msg"].endswith("serving the exclusive pools, which needs the kubelet's cpuManagerPolicy: none")


def test_describe_shows_the_static_policy_from_the_kubelets_answer(make_kubelet, tmp_path):
    kubelet = make_kubelet(static_cpus=STATIC_CPUS)
    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path)
    flags = ("--sysfs-root", str(sysfs), "--procfs-root", str(procfs), "--pod-resources-socket",
             str(kubelet.pod_resources_socket), "--usage-window", "0")
    live = json.loads(cmk("describe", "-o", "json", *flags).stdout)["live"]
    assert live["kubelet_cpu_manager"] == "static"
    assert any(note.startswith("the kubelet's CPU manager policy is static") for note in live["notes"])
    assert "note: the kubelet's CPU manager policy is static" in cmk("describe", *flags).stdout
    none = make_kubelet(pod_resources_socket=tmp_path / "none.sock")
    flags = (*flags[:5], str(none.pod_resources_socket), *flags[6:])
    assert json.loads(cmk("describe", "-o", "json", *flags).stdout)["live"]["kubelet_cpu_manager"] == "none"
