"""The metrics endpoint's HTTP server: a fixed number of threads whatever the clients do.

prometheus_client's ``start_http_server`` spends a thread (and about 26 KB)
on every connection for as long as it stays open, with no read timeout: a
few thousand idle connections from any pod exhaust the daemon's memory.
Here one thread accepts and reads requests for every connection with a
selector, each connection has :data:`IDLE_TIMEOUT` seconds to send a whole
request (at most :data:`MAX_REQUEST` bytes), at most :data:`MAX_CONNECTIONS`
are open at once (past that, the longest-waiting one is closed to admit the
new one, so a flood of idle connections cannot lock the scraper out), and
:data:`WORKERS` threads render the answers. One request per connection
(``Connection: close``), which is what Prometheus needs. The request's
headers reach the renderer (content negotiation is the renderer's business).
"""

from __future__ import annotations

import logging
import selectors
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

log = logging.getLogger(__name__)

MAX_CONNECTIONS = 64
IDLE_TIMEOUT = 5.0
MAX_REQUEST = 8192
WORKERS = 2
SEND_TIMEOUT = 5.0

#: (status line, headers beside Content-Length and Connection, body).
Answer = tuple[str, Sequence[tuple[str, str]], bytes]
#: (path, request headers with lower-case names) -> the answer; ``None`` for the paths it does not serve.
Render = Callable[[str, Mapping[str, str]], Answer | None]


def _text(status: str, body: bytes) -> Answer:
    return status, [("Content-Type", "text/plain")], body


def request_headers(request: bytes) -> dict[str, str]:
    """The header fields after the request line, names lower-cased; a repeated field's values joined by commas."""
    headers: dict[str, str] = {}
    for line in request.split(b"\n")[1:]:
        if not line.strip():  # the blank line that ends the header
            break
        name, colon, value = line.decode("latin-1").partition(":")
        if not colon or not name.strip():
            continue
        key, text = name.strip().lower(), value.strip()
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    return headers


class _Pending:
    __slots__ = ("data", "deadline", "sock")

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock, self.deadline, self.data = sock, deadline, b""


class BoundedHttpServer:
    """Serve ``render`` on ``(host, port)`` in a thread; :meth:`stop` closes every connection."""

    def __init__(self, host: str, port: int, render: Render, *, max_connections: int = MAX_CONNECTIONS,
                 idle_timeout: float = IDLE_TIMEOUT) -> None:
        self._render, self._max, self._idle = render, max_connections, idle_timeout
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._listener.bind((host, port))
            self._listener.listen(128)
            self._listener.setblocking(False)
        except BaseException:
            self._listener.close()
            raise
        self.server_address = self._listener.getsockname()[:2]
        self._pending: OrderedDict[int, _Pending] = OrderedDict()  # oldest first
        self._busy = 0  # connections handed to a worker
        self._lock = threading.Lock()
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._stopping = False
        self._workers = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="cmk-metrics")
        self._thread = threading.Thread(target=self._loop, name="cmk-metrics-accept", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping = True
        self._wake_w.send(b"x")
        self._thread.join()
        self._workers.shutdown(wait=True)
        for sock in (self._listener, self._wake_r, self._wake_w):
            sock.close()
        self._selector.close()

    def _loop(self) -> None:
        self._selector.register(self._listener, selectors.EVENT_READ)
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        while not self._stopping:
            oldest = next(iter(self._pending.values()), None)
            timeout = max(0.0, oldest.deadline - time.monotonic()) if oldest else None
            for key, _ in self._selector.select(timeout):
                if key.fileobj is self._listener:
                    self._accept()
                elif key.fileobj is not self._wake_r:
                    self._read(key.data)
            self._expire(time.monotonic())
        for fd in list(self._pending):
            self._drop(fd)

    def _accept(self) -> None:
        for _ in range(self._max):  # a burst: take what is queued, a bounded number per round
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as err:  # EMFILE and the like: the listener stays, the client retries
                log.warning("metrics: cannot accept a connection: %s", err.strerror)
                return
            with self._lock:
                full = len(self._pending) + self._busy >= self._max
            if full and self._pending:
                self._drop(next(iter(self._pending)))  # the longest-waiting idle one makes room
            elif full:
                sock.close()  # every slot is being answered: the client retries at the next scrape
                continue
            sock.setblocking(False)
            pending = _Pending(sock, time.monotonic() + self._idle)
            self._pending[sock.fileno()] = pending
            self._selector.register(sock, selectors.EVENT_READ, pending)

    def _read(self, pending: _Pending) -> None:
        fd = pending.sock.fileno()
        if self._pending.get(fd) is not pending:  # dropped earlier in this round of events
            return
        try:
            chunk = pending.sock.recv(MAX_REQUEST + 1 - len(pending.data))
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._drop(fd)
            return
        pending.data += chunk
        if b"\r\n\r\n" in pending.data or b"\n\n" in pending.data:
            self._selector.unregister(pending.sock)
            del self._pending[fd]
            with self._lock:
                self._busy += 1
            self._workers.submit(self._answer, pending.sock, pending.data)
        elif len(pending.data) > MAX_REQUEST:
            self._selector.unregister(pending.sock)
            del self._pending[fd]
            with self._lock:
                self._busy += 1
            self._workers.submit(self._send, pending.sock,
                                 *_text("431 Request Header Fields Too Large", b"request too large\n"))

    def _expire(self, now: float) -> None:
        while self._pending:
            fd, oldest = next(iter(self._pending.items()))
            if oldest.deadline > now:
                return
            self._drop(fd)

    def _drop(self, fd: int) -> None:
        pending = self._pending.pop(fd)
        self._selector.unregister(pending.sock)
        pending.sock.close()

    def _answer(self, sock: socket.socket, request: bytes) -> None:
        parts = request.split(b"\r\n", 1)[0].split(b"\n", 1)[0].split()
        if len(parts) != 3 or not parts[2].startswith(b"HTTP/"):
            self._send(sock, *_text("400 Bad Request", b"bad request\n"))
        elif parts[0] not in (b"GET", b"HEAD"):
            self._send(sock, *_text("405 Method Not Allowed", b"GET only\n"))
        else:
            try:
                answer = self._render(parts[1].decode("latin-1").split("?", 1)[0], request_headers(request))
            except Exception:  # a collector failing must not take the endpoint down
                log.exception("metrics: rendering failed")
                answer = _text("500 Internal Server Error", b"rendering failed\n")
            status, headers, body = answer or _text("404 Not Found", b"see /metrics\n")
            self._send(sock, status, headers, b"" if parts[0] == b"HEAD" else body, len(body))

    def _send(self, sock: socket.socket, status: str, headers: Sequence[tuple[str, str]], body: bytes,
              length: int | None = None) -> None:
        try:
            sock.setblocking(True)
            sock.settimeout(SEND_TIMEOUT)
            fields = "".join(f"{name}: {value}\r\n" for name, value in headers)
            head = (f"HTTP/1.1 {status}\r\n{fields}"
                    f"Content-Length: {len(body) if length is None else length}\r\nConnection: close\r\n\r\n")
            sock.sendall(head.encode("latin-1") + body)
        except OSError:
            pass  # the client went away or stopped reading: its loss
        finally:
            sock.close()
            with self._lock:
                self._busy -= 1
