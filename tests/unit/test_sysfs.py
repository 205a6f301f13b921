"""Discovery's kernel fallbacks and errors, each on a small tree written in tmp_path.

Trees start from ``write_synthetic_sysfs`` (laid out as a kernel writes
sysfs) and are then bent into the one quirk a test is about.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from benchmarks.synthetic_sysfs import SyntheticRoots, write_synthetic_sysfs
from deviceplugin.errors import CmkError
from deviceplugin.host.sysfs import discover, online_cpus, read_boot_settings
from deviceplugin.host.sysfs import discover as _discover
from deviceplugin.model.cpulist import format_cpu_list
from deviceplugin.model.topology import Topology


def _machine(tmp_path: Path, sockets: int = 1, nodes: int = 1, cores: int = 2, threads: int = 2) -> SyntheticRoots:
    """1 socket, 1 node, 2 cores x 2 threads by default: CPUs 0-3, cores {0,2} and {1,3}."""
    return write_synthetic_sysfs(tmp_path / "machine", sockets, nodes, cores, threads)


def _cpu(roots: SyntheticRoots, name: str = "") -> Path:
    return roots.sysfs / "devices/system/cpu" / name


def _node(roots: SyntheticRoots, name: str = "") -> Path:
    return roots.sysfs / "devices/system/node" / name


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _remove_list_files(roots: SyntheticRoots) -> None:
    for path in roots.sysfs.rglob("*"):
        if path.is_file() and (path.name.endswith("_list") or path.name == "cpulist"):
            path.unlink()


def _cores(roots: SyntheticRoots) -> list[str]:
    return [format_cpu_list(core.cpus) for core in discover(roots.sysfs, roots.procfs).cores]


def _every_record_read(sysfs_root: Path, procfs_root: Path) -> Topology:
    """The daemon's discovery, then every later thread's record read (and its errors raised) as the eager one does."""
    topology = _discover(sysfs_root, procfs_root, later_threads_on_demand=True)
    dict(topology.cpus)
    return topology


@pytest.fixture(params=[False, True], ids=["eager", "later-threads-on-demand"])
def discover_both(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test here runs twice: the daemon's discovery (later threads read on demand) must find the same."""
    if request.param:
        monkeypatch.setitem(globals(), "discover", _every_record_read)


pytestmark = pytest.mark.usefixtures("discover_both")


# --- the plain tree -------------------------------------------------------------------


def test_a_synthetic_machine_is_discovered_as_written(tmp_path: Path) -> None:
    roots = write_synthetic_sysfs(tmp_path, 2, 2, 4, 2, isolated=range(4, 8))
    topology = discover(roots.sysfs, roots.procfs)
    assert topology.online == frozenset(range(32))
    assert topology.packages == {0, 1}
    assert len(topology.cores) == 16 and topology.threads_per_core_max == 2
    assert {n: format_cpu_list(c) for n, c in topology.numa_nodes.items()} == {
        0: "0-3,16-19",
        1: "4-7,20-23",
        2: "8-11,24-27",
        3: "12-15,28-31",
    }
    cpu = topology.cpus[5]
    assert (cpu.package, cpu.node, cpu.siblings, cpu.core_id) == (0, 1, {5, 21}, 5)
    assert cpu.l3 == topology.numa_nodes[1]
    assert topology.isolated == frozenset(range(4, 8))


# --- online state ---------------------------------------------------------------------


def test_without_cpu_online_the_per_cpu_online_files_decide(tmp_path: Path) -> None:
    roots = _machine(tmp_path)
    _cpu(roots, "online").unlink()
    _write(_cpu(roots, "cpu3/online"), "0\n")
    topology = discover(roots.sysfs, roots.procfs)
    assert not _cpu(roots, "cpu0/online").exists()
    assert topology.online == {0, 1, 2}, "cpu0 has no online file but a topology/ folder"
    assert topology.offline == {3}
    assert online_cpus(roots.sysfs) == {0, 1, 2}, "the hotplug re-read falls back the same way"


def test_an_empty_cpu_online_file_falls_back_to_the_per_cpu_files(tmp_path: Path) -> None:
    roots = _machine(tmp_path)
    _write(_cpu(roots, "online"), "")
    _write(_cpu(roots, "cpu2/online"), "0")
    assert discover(roots.sysfs, roots.procfs).online == {0, 1, 3}
    assert online_cpus(roots.sysfs) == {0, 1, 3}


