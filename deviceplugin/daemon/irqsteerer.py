"""IRQ steering: while containers hold exclusive CPUs of a steered pool, device interrupts stay off them.

A collaborator of the supervisor, run on its thread only. Each round takes
the CPUs held now (pod resources, read by :mod:`.held`) and the CPUs just
handed out by Allocate (a container starts before the kubelet's next
answer lists it), decides with :func:`deviceplugin.model.irqsteer.steer`,
records before it writes, and gives every mask back once its CPUs are free.
Where irqbalance runs it owns the masks: it is told the held CPUs instead.
Why: ``docs/user/irq-steering.md``.
"""

from __future__ import annotations

import time
from pathlib import Path

from deviceplugin.errors import CmkError
from deviceplugin.events import EventLog, Observer
from deviceplugin.host import irqs
from deviceplugin.model.cpulist import format_cpu_list
from deviceplugin.model.irqsteer import Narrowed, steer

events = EventLog(__name__)


class IrqSteering:
    """The masks narrowed now, the IRQs the kernel refused (never retried), and the CPUs kept clear."""

    def __init__(self, *, irq_dir: Path, record_dir: Path, irqbalance_dir: Path, recheck: float,
                 observer: Observer) -> None:
        self._irq_dir, self._record_dir, self._irqbalance_dir = irq_dir, record_dir, irqbalance_dir
        self._recheck, self._observer = recheck, observer
        self._record: dict[str, Narrowed] | None = None
        self._refused: set[str] = set()
        #: CPUs Allocate just gave out -> when to stop counting them held if pod resources never list them.
        self._handed_out: dict[int, float] = {}
        self._held: frozenset[int] = frozenset()
        #: The CPUs a running irqbalance was last told to keep clear (None: no irqbalance listened).
        self._banned: frozenset[int] | None = None
        self._banned_via: Path | None = None
        self._due = 0.0

    @property
    def away(self) -> frozenset[int]:
        """The CPUs kept clear of device interrupts now."""
        now = time.monotonic()
        return self._held | {cpu for cpu, until in self._handed_out.items() if until > now}

    def due(self) -> float | None:
        """When the next round is due while anything is held or narrowed (to give it back, and to catch
        masks moved or IRQs added since); None while there is nothing to keep or give back."""
        busy = self.away or self._record or self._banned
        return self._due if busy else None

    def handed_out(self, cpus: frozenset[int]) -> None:
        """Allocate gave ``cpus`` to a container about to start: clear them now, for two re-reads at least."""
        until = time.monotonic() + 2 * self._recheck
        self._handed_out.update({cpu: until for cpu in cpus})

    def update(self, held: frozenset[int] | None, housekeeping: frozenset[int]) -> None:
        """One round: ``held`` from pod resources (None: unread, the last answer stands); an IRQ whose mask
        names only held CPUs goes to ``housekeeping``."""
        self._due = time.monotonic() + self._recheck
        if held is not None:
            self._held = held
            self._handed_out = {cpu: until for cpu, until in self._handed_out.items() if cpu not in held}
        away = self.away
        if self._tell_irqbalance(away):
            away = frozenset()  # irqbalance moves them; ours are only given back
        record = self._load_record()
        try:
            masks = irqs.read_masks(self._irq_dir)
        except CmkError as err:
            events.warning("irq_record_problem", str(err), reason=str(err))
            return
        plan = steer(masks, record, away, housekeeping, frozenset(self._refused))
        if not plan.writes:
            self._keep(dict(plan.record))
            return
        self._keep(plan.ahead(record))  # before any write: a daemon killed mid-round still gives them back
        failed: set[str] = set()
        for irq, cpus in sorted(plan.writes.items()):
            try:
                irqs.write_mask(self._irq_dir, irq, cpus)
            except OSError as err:
                failed.add(irq)
                self._refused.add(irq)
                error, shown = err.strerror or str(err), format_cpu_list(cpus)
                events.warning("irq_unmovable", f"IRQ {irq} cannot be pointed at CPUs {shown} ({error}): the kernel "
                               "manages it or /proc/irq is read-only here; it is left as it is and not tried again",
                               irq=irq, cpus=shown, error=error)
                self._observer.irq_unmovable()
        self._keep(plan.settled(record, frozenset(failed)))
        moved = len(plan.writes) - len(failed)
        if moved:
            narrowed = len(self._record or {})
            events.info("irqs_steered", f"wrote {moved} IRQ masks for {_held(away)}; {narrowed} stay narrowed",
                        cpus=format_cpu_list(away), moved=moved, narrowed=narrowed, via="")
            self._observer.irqs_steered(narrowed)

    def _tell_irqbalance(self, away: frozenset[int]) -> bool:
        """Ban ``away`` in a running irqbalance when it changed or irqbalance restarted (a new socket, a new
        list of its own); True while one listens."""
        if away == self._banned and self._banned_via is not None and self._banned_via.exists():
            return True
        taker = irqs.ban_cpus(self._irqbalance_dir, away)
        self._banned_via = taker
        if taker is None:
            self._banned = None
            return False
        self._banned = away
        events.info("irqs_steered", f"asked irqbalance ({taker}) to keep device interrupts off {_held(away)}",
                    cpus=format_cpu_list(away), moved=0, narrowed=0, via=str(taker))
        self._observer.irqs_steered(0)
        return True

    def _load_record(self) -> dict[str, Narrowed]:
        if self._record is None:
            try:
                self._record = irqs.read_record(self._record_dir)
            except CmkError as err:
                events.warning("irq_record_problem", str(err), reason=str(err))
                self._record = {}
        return self._record

    def _keep(self, record: dict[str, Narrowed]) -> None:
        if record == self._record:
            return
        try:
            irqs.write_record(self._record_dir, record)
        except CmkError as err:
            events.warning("irq_record_problem", str(err), reason=str(err))
        self._record = record


def _held(cpus: frozenset[int]) -> str:
    return f"held CPUs {format_cpu_list(cpus)}" if cpus else "no held CPUs"
