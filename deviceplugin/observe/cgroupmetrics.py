"""``cmk_unconfined_containers``: containers the node-wide hook did not confine, counted from the cgroup tree at scrape.

A count, not a series per container: container IDs churn with every restart
and a node may run hundreds, so a label per ID would grow the series without
bound; ``cmk describe`` names them. Which containers count:
:mod:`deviceplugin.model.confinement`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

from prometheus_client.core import GaugeMetricFamily, Metric

from deviceplugin.host.cgroups import NoHierarchy, scan
from deviceplugin.host.files import FileProblem
from deviceplugin.model.confinement import Reason, unconfined

log = logging.getLogger(__name__)


class UnconfinedCollector:
    """Scans the cpuset hierarchy under ``sysfs_root`` once per scrape."""

    def __init__(self, *, sysfs_root: Path, exclusive: frozenset[int]) -> None:
        self._sysfs_root = sysfs_root
        self._exclusive = exclusive
        self._said: tuple[str, ...] = ()

    def families(self, held: frozenset[frozenset[int]] | None) -> Iterator[Metric]:
        """``held``: each container's CPUs per the kubelet; None when its pod resources are away."""
        up = GaugeMetricFamily("cmk_cgroup_scan_up", "1 if the last scrape read the cpuset cgroup tree whole, "
                               "0 if it could not or stopped at a bound (then the count is a lower bound).")
        try:
            found = scan(self._sysfs_root)
        except (NoHierarchy, FileProblem) as err:
            self._once((str(err),))
            up.add_metric([], 0)
            yield up
            return
        self._once(found.notes)
        up.add_metric([], 1 if found.complete else 0)
        yield up
        count = GaugeMetricFamily("cmk_unconfined_containers", "Containers whose cpuset reaches exclusive-pool CPUs "
                                  "the hook never gave them, by reason: started_before_hook (restart them) or "
                                  "widened (the hook confined it and something rewrote its cpuset since).",
                                  labels=["reason"])
        reasons = [u.reason for u in unconfined(found.containers, self._exclusive, held)]
        for reason in (Reason.STARTED_BEFORE_HOOK, Reason.WIDENED):
            count.add_metric([reason], reasons.count(reason))
        yield count

    def _once(self, notes: tuple[str, ...]) -> None:
        if notes and notes != self._said:  # once per cause, not once per scrape
            log.warning("cgroup scan: %s", "; ".join(notes))
        self._said = notes
