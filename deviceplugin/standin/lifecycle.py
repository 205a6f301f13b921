"""What the kubelet does at container starts, kubelet restarts and by version (pure).

Why it works this way: ``docs/design/standin-lifecycle.md``.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Mapping, Sequence

from deviceplugin.errors import CmkError
from deviceplugin.standin.pods import shuffled
from deviceplugin.standin.runoptions import Conflict, ContainerAnswer, merge_answers

#: Kubelet minor versions the stand-in models (1.28 .. 1.36).
VERSIONS = tuple(f"1.{minor}" for minor in range(28, 37))
CDI_GATE = "DevicePluginCDIDevices"
#: From this minor on the gate is GA and locked to on.
_CDI_GA = 31
_CDI_ON_BY_DEFAULT = 29
#: Pod resources ``Get``: alpha (off) 1.27-1.33, beta and on by default from 1.34.
GET_GATE = "KubeletPodResourcesGet"
_GET_ON_BY_DEFAULT = 34


class ContainerStartError(CmkError):
    """The kubelet (or the runtime it calls) failed to start the container; the message is theirs."""


def endpoint_gone(resource: str) -> str:
    return f"endpoint not found in cache for a registered resource: {resource}"


def unresolvable_cdi(names: Sequence[str]) -> str:
    return f"failed to inject CDI devices: unresolvable CDI devices {', '.join(names)}"


def minor_of(version: str) -> int:
    """``"1.29"`` -> 29; CmkError naming the versions modelled otherwise."""
    if version not in VERSIONS:
        raise CmkError(f"kubelet version {version!r} is not modelled; choose one of {', '.join(VERSIONS)}")
    return int(version.split(".")[1])


def feature_gates(version: str, overrides: Mapping[str, bool] | None = None) -> dict[str, bool]:
    """The gates the stand-in acts on, at their defaults for ``version``, with ``overrides`` applied."""
    minor = minor_of(version)
    gates = {CDI_GATE: minor >= _CDI_ON_BY_DEFAULT, GET_GATE: minor >= _GET_ON_BY_DEFAULT}
    for name, value in (overrides or {}).items():
        if name not in gates:
            raise CmkError(f"feature gate {name!r} is not modelled; known: {', '.join(sorted(gates))}")
        if name == CDI_GATE and minor >= _CDI_GA and not value:
            raise CmkError(f"{CDI_GATE} is GA and locked on in kubelet {version}; it cannot be turned off")
        gates[name] = value
    return gates


def replay(container: str, cached: Sequence[tuple[str, ContainerAnswer]], rng: random.Random, *,
           cdi_enabled: bool) -> tuple[ContainerAnswer, list[Conflict]]:
    """The run options of one container start: the cached answers merged in a random resource order."""
    by_resource = dict(cached)
    order = shuffled(by_resource, rng)
    merged, conflicts = merge_answers(container, [(resource, by_resource[resource]) for resource in order])
    if not cdi_enabled:
        merged = ContainerAnswer(envs=merged.envs, mounts=merged.mounts, devices=merged.devices,
                                 annotations=merged.annotations)
    return merged, conflicts


def readmission_error(resource: str, held: Collection[str], healthy: Collection[str]) -> str | None:
    """Why a not-running container holding ``held`` devices of ``resource`` fails re-admission, or None."""
    if not healthy:
        return f"no healthy devices present; cannot allocate unhealthy devices {resource}"
    if not set(held) <= set(healthy):
        return f"previously allocated devices are no longer healthy; cannot allocate unhealthy devices {resource}"
    return None
