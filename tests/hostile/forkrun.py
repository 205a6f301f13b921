"""A fork server for the hostile-input tables: each case is a real ``cmk`` process, forked in milliseconds.

Started once per test session (``python -m tests.hostile.forkrun``), it imports
every ``cmk`` subcommand and its libraries up front, then for each request
(one JSON line on stdin: ``argv``, optional ``uid``, ``limit`` seconds) forks a
child that runs :func:`deviceplugin.cli.main` exactly as the interpreter would
(an uncaught exception prints its traceback and exits 1), kills it at the
limit, and answers one JSON line: exit status, stdout, stderr, wall and CPU
seconds, hung.
A fork per case keeps the cases apart (a hang, a leaked fd, a changed uid die
with the child) at a fraction of an interpreter's start-up.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import sys
import time
import traceback


def _preload() -> None:
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")  # what cmk's main sets before grpc loads
    from deviceplugin.cli import commands

    commands.build_parser()  # imports every subcommand module
    for name in ("deviceplugin.daemon", "deviceplugin.observe.metrics", "deviceplugin.observe.resolver",
                 "deviceplugin.protocol.podresources", "deviceplugin.host.nfd", "deviceplugin.walkthrough",
                 "deviceplugin.view.live", "deviceplugin.model.devices", "yaml", "grpc", "json",
                 "api.v1beta1.deviceplugin_pb2_grpc", "api.v1beta1.deviceplugin_pb2", "encodings.idna"):
        try:
            __import__(name)
        except ImportError:
            pass


def _child(argv: list[str], uid: int | None, out_w: int, err_w: int) -> None:
    os.setpgid(0, 0)  # its own group: a case that forks is killed whole
    os.dup2(out_w, 1)
    os.dup2(err_w, 2)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    sys.stdin = open(0, closefd=False)  # noqa: SIM115 -- the child's own stdin, never closed
    status = 1
    try:
        if uid is not None:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
        from deviceplugin.cli import main

        status = main(argv)
    except SystemExit as stop:
        code = stop.code
        status = code if isinstance(code, int) else (0 if code is None else 1)
        if isinstance(code, str):
            print(code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 -- what the interpreter does with an uncaught exception
        traceback.print_exc()
        status = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(status)


def run_case(argv: list[str], uid: int | None, limit: float) -> dict[str, object]:
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.close(out_r)
        os.close(err_r)
        _child(argv, uid, out_w, err_w)
    os.close(out_w)
    os.close(err_w)
    chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
    selector = selectors.DefaultSelector()
    for fd in chunks:
        selector.register(fd, selectors.EVENT_READ)
    hung = False
    open_fds = set(chunks)
    while open_fds:
        left = start + limit - time.monotonic()
        if left <= 0:
            hung = True
            break
        for key, _ in selector.select(left):
            data = os.read(key.fd, 65536)
            if data:
                chunks[key.fd].append(data)
            else:
                selector.unregister(key.fd)
                open_fds.discard(key.fd)
    wait_status, cpu = 0, 0.0
    while not hung:  # output closed: the child is exiting, give it the rest of the limit
        done, wait_status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            cpu = usage.ru_utime + usage.ru_stime
            break
        if time.monotonic() >= start + limit:
            hung = True
        time.sleep(0.002)
    if hung:
        os.killpg(pid, signal.SIGKILL)
        _, wait_status, usage = os.wait4(pid, 0)
        cpu = usage.ru_utime + usage.ru_stime
    seconds = time.monotonic() - start
    selector.close()
    for fd in chunks:
        os.close(fd)
    return {"status": os.waitstatus_to_exitcode(wait_status), "hung": hung, "seconds": seconds, "cpu": cpu,
            "stdout": b"".join(chunks[out_r]).decode(errors="replace"),
            "stderr": b"".join(chunks[err_r]).decode(errors="replace")}


def main() -> None:
    _preload()
    print("ready", flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        answer = run_case(request["argv"], request.get("uid"), float(request.get("limit", 1.0)))
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