def test_an_empty_per_cpu_online_file_means_online_when_topology_is_there(tmp_path: Path) -> None:
    roots = _machine(tmp_path)
    _cpu(roots, "online").unlink()
    for cpu in range(4):
        _write(_cpu(roots, f"cpu{cpu}/online"), "\x00")
    shutil.rmtree(_cpu(roots, "cpu1/topology"))
    assert discover(roots.sysfs, roots.procfs).online == {0, 2, 3}


def test_an_offline_cpu_without_topology_has_no_placement(tmp_path: Path) -> None:
    roots = _machine(tmp_path)
    _write(_cpu(roots, "online"), "0-2\n")
    shutil.rmtree(_cpu(roots, "cpu3/topology"))
    topology = discover(roots.sysfs, roots.procfs)
    cpu3 = topology.cpus[3]
    assert (cpu3.online, cpu3.package, cpu3.node, cpu3.siblings) == (False, None, None, frozenset())
    assert topology.cpus[1].siblings == {1}, "siblings hold online threads only"
    assert [format_cpu_list(core.cpus) for core in topology.cores] == ["0,2", "1"]


def test_offline_listing_cpus_beyond_possible_is_ignored(tmp_path: Path) -> None:
    roots = _machine(tmp_path)
    _write(_cpu(roots, "offline"), "4-511\n")
    _write(_cpu(roots, "possible"), "0-7\n")
    topology = discover(roots.sysfs, roots.procfs)
    assert set(topology.cpus) == set(range(8)), "possible CPUs without folders are known, offline"
    assert topology.online == {0, 1, 2, 3}


def test_without_possible_the_cpu_folders_are_every_cpu(tmp_path: Path) -> None:
    roots = _machine(tmp_path)
    _cpu(roots, "possible").unlink()
    assert set(discover(roots.sysfs, roots.procfs).cpus) == {0, 1, 2, 3}


def test_an_online_cpu_without_topology_is_a_lone_thread(tmp_path: Path) -> None:
    roots = _machine(tmp_path)
    shutil.rmtree(_cpu(roots, "cpu3/topology"))
    topology = discover(roots.sysfs, roots.procfs)
    cpu3 = topology.cpus[3]
    assert (cpu3.online, cpu3.package, cpu3.node, cpu3.siblings) == (True, None, 0, {3})
    assert topology.core_of(1).cpus == {1, 3}, "cpu1's own siblings still name cpu3"


# --- cores, ids, caches ---------------------------------------------------------------


def test_hex_masks_serve_when_the_list_files_are_missing(tmp_path: Path) -> None:
    roots = write_synthetic_sysfs(tmp_path, 1, 2, 2, 2)
    before = discover(roots.sysfs, roots.procfs)
    _remove_list_files(roots)
    after = discover(roots.sysfs, roots.procfs)
    assert after.cpus == before.cpus and after.cores == before.cores
    assert after.numa_nodes == before.numa_nodes
    assert after.cpus[0].l3 == {0, 1, 4, 5}


def test_core_cpus_list_wins_over_thread_siblings_list(tmp_path: Path) -> None:
    roots = _machine(tmp_path)
    for cpu in range(4):
        _write(_cpu(roots, f"cpu{cpu}/topology/thread_siblings_list"), f"{cpu}\n")
    assert _cores(roots) == ["0,2", "1,3"]
    for cpu in range(4):
        _cpu(roots, f"cpu{cpu}/topology/core_cpus_list").unlink()
    assert _cores(roots) == ["0", "1", "2", "3"]


def test_the_thread_siblings_mask_is_the_last_resort(tmp_path: Path) -> None:
    roots = _machine(tmp_path)
    for cpu in range(4):
        for name in ("core_cpus_list", "thread_siblings_list", "core_cpus"):
            _cpu(roots, f"cpu{cpu}/topology/{name}").unlink()
    assert _cores(roots) == ["0,2", "1,3"]


