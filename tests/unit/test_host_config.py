"""`cmk host-config`: the node settings it prints serve exactly the plan `cmk describe` shows once applied.

The agreement tests run both commands as real processes on real machine dumps: host-config on a
copy with nothing isolated, then describe on a copy booted with host-config's own kernel line
(``cpu/isolated`` and ``/proc/cmdline`` written from it), with the same pool flags.
"""

from __future__ import annotations

import itertools
import json
import shlex
import subprocess
from pathlib import Path

import pytest

from deviceplugin.errors import CmkError
from deviceplugin.host.sysfs import discover
from deviceplugin.model.cpulist import parse_cpu_list
from deviceplugin.model.hostsettings import (
    HostOptions,
    NodeCgroups,
    host_config,
    host_config_data,
    host_config_disagreement,
    render_text,
)
from deviceplugin.model.node import plan_node
from deviceplugin.model.plan import PlanOptions, Pool
from deviceplugin.model.topology import build_topology
from tests.support.commands import ROOT, cmk
from tests.support.topologies import fixture_copy

# 8 cores x 2 threads, core i = {i, i+8}
SMT8 = [(i, i + 8) for i in range(8)]


def kernel_arg(args: list[str], name: str) -> frozenset[int] | None:
    values = [arg.split("=", 1)[1] for arg in args if arg.startswith(name + "=")]
    assert len(values) <= 1, args
    return parse_cpu_list(values[0]) if values else None


def dropin(config_data: dict, path_part: str) -> str:
    (content,) = [d["content"] for d in config_data["systemd_dropins"] if path_part in d["path"]]
    return content


def test_isolates_exclusive_and_shared_of_the_plan_made_without_isolation():
    topology = build_topology(SMT8, isolated=[6, 14, 7, 15])  # booted with other cores isolated
    config = host_config(topology, PlanOptions(num_exclusive_cores=3, num_shared_cores=2))
    assert config.plan.cpus(Pool.EXCLUSIVE) == {1, 2, 3, 9, 10, 11}
    assert config.plan.cpus(Pool.SHARED) == {4, 5, 12, 13}
    assert config.kernel_args == ("isolcpus=1-5,9-13",)
    assert config.infra == {0, 6, 7, 8, 14, 15}
    assert config.reboot_needed


def test_the_housekeeping_core_is_never_isolated_even_with_defaults():
    config = host_config(build_topology(SMT8), PlanOptions())
    isolated = kernel_arg(list(config.kernel_args), "isolcpus")
    assert isolated == {1, 2, 3, 4, 5, 9, 10, 11, 12, 13}  # CMK's defaults: 4 exclusive + 1 shared
    assert not isolated & {0, 8}


def test_nohz_full_rcu_nocbs_and_irqaffinity_only_when_asked():
    topology = build_topology(SMT8)
    plain = host_config(topology, PlanOptions(num_exclusive_cores=2, num_shared_cores=1))
    assert [arg.split("=")[0] for arg in plain.kernel_args] == ["isolcpus"]
    full = host_config(topology, PlanOptions(num_exclusive_cores=2, num_shared_cores=1),
                       HostOptions(nohz_full=True, rcu_nocbs=True, irqaffinity=True))
    args = list(full.kernel_args)
    assert kernel_arg(args, "nohz_full") == kernel_arg(args, "rcu_nocbs") == kernel_arg(args, "isolcpus")
    assert kernel_arg(args, "irqaffinity") == full.infra == {0, 4, 5, 6, 7, 8, 12, 13, 14, 15}


def test_nothing_to_isolate_prints_no_isolcpus():
    config = host_config(build_topology(SMT8), PlanOptions(num_exclusive_cores=0, num_shared_cores=0))
    assert config.kernel_args == ()
    assert any("nothing to isolate" in note for note in config.notes)
    assert not config.reboot_needed


