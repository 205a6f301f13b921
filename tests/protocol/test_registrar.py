"""The registrar against tiny kubelets these tests write: which kubelet.sock it records, and pools
registering independently."""

from __future__ import annotations

import os
import socket
import threading
from concurrent import futures
from pathlib import Path

import grpc

from api.v1beta1 import deviceplugin_pb2 as pb
from api.v1beta1 import deviceplugin_pb2_grpc as pb_grpc
from deviceplugin.protocol.registration import (
    Registrar,
    Registration,
    kubelet_listens,
    socket_identity,
)


class ReplacingKubelet(pb_grpc.RegistrationServicer):
    """Answers Register after a new kubelet.sock took the old one's place (a restart mid-call)."""

    def __init__(self, path: Path, refuse: str = "") -> None:
        self.path, self.refuse = path, refuse
        self.calls: list[str] = []
        self.replace_during_register = False

    def Register(self, request, context):
        self.calls.append(request.resource_name)
        if request.resource_name == self.refuse:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "refused by this kubelet")
        if self.replace_during_register:
            other = socket.socket(socket.AF_UNIX)
            other.bind(str(self.path.with_name("next.sock")))
            os.replace(self.path.with_name("next.sock"), self.path)
            other.close()
        return pb.Empty()


def serve(path: Path, servicer: ReplacingKubelet) -> grpc.Server:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_RegistrationServicer_to_server(servicer, server)
    server.add_insecure_port(f"unix://{path}")
    server.start()
    return server


def registration(resource: str) -> Registration:
    return Registration(resource, resource.rpartition("/")[2] + ".sock", pb.DevicePluginOptions())


def test_the_identity_recorded_is_the_kubelet_sock_there_after_register(plugin_dir: Path) -> None:
    """Before: read before Register, it named the kubelet.sock that was replaced during the call."""
    path = plugin_dir / "kubelet.sock"
    kubelet = ReplacingKubelet(path)
    kubelet.replace_during_register = True
    server = serve(path, kubelet)
    try:
        before = socket_identity(path)
        registrar = Registrar(path, [registration("example.com/a")])
        registrar.start()
        for _ in range(100):
            if registrar.done:
                break
            threading.Event().wait(0.05)
        assert registrar.done
        assert registrar.registered_with() == {"example.com/a": socket_identity(path)} != {"example.com/a": before}
    finally:
        server.stop(None)


def test_a_pool_the_kubelet_keeps_refusing_does_not_hold_the_others_up(plugin_dir: Path) -> None:
    path = plugin_dir / "kubelet.sock"
    kubelet = ReplacingKubelet(path, refuse="example.com/a")
    server = serve(path, kubelet)
    registrar = Registrar(path, [registration(r) for r in ("example.com/a", "example.com/b", "example.com/c")])
    try:
        registrar.start()
        for _ in range(100):
            if set(registrar.registered_with()) == {"example.com/b", "example.com/c"}:
                break
            threading.Event().wait(0.05)
        assert set(registrar.registered_with()) == {"example.com/b", "example.com/c"}
        assert "example.com/a" in kubelet.calls and not registrar.done  # refused, still retrying
    finally:
        registrar.cancel(wait=True)
        server.stop(None)


def test_a_kubelet_sock_listens_only_while_a_server_accepts_on_it(plugin_dir: Path) -> None:
    """What the daemon waits for after a kubelet restart: a dead kubelet's file is no kubelet, and a new
    kubelet.sock bound a moment before its kubelet listens is one once it does."""
    path = plugin_dir / "kubelet.sock"
    assert not kubelet_listens(path)  # no file
    with socket.socket(socket.AF_UNIX) as dead:
        dead.bind(str(path))
    assert path.exists() and not kubelet_listens(path, just_created=True)  # the file a killed kubelet leaves
    path.unlink()
    with socket.socket(socket.AF_UNIX) as starting:
        starting.bind(str(path))
        assert not kubelet_listens(path)
        timer = threading.Timer(0.1, starting.listen)
        timer.start()
        try:
            assert kubelet_listens(path, just_created=True)  # its refusals retried until it listens
        finally:
            timer.join()
        assert kubelet_listens(path)
