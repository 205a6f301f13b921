"""``cmk demo`` run as a user runs it, checked from outside while it holds its pod.

The PIDs it prints must really have the affinity it claims (read from
``/proc/PID/status`` by the test, not by the demo), that affinity must be
the CPUs of the devices it printed (resolved through ``cmk describe``'s plan,
not the demo's own words), and nothing it started may outlive it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from deviceplugin.model.cpulist import parse_cpu_list
from tests.support.hookrun import cpus_allowed as allowed_list
from tests.support.native import ensure_native_pinner
from tests.support.topologies import topology

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 120  # s for any one read; a hung demo fails the test instead of hanging CI
PINNED = re.compile(r"^  (\S+)\s+(\d+)\s+(\S+)\s+(\S+)\s+pid (\d+)'s current affinity list: (\S+)$")
REFUSED = re.compile(r"^  (\S+)\s+-\s+(\S+)\s+(\S+)\s+none: the pinner refused \(exit 6\)")


@dataclass(frozen=True)
class Row:
    container: str
    pid: int | None  # None: the pinner refused the CPUs
    device: str
    cpus: frozenset[int]
    affinity: frozenset[int] | None


@dataclass
class Held:
    """A demo paused in ``--hold``: its output so far and its process."""

    proc: subprocess.Popen[str]
    lines: list[str]

    def rows(self) -> list[Row]:
        rows = []
        for line in self.lines:
            if m := PINNED.match(line):
                name, pid, device, cpus, pid_again, affinity = m.groups()
                assert pid == pid_again, line
                rows.append(Row(name, int(pid), device, parse_cpu_list(cpus), parse_cpu_list(affinity)))
            elif m := REFUSED.match(line):
                name, device, cpus = m.groups()
                rows.append(Row(name, None, device, parse_cpu_list(cpus), None))
        return rows

    def value(self, label: str) -> str:
        for line in self.lines:
            if line.startswith(f"  {label} "):
                return line[len(label) + 2:].strip()
        raise AssertionError(f"no {label!r} line in:\n" + "\n".join(self.lines))

    def finish(self) -> tuple[int, str, str]:
        """Enter ends the hold; the rest of stdout, stderr and the exit status."""
        assert self.proc.stdin is not None
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        out, err = self.proc.communicate(timeout=TIMEOUT)
        self.lines += out.splitlines()
        return self.proc.returncode, out, err


def demo_args(*extra: str) -> list[str]:
    return [sys.executable, "-m", "deviceplugin", "demo", *extra]


@pytest.fixture
def start_demo() -> Iterator:
    """Start ``cmk demo --hold`` and read its stdout line by line until it holds; SIGKILL it if a test fails."""
    started: list[subprocess.Popen[str]] = []
    ensure_native_pinner()

    def start(*extra: str) -> Held:
        proc = subprocess.Popen(demo_args("--hold", "600", *extra), cwd=ROOT, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        started.append(proc)
        lines: list[str] = []
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("holding "):
                return Held(proc, lines)
        raise AssertionError(f"the demo ended before holding (status {proc.wait()}):\n"
                             + "\n".join(lines) + (proc.stderr.read() if proc.stderr else ""))

    yield start
    for proc in started:  # a failed test: SIGTERM lets the demo clean up; SIGKILL only if it hangs
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.communicate(timeout=TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()


def plan_cpus(*roots: str) -> tuple[dict[str, frozenset[int]], dict[str, frozenset[int]]]:
    """From ``cmk describe``: core device ID -> its CPUs, and slot pool -> the pool's CPUs."""
    result = subprocess.run([sys.executable, "-m", "deviceplugin", "describe", "-o", "json", *roots],
                            cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT, check=True)
    cores, pools = {}, {}
    for pool in json.loads(result.stdout)["plan"]["pools"]:
        if pool["unit"] == "cores":
            cores.update({device: parse_cpu_list(cpus) for device, cpus in pool["devices"].items()})
        elif pool["cpus"]:
            pools[pool["pool"]] = parse_cpu_list(pool["cpus"])
    return cores, pools


def device_cpus(device: str, cores: dict[str, frozenset[int]], pools: dict[str, frozenset[int]]) -> frozenset[int]:
    if device in cores:
        return cores[device]
    pool = device.rpartition("-")[0]
    return pools[pool]


