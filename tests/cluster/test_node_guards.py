"""The cluster tier's own guards, run without a node: no bring-up while another kubelet listens on
kubelet.sock, and a SIGTERM or SIGINT tears the node down once and ends pytest as the signal would.

Before: a second kubelet's sockets were swept by ours, and a CI run killed with SIGTERM left every
component, mount and cgroup behind. The bring-up runs in a child process here with ``Node.up`` and the
teardown's work replaced (no component starts), the machine lock and the socket in a directory of the
test's own, so that the signal lands where it would during a real session.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.node import (
    ComponentFailed,
    SignalTeardown,
    refuse_a_held_kubelet_socket,
)

ROOT = Path(__file__).resolve().parents[2]

LISTENER = """
import socket, sys, time
sock = socket.socket(socket.AF_UNIX)
sock.bind(sys.argv[1])
sock.listen()
print("listening", flush=True)
time.sleep(120)
"""

#: ``running_node`` as the session fixture enters it, its components replaced by a wait at ``phase``.
SESSION = """
import shutil, sys, time
from pathlib import Path
from tests.cluster import node as cluster

work, phase = Path(sys.argv[1]), sys.argv[2]

def up(self, images):
    print("up", flush=True)
    if phase == "up":
        time.sleep(120)

def down(self):
    with (work / "teardowns").open("a") as record:
        record.write("torn down\\n")
    print("tearing down", flush=True)
    time.sleep(float(sys.argv[3]))  # room for a second signal
    shutil.rmtree(self.base)
    return []

cluster.Node.up, cluster.Node._down, cluster.MACHINE_LOCK = up, down, work
binaries = work / "cache" / "build" / "bin"  # the build cache's directory is locked too: not ``work`` twice
binaries.mkdir(parents=True)
with cluster.running_node(binaries, work / "logs", [], kubelet_socket=work / "kubelet.sock"):
    print("body", flush=True)
    time.sleep(120)
"""


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory whose socket paths fit in a unix socket address (107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="cmk-guard-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_a_kubelet_listening_on_kubelet_sock_is_refused_in_one_line_naming_its_pid(short_dir: Path) -> None:
    path = short_dir / "kubelet.sock"
    holder = subprocess.Popen([sys.executable, "-c", LISTENER, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "listening\n"
        with pytest.raises(ComponentFailed) as refused:
            refuse_a_held_kubelet_socket(path)
    finally:
        holder.kill()
        holder.wait()
    message = str(refused.value)
    assert len(message.splitlines()) == 1
    assert f"another kubelet listens on {path} (pid {holder.pid} (python" in message


def test_a_socket_file_nobody_listens_on_is_not_held(short_dir: Path) -> None:
    """What a killed kubelet leaves: our kubelet's sweep removes it, so the tier goes ahead."""
    path = short_dir / "kubelet.sock"
    refuse_a_held_kubelet_socket(path)  # no file at all
    with socket.socket(socket.AF_UNIX) as dead:
        dead.bind(str(path))
    assert path.exists()
    refuse_a_held_kubelet_socket(path)


def test_the_session_is_refused_before_anything_starts_while_kubelet_sock_is_held(short_dir: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", LISTENER, str(short_dir / "kubelet.sock")],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "listening\n"
        result = subprocess.run([sys.executable, "-c", SESSION, str(short_dir), "body", "0"], cwd=ROOT,
                                capture_output=True, text=True, timeout=60, check=False)
    finally:
        holder.kill()
        holder.wait()
    assert result.returncode == 1 and result.stdout == ""  # neither up nor teardown ran
    assert result.stderr.strip().splitlines()[-1].startswith("tests.cluster.node.ComponentFailed: another kubelet")


def session(work: Path, phase: str, teardown_seconds: float = 0.0) -> subprocess.Popen[str]:
    """The child session, once it reached ``phase`` (``up``: bringing the node up; ``body``: the tests)."""
    process = subprocess.Popen([sys.executable, "-c", SESSION, str(work), phase, str(teardown_seconds)], cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    lines: list[str] = []
    while phase not in lines:
        line = process.stdout.readline()
        assert line, f"the session ended before {phase}: {lines}"
        lines.append(line.strip())
    return process


@pytest.mark.parametrize(("number", "phase"), [
    pytest.param(signal.SIGTERM, "up", id="sigterm-during-bring-up"),
    pytest.param(signal.SIGTERM, "body", id="sigterm-during-the-tests"),
    pytest.param(signal.SIGINT, "body", id="sigint-during-the-tests"),
])
def test_a_signal_tears_the_node_down_once_and_ends_pytest_as_the_signal_would(short_dir: Path,
                                                                                number: signal.Signals,
                                                                                phase: str) -> None:
    process = session(short_dir, phase)
    try:
        process.send_signal(number)
        _, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == -number  # killed by it, as without the handler: a shell sees 128+N
    assert (short_dir / "teardowns").read_text() == "torn down\n"
    assert f"cluster tier: {number.name}: the node is torn down" in stderr


def test_signals_during_the_teardown_let_it_finish_once(short_dir: Path) -> None:
    process = session(short_dir, "body", teardown_seconds=1.0)
    try:
        assert process.stdout is not None
        process.send_signal(signal.SIGTERM)
        assert process.stdout.readline() == "tearing down\n"
        process.send_signal(signal.SIGINT)
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == -signal.SIGTERM  # the first signal's
    assert (short_dir / "teardowns").read_text() == "torn down\n"


def test_a_teardown_runs_once_and_the_handlers_go_with_the_session() -> None:
    runs: list[int] = []

    def teardown_work() -> list[str]:
        runs.append(1)
        return ["a leftover"]

    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    with SignalTeardown(teardown_work) as teardown:
        assert signal.getsignal(signal.SIGTERM) not in before
        assert teardown.run() == ["a leftover"] and teardown.run() == ["a leftover"]
    assert runs == [1]
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
