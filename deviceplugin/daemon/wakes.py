"""The supervisor's queue: what woke it, taken in batches, with a tick when nothing did."""

from __future__ import annotations

import queue
import time
from dataclasses import dataclass
from enum import Enum

#: How often the supervisor checks that the plugin directory is still the one it watches.
DIR_CHECK_SECONDS = 1.0


class Wake(Enum):
    """What the queue carries; a deleted socket carries its name as :class:`SocketGone`."""

    CPUS = "a CPU changed"
    KUBELET_SOCKET = "kubelet.sock created"
    STREAM = "a ListAndWatch stream ended"
    TICK = "the plugin directory check is due"
    HELD = "the pod resources re-read is due"
    STOP = "stop"


@dataclass(frozen=True)
class SocketGone:
    name: str


@dataclass(frozen=True)
class HandedOut:
    """Allocate gave these CPUs of an IRQ-steered pool to a container about to start."""

    cpus: frozenset[int]


Item = Wake | SocketGone | HandedOut


class Wakes:
    """Filled from watcher and server threads, emptied by the supervisor's loop alone."""

    def __init__(self) -> None:
        self._queue: queue.Queue[Item] = queue.Queue()

    def put(self, item: Item) -> None:
        self._queue.put(item)

    def batch(self, held_due: float | None) -> set[Item]:
        """Everything queued once something arrives; a tick at least every :data:`DIR_CHECK_SECONDS` (the
        plugin directory check) and, while ``held_due`` is set, a re-read of pod resources when it is due."""
        batch = {self._next(held_due)}
        while True:
            try:
                batch.add(self._queue.get_nowait())
            except queue.Empty:
                return batch

    def _next(self, held_due: float | None) -> Item:
        if held_due is not None and time.monotonic() >= held_due:
            return Wake.HELD
        timeout = DIR_CHECK_SECONDS
        if held_due is not None:
            timeout = min(timeout, max(0.0, held_due - time.monotonic()))
        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            return Wake.TICK
