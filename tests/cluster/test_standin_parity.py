"""The stand-in judged by the real kubelet: one scenario against both, and the daemon saw the same calls.

The scenario: the seed pod (deploy/examples' three-pool pod, one container per pool this node
serves) is admitted and deleted, then the kubelet restarts. The daemon is the one user-facing
witness of what a kubelet called: its counters (Allocate and GetPreferredAllocation per pool,
Register per resource, kubelet restarts) and its ``allocated`` log lines in order. On the real side
that is the DaemonSet's daemon under the real kubelet; on the stand-in side the same daemon (same
config, this machine's sysfs) under the stand-in, the pod given as the stand-in's PodSpec. Where the
two differ, the stand-in is wrong (issue 19): each check names the call it compares.
"""

from __future__ import annotations

import json
import shlex
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from deviceplugin.standin import ContainerSpec, Kubelet, KubeletOptions, PodSpec
from tests.cluster.deploy import (
    DAEMONSET,
    DEPLOY,
    NAMESPACE,
    RESOURCE_PREFIX,
    Deployment,
    delete_pod,
    example,
    node_shows_registered,
    start_pod,
    workload_pod,
)
from tests.cluster.node import Node, wait_for
from tests.support.daemon import daemon_process
from tests.support.metrics import Samples, parse, read_until, scrape

#: the daemon's counters of kubelet calls: (metric, label) -> compared per label value
CALLS = (("cmk_allocate_duration_seconds_count", "pool"), ("cmk_preferred_allocation_duration_seconds_count", "pool"),
         ("cmk_kubelet_restarts_total", ""))


@dataclass(frozen=True)
class Seen:
    """What one daemon saw of one run of the scenario."""

    calls: dict[str, float]  # "metric{label}" -> how much it grew
    registrations: dict[str, float]  # resource -> Register calls that succeeded during the run
    allocated: list[tuple[str, int]]  # the ``allocated`` lines in order: (resource, devices)


def grown(before: Samples, after: Samples) -> tuple[dict[str, float], dict[str, float]]:
    def counted(samples: Samples, name: str, label: str) -> dict[str, float]:
        return {dict(labels).get(label, ""): v for (n, labels), v in samples.items() if n == name}

    calls: dict[str, float] = {}
    for name, label in CALLS:
        old, new = counted(before, name, label), counted(after, name, label)
        calls |= {f"{name}{{{key}}}": new[key] - old.get(key, 0) for key in new}
    old, new = (counted(s, "cmk_registrations_total", "resource") for s in (before, after))
    return calls, {key: new[key] - old.get(key, 0) for key in new}


def text_fields(line: str) -> dict[str, str]:
    """One ``key=value ... msg="..."`` line of the daemon's text log."""
    try:
        return dict(part.partition("=")[::2] for part in shlex.split(line))
    except ValueError:
        return {}


def allocated(fields: list[dict[str, Any]]) -> list[tuple[str, int]]:
    def count(devices: Any) -> int:
        return len(devices) if isinstance(devices, list) else len(str(devices).split(","))

    return [(str(f["resource"]), count(f["devices"])) for f in fields if f.get("event") == "allocated"]


def seed_pod(deployed: Deployment) -> dict[str, Any]:
    pod = workload_pod(example("pod-three-pools.yaml"), deployed.served(), deployed.threads_per_core)
    pod["metadata"]["name"] = "parity"
    return pod


def as_podspec(manifest: dict[str, Any]) -> PodSpec:
    """The same pod as the stand-in admits it: its containers and their cmk limits, in order."""
    return PodSpec(manifest["metadata"]["name"], tuple(
        ContainerSpec(c["name"], limits={r: int(n) for r, n in c["resources"]["limits"].items()
                                         if r.startswith(RESOURCE_PREFIX)})
        for c in manifest["spec"]["containers"]))


def registered_again(before: Samples, served: set[str]) -> Callable[[Samples], bool]:
    """Every pool registered again and the restart counted (the count follows the new kubelet.sock's
    inotify event, which the daemon may take after a registration already went through)."""
    def done(after: Samples) -> bool:
        calls, registrations = grown(before, after)
        return bool(served) and all(registrations.get(r, 0) >= 1 for r in served) \
            and calls.get("cmk_kubelet_restarts_total{}", 0) >= 1
    return done


