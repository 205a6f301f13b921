"""Discovery checked against every real machine dump and its upstream expectations.

Each fixture's ``expected.json`` was taken from the dump's own project (hwloc,
CMK), not from the sysfs files. Where the kernel's view legitimately differs
from what hwloc reports, the difference is a named entry in ``DEVIATIONS``
with its reason; the test then asserts our value is exactly the kernel's
(and still differs from upstream, so a stale entry fails too).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from deviceplugin.host.sysfs import discover, online_cpus
from deviceplugin.model.cpulist import format_cpu_list, parse_cpu_list
from deviceplugin.model.topology import Topology
from tests.support.topologies import FIXTURES, fixture_copy

FOLDERS = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir()) if FIXTURES.is_dir() else []


@dataclass(frozen=True)
class Deviation:
    """Our (kernel) value for one field where the upstream tool reports another, and why."""

    ours: Any
    reason: str


_BULLDOZER = (
    "AMD Bulldozer: the kernel lists the two integer cores of a compute unit as thread "
    "siblings (they share front end and FPU); hwloc counts each half as a core"
)

#: physical_package_id -1 throughout: our package ids are derived, hwloc's packages have no P# at all
UNKNOWN_PACKAGES = ("hwloc-20s390-2g6s4c", "hwloc-256ppc-8n8s4t")

DEVIATIONS: dict[tuple[str, str], Deviation] = {
    ("hwloc-16ia64-8n2s", "sockets"): Deviation(
        8,
        "ia64 firmware gives both single-core sockets of a node one physical_package_id "
        "(0, 512, ...); we report the kernel's ids, hwloc splits packages by core_siblings",
    ),
    ("hwloc-64amd64-4s2n4ca2co", "cores_total"): Deviation(32, _BULLDOZER),
    ("hwloc-64amd64-4s2n4ca2co", "threads_per_core_max"): Deviation(2, _BULLDOZER),
    ("hwloc-40intel64-4n10c+pci-conflicts", "sockets"): Deviation(
        4,
        "hand-modified dump with conflicting cpusets: hwloc drops package 3 and leaves its "
        "CPUs without a package; the kernel still reports physical_package_id 3",
    ),
    ("hwloc-40intel64-4n10c+pci-conflicts", "cpus.socket"): Deviation(
        {cpu: 3 for cpu in range(3, 40, 4)}, "same conflict: the kernel's id for package 3's CPUs"
    ),
    ("hwloc-40intel64-4n10c+pci-conflicts", "l3_groups"): Deviation(
        ["0,4,8,12,16,20,24,28,32,36", "1,5,9,13,17,21,25,29,33,37", "2,6,10,14,18,22,26,30,34,38",
         "3,7,11,15,19,23,27,31,35,39"],
        "same conflict: hwloc's tree leaves package 2's CPUs without an L3 object, while each "
        "of their cache/index3/shared_cpu_list names the ten CPUs of that package",
    ),
    ("hwloc-32amd64-4s2n4c-cgroup2", "visible_sockets"): Deviation(
        1,
        "hwloc keeps the packages whose memory nodes the cgroup allows even when none of "
        "their CPUs is allowed; we count packages of the visible CPUs",
    ),
}

PER_CPU_FIELDS = {"socket": "package", "node": "node", "core": "core_id", "die": "die"}


@functools.cache
def _discovered(folder: str) -> Topology:
    return discover(FIXTURES / folder / "sys", FIXTURES / folder / "proc")


def _expected(folder: str) -> dict[str, Any]:
    return json.loads((FIXTURES / folder / "expected.json").read_text())


def _visible(expected: Mapping[str, Any]) -> frozenset[int] | None:
    """The CPUs a cgroup-restricted dump shows, or ``None`` for an unrestricted one."""
    return parse_cpu_list(expected["pus_in_topology"]) if "visible_numa_nodes" in expected else None


def _check(folder: str, field: str, ours: Any, upstream: Any) -> None:
    deviation = DEVIATIONS.get((folder, field))
    if deviation is None:
        assert ours == upstream, f"{folder} {field}: discovered {ours!r}, upstream expects {upstream!r}"
    else:
        assert ours == deviation.ours, f"{folder} {field}: {deviation.reason}"
        assert ours != upstream, f"{folder} {field}: deviation no longer needed, remove it"


def test_the_fixture_corpus_is_there() -> None:
    assert FIXTURES.is_dir(), f"fixtures not found at {FIXTURES}: set CMK_FIXTURES"
    assert len(FOLDERS) >= 30
    assert "cmk-xeon_d" in FOLDERS


def test_every_deviation_names_an_existing_fixture_and_a_reason() -> None:
    for folder, _field in DEVIATIONS:
        assert folder in FOLDERS
    assert all(len(d.reason) > 30 for d in DEVIATIONS.values())


@pytest.mark.parametrize("folder", FOLDERS)
def test_online_cpus_match(folder: str) -> None:
    expected, topology = _expected(folder), _discovered(folder)
    visible = _visible(expected)
    if visible is None:
        _check(folder, "online_cpus", format_cpu_list(topology.online), expected["online_cpus"])
    else:
        assert visible <= topology.online, "a cgroup only hides online CPUs"


@pytest.mark.parametrize("folder", FOLDERS)
def test_the_online_cpus_alone_are_what_discovery_finds(folder: str) -> None:
    """What the daemon re-reads on a hotplug event, instead of every CPU's placement."""
    assert online_cpus(FIXTURES / folder / "sys") == _discovered(folder).online