def test_kubelet_reserves_the_first_infra_core_and_policy_none():
    config = host_config(build_topology(SMT8), PlanOptions(num_exclusive_cores=2, num_shared_cores=1))
    assert config.kubelet["cpuManagerPolicy"] == "none"
    assert config.kubelet["kind"] == "KubeletConfiguration"
    assert parse_cpu_list(config.kubelet["reservedSystemCPUs"]) == {0, 8}
    assert host_config_data(config)["kubelet_allocatable_cpu"] == 14
    two = host_config(build_topology(SMT8), PlanOptions(num_exclusive_cores=2, num_shared_cores=1),
                      HostOptions(reserved_cores=2))
    assert parse_cpu_list(two.kubelet["reservedSystemCPUs"]) == {0, 4, 8, 12}


def test_the_second_walls_seccomp_default_and_an_optional_user_namespace_sysctl():
    """RuntimeDefault for pods that name no profile; no user namespaces only as an option (it breaks some pods)."""
    config = host_config(build_topology(SMT8), PlanOptions(num_exclusive_cores=2, num_shared_cores=1))
    assert config.kubelet["seccompDefault"] is True
    (sysctl,) = host_config_data(config)["sysctls"]
    assert sysctl["path"].startswith("/etc/sysctl.d/") and "user.max_user_namespaces = 0\n" in sysctl["content"]
    text = render_text(config)
    assert "seccompDefault: true" in text
    assert text.index("## Optional: no user namespaces") < text.index("user.max_user_namespaces = 0")


def test_impossible_reservation_is_an_error_naming_the_fix_and_the_setting_not_a_flag():
    with pytest.raises(CmkError, match="^reserved-cores 6 exceeds the 5 infra cores") as raised:
        host_config(build_topology(SMT8), PlanOptions(num_exclusive_cores=2, num_shared_cores=1),
                    HostOptions(reserved_cores=6))
    assert raised.value.named(lambda dest: "--" + dest.replace("_", "-")).startswith("--reserved-cores 6 exceeds")


def test_dropins_keep_host_services_on_infra_only():
    options = PlanOptions(num_exclusive_cores=2, num_shared_cores=1, excl_non_isolcpus=frozenset({7}))
    config = host_config(build_topology(SMT8), options, HostOptions(runtimes=("crio",)))
    data = host_config_data(config)
    assert data["pools"]["exclusive-non-isolcpus"] == "7,15"
    assert kernel_arg(data["kernel_cmdline"], "isolcpus") == {1, 2, 3, 9, 10, 11}  # named cores stay out
    infra_line = "0 4-6 8 12-14"
    assert f"[Manager]\nCPUAffinity={infra_line}\n" in dropin(data, "system.conf.d/")
    assert f"[Slice]\nAllowedCPUs={infra_line}\n" in dropin(data, "/system.slice.d/")
    assert f"[Slice]\nAllowedCPUs={infra_line}\n" in dropin(data, "/user.slice.d/")
    runtime = dropin(data, "crio.service.d/")
    assert f"CPUAffinity={infra_line}\n" in runtime and f"AllowedCPUs={infra_line}\n" in runtime
    assert not [d for d in data["systemd_dropins"] if "containerd" in d["path"]]


def test_text_output_has_each_part_ready_to_paste():
    text = render_text(host_config(build_topology(SMT8), PlanOptions(num_exclusive_cores=2, num_shared_cores=1)))
    lines = text.splitlines()
    assert lines[0] == "# Pools once configured: exclusive on CPUs 1-2,9-10; shared on CPUs 3,11; infra on CPUs 0,4-8,12-15"
    assert "isolcpus=1-3,9-11" in lines
    assert "cpuManagerPolicy: none" in lines
    assert "reservedSystemCPUs: 0,8" in lines
    assert "### /etc/systemd/system/containerd.service.d/50-cmk-cpu-pools.conf" in lines