def cpus_allowed(pid: int) -> frozenset[int]:
    return parse_cpu_list(allowed_list(pid))


def assert_nothing_left(held: Held, started: dict[int, float]) -> None:
    work = Path(held.value("work dir").split(" ")[0])
    socket = Path(held.value("kubelet").removeprefix("stand-in serving "))
    assert not work.exists(), f"{work} outlived the demo"
    assert not socket.exists() and not list(socket.parent.parent.glob("**/*.sock")), "a socket outlived the demo"
    for pid, created in started.items():
        try:
            alive = psutil.Process(pid).create_time() == created
        except psutil.NoSuchProcess:
            alive = False
        assert not alive, f"pid {pid} outlived the demo"


def test_demo_pids_have_the_affinity_printed_which_is_their_devices_cpus(start_demo) -> None:
    cores, pools = plan_cpus()
    held = start_demo()
    rows = held.rows()
    assert [r.container for r in rows] == ["exclusive", "shared", "infra"], "\n".join(held.lines)
    assert all(r.pid is not None for r in rows), "on this machine every container must run pinned"
    started = {}
    for row in rows:
        assert row.pid is not None and row.affinity is not None
        assert cpus_allowed(row.pid) == row.affinity, f"{row.container}: /proc disagrees with the printed affinity"
        assert row.affinity == device_cpus(row.device, cores, pools) == row.cpus, row
        assert Path(f"/proc/{row.pid}/exe").resolve().name == "sleep", "the pinner must have exec'd the workload"
        started[row.pid] = psutil.Process(row.pid).create_time()
    exclusive = next(r for r in rows if r.container == "exclusive")
    infra = next(r for r in rows if r.container == "infra")
    assert exclusive.device in cores, "the exclusive container holds a core device"
    assert exclusive.affinity and infra.affinity and not exclusive.affinity & infra.affinity

    status, out, err = held.finish()
    assert status == 0, err
    assert err == ""
    for row in rows:
        assert f"{row.container}: SIGTERM pid {row.pid}: ended by SIGTERM" in out
    assert "its devices are free again" in out
    assert_nothing_left(held, started)
    # what the README says each step shows
    assert steps_showing(held.lines, "  Capacity:") == steps_showing(held.lines, "  Allocatable:") == ["2"]
    assert steps_showing(held.lines, "  Allocated resources:") == ["2", "5", "6"]


def steps_showing(lines: list[str], text: str) -> list[str]:
    """The numbers of the demo's steps (``N. title`` lines) with a line starting with ``text``."""
    found, step = [], ""
    for line in lines:
        if line[:1].isdigit() and ". " in line:
            step = line.partition(".")[0]
        elif line.startswith(text) and step not in found:
            found.append(step)
    return found


def test_demo_says_shared_runs_from_infra_when_the_plan_has_no_shared_pool(start_demo) -> None:
    _, pools = plan_cpus()
    if "shared" in pools:
        pytest.fail("this machine has a shared pool; the test needs one without (2 CPUs, no isolcpus, as in CI)")
    held = start_demo()
    notes = [line for line in held.lines if line.startswith("  note: shared: not advertised on this machine")]
    assert len(notes) == 1 and "runs --pool=infra instead" in notes[0]
    shared = next(r for r in held.rows() if r.container == "shared")
    assert shared.device.startswith("infra-") and shared.affinity == pools["infra"]
    status, _, err = held.finish()
    assert status == 0, err


