"""Settings for the whole suite.

Hypothesis's per-example deadline (200 ms) is a timing assertion, and this
project's tests assert behaviour only (speed lives in ``benchmarks/``): on a
loaded 2-CPU CI machine one example of a pure function overran it. So no
deadline; hypothesis still reports any example that fails.
"""

from hypothesis import settings

settings.register_profile("cmk", deadline=None)
settings.load_profile("cmk")