AGREEMENT = [
    ("hwloc-16em64t-4s2c2t", []),
    ("hwloc-16em64t-4s2c2t", ["--num-exclusive-cores", "3", "--num-shared-cores", "2", "--exclusive-mode", "spread"]),
    ("hwloc-64amd64-4s2n4ca2co", ["--num-exclusive-cores", "10", "--shared-mode", "spread",
                                  "--excl-non-isolcpus", "5"]),
    ("hwloc-96em64t-4no4pa3ca2co", ["--num-exclusive-cores", "20", "--num-shared-cores", "4",
                                    "--exclusive-mode", "spread", "--reserved-cores", "2"]),
    ("hwloc-20em64t-hybrid-1p6c2t+2ca4co1t", ["--num-shared-cores", "2"]),
    ("hwloc-2arm-2c", []),
    ("cmk-xeon_d", ["--num-exclusive-cores", "3", "--num-shared-cores", "1"]),
]
PLAN_FLAGS_ONLY = {"--reserved-cores"}


def plan_flags(flags: list[str]) -> list[str]:
    out, skip = [], False
    for i, flag in enumerate(flags):
        if skip:
            skip = False
        elif flag in PLAN_FLAGS_ONLY:
            skip = True
        else:
            out.append(flag)
    return out


def roots(sysfs: Path, procfs: Path) -> list[str]:
    return ["--sysfs-root", str(sysfs), "--procfs-root", str(procfs)]


@pytest.mark.parametrize(("fixture", "flags"), AGREEMENT)
def test_describe_on_the_node_booted_with_host_config_shows_the_same_cpus(tmp_path, fixture, flags):
    pristine = fixture_copy(fixture, tmp_path / "pristine", isolcpus="", cmdline="ro quiet")
    result = cmk("host-config", "-o", "json", *roots(*pristine), *flags)
    assert result.returncode == 0, result.stderr
    config = json.loads(result.stdout)
    isolcpus = kernel_arg(config["kernel_cmdline"], "isolcpus")
    assert isolcpus, config

    line = " ".join(["ro quiet", *config["kernel_cmdline"]])
    booted = fixture_copy(fixture, tmp_path / "booted", isolcpus=config["kernel_cmdline"][0].split("=")[1],
                          cmdline=line)
    described = cmk("describe", "-o", "json", *roots(*booted), *plan_flags(flags))
    assert described.returncode == 0, described.stderr
    data = json.loads(described.stdout)
    pools = {pool["pool"]: parse_cpu_list(pool["cpus"]) for pool in data["plan"]["pools"]}
    assert data["plan"]["source"] == "isolcpus"
    assert data["plan"]["host_config_agrees"] is True
    assert not any("cmk host-config" in note for note in data["plan"]["notes"])
    assert pools == {pool: parse_cpu_list(cpus) for pool, cpus in config["pools"].items()}
    assert isolcpus == pools["exclusive"] | pools["shared"]
    assert data["plan"]["unused_isolated_cores"] == [] and data["plan"]["partially_isolated_cores"] == []

    # the kubelet's reservation: whole infra cores, the first ones describe lists, and the rest allocatable
    reserved = parse_cpu_list(config["kubelet_config"]["reservedSystemCPUs"])
    (infra,) = [pool for pool in data["plan"]["pools"] if pool["pool"] == "infra"]
    count = int(dict(itertools.pairwise(flags)).get("--reserved-cores", 1))
    first_cores = sorted((parse_cpu_list(core) for core in infra["cores"]), key=min)[:count]
    assert reserved == frozenset().union(*first_cores)
    online = parse_cpu_list(data["topology"]["online_cpus"])
    assert config["kubelet_allocatable_cpu"] == len(online) - len(reserved)

    # run again on the booted node: the same advice, and nothing left to do
    again = cmk("host-config", "-o", "json", *roots(*booted), *flags)
    assert again.returncode == 0, again.stderr
    settled = json.loads(again.stdout)
    assert settled["reboot_needed"] is False and config["reboot_needed"] is True
    assert {k: v for k, v in settled.items() if k not in {"reboot_needed", "current_isolcpus", "notes"}} == \
        {k: v for k, v in config.items() if k not in {"reboot_needed", "current_isolcpus", "notes"}}