@pytest.mark.parametrize("folder", FOLDERS)
def test_socket_count_matches(folder: str) -> None:
    expected, topology = _expected(folder), _discovered(folder)
    visible = _visible(expected)
    if visible is None:
        _check(folder, "sockets", len(topology.packages), expected["sockets"])
    else:
        packages = {topology.cpus[cpu].package for cpu in visible} - {None}
        _check(folder, "visible_sockets", len(packages), expected["visible_sockets"])


@pytest.mark.parametrize("folder", FOLDERS)
def test_core_count_and_threads_per_core_match(folder: str) -> None:
    expected, topology = _expected(folder), _discovered(folder)
    visible = _visible(expected)
    if visible is None:
        _check(folder, "cores_total", len(topology.cores), expected["cores_total"])
        _check(folder, "threads_per_core_max", topology.threads_per_core_max, expected["threads_per_core_max"])
    else:
        threads = [core.cpus & visible for core in topology.cores if core.cpus & visible]
        _check(folder, "visible_cores_total", len(threads), expected["visible_cores_total"])
        _check(folder, "threads_per_core_max", max(map(len, threads)), expected["threads_per_core_max"])


@pytest.mark.parametrize("folder", FOLDERS)
def test_numa_membership_matches(folder: str) -> None:
    """CPU-less nodes (memory-only, GPU memory) are not in the model: upstream lists them as ""."""
    expected, topology = _expected(folder), _discovered(folder)
    visible = _visible(expected)
    if visible is None:
        upstream, ours = expected["numa_nodes"], topology.numa_nodes
    else:
        upstream = expected["visible_numa_nodes"]
        ours = {node: cpus & visible for node, cpus in topology.numa_nodes.items() if cpus & visible}
    _check(
        folder,
        "numa_nodes",
        {str(node): format_cpu_list(cpus) for node, cpus in ours.items()},
        {node: cpus for node, cpus in upstream.items() if cpus},
    )


@pytest.mark.parametrize("folder", FOLDERS)
def test_per_cpu_placement_matches(folder: str) -> None:
    expected, topology = _expected(folder), _discovered(folder)
    assert expected["cpus"], "every fixture lists its CPUs"
    for key, attribute in PER_CPU_FIELDS.items():
        skip = key == "socket" and folder in UNKNOWN_PACKAGES  # hwloc gives no P#: compared by group instead
        rows = [row for row in expected["cpus"] if key in row and not skip]
        mismatched = {
            row["cpu"]: getattr(topology.cpus[row["cpu"]], attribute)
            for row in rows
            if getattr(topology.cpus[row["cpu"]], attribute) != row[key]
        }
        _check(folder, f"cpus.{key}", mismatched, {})


@pytest.mark.parametrize("folder", UNKNOWN_PACKAGES)
def test_derived_packages_group_cpus_as_hwloc_does(folder: str) -> None:
    """physical_package_id -1: hwloc's packages (its logical index) hold the CPUs ours hold."""
    expected, topology = _expected(folder), _discovered(folder)

    def groups(package_of: dict[int, object]) -> set[frozenset[int]]:
        return {frozenset(c for c, p in package_of.items() if p == package) for package in package_of.values()}

    hwloc = {row["cpu"]: row["socket_L"] for row in expected["cpus"]}
    ours = {cpu: topology.cpus[cpu].package for cpu in hwloc}
    assert None not in ours.values() and groups(ours) == groups(hwloc)


def _hwloc_l3_groups(console: str) -> list[frozenset[int]]:
    """The PUs (``P#``) under each ``L3Cache`` of hwloc's indented console tree."""
    groups, open_caches = [], []  # open_caches: (indent, PUs) of the L3 objects around the current line
    for line in console.splitlines():
        indent = len(line) - len(line.lstrip())
        while open_caches and open_caches[-1][0] >= indent:
            groups.append(frozenset(open_caches.pop()[1]))
        body = line.strip()
        if body.startswith("L3Cache "):
            open_caches.append((indent, set()))
        elif body.startswith("PU L#"):
            pu = int(body.split("(P#", 1)[1].split(")", 1)[0].split()[0])
            for _, members in open_caches:
                members.add(pu)
    return groups + [frozenset(members) for _, members in open_caches]


