"""Prepared ResourceClaims of DRA mode: what each claim was given, and the checkpoint that keeps it. Pure values.

NodePrepareResources may come again for a claim (kubelet restart, retry): the answer is the one
recorded, never a second pick. A device already prepared for another claim is refused, so a
restart that reads the checkpoint back neither loses a claim nor gives its CPUs twice. The CDI
names are the device plugins' (:func:`~deviceplugin.model.cdispec.cdi_device_names`), so the hook
confines a DRA container exactly as it confines one of the device-plugin path.
Why, and what is next: ``docs/design/dra.md``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from deviceplugin.errors import CmkError
from deviceplugin.model.cdispec import cdi_device_names
from deviceplugin.model.cpulist import format_cpu_list, parse_cpu_list
from deviceplugin.model.devices import DeviceTree, PoolDevices
from deviceplugin.model.resourceslices import device_name

CHECKPOINT_VERSION = 1


class ClaimError(CmkError):
    """A claim this node cannot prepare, or a checkpoint it cannot read."""


@dataclass(frozen=True)
class AllocatedDevice:
    """One result of a claim's allocation (``status.allocation.devices.results[]``) as the scheduler wrote it."""

    request: str
    driver: str
    pool: str
    device: str


@dataclass(frozen=True)
class PreparedDevice:
    """One device of a prepared claim: the fields of the kubelet's ``dra/v1`` Device."""

    request_names: tuple[str, ...]
    pool_name: str
    device_name: str
    cdi_device_ids: tuple[str, ...]
    #: its CPUs: what a later plan (or mode) keeps out while the claim is prepared, whatever it names devices
    cpus: frozenset[int] = frozenset()


#: claim uid -> what it was given
Prepared = Mapping[str, tuple[PreparedDevice, ...]]


def published_index(tree: DeviceTree) -> dict[str, tuple[PoolDevices, str]]:
    """DRA device name -> (its pool's snapshot, its device-plugin ID), for every device of the tree."""
    return {device_name(i): (devices, i) for devices in tree.values() for i in devices.devices}


def prepare(prepared: Prepared, uid: str, claim: str, allocated: Sequence[AllocatedDevice],
            index: Mapping[str, tuple[PoolDevices, str]], *, driver: str, pool_name: str) -> tuple[PreparedDevice, ...]:
    """What claim ``uid`` (``claim``: namespace/name, for messages) gets; the recorded answer if it has one.

    Results of other drivers or pools are another plugin's. Raises :class:`ClaimError` for a
    device this node does not publish or one another prepared claim holds.
    """
    if uid in prepared:
        return prepared[uid]
    held = {device.device_name: other for other, devices in prepared.items() for device in devices}
    requests: dict[str, list[str]] = {}
    for result in allocated:
        if result.driver != driver or result.pool != pool_name:
            continue
        if result.device not in index:
            raise ClaimError(f"claim {claim} was allocated device {result.device!r}, which node {pool_name} "
                             "does not publish (its plan changed since): delete the pod so the claim is allocated again")
        if result.device in held:
            raise ClaimError(f"claim {claim} was allocated device {result.device!r}, which claim "
                             f"{held[result.device]} holds: wait until that claim is unprepared")
        requests.setdefault(result.device, []).append(result.request)
    answer = []
    for name, names in requests.items():
        devices, device_id = index[name]
        answer.append(PreparedDevice(tuple(names), pool_name, name, cdi_device_names(devices, [device_id]),
                                     devices.devices[device_id].cpus))
    return tuple(answer)


def encode(prepared: Prepared) -> bytes:
    """The checkpoint file's content: versioned JSON, claims sorted so equal states write equal bytes."""
    claims = {uid: [{"requests": list(d.request_names), "pool": d.pool_name, "device": d.device_name,
                     "cdi": list(d.cdi_device_ids), "cpus": format_cpu_list(d.cpus)} for d in devices]
              for uid, devices in sorted(prepared.items())}
    return json.dumps({"version": CHECKPOINT_VERSION, "claims": claims}, indent=1).encode() + b"\n"


def decode(data: bytes | None, *, where: str) -> Prepared:
    """The prepared claims of a checkpoint (none for no file); :class:`ClaimError` naming ``where`` if it is unreadable."""
    if data is None:
        return MappingProxyType({})
    try:
        document = json.loads(data)
        if document.get("version") != CHECKPOINT_VERSION:
            raise ClaimError(f"{where} has checkpoint version {document.get('version')!r}; this daemon reads "
                             f"version {CHECKPOINT_VERSION}: run the daemon version that wrote it, or unprepare its pods first")
        return MappingProxyType({
            uid: tuple(PreparedDevice(tuple(d["requests"]), d["pool"], d["device"], tuple(d["cdi"]),
                                      parse_cpu_list(d.get("cpus", ""))) for d in devices)
            for uid, devices in document["claims"].items()
        })
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise ClaimError(f"{where} is not a prepared-claims checkpoint ({err}); restore it from a backup or, "
                         "with no DRA pod on the node, delete it") from None
