"""``cmk describe``'s usage section: busy time, interrupts and softirqs per pool over a short window. Pure.

The same quantities as the ``cmk_cpu_*`` metrics (:mod:`deviceplugin.observe.cpumetrics`),
as rates between two samples the caller took ``seconds`` apart, plus the two
signals: busy time on exclusive-pool CPUs no container holds (a leak), and
device interrupts landing on exclusive or isolated CPUs. Holdings come from
the kubelet's pod resources; without them leaks are unknown (``None``), not 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from deviceplugin.model.cpulist import format_cpu_list
from deviceplugin.model.cpustats import (
    DEVICE,
    DEVICE_IRQ_ALERT_PER_SECOND,
    LOCAL,
    CpuRates,
    Place,
    Sample,
    pools_of,
    rates,
)
from deviceplugin.view.tables import align_columns

#: Busy share under which an unheld exclusive CPU is not listed as leaking (kernel threads wake briefly).
LEAK_THRESHOLD = 0.01


def _percent(share: float) -> float:
    return round(100 * share, 1)


def usage_data(place: Mapping[int, Place], before: Sample, after: Sample, seconds: float,
               held: frozenset[int] | None) -> dict[str, Any]:
    """The ``usage`` section of ``cmk describe -o json``: one entry per pool, then the CPUs to look at."""
    per_cpu = rates(before, after, seconds)
    pools = []
    for pool, cpus in pools_of(place).items():
        online = sorted(cpus & per_cpu.keys())
        exclusive = place[next(iter(cpus))].exclusive
        unheld = None if held is None or not exclusive else [c for c in online if c not in held]
        pools.append({
            "pool": pool,
            "cpus": format_cpu_list(online),
            "busy_cpus": round(sum(per_cpu[c].busy for c in online), 2),
            **{f"{kind}_{what}_per_second": round(sum(getattr(per_cpu[c], what).get(kind, 0.0) for c in online), 1)
               for what in ("interrupts", "softirqs") for kind in (DEVICE, LOCAL)},
            "held_cpus": None if held is None else format_cpu_list(c for c in online if c in held),
            "unheld_busy_cpus": None if unheld is None else round(sum(per_cpu[c].busy for c in unheld), 2),
        })
    return {
        "available": True,
        "window_seconds": round(seconds, 3),
        "pools": pools,
        "leaks": _leaks(place, per_cpu, held),
        "interrupted": _interrupted(place, per_cpu),
        "interrupt_threshold_per_second": DEVICE_IRQ_ALERT_PER_SECOND,
        "holdings_known": held is not None,
        "masked": sorted(before.masked | after.masked),  # tables the runtime masked: unknown, not 0
    }


def _interrupted(place: Mapping[int, Place], per_cpu: Mapping[int, CpuRates]) -> list[dict[str, Any]]:
    """The CPUs taking device IRQs in each exclusive or isolated place whose rate is over the alert's threshold.

    Summed per place as the alert sums its series, so describe lists a CPU exactly when the alert would fire
    for its place (a CPU at 5/s in a storming place is listed; a place at 20/s in all is not).
    """
    device = {cpu: r.interrupts.get(DEVICE, 0.0) for cpu, r in per_cpu.items() if cpu in place}
    storming = {where for where in {place[cpu] for cpu in device}
                if (where.exclusive or where.isolated)
                and sum(rate for cpu, rate in device.items() if place[cpu] == where) > DEVICE_IRQ_ALERT_PER_SECOND}
    return [{"cpu": cpu, "pool": place[cpu].pool, "isolated": place[cpu].isolated,
             "device_interrupts_per_second": round(rate, 1)}
            for cpu, rate in device.items() if place[cpu] in storming and rate > 0]


def _leaks(place: Mapping[int, Place], per_cpu: Mapping[int, CpuRates],
           held: frozenset[int] | None) -> list[dict[str, Any]]:
    if held is None:
        return []
    return [{"cpu": cpu, "pool": place[cpu].pool, "busy_percent": _percent(r.busy)}
            for cpu, r in per_cpu.items()
            if cpu in place and place[cpu].exclusive and cpu not in held and r.busy >= LEAK_THRESHOLD]


def unavailable(reason: str) -> dict[str, Any]:
    return {"available": False, "reason": reason}


def render_usage(usage: Mapping[str, Any]) -> list[str]:
    """Table lines: one row per pool, then a line per leaking CPU and per interrupted exclusive/isolated CPU."""
    if not usage["available"]:
        return [f"usage unavailable: {usage['reason']}"]
    lines = [f"Usage over {usage['window_seconds']:.1f} s (procfs; busy in CPUs, rates per second)"]
    rows = [["POOL", "CPUS", "BUSY", "DEVICE IRQS", "LOCAL IRQS", "DEVICE SOFTIRQS", "LOCAL SOFTIRQS", "HELD",
             "UNHELD BUSY"]]
    for p in usage["pools"]:
        unheld = "-" if p["unheld_busy_cpus"] is None else f"{p['unheld_busy_cpus']:.2f}"
        held = "?" if p["held_cpus"] is None else (p["held_cpus"] or "-")
        counts = ["?" if what in usage["masked"] else f"{p[f'{kind}_{what}_per_second']:g}"
                  for what in ("interrupts", "softirqs") for kind in (DEVICE, LOCAL)]
        rows.append([p["pool"], p["cpus"] or "-", f"{p['busy_cpus']:.2f}", *counts, held, unheld])
    lines += align_columns(rows, indent="  ")
    for leak in usage["leaks"]:
        lines.append(f"  leak: CPU {leak['cpu']} ({leak['pool']}) is {leak['busy_percent']:g} % busy "
                     "and no container holds it")
    for hit in usage["interrupted"]:
        where = hit["pool"] + (", isolated" if hit["isolated"] else "")
        lines.append(f"  interrupts: {hit['device_interrupts_per_second']:g} device IRQs/s on CPU {hit['cpu']} "
                     f"({where}; its place is over {usage['interrupt_threshold_per_second']:g}/s, as the alert): "
                     "steer them away with /proc/irq/*/smp_affinity_list (on held cores: cmk device-plugin --irq-steering)")
    if not usage["holdings_known"]:
        lines.append("  note: the kubelet's pod resources could not be read: leaks unknown")
    for name in usage["masked"]:
        lines.append(f"  note: /proc/{name} is masked by the container runtime (Kubernetes' default maskedPaths):"
                     f" {name} unknown")
    return lines
