"""Hostile inputs over every ``cmk`` command surface: 0 hangs, 0 tracebacks, 0 multi-line errors.

Each case is a real ``cmk`` process (forked by :mod:`tests.hostile.forkrun`)
with per-case limits (:data:`~tests.hostile.conftest.CPU_LIMIT`, and
:data:`~tests.hostile.conftest.LIMIT` to call it a hang); a table's
cases all run before it asserts, so a failure lists every bad case at once.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.hostile.conftest import Outcome, assert_clear_errors
from tests.hostile.inputs import (
    BAD_COUNTS,
    BAD_CPU_LISTS,
    BAD_INSTALL_DIRS,
    FILE_KINDS,
    NOBODY,
    plant,
)
from tests.support.topologies import fixture_copy

Cmk = Callable[..., Outcome]
XEON_D = "cmk-xeon_d"
ISOLCPUS = "0-3,8-11"


def roots(tmp: Path, name: str = XEON_D) -> list[str]:
    sysfs, procfs = fixture_copy(name, tmp, isolcpus=ISOLCPUS)
    return ["--sysfs-root", str(sysfs), "--procfs-root", str(procfs)]


def daemon_args(tmp: Path) -> list[str]:
    (tmp / "plugins").mkdir(exist_ok=True)
    return ["--kubelet-dir", str(tmp / "plugins"), "--cdi-dir", str(tmp / "cdi"), "--no-nfd", "--no-infra-record",
            "--pod-resources-socket", str(tmp / "no-kubelet.sock")]


def command_args(command: str, tmp: Path) -> list[str]:
    """A command line that would run (and, for the daemon, serve) were it not for the hostile part."""
    base = [command, *roots(tmp)]
    return base + daemon_args(tmp) if command == "device-plugin" else base


CONFIG_COMMANDS = ["device-plugin", "describe"]


@pytest.mark.parametrize("command", CONFIG_COMMANDS)
def test_config_file_of_every_hostile_kind(cmk: Cmk, shared_tmp: Path, command: str) -> None:
    outcomes, names = {}, {}
    for kind, uid in FILE_KINDS.items():
        case = shared_tmp / kind.replace("/", "_").replace(" ", "-")
        case.mkdir()
        config = plant(case / "config.yaml", kind)
        outcomes[kind] = cmk(*command_args(command, case), "--config", str(config), uid=uid)
        names[kind] = str(config)
    for kind, path in {"missing": "/nonexistent/cmk.yaml", "path too long": "/" + "x/" * 3000,
                       "name too long": "/tmp/" + "x" * 300, "newline in name": "/tmp/cmk\n.yaml"}.items():
        outcomes[kind] = cmk(*command_args(command, shared_tmp / "base"), "--config", path)
        (shared_tmp / "base").rename(shared_tmp / f"base-{len(outcomes)}")
    assert_clear_errors(outcomes, names)


#: YAML documents a config file might hold; each must be refused in one line.
BAD_CONFIGS: dict[str, str | bytes] = {
    "billion laughs": "a: &a [x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
                      "c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"
                      "e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\n"
                      "g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]\nh: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]\n",
    "alias of a count": "x: &n 3\nnum-exclusive-cores: *n\n",
    "anchor alone": "num-exclusive-cores: &n 3\n",
    "merge key": "<<: {num-exclusive-cores: 3}\n",
    "50,000 flow levels": "[" * 50000 + "]" * 50000,
    "3,000 block levels": "".join(" " * i + "a:\n" for i in range(3000)),
    "deep mapping value": "num-exclusive-cores: " + "[" * 100 + "]" * 100,
    "5,000 digits": "shared-slots: " + "9" * 5000 + "\n",
    "huge slots": "shared-slots: 99999999999999999999\n",
    "sexagesimal": "shared-slots: 1:50\n",
    "octal 010": "num-exclusive-cores: 010\n",
    "octal 0o10": "num-exclusive-cores: 0o10\n",
    "hex": "num-exclusive-cores: 0x10\n",
    "plus sign": "num-exclusive-cores: +1\n",
    "underscore": "infra-slots: 1_000\n",
    "arabic digit": "num-exclusive-cores: ٣\n",
    "fullwidth digit": "num-exclusive-cores: １\n",
    "quoted arabic digit": "num-exclusive-cores: '٣'\n",
    "float": "num-exclusive-cores: 1.0\n",
    "exponent": "shared-slots: 1e3\n",
    "negative": "num-shared-cores: -1\n",
    "infinity": "shared-slots: .inf\n",
    "yes as bool": "cdi: yes\n",
    "two-line scanner error": "num-exclusive-cores: 3\n\tbad: tab\n",
    "parser error": "a: [1, 2\nb: 3\n",
    "unclosed quote": "install-dir: '/opt/cmk\n",
    "python tag": "num-exclusive-cores: !!python/object/apply:os.system [true]\n",
    "binary tag": "install-dir: !!binary aGVsbG8=\n",
    "custom tag": "num-exclusive-cores: !count 3\n",
    "two documents": "num-exclusive-cores: 3\n---\nnum-shared-cores: 1\n",
    "list": "- num-exclusive-cores\n",
    "scalar": "3\n",
    "int key": "1: 2\n",
    "null key": "~: 2\n",
    "duplicate key": "num-exclusive-cores: 1\nnum-exclusive-cores: 2\n",
    "unknown key": "num-exclusive-core: 3\n",
    "NUL byte": b"num-exclusive-cores: 3\x00\n",
    "BOM then text": "\ufeffnum-exclusive-cores: x\n",
    "control character": "install-dir: \"/opt/cmk\\x01\"\n",
    "cpu list too large": "excl-non-isolcpus: 0-99999999\n",
    "cpu list of huge ints": "excl-non-isolcpus: [0, 99999999999999999999]\n",
    "cpu list negative": "excl-non-isolcpus: [0, -1]\n",
    "metrics port arabic": "metrics-address: \"0.0.0.0:٣\"\n",
    "metrics port huge": "metrics-address: 0.0.0.0:99999999999999999999\n",
    "metrics host newline": "metrics-address: \"bad\\nhost:9464\"\n",
    "empty sysfs root": "sysfs-root: ''\n",
    **{f"install-dir {value!r}": f"install-dir: {_quoted}\n"
       for value in BAD_INSTALL_DIRS if (_quoted := '"' + value.encode("unicode_escape").decode().replace('"', '\\"') + '"')},
    **{f"shared-slots {value!r}": f"shared-slots: \"{value.encode('unicode_escape').decode()}\"\n"
       for value in BAD_COUNTS[:12]},
}


@pytest.mark.parametrize("command", CONFIG_COMMANDS)
def test_config_documents_that_are_hostile(cmk: Cmk, tmp_path: Path, command: str) -> None:
    args = command_args(command, tmp_path)
    outcomes = {}
    for number, (case, text) in enumerate(BAD_CONFIGS.items()):
        config = tmp_path / f"config-{number}.yaml"
        config.write_bytes(text if isinstance(text, bytes) else text.encode())
        outcomes[case] = cmk(*args, "--config", str(config))
    assert_clear_errors(outcomes, dict.fromkeys(outcomes, "config-"))


#: sysfs/procfs files discovery reads, each replaced by every hostile kind in turn.
TREE_TARGETS = {
    "cpu/online": "sys/devices/system/cpu/online",
    "cpu/possible": "sys/devices/system/cpu/possible",
    "cpu1/online": "sys/devices/system/cpu/cpu1/online",  # read when cpu/online is gone (below)
    "physical_package_id": "sys/devices/system/cpu/cpu0/topology/physical_package_id",
    "thread_siblings_list": "sys/devices/system/cpu/cpu0/topology/thread_siblings_list",
    "core_id": "sys/devices/system/cpu/cpu2/topology/core_id",
    "cpu/isolated": "sys/devices/system/cpu/isolated",
    "proc/cmdline": "proc/cmdline",
}
TREE_CONTENTS: dict[str, tuple[str, bytes]] = {
    "5,000-digit cpu list": ("sys/devices/system/cpu/online", b"0-" + b"9" * 5000 + b"\n"),
    "cpu list past the limit": ("sys/devices/system/cpu/online", b"0-99999999\n"),
    "arabic digit cpu list": ("sys/devices/system/cpu/online", "0-٣\n".encode()),
    "5,000-digit id": ("sys/devices/system/cpu/cpu0/topology/core_id", b"9" * 5000 + b"\n"),
    "fullwidth id": ("sys/devices/system/cpu/cpu0/topology/core_id", "１\n".encode()),
    "id with sign and underscore": ("sys/devices/system/cpu/cpu0/topology/core_id", b"+1_0\n"),
    "5,000-digit cmdline isolcpus": ("proc/cmdline", b"isolcpus=" + b"9" * 5000 + b"\n"),
    "cmdline isolcpus past the limit": ("proc/cmdline", b"isolcpus=0-99999999\n"),
    "cmdline arabic digit": ("proc/cmdline", "isolcpus=٣\n".encode()),
    "hex mask of 100,000 digits": ("sys/devices/system/cpu/cpu0/topology/thread_siblings_list", b""),
}
TREE_COMMANDS = ["describe", "host-config", "device-plugin", "demo"]


def _tree_cases(cmk: Cmk, base: Path, command: str, kinds: dict[str, int | None]) -> dict[str, Outcome]:
    outcomes = {}
    for target, relative in TREE_TARGETS.items():
        for kind, uid in kinds.items():
            case = base / f"{target}-{kind}".replace("/", "_").replace(" ", "-")
            case.mkdir()
            args = command_args(command, case)
            if target == "cpu1/online":
                (case / XEON_D / TREE_TARGETS["cpu/online"]).unlink()
            plant(case / XEON_D / relative, kind)
            outcomes[f"{target} {kind}"] = cmk(*args, uid=uid)
    for name, (relative, content) in TREE_CONTENTS.items():
        case = base / name.replace(" ", "-").replace(",", "")
        case.mkdir()
        args = command_args(command, case)
        path = case / XEON_D / relative
        if not content:  # the hex mask file, with the list form gone so the mask is read
            path.unlink()
            path, content = path.with_name("thread_siblings"), b"f" * 100_000
        path.write_bytes(content)
        outcomes[name] = cmk(*args)
    return outcomes


@pytest.mark.parametrize("command", TREE_COMMANDS)
def test_sysfs_and_procfs_files_of_every_hostile_kind(cmk: Cmk, shared_tmp: Path, command: str) -> None:
    kinds = FILE_KINDS if command in ("describe", "host-config") else {
        kind: FILE_KINDS[kind] for kind in ("fifo", "/dev/zero", "too large", "unreadable")}
    outcomes = _tree_cases(cmk, shared_tmp, command, kinds)
    # The root itself: missing, a file, a FIFO, under a folder the user cannot search.
    for kind in ("missing", "file", "fifo", "unsearchable", "symlink loop"):
        case = shared_tmp / f"root-{kind}"
        case.mkdir()
        args = command_args(command, case)
        sysfs = case / XEON_D / "sys"
        uid = None
        if kind == "missing":
            sysfs = case / "nowhere"
        elif kind == "unsearchable":
            (case / XEON_D).chmod(0o700)
            uid = NOBODY
        else:
            plant(sysfs / "devices" / "system" / "cpu", "fifo" if kind == "fifo" else
                  "symlink loop" if kind == "symlink loop" else "invalid utf-8")
        args[args.index("--sysfs-root") + 1] = str(sysfs)
        outcomes[f"root {kind}"] = cmk(*args, uid=uid)
    assert_clear_errors(outcomes)


def test_sysfs_nul_bytes_are_tolerated(cmk: Cmk, tmp_path: Path) -> None:
    """Real sysfs files may carry NULs: the parser strips them, so these are no error."""
    args = command_args("describe", tmp_path)
    online = tmp_path / XEON_D / "sys/devices/system/cpu/online"
    online.write_bytes(b"0-15\x00\x00\n")
    outcome = cmk(*args)
    assert outcome.status == 0 and not outcome.hung, outcome.stderr


#: flag -> the commands that take it and the bad values it must refuse.
def _flag_table(tmp: Path) -> dict[str, tuple[list[str], list[str]]]:
    counts = [value for value in BAD_COUNTS if "\x00" not in value]
    return {
        "--num-exclusive-cores": (["describe", "host-config", "device-plugin", "demo"], counts),
        "--num-shared-cores": (["describe", "host-config", "device-plugin", "demo"], counts),
        "--shared-slots": (["describe", "host-config", "device-plugin", "demo"], [*counts, "0", "10000000"]),
        "--infra-slots": (["describe", "host-config", "device-plugin", "demo"], [*counts, "0", "10000000"]),
        "--excl-non-isolcpus": (["describe", "host-config", "device-plugin", "demo"], BAD_CPU_LISTS),
        "--reserved-cores": (["host-config"], [*counts, "0", "100000"]),
        "--install-dir": (["device-plugin", "install"], [d for d in BAD_INSTALL_DIRS if "\x00" not in d]),
        "--metrics-address": (["device-plugin"], ["0.0.0.0:٣", "0.0.0.0:99999999999999999999", ":", "0.0.0.0:",
                                                  "0.0.0.0:-1", "0.0.0.0:65536", "bad\nhost:9464",
                                                  "[::1]:+1", "x" * 5000 + ":1", "no.such.host.invalid:1"]),
        # (a missing --kubelet-dir is no error for the daemon: it creates it, as the kubelet may not have yet)
        "--kubelet-dir": (["device-plugin", "probe"], ["/" + "d" * 120, str(tmp / "file"), "/dev/zero",
                                                      "/" + "x/" * 3000]),
        "--hold": (["demo"], ["nan", "inf", "-inf", "1e400", "-1", "86401", "٣", "", "--"]),
        "--timeout": (["probe"], ["nan", "inf", "1e400", "-1", "0", "9" * 5000, "٣", "", "--", "100000"]),
        "--pod-resources-socket": (["describe"], ["/" + "p" * 200, "/dev/zero"]),
    }


def test_flags_with_hostile_values(cmk: Cmk, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    outcomes = {}
    bases = {command: command_args(command, tmp_path / command) if command not in ("install", "probe")
             else [command] for command in ("describe", "host-config", "device-plugin", "demo", "install", "probe")}
    for flag, (commands, values) in _flag_table(tmp_path).items():
        for command in commands:
            for value in values:
                for form in ([flag, value], [f"{flag}={value}"]) if value in ("--", "") else ([flag, value],):
                    outcomes[f"{command} {' '.join(form)!r}"[:120]] = cmk(*bases[command], *form)
    # describe reads the pod resources socket only for the live view: a bad one is reported, not an error
    for key in [key for key in outcomes if key.startswith("describe '--pod-resources-socket")]:
        outcome = outcomes.pop(key)
        assert set(outcome.problems()) <= {"exit status 0", "0 lines on stderr"}, outcome
        assert "Traceback" not in outcome.stderr + outcome.stdout and not outcome.hung
    assert_clear_errors(outcomes)
