"""Command-line flags shared by every subcommand that plans pools (describe, device-plugin, host-config).

One definition, so ``cmk describe`` shows exactly the plan the daemon serves for the same flags,
and reads the same pod resources socket the daemon's metrics read.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from api.constants import POD_RESOURCES_SOCKET
from deviceplugin.host.install import install_dir_problem
from deviceplugin.model.limits import (
    MAX_CPUS,
    MAX_SLOTS,
    CpuListError,
    checked_cpu_list,
    parse_count,
)
from deviceplugin.model.plan import DEFAULT_SLOTS, Mode, PlanOptions


def _whole(text: str, least: int, most: int) -> int:
    try:
        return parse_count(text, least=least, most=most)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _count(text: str) -> int:
    """Cores: no more than the kernel has CPUs."""
    return _whole(text, 0, MAX_CPUS)


def _slots(text: str) -> int:
    """Slots: few enough that one ListAndWatch message stays well under the kubelet's 4 MiB."""
    return _whole(text, 1, MAX_SLOTS)


def _cpus(text: str) -> frozenset[int]:
    try:
        return checked_cpu_list(text)
    except CpuListError as err:
        raise argparse.ArgumentTypeError(f"{err} (expected e.g. 4-5,12-13)") from None


def host_dir(text: str) -> str:
    """An absolute host directory: Allocate answers and CDI specs hand it to the container runtime."""
    try:
        return install_dir_problem(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``[v6]:PORT`` -> (host, port); ValueError saying what is expected."""
    host, sep, port = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not host.isprintable() or not port.isascii() or not port.isdigit() \
            or len(port) > 5 or int(port) > 65535:
        raise ValueError(f"expected HOST:PORT (e.g. 0.0.0.0:9464 or 127.0.0.1:0), got {text!r}")
    return host, int(port)


def _address(text: str) -> tuple[str, int]:
    try:
        return parse_address(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def add_root_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sysfs-root", type=Path, default=Path("/sys"), metavar="DIR",
                        help="read the CPU topology from DIR/devices/system (default: /sys)")
    parser.add_argument("--procfs-root", type=Path, default=Path("/proc"), metavar="DIR",
                        help="read the kernel command line from DIR/cmdline (default: /proc)")


def add_plan_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("pool plan (CMK's flags)")
    group.add_argument("--num-exclusive-cores", type=_count, metavar="N",
                       help="physical cores in the exclusive pool (default: the isolated cores "
                            "shared does not take; without isolcpus, up to 4)")
    group.add_argument("--num-shared-cores", type=_count, metavar="N",
                       help="physical cores in the shared pool (default: 1 when two or more cores are free)")
    group.add_argument("--exclusive-mode", type=Mode, choices=list(Mode), default=Mode.PACKED,
                       help="packed fills one NUMA node/socket first; spread round-robins (default: packed)")
    group.add_argument("--shared-mode", type=Mode, choices=list(Mode), default=Mode.PACKED,
                       help="as --exclusive-mode, for the shared pool (default: packed)")
    group.add_argument("--excl-non-isolcpus", type=_cpus, default=frozenset(), metavar="CPUS",
                       help="non-isolated CPUs whose whole cores form the exclusive-non-isolcpus pool")
    group.add_argument("--shared-slots", type=_slots, default=DEFAULT_SLOTS, metavar="N",
                       help=f"containers the shared pool admits at once (default: {DEFAULT_SLOTS})")
    group.add_argument("--infra-slots", type=_slots, default=DEFAULT_SLOTS, metavar="N",
                       help=f"containers the infra pool admits at once (default: {DEFAULT_SLOTS})")


def plan_options(args: argparse.Namespace) -> PlanOptions:
    return PlanOptions(
        num_exclusive_cores=args.num_exclusive_cores,
        num_shared_cores=args.num_shared_cores,
        exclusive_mode=args.exclusive_mode,
        shared_mode=args.shared_mode,
        excl_non_isolcpus=args.excl_non_isolcpus,
        shared_slots=args.shared_slots,
        infra_slots=args.infra_slots,
    )


#: Where the kubelet serves its pod resources API (what ``cmk describe`` and the metrics read).
DEFAULT_POD_RESOURCES_SOCKET = Path(POD_RESOURCES_SOCKET)


def add_pod_resources_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup, purpose: str) -> None:
    parser.add_argument("--pod-resources-socket", type=Path, default=DEFAULT_POD_RESOURCES_SOCKET,
                        metavar="PATH", help=f"the kubelet's pod resources socket, {purpose} "
                                             f"(default: {DEFAULT_POD_RESOURCES_SOCKET})")
