"""``cmk host-config``: print what this node (or a dump) needs outside Kubernetes for the pools."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from deviceplugin.cli.configfile import apply_config_file, defer_defaults
from deviceplugin.cli.flags import (
    NODE_NAME,
    PLAN,
    ROOTS,
    FlagGroup,
    add_flags,
    config_flag,
    hooks_dir,
    host_dir,
    plan_options,
    slots,
)
from deviceplugin.host.cgroupdriver import DEFAULT_RUN_ROOT, node_cgroups
from deviceplugin.host.sysfs import discover
from deviceplugin.model.hostsettings import (
    DEFAULT_HOOKS_DIR,
    RUNTIMES,
    HostOptions,
    host_config,
    host_config_data,
    render_text,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    defer_defaults(parser, add_flags(parser, ROOTS, PLAN, FlagGroup(None, (config_flag("host-config"), NODE_NAME))))
    parser.add_argument("--run-root", type=Path, default=DEFAULT_RUN_ROOT, metavar="DIR",
                        help="systemd is the init when DIR/systemd/system exists (default: /run); with the cgroup "
                             "version under --sysfs-root's fs/cgroup it picks the cgroup driver printed")
    group = parser.add_argument_group("host settings")
    group.add_argument("--nohz-full", action="store_true",
                       help="also print nohz_full= for the isolated CPUs (tickless; needs a NO_HZ_FULL kernel)")
    group.add_argument("--rcu-nocbs", action="store_true",
                       help="also print rcu_nocbs= for the isolated CPUs (RCU callbacks off them)")
    group.add_argument("--irqaffinity", action="store_true",
                       help="also print irqaffinity= for the infra CPUs (default IRQ placement)")
    group.add_argument("--reserved-cores", type=slots, default=1, metavar="N",
                       help="infra cores the kubelet reserves for the host (reservedSystemCPUs; default: 1)")
    group.add_argument("--runtime", dest="runtimes", action="append", choices=list(RUNTIMES),
                       help="container runtime to print the drop-in and the node-wide hook's configuration for "
                            "(repeatable; default: all)")
    group.add_argument("--install-dir", type=host_dir, default="/opt/bin", metavar="DIR",
                       help="where cmk install put the hook and its infra record (default: /opt/bin)")
    group.add_argument("--hooks-dir", type=hooks_dir, default=DEFAULT_HOOKS_DIR, metavar="DIR",
                       help=f"the hooks.d directory given to cmk install --hooks-dir (default: {DEFAULT_HOOKS_DIR})")
    parser.add_argument("--output", "-o", choices=("text", "json"), default="text",
                        help="output format (default: text)")


def run(args: argparse.Namespace) -> int:
    apply_config_file(args)
    host = HostOptions(
        nohz_full=args.nohz_full,
        rcu_nocbs=args.rcu_nocbs,
        irqaffinity=args.irqaffinity,
        reserved_cores=args.reserved_cores,
        runtimes=tuple(args.runtimes or RUNTIMES),
        install_dir=args.install_dir,
        hooks_dir=args.hooks_dir,
    )
    topology = discover(args.sysfs_root, args.procfs_root)
    config = host_config(topology, plan_options(args), host, node_cgroups(args.sysfs_root, args.run_root))
    if args.output == "json":
        print(json.dumps(host_config_data(config), indent=2))
    else:
        print(render_text(config), end="")
    return 0
