"""What a stand-in kubelet is configured with: one value, passed down, instead of fourteen parameters."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from deviceplugin.standin.lifecycle import VERSIONS
from deviceplugin.standin.topologymanager import TopologyPolicy


@dataclass(frozen=True, kw_only=True)
class KubeletOptions:
    """The kubelet's settings that differ between tests; every default is the real kubelet's.

    ``grace_period`` is how long a resource whose stream ended keeps its
    capacity (the kubelet's 5 minutes), measured on ``clock`` (a test passes
    its own to jump over it); ``seed`` fixes the random orders the kubelet
    walks maps and sets in. ``version`` (1.28 .. 1.36) and ``feature_gates``
    set what differs by version (``lifecycle.feature_gates``); ``cdi_dirs``
    are the runtime's CDI spec directories container starts resolve names
    against (None: the runtime has CDI off and ignores the names). ``static_cpus``
    non-empty: the kubelet runs CPU manager policy ``static`` handing out those
    CPUs (its pod resources API lists them); empty: policy ``none``.
    """

    #: Where to serve pod resources too; None: not served.
    pod_resources_socket: Path | None = None
    grace_period: float = 300.0
    dial_timeout: float = 10.0
    rpc_timeout: float = 30.0
    seed: int | None = None
    workers: int = 16
    topology_policy: TopologyPolicy = TopologyPolicy.NONE
    numa_nodes: Sequence[int] = (0,)
    clock: Callable[[], float] = time.monotonic
    version: str = VERSIONS[-1]
    feature_gates: Mapping[str, bool] | None = None
    cdi_dirs: Sequence[Path] | None = None
    #: Seconds a busy kubelet waits between a Register arriving and dialing the plugin back.
    dial_delay: float = 0.0
    static_cpus: Sequence[int] = ()
