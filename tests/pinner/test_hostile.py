"""Hostile inputs to the pinner and the hook: every one is refused fast, in one line, with no crash.

Each case runs against the static binary and the same C units built once with
AddressSanitizer and UBSan (``pinner.build.build_sanitized``; if that build
cannot be made the tests fail, never skip). Every case must exit non-zero
within a second (a case that times out is run once more, so a loaded machine
is not mistaken for a hang; a hang hangs twice), print exactly one stderr line
and nothing else, with no traceback and no sanitizer report. Leak checking is
off: these are one-shot processes that exit at once, and what they hold at
exit is freed by the kernel.

Surfaces: ``isolate``'s argv, env and sysfs tree; the hook's argv, OCI state
on stdin, config.json, procfs tree and cgroup tree. ``SURFACES`` counts them.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from deviceplugin.model import hookcontract as cmk_hook
from pinner.build import BuildError, build_sanitized
from tests.pinner.conftest import BASE_ENV
from tests.support.hookrun import cmk_hook_entry, process_in
from tests.support.native import ensure_native_pinner

#: "Within a second" is CPU time: on a loaded machine a fast refusal can still take seconds of wall time.
LIMIT_CPU_SECONDS = 1.0
#: A process still running after this much wall time is hung (a blocking read takes no CPU time).
HANG_SECONDS = 20.0
SANITIZER_ENV = {
    "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=0:exitcode=99:handle_abort=1",
    "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1:exitcode=98",
}
REPORTS = ("Sanitizer", "runtime error:", "Traceback", "Segmentation fault", "core dumped")
CPU = min(os.sched_getaffinity(0))  # one the test process may use
#: Placed where a case's files live; replaced before the run.
TMP = "{tmp}"
PID = "{pid}"


Setup = Callable[[Path], None]


def nothing(_: Path) -> None:
    pass


@dataclass(frozen=True)
class Case:
    surface: str
    id: str
    args: tuple[str, ...]  # after "isolate" / "hook"
    env: dict[str, str] = field(default_factory=dict)
    stdin: bytes = b""
    setup: Setup = nothing


# ---- helpers that build hostile trees --------------------------------------------------------------------------


def fifo(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)


def symlink(target: str) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.symlink_to(target)
    return make


def loop(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(path.name)


def directory(path: Path) -> None:
    path.mkdir(parents=True)


def content(data: bytes) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return make


def at(relative: str, make: Callable[[Path], None]) -> Setup:
    return lambda tmp: make(tmp / relative)


def both(*setups: Setup) -> Setup:
    def make(tmp: Path) -> None:
        for setup in setups:
            setup(tmp)
    return make


HOSTILE_FILES: dict[str, Callable[[Path], None]] = {
    "fifo": fifo,
    "dev-zero": symlink("/dev/zero"),
    "dev-null-link": symlink("/dev/null"),
    "directory": directory,
    "symlink-loop": loop,
    "dangling-symlink": symlink("/nonexistent/cmk"),
    "missing": lambda path: path.parent.mkdir(parents=True, exist_ok=True),
    "empty": content(b""),
    "nul-bytes": content(b"\0" * 64),
    "invalid-utf8": content(b"\xff\xfe\xfd\n"),
    "letters": content(b"abc\n"),
    "arabic-digit": content("\u0663\n".encode()),
    "fullwidth-digit": content("\uff10\n".encode()),
    "plus": content(b"+0\n"),
    "underscore": content(b"0_0\n"),
    "5000-digits": content(b"9" * 5000 + b"\n"),
    "too-large": content(b" " * (17 * 1024 * 1024)),
}


# ---- isolate ---------------------------------------------------------------------------------------------------

ENV = {"CMK_CPUS_EXCLUSIVE": str(CPU)}
CPU_VALUES = ["", ",", "1-", "-1", "0-99999999", "4294967296", "8192", "\u0663", "\uff11", "+1", "1_0", " 1", "1 ",
              "1,,2", "9" * 5000, "3-1", "0x1", "1e3", "1.0", "\u00b9", "0-1-2", "1;2", "\t", "1," * 5000,
              "\udcff", "1\udcff", "\u200b1"]  # a byte that is not UTF-8 (surrogate-escaped), a zero-width space
ISOLATE = [
    *(Case("isolate argv", f"argv-{i}", args, ENV) for i, args in enumerate([
        (), ("--pool",), ("--pool=",), ("--pool=nope", "true"), ("--pool=exclusive",), ("--pool=exclusive", ""),
        ("--pool=exclusive", "--no-affinity=1", "true"), ("--bogus",), ("-x",), ("--pool=exclusive", "a", "b"),
        ("--pool=exclusive", "--socket-id=+1", "true"), ("--pool=exclusive", "--socket-id=1_0", "true"),
        ("--pool=exclusive", "--socket-id=\u0663", "true"), ("--pool=exclusive", "--socket-id=\uff11", "true"),
        ("--pool=exclusive", "--socket-id=99999999999", "true"), ("--pool=exclusive", "--socket-id=-2", "true"),
        ("--pool=exclusive", "--socket-id=--", "true"), ("--pool=exclusive", "--socket-id=", "true"),
        ("--pool=exclusive", "--socket-id"), ("--pool=" + "x" * 100_000, "true"), ("--pool=\udcff", "true"),
        ("--pool=exclusive", "/nonexistent/" + "d" * 5000), ("--pool=exclusive", "--", "x" * 300),
        ("--pool=exclusive", "--", "/etc/passwd"), ("--pool=exclusive", "--", "/"),
        ("--" + "x" * 100_000,),
    ])),
    *(Case("isolate env", f"cpus-{i}", ("--pool=exclusive", "true"), {"CMK_CPUS_EXCLUSIVE": value})
      for i, value in enumerate(CPU_VALUES)),
    Case("isolate env", "cpus-not-allowed", ("--pool=exclusive", "true"), {"CMK_CPUS_EXCLUSIVE": "8191"}),
    Case("isolate env", "path-empty", ("--pool=exclusive", "nosuchcommand"), {**ENV, "PATH": ""}),
    Case("isolate env", "path-huge", ("--pool=exclusive", "nosuchcommand"), {**ENV, "PATH": "/x:" * 30_000}),
    Case("isolate env", "path-colons", ("--pool=exclusive", "nosuchcommand"), {**ENV, "PATH": ":" * 1000}),
    Case("isolate env", "path-long-dir", ("--pool=exclusive", "nosuchcommand"), {**ENV, "PATH": "/" + "d" * 5000}),
    *(Case("isolate sysfs", f"package-{name}", ("--pool=exclusive", "--socket-id=0", "true"),
           {**ENV, "CMK_SYSFS_ROOT": TMP + "/sys"},
           setup=at(f"sys/devices/system/cpu/cpu{CPU}/topology/physical_package_id", make))
      for name, make in HOSTILE_FILES.items()),
    *(Case("isolate sysfs", f"package-list-{name}", ("--pool=exclusive", "--socket-id=0", "true"),
           {**ENV, "CMK_SYSFS_ROOT": TMP + "/sys"},
           setup=both(at(f"sys/devices/system/cpu/cpu{CPU}/topology/physical_package_id", content(b"-1\n")),
                      at(f"sys/devices/system/cpu/cpu{CPU}/topology/core_siblings_list", make)))
      for name, make in HOSTILE_FILES.items()),
    *(Case("isolate sysfs", f"online-{name}", ("--pool=exclusive", "--socket-id=0", "true"),
           {**ENV, "CMK_SYSFS_ROOT": TMP + "/sys"},
           setup=both(at(f"sys/devices/system/cpu/cpu{CPU}/topology/physical_package_id", content(b"-1\n")),
                      at("sys/devices/system/cpu/online", make)))
      for name, make in HOSTILE_FILES.items()),
    *(Case("isolate sysfs", f"root-{name}", ("--pool=exclusive", "--socket-id=0", "true"),
           {**ENV, "CMK_SYSFS_ROOT": TMP + "/root"}, setup=at("root", make))
      for name, make in {"fifo": fifo, "file": content(b"0\n"), "loop": loop, "missing": HOSTILE_FILES["missing"],
                         "dev-zero": symlink("/dev/zero")}.items()),
    Case("isolate sysfs", "root-too-long", ("--pool=exclusive", "--socket-id=0", "true"),
         {**ENV, "CMK_SYSFS_ROOT": "/" + "d/" * 3000}),
    Case("isolate sysfs", "root-component-too-long", ("--pool=exclusive", "--socket-id=0", "true"),
         {**ENV, "CMK_SYSFS_ROOT": "/" + "d" * 300}),
]


# ---- hook ------------------------------------------------------------------------------------------------------

def state(bundle: str = TMP + "/bundle", pid: str = PID) -> bytes:
    return ('{"ociVersion": "1.0.2", "id": "c", "status": "creating", "pid": ' + pid
            + ', "bundle": ' + json.dumps(bundle) + "}").encode()


def config(hooks: object = None, **extra: object) -> bytes:
    body = {"ociVersion": "1.0.2", "process": {"args": ["sh"], "env": ["PATH=/bin"]},
            "hooks": {"createRuntime": [cmk_hook_entry("0")]} if hooks is None else hooks, **extra}
    return json.dumps(body).encode()


VALID = at("bundle/config.json", content(config()))
OWN = "--cpus=0"
PROC = "--proc-root=" + TMP + "/proc"
CGROUP = "--cgroup-root=" + TMP + "/cg"


def v2_tree(tmp: Path, parent: bytes = b"0\n") -> None:
    """A procfs stand-in naming a v2 cgroup /c, and its directory under {tmp}/cg."""
    (tmp / "cg" / "c").mkdir(parents=True, exist_ok=True)
    (tmp / "cg" / "cpuset.cpus.effective").write_bytes(parent)
    (tmp / "cg" / "c" / "cpuset.cpus").write_text("0\n")


def proc_cgroup(text: bytes) -> Setup:
    return at("proc/PID/cgroup", content(text))


HOOK = [
    *(Case("hook argv", f"argv-{i}", args, stdin=state(), setup=VALID) for i, args in enumerate([
        (), ("--cpus",), ("--cpus=",), ("--cpus=x",), ("--cpus=0", "--cpus=0"), ("--cpus=" + "9" * 5000,),
        ("--cpus=\u0663",), ("--cpus=+0",), ("--cpus=0_0",), ("--cpus=8192",), ("--cpus=0-99999999999",),
        ("--cpus=0", "extra"), ("--pid=1",), ("--cpus=0", "--proc-root"), ("--" + "x" * 100_000,),
        ("--cpus=0", "--proc-root=/" + "d/" * 3000), ("--cpus=\udcff",), ("--cpus=1,0",),
    ])),
    *(Case("hook state", f"state-{i}", (OWN,), stdin=data, setup=VALID) for i, data in enumerate([
        b"", b"\0" * 100, b"\xff\xfe", b"[" * 100_000, b'{"pid": ' + b"9" * 5000 + b"}", b" " * (17 * 1024 * 1024),
        b'{"pid": 1.5, "bundle": "/"}', b'{"pid": 1e3, "bundle": "/"}', b'{"pid": -0, "bundle": "/"}',
        b'{"pid": 99999999999, "bundle": "/"}', b'{"pid": 4194304, "bundle": "/"}', b'{"pid": true, "bundle": "/"}',
        b'{"pid": [1], "bundle": "/"}', b'{"pid": 1, "bundle": "\\u0000"}', b'{"pid": 1, "bundle": 7}',
        b'{"pid": 1, "bundle": ""}', b'"' + b"a" * 1_000_000, b'{"a": "\\ud800"}', b"nul\0l", b"\"\\u12\"",
        b'{"pid": 1, "bundle": "/x"}garbage', b"{" + b'"k": 1, ' * 100_000 + b'"pid": 0}',
        state(bundle="/" + "d/" * 3000), state(bundle=TMP + "/nonexistent"), state(bundle="/dev/null"),
        state(bundle="/proc/self/fd/0"),
    ])),
    *(Case("hook config", f"config-{name}", (OWN,), stdin=state(), setup=at("bundle/config.json", make))
      for name, make in HOSTILE_FILES.items()),
    *(Case("hook config", f"config-{i}", (OWN,), stdin=state(), setup=at("bundle/config.json", content(data)))
      for i, data in enumerate([
          b"[]", b"null", b'{"hooks": 1}', b'{"hooks": {"createRuntime": 1}}', b'{"hooks": {"createRuntime": [1]}}',
          config([]), config({"createRuntime": [{"args": "cmk"}]}), config({"createRuntime": [{"args": [1, 2]}]}),
          config({"createRuntime": [{"args": ["cmk", "hook", "--cpus=0", "--cpus=1"]}]}),
          config({"createRuntime": [{"args": ["cmk", "hook", "--cpus=" + "7" * 5000]}]}),
          config({"createRuntime": [cmk_hook_entry("1")]}),
          config({"createRuntime": [cmk_hook_entry("0"), cmk_hook_entry("0-x")]}),
          config({"createRuntime": [{"args": ["cmk", "hook", 7]}]}),
          config({"createRuntime": [{"args": ["cmk", "hook"]}]}),
          config({"createRuntime": [{"args": ["cmk", "hook", "--help"]}, cmk_hook_entry("0")]}),
          config(env=["CMK_CPUS_EXCLUSIVE=0-8191"], hooks={"prestart": [cmk_hook_entry("0")]}),
          b'{"hooks": ' * 200 + b"1" + b"}" * 200,
      ])),
    *(Case("hook proc", f"cgroup-{name}", (OWN, PROC), stdin=state(), setup=both(VALID, at("proc/PID/cgroup", make)))
      for name, make in HOSTILE_FILES.items()),
    *(Case("hook proc", f"cgroup-text-{i}", (OWN, PROC), stdin=state(), setup=both(VALID, proc_cgroup(data)))
      for i, data in enumerate([
          b"0::/\n", b"::\n", b"0:\n", b"0::" + b"/x" * 3000 + b"\n", b"12:cpuset\n", b":" * 10_000,
          b"0::/c\n" * 10_000, b"1:cpuset,cpuset:/nonexistent\n", b"0::/../../..\n",
      ])),
    *(Case("hook proc", f"mountinfo-{name}", (OWN, PROC), stdin=state(),
           setup=both(VALID, proc_cgroup(b"0::/c\n"), at("proc/self/mountinfo", make)))
      for name, make in HOSTILE_FILES.items()),
    *(Case("hook proc", f"mountinfo-text-{i}", (OWN, PROC), stdin=state(),
           setup=both(VALID, proc_cgroup(b"0::/c\n"), at("proc/self/mountinfo", content(data))))
      for i, data in enumerate([
          b"1 2 3 4 5 6 - cgroup2\n", b"- - - - - - - cgroup2 x y\n", b"1 1 0:1 / " + b"/d" * 3000 + b" rw - cgroup2 c rw\n",
          b"1 1 0:1 /other /mnt rw - cgroup2 c rw\n", b" " * 100_000 + b"\n", b"x " * 200 + b"\n",
          b"1 1 0:1 \\777 \\ rw - cgroup2 c rw\n",
      ])),
    *(Case("hook cgroup", f"cpuset-cpus-{name}", (OWN, PROC, CGROUP), stdin=state(),
           setup=both(VALID, proc_cgroup(b"0::/c\n"),
                      lambda tmp: (tmp / "cg" / "c").mkdir(parents=True),
                      lambda tmp: (tmp / "cg" / "cpuset.cpus.effective").write_text("0\n"),
                      at("cg/c/cpuset.cpus", make)))
      for name, make in HOSTILE_FILES.items() if name not in ("empty", "letters", "plus", "underscore", "nul-bytes",
                                                               "invalid-utf8", "arabic-digit", "fullwidth-digit",
                                                               "5000-digits", "too-large")),
    *(Case("hook cgroup", f"parent-{name}", (OWN, PROC, CGROUP), stdin=state(),
           setup=both(VALID, proc_cgroup(b"0::/c\n"), lambda tmp: (tmp / "cg" / "c").mkdir(parents=True),
                      lambda tmp: (tmp / "cg" / "c" / "cpuset.cpus").write_text(""),
                      at("cg/cpuset.cpus.effective", make)))
      for name, make in HOSTILE_FILES.items() if name != "empty"),
    Case("hook cgroup", "dir-symlink", (OWN, PROC, CGROUP), stdin=state(),
         setup=both(VALID, proc_cgroup(b"0::/c\n"), lambda tmp: v2_tree(tmp / "real"),
                    lambda tmp: (tmp / "cg").mkdir(), lambda tmp: (tmp / "cg" / "c").symlink_to(tmp / "real" / "cg" / "c"))),
    Case("hook cgroup", "dir-fifo", (OWN, PROC, CGROUP), stdin=state(),
         setup=both(VALID, proc_cgroup(b"0::/c\n"), at("cg/c", fifo))),
    *(Case("hook cgroup", f"confined-{name}", (OWN, PROC, CGROUP), stdin=state(),
           setup=both(VALID, proc_cgroup(b"0::/c\n"), v2_tree, at(f"cg/c/{cmk_hook.CONFINED_CGROUP}", make)))
      for name, make in {"symlink": symlink("/"), "fifo": fifo, "file": content(b"0\n")}.items()),
    Case("hook cgroup", "parent-outside", (OWN, PROC, CGROUP), stdin=state(),
         setup=both(VALID, proc_cgroup(b"0::/c\n"), lambda tmp: v2_tree(tmp, b"8191\n"))),
    Case("hook cgroup", "relative-without-slash", (OWN, PROC, "--cgroup-root="), stdin=state(),  # cwd is {tmp}
         setup=both(VALID, proc_cgroup(b"0::c\n"), at("c/cpuset.cpus", content(b"")))),
    Case("hook cgroup", "root-too-long", (OWN, PROC, "--cgroup-root=/" + "d/" * 3000), stdin=state(),
         setup=both(VALID, proc_cgroup(b"0::/c\n"))),
]

CASES = ISOLATE + HOOK
SURFACES = {surface: sum(1 for c in CASES if c.surface == surface) for surface in dict.fromkeys(c.surface for c in CASES)}


# ---- running ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def sanitized_cmk(tmp_path_factory: pytest.TempPathFactory) -> Path:
    output = tmp_path_factory.mktemp("asan") / "cmk"
    try:
        build_sanitized(output)
    except BuildError as err:
        pytest.fail(f"the hostile-input table needs the sanitizer build: {err}")
    return output


@pytest.fixture(scope="module")
def live_pid() -> Iterator[int]:
    """A process the hook may name: every case fails before touching it, and a test checks it stayed unpinned."""
    with process_in(None) as proc:
        before = os.sched_getaffinity(proc.pid)
        yield proc.pid
        assert os.sched_getaffinity(proc.pid) == before


def fill(text: str, tmp: Path, pid: int) -> str:
    return text.replace(TMP, str(tmp)).replace(PID, str(pid))


@dataclass(frozen=True)
class Run:
    returncode: int
    stdout: bytes
    stderr: bytes
    cpu_seconds: float


def run_once(argv: list[str], env: dict[str, str], stdin: bytes, cwd: Path) -> Run | None:
    """Run one case; None if it is still running after HANG_SECONDS (killed then).

    Its CPU time is the growth of this process's reaped-children usage: the
    tests run one case at a time, so no other child is reaped meanwhile.
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        done = subprocess.run(argv, input=stdin, env=env, cwd=cwd, capture_output=True, timeout=HANG_SECONDS,
                              check=False)
    except subprocess.TimeoutExpired:
        return None
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Run(done.returncode, done.stdout, done.stderr, cpu)


