"""The daemon's operator-facing lines and the few notifications that drive code: no catalogue.

A log line is one call where the thing happens, on the module's
:class:`EventLog`: ``events.info("serving", f"serving {resource} ...", resource=resource)``.
The record carries ``event`` and each field as attributes (stdlib ``extra``),
which :mod:`deviceplugin.observe.logs` renders as ``key=value`` or JSON and
tests read from ``caplog``. What metrics, the allocation resolver or IRQ
steering act on is a method call on an :class:`Observer`, not a log line.
Why stdlib ``logging`` and not structlog: ``docs/dev/logging.md``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

_log = logging.getLogger(__name__)


class EventLog:
    """A module's logger whose lines carry ``event=<name>`` and fields, in the order given.

    A field must not be named as a ``LogRecord`` attribute (``name``, ``msg``,
    ``module``...): ``logging`` refuses it at the call, so a test catches it.
    """

    def __init__(self, name: str) -> None:
        self.logger = logging.getLogger(name)

    def debug(self, event: str, message: str, /, **fields: object) -> None:
        self._log(logging.DEBUG, event, message, fields)

    def info(self, event: str, message: str, /, **fields: object) -> None:
        self._log(logging.INFO, event, message, fields)

    def warning(self, event: str, message: str, /, **fields: object) -> None:
        self._log(logging.WARNING, event, message, fields)

    def error(self, event: str, message: str, /, **fields: object) -> None:
        self._log(logging.ERROR, event, message, fields)

    def exception(self, event: str, message: str, /, **fields: object) -> None:
        """An error line carrying the traceback of the exception being handled: call it inside ``except``."""
        self._log(logging.ERROR, event, message, fields, exc_info=True)

    def _log(self, level: int, event: str, message: str, fields: dict[str, object], *,
             exc_info: bool = False) -> None:
        if self.logger.isEnabledFor(level):
            self.logger.log(level, message, exc_info=exc_info, extra={"event": event, **fields}, stacklevel=3)


@dataclass(frozen=True)
class Allocation:
    """One container's Allocate answer: the kubelet names no pod, so the resolver looks it up later.

    ``devices`` names each device once, however often the request repeated it.
    """

    pool: str
    resource: str
    devices: tuple[str, ...]
    cpus: str


class Observer:
    """What the daemon tells the code that acts on it (metrics, the resolver, IRQ steering); each a no-op here.

    Called in the reporting thread (a gRPC worker for Allocate), so an override must be quick.
    """

    def registered(self, resource: str) -> None:
        """``resource`` registered with the kubelet."""

    def kubelet_restarted(self) -> None:
        """A new ``kubelet.sock`` after one was there."""

    def allocated(self, allocation: Allocation, seconds: float) -> None:
        """Allocate answered one container in ``seconds``."""

    def allocate_refused(self, pool: str, seconds: float) -> None:
        """Allocate refused a container's request (the pod is rejected)."""

    def preferred(self, pool: str, seconds: float, *, refused: bool) -> None:
        """GetPreferredAllocation answered (or refused) one container in ``seconds``."""

    def irqs_steered(self, narrowed: int) -> None:
        """IRQ steering keeps ``narrowed`` masks narrowed now."""

    def irq_unmovable(self) -> None:
        """The kernel refused an IRQ's mask."""


class Observers(Observer):
    """Tells each observer added; one that fails is logged and skipped (a broken metric must not fail an Allocate).

    Per daemon (not global), so two daemons in one test process keep their own.
    """

    def __init__(self, *observers: Observer) -> None:
        self._observers = list(observers)

    def add(self, observer: Observer) -> None:
        self._observers.append(observer)

    def _each(self, call: Callable[[Observer], None]) -> None:
        for observer in self._observers:
            try:
                call(observer)
            except Exception:  # noqa: BLE001 - a broken observer must not fail an Allocate
                _log.exception("observer %s failed", type(observer).__name__)

    def registered(self, resource: str) -> None:
        self._each(lambda o: o.registered(resource))

    def kubelet_restarted(self) -> None:
        self._each(lambda o: o.kubelet_restarted())

    def allocated(self, allocation: Allocation, seconds: float) -> None:
        self._each(lambda o: o.allocated(allocation, seconds))

    def allocate_refused(self, pool: str, seconds: float) -> None:
        self._each(lambda o: o.allocate_refused(pool, seconds))

    def preferred(self, pool: str, seconds: float, *, refused: bool) -> None:
        self._each(lambda o: o.preferred(pool, seconds, refused=refused))

    def irqs_steered(self, narrowed: int) -> None:
        self._each(lambda o: o.irqs_steered(narrowed))

    def irq_unmovable(self) -> None:
        self._each(lambda o: o.irq_unmovable())
