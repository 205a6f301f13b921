"""Timing a call repeatedly, shared by the benchmarks that measure in-process calls."""

from __future__ import annotations

import time
from collections.abc import Callable


def samples_ms(call: Callable[[], object], runs: int, *, warmup: int) -> list[float]:
    """Milliseconds of each of ``runs`` calls, after ``warmup`` untimed ones (caches, threads, channels)."""
    for _ in range(warmup):
        call()
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        samples.append((time.perf_counter() - start) * 1000)
    return samples