def test_unknown_ids_of_minus_one_and_missing_die_become_none(tmp_path: Path) -> None:
    roots = _machine(tmp_path)
    _write(_cpu(roots, "cpu0/topology/physical_package_id"), "-1\n")
    for name in ("package_cpus_list", "core_siblings_list", "package_cpus", "core_siblings"):
        _cpu(roots, f"cpu0/topology/{name}").unlink(missing_ok=True)
    _write(_cpu(roots, "cpu1/topology/core_id"), "-1\n")
    _cpu(roots, "cpu0/topology/die_id").unlink()
    topology = discover(roots.sysfs, roots.procfs)
    cpu0 = topology.cpus[0]
    assert (cpu0.package, cpu0.die, cpu0.core_id, topology.cpus[1].core_id) == (None, None, 0, None)


def test_two_packages_with_one_id_and_repeated_core_ids_keep_cores_apart(tmp_path: Path) -> None:
    roots = write_synthetic_sysfs(tmp_path, 2, 1, 2, 1)
    for cpu in range(4):
        _write(_cpu(roots, f"cpu{cpu}/topology/physical_package_id"), "0\n")
        _write(_cpu(roots, f"cpu{cpu}/topology/core_id"), "0\n")
    topology = discover(roots.sysfs, roots.procfs)
    assert topology.packages == {0}, "the kernel's id is reported as is"
    assert [format_cpu_list(core.cpus) for core in topology.cores] == ["0", "1", "2", "3"]


def test_caches_and_cpufreq_are_read_where_present(tmp_path: Path) -> None:
    roots = write_synthetic_sysfs(tmp_path, 1, 1, 2, 2, base_frequency_khz=2_100_000)
    _write(_cpu(roots, "cpu1/cpufreq/energy_performance_preference"), "performance\n")
    topology = discover(roots.sysfs, roots.procfs)
    assert {cpu: topology.cpus[cpu].l3 for cpu in range(4)} == dict.fromkeys(range(4), frozenset({0, 1, 2, 3}))
    assert topology.cpus[1].base_frequency == 2_100_000
    assert topology.cpus[1].energy_performance_preference == "performance"
    assert topology.cpus[0].energy_performance_preference is None


def test_an_instruction_cache_or_no_cache_folder_means_no_l3(tmp_path: Path) -> None:
    roots = write_synthetic_sysfs(tmp_path, 2, 1, 1, 2)  # cores {0,2} and {1,3}, an L3 each
    _write(_cpu(roots, "cpu0/cache/index3/type"), "Instruction\n")
    for cpu in (1, 3):
        shutil.rmtree(_cpu(roots, f"cpu{cpu}/cache"))
    topology = discover(roots.sysfs, roots.procfs)
    assert [topology.cpus[cpu].l3 for cpu in range(4)] == [None, None, {0, 2}, None]


def test_a_cpu_an_l3_names_shares_it_without_a_cache_folder_of_its_own(tmp_path: Path) -> None:
    roots = write_synthetic_sysfs(tmp_path, 1, 1, 2, 2)
    for cpu in (1, 2, 3):  # the kernel writes cpu0's list for each of them: one read serves all four
        shutil.rmtree(_cpu(roots, f"cpu{cpu}/cache"))
    topology = discover(roots.sysfs, roots.procfs)
    assert {cpu: topology.cpus[cpu].l3 for cpu in range(4)} == dict.fromkeys(range(4), frozenset({0, 1, 2, 3}))


def test_a_cpu_its_package_and_die_lists_name_takes_their_ids_without_reading_its_own(tmp_path: Path) -> None:
    roots = write_synthetic_sysfs(tmp_path, 2, 1, 2, 1)  # packages {0,1} and {2,3}
    for cpu in (1, 3):  # each package's list names these CPUs: their own id files are never opened
        for name in ("physical_package_id", "die_id"):
            _write(_cpu(roots, f"cpu{cpu}/topology/{name}"), "garbage\n")
    topology = discover(roots.sysfs, roots.procfs)
    assert [(topology.cpus[cpu].package, topology.cpus[cpu].die) for cpu in range(4)] == [(0, 0), (0, 0), (1, 0), (1, 0)]


def test_without_package_or_die_lists_each_cpu_reads_its_own_ids(tmp_path: Path) -> None:
    roots = write_synthetic_sysfs(tmp_path, 2, 1, 2, 1)
    for path in list((roots.sysfs / "devices/system/cpu").glob("cpu*/topology/*")):
        if path.name.startswith(("package_cpus", "core_siblings", "die_cpus")):
            path.unlink()
    _write(_cpu(roots, "cpu1/topology/die_id"), "3\n")
    topology = discover(roots.sysfs, roots.procfs)
    assert [(topology.cpus[cpu].package, topology.cpus[cpu].die) for cpu in range(4)] == [(0, 0), (0, 3), (1, 0), (1, 0)]


