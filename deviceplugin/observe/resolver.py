"""Name the pod and container behind an allocation, after the fact, from the kubelet's pod resources.

The kubelet's Allocate request carries device IDs only, never the pod or
container, so the ``allocated`` log line cannot name them. This observer
queues each allocation and, in its own thread (never inside Allocate),
asks pod resources ``List`` a moment later which container holds those IDs,
then logs ``allocation_resolved``. It retries a few times (:data:`DELAYS`)
while the kubelet finishes admitting; an allocation never seen (the pod was
rejected by another plugin, or deleted at once) ends with a debug line, and
with the kubelet away the queued ones are dropped with a debug line.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from deviceplugin.events import Allocation, EventLog, Observer
from deviceplugin.model.assignments import Holding
from deviceplugin.protocol.podresources import Unavailable, read_assignments

events = EventLog(__name__)

#: Seconds to wait before each look-up: admission usually completes within the first.
DELAYS = (0.5, 1.0, 2.0, 4.0)

#: (look-ups made, monotonic time the next is due, the allocation)
_Pending = tuple[int, float, Allocation]


class AllocationResolver(Observer):
    """Batches: one List per round answers every allocation queued meanwhile, however many pods arrive."""

    def __init__(self, socket: Path, *, delays: Sequence[float] = DELAYS,
                 timeout: float = 1.0) -> None:
        self._socket = socket
        self._delays = tuple(delays)
        self._timeout = timeout
        self._queue: queue.Queue[Allocation | None] = queue.Queue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cmk-resolver", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._queue.put(None)
        self._thread.join()

    def allocated(self, allocation: Allocation, seconds: float) -> None:
        self._queue.put(allocation)

    def _take(self, pending: list[_Pending], block: bool) -> None:
        """Move queued allocations into ``pending``, each due for its first look-up after ``delays[0]``."""
        while True:
            try:
                allocated = self._queue.get(block=block)
            except queue.Empty:
                return
            if allocated is None:
                return
            pending.append((0, time.monotonic() + self._delays[0], allocated))
            block = False

    def _run(self) -> None:
        pending: list[_Pending] = []
        while not self._stop.is_set():
            self._take(pending, block=not pending)
            if self._stop.is_set() or not pending:
                continue
            if self._stop.wait(max(0.0, min(due for _, due, _ in pending) - time.monotonic())):
                return
            self._take(pending, block=False)
            try:
                holdings = read_assignments(self._socket, allocatable=False, timeout=self._timeout).holdings
            except Unavailable as err:
                events.logger.debug("cannot name the holders of %d allocations: %s", len(pending), err)
                pending = []
                continue
            pending = self._after_lookup(pending, holdings, time.monotonic())

    def _after_lookup(self, pending: list[_Pending], holdings: Sequence[Holding], now: float) -> list[_Pending]:
        """Drop the resolved; an allocation not yet due keeps its attempts (another's turn came)."""
        still: list[_Pending] = []
        for attempts, due, allocated in pending:
            if self._resolve(allocated, holdings):
                continue
            if due > now:
                still.append((attempts, due, allocated))
                continue
            attempts += 1
            if attempts >= len(self._delays):
                events.logger.debug("allocation of %s %s never appeared in pod resources", allocated.resource,
                                    ",".join(allocated.devices))
                continue
            still.append((attempts, now + self._delays[attempts], allocated))
        return still

    def _resolve(self, allocated: Allocation, holdings: Sequence[Holding]) -> bool:
        ids = set(allocated.devices)
        holders = [h for h in holdings if h.resource == allocated.resource and ids <= set(h.device_ids)]
        for h in holders:
            events.info("allocation_resolved", f"{allocated.resource} {','.join(h.device_ids)} (CPUs {allocated.cpus}) held "
                        f"by {h.namespace}/{h.pod} container {h.container}", pool=allocated.pool,
                        resource=allocated.resource, devices=tuple(h.device_ids), cpus=allocated.cpus,
                        namespace=h.namespace, pod=h.pod, container=h.container)
        return bool(holders)
