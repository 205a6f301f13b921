"""`cmk describe` as a user runs it: a real process, its output, and one-line errors for bad input."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from deviceplugin.model.cpulist import parse_cpu_list
from tests.support.commands import cmk
from tests.support.topologies import FIXTURES, fixture_copy

XEON_D = ["--sysfs-root", str(FIXTURES / "cmk-xeon_d/sys"), "--procfs-root", str(FIXTURES / "cmk-xeon_d/proc")]


def test_describe_xeon_d_table_shows_the_cmk_plan():
    result = cmk("describe", *XEON_D, "--num-exclusive-cores", "3", "--num-shared-cores", "1")
    assert result.returncode == 0, result.stderr
    rows = {line.split()[0]: line for line in result.stdout.splitlines() if line.startswith("  ")}
    assert "cmk.intel.com/exclusive-cores" in rows["exclusive"]
    assert rows["exclusive"].endswith("{0,8} {1,9} {2,10}")
    assert rows["shared"].endswith("{3,11}")
    assert rows["infra"].endswith("4-7,12-15")
    assert "3 cores" in rows["exclusive"]
    assert "(not advertised: no CPUs)" in rows["exclusive-non-isolcpus"]
    assert rows["isolated"].split()[-1] == "0-3,8-11"


def test_describe_json_and_yaml_carry_the_same_facts():
    args = ["describe", *XEON_D, "--num-exclusive-cores", "3", "--num-shared-cores", "1"]
    as_json = json.loads(cmk(*args, "--output", "json").stdout)
    as_yaml = yaml.safe_load(cmk(*args, "-o", "yaml").stdout)
    assert as_json == as_yaml
    pools = {pool["pool"]: pool for pool in as_json["plan"]["pools"]}
    assert pools["exclusive"]["cores"] == ["0,8", "1,9", "2,10"]
    assert pools["exclusive"]["advertised"] == 3
    assert pools["shared"]["numa_nodes"] == {"0": {"cpus": "3,11", "cores": ["3,11"]}}
    assert pools["infra"]["cpus"] == "4-7,12-15"
    assert as_json["topology"]["isolated_cpus"] == "0-3,8-11"
    assert as_json["topology"]["sockets"] == 1 and as_json["topology"]["cores"] == 8


def test_describe_this_machine_runs():
    result = cmk("describe", "-o", "json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    online = Path("/sys/devices/system/cpu/online").read_text().strip()
    assert (data["topology"]["online_cpus"], data["topology"]["threads"]) == (online, len(parse_cpu_list(online)))
    assert sum(pool["cpus"] != "" for pool in data["plan"]["pools"]) >= 2, "infra and exclusive, at least"


def test_describe_multi_numa_rows_per_node(tmp_path):
    sysfs, procfs = fixture_copy("hwloc-memorysidecaches", tmp_path, isolcpus="0-15,40-55")
    result = cmk("describe", "--sysfs-root", str(sysfs), "--procfs-root", str(procfs),
                 "--num-exclusive-cores", "4", "--exclusive-mode", "spread", "-o", "json")
    pools = {pool["pool"]: pool for pool in json.loads(result.stdout)["plan"]["pools"]}
    assert pools["exclusive"]["numa_nodes"] == {
        "0": {"cpus": "0,40", "cores": ["0,40"]}, "1": {"cpus": "1,41", "cores": ["1,41"]},
        "2": {"cpus": "2,42", "cores": ["2,42"]}, "3": {"cpus": "3,43", "cores": ["3,43"]},
    }


def _unreadable_cmdline(tmp_path: Path) -> list[str]:
    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path)
    (procfs / "cmdline").unlink(missing_ok=True)
    (procfs / "cmdline").mkdir()  # root reads any file: a folder is what stays unreadable
    return ["--sysfs-root", str(sysfs), "--procfs-root", str(procfs)]


@pytest.mark.parametrize(("args", "status", "message"), [
    (["--num-exclusive-cores", "-1"], 2, "argument --num-exclusive-cores: must be 0 or more, got -1"),
    (["--num-shared-cores", "two"], 2, "argument --num-shared-cores: expected a whole number, got 'two'"),
    (["--excl-non-isolcpus", "99"], 1, "--excl-non-isolcpus names CPU 99, which does not exist (CPUs: 0-15)"),
    (["--excl-non-isolcpus", "4-"], 2, "argument --excl-non-isolcpus: malformed cpu list '4-'"),
    (["--num-exclusive-cores", "4", "--num-shared-cores", "1"], 1,
     "asked for 4 exclusive + 1 shared cores, but only 4 whole cores are isolated"),
    (["--exclusive-mode", "tight"], 2, "argument --exclusive-mode: invalid Mode value: 'tight'"),
    (["--output", "xml"], 2, "argument --output/-o: invalid choice: 'xml'"),
    (["--usage-window", "-1"], 2, "argument --usage-window: expected seconds from 0 to 60 in ASCII digits (e.g. 2 or 0.5), got '-1'"),
    (["--usage-window", "soon"], 2, "argument --usage-window: expected seconds from 0 to 60 in ASCII digits (e.g. 2 or 0.5), got 'soon'"),
])
def test_bad_flags_are_one_line_and_nonzero(args, status, message):
    result = cmk("describe", *XEON_D, *args)
    assert result.returncode == status
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_a_plan_error_names_the_config_key_when_the_value_came_from_the_file(tmp_path):
    """The plan names a setting; the edge says it as the user gave it: the file's key here, not a flag."""
    config = tmp_path / "config.yaml"
    config.write_text("excl-non-isolcpus: 99\n")
    result = cmk("describe", *XEON_D, "--config", str(config))
    assert result.returncode == 1
    assert result.stderr == (f"cmk describe: error: {config}: key 'excl-non-isolcpus' names CPU 99, which does not "
                             "exist (CPUs: 0-15)\n")


