"""Each device's health as DRA mode reports it to the kubelet (``DRAResourceHealth``, dra-health/v1alpha1).

The slices hold healthy devices only, so the scheduler never hands out a core with an offline
thread. A device already given to a pod stays with it when a CPU of it goes offline; its health
goes to the kubelet, which shows it in that pod's status (``allocatedResourcesStatus``, on by
default since 1.36) as the device plugins' health shows in ``kubectl describe node``.
"""

from __future__ import annotations

from dataclasses import dataclass

from deviceplugin.model.devices import DeviceTree
from deviceplugin.model.resourceslices import device_name

#: Seconds between reports when nothing changed: the kubelet counts a device Unknown once its last report is
#: older than the timeout that report gave (its own default is 30 s), so each report allows three of these.
RESEND_SECONDS = 30
TIMEOUT_SECONDS = 3 * RESEND_SECONDS


@dataclass(frozen=True)
class DeviceHealth:
    """One device of the driver's pool: healthy, or why not."""

    pool_name: str
    device_name: str
    healthy: bool
    message: str = ""


def device_health(tree: DeviceTree, pool_name: str) -> tuple[DeviceHealth, ...]:
    """Every device of ``tree`` (in or out of the slices), named as the slices name it in DRA pool ``pool_name``."""
    return tuple(
        DeviceHealth(pool_name, device_name(device.id), device.healthy,
                     "" if device.healthy else f"a CPU of {devices.pool.value} device {device.id} is offline")
        for devices in tree.values() for device in devices.devices.values())
