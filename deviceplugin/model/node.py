"""The node's plan: topology → pool plan → device tree, composed once for every caller.

The daemon, ``cmk describe``, ``cmk install``, ``cmk host-config`` and ``cmk demo``
all start from the same three values; composing them here means a change to
how a node is planned (a new check, a new pool) reaches every one of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from deviceplugin.model import devices
from deviceplugin.model.devices import DeviceTree, device_tree
from deviceplugin.model.plan import PlanOptions, PoolPlan, plan_pools
from deviceplugin.model.topology import Core, Topology


@dataclass(frozen=True)
class NodePlan:
    """What a node serves: the topology it was planned on, its pools, and the devices they advertise."""

    topology: Topology
    plan: PoolPlan
    #: the devices with every online CPU and nothing withheld (the daemon's first snapshot)
    tree: DeviceTree
    #: each of the plan's cores' device ID (:func:`~deviceplugin.model.devices.core_device_ids`): named once,
    #: for every tree and the CDI spec, not again by each (hashing 4,096 cores per naming on 8,192 CPUs)
    core_ids: Mapping[Core, str]

    def tree_now(self, online: frozenset[int], withheld: frozenset[Core] = frozenset()) -> DeviceTree:
        """The same plan's devices once CPUs went offline or cores are withheld (the plan itself never moves)."""
        return device_tree(self.plan, online, withheld, names=self.core_ids)


def plan_node(topology: Topology, options: PlanOptions) -> NodePlan:
    """Plan ``topology``; raises :class:`~deviceplugin.model.plan.PlanError` when ``options`` do not fit it."""
    plan = plan_pools(topology, options)
    # Through the module, as device_tree looked it up before: tests of an upgrade swap the naming there.
    names = devices.core_device_ids(plan.all_cores)
    return NodePlan(topology, plan, device_tree(plan, topology.online, names=names), names)
