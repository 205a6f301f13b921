"""The kubelet's CPU manager: under its static policy it pins CPUs itself, so the exclusive pools are not served.

A collaborator of the supervisor that returns values: :meth:`CpuManager.refusals`
says which resources to leave unserved at a serve, :meth:`CpuManager.none_now`
whether a re-read found the policy back at ``none`` (serve them all again).
"""

from __future__ import annotations

import time
from pathlib import Path

from deviceplugin.events import EventLog
from deviceplugin.model.devices import DeviceTree

events = EventLog(__name__)


class CpuManager:
    """The resources refused at the last serve, read from pod resources ``GetAllocatableResources``."""

    def __init__(self, socket: Path | None, *, recheck: float) -> None:
        self._socket, self._recheck = socket, recheck
        #: Resources not served because the kubelet's static CPU manager pins CPUs itself (checked at each serve).
        self.refused: frozenset[str] = frozenset()
        self._due = 0.0

    def refusals(self, tree: DeviceTree) -> frozenset[str]:
        """The exclusive pools' resources when the kubelet's static CPU manager pins CPUs itself, else none.

        Read at every serve (start, kubelet restart: a policy change restarts the kubelet). Unreadable:
        the last answer stands (at start: served), and a line says why.
        """
        if self._socket is None:
            return self.refused
        from deviceplugin.model.assignments import cpu_manager_problem
        from deviceplugin.model.plan import CORE_POOLS
        from deviceplugin.protocol.podresources import Unavailable, kubelet_cpus

        try:
            problem = cpu_manager_problem(kubelet_cpus(self._socket))
        except Unavailable as err:
            if not self.refused:
                events.warning("cpu_manager_unknown", f"cannot tell the kubelet's CPU manager policy ({err}): serving "
                               "the exclusive pools, which needs the kubelet's cpuManagerPolicy: none", reason=str(err))
            return self.refused
        refused = frozenset() if problem is None else \
            frozenset(resource for resource, devices in tree.items() if devices.pool in CORE_POOLS)
        if problem is not None and refused:
            events.error("cpu_manager_static", f"not serving {', '.join(sorted(refused))}: {problem}", problem=problem,
                         refused=tuple(sorted(refused)))
        self.refused = refused
        return refused

    def none_now(self) -> bool:
        """While pools are refused, re-read the policy every ``recheck`` s: True once it is none (serve them all).

        The kubelet's pod resources socket may come up after its ``kubelet.sock``, so the check at the
        re-registration of a kubelet restarted with policy ``none`` can miss it.
        """
        if not self.refused or self._socket is None or time.monotonic() < self._due:
            return False
        self._due = time.monotonic() + self._recheck
        from deviceplugin.protocol.podresources import Unavailable, kubelet_cpus

        try:
            return not kubelet_cpus(self._socket)
        except Unavailable:
            return False
