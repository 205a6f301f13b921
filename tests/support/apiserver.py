"""A stand-in API server over real TLS: an in-memory store keyed by path, answering as the API server does.

What the daemon's client relies on, and no more: GET of an object or of a collection (with a
``fieldSelector`` of ``a.b=value`` terms), POST (409 AlreadyExists), PUT (404, and 409 when
``metadata.resourceVersion`` is not the stored one), DELETE (404; 409 when a ``preconditions`` uid or
resourceVersion differs), PATCH as a JSON patch of ``test``/``replace`` (422 when a test fails).
Errors are ``Status`` objects. ``refuse`` answers a (method, path) with a status and message instead;
``before`` runs before each request is handled (another writer acting in between).
"""

from __future__ import annotations

import copy
import json
import ssl
import subprocess
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

Object = dict[str, Any]


@dataclass
class Seen:
    """One request as it arrived: the path keeps its query string."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class Store:
    """The objects, by path (``/api/v1/nodes/n1``), and what was asked of them."""

    objects: dict[str, Object] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)
    #: (method, path without query) -> (status, message): answered instead of the store.
    refuse: dict[tuple[str, str], tuple[int, str]] = field(default_factory=dict)
    before: Callable[[Seen], None] | None = None
    version: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def put(self, path: str, obj: Object) -> Object:
        """Store ``obj`` at ``path`` as the API server would: a new resourceVersion, a uid kept or made."""
        self.version += 1
        obj = copy.deepcopy(obj)
        metadata = obj.setdefault("metadata", {})
        metadata["resourceVersion"] = str(self.version)
        metadata.setdefault("uid", str(uuid.uuid4()))
        self.objects[path] = obj
        return obj

    def writes(self) -> list[tuple[str, str]]:
        """The (method, path) of every request that is not a GET."""
        return [(s.method, s.path) for s in self.seen if s.method != "GET"]


def is_collection(path: str) -> bool:
    """``/api/v1/nodes``, ``/apis/g/v/res`` and their namespaced forms name a collection; one more part, an object."""
    parts = path.strip("/").split("/")
    rest = parts[2:] if parts[0] == "api" else parts[3:]
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]
    return len(rest) == 1


def _field(obj: Object, dotted: str) -> Any:
    for key in dotted.split("."):
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


def _matches(obj: Object, selector: str) -> bool:
    terms = [term.split("=", 1) for term in selector.split(",") if term]
    return all(str(_field(obj, key)) == value for key, value in terms)


def _status(code: int, message: str) -> Object:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
            "reason": HTTPStatus(code).phrase.replace(" ", ""), "code": code}


class ApiServer(ThreadingHTTPServer):
    store: Store


class Handler(BaseHTTPRequestHandler):
    server: ApiServer

    def _answer(self, status: int, body: Object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        seen = Seen(self.command, self.path, dict(self.headers), body)
        store = self.server.store
        with store.lock:
            store.seen.append(seen)
        if store.before is not None:
            store.before(seen)
        url = urlsplit(self.path)
        with store.lock:
            refused = store.refuse.get((self.command, url.path))
            status, answer = (refused[0], _status(*refused)) if refused else self._act(store, url.path, url.query, body)
        self._answer(status, answer)

    def _act(self, store: Store, path: str, query: str, body: Any) -> tuple[int, Object]:
        method, found = self.command, store.objects.get(path)
        if method == "GET" and is_collection(path):
            selector = parse_qs(query).get("fieldSelector", [""])[0]
            items = [copy.deepcopy(obj) for key, obj in sorted(store.objects.items())
                     if key.rpartition("/")[0] == path and _matches(obj, selector)]
            return 200, {"kind": "List", "apiVersion": "v1", "metadata": {"resourceVersion": str(store.version)},
                         "items": items}
        if method == "POST":
            target = f"{path}/{body['metadata']['name']}"
            if target in store.objects:
                return 409, _status(409, f"object {body['metadata']['name']!r} already exists")
            return 201, store.put(target, body)
        if found is None:
            return 404, _status(404, f"{path.rpartition('/')[2]!r} not found")
        if method == "GET":
            return 200, copy.deepcopy(found)
        if method == "PUT":
            if body["metadata"].get("resourceVersion") != found["metadata"]["resourceVersion"]:
                return 409, _status(409, "Operation cannot be fulfilled: the object has been modified; "
                                         "please apply your changes to the latest version and try again")
            body["metadata"]["uid"] = found["metadata"]["uid"]
            return 200, store.put(path, body)
        if method == "DELETE":
            wanted = (body or {}).get("preconditions") or {}
            if any(found["metadata"].get(key) != value for key, value in wanted.items()):
                return 409, _status(409, f"Precondition failed: {wanted}")
            del store.objects[path]
            return 200, {"kind": "Status", "apiVersion": "v1", "status": "Success"}
        return self._patch(store, path, found, body)

    def _patch(self, store: Store, path: str, found: Object, patch: list[Object]) -> tuple[int, Object]:
        changed = copy.deepcopy(found)
        for op in patch:
            *parents, last = op["path"].strip("/").split("/")
            target = changed
            for key in parents:
                target = target[key]
            if op["op"] == "test" and target.get(last) != op["value"]:
                return 422, _status(422, f"the server rejected our request: test of {op['path']} failed")
            if op["op"] == "replace":
                target[last] = op["value"]
        return 200, store.put(path, changed)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _handle

    def log_message(self, *args: object) -> None:
        pass


def make_account(directory: Path, host: str = "127.0.0.1") -> Path:
    """A service account directory (token, ca.crt) and the key of the certificate its CA is; returns the directory."""
    account = directory / "serviceaccount"
    account.mkdir()
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=api",
                    "-addext", f"subjectAltName=IP:{host}", "-keyout", str(directory / "key.pem"),
                    "-out", str(account / "ca.crt")], capture_output=True, check=True)
    (account / "token").write_text("the-token\n")
    return account


@contextmanager
def serve(directory: Path) -> Iterator[tuple[Store, Path, int]]:
    """A TLS server on 127.0.0.1 with a certificate for that address: (its store, a service account trusting it, port)."""
    account = make_account(directory)
    server = ApiServer(("127.0.0.1", 0), Handler)
    server.store = Store()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(account / "ca.crt", directory / "key.pem")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.store, account, server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@dataclass(frozen=True)
class Served:
    """The running stand-in: its store, and the service account directory that trusts and reaches it."""

    store: Store
    account: Path


@pytest.fixture
def api_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Served]:
    """The stand-in, with ``KUBERNETES_SERVICE_HOST``/``PORT`` pointing at it as in a pod."""
    with serve(tmp_path) as (store, account, port):
        monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
        monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(port))
        yield Served(store, account)
