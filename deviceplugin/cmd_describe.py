"""``cmk describe``: the topology and the pool plan for this machine or a sysfs/procfs dump."""

from __future__ import annotations

import argparse
import json

from deviceplugin.describe import describe_data, render_table
from deviceplugin.options import add_plan_arguments, add_root_arguments, plan_options
from deviceplugin.plan import plan_pools
from deviceplugin.sysfs import discover


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_root_arguments(parser)
    add_plan_arguments(parser)
    parser.add_argument("--output", "-o", choices=("table", "json", "yaml"), default="table",
                        help="output format (default: table)")


def run(args: argparse.Namespace) -> int:
    topology = discover(args.sysfs_root, args.procfs_root)
    data = describe_data(topology, plan_pools(topology, plan_options(args)))
    if args.output == "json":
        print(json.dumps(data, indent=2))
    elif args.output == "yaml":
        import yaml

        print(yaml.safe_dump(data, sort_keys=False), end="")
    else:
        print(render_table(data))
    return 0
