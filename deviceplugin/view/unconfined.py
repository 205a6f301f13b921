"""``cmk describe``'s unconfined section: containers whose cpuset reaches exclusive CPUs the hook never gave them. Pure.

Which containers count is :mod:`deviceplugin.model.confinement`'s rule; the
caller scanned the cgroup tree (:mod:`deviceplugin.host.cgroups`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from deviceplugin.model.confinement import SHORT_ID, Reason, Unconfined
from deviceplugin.model.cpulist import format_cpu_list
from deviceplugin.view.tables import align_columns

FIX = "restart it; containers created after the node-wide hook is installed are born confined"
#: Per reason: what happened, and what to do about it.
REASONS = {
    Reason.STARTED_BEFORE_HOOK: ("started before the node-wide hook", FIX),
    Reason.WIDENED: ("widened after the hook confined it",
                     ("a process in it rewrote its cpuset: kill it (a restart is born confined), find out who could "
                      "(docs/user/security.md: a root process in the pod), and refuse such pods")),
}
WITHOUT_KUBELET = ("the kubelet's pod resources were not read: a container holding exclusive cores together with "
                   "a shared or infra slot is listed too")


def unconfined_data(hierarchy: str, version: int, scanned: int, found: Sequence[Unconfined], *,
                    complete: bool, notes: Sequence[str], kubelet_read: bool) -> dict[str, Any]:
    """The ``unconfined`` section of ``cmk describe -o json``."""
    return {
        "available": True,
        "hierarchy": hierarchy,
        "cgroup_version": version,
        "containers_scanned": scanned,
        "complete": complete,
        "containers": [{"id": u.container.id[:SHORT_ID], "full_id": u.container.id, "cgroup": u.container.cgroup,
                        "cpus": format_cpu_list(u.container.cpus), "exclusive_cpus": format_cpu_list(u.exclusive),
                        "reason": u.reason} for u in found],
        "fix": {reason: REASONS[reason][1] for reason in sorted({u.reason for u in found})},
        "notes": [*notes, *([] if kubelet_read or not found else [WITHOUT_KUBELET])],
    }


def unavailable(reason: str) -> dict[str, Any]:
    return {"available": False, "reason": reason}


def render_unconfined(data: dict[str, Any]) -> list[str]:
    if not data["available"]:
        return [f"unconfined containers: not checked: {data['reason']}"]
    where = f"{data['hierarchy']}, cgroup v{data['cgroup_version']}"
    containers = data["containers"]
    if not containers:
        scanned = data["containers_scanned"]
        cgroups = "cgroup" if scanned == 1 else "cgroups"
        lines = [f"Unconfined containers: none ({scanned} container {cgroups} scanned at {where})"]
    else:
        lines = [f"Unconfined containers ({len(containers)} of {data['containers_scanned']}; cpusets at {where})"]
        rows = [["ID", "CGROUP", "CPUS", "EXCLUSIVE CPUS", "WHY"]]
        rows += [[c["id"], c["cgroup"], c["cpus"], c["exclusive_cpus"], REASONS[c["reason"]][0]] for c in containers]
        lines += align_columns(rows, indent="  ")
        lines += [f"  fix ({REASONS[reason][0]}): {fix}" if len(data["fix"]) > 1 else f"  fix: {fix}"
                  for reason, fix in data["fix"].items()]
    return lines + [f"note: {note}" for note in data["notes"]]