def test_a_second_cache_at_one_level_does_not_replace_the_first(tmp_path: Path) -> None:
    roots = _machine(tmp_path)
    index10 = _cpu(roots, "cpu0/cache/index10")  # sorts before index3 as text
    for name, text in {"level": "3", "type": "Unified", "shared_cpu_list": "0,2"}.items():
        _write(index10 / name, text + "\n")
    assert discover(roots.sysfs, roots.procfs).cpus[0].l3 == {0, 1, 2, 3}


def test_nul_bytes_inside_files_are_ignored(tmp_path: Path) -> None:
    roots = _machine(tmp_path)
    _write(_cpu(roots, "online"), "0-3\n\x00")
    _write(_cpu(roots, "cpu2/topology/core_cpus_list"), "0,2\x00\x00")
    _write(_node(roots, "node0/cpulist"), "0-3\n\x00")
    topology = discover(roots.sysfs, roots.procfs)
    assert topology.online == {0, 1, 2, 3}
    assert topology.numa_nodes == {0: {0, 1, 2, 3}}


# --- NUMA -----------------------------------------------------------------------------


def test_without_a_node_folder_node_0_holds_every_online_cpu(tmp_path: Path) -> None:
    roots = _machine(tmp_path)
    shutil.rmtree(_node(roots))
    assert discover(roots.sysfs, roots.procfs).numa_nodes == {0: {0, 1, 2, 3}}


def test_a_node_folder_without_nodes_counts_as_no_node_folder(tmp_path: Path) -> None:
    roots = _machine(tmp_path)
    shutil.rmtree(_node(roots, "node0"))
    assert discover(roots.sysfs, roots.procfs).numa_nodes == {0: {0, 1, 2, 3}}


def test_sparse_and_cpu_less_nodes(tmp_path: Path) -> None:
    roots = write_synthetic_sysfs(tmp_path, 1, 2, 1, 1)
    _node(roots, "node1").rename(_node(roots, "node33"))
    _write(_node(roots, "node250/cpulist"), "\n")  # GPU memory: no CPUs
    assert discover(roots.sysfs, roots.procfs).numa_nodes == {0: {0}, 33: {1}}


def test_nodes_that_each_list_every_cpu_leave_them_in_the_lowest(tmp_path: Path) -> None:
    roots = write_synthetic_sysfs(tmp_path, 1, 4, 1, 1)
    for node in range(4):
        _write(_node(roots, f"node{node}/cpulist"), "0-3\n")
    topology = discover(roots.sysfs, roots.procfs)
    assert topology.numa_nodes == {0: {0, 1, 2, 3}}


def test_an_online_cpu_in_no_node_has_node_none(tmp_path: Path) -> None:
    roots = write_synthetic_sysfs(tmp_path, 1, 2, 1, 1)
    shutil.rmtree(_node(roots, "node0"))  # an offlined memory node
    topology = discover(roots.sysfs, roots.procfs)
    assert topology.cpus[0].node is None and topology.cpus[0].online
    assert topology.numa_nodes == {1: {1}}


# --- isolation ------------------------------------------------------------------------


def test_isolated_is_the_union_of_the_file_and_isolcpus_with_flags(tmp_path: Path) -> None:
    roots = write_synthetic_sysfs(tmp_path, 1, 1, 8, 1, isolated=[2, 3])
    _write(roots.procfs / "cmdline", "ro isolcpus=nohz,managed_irq,4-5 quiet\n")
    assert discover(roots.sysfs, roots.procfs).isolated == {2, 3, 4, 5}


def test_nohz_full_is_the_union_of_the_file_and_the_cmdline(tmp_path: Path) -> None:
    roots = write_synthetic_sysfs(tmp_path, 1, 1, 8, 1)
    _write(_cpu(roots, "nohz_full"), "1-2\n")
    _write(roots.procfs / "cmdline", "nohz_full=2-3\n")
    assert discover(roots.sysfs, roots.procfs).nohz_full == {1, 2, 3}


