"""``--socket-id`` on machines whose sysfs gives ``physical_package_id`` -1 (POWER, s390).

The daemon derives those packages from the package CPU lists; the pinner
must call the same CPUs "socket N". Every expectation here is the daemon's
topology model (:func:`deviceplugin.host.sysfs.discover`) of the same dump.
The pinners pin for real, so the pool is this machine's CPUs A and B; the
dumps put CPUs 0 and 1 in one package, so a copy of each dump with B's number
swapped for a CPU of another package puts A and B on two sockets.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from deviceplugin.host.sysfs import discover
from deviceplugin.model.cpulist import format_cpu_list, format_cpu_mask
from deviceplugin.model.limits import checked_cpu_list, checked_cpu_mask
from deviceplugin.model.packages import UNKNOWN_PACKAGE_TEXT, number_packages
from deviceplugin.model.pinnercontract import IsolateExit
from deviceplugin.model.topology import Topology
from tests.pinner.conftest import CPU_A, CPU_B, Pinner
from tests.support.topologies import FIXTURES, fixture_copy

A, B = CPU_A, CPU_B
UNKNOWN_IDS = ["hwloc-256ppc-8n8s4t", "hwloc-20s390-2g6s4c"]
SCRIPT = 'grep ^Cpus_allowed_list: /proc/self/status; echo "A=$CMK_CPUS_ASSIGNED"'
E = "cmk isolate: error: "
NO_SYSFS = " (--socket-id needs sysfs; use --socket-id=-1 for any socket)"
CPU_SET_FILES = ("online", "possible", "present", "offline")  # cpu/ files that list CPUs (cpuN/online is a flag)


def model(sysfs: Path) -> Topology:
    return discover(sysfs, sysfs.parent / "proc")


def dumps() -> list[Path]:
    return sorted(path for path in FIXTURES.iterdir() if (path / "sys").is_dir())


# ---- the numbering itself, with literal values -----------------------------------------------------------------


def test_unknown_packages_are_numbered_after_the_known_ids_in_the_order_of_their_lowest_cpu() -> None:
    lists = {4: frozenset({4, 5}), 5: frozenset({4, 5}), 2: frozenset({2, 3}), 3: frozenset({2, 3})}
    assert number_packages({0: 7, 1: 7}, lists) == {2: 8, 3: 8, 4: 9, 5: 9}


def test_a_package_one_of_its_cpus_has_an_id_for_keeps_the_lowest_such_id() -> None:
    assert number_packages({0: 3, 1: 2}, {2: frozenset({0, 1, 2}), 4: frozenset({4})}) == {2: 2, 4: 4}


def test_an_empty_package_list_names_no_package() -> None:
    assert number_packages({}, {0: frozenset(), 1: frozenset({1})}) == {1: 0}


def test_a_cpu_counts_in_its_own_list_so_inconsistent_lists_are_separate_packages() -> None:
    assert number_packages({}, {0: frozenset({1}), 1: frozenset({1})}) == {0: 0, 1: 1}


# ---- the pinner's reading, on every dump -----------------------------------------------------------------------


def assert_each_socket_selects_its_cpus(pinner: Pinner, sysfs: Path, sockets: dict[int, int | None],
                                        where: str) -> None:
    """``--socket-id=N`` for each package N of ``sockets`` (CPU -> package) pins to exactly N's CPUs."""
    env = {"CMK_CPUS_SHARED": ",".join(map(str, sockets)), "CMK_SYSFS_ROOT": str(sysfs)}
    for socket in sorted({package for package in sockets.values() if package is not None}):
        chosen = [cpu for cpu in sockets if sockets[cpu] == socket]
        result = pinner.run([f"--socket-id={socket}", "--pool=shared", "sh", "--", "-c", SCRIPT], env)
        assert (result.returncode, result.stderr, result.stdout) == (
            0, "", f"Cpus_allowed_list:\t{format_cpu_list(chosen)}\nA={','.join(map(str, chosen))}\n"
        ), f"{where}: socket {socket}"


@pytest.mark.parametrize("dump", dumps(), ids=lambda path: path.name)
def test_the_pinner_puts_cpus_a_and_b_on_the_socket_the_daemon_gives_them(pinner: Pinner, dump: Path) -> None:
    topology = model(dump / "sys")
    sockets: dict[int, int | None] = {cpu: package for cpu in (A, B) if cpu in topology.cpus
                                      and (package := topology.cpus[cpu].package) is not None}
    assert_each_socket_selects_its_cpus(pinner, dump / "sys", sockets, dump.name)
    for cpu in sorted({A, B} - set(sockets)):  # offline in the dump, or without a topology folder
        env = {"CMK_CPUS_SHARED": str(cpu), "CMK_SYSFS_ROOT": str(dump / "sys")}
        result = pinner.run(["--socket-id=0", "--pool=shared", "true"], env)
        assert (result.returncode, result.stderr.startswith(f"{E}cannot read the socket of CPU {cpu} from ")) == (
            IsolateExit.SOCKET, True), result.stderr