def test_demo_on_a_dump_shows_the_pinners_refusal_instead_of_an_affinity(start_demo) -> None:
    dump = topology("cmk-xeon_d")
    roots = ("--sysfs-root", str(dump / "sys"), "--procfs-root", str(dump / "proc"))
    plan = ("--num-exclusive-cores", "3", "--num-shared-cores", "1")
    cores, pools = plan_cpus(*roots, *plan)
    held = start_demo(*roots, *plan)
    assert any("the topology is a dump, not this machine" in line for line in held.lines)
    rows = held.rows()
    assert [r.container for r in rows] == ["exclusive", "shared", "infra"], "\n".join(held.lines)
    allowed = frozenset(os.sched_getaffinity(0))
    started = {r.pid: psutil.Process(r.pid).create_time() for r in rows if r.pid is not None}
    for row in rows:
        assert row.cpus == device_cpus(row.device, cores, pools)
        if row.cpus <= allowed:  # a machine with these CPU numbers pins them for real
            assert row.pid is not None and cpus_allowed(row.pid) == row.affinity == row.cpus
        else:
            assert row.pid is None, f"{row.container}: claims a process for CPUs this machine lacks"
            assert any(line.startswith(f"  {row.container}: ") and "not allowed in this container" in line
                       for line in held.lines), f"{row.container}: the pinner's refusal is not shown"
    status, out, err = held.finish()
    refused = sum(r.pid is None for r in rows)
    assert (status, err) == (0, "")
    done = f"done: {len(rows) - refused} of {len(rows)} containers ran pinned to the CPUs their devices name"
    refusal = f"; the pinner refused {refused} whose CPUs are not this machine's to give here"
    assert (done + refusal if refused else done + "\n") in out
    assert_nothing_left(held, started)


def test_demo_on_a_dump_where_every_pinner_refuses_still_succeeds_as_the_readme_says() -> None:
    """One CPU allowed to the demo, the dump's pools each span two or more: every pinner refuses, which is what
    the demo on a dump promises to show (README, section Run it), so it exits 0 with nothing on stderr."""
    dump = topology("cmk-xeon_d")
    one = min(os.sched_getaffinity(0))
    result = subprocess.run(demo_args("--sysfs-root", str(dump / "sys"), "--procfs-root", str(dump / "proc")),
                            cwd=ROOT, capture_output=True, text=True, check=False, timeout=TIMEOUT,
                            preexec_fn=lambda: os.sched_setaffinity(0, {one}))
    done = ("done: 0 of 3 containers ran pinned to the CPUs their devices name; the pinner refused 3 whose CPUs "
            "are not this machine's to give here")
    assert (result.returncode, result.stderr) == (0, ""), result.stdout + result.stderr
    assert result.stdout.endswith(done + "\n")
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "the demo shows that refusal instead of an affinity" in readme and "and exits 0" in readme


def test_demo_takes_the_daemons_config_file(tmp_path) -> None:
    """The pool sizes live in the daemon's --config file once; the demo plans from it (section by node name)."""
    config = tmp_path / "config.yaml"
    config.write_text("default:\n  num-exclusive-cores: 1\nnodes:\n  - names: [demo-node]\n"
                      "    config: {num-exclusive-cores: 999}\n")
    result = subprocess.run(demo_args("--config", str(config), "--node-name", "demo-node"), cwd=ROOT,
                            capture_output=True, text=True, check=False, timeout=TIMEOUT)
    assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("cmk demo: error: ") and "999" in result.stderr


def test_a_reader_that_leaves_ends_the_demo_quietly_and_it_leaves_nothing(start_demo) -> None:
    """``cmk demo | head``: the next line written meets a closed pipe; the demo still stops its pod, daemon
    and stand-in, removes its work dir, and exits as a SIGPIPE'd command would, with no traceback."""
    held = start_demo()
    started = {r.pid: psutil.Process(r.pid).create_time() for r in held.rows() if r.pid is not None}
    assert started, "\n".join(held.lines)
    assert held.proc.stdin is not None and held.proc.stdout is not None and held.proc.stderr is not None
    held.proc.stdout.close()
    held.proc.stdin.write("\n")
    held.proc.stdin.flush()
    assert held.proc.wait(timeout=TIMEOUT) == 141
    assert held.proc.stderr.read() == ""
    assert_nothing_left(held, started)


def test_demo_bad_plan_is_one_line_and_leaves_nothing() -> None:
    before = set(Path(tempfile.gettempdir()).glob("cmk-demo-*"))
    result = subprocess.run(demo_args("--num-exclusive-cores", "999"), cwd=ROOT, capture_output=True, text=True, check=False,
                            timeout=TIMEOUT)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("cmk demo: error: ")
    assert set(Path(tempfile.gettempdir()).glob("cmk-demo-*")) == before


def test_demo_hold_must_be_seconds() -> None:
    result = subprocess.run(demo_args("--hold", "soon"), cwd=ROOT, capture_output=True, text=True,
                            timeout=TIMEOUT, check=False)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "expected seconds" in result.stderr
