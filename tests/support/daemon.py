"""The real daemon for the tests: in-process or as a process (``python -m deviceplugin device-plugin``, the way
its users run it), and what tests ask of it once it serves.

Shared by the protocol tier (against the stand-in), the e2e tier and the cluster tier (the stand-in beside the
real kubelet).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import grpc
import pytest

from api.v1beta1 import deviceplugin_pb2_grpc as pb_grpc
from deviceplugin.daemon import Daemon, DaemonSettings
from deviceplugin.host.sysfs import discover
from deviceplugin.model.cpulist import format_cpu_list, parse_cpu_list
from deviceplugin.model.devices import core_device_ids
from deviceplugin.model.plan import RESOURCE_NAMES, PlanOptions, Pool
from deviceplugin.standin import ContainerSpec, Kubelet, PodSpec
from tests.support.started import StopAfter
from tests.support.topologies import FIXTURES, fixture_copy

EXCLUSIVE, NON_ISOL = RESOURCE_NAMES[Pool.EXCLUSIVE], RESOURCE_NAMES[Pool.EXCLUSIVE_NON_ISOLCPUS]


SHARED, INFRA = RESOURCE_NAMES[Pool.SHARED], RESOURCE_NAMES[Pool.INFRA]


INSTALL_DIR = "/opt/cmk-test/bin"


REPO = Path(__file__).resolve().parents[2]


def isolate_all_but_first_core(sysfs: Path, procfs: Path) -> str:
    """isolcpus for a dump: every online CPU but the first core's (infra keeps that one)."""
    topology = discover(sysfs, procfs)
    keep = topology.cores[0].cpus
    return format_cpu_list(topology.online - keep)


def copy_with_isolcpus(name: str, dest: Path, isolcpus: str | None = None) -> tuple[Path, Path]:
    sysfs, procfs = fixture_copy(name, dest)
    return fixture_copy(name, dest / "isolated", isolcpus=isolcpus or isolate_all_but_first_core(sysfs, procfs))


def cpus_of(device_id: str, sysfs: Path, procfs: Path) -> frozenset[int]:
    """The CPUs behind a core device ID, through the device model's names of the dump's cores (never parsed)."""
    names = core_device_ids(discover(sysfs, procfs).cores)
    return next(core.cpus for core, name in names.items() if name == device_id)


def expected_nodes(name: str) -> dict[int, int]:
    """cpu -> NUMA node as the dump's upstream project saw it (not from our parser)."""
    data = json.loads((FIXTURES / name / "expected.json").read_text())
    return {int(cpu): int(node) for node, cpus in data["numa_nodes"].items() for cpu in parse_cpu_list(cpus)}


@pytest.fixture
def start_daemon(plugin_dir: Path) -> Iterator[Callable[..., Daemon]]:
    """``start_daemon(sysfs, procfs, **plan)``: an in-process daemon serving ``plugin_dir``, stopped after."""
    with StopAfter() as kept:
        def start(sysfs: Path, procfs: Path, **plan: object) -> Daemon:
            return kept.start(Daemon(DaemonSettings(kubelet_dir=plugin_dir, sysfs_root=sysfs, procfs_root=procfs,
                                                    install_dir=INSTALL_DIR, plan=PlanOptions(**plan))))

        yield start


def wait_registered(kubelet: Kubelet, resources: set[str], count: int = 1) -> None:
    """Until each resource registered ``count`` times and its live stream sent a snapshot."""
    def done() -> bool:
        seen = [r.resource for r in kubelet.registrations()]
        allocatable = kubelet.allocatable()
        return all(seen.count(r) >= count and kubelet.options(r) is not None and allocatable.get(r, 0) > 0
                   for r in resources)

    kubelet.wait_for(done, what=f"{sorted(resources)} registered {count} time(s)")


def device_ids(kubelet: Kubelet) -> dict[str, list[str]]:
    return {r: sorted(kubelet.devices(r)) for r in kubelet.capacity()}


def stub(plugin_dir: Path, resource: str) -> pb_grpc.DevicePluginStub:
    name = f"cmk-{resource.rpartition('/')[2]}.sock"
    return pb_grpc.DevicePluginStub(grpc.insecure_channel(f"unix:{plugin_dir / name}"))


def three_pool_pod(name: str = "demo", exclusive: int = 2) -> PodSpec:
    return PodSpec(name, containers=(
        ContainerSpec("dataplane", limits={EXCLUSIVE: exclusive}),
        ContainerSpec("controlplane", limits={SHARED: 1}),
        ContainerSpec("monitor", limits={INFRA: 1, SHARED: 1}),
    ))


def daemon_process(plugin_dir: Path, sysfs: Path, procfs: Path, *flags: str,
                   stderr: IO[str] | int = subprocess.PIPE) -> subprocess.Popen[str]:
    """The CLI daemon; its CDI spec goes to ``<plugin_dir>/cdi`` and its NFD file to ``<plugin_dir>/features.d``
    unless the flags say otherwise (never /var/run/cdi, the host's features.d or its infra record).

    ``stderr``: a file for a test that lets the daemon log more than a pipe holds while nobody reads it."""
    if "--cdi-dir" not in flags and "--no-cdi" not in flags:
        flags = (*flags, "--cdi-dir", str(plugin_dir / "cdi"))
    if "--install-dir" not in flags:
        flags = (*flags, "--no-infra-record")  # never the host's /opt/bin/cmk-infra-cpus
    return subprocess.Popen(
        [sys.executable, "-m", "deviceplugin", "device-plugin", "--kubelet-dir", str(plugin_dir),
         "--sysfs-root", str(sysfs), "--procfs-root", str(procfs),
         "--nfd-features-dir", str(plugin_dir / "features.d"), *flags],
        cwd=REPO, stdout=subprocess.PIPE, stderr=stderr, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def our_sockets(plugin_dir: Path) -> list[str]:
    return sorted(p.name for p in plugin_dir.iterdir() if p.name.startswith("cmk-") and p.name.endswith(".sock"))


def probe(plugin_dir: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "deviceplugin", "probe", "--kubelet-dir", str(plugin_dir), *extra],
                          capture_output=True, text=True, timeout=60, check=False)
