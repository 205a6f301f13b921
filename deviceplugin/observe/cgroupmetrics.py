"""``cmk_unconfined_containers``: containers the node-wide hook did not confine, counted from the cgroup tree at scrape.

A count, not a series per container: container IDs churn with every restart
and a node may run hundreds, so a label per ID would grow the series without
bound; ``cmk describe`` names them. Which containers count:
:mod:`deviceplugin.model.confinement`.

The walk reads one cpuset file per container (183 ms at 3,300 containers),
so a scrape reuses the last walk's containers while nothing says they
changed: the kubelet's holdings are the ones of that walk, it was complete
and it is younger than :data:`RESCAN_SECONDS`. Which of them count is
worked out again at every scrape, from the holdings of that scrape.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from prometheus_client.core import GaugeMetricFamily, Metric

from deviceplugin.host.cgroups import CgroupScan, NoHierarchy, scan
from deviceplugin.host.files import FileProblem
from deviceplugin.model.confinement import Reason, unconfined

log = logging.getLogger(__name__)


#: The longest a walk answers for while the kubelet's holdings stay the same: containers that hold no
#: device (those the count is about) come and go without the holdings changing. The alert waits 15 minutes.
RESCAN_SECONDS = 30.0


class UnconfinedCollector:
    """Scans the cpuset hierarchy under ``sysfs_root`` when a scrape finds the last walk stale."""

    def __init__(self, *, sysfs_root: Path, exclusive: frozenset[int], rescan_seconds: float = RESCAN_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._sysfs_root = sysfs_root
        self._exclusive = exclusive
        self._said: tuple[str, ...] = ()
        self._rescan_seconds = rescan_seconds
        self._clock = clock
        self._lock = threading.Lock()  # scrapes run in the HTTP server's threads
        self._last: tuple[float, frozenset[frozenset[int]] | None, CgroupScan] | None = None

    def _scan(self, held: frozenset[frozenset[int]] | None) -> CgroupScan:
        """The last walk if it still answers for ``held`` (see the module's docstring), else a new one."""
        with self._lock:
            now = self._clock()
            if self._last is not None:
                at, held_then, found = self._last
                if held_then == held and found.complete and now - at < self._rescan_seconds:
                    return found
            self._last = None
            found = scan(self._sysfs_root)  # raises: nothing kept, the next scrape walks again
            self._last = (now, held, found)
            return found

    def families(self, held: frozenset[frozenset[int]] | None) -> Iterator[Metric]:
        """``held``: each container's CPUs per the kubelet; None when its pod resources are away."""
        up = GaugeMetricFamily("cmk_cgroup_scan_up", "1 if the last scrape read the cpuset cgroup tree whole, "
                               "0 if it could not or stopped at a bound (then the count is a lower bound).")
        try:
            found = self._scan(held)
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
