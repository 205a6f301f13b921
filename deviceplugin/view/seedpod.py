"""``cmk demo``'s pod and its text: which containers run from which pool, and how the node looks. Pure.

The seed pod has three containers, one per pool a CMK user knew
(exclusive, shared, infra), each running
``/opt/bin/cmk isolate --pool=<pool> --namespace=cmk-namespace sleep -- inf``.
A machine too small for a pool (2 CPUs, no isolcpus: no shared pool) still
runs all three: the container whose pool is not advertised requests infra
and runs ``--pool=infra``, and the demo says so. Infra always exists (the
plan refuses to leave it empty), so that substitute always works.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from deviceplugin.model.cpulist import format_cpu_list
from deviceplugin.model.plan import CORE_POOLS, RESOURCE_NAMES, Pool, PoolPlan
from deviceplugin.view.tables import align_columns

POD_NAME = "cmk-demo"
RESOURCE_PREFIX = "cmk.intel.com/"
PINNER = "/opt/bin/cmk"
SEED_POOLS = (Pool.EXCLUSIVE, Pool.SHARED, Pool.INFRA)
#: What a container without a usable pool of its own runs from.
FALLBACK_POOL = Pool.INFRA


@dataclass(frozen=True)
class DemoContainer:
    """One container of the seed pod: named after the pool it stands for, drawing from ``pool``."""

    name: str
    pool: Pool
    note: str = ""

    @property
    def resource(self) -> str:
        return RESOURCE_NAMES[self.pool]

    @property
    def command(self) -> tuple[str, ...]:
        return (PINNER, "isolate", f"--pool={self.pool}", "--namespace=cmk-namespace", "sleep", "--", "inf")


def plan_summary(plan: PoolPlan) -> str:
    """``exclusive {1}, infra {0}``: every advertised pool with its cores."""
    parts = []
    for pool in Pool:
        cores = plan.pools[pool]
        if cores:
            parts.append(f"{pool} " + " ".join("{" + format_cpu_list(core.cpus) + "}" for core in cores))
    return ", ".join(parts)


def demo_containers(plan: PoolPlan, *, cores: int) -> tuple[DemoContainer, ...]:
    """The seed pod's containers for this plan; a pool the plan left empty is replaced by infra."""
    if not plan.advertised(FALLBACK_POOL):
        raise ValueError("the plan has no infra pool, which every plan keeps")
    isolation = "isolated cores" if plan.isolated_mode else "none isolated"
    containers = []
    for pool in SEED_POOLS:
        if plan.advertised(pool):
            containers.append(DemoContainer(str(pool), pool))
            continue
        containers.append(DemoContainer(str(pool), FALLBACK_POOL, note=(
            f"{pool}: not advertised on this machine ({cores} cores, {isolation}: the plan gives "
            f"{plan_summary(plan)}); the pod's {pool} container requests {RESOURCE_NAMES[FALLBACK_POOL]} "
            f"and runs --pool={FALLBACK_POOL} instead"
        )))
    return tuple(containers)


def host_argv(command: Sequence[str], mounts: Iterable[tuple[str, str]]) -> list[str]:
    """The container's argv with its executable's path mapped through ``(container_path, host_path)`` mounts.

    ``/opt/bin/cmk`` runs the host's install directory copy: what the
    container runtime's bind mount of the Allocate answer would show it.
    """
    program = command[0]
    for container_path, host_path in sorted(mounts, key=lambda m: -len(m[0])):
        prefix = container_path.rstrip("/") + "/"
        if program.startswith(prefix):
            return [host_path.rstrip("/") + "/" + program[len(prefix):], *command[1:]]
    raise ValueError(f"{program} is under no mount of the Allocate answer ({', '.join(c for c, _ in mounts) or 'none'})")


def unpinnable_reason(cpus: frozenset[int], *, allowed: frozenset[int]) -> str:
    """Why the pinner will refuse these CPUs here ("" when it can pin them).

    The pinner never runs a workload unpinned or half-pinned: CPUs outside
    its allowed set (a container's cpuset; here, this process's) make it
    exit with status 6, even with ``--no-affinity``.
    """
    missing = cpus - allowed
    if not missing:
        return ""
    several = len(missing) > 1
    noun = "CPUs" if several else "CPU"
    which = f"its {noun} {format_cpu_list(cpus)}" if missing == cpus else f"{noun} {format_cpu_list(missing)} of its {format_cpu_list(cpus)}"
    return f"{which} {'are' if several else 'is'} not among this machine's CPUs allowed here ({format_cpu_list(allowed)})"


def affinity_text(pid: int, cpus_allowed_list: str) -> str:
    """What ``taskset -cp PID`` prints."""
    return f"pid {pid}'s current affinity list: {cpus_allowed_list}"


def _ours(counts: Mapping[str, int]) -> list[str]:
    return sorted(r for r in counts if r.startswith(RESOURCE_PREFIX))


def node_status(capacity: Mapping[str, int], allocatable: Mapping[str, int], allocated: Mapping[str, int]) -> list[str]:
    """The ``Capacity:``, ``Allocatable:`` and ``Allocated resources:`` blocks of ``kubectl describe node``.

    As there, Allocatable counts healthy devices and does not drop while a
    pod holds some; what is held shows under Allocated resources (an extended
    resource's request always equals its limit).
    """
    resources = _ours(capacity)
    lines = []
    for title, counts in (("Capacity:", capacity), ("Allocatable:", allocatable)):
        width = max((len(r) for r in resources), default=0) + 1
        lines.append(title)
        lines += [f"  {(r + ':').ljust(width)}  {counts.get(r, 0)}" for r in resources]
    rows = [["Resource", "Requests", "Limits"], ["--------", "--------", "------"]]
    rows += [[r, str(allocated.get(r, 0)), str(allocated.get(r, 0))] for r in resources]
    lines.append("Allocated resources:")
    lines += align_columns(rows, indent="  ")
    return lines


def free_line(allocatable: Mapping[str, int], allocated: Mapping[str, int]) -> str:
    """One line: free devices per resource (allocatable minus allocated)."""
    parts = [f"{r.removeprefix(RESOURCE_PREFIX)} {allocatable.get(r, 0) - allocated.get(r, 0)} of {allocatable.get(r, 0)}"
             for r in _ours(allocatable)]
    return "Free devices: " + ", ".join(parts)


def unit(pool: Pool, count: int) -> str:
    word = "core" if pool in CORE_POOLS else "slot"
    return f"{count} {word}{'' if count == 1 else 's'}"


def table(rows: list[list[str]], indent: str = "  ") -> list[str]:
    return align_columns(rows, indent)
