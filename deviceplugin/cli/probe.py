"""``cmk probe``: exit 0 only when the daemon's pools answer and the kubelet holds their streams.

With ``--require-good-config`` (the readiness probe) it also fails while the
daemon serves its last good plan. Why it works this way: ``docs/design/probe.md``.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from api.constants import DEVICE_PLUGIN_DIR, PLUGINS_DIR
from deviceplugin.cli.converters import seconds
from deviceplugin.errors import CmkError, os_reason
from deviceplugin.model.plan import RESOURCE_NAMES


def daemon_sockets(kubelet_dir: Path) -> list[Path]:
    """The sockets of the pools the daemon serves: the ones of its names that exist."""
    from deviceplugin.daemon import socket_name
    from deviceplugin.host.files import check_directory

    if not check_directory(kubelet_dir, what="--kubelet-dir"):
        return []
    paths = (kubelet_dir / socket_name(resource) for resource in RESOURCE_NAMES.values())
    try:
        return [path for path in paths if path.exists() or path.is_symlink()]
    except OSError as err:
        raise CmkError(f"cannot look into --kubelet-dir {kubelet_dir}: {os_reason(err)}") from None


def dra_socket(plugins_dir: Path) -> Path | None:
    """DRA mode's service socket, where the daemon serves it (None: not there)."""
    from deviceplugin.daemon.draserving import service_socket

    path = service_socket(plugins_dir)
    try:
        return path if path.exists() or path.is_symlink() else None
    except OSError as err:
        raise CmkError(f"cannot look into --plugins-dir {plugins_dir}: {os_reason(err)}") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubelet-dir", type=Path, default=Path(DEVICE_PLUGIN_DIR), metavar="DIR",
                        help=f"the kubelet's device-plugin directory (default: {DEVICE_PLUGIN_DIR})")
    parser.add_argument("--plugins-dir", type=Path, default=Path(PLUGINS_DIR), metavar="DIR",
                        help="where a daemon in DRA mode serves its driver's socket, asked when no device-plugin "
                             f"socket is in --kubelet-dir (default: {PLUGINS_DIR})")
    parser.add_argument("--timeout", type=seconds(3600, zero=False), default=2.0, metavar="SECONDS",
                        help="deadline of each socket's GetDevicePluginOptions call (default: 2)")
    parser.add_argument("--require-good-config", action="store_true",
                        help="also fail while the daemon refused its config and serves the last good plan "
                             "(for the readiness probe: a rollout of a bad config stops at the first node)")


def _dial(path: Path, timeout: float, require_good_config: bool = False, *, dra: bool = False) -> str | None:
    """None if the plugin at ``path`` answers and the kubelet holds its stream, else why not.

    ``dra``: the DRA driver's socket, whose health check alone says it answers, the kubelet
    registered it and its slices are published.
    """
    import grpc

    from api.health.v1 import health_pb2, health_pb2_grpc
    from api.v1beta1 import deviceplugin_pb2, deviceplugin_pb2_grpc
    from deviceplugin.protocol.server import CONFIG_SERVICE

    SERVING = health_pb2.HealthCheckResponse.SERVING

    with grpc.insecure_channel(f"unix://{os.path.abspath(path)}") as channel:
        try:
            if not dra:
                deviceplugin_pb2_grpc.DevicePluginStub(channel).GetDevicePluginOptions(
                    deviceplugin_pb2.Empty(), timeout=timeout, wait_for_ready=False)
        except grpc.RpcError as err:
            return f"{path} does not answer GetDevicePluginOptions ({err.code().name}: {err.details()})"
        services = [""] + ([CONFIG_SERVICE] if require_good_config else [])
        try:
            serving = [health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=timeout).status == SERVING
                for service in services]
        except grpc.RpcError as err:
            return f"{path} does not answer the gRPC health check ({err.code().name}: {err.details()})"
    if not serving[0]:
        if dra:
            return f"{path} answers but the kubelet has not registered the driver or its slices are not published yet"
        return f"{path} answers but the kubelet holds no ListAndWatch stream to it (not registered)"
    if not all(serving):
        return f"{path}: the daemon refused its config and serves its last good plan (see the daemon's log)"
    return None


def run(args: argparse.Namespace) -> int:
    sockets = daemon_sockets(args.kubelet_dir)
    if not sockets:
        dra = dra_socket(args.plugins_dir)
        if dra is None:
            raise CmkError(f"no cmk device-plugin socket in {args.kubelet_dir} and no DRA driver socket in "
                           f"{args.plugins_dir}: the daemon is not serving (see its log)")
        problem = _dial(dra, args.timeout, args.require_good_config, dra=True)
        if problem:
            raise CmkError(problem + " (see the daemon's log)")
        print(f"ready: {dra} answers, the kubelet registered the driver and its slices are published")
        return 0
    failures = [problem for path in sockets if (problem := _dial(path, args.timeout, args.require_good_config))]
    if failures:
        raise CmkError("; ".join(failures) + " (see the daemon's log)")
    print(f"ready: {', '.join(path.name for path in sockets)} answer in {args.kubelet_dir}, each streaming to the kubelet")
    return 0
