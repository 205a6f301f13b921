"""IRQ steering through the daemon: a held exclusive core gets no device IRQ until it is freed, across restarts.

Real daemons against the stand-in (real gRPC, real pod resources); the masks
are files laid out as /proc/irq is (the kernel's own are in the node tier,
tests/node, with real virtio interrupts).
"""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from deviceplugin.daemon import Daemon, DaemonSettings
from deviceplugin.host.irqs import RECORD_NAME
from deviceplugin.model.cpulist import format_cpu_list, parse_cpu_list
from deviceplugin.model.plan import PlanOptions, Pool
from deviceplugin.observe.metrics import Metrics, PoolCollector
from deviceplugin.standin import ContainerSpec, Kubelet, PodSpec
from tests.support.daemon import EXCLUSIVE, INFRA, SHARED, wait_registered
from tests.support.records import logged
from tests.support.started import StopAfter
from tests.support.topologies import fixture_copy

ALL = frozenset(range(16))  # cmk-xeon_d: 16 CPUs
IRQS = {"24": ALL, "25": frozenset({1}), "26": frozenset({0, 4})}


def masks(irq_dir: Path) -> dict[str, frozenset[int]]:
    found = {entry.name: parse_cpu_list((entry / "smp_affinity_list").read_text().strip())
             for entry in irq_dir.iterdir() if entry.name.isdigit()}
    value = int((irq_dir / "default_smp_affinity").read_text().strip(), 16)
    found["default"] = frozenset(bit for bit in range(64) if value >> bit & 1)
    return found


@pytest.fixture
def irq_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "irq"
    for irq, cpus in IRQS.items():
        (directory / irq).mkdir(parents=True)
        (directory / irq / "smp_affinity_list").write_text(format_cpu_list(cpus) + "\n")
    (directory / "default_smp_affinity").write_text("ffff\n")
    return directory


@pytest.fixture
def run_daemon(kubelet: Kubelet, plugin_dir: Path, tmp_path: Path,
               irq_dir: Path) -> Iterator[Callable[..., tuple[Daemon, Metrics]]]:
    """``run_daemon(steering)``: a started daemon and its metrics, fed as ``cmk device-plugin`` feeds them."""
    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path)  # isolcpus=0-3,8-11
    with StopAfter() as kept:
        def run(steering: frozenset[Pool] = frozenset({Pool.EXCLUSIVE})) -> tuple[Daemon, Metrics]:
            daemon = Daemon(DaemonSettings(kubelet_dir=plugin_dir, sysfs_root=sysfs, procfs_root=procfs,
                                           install_dir="/opt/cmk-test", plan=PlanOptions(num_shared_cores=1),
                                           pod_resources_socket=kubelet.pod_resources_socket, held_recheck=0.1,
                                           irq_steering=steering, irq_dir=irq_dir,
                                           irqbalance_dir=tmp_path / "irqbalance"))
            metrics = Metrics(PoolCollector(tree=lambda: daemon.tree, plan=daemon.plan,
                                            registered=daemon.registered_resources, pod_resources=None), daemon.tree)
            daemon.observers.add(metrics)
            return kept.start(daemon), metrics

        yield run


def hold_a_core(kubelet: Kubelet, name: str = "rt") -> frozenset[int]:
    pod = kubelet.admit(PodSpec(name, (ContainerSpec("app", limits={EXCLUSIVE: 1}),)))
    return parse_cpu_list(pod.container("app").envs["CMK_CPUS_EXCLUSIVE"])


def steered_off(irq_dir: Path, held: frozenset[int]) -> bool:
    return all(not cpus & held for cpus in masks(irq_dir).values())


def given_back(irq_dir: Path, plugin_dir: Path) -> bool:
    return masks(irq_dir) == {**IRQS, "default": ALL} and not (plugin_dir / RECORD_NAME).exists()


def test_a_held_core_gets_no_device_irq_and_every_mask_comes_back_when_it_is_freed(kubelet, run_daemon, irq_dir,
                                                                                  plugin_dir):
    daemon, _ = run_daemon()
    wait_registered(kubelet, {EXCLUSIVE, SHARED, INFRA})
    assert masks(irq_dir) == {**IRQS, "default": ALL}  # nothing held: nothing touched
    held = hold_a_core(kubelet)
    kubelet.wait_for(lambda: steered_off(irq_dir, held), timeout=10, what="IRQs off the held core")
    now = masks(irq_dir)
    assert now["24"] == ALL - held and now["default"] == ALL - held
    housekeeping = ALL - daemon.plan.cpus(Pool.EXCLUSIVE)
    assert now["26"] == (IRQS["26"] - held or housekeeping) and now["25"] == (IRQS["25"] - held or housekeeping)
    record = json.loads((plugin_dir / RECORD_NAME).read_text())
    assert record["24"] == {"found": format_cpu_list(ALL), "wrote": format_cpu_list(ALL - held)}
    kubelet.delete_pod("rt")
    kubelet.wait_for(lambda: given_back(irq_dir, plugin_dir), timeout=10, what="every mask given back")