def check(case: Case, prefix: list[str], tmp: Path, pid: int, extra_env: dict[str, str] | None = None) -> None:
    case.setup(tmp)
    if (tmp / "proc" / "PID").exists():
        (tmp / "proc" / "PID").rename(tmp / "proc" / str(pid))
    argv = [*prefix, *(fill(a, tmp, pid) for a in case.args)]
    env = {**BASE_ENV, **{k: fill(v, tmp, pid) for k, v in case.env.items()}, **(extra_env or {})}
    stdin = fill(case.stdin.decode("latin-1"), tmp, pid).encode("latin-1")
    result = run_once(argv, env, stdin, tmp)
    assert result is not None, f"{case.id} hung: still running after {HANG_SECONDS} s"
    assert result.cpu_seconds < LIMIT_CPU_SECONDS, f"{case.id} took {result.cpu_seconds:.2f} s of CPU time"
    stderr = result.stderr.decode("utf-8", "replace")
    assert result.returncode not in (0, 98, 99) and result.returncode > 0, (result.returncode, stderr)
    assert not any(report in stderr for report in REPORTS), stderr
    assert stderr.endswith("\n") and stderr.count("\n") == 1 and ": error: " in stderr, stderr
    assert result.stdout == b""


def isolate_prefixes(request: pytest.FixtureRequest) -> dict[str, list[str]]:
    return {
        "native": [str(ensure_native_pinner()), "isolate"],
        "sanitized": [str(request.getfixturevalue("sanitized_cmk")), "isolate"],
    }