def test_cli_text_on_this_machine_runs():
    result = cmk("host-config")
    assert result.returncode == 0, result.stderr
    assert "cpuManagerPolicy: none" in result.stdout


@pytest.mark.parametrize(("args", "message"), [
    (["--reserved-cores", "0"], "argument --reserved-cores: must be 1 or more, got 0"),
    (["--reserved-cores", "-1"], "argument --reserved-cores: must be 1 or more, got -1"),
    (["--num-exclusive-cores", "99"], "ask for fewer"),
    (["--runtime", "docker"], "invalid choice: 'docker'"),
    (["--output", "yaml"], "invalid choice: 'yaml'"),
])
def test_bad_input_is_one_line_without_traceback(args, message):
    result = cmk("host-config", *args)
    assert result.returncode != 0
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_each_runtime_gets_the_node_wide_hook_cmk_install_declares():
    topology = build_topology(SMT8)
    host = HostOptions(runtimes=("crio", "containerd"), install_dir="/usr/local/cmk", hooks_dir="/etc/cmk/hooks.d")
    files = {f.path: f.content for f in host_config(topology, PlanOptions(), host).runtime_config}
    crio = files["/etc/crio/crio.conf.d/90-cmk-node-wide.conf"]
    assert '[crio.runtime]\nhooks_dir = ["/etc/cmk/hooks.d", "/usr/share/containers/oci/hooks.d"]\n' in crio
    toml = files["/etc/containerd/config.toml"]
    assert ('[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n'
            '  base_runtime_spec = "/etc/containerd/cmk-base-spec.json"\n') in toml
    assert '# [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]\n' in toml  # containerd 2.x
    # the base spec names the binary from the start: it must be installed before containerd restarts
    assert toml.index("`cmk install --install-dir /usr/local/cmk") < toml.index("systemctl restart containerd")
    entry = json.loads(files["/etc/containerd/cmk-base-spec.json"].splitlines()[-1])
    assert entry == {"path": "/usr/local/cmk/cmk", "args": ["cmk", "hook", "--node-wide=/usr/local/cmk/cmk-infra-cpus"],
                     "timeout": 10}
    only_crio = host_config(topology, PlanOptions(), HostOptions(runtimes=("crio",))).runtime_config
    assert [f.path for f in only_crio] == ["/etc/crio/crio.conf.d/90-cmk-node-wide.conf"]


def test_the_cli_prints_the_runtime_section_in_text_and_json():
    text = cmk("host-config", "--runtime", "crio")
    assert text.returncode == 0, text.stderr
    assert "## Container runtime: the node-wide hook" in text.stdout
    assert 'hooks_dir = ["/etc/containers/oci/hooks.d", "/usr/share/containers/oci/hooks.d"]' in text.stdout
    data = json.loads(cmk("host-config", "--runtime", "containerd", "-o", "json").stdout)
    assert [f["path"] for f in data["runtime_config"]] == ["/etc/containerd/config.toml",
                                                           "/etc/containerd/cmk-base-spec.json"]
    assert cmk("host-config", "--hooks-dir", "relative").returncode == 2


def test_host_config_plans_from_the_daemons_config_file(tmp_path):
    """Pool sizes kept once, in the daemon's --config file: host-config reads the node's section of it."""
    dump = fixture_copy("cmk-xeon_d", tmp_path / "dump", isolcpus="", cmdline="ro quiet")
    config = tmp_path / "config.yaml"
    config.write_text("default:\n  num-exclusive-cores: 1\nnodes:\n  - names: [xeon-d]\n"
                      "    config: {num-exclusive-cores: 2, num-shared-cores: 2}\n")
    flags = roots(*dump)
    from_file = cmk("host-config", "-o", "json", *flags, "--config", str(config), "--node-name", "xeon-d")
    assert from_file.returncode == 0, from_file.stderr
    same = cmk("host-config", "-o", "json", *flags, "--num-exclusive-cores", "2", "--num-shared-cores", "2")
    assert json.loads(from_file.stdout) == json.loads(same.stdout)
    assert json.loads(from_file.stdout)["pools"]["exclusive"] == "1-2,9-10"
    flag_wins = cmk("host-config", "-o", "json", *flags, "--config", str(config), "--node-name", "xeon-d",
                    "--num-exclusive-cores", "1")
    assert json.loads(flag_wins.stdout)["pools"]["exclusive"] == "1,9"