def scrape_in_pod(node: Node) -> Samples:
    """The daemon's ``/metrics`` read inside its pod: this node's pod network has no route from the host."""
    read = "import urllib.request as u; print(u.urlopen('http://127.0.0.1:9464/metrics', timeout=10).read().decode())"
    result = node.kubectl("-n", NAMESPACE, "exec", f"daemonset/{DAEMONSET}", "-c", "daemon", "--", "python3", "-c", read)
    return parse(result.stdout)


@pytest.fixture(scope="module")
def real(deployed: Deployment) -> Seen:
    node = deployed.node
    since = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    before = scrape_in_pod(node)
    delete_pod(node, start_pod(node, seed_pod(deployed)))
    node.restart_kubelet()
    wait_for("every pool registered with the new kubelet", lambda: node_shows_registered(node), 120)
    # a restarting kubelet answers an exec with "pod does not exist" until it has synced its pods
    after = read_until(lambda: scrape_in_pod(node), registered_again(before, deployed.served()),
                       "every pool registered again and the restart counted", 60, retry_on=(AssertionError,))
    logs = node.kubectl("-n", NAMESPACE, "logs", f"daemonset/{DAEMONSET}", "-c", "daemon", f"--since-time={since}")
    calls, registrations = grown(before, after)
    return Seen(calls, registrations, allocated([text_fields(line) for line in logs.stdout.splitlines()]))


@pytest.fixture(scope="module")
def standin(deployed: Deployment) -> Iterator[Seen]:
    with tempfile.TemporaryDirectory(prefix="cmk-parity-") as work:
        plugin_dir = Path(work) / "device-plugins"
        kubelet = Kubelet(plugin_dir, KubeletOptions(pod_resources_socket=Path(work) / "pod-resources.sock"))
        kubelet.start()
        process = daemon_process(plugin_dir, Path("/sys"), Path("/proc"), "--config", str(DEPLOY / "base/config.yaml"),
                                 "--metrics-address", "127.0.0.1:0", "--log-format", "json",
                                 "--pod-resources-socket", str(kubelet.pod_resources_socket))
        lines: list[dict[str, Any]] = []
        try:
            assert process.stderr is not None
            for line in process.stderr:
                lines.append(json.loads(line))
                if lines[-1].get("event") == "metrics_serving":
                    break
            address = str(lines[-1].get("address"))
            served = deployed.served()
            kubelet.wait_for(lambda: set(kubelet.allocatable()) >= served, what="every pool registered")
            before = scrape(address)
            kubelet.admit(as_podspec(seed_pod(deployed)))
            kubelet.delete_pod("parity")
            kubelet.restart()
            after = read_until(lambda: scrape(address), registered_again(before, served),
                               "every pool registered again and the restart counted", 60)
        finally:
            process.terminate()
            _, rest = process.communicate(timeout=30)
            kubelet.stop()
        lines += [json.loads(line) for line in (rest or "").splitlines() if line.strip()]
        calls, registrations = grown(before, after)
        yield Seen(calls, registrations, allocated(lines))


def test_both_daemons_serve_the_same_plan(real: Seen, standin: Seen) -> None:
    assert set(standin.registrations) == set(real.registrations)


def test_the_kubelet_calls_allocate_and_get_preferred_allocation_as_often(real: Seen, standin: Seen) -> None:
    assert standin.calls == real.calls


def test_the_kubelet_calls_allocate_in_the_same_order_with_the_same_device_counts(real: Seen, standin: Seen) -> None:
    assert real.allocated, "the real daemon logged no allocation"
    assert standin.allocated == real.allocated


def test_a_kubelet_restart_is_counted_once_and_every_pool_registers_again(real: Seen, standin: Seen) -> None:
    for seen in (real, standin):
        assert seen.calls["cmk_kubelet_restarts_total{}"] == 1
        assert all(count >= 1 for count in seen.registrations.values()), seen.registrations


def test_the_seed_pod_asks_what_the_stand_in_was_given(deployed: Deployment) -> None:
    """The stand-in's pod is the real one's: same containers, same cmk limits (the scenario's premise)."""
    manifest = seed_pod(deployed)
    spec = as_podspec(manifest)
    assert [c.name for c in spec.containers] == [c["name"] for c in manifest["spec"]["containers"]]
    assert all(c.limits for c in spec.containers)
