"""deploy/dra: one DeviceClass per pool, serving today's resource names, whose CEL selects exactly that pool's devices.

The files are rendered by the real ``kubectl kustomize`` and held to the model; the selectors run
in a real CEL engine (cel-expr-python) over the devices ``resource_slices`` publishes, turned into
the ``device`` value the API server's DRA CEL environment builds (k8s.io/dynamic-resource-allocation
``cel/compile.go``: attributes grouped by domain, unqualified names in the driver's). Schema
validation against Kubernetes 1.36 and the newest is ``tests/unit/test_deploy.py``'s.
"""

from __future__ import annotations

from typing import Any

import pytest
from cel_expr_python import cel
from google.protobuf import descriptor_pool

from deviceplugin.model.deviceclasses import device_classes
from deviceplugin.model.devices import device_tree
from deviceplugin.model.plan import RESOURCE_NAMES, PlanOptions, Pool, plan_pools
from deviceplugin.model.resourceslices import DRIVER_NAME, resource_slices
from deviceplugin.model.topology import build_topology
from tests.support.manifests import render

CEL_SELECTOR_MAX_LENGTH = 10 * 1024  # resource/v1 CELSelectorExpressionMaxLength
ENV = cel.NewEnv(descriptor_pool.DescriptorPool(), variables={"device": cel.Type.DYN})


def cel_device(driver: str, device: dict[str, Any]) -> dict[str, Any]:
    """The API server's CEL ``device``: its driver and its attributes by domain, each value plain."""
    attributes: dict[str, dict[str, Any]] = {}
    for name, value in device["attributes"].items():
        domain, _, identifier = name.rpartition("/")
        [(_, plain)] = value.items()
        attributes.setdefault(domain or driver, {})[identifier] = plain
    return {"driver": driver, "attributes": attributes, "capacity": {}, "allowMultipleAllocations": False}


def selects(expression: str, device: dict[str, Any]) -> bool:
    result = ENV.compile(expression).eval(data={"device": device})
    assert result.type() == cel.Type.BOOL, result.value()  # an error would fail the claim's allocation
    return bool(result.plain_value())


def every_pool_published() -> list[tuple[str, dict[str, Any]]]:
    """(pool, CEL device) for every device of a node serving all four pools."""
    node = {cpu: (cpu % 8) // 4 for cpu in range(16)}
    topology = build_topology([(i, i + 8) for i in range(8)], node_of=node, package_of=node,
                              isolated=[*range(6), *range(8, 14)])
    plan = plan_pools(topology, PlanOptions(num_exclusive_cores=2, num_shared_cores=1,
                                            excl_non_isolcpus=frozenset({7, 15}), shared_slots=3, infra_slots=4))
    slices = resource_slices(device_tree(plan, topology.online), topology.isolated, node_name="n", generation=1)
    return [(d["attributes"]["pool"]["string"], cel_device(s["spec"]["driver"], d))
            for s in slices for d in s["spec"]["devices"]]


def test_deploy_dra_ships_exactly_the_model_classes() -> None:
    rendered = {obj["metadata"]["name"]: (obj["kind"], obj["spec"]) for obj in render("dra")}
    expected = {obj["metadata"]["name"]: (obj["kind"], obj["spec"]) for obj in device_classes()}
    assert rendered == expected


def test_every_pool_has_a_class_serving_its_resource_name() -> None:
    names = [obj["spec"]["extendedResourceName"] for obj in render("dra")]
    assert sorted(names) == sorted(RESOURCE_NAMES.values())
    assert len(set(names)) == len(names)  # the scheduler picks one class per name: no two may share it


@pytest.mark.parametrize("pool", list(Pool))
def test_each_selector_takes_exactly_its_pools_devices(pool: Pool) -> None:
    [deviceclass] = [obj for obj in render("dra") if obj["spec"]["extendedResourceName"] == RESOURCE_NAMES[pool]]
    [selector] = deviceclass["spec"]["selectors"]
    expression = selector["cel"]["expression"]
    published = every_pool_published()
    assert {found for found, _ in published} == {p.value for p in Pool}

    chosen = [found for found, device in published if selects(expression, device)]

    assert chosen and set(chosen) == {pool.value}
    assert len(chosen) == sum(1 for found, _ in published if found == pool.value)
    assert len(expression) <= CEL_SELECTOR_MAX_LENGTH


def test_a_selector_passes_over_another_drivers_device_without_an_error() -> None:
    nic = {"driver": "sriov.example.com", "attributes": {"resource.kubernetes.io": {"numaNode": 0},
                                                          "sriov.example.com": {"vendor": "8086"}},
           "capacity": {}, "allowMultipleAllocations": False}
    for obj in render("dra"):
        assert not selects(obj["spec"]["selectors"][0]["cel"]["expression"], nic)
    assert DRIVER_NAME not in nic["attributes"]
