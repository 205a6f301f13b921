"""The Allocate answer: a pure function of a pool's snapshot and the device IDs asked for.

Stateless on purpose: the kubelet never says when devices are freed and
reuses an init container's devices for app containers, so the IDs alone
must be enough, and answering the same IDs twice gives the same answer.

Why it works this way: ``docs/design/answers.md``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from deviceplugin.model.cdispec import cdi_device_names
from deviceplugin.model.cpulist import format_cpu_csv
from deviceplugin.model.devices import PoolDevices
from deviceplugin.model.pinnercontract import POOLS as PINNER_POOLS
from deviceplugin.model.plan import Pool
from deviceplugin.model.shown import named_ids

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


def check_request(devices: PoolDevices, ids: Sequence[str]) -> None:
    """Raise DeviceRequestError naming unknown or unhealthy IDs (or an empty request)."""
    if not ids:
        raise DeviceRequestError(f"{devices.resource}: no device IDs in the request")
    unknown = [i for i in ids if i not in devices.devices]
    if unknown:
        raise DeviceRequestError(f"{devices.resource}: unknown device IDs: {named_ids(unknown)}")
    unhealthy = [i for i in ids if not devices.devices[i].healthy]
    if unhealthy:
        raise DeviceRequestError(
            f"{devices.resource}: unhealthy device IDs (a CPU is offline): {named_ids(unhealthy)}"
        )


def pinner_mount(install_dir: str) -> Mount:
    return Mount(container_path=PINNER_CONTAINER_DIR, host_path=install_dir, read_only=True)


def allocate_answer(devices: PoolDevices, ids: Sequence[str], *, install_dir: str,
                    cdi: bool = False) -> ContainerAnswer:
    """The env naming the container's CPUs, the pinner mount and, with ``cdi``, the CDI device of every ID.

    DeviceRequestError for bad IDs.

    Core devices carry their core's CPUs and slot devices the whole pool's,
    so the union over the IDs is right for both kinds.
    """
    check_request(devices, ids)
    cpus = frozenset().union(*(devices.devices[i].cpus for i in ids))
    return ContainerAnswer(
        envs={ENV_NAMES[devices.pool]: format_cpu_csv(cpus)},
        mounts=(pinner_mount(install_dir),),
        cdi_devices=cdi_device_names(devices, ids) if cdi else (),
    )
