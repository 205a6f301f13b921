"""The per-CPU isolation metrics against the real daemon, the kubelet stand-in's pod resources over a real
socket, procfs copies with known counters, this machine's /proc, and promtool's exposition linter."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import generate_latest

from deviceplugin.host.sysfs import discover
from deviceplugin.model.cpustats import places
from deviceplugin.observe.cpumetrics import CpuCollector
from deviceplugin.observe.metrics import Metrics, PoolCollector
from deviceplugin.standin import Kubelet
from tests.support.daemon import (
    EXCLUSIVE,
    INFRA,
    SHARED,
    cpus_of,
    daemon_process,
    three_pool_pod,
    wait_registered,
)
from tests.support.metrics import Logs, Samples, exposition, lint, parse, scrape
from tests.support.procfs_counters import Known, write_counters
from tests.support.topologies import fixture_copy


def per_cpu(samples: Samples, name: str, **labels: str) -> dict[int, float]:
    """``name``'s value per CPU among the series carrying ``labels``."""
    out = {}
    for (sample, series), value in samples.items():
        got = dict(series)
        if sample == name and labels.items() <= got.items():
            out[int(got["cpu"])] = out.get(int(got["cpu"]), 0.0) + value
    return out


IDLE = {cpu: Known(user=100, system=50, idle=1000, timer_irqs=500) for cpu in range(16)}


def test_counters_labels_holdings_and_leaks_follow_procfs_and_the_kubelet(kubelet: Kubelet, start_daemon,
                                                                          tmp_path):
    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path)  # isolcpus=0-3,8-11, 8 cores of 2 threads, one node
    write_counters(procfs, IDLE)
    daemon = start_daemon(sysfs, procfs, num_exclusive_cores=3, num_shared_cores=1)
    wait_registered(kubelet, {EXCLUSIVE, SHARED, INFRA})
    cpu_stats = CpuCollector(procfs_root=procfs, places=places(daemon.topology, daemon.plan), per_cpu=True)
    collector = PoolCollector(tree=lambda: daemon.tree, plan=daemon.plan, registered=daemon.registered_resources,
                              pod_resources=kubelet.pod_resources_socket, cpu_stats=cpu_stats)
    registry = Metrics(collector, daemon.tree).registry

    text = generate_latest(registry).decode()
    lint(text)
    samples = parse(text)
    assert samples[("cmk_cpu_stats_up", frozenset())] == 1
    key = ("cmk_cpu_busy_seconds_total", frozenset({"cpu": "1", "pool": "exclusive", "numa_node": "0",
                                                    "isolated": "true"}.items()))
    assert samples[key] == 1.5  # (user 100 + system 50) ticks at USER_HZ 100
    assert set(per_cpu(samples, "cmk_cpu_busy_seconds_total", pool="exclusive", isolated="true")) == {
        0, 1, 2, 8, 9, 10}
    assert set(per_cpu(samples, "cmk_cpu_busy_seconds_total", pool="shared", isolated="true")) == {3, 11}
    assert set(per_cpu(samples, "cmk_cpu_busy_seconds_total", pool="infra", isolated="false")) == {
        4, 5, 6, 7, 12, 13, 14, 15}
    assert per_cpu(samples, "cmk_cpu_interrupts_total", kind="local") == dict.fromkeys(range(16), 500)
    assert per_cpu(samples, "cmk_cpu_held") == dict.fromkeys(range(16), 0)
    assert per_cpu(samples, "cmk_cpu_unheld_busy_seconds_total") == dict.fromkeys([0, 1, 2, 8, 9, 10], 0)

    pod = kubelet.admit(three_pool_pod("demo", exclusive=2))
    held = {cpu for i in pod.container("dataplane").device_ids[EXCLUSIVE] for cpu in cpus_of(i, sysfs, procfs)}
    (free,) = {0, 1, 2} - held  # the exclusive core no container holds, by its first thread
    assert per_cpu(parse(generate_latest(registry).decode()), "cmk_cpu_held") == {
        cpu: 1 if cpu in held | {3, 11} | set(range(4, 8)) | set(range(12, 16)) else 0 for cpu in range(16)}

    # Every CPU runs 2 s more; the free exclusive core's first thread 7 s and takes device interrupts.
    write_counters(procfs, {**{c: Known(user=300, system=50, idle=1000) for c in range(16)},
                            free: Known(user=800, system=50, idle=1000, device_irqs=4000, net_rx=30)})
    samples = parse(generate_latest(registry).decode())
    assert per_cpu(samples, "cmk_cpu_unheld_busy_seconds_total") == {
        cpu: 7.0 if cpu == free else 2.0 if cpu in {0, 1, 2, 8, 9, 10} - held else 0.0
        for cpu in [0, 1, 2, 8, 9, 10]}
    assert per_cpu(samples, "cmk_cpu_interrupts_total", kind="device")[free] == 4000
    assert per_cpu(samples, "cmk_cpu_softirqs_total", kind="device")[free] == 30

    kubelet.stop()  # holdings unknown: no held series, and this interval is not counted as a leak
    write_counters(procfs, {c: Known(user=900, system=50, idle=1000) for c in range(16)})
    samples = parse(generate_latest(registry).decode())
    assert samples[("cmk_pod_resources_up", frozenset())] == 0
    assert per_cpu(samples, "cmk_cpu_held") == {}
    assert per_cpu(samples, "cmk_cpu_unheld_busy_seconds_total")[free] == 7.0

    (procfs / "interrupts").unlink()  # procfs unreadable: CPU series left out, not 0
    samples = parse(generate_latest(registry).decode())
    assert samples[("cmk_cpu_stats_up", frozenset())] == 0
    assert per_cpu(samples, "cmk_cpu_busy_seconds_total") == {}
    assert samples[("cmk_pool_cpus", frozenset({"pool": "exclusive", "numa_node": "0"}.items()))] == 6


