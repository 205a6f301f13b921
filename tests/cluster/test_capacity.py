"""What `kubectl describe node` shows a user: each pool's count as the daemon's own plan says, nothing for empty pools."""

from __future__ import annotations

import pytest

from tests.cluster.deploy import Deployment, describe_node, describe_section


@pytest.mark.parametrize("section", ["Capacity", "Allocatable"])
def test_describe_node_shows_each_planned_pool_and_no_empty_one(deployed: Deployment, section: str) -> None:
    rows = describe_section(describe_node(deployed.node), section)
    shown = {resource: cells[0] for resource, cells in rows.items() if resource.startswith("cmk.intel.com/")}
    planned = {p["resource"]: str(p["advertised"]) for p in deployed.pools() if p["advertised"]}
    assert shown == planned
    assert set(planned) < {p["resource"] for p in deployed.pools()}, "this node leaves no pool empty: nothing to check"
