"""Device interrupts kept off held exclusive CPUs: which masks to narrow, which to give back. Pure values, no I/O.

Each device IRQ that lands on a CPU a pinned thread holds preempts it, so
while containers hold exclusive CPUs of a pool with IRQ steering on, no
steerable IRQ may target them. Every mask the daemon narrows is recorded
with the mask it found and the one it wrote, before it writes, so a
restarted daemon gives back exactly what it took (nothing lost, nothing left
narrowed). A mask someone else changed since (an operator, a tuning agent)
is theirs: it becomes the one to give back, narrowed again if it still
names held CPUs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from deviceplugin.model.devices import DeviceTree, legacy_core_cpus

#: The key of ``/proc/irq/default_smp_affinity``: the mask an IRQ requested later starts with.
DEFAULT = "default"


@dataclass(frozen=True)
class Narrowed:
    """One mask the daemon narrowed: the one it found (given back on release) and the one it wrote."""

    found: frozenset[int]
    wrote: frozenset[int]


@dataclass(frozen=True)
class Steering:
    """One round's decision: the masks to write, and the record that holds once they are written."""

    writes: Mapping[str, frozenset[int]]
    record: Mapping[str, Narrowed]

    def ahead(self, before: Mapping[str, Narrowed]) -> dict[str, Narrowed]:
        """The record to keep while writing: the new narrowings and every old one not yet given back."""
        return {**before, **self.record}

    def settled(self, before: Mapping[str, Narrowed], failed: frozenset[str]) -> dict[str, Narrowed]:
        """The record after the writes: a write the kernel refused changed nothing, so what was recorded
        for its IRQ before stays (the original is never lost) and a first narrowing is not recorded."""
        record = {irq: entry for irq, entry in self.record.items() if irq not in failed}
        record.update({irq: before[irq] for irq in failed if irq in before})
        return record


def steer(masks: Mapping[str, frozenset[int]], record: Mapping[str, Narrowed], away: frozenset[int],
          housekeeping: frozenset[int], skip: frozenset[str] = frozenset()) -> Steering:
    """Keep every IRQ in ``masks`` (IRQ -> its current mask) off ``away``, giving back what no longer needs it.

    An IRQ keeps the CPUs of its own mask that are not held; one whose mask
    names only held CPUs goes to ``housekeeping`` (the online CPUs outside
    the steered pools, where the next held core cannot be); with none of
    those left it stays. IRQs in ``skip`` (the
    kernel refused a write to them before) are left alone, their record
    kept; IRQs gone from ``masks`` (their device went away) leave the record.
    """
    writes: dict[str, frozenset[int]] = {}
    kept: dict[str, Narrowed] = {}
    for irq, mask in masks.items():
        entry = record.get(irq)
        if irq in skip:
            if entry is not None:
                kept[irq] = entry
            continue
        found = entry.found if entry is not None and entry.wrote == mask else mask
        want = (found - away) or (housekeeping - away) or found
        if want != found:
            kept[irq] = Narrowed(found, want)
        if want != mask:
            writes[irq] = want
    return Steering(writes, kept)


def held_cpus(tree: DeviceTree, held: Mapping[str, Iterable[str]], resources: Iterable[str]) -> frozenset[int]:
    """The CPUs of the devices containers hold under ``resources`` (``held``: resource -> IDs, from pod
    resources); an ID of an older release counts by the CPUs it names."""
    found: set[int] = set()
    for resource in resources:
        ids = set(held.get(resource, ()))
        if resource in tree:
            found |= tree[resource].cpus_of(ids)
        found.update(cpu for i in ids for cpu in legacy_core_cpus(i) or ())
    return frozenset(found)


def housekeeping(online: frozenset[int], steered: frozenset[int]) -> frozenset[int]:
    """Where an IRQ pointed only at held CPUs goes: the online CPUs outside the steered pools (all, if none)."""
    return (online - steered) or online