CONSOLE_FOLDERS = [folder for folder in FOLDERS if (FIXTURES / folder / "upstream-expected.console").is_file()]


@pytest.mark.parametrize("folder", CONSOLE_FOLDERS)
def test_l3_groups_match_hwloc(folder: str) -> None:
    """L3 groups from cache/index*/shared_cpu_list (level 3), as hwloc groups the PUs under L3Cache.

    A dump without L3 folders gives no group (hwloc shows no L3 either); ia64's empty sharing
    maps give each core its own L3, as hwloc reads them.
    """
    topology = _discovered(folder)
    visible = _visible(_expected(folder)) or topology.online
    ours = sorted({format_cpu_list(cpu.l3 & visible) for cpu in topology.cpus.values()
                   if cpu.online and cpu.id in visible and cpu.l3})
    console = (FIXTURES / folder / "upstream-expected.console").read_text()
    upstream = sorted({format_cpu_list(group) for group in _hwloc_l3_groups(console)})
    _check(folder, "l3_groups", ours, upstream)


def test_ia64_empty_l3_maps_mean_each_core_has_its_own() -> None:
    topology = _discovered("hwloc-8ia64-2s2c2t")
    mask = (FIXTURES / "hwloc-8ia64-2s2c2t/sys/devices/system/cpu/cpu0/cache/index4/shared_cpu_map").read_text()
    assert set(mask.strip("\0\n ")) <= {"0", ","}, "the dump's L3 sharing map is empty"
    assert all(core.l3 == core.cpus for core in topology.cores)
    assert len(topology.cores) == 4 and topology.threads_per_core_max == 2


def test_xeon_d_siblings_and_isolated_cpus_match_cmk() -> None:
    expected, topology = _expected("cmk-xeon_d"), _discovered("cmk-xeon_d")
    for row in expected["cpus"]:
        assert topology.cpus[row["cpu"]].siblings == parse_cpu_list(row["siblings"])
    assert format_cpu_list(topology.isolated) == expected["isolated_cpus"] == "0-3,8-11"
    assert topology.nohz_full == frozenset()


def test_hybrid_cores_report_their_base_frequencies() -> None:
    """Raptor Lake: P-cores at 1.9 GHz, E-cores at 1.4 GHz (SST-BF-style input to pool plans)."""
    topology = _discovered("hwloc-20em64t-hybrid-1p6c2t+2ca4co1t")
    frequencies = {core.base_frequency for core in topology.cores}
    assert frequencies == {1_900_000, 1_400_000}
    p_cores = [core for core in topology.cores if core.base_frequency == 1_900_000]
    assert len(p_cores) == 6 and all(len(core.cpus) == 2 for core in p_cores)


def test_nohz_full_reading_null_means_no_cpus() -> None:
    topology = _discovered("hwloc-nvidia-dgx-gb10")
    assert (FIXTURES / "hwloc-nvidia-dgx-gb10/sys/devices/system/cpu/nohz_full").read_text().strip() == "(null)"
    assert topology.nohz_full == frozenset()


def test_a_fixture_copy_with_isolation_written_in(tmp_path: Path) -> None:
    """The README's recipe: copy a dump, write cpu/isolated and proc/cmdline, rediscover."""
    folder = "hwloc-32intel64-2p8co2t+8ve"
    sysfs, procfs = fixture_copy(
        folder, tmp_path, isolcpus="2-5,18-21",
        cmdline="BOOT_IMAGE=/vmlinuz ro isolcpus=nohz,domain,managed_irq,2-7,18-23 nohz_full=6-7,22-23 quiet",
    )

    topology = discover(sysfs, procfs)

    assert format_cpu_list(topology.isolated) == "2-7,18-23"
    assert format_cpu_list(topology.nohz_full) == "6-7,22-23"
    original = _discovered(folder)
    assert topology.cpus == original.cpus
    assert topology.cores == original.cores


@pytest.mark.parametrize("folder", FOLDERS)
def test_reading_later_threads_on_demand_finds_the_same_machine(folder: str) -> None:
    """The daemon's discovery: cores, online CPUs and nodes before any later thread is read, then every record."""
    eager = _discovered(folder)
    lazy = discover(FIXTURES / folder / "sys", FIXTURES / folder / "proc", later_threads_on_demand=True)
    assert (lazy.cores, lazy.online, lazy.offline, lazy.numa_nodes) == (
        eager.cores, eager.online, eager.offline, eager.numa_nodes)
    assert [lazy.node_of(cpu) for cpu in lazy.cpus] == [eager.cpus[cpu].node for cpu in eager.cpus]
    assert dict(lazy.cpus) == dict(eager.cpus) and lazy == eager