def stopped_while_steering(kubelet: Kubelet, run_daemon: Callable[..., tuple[Daemon, list]],
                           irq_dir: Path) -> frozenset[int]:
    """A daemon that steered IRQs off a core a pod still holds, stopped; the core's CPUs."""
    first, _ = run_daemon()
    wait_registered(kubelet, {EXCLUSIVE, SHARED, INFRA})
    held = hold_a_core(kubelet)
    kubelet.wait_for(lambda: steered_off(irq_dir, held), timeout=10, what="IRQs off the held core")
    first.stop()
    return held


def test_a_restarted_daemon_keeps_the_masks_narrowed_while_held_and_gives_back_the_originals(
        kubelet, run_daemon, irq_dir, plugin_dir):
    held = stopped_while_steering(kubelet, run_daemon, irq_dir)
    run_daemon()
    wait_registered(kubelet, {EXCLUSIVE, SHARED, INFRA}, count=2)
    assert steered_off(irq_dir, held)  # the pod still holds the core: nothing given back yet
    kubelet.delete_pod("rt")
    kubelet.wait_for(lambda: given_back(irq_dir, plugin_dir), timeout=10,
                     what="the masks the first daemon found, given back by the second")


def test_a_daemon_started_with_steering_off_gives_back_every_recorded_mask_even_while_cores_are_held(
        kubelet, run_daemon, irq_dir, plugin_dir):
    stopped_while_steering(kubelet, run_daemon, irq_dir)
    run_daemon(frozenset())  # the operator turned steering off (the way to uninstall it)
    kubelet.wait_for(lambda: given_back(irq_dir, plugin_dir), timeout=10, what="every mask given back")


@pytest.fixture
def read_only_irq(irq_dir: Path) -> Iterator[Path]:
    """IRQ 27, its mask on every CPU, on a read-only bind mount: every write fails as a managed IRQ's does."""
    mask = irq_dir / "27" / "smp_affinity_list"
    mask.parent.mkdir()
    mask.write_text(format_cpu_list(ALL) + "\n")
    subprocess.run(["mount", "--bind", "-o", "ro", str(mask), str(mask)], check=True)
    subprocess.run(["mount", "-o", "remount,bind,ro", str(mask)], check=True)
    yield mask
    subprocess.run(["umount", str(mask)], check=True)


def test_an_irq_the_kernel_refuses_is_reported_once_left_alone_and_the_rest_steered(kubelet, run_daemon, irq_dir,
                                                                                   read_only_irq, plugin_dir, caplog):
    caplog.set_level(logging.INFO, logger="deviceplugin")
    _, metrics = run_daemon()
    wait_registered(kubelet, {EXCLUSIVE, SHARED, INFRA})
    held = hold_a_core(kubelet)
    kubelet.wait_for(lambda: not masks(irq_dir)["24"] & held, timeout=10, what="IRQ 24 off the held core")
    second = hold_a_core(kubelet, "rt2")  # a new round: the refused IRQ is not tried again
    kubelet.wait_for(lambda: not masks(irq_dir)["24"] & second, timeout=10, what="IRQ 24 off both cores")
    exposed = metrics.render().decode()
    narrowed = len(json.loads((plugin_dir / RECORD_NAME).read_text()))
    assert "cmk_irqs_unmovable_total 1.0" in exposed and f"cmk_irq_masks_narrowed {narrowed:.1f}" in exposed
    refusals = logged(caplog.records, "irq_unmovable")
    assert [e["irq"] for e in refusals] == ["27"] and "27" not in json.loads((plugin_dir / RECORD_NAME).read_text())
    assert masks(irq_dir)["27"] == ALL
    kubelet.delete_pod("rt")
    kubelet.delete_pod("rt2")
    kubelet.wait_for(lambda: masks(irq_dir)["24"] == ALL, timeout=10, what="IRQ 24 given back")


class Irqbalance:
    """irqbalance's socket as its UI reaches it (``settings cpus LIST``); the real one runs in tests/node."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.commands: list[str] = []
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(str(directory / "irqbalance4242.sock"))
        self._server.listen()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            with conn:
                self.commands.append(conn.recv(4096).decode())

    def close(self) -> None:
        self._server.close()


def test_where_irqbalance_runs_it_is_told_the_held_cpus_and_no_mask_is_written(kubelet, run_daemon, irq_dir,
                                                                              tmp_path):
    irqbalance = Irqbalance(tmp_path / "irqbalance")
    try:
        run_daemon()
        wait_registered(kubelet, {EXCLUSIVE, SHARED, INFRA})
        held = hold_a_core(kubelet)
        kubelet.wait_for(lambda: f"settings cpus {format_cpu_list(held)}" in irqbalance.commands, timeout=10,
                         what="irqbalance told to ban the held core")
        assert masks(irq_dir) == {**IRQS, "default": ALL}
        kubelet.delete_pod("rt")
        kubelet.wait_for(lambda: irqbalance.commands[-1:] == ["settings cpus NULL"], timeout=10,
                         what="irqbalance's ban lifted")
    finally:
        irqbalance.close()
