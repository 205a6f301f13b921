"""How a node's daemon serves its pools to the kubelet: one mode per node, never both.

KEP-5004 lets one extended resource name be served by a device plugin on one node and by a DRA
driver on another, but never both on one node: the scheduler takes the DRA path only where the
node's allocatable of that name is 0. So the mode is a per-node setting (the config file's
``nodes:`` sections), and switching it is a rollout: ``docs/user/dra.md``.
"""

from __future__ import annotations

from enum import StrEnum


class ServingMode(StrEnum):
    """``device-plugin``: one kubelet device plugin per pool. ``dra``: one DRA driver, ResourceSlices per pool."""

    DEVICE_PLUGIN = "device-plugin"
    DRA = "dra"