def per_place(samples: Samples, name: str, **labels: str) -> dict[tuple[str, str, str], float]:
    """``name``'s value per (pool, numa_node, isolated) among the series carrying ``labels``."""
    out = {}
    for (sample, series), value in samples.items():
        got = dict(series)
        if sample == name and labels.items() <= got.items():
            key = (got["pool"], got["numa_node"], got["isolated"])
            out[key] = out.get(key, 0.0) + value
    return out


def test_by_default_the_series_are_per_pool_and_cmk_cpu_info_names_each_cpus_place(kubelet: Kubelet,
                                                                                  start_daemon,
                                                                                  tmp_path):
    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path)  # isolcpus=0-3,8-11, 8 cores of 2 threads, one node
    write_counters(procfs, IDLE)
    daemon = start_daemon(sysfs, procfs, num_exclusive_cores=3, num_shared_cores=1)
    wait_registered(kubelet, {EXCLUSIVE, SHARED, INFRA})
    cpu_stats = CpuCollector(procfs_root=procfs, places=places(daemon.topology, daemon.plan))
    collector = PoolCollector(tree=lambda: daemon.tree, plan=daemon.plan, registered=daemon.registered_resources,
                              pod_resources=kubelet.pod_resources_socket, cpu_stats=cpu_stats)
    metrics = Metrics(collector, daemon.tree)

    text = metrics.render().decode()
    lint(text)
    samples = parse(text)
    assert not [name for name, _ in samples if name.startswith("cmk_cpu_") and name not in (
        "cmk_cpu_info", "cmk_cpu_stats_up")], "no per-CPU counters unless asked for"
    exclusive, shared, infra = ("exclusive", "0", "true"), ("shared", "0", "true"), ("infra", "0", "false")
    assert per_cpu(samples, "cmk_cpu_info") == dict.fromkeys(range(16), 1)
    assert set(per_cpu(samples, "cmk_cpu_info", pool="exclusive", isolated="true")) == {0, 1, 2, 8, 9, 10}
    assert set(per_cpu(samples, "cmk_cpu_info", pool="infra", isolated="false")) == set(range(4, 8)) | set(
        range(12, 16))
    assert per_place(samples, "cmk_pool_busy_seconds_total") == {exclusive: 6 * 1.5, shared: 2 * 1.5,
                                                                 infra: 8 * 1.5}
    assert per_place(samples, "cmk_pool_interrupts_total", kind="local") == {exclusive: 3000, shared: 1000,
                                                                             infra: 4000}
    assert per_place(samples, "cmk_pool_unheld_busy_seconds_total") == {exclusive: 0}
    assert per_place(samples, "cmk_pool_held_cpus") == {exclusive: 0, shared: 0, infra: 0}

    pod = kubelet.admit(three_pool_pod("demo", exclusive=2))
    held = {cpu for i in pod.container("dataplane").device_ids[EXCLUSIVE] for cpu in cpus_of(i, sysfs, procfs)}
    assert per_place(parse(metrics.render().decode()), "cmk_pool_held_cpus") == {exclusive: len(held), shared: 2,
                                                                                   infra: 8}
    # Every CPU runs 2 s more; the free exclusive core's first thread 7 s and takes device interrupts.
    (free,) = {0, 1, 2} - held
    write_counters(procfs, {**{c: Known(user=300, system=50, idle=1000) for c in range(16)},
                            free: Known(user=800, system=50, idle=1000, device_irqs=4000, net_rx=30)})
    samples = parse(metrics.render().decode())
    assert per_place(samples, "cmk_pool_unheld_busy_seconds_total") == {exclusive: 7.0 + 2.0 * (6 - len(held) - 1)}
    assert per_place(samples, "cmk_pool_interrupts_total", kind="device")[exclusive] == 4000
    assert per_place(samples, "cmk_pool_softirqs_total", kind="device")[exclusive] == 30

    # CPU 15 goes offline: the kernel leaves it out of procfs, its pool's counter keeps its last value.
    write_counters(procfs, {c: Known(user=300, system=50, idle=1000) for c in range(15)})
    assert per_place(parse(metrics.render().decode()), "cmk_pool_busy_seconds_total")[infra] == 8 * 3.5


def test_the_daemon_on_this_machine_exposes_every_online_cpu_and_promtool_accepts_it(kubelet, plugin_dir):
    online = discover(Path("/sys"), Path("/proc")).online
    process = daemon_process(plugin_dir, Path("/sys"), Path("/proc"), "--metrics-address", "127.0.0.1:0",
                             "--log-format", "json", "--pod-resources-socket", str(kubelet.pod_resources_socket),
                             "--per-cpu-metrics")
    logs = Logs(process)
    try:
        address = logs.wait_for("metrics_serving")["address"]
        lint(exposition(address))
        samples = scrape(address)
        assert samples[("cmk_cpu_stats_up", frozenset())] == 1
        assert set(per_cpu(samples, "cmk_cpu_info")) >= online
        assert set(per_cpu(samples, "cmk_cpu_busy_seconds_total")) == online
        assert set(per_cpu(samples, "cmk_cpu_interrupts_total", kind="local")) == online
        assert set(per_cpu(samples, "cmk_cpu_held")) == online
        assert per_place(samples, "cmk_pool_busy_seconds_total")
    finally:
        process.terminate()
        process.wait(timeout=20)
        logs.join()
    assert process.returncode == 0