def test_nohz_full_reading_null_is_empty(tmp_path: Path) -> None:
    roots = _machine(tmp_path)
    _write(_cpu(roots, "nohz_full"), "              (null)\n")
    assert discover(roots.sysfs, roots.procfs).nohz_full == frozenset()


def test_missing_isolation_files_and_cmdline_mean_nothing_isolated(tmp_path: Path) -> None:
    roots = _machine(tmp_path)
    _cpu(roots, "isolated").unlink()
    _cpu(roots, "nohz_full").unlink()
    shutil.rmtree(roots.procfs)
    topology = discover(roots.sysfs, roots.procfs)
    assert (topology.isolated, topology.nohz_full) == (frozenset(), frozenset())


# --- errors ---------------------------------------------------------------------------


def test_a_missing_sysfs_root_says_how_to_fix_it(tmp_path: Path) -> None:
    with pytest.raises(CmkError) as raised:
        discover(tmp_path / "nope", tmp_path)
    assert str(raised.value).startswith(f"sysfs root {tmp_path / 'nope'} does not exist (pass --sysfs-root")


def test_a_root_without_devices_system_cpu_is_named(tmp_path: Path) -> None:
    with pytest.raises(CmkError, match=r"devices/system/cpu does not exist: .* is not a sysfs root"):
        discover(tmp_path, tmp_path)


def test_no_online_cpu_at_all_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "devices/system/cpu").mkdir(parents=True)
    with pytest.raises(CmkError, match="shows no online CPU"):
        discover(tmp_path, tmp_path)


@pytest.mark.parametrize(
    ("relative", "content", "complaint"),
    [
        ("cpu/cpu0/topology/physical_package_id", "zero\n", "expected an integer, found 'zero'"),
        ("cpu/cpu1/topology/core_cpus_list", "1-x\n", "malformed cpu list"),
        ("cpu/cpu0/cache/index2/level", "L2\n", "expected an integer"),
        ("cpu/online", "0-3,\n", "malformed cpu list"),
        ("cpu/isolated", "3-1\n", "runs backwards"),
        ("node/node0/cpulist", "abc\n", "malformed cpu list"),
        ("cpu/cpu1/cpufreq/base_frequency", "fast\n", "expected an integer"),
        ("cpu/cpu2/topology/core_id", "\xff\xfe", "expected text"),
    ],
)
def test_garbage_content_names_the_file(tmp_path: Path, relative: str, content: str, complaint: str) -> None:
    roots = _machine(tmp_path)
    path = roots.sysfs / "devices/system" / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content.encode("latin-1"))
    with pytest.raises(CmkError) as raised:
        discover(roots.sysfs, roots.procfs)
    assert str(path) in str(raised.value) and complaint in str(raised.value)


def test_garbage_in_a_per_cpu_online_file_names_the_file(tmp_path: Path) -> None:
    roots = _machine(tmp_path)
    _cpu(roots, "online").unlink()
    _write(_cpu(roots, "cpu1/online"), "yes\n")
    with pytest.raises(CmkError, match=rf"{_cpu(roots, 'cpu1/online')}: expected 0 or 1, found 'yes'"):
        discover(roots.sysfs, roots.procfs)


def test_a_folder_where_a_file_should_be_names_the_path(tmp_path: Path) -> None:
    roots = _machine(tmp_path)
    path = _cpu(roots, "cpu1/topology/core_id")
    path.unlink()
    path.mkdir()
    with pytest.raises(CmkError, match=rf"cannot read {path}: it is a directory, not a regular file"):
        discover(roots.sysfs, roots.procfs)


def test_a_file_where_a_folder_should_be_names_the_path(tmp_path: Path) -> None:
    roots = _machine(tmp_path)
    path = _cpu(roots, "cpu1/topology")
    shutil.rmtree(path)
    path.write_text("")
    with pytest.raises(CmkError, match=rf"cannot list {path}: a file stands where a folder should be"):
        discover(roots.sysfs, roots.procfs)


def test_an_unreadable_cmdline_names_its_path(tmp_path: Path) -> None:
    roots = _machine(tmp_path)
    (roots.procfs / "cmdline").unlink()
    (roots.procfs / "cmdline").mkdir()
    with pytest.raises(CmkError, match=rf"cannot read {roots.procfs / 'cmdline'}"):
        discover(roots.sysfs, roots.procfs)


