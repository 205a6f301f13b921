"""``cmk probe``: exit 0 only when every pool the plan advertises answers on its device-plugin socket.

Used as the DaemonSet's readiness and liveness probe (an exec probe in the
daemon's own container). It takes the daemon's flags (``--config`` included)
and plans the pools as the daemon does,
so a pool the daemon should serve but does not is caught, and it dials each
pool's socket in the kubelet's device-plugin directory and calls
``GetDevicePluginOptions`` -- the very call the kubelet makes while
registering a plugin. The kubelet deletes every plugin socket when it
restarts, so a socket that answers also means the daemon re-bound (and
re-registered) after the last kubelet restart; a daemon whose servers hang
fails the call's deadline.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from deviceplugin.cmd_device_plugin import add_arguments as add_daemon_arguments
from deviceplugin.config import apply_config, load_config
from deviceplugin.errors import CmkError
from deviceplugin.options import plan_options
from deviceplugin.plan import RESOURCE_NAMES, Pool, PoolPlan, plan_pools


def endpoints(plan: PoolPlan) -> dict[Pool, str]:
    """Socket file name of every pool the plan advertises (a pool with no CPUs has no server)."""
    from deviceplugin.daemon import socket_name

    return {pool: socket_name(RESOURCE_NAMES[pool]) for pool in Pool if plan.advertised(pool)}


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, got {text}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The daemon's own flags (so a probe given the daemon's arguments plans its pools), plus a deadline."""
    add_daemon_arguments(parser)
    parser.add_argument("--timeout", type=_positive_seconds, default=2.0, metavar="SECONDS",
                        help="deadline of each pool's GetDevicePluginOptions call (default: 2)")


def _dial(path: Path, timeout: float) -> str | None:
    """None if the plugin at ``path`` answers GetDevicePluginOptions, else why not."""
    import grpc

    from api.v1beta1 import deviceplugin_pb2, deviceplugin_pb2_grpc

    if not path.exists():
        return f"no socket at {path}"
    with grpc.insecure_channel(f"unix://{os.path.abspath(path)}") as channel:
        try:
            deviceplugin_pb2_grpc.DevicePluginStub(channel).GetDevicePluginOptions(
                deviceplugin_pb2.Empty(), timeout=timeout, wait_for_ready=False)
        except grpc.RpcError as err:
            return f"{path} does not answer GetDevicePluginOptions ({err.code().name}: {err.details()})"
    return None


def run(args: argparse.Namespace) -> int:
    from deviceplugin.sysfs import discover

    apply_config(args, load_config(args.config) if args.config else {})
    plan = plan_pools(discover(args.sysfs_root, args.procfs_root), plan_options(args))
    expected = endpoints(plan)
    if not expected:
        raise CmkError("the plan advertises no pool: nothing to probe (check the pool flags)")
    failures = []
    for pool, name in expected.items():
        problem = _dial(args.kubelet_dir / name, args.timeout)
        if problem:
            failures.append(f"pool {pool}: {problem}")
    if failures:
        raise CmkError("; ".join(failures) + " (the daemon is not serving every pool; see its log)")
    print(f"ready: {', '.join(expected)} answer in {args.kubelet_dir}")
    return 0