def test_the_unknown_id_dumps_have_many_derived_sockets() -> None:
    """The dumps above hold what this file is about: every id -1, and more than one socket."""
    for name in UNKNOWN_IDS:
        ids = {path.read_text().strip() for path in (FIXTURES / name).glob("sys/devices/system/cpu/cpu*/topology/"
                                                                          "physical_package_id")}
        assert (ids, len(model(FIXTURES / name / "sys").packages) > 2) == ({"-1"}, True)


# ---- the unknown-id dumps, as processes -------------------------------------------------------------------------------


def swap_cpus(sysfs: Path, one: int, other: int) -> None:
    """Renumber CPUs ``one`` and ``other`` of a dump copy everywhere a reader sees a CPU number."""
    swap = {one: other, other: one}

    def renumbered(cpus: frozenset[int]) -> set[int]:
        return {swap.get(cpu, cpu) for cpu in cpus}

    cpu_root = sysfs / "devices/system/cpu"
    lists = [cpu_root / name for name in CPU_SET_FILES] + [*sysfs.glob("devices/system/node/node*/cpulist")]
    lists += [*cpu_root.glob("cpu*/topology/*_list"), *cpu_root.glob("cpu*/cache/index*/shared_cpu_list")]
    masks = [*sysfs.glob("devices/system/node/node*/cpumap"), *cpu_root.glob("cpu*/cache/index*/shared_cpu_map")]
    masks += [path for path in cpu_root.glob("cpu*/topology/*") if not path.name.endswith(("_list", "_id"))]
    for path in lists:
        if path.is_file():
            path.write_text(format_cpu_list(renumbered(checked_cpu_list(path.read_text().replace("\0", "")))) + "\n")
    for path in masks:
        words = path.read_text().replace("\0", "").strip().split(",")
        digits = format_cpu_mask(renumbered(checked_cpu_mask(",".join(words)))).rjust(8 * len(words), "0")
        path.write_text(",".join(digits[i:i + 8] for i in range(0, len(digits), 8)).lower() + "\n")
    (cpu_root / f"cpu{one}").rename(cpu_root / "swapping")
    (cpu_root / f"cpu{other}").rename(cpu_root / f"cpu{one}")
    (cpu_root / "swapping").rename(cpu_root / f"cpu{other}")


@pytest.fixture(scope="module")
def sysfs_roots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each unknown-id dump as it is, and a copy where B is a CPU of another package than A's."""
    roots: dict[str, Path] = {}
    for name in UNKNOWN_IDS:
        roots[name] = FIXTURES / name / "sys"
        sysfs, _ = fixture_copy(name, tmp_path_factory.mktemp("swapped"))
        topology = model(sysfs)
        other = min(cpu.id for cpu in topology.cpus.values()
                    if cpu.online and cpu.package != topology.cpus[A].package and cpu.id != B)
        swap_cpus(sysfs, B, other)
        roots[f"{name}-B-swapped"] = sysfs
    return roots


@pytest.mark.parametrize("dump", [*UNKNOWN_IDS, *(f"{name}-B-swapped" for name in UNKNOWN_IDS)])
def test_socket_id_selects_the_cpus_the_daemon_puts_on_that_socket(
    pinner: Pinner, sysfs_roots: dict[str, Path], dump: str
) -> None:
    name, sysfs = dump, sysfs_roots[dump]
    topology = model(sysfs)
    sockets = {cpu: topology.cpus[cpu].package for cpu in (A, B)}
    assert None not in sockets.values(), f"{name}: the daemon places both CPUs"
    if "swapped" in dump:
        assert sockets[A] != sockets[B], f"{name}: the copy puts A and B on two sockets"
    assert_each_socket_selects_its_cpus(pinner, sysfs, sockets, name)
    env = {"CMK_CPUS_SHARED": f"{A},{B}", "CMK_SYSFS_ROOT": str(sysfs)}
    elsewhere = max(topology.packages)
    assert elsewhere not in sockets.values()
    result = pinner.run([f"--socket-id={elsewhere}", "--pool=shared", "true"], env)
    assert (result.returncode, result.stderr) == (
        IsolateExit.SOCKET,
        (f"{E}none of the shared pool's CPUs ({format_cpu_list({A, B})}) is on socket {elsewhere} (they are on socket "
         f"{','.join(map(str, sorted(set(sockets.values()))))}): use one of those with --socket-id, or -1 for any\n"),
    )


# ---- what the reading refuses -------------------------------------------------------------


def broken_copy(tmp: Path, change: dict[str, bytes | None]) -> Path:
    """A copy of the s390 dump (every id -1) with files replaced (``None``: removed)."""
    sysfs, _ = fixture_copy(UNKNOWN_IDS[1], tmp)
    cpu_root = sysfs / "devices/system/cpu"
    for relative, content in change.items():
        path = cpu_root / relative
        if content is None:
            path.unlink()
        else:
            path.write_bytes(content)
    return sysfs


