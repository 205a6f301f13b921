"""One table of command lines, env and expected results, run against the static pinner.

Each case runs the pinner as a real process on this machine's two lowest allowed CPUs (A and B).
Successful cases run a shell that prints what the kernel reports for itself
(``Cpus_allowed_list``) and the exported variables; error cases check the exact
one-line message and exit status.

Every case runs twice: with this process's affinity, and started on CPU A only
while its cpuset allows more, as a container whose runtime did not reset the
affinity it inherited (runc < 1.3.1 on Linux 6.2+). The outcome must be the
same: the pinner goes by the cpuset ({cpuset}); only ``--no-affinity`` leaves
the inherited affinity ({affinity}) in place.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from deviceplugin.model.cpulist import format_cpu_list, format_cpu_mask
from deviceplugin.model.pinnercontract import ISOLATE_HELP as HELP
from deviceplugin.model.pinnercontract import IsolateExit, exit_table
from tests.pinner.conftest import (
    CPU_A,
    CPU_B,
    Pinner,
    affinity_here,
    cpuset_here,
    on_cpus,
)

A, B = CPU_A, CPU_B
SCRIPT = 'grep ^Cpus_allowed_list: /proc/self/status; echo "A=$CMK_CPUS_ASSIGNED M=$CMK_CPUS_ASSIGNED_MASK"'
E = "cmk isolate: error: "
SEE_HELP = " (see 'cmk isolate --help')"
AFTER = " (the command's arguments go after '--')"
HINT = " (expected CPU numbers or N-M ranges separated by commas, in any order, e.g. 2,3,10-11)"
NO_SYSFS = " (--socket-id needs sysfs; use --socket-id=-1 for any socket)"


def shows(cpus: str, assigned: str, mask: str) -> str:
    return f"Cpus_allowed_list:\t{cpus}\nA={assigned} M={mask}\n"


@dataclass(frozen=True)
class Case:
    id: str
    args: list[str]
    status: int
    stderr: str = ""  # the exact stderr; "{tmp}", "{cpuset}" and "{affinity}" are filled in
    stdout: str | None = None  # exact stdout, when it matters
    env: dict[str, str] = field(default_factory=dict)


CASES = [
    # --- pinning, each pool, both command-line forms ---
    Case("exclusive-cmk-form", ["--pool=exclusive", "--namespace=cmk-namespace", "sh", "--", "-c", SCRIPT], 0,
         stdout=shows("{b}", "{b}", "{mb}"), env={"CMK_CPUS_EXCLUSIVE": "{b}"}),
    Case("exclusive-non-isolcpus-plain-form", ["--pool", "exclusive-non-isolcpus", "--", "sh", "-c", SCRIPT], 0,
         stdout=shows("{a}", "{a}", "{ma}"), env={"CMK_CPUS_EXCLUSIVE_NON_ISOLCPUS": "{a}"}),
    Case("shared", ["--pool=shared", "sh", "--", "-c", SCRIPT], 0,
         stdout=shows("{ab}", "{a},{b}", "{mab}"), env={"CMK_CPUS_SHARED": "{a},{b}"}),
    Case("infra-range-syntax", ["--pool=infra", "--", "sh", "-c", SCRIPT], 0,
         stdout=shows("{ab}", "{a},{b}", "{mab}"), env={"CMK_CPUS_INFRA": "{ab}"}),
    Case("unordered-duplicates", ["--pool=shared", "--", "sh", "-c", SCRIPT], 0,
         stdout=shows("{ab}", "{a},{b}", "{mab}"), env={"CMK_CPUS_SHARED": "{b},{a},{b}"}),
    Case("other-pools-ignored", ["--pool=exclusive", "--", "sh", "-c", SCRIPT], 0,
         stdout=shows("{b}", "{b}", "{mb}"), env={"CMK_CPUS_EXCLUSIVE": "{b}", "CMK_CPUS_SHARED": "x", "CMK_CPUS_INFRA": ""}),
    # a container holding an exclusive core and a shared slot gets both variables: each --pool takes its own
    Case("exclusive-of-core-and-shared", ["--pool=exclusive", "--", "sh", "-c", SCRIPT], 0,
         stdout=shows("{b}", "{b}", "{mb}"), env={"CMK_CPUS_EXCLUSIVE": "{b}", "CMK_CPUS_SHARED": "{a}"}),
    Case("shared-of-core-and-shared", ["--pool=shared", "--", "sh", "-c", SCRIPT], 0,
         stdout=shows("{a}", "{a}", "{ma}"), env={"CMK_CPUS_EXCLUSIVE": "{b}", "CMK_CPUS_SHARED": "{a}"}),
    Case("no-affinity-pins-nothing", ["--pool=exclusive", "--no-affinity", "sh", "--", "-c", SCRIPT], 0,
         stdout=shows("{affinity}", "{b}", "{mb}"), env={"CMK_CPUS_EXCLUSIVE": "{b}"}),
    Case("option-between-command-and-dashes", ["--pool=exclusive", "sh", "--no-affinity", "--", "-c", SCRIPT], 0,
         stdout=shows("{affinity}", "{b}", "{mb}"), env={"CMK_CPUS_EXCLUSIVE": "{b}"}),
    Case("workload-exit-status-is-returned", ["--pool=shared", "sh", "--", "-c", "exit 7"], 7,
         env={"CMK_CPUS_SHARED": "{a}"}),
    Case("args-after-dashes-untouched", ["--pool=shared", "sh", "--", "-c", 'echo "$@"', "x", "--pool=y", "--"], 0,
         stdout="--pool=y --\n", env={"CMK_CPUS_SHARED": "{a}"}),
    # --- --socket-id: the pool's CPUs on that package, from sysfs ---
    Case("socket-1-of-two", ["--socket-id=1", "--pool=shared", "sh", "--", "-c", SCRIPT], 0,
         stdout=shows("{b}", "{b}", "{mb}"), env={"CMK_CPUS_SHARED": "{a},{b}", "CMK_SYSFS_ROOT": "{tmp}/sockets"}),
    Case("socket-0-of-two", ["--socket-id", "0", "--pool=exclusive", "--", "sh", "-c", SCRIPT], 0,
         stdout=shows("{a}", "{a}", "{ma}"), env={"CMK_CPUS_EXCLUSIVE": "{a},{b}", "CMK_SYSFS_ROOT": "{tmp}/sockets"}),
    Case("socket-any", ["--socket-id=-1", "--pool=shared", "sh", "--", "-c", SCRIPT], 0,
         stdout=shows("{ab}", "{a},{b}", "{mab}"), env={"CMK_CPUS_SHARED": "{a},{b}", "CMK_SYSFS_ROOT": "/nonexistent"}),
    Case("socket-ignored-for-infra", ["--socket-id=1", "--pool=infra", "sh", "--", "-c", SCRIPT], 0,
         stdout=shows("{ab}", "{a},{b}", "{mab}"), env={"CMK_CPUS_INFRA": "{a},{b}", "CMK_SYSFS_ROOT": "/nonexistent"}),
    Case("socket-none-there", ["--socket-id=1", "--pool=shared", "true"], 7,
         E + "none of the shared pool's CPUs ({a}) is on socket 1 (they are on socket 0): "
         "use one of those with --socket-id, or -1 for any",
         env={"CMK_CPUS_SHARED": "{a}", "CMK_SYSFS_ROOT": "{tmp}/sockets"}),
    Case("socket-sysfs-missing", ["--socket-id=0", "--pool=shared", "true"], 7,
         E + "cannot read the socket of CPU {a} from /nonexistent/devices/system/cpu/cpu{a}/topology/"
         "physical_package_id: no such file or directory" + NO_SYSFS,
         env={"CMK_CPUS_SHARED": "{a}", "CMK_SYSFS_ROOT": "/nonexistent"}),
    Case("socket-sysfs-garbage", ["--socket-id=0", "--pool=shared", "true"], 7,
         E + "cannot read the socket of CPU {a} from {tmp}/sys/devices/system/cpu/cpu{a}/topology/"
         "physical_package_id: 'x?y' is not a number" + NO_SYSFS,
         env={"CMK_CPUS_SHARED": "{a}", "CMK_SYSFS_ROOT": "{tmp}/sys"}),
    # --- usage errors: status 2 ---
    Case("help", ["--help"], 0, stdout=HELP),
    Case("help-wins", ["--pool=gold", "-h", "x"], 0, stdout=HELP),
    Case("missing-pool", ["true"], 2,
         E + "missing --pool=POOL (one of: exclusive, exclusive-non-isolcpus, shared, infra)" + SEE_HELP),
    Case("missing-command", ["--pool=shared"], 2, E + "missing COMMAND to run" + SEE_HELP),
    Case("missing-command-after-dashes", ["--pool=shared", "--"], 2, E + "missing COMMAND to run" + SEE_HELP),
    Case("empty-command", ["--pool=shared", "--", ""], 2, E + "missing COMMAND to run" + SEE_HELP),
    Case("unknown-option", ["--cpus=3", "--pool=shared", "true"], 2, E + "unknown option '--cpus'" + SEE_HELP),
    Case("unknown-short-option-after-command", ["--pool=shared", "ls", "-l"], 2,
         E + "unknown option '-l'" + AFTER + SEE_HELP),
    Case("argument-without-dashes", ["--pool=shared", "sleep", "inf"], 2,
         E + "unexpected argument 'inf' after COMMAND 'sleep'" + AFTER + SEE_HELP),
    Case("option-needs-value", ["--pool"], 2, E + "option --pool needs a value" + SEE_HELP),
    Case("flag-takes-no-value", ["--no-affinity=yes", "--pool=shared", "true"], 2,
         E + "option --no-affinity takes no value" + SEE_HELP),
    Case("socket-id-not-a-number", ["--socket-id=one", "--pool=shared", "true"], 2,
         E + "--socket-id must be a socket number or -1 for any socket, not 'one'" + SEE_HELP),
    Case("socket-id-below-minus-one", ["--socket-id=-2", "--pool=shared", "true"], 2,
         E + "--socket-id must be a socket number or -1 for any socket, not '-2'" + SEE_HELP),
    # --- the pool and its CPUs ---
    Case("unknown-pool", ["--pool=gold", "true"], 3,
         E + "unknown pool 'gold': choose one of exclusive, exclusive-non-isolcpus, shared, infra"),
    Case("no-exclusive-cpus", ["--pool=exclusive", "--namespace=cmk-namespace", "sleep", "--", "inf"], 4,
         E + "this container holds no exclusive CPUs (CMK_CPUS_EXCLUSIVE is not set): "
         "request cmk.intel.com/exclusive-cores in resources.limits"),
    Case("empty-shared-cpus", ["--pool=shared", "true"], 4,
         E + "this container holds no shared CPUs (CMK_CPUS_SHARED is empty): "
         "request cmk.intel.com/shared in resources.limits", env={"CMK_CPUS_SHARED": ""}),
    Case("no-non-isolcpus-cpus", ["--pool=exclusive-non-isolcpus", "true"], 4,
         E + "this container holds no exclusive-non-isolcpus CPUs (CMK_CPUS_EXCLUSIVE_NON_ISOLCPUS is not set): "
         "request cmk.intel.com/exclusive-non-isolcpus-cores in resources.limits"),
    Case("malformed-word", ["--pool=shared", "true"], 5,
         E + "CMK_CPUS_SHARED='1,x' is not a cpu list: 'x' is not a CPU number" + HINT, env={"CMK_CPUS_SHARED": "1,x"}),
    Case("malformed-empty-entry", ["--pool=infra", "true"], 5,
         E + "CMK_CPUS_INFRA='0,,1' is not a cpu list: empty entry between commas" + HINT,
         env={"CMK_CPUS_INFRA": "0,,1"}),
    Case("malformed-trailing-comma", ["--pool=infra", "true"], 5,
         E + "CMK_CPUS_INFRA='0,' is not a cpu list: empty entry between commas" + HINT,
         env={"CMK_CPUS_INFRA": "0,"}),
    Case("malformed-backwards", ["--pool=exclusive", "true"], 5,
         E + "CMK_CPUS_EXCLUSIVE='1-0' is not a cpu list: range '1-0' runs backwards" + HINT,
         env={"CMK_CPUS_EXCLUSIVE": "1-0"}),
    Case("malformed-open-range", ["--pool=exclusive", "true"], 5,
         E + "CMK_CPUS_EXCLUSIVE='1-' is not a cpu list: '' is not a CPU number" + HINT,
         env={"CMK_CPUS_EXCLUSIVE": "1-"}),
    Case("malformed-out-of-range", ["--pool=exclusive", "true"], 5,
         E + "CMK_CPUS_EXCLUSIVE='9000' is not a cpu list: CPU 9000 is out of range (0-8191)" + HINT,
         env={"CMK_CPUS_EXCLUSIVE": "9000"}),
    Case("malformed-space-and-control-char", ["--pool=exclusive", "true"], 5,
         E + "CMK_CPUS_EXCLUSIVE='0, 1?' is not a cpu list: ' 1?' is not a CPU number" + HINT,
         env={"CMK_CPUS_EXCLUSIVE": "0, 1\x01"}),
    Case("cpus-not-allowed", ["--pool=shared", "true"], 6,
         E + "CPUs 4000-4001 of the shared pool are not allowed in this container (allowed: {cpuset})",
         env={"CMK_CPUS_SHARED": "{a},4000-4001"}),
    Case("cpu-not-allowed-even-with-no-affinity", ["--no-affinity", "--pool=exclusive", "true"], 6,
         E + "CPU 4000 of the exclusive pool is not allowed in this container (allowed: {cpuset})",
         env={"CMK_CPUS_EXCLUSIVE": "4000"}),
    # --- the command: 127 not found, 126 not executable, as shells ---
    Case("command-not-in-path", ["--pool=shared", "no-such-command"], 127,
         E + "no-such-command: command not found (searched PATH={tmp}/empty:{tmp}/noexec)",
         env={"CMK_CPUS_SHARED": "{a}", "PATH": "{tmp}/empty:{tmp}/noexec"}),
    Case("command-with-empty-path", ["--pool=shared", "no-such-command"], 127,
         E + "no-such-command: command not found (searched PATH=)",
         env={"CMK_CPUS_SHARED": "{a}", "PATH": ""}),
    Case("command-path-missing", ["--pool=shared", "/nonexistent/cmd"], 127,
         E + "/nonexistent/cmd: no such file or directory", env={"CMK_CPUS_SHARED": "{a}"}),
    Case("command-path-through-a-file", ["--pool=shared", "/etc/passwd/cmd"], 127,
         E + "/etc/passwd/cmd: not a directory", env={"CMK_CPUS_SHARED": "{a}"}),
    Case("command-not-executable", ["--pool=shared", "--", "{tmp}/noexec/true"], 126,
         E + "{tmp}/noexec/true: cannot execute: permission denied", env={"CMK_CPUS_SHARED": "{a}"}),
    Case("command-in-path-not-executable", ["--pool=shared", "true"], 126,
         E + "true: cannot execute: permission denied", env={"CMK_CPUS_SHARED": "{a}", "PATH": "{tmp}/noexec"}),
    Case("path-search-skips-non-executable", ["--pool=shared", "true"], 0,
         env={"CMK_CPUS_SHARED": "{a}", "PATH": "{tmp}/noexec:/usr/bin:/bin"}),
    Case("command-is-a-directory", ["--pool=shared", "{tmp}/empty"], 126,
         E + "{tmp}/empty: cannot execute: permission denied", env={"CMK_CPUS_SHARED": "{a}"}),
    Case("command-not-a-program", ["--pool=shared", "{tmp}/garbage"], 126,
         E + "{tmp}/garbage: cannot execute: exec format error", env={"CMK_CPUS_SHARED": "{a}"}),
]


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Files the cases refer to as {tmp}: a non-executable 'true', a non-program, a bad sysfs."""
    root = tmp_path_factory.mktemp("isolate")
    (root / "empty").mkdir()
    (root / "noexec").mkdir()
    (root / "noexec" / "true").write_text("#!/bin/sh\nexit 0\n")
    os.chmod(root / "noexec" / "true", 0o644)
    (root / "garbage").write_bytes(b"\x00\x01\x02 not a program\n")
    os.chmod(root / "garbage", 0o755)
    topology = root / "sys" / "devices" / "system" / "cpu" / f"cpu{A}" / "topology"
    topology.mkdir(parents=True)
    (topology / "physical_package_id").write_bytes(b"x\x02y\n")
    for cpu, package in ((A, "0"), (B, "1")):  # CPU A on socket 0, CPU B on socket 1
        ids = root / "sockets" / "devices" / "system" / "cpu" / f"cpu{cpu}" / "topology"
        ids.mkdir(parents=True)
        (ids / "physical_package_id").write_text(package + "\n")
    return root


