"""``cmk describe``: the topology and the pool plan for this machine or a sysfs/procfs dump.

With the kubelet's pod resources socket reachable, also the live view: which
container holds which devices and CPUs, what is free per NUMA node, what is
unhealthy. An unreachable socket is not an error: the plan alone is shown,
with one line saying why the live view is missing. Last, the containers the
node-wide hook did not confine, from the cgroup tree under the sysfs root.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deviceplugin.cli.configfile import UNSET, apply_config_file, defer_defaults
from deviceplugin.cli.converters import seconds
from deviceplugin.cli.flags import (
    DEFAULT_SYSFS_ROOT,
    NODE_NAME,
    PLAN,
    ROOTS,
    FlagGroup,
    add_flags,
    config_flag,
    plan_options,
    pod_resources_socket,
)
from deviceplugin.host.installedpinner import built_pinner, unbuilt_note
from deviceplugin.host.sysfs import discover
from deviceplugin.model.hostsettings import host_config_disagreement
from deviceplugin.model.modes import ServingMode
from deviceplugin.model.node import plan_node
from deviceplugin.model.resourceslices import driver_devices
from deviceplugin.view.report import config_data, describe_data, render_table

if TYPE_CHECKING:
    from deviceplugin.model.cpustats import Place
    from deviceplugin.model.plan import PoolPlan


def add_arguments(parser: argparse.ArgumentParser) -> None:
    own = FlagGroup(None, (
        pod_resources_socket("read for the live view"),
        config_flag("describe"),
        NODE_NAME,
    ))
    planning = add_flags(parser, ROOTS, PLAN, own)
    parser.add_argument("--output", "-o", choices=("table", "json", "yaml"), default="table",
                        help="output format (default: table)")
    defer_defaults(parser, planning)
    parser.add_argument("--usage-window", type=seconds(60, zero=True), default=1.0, metavar="SECONDS",
                        help="sample procfs' CPU counters this long for the usage section; 0 leaves it out "
                             "(default: 1)")


#: Where an operator sees DRA mode's capacity: the node's status does not name DRA-served resources.
DRA_NOTE = ("DRA mode: the pools are DRA driver cpu.cmk.intel.com's devices, held through claims; their capacity is "
            "in the node's ResourceSlices (kubectl get resourceslices --field-selector "
            "spec.driver=cpu.cmk.intel.com), not in kubectl describe node")


def run(args: argparse.Namespace) -> int:
    from deviceplugin.model.confinement import held_sets
    from deviceplugin.model.cpustats import held_cpus, places
    from deviceplugin.model.withheld import withheld_cores
    from deviceplugin.protocol.podresources import Unavailable, read_assignments
    from deviceplugin.view.live import live_data, unavailable

    socket_unset = args.pod_resources_socket is UNSET
    active = apply_config_file(args)
    socket_given = not socket_unset or (active is not None and "pod_resources_socket" in active.values)
    node = plan_node(discover(args.sysfs_root, args.procfs_root), plan_options(args))
    topology, plan, tree = node.topology, node.plan, node.tree
    data = describe_data(topology, plan)
    data["plan"]["host_config_agrees"] = not (disagreement := host_config_disagreement(node, plan_options(args)))
    dump = args.sysfs_root != DEFAULT_SYSFS_ROOT
    if not dump:  # a dump is no node to reboot with host-config's line: the flag above still says so
        data["plan"]["notes"] += disagreement
    if active is not None:
        data["config"] = config_data(str(args.config), active.section, active.generation, active.node)
    note = unbuilt_note(built_pinner())
    if note:
        data["plan"]["notes"].append(note)
    socket = str(args.pod_resources_socket)
    dra = active is not None and active.values.get("mode") == ServingMode.DRA
    held = shapes = None
    if dump and not socket_given:
        # this host's kubelet knows nothing of another machine's dump: do not dial it
        data["live"] = unavailable(socket, f"{args.sysfs_root} is a dump, not this host "
                                           "(give --pod-resources-socket to read a kubelet anyway)")
    else:
        try:
            assignments = read_assignments(args.pod_resources_socket, resources=tree,
                                           dra=driver_devices(tree) if dra else None)
            # As the daemon does at its start: cores still held under another ID or pool are in no pool.
            withheld = withheld_cores(plan, {resource: assignments.held(resource) for resource in tree})
            tree = node.tree_now(topology.online, frozenset(w.core for w in withheld))
            data["live"] = live_data(tree, assignments, socket, topology.offline)
            data["live"]["notes"] += [w.message for w in withheld] + ([DRA_NOTE] if dra else [])
            held = held_cpus(tree, assignments.held)
            shapes = held_sets(tree, assignments)
        except Unavailable as err:
            data["live"] = unavailable(socket, str(err))
    if args.usage_window and dump:
        from deviceplugin.view import usage

        # this host's counters are not the dump's CPUs, and a dump's own counters do not move
        data["usage"] = usage.unavailable(f"{args.sysfs_root} is a dump, not this host (CPU usage is sampled "
                                          "on a live host only)")
    elif args.usage_window:
        data["usage"] = _usage(args.procfs_root, places(topology, plan), args.usage_window, held)
    if args.sysfs_root == DEFAULT_SYSFS_ROOT or (args.sysfs_root / "fs" / "cgroup").exists():
        data["unconfined"] = _unconfined(args.sysfs_root, plan, shapes)
    if args.output == "json":
        print(json.dumps(data, indent=2))
    elif args.output == "yaml":
        import yaml

        print(yaml.safe_dump(data, sort_keys=False), end="")
    else:
        print(render_table(data))
    return 0


def _unconfined(sysfs_root: Path, plan: PoolPlan, held: frozenset[frozenset[int]] | None) -> dict[str, Any]:
    """The containers the node-wide hook did not confine, from the cgroup tree under ``sysfs_root`` (a dump's too)."""
    from deviceplugin.host.cgroups import NoHierarchy, scan
    from deviceplugin.host.files import FileProblem
    from deviceplugin.model.confinement import exclusive_cpus, unconfined
    from deviceplugin.view import unconfined as view

    try:
        found = scan(sysfs_root)
    except (NoHierarchy, FileProblem) as err:
        return view.unavailable(str(err))
    return view.unconfined_data(str(found.hierarchy), found.version, len(found.containers),
                                unconfined(found.containers, exclusive_cpus(plan), held), complete=found.complete,
                                notes=found.notes, kubelet_read=held is not None)


def _usage(procfs_root: Path, place: Mapping[int, Place], seconds: float, held: frozenset[int] | None) -> dict[str, Any]:
    from deviceplugin.host.procstats import sample_window
    from deviceplugin.model.cpustats import StatsError
    from deviceplugin.view import usage

    try:
        before, after, elapsed = sample_window(procfs_root, seconds)
    except StatsError as err:
        return usage.unavailable(str(err))
    return usage.usage_data(place, before, after, elapsed, held)