@pytest.mark.parametrize("how", ["native", "sanitized"])
@pytest.mark.parametrize("case", ISOLATE, ids=[f"{c.surface.split()[1]}-{c.id}" for c in ISOLATE])
def test_isolate_refuses_hostile_input(request: pytest.FixtureRequest, tmp_path: Path, live_pid: int, case: Case,
                                       how: str) -> None:
    check(case, isolate_prefixes(request)[how], tmp_path, live_pid, SANITIZER_ENV if how == "sanitized" else None)


@pytest.mark.parametrize("how", ["native", "sanitized"])
@pytest.mark.parametrize("case", HOOK, ids=[f"{c.surface.split()[1]}-{c.id}" for c in HOOK])
def test_hook_refuses_hostile_input(request: pytest.FixtureRequest, tmp_path: Path, live_pid: int, case: Case,
                                    how: str) -> None:
    binary = ensure_native_pinner() if how == "native" else request.getfixturevalue("sanitized_cmk")
    check(case, [str(binary), "hook"], tmp_path, live_pid, SANITIZER_ENV if how == "sanitized" else None)


def test_every_surface_has_cases() -> None:
    assert set(SURFACES) == {"isolate argv", "isolate env", "isolate sysfs", "hook argv", "hook state",
                             "hook config", "hook proc", "hook cgroup"}
    assert all(count >= 5 for count in SURFACES.values()), SURFACES
