"""Procfs counter files with values a test chose, laid out as the kernel writes them (kernel 6.x columns)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Known:
    """One CPU's counters: ticks in /proc/stat, one device IRQ line, the local timer, one softirq type."""

    user: int = 0
    system: int = 0
    idle: int = 0
    iowait: int = 0
    steal: int = 0
    guest: int = 0  # already inside user, as the kernel counts it
    device_irqs: int = 0
    timer_irqs: int = 0
    net_rx: int = 0


def _row(name: str, values: list[int], tail: str = "") -> str:
    return f"{name:>4}:" + "".join(f" {v:>10}" for v in values) + (f"   {tail}" if tail else "")


def write_counters(procfs: Path, cpus: Mapping[int, Known]) -> None:
    """Write stat, interrupts and softirqs for ``cpus`` (online ones; a gap in the numbers is an offline CPU)."""
    procfs.mkdir(parents=True, exist_ok=True)
    order = sorted(cpus)
    rows = {cpu: [k.user, 0, k.system, k.idle, k.iowait, 0, 0, k.steal, k.guest, 0] for cpu, k in cpus.items()}
    total = [sum(rows[c][i] for c in order) for i in range(10)]
    stat = ["cpu  " + " ".join(map(str, total))] + [f"cpu{c} " + " ".join(map(str, rows[c])) for c in order]
    stat += ["intr 12345 0 0", "ctxt 999", "btime 1700000000", "processes 42", "procs_running 1",
             "procs_blocked 0", "softirq 0 0 0"]
    (procfs / "stat").write_text("\n".join(stat) + "\n")
    header = " " * 11 + "".join(f"CPU{c:<11}" for c in order)
    interrupts = [header,
                  _row("24", [cpus[c].device_irqs for c in order], "IO-APIC   5-edge      eth0"),
                  _row("LOC", [cpus[c].timer_irqs for c in order], "Local timer interrupts"),
                  _row("RES", [0 for _ in order], "Rescheduling interrupts"),
                  "ERR:          7", "MIS:          0"]
    (procfs / "interrupts").write_text("\n".join(interrupts) + "\n")
    softirqs = [" " * 20 + "".join(f"CPU{c:<8}" for c in order),
                _row("      HI", [0 for _ in order]),
                _row("  NET_RX", [cpus[c].net_rx for c in order])]
    (procfs / "softirqs").write_text("\n".join(softirqs) + "\n")