def test_a_malformed_isolcpus_names_the_cmdline(tmp_path: Path) -> None:
    _write(tmp_path / "cmdline", "ro isolcpus=domain,2-z\n")
    with pytest.raises(CmkError, match=rf"{tmp_path / 'cmdline'}: malformed cpu list"):
        read_boot_settings(tmp_path)


def test_unknown_packages_come_from_their_cpu_lists_numbered_by_lowest_cpu(tmp_path: Path) -> None:
    """POWER and s390 report physical_package_id -1: lscpu and hwloc group CPUs by the package list."""
    roots = _machine(tmp_path)
    for cpu, package in ((0, "0,3"), (1, "1-2"), (2, "1-2"), (3, "0,3")):
        _write(_cpu(roots, f"cpu{cpu}/topology/physical_package_id"), "-1\n")
        _write(_cpu(roots, f"cpu{cpu}/topology/package_cpus_list"), package + "\n")
    cpus = discover(roots.sysfs, roots.procfs).cpus
    assert [cpus[cpu].package for cpu in range(4)] == [0, 1, 1, 0]


def test_a_cpu_of_unknown_package_joins_the_package_its_siblings_name(tmp_path: Path) -> None:
    roots = _machine(tmp_path)
    known = {cpu: discover(roots.sysfs, roots.procfs).cpus[cpu].package for cpu in range(4)}
    _write(_cpu(roots, "cpu2/topology/physical_package_id"), "-1\n")
    _write(_cpu(roots, "cpu2/topology/package_cpus_list"), "0-3\n")
    assert discover(roots.sysfs, roots.procfs).cpus[2].package == known[0]


def test_l3_groups_split_each_node_into_l3_per_node_groups(tmp_path: Path) -> None:
    roots = write_synthetic_sysfs(tmp_path, 1, 2, 4, 2, l3_per_node=2)  # 8 cores, CPUs n and n + 8
    topology = discover(roots.sysfs, roots.procfs)
    groups = sorted({format_cpu_list(cpu.l3) for cpu in topology.cpus.values() if cpu.l3})
    assert groups == ["0-1,8-9", "2-3,10-11", "4-5,12-13", "6-7,14-15"]


def test_synthetic_l3_groups_must_split_a_node_evenly(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="3 cores per node do not split into 2 equal L3 groups"):
        write_synthetic_sysfs(tmp_path, 1, 1, 3, 1, l3_per_node=2)


def test_an_empty_l3_sharing_list_means_the_cores_own_cache(tmp_path: Path) -> None:
    roots = _machine(tmp_path)  # cores {0,2} and {1,3}
    for cpu in range(4):
        _write(_cpu(roots, f"cpu{cpu}/cache/index3/shared_cpu_list"), "\n")
    topology = discover(roots.sysfs, roots.procfs)
    assert [topology.cpus[cpu].l3 for cpu in range(4)] == [{0, 2}, {1, 3}, {0, 2}, {1, 3}]


def test_the_daemon_reads_a_later_threads_files_only_when_its_record_is_asked_for(tmp_path: Path) -> None:
    roots = _machine(tmp_path)  # cores {0,2} and {1,3}: CPUs 2 and 3 are later threads
    path = _cpu(roots, "cpu3/topology/core_id")
    _write(path, "three\n")
    topology = _discover(roots.sysfs, roots.procfs, later_threads_on_demand=True)
    assert [format_cpu_list(core.cpus) for core in topology.cores] == ["0,2", "1,3"]
    assert topology.online == {0, 1, 2, 3} and topology.node_of(3) == 0
    with pytest.raises(CmkError, match=rf"{path}: expected an integer, found 'three'"):
        topology.cpus[3]


def test_a_first_thread_of_unknown_package_has_every_thread_read_at_once(tmp_path: Path) -> None:
    """Its derived number depends on every thread's package list, so nothing is left for later."""
    roots = _machine(tmp_path)
    _write(_cpu(roots, "cpu0/topology/physical_package_id"), "-1\n")
    path = _cpu(roots, "cpu3/topology/core_id")
    _write(path, "three\n")
    with pytest.raises(CmkError, match=rf"{path}: expected an integer"):
        _discover(roots.sysfs, roots.procfs, later_threads_on_demand=True)
