"""The hand-written pieces beside the library that would replace each, on the inputs they exist for.

``python benchmarks/libraries.py [--idle 1000]`` prints three tables
(``docs/dev/libraries.md`` reads them):

- YAML: PyYAML's ``safe_load`` (already a dependency) and
  :func:`deviceplugin.cli.safeyaml.load_yaml` on a config file, an alias bomb,
  deep nesting and YAML 1.1's surprising scalars: the result or the error,
  the time, and the memory the call peaked at.
- HTTP: prometheus_client's ``start_http_server`` and
  :class:`deviceplugin.observe.httpserver.BoundedHttpServer`, each serving
  the same registry in its own process, with ``--idle`` connections open
  that send nothing: the server's threads and resident memory, and whether
  a scrape is answered meanwhile.
- JSON: the C libraries Debian ships (cJSON and jansson, through their
  shared objects) on the cases where the hook's parser follows Go's
  decoding (``tests/pinner/test_native_units.py``).
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import os
import socket
import subprocess
import sys
import time
import tracemalloc
import urllib.request
from collections.abc import Callable
from pathlib import Path

if not __package__:  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CONFIG = "numExclusiveCores: 4\nnumSharedCores: 1\nexclusiveMode: packed\nsharedSlots: 110\n"
BOMB = "a: &a [x,x,x,x,x,x,x,x,x,x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},"
    f"*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)}]\n"
    for i in range(6))
YAML_CASES = {
    "a config file": CONFIG,
    f"alias bomb ({len(BOMB)} bytes, 10^7 leaves)": BOMB,
    "50,000 nested lists": "[" * 50_000 + "]" * 50_000,
    "sharedSlots: 1:50": "sharedSlots: 1:50\n",
    "numSharedCores: 010": "numSharedCores: 010\n",
    "exclusiveMode: no": "exclusiveMode: no\n",
    "a key twice": "numExclusiveCores: 4\nnumExclusiveCores: 2\n",
}


def short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


def yaml_table() -> None:
    import yaml

    from deviceplugin.cli.safeyaml import load_yaml

    loaders: dict[str, Callable[[str], object]] = {
        "yaml.safe_load": yaml.safe_load,
        "safeyaml.load_yaml": lambda text: load_yaml(text, "config.yaml"),
    }
    print("YAML | loader | result | ms | peak MB")
    for case, text in YAML_CASES.items():
        for name, load in loaders.items():
            tracemalloc.start()
            start = time.perf_counter()
            try:
                result = short(load(text))
            except (Exception, RecursionError) as err:  # noqa: BLE001 - the error is the figure
                result = f"{type(err).__name__}: {short(' '.join(str(err).split()))}"
            elapsed = (time.perf_counter() - start) * 1000
            peak = tracemalloc.get_traced_memory()[1] / 2**20
            tracemalloc.stop()
            print(f"{case} | {name} | {result} | {elapsed:.1f} | {peak:.1f}")


def serve(kind: str) -> None:
    """In a child: serve the default registry with one server, print its port, wait to be killed."""
    from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

    if kind == "prometheus_client":
        from prometheus_client import start_http_server

        server, _ = start_http_server(0, "127.0.0.1")
        port = server.server_address[1]
    else:
        from deviceplugin.observe.httpserver import BoundedHttpServer

        def render(path: str, _headers: object) -> tuple[str, list[tuple[str, str]], bytes] | None:
            return ("200 OK", [("Content-Type", CONTENT_TYPE_LATEST)], generate_latest(REGISTRY)) \
                if path == "/metrics" else None

        bounded = BoundedHttpServer("127.0.0.1", 0, render)
        bounded.start()
        port = bounded.server_address[1]
    print(port, flush=True)
    time.sleep(3600)


def status(pid: int) -> tuple[int, float]:
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    return int(fields["Threads"]), int(fields["VmRSS"].split()[0]) / 1024


def scrape(port: int) -> str:
    start = time.perf_counter()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            answer.read()
        return f"answered in {(time.perf_counter() - start) * 1000:.0f} ms"
    except OSError as err:
        return f"not answered ({err})"


def http_table(idle: int) -> None:
    print(f"HTTP | server | threads, RSS before | with {idle} idle connections | a scrape meanwhile")
    for kind in ("prometheus_client", "bounded"):
        child = subprocess.Popen([sys.executable, __file__, "--serve", kind], stdout=subprocess.PIPE, text=True)
        try:
            assert child.stdout is not None
            port = int(child.stdout.readline())
            scrape(port)  # the first scrape's imports and buffers count in "before"
            before = status(child.pid)
            conns = []
            for _ in range(idle):
                conn = socket.create_connection(("127.0.0.1", port))
                conn.send(b"GET /metrics HTTP/1.1\r\n")  # a request begun and never finished
                conns.append(conn)
            time.sleep(1)
            during = status(child.pid)
            meanwhile = scrape(port)
            for conn in conns:
                conn.close()
            print(f"HTTP | {kind} | {before[0]}, {before[1]:.1f} MB | {during[0]}, {during[1]:.1f} MB | {meanwhile}")
        finally:
            child.kill()
            child.wait()


JSON_CASES = {
    "a lone surrogate": (rb'"\ud800x"', "U+FFFD then x, as Go decodes it"),
    "a NUL in a string": (rb'{"a":"x\u0000y"}', "3 bytes, as Go keeps them"),
    "a member twice": (rb'{"pid":1,"pid":2}', "the last (2), as Go takes it"),
    "a truncated document": (rb'{"pid": 42, "bundle": "/b', "refused, naming the byte"),
}


def json_table() -> None:
    print("JSON | library | case | what the hook needs | what the library gives")
    cjson_name, jansson_name = ctypes.util.find_library("cjson"), ctypes.util.find_library("jansson")
    if cjson_name:
        cjson = ctypes.CDLL(cjson_name)
        cjson.cJSON_ParseWithLength.restype = ctypes.c_void_p
        cjson.cJSON_ParseWithLength.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        cjson.cJSON_PrintUnformatted.restype = ctypes.c_void_p
        cjson.cJSON_PrintUnformatted.argtypes = [ctypes.c_void_p]
        cjson.cJSON_GetErrorPtr.restype = ctypes.c_char_p
        cjson.cJSON_GetObjectItemCaseSensitive.restype = ctypes.c_void_p
        cjson.cJSON_GetNumberValue.restype = ctypes.c_double
        for case, (text, need) in JSON_CASES.items():
            item = cjson.cJSON_ParseWithLength(text, len(text))
            if not item:
                got = f"refused, no byte offset (error pointer at {cjson.cJSON_GetErrorPtr()!r})"
            else:
                got = ctypes.string_at(cjson.cJSON_PrintUnformatted(item)).decode("utf-8", "replace")
                pid = cjson.cJSON_GetObjectItemCaseSensitive(ctypes.c_void_p(item), b"pid")
                if pid:
                    got += f"; its lookup of pid gives {cjson.cJSON_GetNumberValue(ctypes.c_void_p(pid)):g}"
            print(f"JSON | cJSON 1.7 | {case} | {need} | {got}")
    if jansson_name:
        jansson = ctypes.CDLL(jansson_name)

        class Error(ctypes.Structure):
            _fields_ = [("line", ctypes.c_int), ("column", ctypes.c_int), ("position", ctypes.c_int),
                        ("source", ctypes.c_char * 80), ("text", ctypes.c_char * 160)]

        jansson.json_loadb.restype = ctypes.c_void_p
        jansson.json_loadb.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.POINTER(Error)]
        jansson.json_dumps.restype = ctypes.c_void_p
        jansson.json_dumps.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        decode_any, encode_any = 0x4, 0x200  # a scalar at the top is a document too
        for case, (text, need) in JSON_CASES.items():
            error = Error()
            value = jansson.json_loadb(text, len(text), decode_any, ctypes.byref(error))
            if not value:
                got = f"refused at byte {error.position}: {error.text.decode()}"
            else:
                got = ctypes.string_at(jansson.json_dumps(value, encode_any)).decode("utf-8", "replace")
            print(f"JSON | jansson 2.14 | {case} | {need} | {got}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle", type=int, default=1000, help="idle connections held open (default: 1000)")
    parser.add_argument("--serve", choices=("prometheus_client", "bounded"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
        return
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    yaml_table()
    http_table(args.idle)
    json_table()


if __name__ == "__main__":
    main()
