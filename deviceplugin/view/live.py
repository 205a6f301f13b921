"""``cmk describe``'s live view: who holds which devices and CPUs, what is free, what is unhealthy. Pure.

Device IDs are mapped back to CPUs through the daemon's own device model
(:func:`deviceplugin.model.devices.device_tree` over the same topology and plan
flags), never by parsing IDs, so slot devices (``shared-004``) resolve to
their pool's CPUs exactly as Allocate answered.

Why it works this way: ``docs/design/live-view.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from deviceplugin.model.assignments import Assignments, cpu_manager_problem
from deviceplugin.model.cpulist import format_cpu_list
from deviceplugin.model.devices import Device, DeviceTree, PoolDevices
from deviceplugin.model.plan import CORE_POOLS
from deviceplugin.view.tables import align_columns

CPU_OFFLINE = "CPU offline"
NOT_ALLOCATABLE = "not allocatable at the kubelet"
NOT_REGISTERED = "resource not registered with the kubelet"


def _node_key(device: Device) -> str:
    return ",".join(str(node) for node in sorted(device.numa_nodes)) or "-"


def _unhealthy_reason(device: Device, kubelet_healthy: frozenset[str] | None, registered: bool) -> str | None:
    if not device.healthy:
        return CPU_OFFLINE
    if kubelet_healthy is not None and device.id not in kubelet_healthy:
        return NOT_ALLOCATABLE if registered else NOT_REGISTERED
    return None


def pool_live(devices: PoolDevices, assignments: Assignments) -> dict[str, Any]:
    resource = devices.resource
    allocatable = assignments.allocatable
    kubelet_healthy = None if allocatable is None else allocatable.get(resource, frozenset())
    registered = allocatable is None or resource in allocatable
    containers: list[dict[str, Any]] = []
    unknown: set[str] = set()
    held: set[str] = set()
    for holding in sorted((h for h in assignments.holdings if h.resource == resource),
                          key=lambda h: (h.namespace, h.pod, h.container)):
        known = [i for i in holding.device_ids if i in devices.devices]
        unknown.update(i for i in holding.device_ids if i not in devices.devices)
        held.update(known)
        containers.append({
            "namespace": holding.namespace,
            "pod": holding.pod,
            "container": holding.container,
            "devices": list(holding.device_ids),
            "cpus": format_cpu_list(devices.cpus_of(known)),
        })
    unhealthy: list[dict[str, str]] = []
    free_by_node: dict[str, list[str]] = {}
    for device in devices.devices.values():
        reason = _unhealthy_reason(device, kubelet_healthy, registered)
        if reason is not None:
            unhealthy.append({"device": device.id, "cpus": format_cpu_list(device.cpus), "reason": reason})
        elif device.id not in held:
            free_by_node.setdefault(_node_key(device), []).append(device.id)
    return {
        "pool": str(devices.pool),
        "resource": resource,
        "unit": "cores" if devices.pool in CORE_POOLS else "slots",
        "capacity": len(devices.devices),
        "allocated": len(held),
        "free": sum(len(ids) for ids in free_by_node.values()),
        "unhealthy": len(unhealthy),
        "containers": containers,
        "free_by_numa_node": {node: {"count": len(ids), "devices": ids}
                              for node, ids in sorted(free_by_node.items())},
        "unhealthy_devices": unhealthy,
        "unknown_devices": sorted(unknown),
    }


def live_data(tree: DeviceTree, assignments: Assignments, socket: str,
              offline: frozenset[int] = frozenset()) -> dict[str, Any]:
    """The ``live`` section of ``cmk describe -o json``: one entry per served pool."""
    notes = []
    if offline:
        notes.append(f"CPUs {format_cpu_list(offline)} are offline: if they went offline after the daemon "
                     "started, their cores keep their IDs but describe shows only the threads online now")
    if assignments.allocatable is None:
        notes.append("the kubelet does not serve GetAllocatableResources: health is the topology's only")
    problem = cpu_manager_problem(assignments.kubelet_cpus)
    if problem:
        notes.append(problem)
    return {
        "available": True,
        "socket": socket,
        "kubelet_allocatable_known": assignments.allocatable is not None,
        # static: the kubelet pins CPUs itself (the daemon serves no exclusive pool); None: not known
        "kubelet_cpu_manager": None if assignments.kubelet_cpus is None else ("static" if problem else "none"),
        "pools": [pool_live(devices, assignments) for devices in tree.values()],
        "notes": notes,
    }


def unavailable(socket: str, reason: str) -> dict[str, Any]:
    return {"available": False, "socket": socket, "reason": reason}


def _free_cell(pool: Mapping[str, Any]) -> str:
    cells = []
    for node, free in pool["free_by_numa_node"].items():
        shown = " ".join(free["devices"]) if pool["unit"] == "cores" else f"{free['count']} slots"
        cells.append(f"{node}: {shown}")
    return "; ".join(cells) or "-"


def render_live(live: Mapping[str, Any]) -> list[str]:
    """Table lines for the live section (a one-line note when the kubelet could not be read)."""
    if not live["available"]:
        return [f"live view unavailable (showing the plan only): {live['reason']}"]
    lines = [f"Live (kubelet pod resources at {live['socket']})"]
    rows = [["POOL", "ALLOCATED", "FREE", "UNHEALTHY", "FREE PER NUMA NODE"]]
    rows += [[p["pool"], f"{p['allocated']}/{p['capacity']}", str(p["free"]), str(p["unhealthy"]), _free_cell(p)]
             for p in live["pools"]]
    lines += align_columns(rows, indent="  ")
    held = [[p["pool"], f"{c['namespace']}/{c['pod']}", c["container"], " ".join(c["devices"]), c["cpus"] or "-"]
            for p in live["pools"] for c in p["containers"]]
    lines.append("")
    if held:
        lines += align_columns([["POOL", "POD", "CONTAINER", "DEVICES", "CPUS"], *held], indent="  ")
    else:
        lines.append("  no container holds a CMK device")
    for pool in live["pools"]:
        by_reason: dict[str, list[str]] = {}
        for bad in pool["unhealthy_devices"]:
            by_reason.setdefault(bad["reason"], []).append(bad["device"])
        for reason, ids in by_reason.items():
            shown = " ".join(ids) if pool["unit"] == "cores" else f"{len(ids)} slots"
            lines.append(f"  unhealthy in {pool['pool']} ({reason}): {shown}")
        if pool["unknown_devices"]:
            lines.append(f"  held but not in this plan ({pool['pool']}): {' '.join(pool['unknown_devices'])}"
                         " -- run describe with the daemon's flags or --config")
    lines += [f"note: {note}" for note in live["notes"]]
    return lines
