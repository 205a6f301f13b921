"""The product on a real kernel: each test is one check a guest program ran inside that shape's VM.

See tests/node/shapes.py for the shapes and tests/node/guest.py for what
each check does; a VM that cannot boot fails every test of its shape.
"""

from __future__ import annotations

import pytest

from tests.node.shapes import SHAPES

CASES = [(shape.name, check) for shape in SHAPES.values() for check in shape.checks]


@pytest.mark.node
@pytest.mark.parametrize(("shape", "check"), CASES, ids=[f"{s}/{c}" for s, c in CASES])
def test_in_a_real_kernel(node_boots, shape, check):
    result = node_boots.get(shape).result
    assert "error" not in result, f"the guest program failed:\n{result['error']}"
    assert check in result["checks"], f"the guest did not run {check}"
    outcome = result["checks"][check]
    assert outcome["ok"], outcome["detail"]