INHERITED = {"own-affinity": [], "inherited-one-cpu": on_cpus(str(A))}
CPUS = {"{a}": str(A), "{b}": str(B), "{ab}": format_cpu_list({A, B}), "{ma}": format_cpu_mask({A}),
        "{mb}": format_cpu_mask({B}), "{mab}": format_cpu_mask({A, B})}


def fill(text: str, tmp: Path, affinity: str) -> str:
    for token, value in CPUS.items():
        text = text.replace(token, value)
    return text.replace("{tmp}", str(tmp)).replace("{cpuset}", cpuset_here()).replace("{affinity}", affinity)


@pytest.mark.parametrize("inherited", INHERITED)
@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_isolate(pinner: Pinner, case: Case, tmp: Path, inherited: str) -> None:
    launcher = INHERITED[inherited]
    affinity = str(A) if launcher else affinity_here()
    env = {name: fill(value, tmp, affinity) for name, value in case.env.items()}
    result = pinner.run([fill(arg, tmp, affinity) for arg in case.args], env, launcher)
    expected_stderr = fill(case.stderr + "\n" if case.stderr else "", tmp, affinity)
    assert (result.returncode, result.stderr) == (case.status, expected_stderr)
    if case.stdout is not None:
        assert result.stdout == fill(case.stdout, tmp, affinity)


def test_the_table_exercises_every_exit_status_of_the_contract() -> None:
    """A status added to ``IsolateExit`` without a case here would go unchecked.

    AFFINITY alone needs the cpuset to change between the check and the pin.
    """
    assert {case.status for case in CASES} | {IsolateExit.AFFINITY} == set(exit_table(IsolateExit).values())