def test_missing_sysfs_root_is_one_line(tmp_path):
    result = cmk("describe", "--sysfs-root", str(tmp_path / "nope"))
    assert result.returncode == 1
    assert f"sysfs root {tmp_path / 'nope'} does not exist" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_unreadable_cmdline_is_one_line(tmp_path):
    result = cmk("describe", *_unreadable_cmdline(tmp_path))
    assert result.returncode == 1
    assert "cmdline" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_describe_on_a_dump_does_not_dial_this_hosts_kubelet():
    """Another machine's plan has nothing to do with this host's pod resources: no live view unless asked."""
    result = cmk("describe", *XEON_D, "-o", "json")
    live = json.loads(result.stdout)["live"]
    assert live["available"] is False and live["reason"].startswith(f"{FIXTURES / 'cmk-xeon_d/sys'} is a dump")
    table = cmk("describe", *XEON_D).stdout
    assert "(give --pod-resources-socket to read a kubelet anyway)" in table and "no socket at" not in table


def test_describe_on_a_dump_dials_the_socket_it_is_given(tmp_path):
    missing = tmp_path / "kubelet.sock"
    live = json.loads(cmk("describe", *XEON_D, "--pod-resources-socket", str(missing), "-o", "json").stdout)["live"]
    assert live == {"available": False, "socket": str(missing),
                    "reason": f"no socket at {missing} (is the kubelet running, and the directory mounted?)"}


def test_describe_usage_on_this_machine_covers_every_online_cpu_once():
    result = cmk("describe", "-o", "json", "--usage-window", "0.2")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    usage = data["usage"]
    assert usage["available"] and usage["window_seconds"] >= 0.2
    assert usage["holdings_known"] is (data["live"]["available"])
    covered = [cpu for pool in usage["pools"] for cpu in parse_cpu_list(pool["cpus"])]
    assert sorted(covered) == sorted(parse_cpu_list(data["topology"]["online_cpus"]))
    for pool in usage["pools"]:
        assert 0 <= pool["busy_cpus"] <= len(parse_cpu_list(pool["cpus"]))
        assert pool["local_interrupts_per_second"] > 0  # every online CPU takes timer interrupts
    table = cmk("describe", "--usage-window", "0.2").stdout
    # the header gives the window measured, which a loaded machine stretches past the one asked for
    window = re.search(r"Usage over ([0-9.]+) s \(procfs; busy in CPUs, rates per second\)", table)
    assert window is not None and float(window.group(1)) >= 0.2, table


def test_describe_without_procfs_counters_says_so_in_one_line_and_window_0_leaves_usage_out(tmp_path):
    procfs = tmp_path / "proc"  # this host's sysfs, a procfs with the kernel line but no counters
    procfs.mkdir()
    (procfs / "cmdline").write_bytes(Path("/proc/cmdline").read_bytes())
    roots = ["--procfs-root", str(procfs)]
    as_json = json.loads(cmk("describe", *roots, "-o", "json").stdout)
    reason = f"cannot read {procfs / 'stat'}: No such file or directory (is --procfs-root a procfs?)"
    assert as_json["usage"] == {"available": False, "reason": reason}
    assert f"usage unavailable: {reason}" in cmk("describe", *roots).stdout.splitlines()
    assert "usage" not in json.loads(cmk("describe", *roots, "-o", "json", "--usage-window", "0").stdout)


def test_describe_shows_the_config_section_and_generation_this_node_takes(tmp_path, monkeypatch):
    config = tmp_path / "config.yaml"
    config.write_text("default:\n  num-exclusive-cores: 1\nnodes:\n  - names: ['xeon-*']\n"
                      "    config: {num-exclusive-cores: 2}\n")
    monkeypatch.setenv("NODE_NAME", "xeon-3")  # as the DaemonSet's downward API sets it
    data = json.loads(cmk("describe", *XEON_D, "--config", str(config), "-o", "json").stdout)
    generation = data["config"]["generation"]
    assert data["config"] == {"file": str(config), "section": "nodes[0]", "generation": generation, "node": "xeon-3"}
    (exclusive,) = [pool for pool in data["plan"]["pools"] if pool["pool"] == "exclusive"]
    assert exclusive["advertised"] == 2
    table = cmk("describe", *XEON_D, "--config", str(config), "--node-name", "other").stdout
    assert f"Config {config}: section default (node other), generation " in table
    assert generation not in table


def test_describe_on_a_dump_samples_no_counters_neither_this_hosts_nor_the_dumps_frozen_ones():
    """README's first showcase: a dump's usage is one plain line, not a missing file nor this host's counters."""
    sysfs = FIXTURES / "cmk-xeon_d/sys"
    reason = f"{sysfs} is a dump, not this host (CPU usage is sampled on a live host only)"
    for procfs in ([], ["--procfs-root", str(FIXTURES / "cmk-xeon_d/proc")]):
        data = json.loads(cmk("describe", "--sysfs-root", str(sysfs), *procfs, "-o", "json").stdout)
        assert data["usage"] == {"available": False, "reason": reason}