def test_describe_on_the_shipped_example_flags_that_it_plans_other_cpus_than_host_config():
    """README's Verify step: describe and host-config agree once booted with host-config's line; the shipped
    xeon_d example is booted with isolcpus=0-3,8-11 (core 0 isolated), so they differ. On a node describe says
    so in a note; on a dump, which no reader reboots, only the JSON's flag does (README's first output reads clean)."""
    example = ROOT / "examples" / "cmk-xeon_d"
    flags = roots(example / "sys", example / "proc")
    config = json.loads(cmk("host-config", "-o", "json", *flags).stdout)
    data = json.loads(cmk("describe", "-o", "json", "--usage-window", "0", *flags).stdout)
    described = {pool["pool"]: pool["cpus"] for pool in data["plan"]["pools"]}
    assert described != config["pools"] and data["plan"]["host_config_agrees"] is False
    assert not any("cmk host-config" in note for note in data["plan"]["notes"])
    node = plan_node(discover(example / "sys", example / "proc"), PlanOptions())
    (note,) = host_config_disagreement(node, PlanOptions())
    assert f"host-config's line is {config['kernel_cmdline'][0]};" in note
    assert "booted with isolcpus=0-3,8-11" in note
    assert all(f"{pool} {cpus}" in note for pool, cpus in config["pools"].items() if cpus)


# --- the cgroup driver: systemd's where systemd is the init on cgroup v2, cgroupfs elsewhere ------------------

CONTAINERD_17_OPTIONS = '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\n'
CONTAINERD_2_OPTIONS = '# [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]\n'
SYSTEMD_NOTE = ("the node-wide and CDI hooks record each container's CPUs with systemd (`systemctl set-property "
                "--runtime`), so nothing else must be set for confinement to survive `systemctl daemon-reload`")
V1_NOTE = "the kubelet 1.35+ refuses to start on it unless its configuration sets failCgroupV1: false"

#: (systemd is the init, cgroup version) -> the driver every part of the node must use.
DRIVERS = [
    (True, 2, "systemd"),
    (False, 2, "cgroupfs"),
    (True, 1, "cgroupfs"),
    (False, 1, "cgroupfs"),
    (True, None, "cgroupfs"),
    (False, None, "cgroupfs"),
]


@pytest.mark.parametrize(("systemd", "version", "driver"), DRIVERS)
def test_kubelet_and_runtimes_get_one_cgroup_driver(systemd, version, driver):
    cgroups = NodeCgroups(systemd=systemd, version=version)
    config = host_config(build_topology(SMT8), PlanOptions(num_exclusive_cores=2, num_shared_cores=1), HostOptions(),
                         cgroups)
    data = host_config_data(config)
    assert data["cgroup"] == {"driver": driver, "systemd": systemd, "version": version}
    assert config.kubelet["cgroupDriver"] == driver
    files = {f["path"]: f["content"] for f in data["cgroup_driver_config"]}
    assert list(files) == ["/etc/containerd/config.toml", "/etc/crio/crio.conf.d/90-cmk-cgroup-driver.conf"]
    flag = "true" if driver == "systemd" else "false"
    assert f"{CONTAINERD_17_OPTIONS}  SystemdCgroup = {flag}\n" in files["/etc/containerd/config.toml"]
    assert f"{CONTAINERD_2_OPTIONS}#   SystemdCgroup = {flag}\n" in files["/etc/containerd/config.toml"]
    assert (f'[crio.runtime]\ncgroup_manager = "{driver}"\nconmon_cgroup = "pod"\n'
            in files["/etc/crio/crio.conf.d/90-cmk-cgroup-driver.conf"])
    # cgroup v1: the kubelet 1.35+ needs failCgroupV1: false, printed with its note; never elsewhere
    assert ("failCgroupV1" in config.kubelet) == (version == 1)
    assert config.kubelet.get("failCgroupV1", False) is False
    assert any(V1_NOTE in note for note in config.notes) == (version == 1)
    assert any(SYSTEMD_NOTE in note for note in config.notes) == (driver == "systemd")
    assert any("no cgroup mount" in note for note in config.notes) == (version is None)
    assert any("systemd is the init, but the node boots cgroup v1" in note for note in config.notes) == \
        (systemd and version == 1)


