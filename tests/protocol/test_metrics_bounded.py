"""The metrics endpoint spends a fixed number of threads whatever its clients do, and times idle ones out.

The daemon process with many idle connections open (its thread count read
from /proc), then the server alone with small limits for each rule: idle
timeout, oversized request, eviction of the longest-waiting connection.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
import urllib.request
from collections.abc import Iterator

from deviceplugin.observe.httpserver import WORKERS, BoundedHttpServer, request_headers
from tests.support.daemon import daemon_process, wait_registered
from tests.support.metrics import Logs, scrape
from tests.support.topologies import fixture_copy

IDLE = 1000


def threads(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("Threads:"))


def open_idle(address: tuple[str, int], count: int) -> list[socket.socket]:
    idle = []
    for _ in range(count):
        sock = socket.create_connection(address, timeout=5)
        sock.sendall(b"GET /metrics HTTP/1.1\r\n")  # half a request, then silence
        idle.append(sock)
    return idle


def test_a_thousand_idle_connections_cost_the_daemon_no_thread_and_metrics_still_answer(kubelet, plugin_dir,
                                                                                         tmp_path):
    sysfs, procfs = fixture_copy("cmk-xeon_d", tmp_path)
    process = daemon_process(plugin_dir, sysfs, procfs, "--metrics-address", "127.0.0.1:0", "--log-format", "json",
                             "--pod-resources-socket", str(kubelet.pod_resources_socket))
    logs = Logs(process)
    try:
        host, port = logs.wait_for("metrics_serving")["address"].rsplit(":", 1)
        wait_registered(kubelet, {"cmk.intel.com/exclusive-cores", "cmk.intel.com/shared", "cmk.intel.com/infra"})
        for _ in range(WORKERS + 1):  # the workers (started lazily) and the pod resources client exist now
            scrape(f"{host}:{port}")
        before = threads(process.pid)
        idle = open_idle((host, int(port)), IDLE)
        try:
            during = threads(process.pid)
            samples = scrape(f"{host}:{port}")
            assert ("cmk_pod_resources_up", frozenset()) in samples
            assert during <= before, f"{during - before} more threads with {IDLE} idle connections open"
            fds = len(os.listdir(f"/proc/{process.pid}/fd"))
            assert fds < 200, f"{fds} open files: idle connections are not bounded"
        finally:
            for sock in idle:
                sock.close()
    finally:
        process.terminate()
        process.wait(timeout=20)
        logs.join()


@contextlib.contextmanager
def server(**limits: float) -> Iterator[tuple[str, int]]:
    served = BoundedHttpServer("127.0.0.1", 0, lambda path, _: ("200 OK", [("Content-Type", "text/plain")], b"ok\n")
                               if path == "/metrics" else None, **limits)  # type: ignore[arg-type]
    served.start()
    try:
        yield served.server_address[0], served.server_address[1]
    finally:
        served.stop()


def get(address: tuple[str, int], path: str = "/metrics") -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://{address[0]}:{address[1]}{path}", timeout=5) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def test_an_idle_connection_is_closed_after_the_idle_timeout():
    with server(idle_timeout=0.3) as address:
        sock = socket.create_connection(address, timeout=5)
        started = time.monotonic()
        assert sock.recv(100) == b""  # closed by the server, not by our 5 s timeout
        assert time.monotonic() - started < 4
        sock.close()


def test_an_oversized_request_gets_431_and_a_bad_one_400():
    with server() as address:
        sock = socket.create_connection(address, timeout=5)
        sock.sendall(b"GET /" + b"x" * 10000)
        assert sock.recv(100).startswith(b"HTTP/1.1 431 ")
        sock.close()
        sock = socket.create_connection(address, timeout=5)
        sock.sendall(b"\x00\xff garbage\r\n\r\n")
        assert sock.recv(100).startswith(b"HTTP/1.1 400 ")
        sock.close()
        assert get(address, "/other")[0] == 404
        assert get(address) == (200, b"ok\n")


def test_past_the_connection_limit_the_longest_waiting_connection_makes_room():
    with server(max_connections=4) as address:
        idle = open_idle(address, 4)
        assert get(address) == (200, b"ok\n")
        try:
            assert idle[0].recv(100) == b""  # the oldest was closed to admit the scrape
        except ConnectionResetError:
            pass  # closed with its half request unread: the same
        for sock in idle:
            sock.close()


def test_request_headers_are_read_case_blind_up_to_the_blank_line():
    request = (b"GET /metrics HTTP/1.1\r\nAccept: application/openmetrics-text\r\nACCEPT-ENCODING: gzip\r\n"
               b"accept-encoding: br\r\nno colon here\r\n: empty name\r\n\r\nX-After: body\r\n")
    assert request_headers(request) == {"accept": "application/openmetrics-text", "accept-encoding": "gzip, br"}
    assert request_headers(b"GET / HTTP/1.0\n\n") == {}
