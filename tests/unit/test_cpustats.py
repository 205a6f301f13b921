"""Per-CPU counters from procfs: parsed from hand-made files with known values, from this machine's /proc,
and turned into rates, leaks and the describe usage section."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from deviceplugin.host.procstats import read_sample, sample_window
from deviceplugin.host.sysfs import discover
from deviceplugin.model.cpustats import (
    DEVICE,
    LOCAL,
    UNKNOWN_PLACE,
    CpuTimes,
    Place,
    Sample,
    StatsError,
    held_cpus,
    interrupt_kinds,
    parse_stat,
    place_groups,
    place_kind_totals,
    place_totals,
    places,
    pools_of,
    rates,
    softirq_kinds,
    unheld_busy,
)
from deviceplugin.model.devices import device_tree
from deviceplugin.model.plan import PlanOptions, plan_pools
from deviceplugin.view.usage import render_usage, usage_data
from tests.support.procfs_counters import Known, write_counters
from tests.support.topologies import fixture_copy

# A kernel 6.x /proc/interrupts with CPU 1 offline (its column is absent), arch rows and the node-wide ERR/MIS.
INTERRUPTS = """\
           CPU0       CPU2       CPU3
  0:         44          0          0   IO-APIC   2-edge      timer
 36:          5     107276          1   PCI-MSIX-0000:00:02.0   1-edge      virtio1-req.0
