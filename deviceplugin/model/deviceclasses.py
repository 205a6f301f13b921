"""The DeviceClasses of DRA mode: one per pool, serving today's extended resource names. Pure values.

With ``spec.extendedResourceName`` (KEP-5004, beta and on in Kubernetes 1.36) the
scheduler serves an unchanged pod's ``cmk.intel.com/exclusive-cores: 2`` from the
class's devices, so the seed pod runs as it is; a ResourceClaim names the class
instead. ``deploy/dra`` ships these objects; a unit test holds the files to
:func:`device_classes`, so a renamed pool or resource cannot leave them behind.
"""

from __future__ import annotations

from typing import Any

from deviceplugin.model.plan import RESOURCE_NAMES, Pool
from deviceplugin.model.resourceslices import ATTR_POOL, DRIVER_NAME

API_VERSION = "resource.k8s.io/v1"


def class_name(pool: Pool, driver: str = DRIVER_NAME) -> str:
    """``exclusive.cpu.cmk.intel.com``: what a claim's ``exactly.deviceClassName`` names."""
    return f"{pool.value}.{driver}"


def selector(pool: Pool, driver: str = DRIVER_NAME) -> str:
    """The CEL selector: this driver's devices of this pool (the driver test first, as other drivers lack ``pool``)."""
    return f'device.driver == "{driver}" && device.attributes["{driver}"].{ATTR_POOL} == "{pool.value}"'


def device_classes(driver: str = DRIVER_NAME) -> list[dict[str, Any]]:
    """One DeviceClass per pool, in the plan's pool order."""
    return [
        {
            "apiVersion": API_VERSION,
            "kind": "DeviceClass",
            "metadata": {"name": class_name(pool, driver)},
            "spec": {
                "selectors": [{"cel": {"expression": selector(pool, driver)}}],
                "extendedResourceName": RESOURCE_NAMES[pool],
            },
        }
        for pool in Pool
    ]