def run_on(pinner: Pinner, sysfs: Path) -> tuple[int, str]:
    result = pinner.run(["--socket-id=0", "--pool=shared", "true"],
                        {"CMK_CPUS_SHARED": str(A), "CMK_SYSFS_ROOT": str(sysfs)})
    return result.returncode, result.stderr


def test_a_cpu_without_a_package_list_is_refused_naming_its_id_file(pinner: Pinner, tmp_path: Path) -> None:
    sysfs = broken_copy(tmp_path, {f"cpu{A}/topology/core_siblings_list": None,
                                   f"cpu{A}/topology/core_siblings": None})
    path = sysfs / f"devices/system/cpu/cpu{A}/topology/physical_package_id"
    assert run_on(pinner, sysfs) == (
        IsolateExit.SOCKET, f"{E}cannot read the socket of CPU {A} from {path}: {UNKNOWN_PACKAGE_TEXT}{NO_SYSFS}\n"
    )


@pytest.mark.parametrize(("name", "content", "detail"), [
    ("core_siblings_list", b"0-x\n", "'0-x' is not a cpu list"),
    ("core_siblings_list", b"0-9000\n", "'0-9000' is not a cpu list"),
    ("core_siblings_list", b"1" * 70_000, "longer than 65536 bytes"),
])
def test_a_malformed_package_list_is_one_line_naming_the_file(
    pinner: Pinner, tmp_path: Path, name: str, content: bytes, detail: str
) -> None:
    other = 19  # the last CPU of the dump: every CPU is read, not only the pool's
    sysfs = broken_copy(tmp_path, {f"cpu{other}/topology/{name}": content})
    path = sysfs / f"devices/system/cpu/cpu{other}/topology/{name}"
    assert run_on(pinner, sysfs) == (
        IsolateExit.SOCKET, f"{E}cannot read the socket of CPU {other} from {path}: {detail}{NO_SYSFS}\n"
    )


def test_a_malformed_package_mask_is_one_line_naming_the_file(pinner: Pinner, tmp_path: Path) -> None:
    other = 19
    sysfs = broken_copy(tmp_path, {f"cpu{other}/topology/core_siblings_list": None,
                                   f"cpu{other}/topology/core_siblings": b"000e0000,zz\n"})
    path = sysfs / f"devices/system/cpu/cpu{other}/topology/core_siblings"
    assert run_on(pinner, sysfs) == (
        IsolateExit.SOCKET,
        f"{E}cannot read the socket of CPU {other} from {path}: '000e0000,zz' is not a cpu mask{NO_SYSFS}\n",
    )


def test_masks_stand_in_for_missing_lists(pinner: Pinner, tmp_path: Path) -> None:
    """Kernels before 2.6.27 wrote only the hex masks; the daemon reads them, and so do the pinners."""
    cpu_root = FIXTURES / UNKNOWN_IDS[1] / "sys/devices/system/cpu"
    sysfs = broken_copy(tmp_path, {f"{path.parent.parent.name}/topology/core_siblings_list": None
                                   for path in cpu_root.glob("cpu*/topology/core_siblings_list")})
    topology = model(sysfs)
    socket = topology.cpus[A].package
    assert socket is not None and len(topology.packages) > 2
    result = pinner.run([f"--socket-id={socket}", "--pool=shared", "true"],
                        {"CMK_CPUS_SHARED": str(A), "CMK_SYSFS_ROOT": str(sysfs)})
    assert (result.returncode, result.stderr) == (0, "")


def test_an_online_flag_other_than_0_or_1_is_refused(pinner: Pinner, tmp_path: Path) -> None:
    sysfs = broken_copy(tmp_path, {"online": None, "cpu5/online": b"2\n"})
    path = sysfs / "devices/system/cpu/cpu5/online"
    assert run_on(pinner, sysfs) == (
        IsolateExit.SOCKET, f"{E}cannot read the online CPUs from {path}: '2' is not 0 or 1{NO_SYSFS}\n"
    )


def test_the_copy_helper_renumbers_consistently(tmp_path: Path) -> None:
    """The swap keeps the dump a valid machine: the daemon sees the same packages, relabelled."""
    sysfs, _ = fixture_copy(UNKNOWN_IDS[1], tmp_path)
    before = model(sysfs)
    swap_cpus(sysfs, 1, 7)
    after = model(sysfs)
    groups = {frozenset(c for c in before.cpus if before.cpus[c].package == p) for p in before.packages}
    relabelled = {frozenset({1: 7, 7: 1}.get(c, c) for c in group) for group in groups}
    assert {frozenset(c for c in after.cpus if after.cpus[c].package == p) for p in after.packages} == relabelled