def test_the_cgroup_driver_follows_the_runtimes_asked_for():
    topology, options = build_topology(SMT8), PlanOptions()
    systemd = NodeCgroups(systemd=True, version=2)
    only = host_config(topology, options, HostOptions(runtimes=("containerd",)), systemd).cgroup_driver_config
    assert [f.path for f in only] == ["/etc/containerd/config.toml"]
    text = render_text(host_config(topology, options, HostOptions(runtimes=("crio",)), systemd))
    assert "## Container runtime: cgroup driver systemd, as the kubelet's cgroupDriver " \
           "(systemd is the init, cgroup v2)" in text.splitlines()
    assert 'cgroup_manager = "systemd"' in text and "SystemdCgroup" not in text


def fake_node(tmp_path: Path, *, systemd: bool | str, cgroup: str | None) -> list[str]:
    """The xeon_d dump under ``tmp_path`` as a node root: ``run/systemd/system`` and ``sys/fs/cgroup`` as asked.

    ``systemd``: True (the directory), False (absent) or "file" (a file there: not systemd's test); ``cgroup``:
    "v2" (``cgroup.controllers`` at its root), "v1" (per-controller directories), None (no fs/cgroup).
    """
    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path, isolcpus="", cmdline="ro quiet")
    run = tmp_path / "run"
    run.mkdir()
    if systemd is True:
        (run / "systemd" / "system").mkdir(parents=True)
    elif systemd == "file":
        (run / "systemd").mkdir()
        (run / "systemd" / "system").write_text("")
    if cgroup == "v2":
        (sysfs / "fs" / "cgroup").mkdir(parents=True)
        (sysfs / "fs" / "cgroup" / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids rdma misc\n")
    elif cgroup == "v1":
        for controller in ("cpuset", "cpu,cpuacct", "memory", "systemd", "unified"):  # hybrid: v1 to the kubelet
            (sysfs / "fs" / "cgroup" / controller).mkdir(parents=True)
    return [*roots(sysfs, procfs), "--run-root", str(run)]


#: (run/systemd/system, sys/fs/cgroup) -> the kubelet's lines and containerd's SystemdCgroup line host-config prints.
FAKE_NODES = [
    (True, "v2", ["cgroupDriver: systemd"], "  SystemdCgroup = true"),
    (False, "v2", ["cgroupDriver: cgroupfs"], "  SystemdCgroup = false"),
    ("file", "v2", ["cgroupDriver: cgroupfs"], "  SystemdCgroup = false"),
    (True, "v1", ["cgroupDriver: cgroupfs", "failCgroupV1: false"], "  SystemdCgroup = false"),
    (False, "v1", ["cgroupDriver: cgroupfs", "failCgroupV1: false"], "  SystemdCgroup = false"),
    (True, None, ["cgroupDriver: cgroupfs"], "  SystemdCgroup = false"),
]


@pytest.mark.parametrize(("systemd", "cgroup", "kubelet", "containerd"), FAKE_NODES)
def test_host_config_prints_the_cgroup_driver_of_the_node_it_is_pointed_at(tmp_path, systemd, cgroup, kubelet,
                                                                          containerd):
    flags = [*fake_node(tmp_path, systemd=systemd, cgroup=cgroup), "--num-exclusive-cores", "1",
             "--num-shared-cores", "0", "--runtime", "containerd"]
    text = cmk("host-config", *flags)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    start = lines.index("kind: KubeletConfiguration") + 1
    assert lines[start:start + len(kubelet) + 1] == [*kubelet, "cpuManagerPolicy: none"]
    driver = kubelet[0].split(": ")[1]
    header = next(line for line in lines if line.startswith("## Container runtime: cgroup driver"))
    assert header.startswith(f"## Container runtime: cgroup driver {driver}, as the kubelet's cgroupDriver (")
    block = lines[lines.index(CONTAINERD_17_OPTIONS.rstrip()):]
    assert block[1] == containerd and block[3:5] == [CONTAINERD_2_OPTIONS.rstrip(), f"# {containerd}"]
    assert (SYSTEMD_NOTE in text.stdout) == (driver == "systemd")
    assert (V1_NOTE in text.stdout) == (cgroup == "v1")
    data = json.loads(cmk("host-config", "-o", "json", *flags).stdout)
    assert data["cgroup"] == {"driver": driver, "systemd": systemd is True,
                              "version": {"v2": 2, "v1": 1, None: None}[cgroup]}
    assert data["kubelet_config"]["cgroupDriver"] == driver


NODE_CONFIGURATIONS = ROOT / "docs" / "user" / "node-configurations.md"
#: the table's rows and the node each stands for
DOC_ROWS = {
    "cgroup v1 + cgroupfs": NodeCgroups(systemd=False, version=1),
    "cgroup v2 + cgroupfs (systemd is not the init)": NodeCgroups(systemd=False, version=2),
    "cgroup v2 + systemd (systemd is the init)": NodeCgroups(systemd=True, version=2),
}


def test_the_node_configurations_table_says_what_host_config_prints_for_each_row():
    rows = {cells[1].strip(): cells[2:] for line in NODE_CONFIGURATIONS.read_text().splitlines()
            if line.startswith("| cgroup ") and (cells := line.split("|"))}
    assert list(rows) == list(DOC_ROWS)
    for name, cgroups in DOC_ROWS.items():
        kubelet, containerd, crio = (cell.strip() for cell in rows[name][:3])
        config = host_config(build_topology(SMT8), PlanOptions(), HostOptions(), cgroups)
        assert f"`cgroupDriver: {config.kubelet['cgroupDriver']}`" in kubelet
        assert ("`failCgroupV1: false`" in kubelet) == ("failCgroupV1" in config.kubelet)
        files = {f.path: f.content for f in config.cgroup_driver_config}
        (systemd_cgroup,) = {line.strip() for line in files["/etc/containerd/config.toml"].splitlines()
                             if line.startswith("  SystemdCgroup")}
        assert containerd == f"`{systemd_cgroup}`"
        settings = files["/etc/crio/crio.conf.d/90-cmk-cgroup-driver.conf"].split("[crio.runtime]\n")[1].splitlines()
        assert crio == ", ".join(f"`{line}`" for line in settings)
    text = NODE_CONFIGURATIONS.read_text()
    assert CONTAINERD_17_OPTIONS.strip() in text and CONTAINERD_2_OPTIONS.strip("# \n") in text
    assert "/etc/crio/crio.conf.d/90-cmk-cgroup-driver.conf" in text and "CRI-O 1.23+ is **untested**" in text


def test_the_node_configurations_commands_run_as_written():
    text = NODE_CONFIGURATIONS.read_text()
    block = text.partition("Which row a node is (run these on the node):\n\n")[2].partition("\n\n")[0]
    assert block and all(line.startswith("    ") for line in block.splitlines()), block
    for command in [line[4:] for line in block.splitlines()]:
        if command.startswith("cmk "):
            result = cmk(*shlex.split(command)[1:])
        else:
            result = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=False, timeout=30)
        assert (result.returncode, result.stderr) == (0, ""), command
        assert result.stdout.strip(), command
