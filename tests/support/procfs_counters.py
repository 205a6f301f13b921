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


#: The softirq types of kernel 6.x, in its order; a real file has them all.
SOFTIRQ_TYPES = ("HI", "TIMER", "NET_TX", "NET_RX", "BLOCK", "IRQ_POLL", "TASKLET", "SCHED", "HRTIMER", "RCU")
#: x86's named per-CPU interrupt lines (kernel 6.x), for files as long as a real node's.
LOCAL_LINES = ("NMI", "SPU", "PMI", "IWI", "RTR", "CAL", "TLB", "TRM", "THR", "DFR", "MCE", "MCP", "HYP", "PIN", "NPI",
               "PIW")
#: The named lines and softirq types a running node counts on every CPU (watchdog NMIs, IPIs, TLB shootdowns,
#: machine-check polls; the timer, scheduler and RCU softirqs).
BUSY_EVERYWHERE = frozenset({"NMI", "PMI", "IWI", "CAL", "TLB", "MCP", "TIMER", "SCHED", "RCU"})


def _busy(name: str, order: list[int]) -> list[int]:
    return [1 if name in BUSY_EVERYWHERE else 0 for _ in order]


def write_counters(procfs: Path, cpus: Mapping[int, Known], *, steered_irq_lines: int = 0,
                   real_shape: bool = False) -> None:
    """Write stat, interrupts and softirqs for ``cpus`` (online ones; a gap in the numbers is an offline CPU).

    For benchmarks, files the size and shape of a real node's:
    ``steered_irq_lines`` adds numbered IRQ lines that each count 1 on one
    CPU, as a managed vector does (spread evenly over the CPUs; each adds 1
    to that CPU's device count), and ``real_shape`` every named
    line and softirq type a kernel writes, those in :data:`BUSY_EVERYWHERE`
    counting 1 on each CPU (adding 1 per line to its local counts), the
    others 0.
    """
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
                  _row("RES", [0 for _ in order], "Rescheduling interrupts")]
    steered_to = [n * len(order) // steered_irq_lines for n in range(steered_irq_lines)]  # spread over the CPUs
    interrupts[2:2] = [_row(str(100 + n), [int(i == steered_to[n]) for i in range(len(order))],
                            f"IR-PCI-MSIX-0000:3b:00.0   {n}-edge      ice-q") for n in range(steered_irq_lines)]
    interrupts += [_row(name, _busy(name, order)) for name in LOCAL_LINES if real_shape]
    interrupts += ["ERR:          7", "MIS:          0"]
    (procfs / "interrupts").write_text("\n".join(interrupts) + "\n")
    softirqs = [" " * 20 + "".join(f"CPU{c:<8}" for c in order),
                *(_row(f"{name:>8}", _busy(name, order)) for name in SOFTIRQ_TYPES[:3] if real_shape),
                _row("  NET_RX", [cpus[c].net_rx for c in order]),
                *(_row(f"{name:>8}", _busy(name, order)) for name in SOFTIRQ_TYPES[4:] if real_shape)]
    if not real_shape:
        softirqs.insert(1, _row("      HI", [0 for _ in order]))
    (procfs / "softirqs").write_text("\n".join(softirqs) + "\n")
