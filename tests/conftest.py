"""Settings for the whole suite.

Hypothesis's per-example deadline (200 ms) is a timing assertion, and this
project's tests assert behaviour only (speed lives in ``benchmarks/``): on a
loaded 2-CPU CI machine one example of a pure function overran it. So no
deadline; hypothesis still reports any example that fails.
"""

from pathlib import Path

import pytest
from hypothesis import settings

from tests.support import vmtiers

settings.register_profile("cmk", deadline=None)
settings.load_profile("cmk")


#: tests/<directory> -> the tier's marker: ``pytest -m "unit or protocol"`` runs the fast tiers alone.
TIERS = {"unit": "unit", "protocol": "protocol", "pinner": "pinner", "hostile": "hostile",
         "e2e": "e2e", "node": "node", "systemd": "systemd", "cluster": "cluster"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test with its tier by its directory, so no test module has to say (or can forget) which; the
    VM tiers' tests last, since their VMs boot in the background meanwhile (:mod:`tests.support.vmtiers`)."""
    tests = Path(__file__).resolve().parent
    tiers = {}
    for item in items:
        parts = Path(item.fspath).resolve().relative_to(tests).parts
        tiers[item.nodeid] = tier = TIERS.get(parts[0]) if len(parts) > 1 else None
        if tier is not None:
            item.add_marker(getattr(pytest.mark, tier))
    items.sort(key=lambda item: tiers[item.nodeid] in vmtiers.LAST)


def pytest_sessionfinish() -> None:
    vmtiers.session_ended()
