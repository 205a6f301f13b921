"""One fixture file per malformed input: ``cmk hook`` exits with its status and one line, and confines nothing.

Every case runs the real static binary with a live process in a cpuset
cgroup of its own as the container; after each, that cgroup's CPUs and the
process's affinity are unchanged (a failed hook never half-confines). The
fixtures and their placeholders are described in ``hook_fixtures/README.md``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from deviceplugin.model import hookcontract as hook
from deviceplugin.model.pinnercontract import LIST_HINT, HookExit
from tests.support.hookrun import (
    cmk_hook_entry,
    cpus_allowed,
    cpuset_cgroup,
    process_in,
    read_cpus,
    run_hook,
    state,
)

FIXTURES = Path(__file__).resolve().parent / "hook_fixtures"
E = "cmk hook: error: "
STATE = "the OCI state on stdin"
CONFIG = "the container's config {bundle}/config.json"
NOT_LISTED = (E + "this hook's --cpus=1 is not in the createRuntime hooks of " + CONFIG
              + ": the runtime runs the hooks it wrote there; " + hook.NO_CPUS_HINT)
ENTRY = E + CONFIG + ": hooks.createRuntime[0] (cmk hook): "


def not_a_list(value: str, detail: str, where: str = ENTRY) -> str:
    return f"{where}--cpus='{value}' is not a cpu list: {detail} ({LIST_HINT})"


@dataclass(frozen=True)
class Case:
    id: str
    status: int
    message: str  # "{pid}", "{bundle}", "{proc}", "{tmp}", "{cgroup}", "{parent}", "{parent_cpus}" are filled in
    state: str = "valid"  # state/<name>.json
    config: str | None = "cpus-1"  # config/<name>.json; None: the bundle has no config.json
    proc: str | None = None  # proc/<name>/ as --proc-root; None: the real /proc
    args: tuple[str, ...] = ("--cpus=1",)  # the hook's own argv, as the CDI device gives it


#: What a pod spec can put in its container's config.json (env, args, passthrough annotations) and hook
#: entries that only look like ours: none of it is a channel, with or without a trusted entry beside it.
FORGED = ("forged-env", "forged-process-args", "forged-annotations", "forged-other-stage", "forged-hook-name")

CASES = [
    # --- the OCI state on stdin ---
    Case("state-broken-json", HookExit.STATE, E + STATE + " is not valid JSON: expected ',' or '}' at its end",
         state="broken"),
    Case("state-empty", HookExit.STATE, E + STATE + " is not valid JSON: expected a JSON value at its end (it is empty)",
         state="empty"),
    Case("state-bad-escape", HookExit.STATE,
         E + STATE + " is not valid JSON: expected one of \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX at byte 10",
         state="bad-escape"),
    Case("state-trailing-garbage", HookExit.STATE,
         E + STATE + " is not valid JSON: expected the end of the input after the value at byte 27",
         state="trailing-garbage"),
    Case("state-too-deep", HookExit.STATE,
         E + STATE + " is not valid JSON: nesting deeper than 128 levels at byte 128", state="too-deep"),
    Case("state-control-char", HookExit.STATE,
         E + STATE + " is not valid JSON: a raw control character inside a string at byte 9", state="control-char"),
    Case("state-leading-zero", HookExit.STATE, E + STATE + " is not valid JSON: expected ',' or '}' at byte 9",
         state="leading-zero"),
    Case("state-not-object", HookExit.STATE,
         E + STATE + " is an array, not an object (cmk hook runs as an OCI createRuntime hook; the runtime writes "
         "the state)", state="not-object"),
    Case("state-no-pid", HookExit.STATE,
         E + STATE + " has no \"pid\": run cmk hook at createRuntime, once the container's process exists",
         state="no-pid"),
    Case("state-pid-zero", HookExit.STATE,
         E + STATE + " has no \"pid\": run cmk hook at createRuntime, once the container's process exists",
         state="pid-zero"),
    Case("state-pid-string", HookExit.STATE, E + "\"pid\" in " + STATE + " is not a process ID: a string",
         state="pid-string"),
    Case("state-pid-negative", HookExit.STATE, E + "\"pid\" in " + STATE + " is not a process ID: -5",
         state="pid-negative"),
    Case("state-no-bundle", HookExit.STATE,
         E + STATE + " has no \"bundle\" directory (the container's config.json is read from it)", state="no-bundle"),
    Case("state-pid-gone", HookExit.GONE,
         E + "the container's process 4194304 is gone (/proc/4194304/cgroup does not exist): it exited before its "
         "start hook ran", state="gone"),
    # --- the container's config.json ---
    Case("config-missing", HookExit.CONFIG, E + "cannot read " + CONFIG + ": no such file or directory", config=None),
    Case("config-broken-json", HookExit.CONFIG, E + CONFIG + " is not valid JSON: expected ',' or '}' at its end",
         config="broken"),
    Case("config-hooks-not-object", HookExit.CONFIG, E + CONFIG + ": hooks is not an object",
         config="hooks-not-object"),
    Case("config-create-runtime-not-array", HookExit.CONFIG, E + CONFIG + ": hooks.createRuntime is not an array",
         config="create-runtime-not-array"),
    Case("config-hook-entry-not-object", HookExit.CONFIG, E + CONFIG + ": hooks.createRuntime[0] is not an object",
         config="hook-entry-not-object"),
    Case("config-hook-args-not-array", HookExit.CONFIG, E + CONFIG + ": hooks.createRuntime[0].args is not an array",
         config="hook-args-not-array"),
    # --- the trusted channel missing: no --cpus, or config.json lacks this hook's entry ---
    Case("own-no-cpus", HookExit.NO_CPUS, E + "no --cpus=LIST: " + hook.NO_CPUS_HINT, args=()),
    Case("own-no-cpus-with-roots", HookExit.NO_CPUS, E + "no --cpus=LIST: " + hook.NO_CPUS_HINT,
         args=("--proc-root=/proc",)),
    *(Case(f"missing-{name}", HookExit.NO_CPUS, NOT_LISTED, config=name) for name in (
        "no-hooks", "no-process-no-hooks", "hooks-null", "other-hooks-only", "cmk-hook-without-cpus",
        "own-cpus-not-listed", "own-cpus-a-subset-only")),
    *(Case(name, HookExit.NO_CPUS, NOT_LISTED, config=name) for name in FORGED),
    # --- the trusted channel malformed: this hook's own --cpus ---
    Case("own-cpus-letter", HookExit.MALFORMED, not_a_list("1,x", "'x' is not a CPU number", E + "this hook's "),
         args=("--cpus=1,x",)),
    Case("own-cpus-empty", HookExit.MALFORMED, not_a_list("", "empty entry between commas", E + "this hook's "),
         args=("--cpus=",)),
    Case("own-cpus-non-ascii-digit", HookExit.MALFORMED,
         not_a_list("??", "'??' is not a CPU number", E + "this hook's "), args=("--cpus=\u0663",)),
    Case("own-cpus-out-of-range", HookExit.MALFORMED,
         not_a_list("9000", "CPU 9000 is out of range (0-8191)", E + "this hook's "), args=("--cpus", "9000")),
    Case("own-cpus-twice", HookExit.USAGE, E + "option --cpus is given twice (see 'cmk hook --help')",
         args=("--cpus=1", "--cpus=1")),
    Case("own-cpus-needs-value", HookExit.USAGE, E + "option --cpus needs a value (see 'cmk hook --help')",
         args=("--cpus",)),
    # --- the trusted channel malformed: another cmk hook entry in config.json ---
    *(Case(f"entry-cpus-{name}", HookExit.MALFORMED, not_a_list(value, detail), config=f"entry-cpus-{name}")
      for name, value, detail in [
          ("letter", "1,x", "'x' is not a CPU number"),
          ("empty", "", "empty entry between commas"),
          ("plus", "+1", "'+1' is not a CPU number"),
          ("underscore", "1_0", "'1_0' is not a CPU number"),
          ("arabic-digit", "??", "'??' is not a CPU number"),  # U+0663, two bytes shown as '?'
          ("fullwidth-digit", "???", "'???' is not a CPU number"),  # U+FF11, three bytes
          ("out-of-range", "8192", "CPU 8192 is out of range (0-8191)"),
          ("too-many-digits", "1" * 5000, f"'{'1' * 5000}' is not a CPU number"),
          ("backwards", "3-1", "range '3-1' runs backwards"),
          ("space", " 1", "' 1' is not a CPU number"),
          ("trailing-comma", "1,", "empty entry between commas"),
      ]),
    Case("entry-cpus-twice", HookExit.MALFORMED, ENTRY + "option --cpus is given twice", config="entry-cpus-twice"),
    Case("entry-cpus-needs-value", HookExit.MALFORMED, ENTRY + "option --cpus needs a value",
         config="entry-cpus-needs-value"),
    Case("entry-unknown-option", HookExit.MALFORMED, ENTRY + "unknown option '--pool'", config="entry-unknown-option"),
    Case("entry-arg-number", HookExit.MALFORMED, ENTRY + "args[3] is a number, not a string",
         config="entry-arg-number"),
    Case("entry-arg-nul", HookExit.MALFORMED, ENTRY + "args[2] holds a NUL byte", config="entry-arg-nul"),
    Case("entry-help", HookExit.MALFORMED, ENTRY + "'--help' is not an option of a hook entry", config="entry-help"),
    Case("cpus-outside-parent", HookExit.OUTSIDE,
         E + "the container's CPUs 1,4000 are not within its parent cgroup's CPUs {parent_cpus} (CPU 4000 outside, "
         "from {parent}/cpuset.effective_cpus): the pools' CPUs must stay within the pods' cgroup",
         config="outside-parent", args=("--cpus=1,4000",)),
    # --- the cgroup ---
    Case("cgroup-no-cpuset-line", HookExit.NO_CGROUP,
         E + "process {pid} is in no cpuset cgroup ({proc}/{pid}/cgroup has neither a cpuset nor a 0:: line): "
         "the kernel needs the cpuset controller", proc="no-cpuset"),
    Case("cgroup-root-refused", HookExit.NO_CGROUP,
         E + "process {pid} is in the root cpuset cgroup: refusing to confine the whole host (run the container in a "
         "cgroup of its own)", proc="root-cgroup"),
    Case("cgroup-v2-not-mounted", HookExit.NO_CGROUP,
         E + "no cgroup2 hierarchy holding process {pid}'s cgroup /kubepods/pod1/ctr is mounted (read "
         "{proc}/self/mountinfo): mount it, or name it with --cgroup-root", proc="not-mounted"),
    Case("cgroup-directory-missing", HookExit.NO_CGROUP,
         E + "the cpuset cgroup of process {pid}, {tmp}/empty{cgroup_path}, does not exist",
         args=("--cpus=1", "--cgroup-root={tmp}/empty")),
    Case("cgroup-v2-cpuset-not-enabled", HookExit.NO_CGROUP,
         E + "the cgroup {tmp}/v2/kubepods/pod1/ctr has no cpuset.cpus: enable the cpuset controller in its parent's "
         "cgroup.subtree_control", proc="v2", args=("--cpus=1", "--cgroup-root", "{tmp}/v2")),
    # --- the command line ---
    Case("usage-unknown-option", HookExit.USAGE,
         E + "unknown option '--pid': the OCI state comes on stdin (see 'cmk hook --help')", args=("--pid=1",)),
    Case("usage-argument", HookExit.USAGE,
         E + "unexpected argument 'state.json': the OCI state comes on stdin (see 'cmk hook --help')",
         args=("state.json",)),
    Case("usage-option-needs-value", HookExit.USAGE,
         E + "option --proc-root needs a value (see 'cmk hook --help')", args=("--proc-root",)),
]


@dataclass(frozen=True)
class Container:
    pid: int
    cgroup: Path


@pytest.fixture(scope="module")
def container() -> Iterator[Container]:
    """A live process in a cpuset cgroup of its own: what runc leaves for the hook."""
    with cpuset_cgroup() as cgroup, process_in(cgroup) as proc:
        yield Container(proc.pid, cgroup)


def test_every_state_and_config_fixture_has_a_case() -> None:
    used = {f"state/{c.state}.json" for c in CASES} | {f"config/{c.config}.json" for c in CASES if c.config}
    used |= {f"proc/{c.proc}" for c in CASES if c.proc}
    present = {str(p.relative_to(FIXTURES)) for p in FIXTURES.glob("state/*.json")}
    present |= {str(p.relative_to(FIXTURES)) for p in FIXTURES.glob("config/*.json")}
    present |= {str(p.relative_to(FIXTURES)) for p in FIXTURES.glob("proc/*")}
    assert present == used


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_malformed_input(native_cmk: Path, container: Container, tmp_path: Path, case: Case) -> None:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (tmp_path / "empty").mkdir()
    (tmp_path / "v2" / "kubepods" / "pod1" / "ctr").mkdir(parents=True)
    if case.config:
        shutil.copy(FIXTURES / "config" / f"{case.config}.json", bundle / "config.json")
    proc_root = "/proc"
    if case.proc:
        proc_root = str(tmp_path / "proc")
        shutil.copytree(FIXTURES / "proc" / case.proc, proc_root)
        (Path(proc_root) / "PID").rename(Path(proc_root) / str(container.pid))
    parent = container.cgroup.parent
    values = {
        "{pid}": str(container.pid), "{bundle}": str(bundle), "{proc}": proc_root, "{tmp}": str(tmp_path),
        "{cgroup_path}": f"/{container.cgroup.name}",
        "{parent_cpus}": read_cpus(parent / "cpuset.effective_cpus"), "{parent}": str(parent),
    }

    def fill(text: str) -> str:
        for key, value in values.items():
            text = text.replace(key, value)
        return text

    stdin = fill((FIXTURES / "state" / f"{case.state}.json").read_text())
    args = [fill(a) for a in case.args] + ([f"--proc-root={proc_root}"] if case.proc else [])
    before = (read_cpus(container.cgroup / "cpuset.cpus"), cpus_allowed(container.pid))
    result = run_hook(native_cmk, stdin, *args)
    assert (result.returncode, result.stderr.decode(), result.stdout) == (case.status, fill(case.message) + "\n", b"")
    assert (read_cpus(container.cgroup / "cpuset.cpus"), cpus_allowed(container.pid)) == before


def test_a_state_beyond_the_size_limit_is_refused(native_cmk: Path) -> None:
    """Bounded memory: the hook never holds more than the limit of whatever is piped in."""
    proc = subprocess.run([str(native_cmk), "hook", "--cpus=1"], input=b" " * (hook.MAX_JSON_BYTES + 1), capture_output=True,
                          timeout=60, check=False)
    assert (proc.returncode, proc.stderr.decode()) == (
        HookExit.STATE, f"{E}cannot read {STATE}: it is larger than {hook.MAX_JSON_BYTES} bytes\n")


@pytest.mark.parametrize("name", FORGED)
def test_a_forgery_beside_the_trusted_entry_adds_no_cpu(native_cmk: Path, container: Container, tmp_path: Path,
                                                        name: str) -> None:
    """The forged fixtures plus the CDI device's own entry: confined to that entry's CPUs, nothing more."""
    config = json.loads((FIXTURES / "config" / f"{name}.json").read_text())
    hooks = config.setdefault("hooks", {})
    hooks.setdefault("createRuntime", []).append(cmk_hook_entry("1"))
    (tmp_path / "config.json").write_text(json.dumps(config))
    try:
        result = run_hook(native_cmk, state(container.pid, tmp_path), "--cpus=1")
        assert (result.returncode, result.stderr) == (0, b"")
        assert (read_cpus(container.cgroup / "cpuset.cpus"), cpus_allowed(container.pid)) == ("1", "1")
    finally:  # the module's container goes back to its parent's CPUs for the next case
        (container.cgroup / "cpuset.cpus").write_text(read_cpus(container.cgroup.parent / "cpuset.cpus"))
        os.sched_setaffinity(container.pid, os.sched_getaffinity(0))