NMI:          0          0          0   Non-maskable interrupts
LOC:      91829      96234         10   Local timer interrupts
CAL:          3          4          5   Function call interrupts
ERR:          2
MIS:          0
"""


def test_stat_counts_busy_as_user_nice_system_irq_softirq_and_skips_the_total_line():
    text = ("cpu  999 999 999 999 999 999 999 999 999 999\n"
            "cpu0 100 10 50 800 40 5 3 7 20 0\n"  # guest (20) is already inside user; steal (7) and iowait are not busy
            "cpu7 1 2 3 4\n"  # a kernel before 2.6 wrote four columns
            "intr 1 2 3\nctxt 5\n")
    assert parse_stat(text, ticks_per_second=100) == {
        0: CpuTimes(busy=(100 + 10 + 50 + 5 + 3) / 100, total=(100 + 10 + 50 + 5 + 3 + 800 + 40) / 100),
        7: CpuTimes(busy=0.06, total=0.10),
    }


@pytest.mark.parametrize(("text", "message"), [
    ("cpu0 1 2 x 4\n", "line 1: 'cpu0 1 2 x 4' is not 'cpuN' and tick counts"),
    ("cpu\ncpuX 1 2 3 4\n", "line 2: 'cpuX 1 2 3 4' is not 'cpuN' and tick counts"),
    ("cpu3 1 2\n", "line 1: cpu3 has 2 counters, the kernel writes at least 4"),
])
def test_a_malformed_stat_line_names_its_line(text, message):
    with pytest.raises(StatsError) as err:
        parse_stat(text, 100)
    assert str(err.value) == message


def test_interrupts_columns_follow_the_header_and_node_wide_rows_are_left_out():
    assert interrupt_kinds(INTERRUPTS) == {0: {DEVICE: 49, LOCAL: 91832}, 2: {DEVICE: 107276, LOCAL: 96238},
                                           3: {DEVICE: 1, LOCAL: 15}}


_FIELD = st.one_of(st.just("0"), st.just("0"), st.just("0"), st.just("00"), st.integers(0, 2**32 - 1).map(str))
_ROW = st.tuples(st.sampled_from(["7", "36", "LOC", "NMI"]), st.sampled_from(["", "   IO-APIC   2-edge      timer", " 7"]))


@given(st.integers(1, 100).flatmap(lambda cpus: st.lists(st.tuples(_ROW, st.lists(_FIELD, min_size=cpus, max_size=cpus)),
                                                          min_size=1, max_size=6)))
def test_a_table_sums_as_int_on_every_field_whatever_its_zeros(rows):
    # zeros are counted, not converted: the sums of int() on each field, for rows of zeros, sparse rows (a few
    # chunks hold counts) and dense ones, as wide as 100 CPUs
    cpus = len(rows[0][1])
    text = " " * 11 + "".join(f"CPU{cpu:<8}" for cpu in range(cpus)) + "\n" + "".join(
        f"{name:>3}:" + "".join(f" {field:>10}" for field in fields) + tail + "\n" for (name, tail), fields in rows)
    expected = {cpu: {DEVICE: 0, LOCAL: 0} for cpu in range(cpus)}
    for (name, _), fields in rows:
        for cpu, field in enumerate(fields):
            expected[cpu][DEVICE if name.isdigit() else LOCAL] += int(field)
    assert interrupt_kinds(text) == expected


def test_a_description_word_where_a_count_would_be_leaves_the_row_out():
    table = "  CPU0 CPU1\n 5:  3 IO-APIC\n 6: 1 2\n 7: 4 5 6\nERR: 3\n"
    assert interrupt_kinds(table) == {0: {DEVICE: 1 + 4, LOCAL: 0}, 1: {DEVICE: 2 + 5, LOCAL: 0}}


def test_softirqs_from_devices_and_drivers_are_device_the_rest_local():
    text = ("                    CPU0       CPU1\n"
            "          HI:          1          0\n      TIMER:      17583      15559\n"
            "      NET_TX:          8          6\n      NET_RX:      12504      14915\n"
            "       BLOCK:          0     107274\n    IRQ_POLL:          0          0\n"
            "     TASKLET:          2          1\n       SCHED:      34451      33950\n"
            "     HRTIMER:          0          0\n         RCU:      70411      61781\n"
            "    NEW_TYPE:          5          5\n")
    assert softirq_kinds(text) == {0: {DEVICE: 1 + 8 + 12504 + 2, LOCAL: 17583 + 34451 + 70411 + 5},
                                   1: {DEVICE: 6 + 14915 + 107274 + 1, LOCAL: 15559 + 33950 + 61781 + 5}}


@pytest.mark.parametrize(("text", "message"), [
    ("CPU0 CPUx\n 1: 2 3\n", "line 1: the header is not 'CPU0 CPU1 ...'"),
    ("  CPU0\n 1: 2\n garbage\n", "line 3: ' garbage' has no 'NAME:'"),
])
def test_a_malformed_table_names_its_line(text, message):
    with pytest.raises(StatsError) as err:
        interrupt_kinds(text)
    assert str(err.value) == message


def test_known_counters_read_back_from_a_procfs_copy(tmp_path):
    write_counters(tmp_path, {0: Known(user=300, system=100, idle=600, iowait=50, steal=9, guest=100,
                                       device_irqs=12, timer_irqs=1000, net_rx=7),
                              3: Known(user=1, idle=99)})
    sample = read_sample(tmp_path, ticks_per_second=100)
    assert sample.times == {0: CpuTimes(4.0, 10.5), 3: CpuTimes(0.01, 1.0)}
    assert sample.interrupts == {0: {DEVICE: 12, LOCAL: 1000}, 3: {DEVICE: 0, LOCAL: 0}}
    assert sample.softirqs == {0: {DEVICE: 7, LOCAL: 0}, 3: {DEVICE: 0, LOCAL: 0}}


def test_reader_errors_name_the_file(tmp_path):
    with pytest.raises(StatsError) as err:
        read_sample(tmp_path)
    assert str(err.value) == f"cannot read {tmp_path / 'stat'}: No such file or directory (is --procfs-root a procfs?)"
    write_counters(tmp_path, {0: Known()})
    (tmp_path / "softirqs").write_text("CPU0\nHI 0\n")
    with pytest.raises(StatsError) as err:
        read_sample(tmp_path)
    assert str(err.value) == f"{tmp_path / 'softirqs'}: line 2: 'HI 0' has no 'NAME:'"
    (tmp_path / "stat").write_text("intr 0\n")
    with pytest.raises(StatsError, match="lists no cpuN line"):
        read_sample(tmp_path)


def test_this_machines_proc_lists_every_online_cpu_and_only_counts_up():
    online = discover(Path("/sys"), Path("/proc")).online
    before, after, seconds = sample_window(Path("/proc"), 0.2)
    assert seconds >= 0.2
    for sample in (before, after):
        assert set(sample.times) == online
        assert set(sample.interrupts) == online and set(sample.softirqs) == online
        assert all(0 < t.busy <= t.total for t in sample.times.values())
        assert all(set(kinds) == {DEVICE, LOCAL} for kinds in sample.interrupts.values())
        assert all(set(kinds) == {DEVICE, LOCAL} for kinds in sample.softirqs.values())
        assert all(kinds[LOCAL] > 0 for kinds in sample.softirqs.values())  # every online CPU takes timer softirqs
    for cpu in online:
        assert after.times[cpu].busy >= before.times[cpu].busy and after.times[cpu].total > before.times[cpu].total
        assert all(after.interrupts[cpu][k] >= before.interrupts[cpu][k] for k in (DEVICE, LOCAL))
        assert all(after.softirqs[cpu][k] >= before.softirqs[cpu][k] for k in (DEVICE, LOCAL))
    per_cpu = rates(before, after, seconds)
    assert set(per_cpu) == online and all(0 <= r.busy <= 1 for r in per_cpu.values())


def sample(**busy_total_irqs: tuple[float, float, int, int, int]) -> Sample:
    """cpuN=(busy seconds, total seconds, device IRQs, local IRQs, net_rx)."""
    cpus = {int(name[3:]): v for name, v in busy_total_irqs.items()}
    return Sample({c: CpuTimes(v[0], v[1]) for c, v in cpus.items()},
                  {c: {DEVICE: v[2], LOCAL: v[3]} for c, v in cpus.items()},
                  {c: {DEVICE: v[4], LOCAL: 0} for c, v in cpus.items()})


def test_rates_are_busy_shares_of_cpu_time_and_counts_per_second():
    before = sample(cpu0=(10, 100, 5, 100, 0), cpu1=(50, 100, 0, 0, 3), cpu2=(1, 1, 0, 0, 0))
    after = sample(cpu0=(10.5, 102, 25, 300, 10), cpu1=(51, 101, 0, 100, 2), cpu3=(9, 9, 9, 9, 9))
    got = rates(before, after, 2.0)
    assert set(got) == {0, 1}  # CPU 2 went offline, CPU 3 came online: no rate for either
    assert got[0].busy == 0.25 and got[0].interrupts == {DEVICE: 10.0, LOCAL: 100.0} and got[0].softirqs == {DEVICE: 5.0, LOCAL: 0.0}
    # A counter that went down counts from zero, as Prometheus' rate() does.
    assert got[1].busy == 1.0 and got[1].interrupts == {DEVICE: 0.0, LOCAL: 50.0} and got[1].softirqs == {DEVICE: 1.0, LOCAL: 0.0}


def test_unheld_busy_counts_only_cpus_free_at_both_samples():
    before = sample(cpu0=(10, 100, 0, 0, 0), cpu1=(10, 100, 0, 0, 0), cpu2=(10, 100, 0, 0, 0), cpu4=(1, 1, 0, 0, 0))
    after = sample(cpu0=(12, 103, 0, 0, 0), cpu1=(13, 103, 0, 0, 0), cpu2=(14, 103, 0, 0, 0), cpu4=(3, 3, 0, 0, 0))
    got = unheld_busy(before, after, [0, 1, 2, 3], held_before=frozenset({1}), held_after=frozenset({2}))
    assert got == {0: 2.0}  # 1 held before, 2 held after, 3 not online, 4 not exclusive


XEON_D_PLAN = PlanOptions(num_exclusive_cores=3, num_shared_cores=1)


def xeon_d_places(tmp_path: Path) -> dict[int, Place]:
    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path)  # isolcpus=0-3,8-11, 8 cores of 2 threads
    topology = discover(sysfs, procfs)
    return places(topology, plan_pools(topology, XEON_D_PLAN))


def test_places_on_the_xeon_d_dump_follow_the_plan_and_isolcpus(tmp_path):
    place = xeon_d_places(tmp_path)
    assert {p: sorted(cpus) for p, cpus in pools_of(place).items()} == {
        "exclusive": [0, 1, 2, 8, 9, 10], "shared": [3, 11], "infra": [4, 5, 6, 7, 12, 13, 14, 15]}
    assert {c for c, p in place.items() if p.isolated} == {0, 1, 2, 3, 8, 9, 10, 11}
    assert {p.numa_node for p in place.values()} == {"0"}
    assert place[0].exclusive and not place[3].exclusive


def test_held_cpus_are_a_held_cores_threads_and_a_held_slots_whole_pool(tmp_path):
    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path)
    tree = device_tree(plan_pools(discover(sysfs, procfs), XEON_D_PLAN), discover(sysfs, procfs).online)
    held = {"cmk.intel.com/exclusive-cores": ["core-n0-p0-c1", "unknown-id"], "cmk.intel.com/shared": ["shared-003"]}
    assert held_cpus(tree, lambda resource: held.get(resource, [])) == {1, 9, 3, 11}
    assert held_cpus(tree, lambda resource: []) == frozenset()


def test_usage_on_the_xeon_d_dump_with_known_counters(tmp_path):
    place = xeon_d_places(tmp_path)
    idle = {c: Known(user=100, idle=900) for c in range(16)}
    before_dir, after_dir = tmp_path / "before", tmp_path / "after"
    write_counters(before_dir, idle)
    write_counters(after_dir, {**idle,
                               0: Known(user=150, idle=950, device_irqs=40),  # held exclusive core {0,8}
                               1: Known(user=180, idle=920),  # unheld exclusive CPU: 80 % busy, a leak
                               3: Known(user=100, idle=1000, device_irqs=400, net_rx=20),  # shared, isolated
                               4: Known(user=200, idle=900, device_irqs=1000)})  # infra: interrupts are fine here
    before, after = read_sample(before_dir, 100), read_sample(after_dir, 100)
    usage = usage_data(place, before, after, 2.0, held=frozenset({0, 8, 3, 11}))
    pools = {p["pool"]: p for p in usage["pools"]}
    assert pools["exclusive"] == {
        "pool": "exclusive", "cpus": "0-2,8-10", "busy_cpus": 1.3, "device_interrupts_per_second": 20.0,
        "local_interrupts_per_second": 0.0, "device_softirqs_per_second": 0.0, "local_softirqs_per_second": 0.0,
        "held_cpus": "0,8", "unheld_busy_cpus": 0.8}
    assert pools["shared"]["device_interrupts_per_second"] == 200.0
    assert pools["shared"]["device_softirqs_per_second"] == 10.0
    assert pools["shared"]["unheld_busy_cpus"] is None  # a slot pool cannot leak: its CPUs are shared by design
    assert pools["infra"]["busy_cpus"] == 1.0 and pools["infra"]["held_cpus"] == ""
    assert usage["leaks"] == [{"cpu": 1, "pool": "exclusive", "busy_percent": 80.0}]
    assert usage["interrupted"] == [  # exclusive's 20/s is under the alert's 100/s: not listed, as not alerted
        {"cpu": 3, "pool": "shared", "isolated": True, "device_interrupts_per_second": 200.0}]
    lines = render_usage(usage)
    assert lines[0] == "Usage over 2.0 s (procfs; busy in CPUs, rates per second)"
    assert lines[1].split() == ["POOL", "CPUS", "BUSY", "DEVICE", "IRQS", "LOCAL", "IRQS", "DEVICE", "SOFTIRQS",
                                "LOCAL", "SOFTIRQS", "HELD", "UNHELD", "BUSY"]
    assert lines[2].split() == ["exclusive", "0-2,8-10", "1.30", "20", "0", "0", "0", "0,8", "0.80"]
    assert lines[3].split() == ["shared", "3,11", "0.00", "200", "0", "10", "0", "3,11", "-"]
    assert "  leak: CPU 1 (exclusive) is 80 % busy and no container holds it" in lines
    assert ("  interrupts: 200 device IRQs/s on CPU 3 (shared, isolated; its place is over 100/s, as the alert): "
            "steer them away with /proc/irq/*/smp_affinity_list (on held cores: cmk device-plugin --irq-steering)") in lines
    assert not any("on CPU 0 " in line for line in lines)

    unknown = usage_data(place, before, after, 2.0, held=None)
    assert unknown["leaks"] == [] and {p["pool"]: p["unheld_busy_cpus"] for p in unknown["pools"]} == dict.fromkeys(
        ["exclusive", "shared", "infra"])
    assert render_usage(unknown)[-1] == "  note: the kubelet's pod resources could not be read: leaks unknown"


# --- per-place sums (the default series) ------------------------------------------------------

EXCL0, EXCL1, INFRA0 = Place("exclusive", "0", True), Place("exclusive", "1", True), Place("infra", "0", False)
WHERE = {0: INFRA0, 1: EXCL0, 2: EXCL0, 3: EXCL1}


def test_place_groups_list_each_places_cpus_in_label_order():
    assert place_groups(WHERE) == {EXCL0: (1, 2), EXCL1: (3,), INFRA0: (0,)}


def test_place_totals_sum_per_place_leave_out_places_without_values_and_keep_unknown_cpus():
    groups = place_groups(WHERE)
    assert place_totals(groups, {0: 1.5, 1: 2.0, 2: 0.5}) == {EXCL0: 2.5, INFRA0: 1.5}
    assert place_totals(groups, {1: 1.0, 9: 4.0}) == {EXCL0: 1.0, UNKNOWN_PLACE: 4.0}


def test_place_kind_totals_sum_each_kind_per_place():
    counts = {0: {DEVICE: 1000, LOCAL: 5}, 1: {DEVICE: 7, LOCAL: 1}, 2: {DEVICE: 3, LOCAL: 1}}
    assert place_kind_totals(place_groups(WHERE), counts) == {
        (EXCL0, DEVICE): 10, (EXCL0, LOCAL): 2, (INFRA0, DEVICE): 1000, (INFRA0, LOCAL): 5}


def test_a_masked_interrupts_table_leaves_only_its_counters_out(tmp_path):
    """Kubernetes 1.36 and containerd 2.x bind /dev/null over /proc/interrupts in every container (the
    DaemonSet's daemon too, seen on the cluster tier): busy time and leaks must survive it."""
    place = xeon_d_places(tmp_path)
    before_dir, after_dir = tmp_path / "before", tmp_path / "after"
    write_counters(before_dir, {c: Known(user=100, idle=900) for c in range(16)})
    write_counters(after_dir, {c: Known(user=100, idle=1000, device_irqs=400) for c in range(16)}
                   | {1: Known(user=180, idle=920, device_irqs=400)})
    for root in (before_dir, after_dir):
        (root / "interrupts").unlink()
        (root / "interrupts").symlink_to("/dev/null")  # what the runtime's mask looks like: a character device
    before, after = read_sample(before_dir, 100), read_sample(after_dir, 100)
    assert (after.masked, after.interrupts, after.times[1]) == (frozenset({"interrupts"}), {}, CpuTimes(1.8, 11.0))
    usage = usage_data(place, before, after, 2.0, held=frozenset({0, 8, 3, 11}))
    assert usage["masked"] == ["interrupts"] and usage["interrupted"] == []
    assert usage["leaks"] == [{"cpu": 1, "pool": "exclusive", "busy_percent": 80.0}]
    lines = render_usage(usage)
    assert lines[2].split() == ["exclusive", "0-2,8-10", "0.80", "?", "?", "0", "0", "0,8", "0.80"]
    assert lines[-1] == ("  note: /proc/interrupts is masked by the container runtime (Kubernetes' default"
                         " maskedPaths): interrupts unknown")
