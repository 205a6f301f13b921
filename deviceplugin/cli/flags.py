"""Command-line flags shared by every subcommand that plans pools (describe, device-plugin, host-config).

One definition, so ``cmk describe`` shows exactly the plan the daemon serves for the same flags,
and reads the same pod resources socket the daemon's metrics read.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from api.constants import POD_RESOURCES_SOCKET
from deviceplugin.model.plan import DEFAULT_SLOTS, Mode, PlanOptions, SlotScope
from pinner.cpulist import CpuListError, parse_cpu_list


def _whole_at_least(text: str, least: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"must be {least} or more, got {value}")
    return value


def _count(text: str) -> int:
    return _whole_at_least(text, 0)


def _slots(text: str) -> int:
    return _whole_at_least(text, 1)


def _cpus(text: str) -> frozenset[int]:
    try:
        return parse_cpu_list(text)
    except CpuListError as err:
        raise argparse.ArgumentTypeError(f"{err} (expected e.g. 4-5,12-13)") from None


def host_dir(text: str) -> str:
    """An absolute host directory: Allocate answers and CDI specs hand it to the container runtime."""
    if not text.startswith("/"):
        raise argparse.ArgumentTypeError(f"must be an absolute host path, got {text!r}")
    return text


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``[v6]:PORT`` -> (host, port); ValueError saying what is expected."""
    host, sep, port = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
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
    group.add_argument("--slot-scope", type=SlotScope, choices=list(SlotScope), default=SlotScope.POOL,
                       help="pool: a shared/infra slot gives the whole pool; numa-node: each NUMA node offers "
                            "its own slots (N per node) giving that node's pool CPUs, for the Topology Manager "
                            "(default: pool)")


def plan_options(args: argparse.Namespace) -> PlanOptions:
    return PlanOptions(
        num_exclusive_cores=args.num_exclusive_cores,
        num_shared_cores=args.num_shared_cores,
        exclusive_mode=args.exclusive_mode,
        shared_mode=args.shared_mode,
        excl_non_isolcpus=args.excl_non_isolcpus,
        shared_slots=args.shared_slots,
        infra_slots=args.infra_slots,
        slot_scope=args.slot_scope,
    )


#: Where the kubelet serves its pod resources API (what ``cmk describe`` and the metrics read).
DEFAULT_POD_RESOURCES_SOCKET = Path(POD_RESOURCES_SOCKET)


def add_pod_resources_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup, purpose: str) -> None:
    parser.add_argument("--pod-resources-socket", type=Path, default=DEFAULT_POD_RESOURCES_SOCKET,
                        metavar="PATH", help=f"the kubelet's pod resources socket, {purpose} "
                                             f"(default: {DEFAULT_POD_RESOURCES_SOCKET})")
