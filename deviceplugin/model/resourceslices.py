"""What the DRA driver publishes for a node: its device tree as ResourceSlices of ``resource.k8s.io/v1``. Pure values.

The devices are the device plugins' own (same IDs, one per core or slot), so ``cmk describe``,
the metrics and ``kubectl get resourceslices`` count the same in either mode; only healthy
devices are published, since a slice has no health and a published device can be handed out.
One DRA pool per node, named after it; each slice holds one CMK pool's devices, within the
API's limits (:data:`LIMITS_SOURCE`, listed in :func:`slice_problems`).

Why it works this way, and what is next: ``docs/design/dra.md``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from deviceplugin.errors import CmkError
from deviceplugin.model.cpulist import format_cpu_list
from deviceplugin.model.devices import Device, DeviceTree, PoolDevices
from deviceplugin.model.plan import CORE_POOLS, Pool

API_VERSION = "resource.k8s.io/v1"
#: The DRA driver's name: the ``driver`` of every slice and the domain of its unqualified attributes.
DRIVER_NAME = "cpu.cmk.intel.com"
#: Label on each slice naming the CMK pool its devices belong to.
POOL_LABEL = "cmk.intel.com/pool"

#: Where every MAX_* below is read: the constants' names there are in slice_problems' docstring.
LIMITS_SOURCE = ("k8s.io/api v0.36.3 resource/v1/types.go, enforced by k8s.io/kubernetes v1.36.3 "
                 "pkg/apis/resource/validation/validation.go")
MAX_DEVICES_PER_SLICE = 128
MAX_ATTRIBUTES_PER_DEVICE = 32
MAX_ATTRIBUTE_VALUES_PER_DEVICE = 48
MAX_STRING_VALUE_LENGTH = 64
MAX_ATTRIBUTE_ID_LENGTH = 32
MAX_ATTRIBUTE_DOMAIN_LENGTH = 63
MAX_DRIVER_NAME_LENGTH = 63
MAX_POOL_NAME_LENGTH = 253
MAX_DNS_LABEL_LENGTH = 63
MAX_OBJECT_NAME_LENGTH = 253

# Attribute names. Unqualified ones are in the driver's domain: a CEL selector reads them as
# device.attributes["cpu.cmk.intel.com"].pool.
ATTR_POOL = "pool"
#: The standard NUMA attribute (k8s.io/dynamic-resource-allocation ``deviceattribute``, scalar form),
#: which a claim's ``matchAttribute`` lines up with a NIC's or GPU's.
ATTR_NUMA_NODE = "resource.kubernetes.io/numaNode"
#: The same value under the name dranet and dra-driver-cpu align on before the standard one.
ATTR_DRANET_NUMA_NODE = "dra.net/numaNode"
ATTR_SOCKET = "socket"
ATTR_DIE = "die"
#: The first CPU sharing the core's L3 cache: equal on every core of one L3 domain, stable while it is online.
ATTR_L3 = "l3"
ATTR_CORE_ID = "coreID"
#: The core's online hardware threads as a CPU list (``3,67``).
ATTR_SMT_SIBLINGS = "smtSiblings"
ATTR_ISOLCPUS = "isolcpus"
#: How many CPUs a slot's pool holds (a slot gives the whole pool, or its part on one NUMA node).
ATTR_CPU_COUNT = "cpuCount"

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_VALUE_KINDS = ("int", "bool", "string", "version")

#: One attribute's value as the API writes it: ``{"int": 1}``, ``{"string": "3,67"}``, ``{"bool": True}``.
Attribute = dict[str, int | bool | str]


class SliceError(CmkError):
    """The node or driver name cannot appear in a ResourceSlice."""


def device_name(device_id: str) -> str:
    """The DRA name of a device-plugin ID: the same, with ``.`` (only in ``cpus-1.9`` fallbacks) as ``-``.

    Distinct cores stay distinct: two disjoint CPU sets never print the same digits in the same order.
    """
    return device_id.replace(".", "-")


def _attributes(devices: PoolDevices, device: Device, isolated: frozenset[int],
                l3_first: dict[frozenset[int], int]) -> dict[str, Attribute]:
    attributes: dict[str, Attribute] = {
        ATTR_POOL: {"string": devices.pool.value},
        ATTR_ISOLCPUS: {"bool": bool(device.cpus) and device.cpus <= isolated},
    }
    nodes = {device.slot_node} if device.slot_node is not None else device.numa_nodes
    if len(nodes) == 1:
        (node,) = nodes
        attributes[ATTR_NUMA_NODE] = attributes[ATTR_DRANET_NUMA_NODE] = {"int": node}
    if devices.pool not in CORE_POOLS:
        attributes[ATTR_CPU_COUNT] = {"int": len(device.cpus)}
        return attributes
    core = devices.cores[device.id]
    l3 = None
    if core.l3:  # one min per L3 group, not per core: 4,096 cores on 256-CPU groups was a third of the build
        l3 = l3_first.get(core.l3)
        if l3 is None:
            l3 = l3_first[core.l3] = min(core.l3)
    placement = {ATTR_SOCKET: core.package, ATTR_DIE: core.die, ATTR_CORE_ID: core.core_id, ATTR_L3: l3}
    attributes.update((name, {"int": value}) for name, value in placement.items() if value is not None)
    attributes[ATTR_SMT_SIBLINGS] = {"string": format_cpu_list(core.cpus)}
    return attributes


def published_devices(devices: PoolDevices, isolated: frozenset[int]) -> list[dict[str, Any]]:
    """The pool's healthy devices as the API's ``Device`` objects, in advertising order."""
    l3_first: dict[frozenset[int], int] = {}
    return [{"name": device_name(device.id), "attributes": _attributes(devices, device, isolated, l3_first)}
            for device in devices.devices.values() if device.healthy]


def driver_devices(tree: DeviceTree, driver: str = DRIVER_NAME) -> dict[tuple[str, str], tuple[str, str]]:
    """(driver, DRA device name) -> (its pool's resource name, its device-plugin ID), for every device of ``tree``:
    how a reader of the kubelet's pod resources counts a claim's devices as the pool's."""
    return {(driver, device_name(i)): (devices.resource, i) for devices in tree.values() for i in devices.devices}


def unheld(tree: DeviceTree, held: Mapping[str, Iterable[str]]) -> DeviceTree:
    """``tree`` without the devices a device plugin's containers still hold (resource -> device IDs).

    After a switch from device-plugin mode the kubelet keeps those pods' devices; the scheduler
    does not know them, so they stay out of the slices until the kubelet frees them.
    """
    out = {}
    for resource, devices in tree.items():
        gone = set(held.get(resource, ())) & devices.devices.keys()
        out[resource] = devices if not gone else replace(devices, devices={
            i: replace(d, healthy=False) if i in gone else d for i, d in devices.devices.items()})
    return out


def slice_name(node_name: str, pool: Pool, index: int) -> str:
    """``<node>-cmk-<pool>-<index>``; a node name too long for that is cut and given a digest, so names stay unique."""
    suffix = f"-cmk-{pool.value}-{index}"
    if len(node_name) + len(suffix) <= MAX_OBJECT_NAME_LENGTH:
        return node_name + suffix
    digest = hashlib.sha256(node_name.encode()).hexdigest()[:10]
    head = node_name[: MAX_OBJECT_NAME_LENGTH - len(suffix) - len(digest) - 1].rstrip(".-")
    return f"{head}-{digest}{suffix}"


def _check_names(node_name: str, driver: str) -> None:
    if len(node_name) > MAX_POOL_NAME_LENGTH or not _DNS_SUBDOMAIN.fullmatch(node_name):
        raise SliceError(f"node name {node_name!r} is not a DNS subdomain of at most {MAX_POOL_NAME_LENGTH} "
                         "characters; pass the node's name as `kubectl get nodes` shows it")
    if len(driver) > MAX_DRIVER_NAME_LENGTH or not _DNS_SUBDOMAIN.fullmatch(driver):
        raise SliceError(f"driver name {driver!r} is not a lowercase DNS subdomain of at most "
                         f"{MAX_DRIVER_NAME_LENGTH} characters, e.g. {DRIVER_NAME}")


def resource_slices(tree: DeviceTree, isolated: frozenset[int], *, node_name: str, generation: int,
                    driver: str = DRIVER_NAME, max_devices: int = MAX_DEVICES_PER_SLICE) -> list[dict[str, Any]]:
    """Every ResourceSlice of the node's pool at ``generation``, as dicts for the ``kubernetes`` client.

    ``isolated`` is the kernel's isolcpus set (the ``isolcpus`` attribute). The publisher bumps
    ``generation`` whenever the content changes, and deletes the node's slices this list no longer names.
    """
    _check_names(node_name, driver)
    chunks: list[tuple[Pool, list[dict[str, Any]]]] = []
    for devices in tree.values():
        published = published_devices(devices, isolated)
        chunks.extend((devices.pool, published[start:start + max_devices])
                      for start in range(0, len(published), max_devices))
    indexes: dict[Pool, int] = {}
    slices = []
    for pool, chunk in chunks:
        index = indexes[pool] = indexes.get(pool, -1) + 1
        slices.append({
            "apiVersion": API_VERSION,
            "kind": "ResourceSlice",
            "metadata": {"name": slice_name(node_name, pool, index), "labels": {POOL_LABEL: pool.value}},
            "spec": {
                "driver": driver,
                "nodeName": node_name,
                "pool": {"name": node_name, "generation": generation, "resourceSliceCount": len(chunks)},
                "devices": chunk,
            },
        })
    return slices


def _attribute_problems(where: str, name: str, value: Mapping[str, Any]) -> list[str]:
    problems = []
    domain, _, identifier = name.rpartition("/")
    if domain and (len(domain) > MAX_ATTRIBUTE_DOMAIN_LENGTH or not _DNS_SUBDOMAIN.fullmatch(domain)):
        problems.append(f"{where}: attribute domain {domain!r} is not a DNS subdomain of at most "
                        f"{MAX_ATTRIBUTE_DOMAIN_LENGTH} characters")
    if len(identifier) > MAX_ATTRIBUTE_ID_LENGTH or not _C_IDENTIFIER.fullmatch(identifier):
        problems.append(f"{where}: attribute name {identifier!r} is not a C identifier of at most "
                        f"{MAX_ATTRIBUTE_ID_LENGTH} characters")
    kinds = [kind for kind in value if kind in _VALUE_KINDS]
    if len(kinds) != 1 or len(value) != 1:
        problems.append(f"{where}: attribute {name} must hold exactly one of {', '.join(_VALUE_KINDS)}")
    elif kinds[0] in ("string", "version") and len(str(value[kinds[0]])) > MAX_STRING_VALUE_LENGTH:
        problems.append(f"{where}: attribute {name} is longer than {MAX_STRING_VALUE_LENGTH} characters")
    return problems


def slice_problems(resource_slice: Mapping[str, Any]) -> list[str]:
    """What the API server would refuse in ``resource_slice``; empty when it passes. The limits (:data:`LIMITS_SOURCE`):

    - ``ResourceSliceMaxDevices`` = 128 devices per slice (64 once a device has taints, consumes
      counters or has a list attribute: ours use none of the three, so SMT siblings are a string);
    - ``ResourceSliceMaxAttributesAndCapacitiesPerDevice`` = 32, ``ResourceSliceMaxAttributeValuesPerDevice`` = 48;
    - ``DeviceAttributeMaxValueLength`` = 64 characters for a string or version value;
    - an attribute name: a C identifier of at most ``DeviceMaxIDLength`` = 32, optionally after a
      DNS subdomain of at most ``DeviceMaxDomainLength`` = 63 and ``/``;
    - ``DriverNameMaxLength`` = 63, a lowercase DNS subdomain; ``PoolNameMaxLength`` = 253, DNS
      subdomains joined by ``/``; a device name a DNS label (63); the slice's name a DNS subdomain (253).
    """
    spec = resource_slice["spec"]
    name = resource_slice["metadata"]["name"]
    problems = []
    if len(name) > MAX_OBJECT_NAME_LENGTH or not _DNS_SUBDOMAIN.fullmatch(name):
        problems.append(f"slice name {name!r} is not a DNS subdomain of at most {MAX_OBJECT_NAME_LENGTH} characters")
    driver, pool = spec["driver"], spec["pool"]["name"]
    if len(driver) > MAX_DRIVER_NAME_LENGTH or not _DNS_SUBDOMAIN.fullmatch(driver):
        problems.append(f"{name}: driver {driver!r} is not a DNS subdomain of at most {MAX_DRIVER_NAME_LENGTH}")
    if len(pool) > MAX_POOL_NAME_LENGTH or not all(_DNS_SUBDOMAIN.fullmatch(part) for part in pool.split("/")):
        problems.append(f"{name}: pool name {pool!r} is not DNS subdomains joined by '/', at most {MAX_POOL_NAME_LENGTH}")
    if spec["pool"]["resourceSliceCount"] < 1:
        problems.append(f"{name}: resourceSliceCount must be greater than zero")
    devices: Sequence[Mapping[str, Any]] = spec.get("devices", [])
    if len(devices) > MAX_DEVICES_PER_SLICE:
        problems.append(f"{name}: {len(devices)} devices; at most {MAX_DEVICES_PER_SLICE} are allowed")
    seen: set[str] = set()
    for device in devices:
        where = f"{name}: device {device['name']!r}"
        if len(device["name"]) > MAX_DNS_LABEL_LENGTH or not _DNS_LABEL.fullmatch(device["name"]):
            problems.append(f"{where} is not a DNS label")
        if device["name"] in seen:
            problems.append(f"{where} appears twice")
        seen.add(device["name"])
        attributes = device.get("attributes", {})
        if len(attributes) + len(device.get("capacity", {})) > MAX_ATTRIBUTES_PER_DEVICE:
            problems.append(f"{where} has more than {MAX_ATTRIBUTES_PER_DEVICE} attributes and capacities")
        if len(attributes) > MAX_ATTRIBUTE_VALUES_PER_DEVICE:  # scalar values only: one value each
            problems.append(f"{where} has more than {MAX_ATTRIBUTE_VALUES_PER_DEVICE} attribute values")
        for attribute, value in attributes.items():
            problems.extend(_attribute_problems(where, attribute, value))
    return problems
