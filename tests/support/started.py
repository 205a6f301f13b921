"""What a fixture starts, each stopped when the test ends: one shape for every factory fixture."""

from __future__ import annotations

from typing import Protocol, Self, TypeVar


class _Stoppable(Protocol):
    def stop(self) -> object: ...


class _Startable(_Stoppable, Protocol):
    def start(self) -> object: ...


S = TypeVar("S", bound=_Stoppable)
T = TypeVar("T", bound=_Startable)


class StopAfter:
    """``with StopAfter() as kept:`` around a fixture's ``yield``; leaving it stops what was kept, in order.

    ``kept.start(thing)`` starts a thing and keeps it; ``kept.keep(thing)`` keeps one already started.
    Both return it, so a factory ends with ``return kept.start(Daemon(...))``.
    """

    def __init__(self) -> None:
        self._kept: list[_Stoppable] = []

    def __len__(self) -> int:
        return len(self._kept)

    def start(self, thing: T) -> T:
        thing.start()
        return self.keep(thing)

    def keep(self, thing: S) -> S:
        self._kept.append(thing)
        return thing

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        for thing in self._kept:
            thing.stop()
