"""The Allocate answer: a pure function of a pool's snapshot and the device IDs asked for.

Stateless on purpose: the kubelet never says when devices are freed and
reuses an init container's devices for app containers, so the IDs alone
must be enough, and answering the same IDs twice gives the same answer.

One container may hold devices of several pools, and the kubelet merges the
plugins' answers keeping the first value of each env name and mount path.
So every pool sets its own env name, and the one mount every pool adds (the
pinner's install dir at ``/opt/bin``) is identical in all of them.

CDI: with CDI on, every answer also names its pool's CDI device
(``cmk.intel.com/cpus=<pool>``, see :mod:`deviceplugin.host.cdi`), whose hook
confines the container from the runtime side. The name is passed in, so this
module stays free of the spec's I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from deviceplugin.model.devices import PoolDevices
from deviceplugin.model.plan import Pool
from pinner.contract import POOLS as PINNER_POOLS
from pinner.cpulist import format_cpu_csv

#: Where the pinner (``cmk isolate``) appears inside every container.
PINNER_CONTAINER_DIR = "/opt/bin"

#: pool -> the env variable its Allocate answer sets: the pinner's own table, so both sides agree
ENV_NAMES: Mapping[Pool, str] = {pool: PINNER_POOLS[pool.value].env for pool in Pool}


class DeviceRequestError(ValueError):
    """The kubelet asked for devices this pool cannot give; the message names them."""


@dataclass(frozen=True)
class Mount:
    container_path: str
    host_path: str
    read_only: bool


@dataclass(frozen=True)
class ContainerAnswer:
    envs: Mapping[str, str]
    mounts: tuple[Mount, ...]
    cdi_devices: tuple[str, ...] = ()


def _names(ids: Sequence[str]) -> str:
    return ", ".join(sorted(set(ids)))


def check_request(devices: PoolDevices, ids: Sequence[str]) -> None:
    """Raise DeviceRequestError naming unknown or unhealthy IDs (or an empty request)."""
    if not ids:
        raise DeviceRequestError(f"{devices.resource}: no device IDs in the request")
    unknown = [i for i in ids if i not in devices.devices]
    if unknown:
        raise DeviceRequestError(f"{devices.resource}: unknown device IDs: {_names(unknown)}")
    unhealthy = [i for i in ids if not devices.devices[i].healthy]
    if unhealthy:
        raise DeviceRequestError(
            f"{devices.resource}: unhealthy device IDs (a CPU is offline): {_names(unhealthy)}"
        )


def pinner_mount(install_dir: str) -> Mount:
    return Mount(container_path=PINNER_CONTAINER_DIR, host_path=install_dir, read_only=True)


def allocate_answer(devices: PoolDevices, ids: Sequence[str], *, install_dir: str,
                    cdi_devices: tuple[str, ...] = ()) -> ContainerAnswer:
    """The env naming the container's CPUs, the pinner mount and ``cdi_devices``; DeviceRequestError for bad IDs.

    Core devices carry their core's CPUs and slot devices the whole pool's,
    so the union over the IDs is right for both kinds.
    """
    check_request(devices, ids)
    cpus = frozenset().union(*(devices.devices[i].cpus for i in ids))
    return ContainerAnswer(
        envs={ENV_NAMES[devices.pool]: format_cpu_csv(cpus)},
        mounts=(pinner_mount(install_dir),),
        cdi_devices=cdi_devices,
    )
