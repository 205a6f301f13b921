"""What ``cmk describe`` reports, as plain data and as a table. Pure: no I/O.

The data form is the contract for ``--output json|yaml`` (scripts read it);
the table is for a person at a terminal. A ``live`` section, when the caller
adds one (:mod:`deviceplugin.view.live`), is rendered after the plan, and a
``usage`` section (:mod:`deviceplugin.view.usage`) after that, and last an
``unconfined`` one (:mod:`deviceplugin.view.unconfined`).
"""

from __future__ import annotations

from typing import Any

from deviceplugin.model.cpulist import format_cpu_list
from deviceplugin.model.devices import core_device_ids
from deviceplugin.model.plan import CORE_POOLS, RESOURCE_NAMES, Pool, PoolPlan
from deviceplugin.model.topology import Core, Topology
from deviceplugin.view.live import render_live
from deviceplugin.view.tables import align_columns
from deviceplugin.view.unconfined import render_unconfined
from deviceplugin.view.usage import render_usage


def _core_list(cores: tuple[Core, ...]) -> list[str]:
    return [format_cpu_list(core.cpus) for core in cores]


def _by_node(cores: tuple[Core, ...]) -> dict[str, list[Core]]:
    nodes: dict[str, list[Core]] = {}
    for core in sorted(cores, key=lambda c: (c.node if c.node is not None else -1, c.first)):
        nodes.setdefault(str(core.node if core.node is not None else "-"), []).append(core)
    return nodes


def describe_data(topology: Topology, plan: PoolPlan) -> dict[str, Any]:
    """The topology summary and the pool plan as JSON-ready values (cpu lists in kernel syntax).

    Core pools list their device IDs with each one's CPUs: the IDs name a core's place, not its CPUs.
    """
    pools = []
    names = core_device_ids(plan.all_cores)
    for pool in Pool:
        cores = plan.pools[pool]
        pools.append({
            "pool": str(pool),
            "resource": RESOURCE_NAMES[pool],
            "advertised": plan.advertised(pool),
            "unit": "cores" if pool in CORE_POOLS else "slots",
            "cpus": format_cpu_list(plan.cpus(pool)),
            "cores": _core_list(cores),
            "devices": {names[core]: format_cpu_list(core.cpus) for core in cores} if pool in CORE_POOLS else {},
            "numa_nodes": {
                node: {
                    "cpus": format_cpu_list(cpu for core in node_cores for cpu in core.cpus),
                    "cores": _core_list(tuple(node_cores)),
                }
                for node, node_cores in _by_node(cores).items()
            },
        })
    return {
        "topology": {
            "sockets": len(topology.packages),
            "numa_nodes": {str(node): format_cpu_list(cpus) for node, cpus in topology.numa_nodes.items()},
            "cores": len(topology.cores),
            "threads": len(topology.online),
            "threads_per_core_max": topology.threads_per_core_max,
            "online_cpus": format_cpu_list(topology.online),
            "offline_cpus": format_cpu_list(topology.offline),
            "isolated_cpus": format_cpu_list(topology.isolated),
            "nohz_full_cpus": format_cpu_list(topology.nohz_full),
            "sst_bf": plan.sst_bf,
            "sst_cp": plan.sst_cp,
        },
        "plan": {
            "source": "isolcpus" if plan.isolated_mode else "all cores, none isolated",
            "pools": pools,
            "partially_isolated_cores": _core_list(plan.partially_isolated),
            "unused_isolated_cores": _core_list(plan.unused_isolated),
            "notes": list(plan.notes),
        },
    }


def config_data(path: str, section: str, generation: str, node: str | None) -> dict[str, Any]:
    """Which config this plan comes from: the file, the section this node took, its generation."""
    return {"file": path, "section": section, "generation": generation, "node": node}


def _braced(cores: list[str]) -> str:
    return " ".join("{" + core + "}" for core in cores)


def render_table(data: dict[str, Any]) -> str:
    """A person's view: topology facts, then one row per pool and NUMA node."""
    topo = data["topology"]
    per_core = topo["threads_per_core_max"]
    facts = [
        ["sockets", str(topo["sockets"])],
        ["NUMA nodes", str(len(topo["numa_nodes"]))],
        ["cores", str(topo["cores"])],
        ["threads", f"{topo['threads']} (up to {per_core} per core)"],
        ["online CPUs", topo["online_cpus"] or "-"],
        ["offline CPUs", topo["offline_cpus"] or "-"],
        ["isolated CPUs", topo["isolated_cpus"] or "-"],
        ["nohz_full CPUs", topo["nohz_full_cpus"] or "-"],
        ["SST-BF / SST-CP", f"{'yes' if topo['sst_bf'] else 'no'} / {'yes' if topo['sst_cp'] else 'no'}"],
    ]
    lines = ["Topology", *align_columns(facts, indent="  ")]
    if "config" in data:
        config = data["config"]
        node = f" (node {config['node']})" if config["node"] else ""
        lines += ["", f"Config {config['file']}: section {config['section']}{node}, generation {config['generation']}"]
    plan = data["plan"]
    lines += ["", f"Pool plan (carved from {plan['source']}; cores shown as {{threads}})"]
    rows = [["POOL", "RESOURCE", "ADVERTISED", "NUMA", "CPUS"]]
    for pool in plan["pools"]:
        if not pool["advertised"]:
            rows.append([pool["pool"], pool["resource"], "0", "-", "(not advertised: no CPUs)"])
            continue
        unit = pool["unit"] if pool["advertised"] > 1 else pool["unit"].rstrip("s")
        count = f"{pool['advertised']} {unit}"
        for i, (node, members) in enumerate(pool["numa_nodes"].items()):
            # infra is "the rest": its CPUs matter, not how they pair into cores
            shown = members["cpus"] if pool["pool"] == str(Pool.INFRA) else _braced(members["cores"])
            rows.append([pool["pool"] if i == 0 else "", pool["resource"] if i == 0 else "",
                         count if i == 0 else "", node, shown])
    lines += align_columns(rows, indent="  ")
    for key, label in (("partially_isolated_cores", "partly isolated, in no pool"),
                       ("unused_isolated_cores", "isolated, in no pool")):
        if plan[key]:
            lines.append(f"  {label}: {_braced(plan[key])}")
    lines += [f"note: {note}" for note in plan["notes"]]
    if "live" in data:
        lines += ["", *render_live(data["live"])]
    if "usage" in data:
        lines += ["", *render_usage(data["usage"])]
    if "unconfined" in data:
        lines += ["", *render_unconfined(data["unconfined"])]
    return "\n".join(lines)
