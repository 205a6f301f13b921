"""Name the pod and container behind an allocation, after the fact, from the kubelet's pod resources.

The kubelet's Allocate request carries device IDs only, never the pod or
container, so the ``allocated`` log line cannot name them. This listener
queues each allocation and, in its own thread (never inside Allocate),
asks pod resources ``List`` a moment later which container holds those IDs,
then emits ``allocation_resolved``. It retries a few times (:data:`DELAYS`)
while the kubelet finishes admitting; an allocation never seen (the pod was
rejected by another plugin, or deleted at once) ends with a debug line, and
with the kubelet away the queued ones are dropped with a debug line.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from deviceplugin.assignments import Holding, Unavailable, read_assignments
from deviceplugin.events import Events

log = logging.getLogger(__name__)

#: Seconds to wait before each look-up: admission usually completes within the first.
DELAYS = (0.5, 1.0, 2.0, 4.0)


class AllocationResolver:
    """Batches: one List per round answers every allocation queued meanwhile, however many pods arrive."""

    def __init__(self, events: Events, socket: Path, *, delays: Sequence[float] = DELAYS,
                 timeout: float = 1.0) -> None:
        self._events = events
        self._socket = socket
        self._delays = tuple(delays)
        self._timeout = timeout
        self._queue: queue.Queue[Mapping[str, object] | None] = queue.Queue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cmk-resolver", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._queue.put(None)
        self._thread.join()

    def on_event(self, event: str, fields: Mapping[str, object]) -> None:
        if event == "allocated":
            self._queue.put(dict(fields))

    def _take(self, pending: list[tuple[int, Mapping[str, object]]], block: bool) -> None:
        """Move queued allocations into ``pending`` as (attempts so far, fields)."""
        while True:
            try:
                fields = self._queue.get(block=block)
            except queue.Empty:
                return
            if fields is None:
                return
            pending.append((0, fields))
            block = False

    def _run(self) -> None:
        pending: list[tuple[int, Mapping[str, object]]] = []
        while not self._stop.is_set():
            self._take(pending, block=not pending)
            if self._stop.is_set() or not pending:
                continue
            if self._stop.wait(min(self._delays[min(n, len(self._delays) - 1)] for n, _ in pending)):
                return
            self._take(pending, block=False)
            try:
                holdings = read_assignments(self._socket, allocatable=False, timeout=self._timeout).holdings
            except Unavailable as err:
                log.debug("cannot name the holders of %d allocations: %s", len(pending), err)
                pending = []
                continue
            pending = [(n + 1, f) for n, f in pending if not self._resolve(f, holdings)]
            for _, fields in [p for p in pending if p[0] >= len(self._delays)]:
                log.debug("allocation of %s %s never appeared in pod resources", fields["resource"], fields["devices"])
            pending = [p for p in pending if p[0] < len(self._delays)]

    def _resolve(self, fields: Mapping[str, object], holdings: Sequence[Holding]) -> bool:
        resource, ids = str(fields["resource"]), set(fields["devices"])  # type: ignore[call-overload]
        holders = [h for h in holdings if h.resource == resource and ids <= set(h.device_ids)]
        for h in holders:
            self._events.emit(
                "allocation_resolved",
                f"{resource} {','.join(h.device_ids)} (CPUs {fields['cpus']}) held by "
                f"{h.namespace}/{h.pod} container {h.container}",
                pool=fields["pool"], resource=resource, devices=list(h.device_ids), cpus=fields["cpus"],
                namespace=h.namespace, pod=h.pod, container=h.container)
        return bool(holders)
