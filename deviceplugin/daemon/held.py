"""Held cores: which devices containers still hold under another ID or pool, learnt from pod resources.

A collaborator of the supervisor that returns values: :meth:`HeldCores.learn`
says which cores are withheld now, and the supervisor decides what to serve.
"""

from __future__ import annotations

import time
from pathlib import Path

from deviceplugin.errors import CmkError
from deviceplugin.events import EventLog
from deviceplugin.model.cpulist import format_cpu_list
from deviceplugin.model.plan import RESOURCE_NAMES, PoolPlan
from deviceplugin.model.topology import Core
from deviceplugin.model.withheld import Withheld, learn_holds

events = EventLog(__name__)


class HeldCores:
    """The withheld cores and the slot record, kept from one read of pod resources to the next."""

    def __init__(self, socket: Path | None, kubelet_dir: Path, *, recheck: float) -> None:
        self._socket, self._kubelet_dir, self._recheck = socket, kubelet_dir, recheck
        self.withheld: tuple[Withheld, ...] = ()
        #: resource -> the device IDs containers hold, from the last read (None: that read failed).
        self.held: dict[str, frozenset[str]] | None = None
        self._due = 0.0
        self._slots_before: dict[str, frozenset[int]] | None = None
        self._slots_held_at_start: dict[str, frozenset[str]] | None = None

    @property
    def cores(self) -> frozenset[Core]:
        return frozenset(w.core for w in self.withheld)

    def due(self) -> float | None:
        """When the next re-read is due (``time.monotonic``); None while nothing is withheld."""
        return self._due if self.withheld else None

    def learn(self, plan: PoolPlan) -> frozenset[Core] | None:
        """Read which devices containers hold and keep the slot record; the withheld cores when they changed.

        Pod resources unreachable: one warning, and what was withheld stays so (None).
        """
        if self._socket is None:
            return None
        self._due = time.monotonic() + self._recheck
        from deviceplugin.host.slotrecord import read_record, write_record
        from deviceplugin.protocol.podresources import Unavailable, read_assignments

        if self._slots_before is None:
            try:
                self._slots_before = read_record(self._kubelet_dir) or {}
            except CmkError as err:
                events.warning("slot_record_unread", str(err), reason=str(err))
                self._slots_before = {}
        try:
            assignments = read_assignments(self._socket, resources=RESOURCE_NAMES.values(), allocatable=False)
        except Unavailable as err:
            events.warning("held_unknown", f"cannot learn which devices are held ({err}): cores the kubelet holds "
                           "under other IDs or pools may be advertised as free", reason=str(err))
            self.held = None
            return None
        held = {resource: assignments.held(resource) for resource in RESOURCE_NAMES.values()}
        self.held = held
        if self._slots_held_at_start is None:
            self._slots_held_at_start = held
        holds = learn_holds(plan, held, self._slots_before, self._slots_held_at_start)
        changed = self._withhold(holds.withheld)
        try:
            write_record(self._kubelet_dir, holds.record)
        except CmkError as err:
            events.warning("slot_record_unwritten", str(err), reason=str(err))
        return self.cores if changed else None

    def _withhold(self, withheld: tuple[Withheld, ...]) -> bool:
        """Keep ``withheld``, announcing each core newly withheld or released; True when the set changed."""
        old = {w.core: w for w in self.withheld}
        new = {w.core: w for w in withheld}
        for core in new.keys() - old.keys():
            held = new[core]
            events.warning("core_withheld", held.message, core=format_cpu_list(core.cpus), pool=str(held.planned),
                           resource=held.resource, device=held.device_id, reason=held.reason)
        for core in old.keys() - new.keys():
            cpus, pool = format_cpu_list(core.cpus), str(old[core].planned)
            events.info("core_released", f"core {{{cpus}}} is free at the kubelet: back in {pool}", core=cpus, pool=pool)
        self.withheld = withheld
        return new.keys() != old.keys()
