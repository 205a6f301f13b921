"""A container started before the node-wide hook is listed as unconfined by a real ``cmk describe`` and the
daemon's ``/metrics`` on this host's real /sys; one started with the hook (``--hooks-dir``) is not.

The plan is the node-wide tests' (the highest CPU's core exclusive-non-isolcpus, every other CPU infra). Other
runs on this machine start containers too, so the describe list is checked by our containers' IDs, and the
count by the difference our unconfined container makes, read when two scrapes in a row agree.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from deviceplugin.model.confinement import Reason
from deviceplugin.model.cpulist import format_cpu_list, parse_cpu_list
from deviceplugin.standin import Kubelet, KubeletOptions
from tests.e2e.conftest import ROOT
from tests.support.daemon import daemon_process
from tests.support.metrics import Logs, scrape
from tests.support.nodewide import NodeWide, start
from tests.support.podman import podman

pytestmark = pytest.mark.e2e

COUNT = ("cmk_unconfined_containers", frozenset({("reason", Reason.STARTED_BEFORE_HOOK)}))


def container_id(name: str) -> str:
    return podman("inspect", "--format", "{{.Id}}", name).stdout.strip()


def describe(plan: NodeWide) -> dict[str, object]:
    result = subprocess.run([sys.executable, "-m", "deviceplugin", "describe", "-o", "json", "--usage-window", "0",
                             "--excl-non-isolcpus", plan.core], cwd=ROOT, capture_output=True, text=True,
                            check=False, timeout=60)
    assert result.returncode == 0, result.stderr
    section: dict[str, object] = json.loads(result.stdout)["unconfined"]
    return section


def listed(plan: NodeWide) -> dict[str, dict[str, str]]:
    section = describe(plan)
    assert section["available"] and section["cgroup_version"] == 1, section
    return {c["full_id"]: c for c in section["containers"]}  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def metrics(node: NodeWide, install_dir: Path) -> Iterator[Callable[[], float]]:
    """The real daemon on this host's /sys with the node-wide plan; yields a stable read of the count."""
    with tempfile.TemporaryDirectory(prefix="cmk-unconf-", dir="/tmp") as work:
        plugin_dir = Path(work) / "dp"
        plugin_dir.mkdir()
        kubelet = Kubelet(plugin_dir, KubeletOptions(seed=0))
        kubelet.start()
        process = daemon_process(plugin_dir, Path("/sys"), Path("/proc"), "--excl-non-isolcpus", node.core,
                                 "--install-dir", str(install_dir), "--no-cdi", "--no-infra-record", "--no-nfd",
                                 "--metrics-address", "127.0.0.1:0", "--log-format", "json",
                                 "--cgroup-scan-seconds", "0",
                                 "--pod-resources-socket", str(kubelet.pod_resources_socket))
        logs = Logs(process)
        try:
            address = logs.wait_for("metrics_serving")["address"]

            def count() -> float:
                for _ in range(20):  # a container of another run may come or go between two scrapes
                    first, second = scrape(address).get(COUNT), scrape(address).get(COUNT)
                    if first is not None and first == second:
                        return first
                pytest.fail("cmk_unconfined_containers never held still for two scrapes")

            yield count
        finally:
            process.terminate()
            process.wait(timeout=20)
            logs.join()
            kubelet.stop()


def test_a_container_born_before_the_hook_is_listed_and_one_born_with_it_is_not(
        node: NodeWide, image: str, container_name: str) -> None:
    start(None, container_name, image)
    start(node.hooks_dir, container_name + "-hook", image)
    try:
        before, hooked = container_id(container_name), container_id(container_name + "-hook")
        found = listed(node)
        assert before in found and hooked not in found
        entry = found[before]
        assert entry["id"] == before[:12] and entry["cgroup"].endswith(f"/libpod-{before}")
        whole = format_cpu_list(parse_cpu_list(node.infra) | parse_cpu_list(node.core))
        assert (entry["cpus"], entry["exclusive_cpus"]) == (whole, node.core)  # the node's, reaching the core
        table = subprocess.run([sys.executable, "-m", "deviceplugin", "describe", "--usage-window", "0",
                                "--excl-non-isolcpus", node.core], cwd=ROOT, capture_output=True, text=True,
                               check=True, timeout=60).stdout
        assert before[:12] in table and "fix: restart it" in table and hooked[:12] not in table
        podman("restart", "-t", "0", container_name)  # restarted without the hook: still unconfined
        assert container_id(container_name) in listed(node)
    finally:
        podman("rm", "-f", "-t", "0", container_name + "-hook", check=False)


def test_the_daemons_count_goes_up_by_one_unconfined_container_and_not_for_a_hooked_one(
        node: NodeWide, image: str, metrics: Callable[[], float], container_name: str) -> None:
    for attempt in range(5):  # another run's container may start or stop meanwhile: retry, do not guess
        baseline = metrics()
        start(node.hooks_dir, f"{container_name}-hook{attempt}", image)
        with_hooked = metrics()
        start(None, f"{container_name}-{attempt}", image)
        with_unconfined = metrics()
        podman("rm", "-f", "-t", "0", f"{container_name}-{attempt}", f"{container_name}-hook{attempt}", check=False)
        after = metrics()
        if baseline == after:
            break
    print(f"cmk_unconfined_containers: {baseline} -> hooked {with_hooked} -> unconfined {with_unconfined} "
          f"-> removed {after}")
    assert (with_hooked, with_unconfined, after) == (baseline, baseline + 1, baseline)
