"""The DRA plugin's gRPC side over real unix sockets, called by real clients built from the kubelet's own stubs.

Registration answers the plugin watcher as the 1.36 kubelet expects; NodePrepareResources answers
with the device plugins' CDI names and records each claim in a real file before answering, so a
restarted plugin neither loses a claim nor hands its device to another. The claims' allocations
come from a table standing where the API server's ResourceClaims will (not in this tier).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import grpc
import pytest

from api.dra.v1 import api_pb2 as dra_pb
from api.dra.v1 import api_pb2_grpc as dra_grpc
from api.pluginregistration.v1 import api_pb2 as reg_pb
from api.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from deviceplugin.host.claimfile import ClaimFile
from deviceplugin.model.cdispec import cdi_device_names
from deviceplugin.model.claims import AllocatedDevice, ClaimError
from deviceplugin.model.devices import DeviceTree, device_tree
from deviceplugin.model.plan import RESOURCE_NAMES, PlanOptions, Pool, plan_pools
from deviceplugin.model.resourceslices import DRIVER_NAME, device_name
from deviceplugin.model.topology import build_topology
from deviceplugin.protocol.draplugin import DraPlugin, Registration, serve
from tests.support.records import logged

NODE = "node-a"


def node_tree() -> DeviceTree:
    """Two NUMA nodes of four cores (threads i, i+8), cores 0-5 isolated: exclusive, shared and infra."""
    node = {cpu: (cpu % 8) // 4 for cpu in range(16)}
    topology = build_topology([(i, i + 8) for i in range(8)], node_of=node, package_of=node,
                              isolated=[*range(6), *range(8, 14)])
    plan = plan_pools(topology, PlanOptions(num_exclusive_cores=3, num_shared_cores=1, shared_slots=2))
    return device_tree(plan, topology.online)


TREE = node_tree()
EXCLUSIVE = TREE[RESOURCE_NAMES[Pool.EXCLUSIVE]]
SHARED = TREE[RESOURCE_NAMES[Pool.SHARED]]
CORE_A, CORE_B = list(EXCLUSIVE.devices)[:2]


class Claims:
    """name -> allocation results, as the scheduler would have written them into each claim's status."""

    def __init__(self) -> None:
        self.results: dict[str, list[AllocatedDevice]] = {}

    def give(self, name: str, *devices: str, driver: str = DRIVER_NAME, pool: str = NODE) -> dra_pb.Claim:
        self.results[name] = [AllocatedDevice("cpus", driver, pool, device) for device in devices]
        return dra_pb.Claim(namespace="default", name=name, uid=f"uid-{name}")

    def allocated(self, namespace: str, name: str, uid: str) -> Sequence[AllocatedDevice]:
        return self.results[name]


@pytest.fixture
def start(plugin_dir: Path) -> Iterator[Callable[[Claims], dra_grpc.DRAPluginStub]]:
    """``start(claims)``: a DraPlugin serving dra.sock with its checkpoint in plugin_dir; a client to it."""
    servers: list[grpc.Server] = []
    channels: list[grpc.Channel] = []

    def run(claims: Claims) -> dra_grpc.DRAPluginStub:
        for server in servers:
            server.stop(None).wait()
        plugin = DraPlugin(TREE, claims, ClaimFile(plugin_dir / "claims.json"), pool_name=NODE)
        servers.append(serve(plugin_dir / "dra.sock", plugin))
        channels.append(grpc.insecure_channel(f"unix:{plugin_dir / 'dra.sock'}"))
        return dra_grpc.DRAPluginStub(channels[-1])

    yield run
    for channel in channels:
        channel.close()
    for server in servers:
        server.stop(None).wait()


def prepare(stub: dra_grpc.DRAPluginStub, *claims: dra_pb.Claim) -> dict[str, dra_pb.NodePrepareResourceResponse]:
    return dict(stub.NodePrepareResources(dra_pb.NodePrepareResourcesRequest(claims=claims), timeout=45).claims)


def unprepare(stub: dra_grpc.DRAPluginStub, *claims: dra_pb.Claim) -> dict[str, str]:
    response = stub.NodeUnprepareResources(dra_pb.NodeUnprepareResourcesRequest(claims=claims), timeout=45)
    return {uid: entry.error for uid, entry in response.claims.items()}


def test_the_plugin_watcher_finds_a_dra_plugin_of_the_driver_serving_v1(plugin_dir: Path,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    registration = Registration(plugin_dir / "dra.sock")
    server = serve(plugin_dir / "reg.sock", registration)
    try:
        with grpc.insecure_channel(f"unix:{plugin_dir / 'reg.sock'}") as channel:
            stub = reg_grpc.RegistrationStub(channel)
            info = stub.GetInfo(reg_pb.InfoRequest(), timeout=1)  # the kubelet's deadline
            stub.NotifyRegistrationStatus(reg_pb.RegistrationStatus(plugin_registered=False, error="no handler"),
                                          timeout=5)
    finally:
        server.stop(None).wait()
    assert (info.type, info.name, info.endpoint, list(info.supported_versions)) == (
        "DRAPlugin", DRIVER_NAME, str(plugin_dir / "dra.sock"), ["v1.DRAPlugin"])
    assert registration.notified.is_set()
    assert (registration.status.registered, registration.status.error) == (False, "no handler")
    [line] = logged(caplog.records, "dra_register_refused")
    assert (line["driver"], line["error"]) == (DRIVER_NAME, "no handler")


def test_a_claim_gets_the_cdi_devices_of_the_device_plugin_path_and_is_checkpointed_first(
        start: Callable[[Claims], dra_grpc.DRAPluginStub], plugin_dir: Path) -> None:
    claims = Claims()
    slot = next(iter(SHARED.devices))
    claim = claims.give("web", device_name(CORE_A), device_name(slot))

    answer = prepare(start(claims), claim)["uid-web"]

    assert answer.error == ""
    assert [(d.pool_name, d.device_name, list(d.cdi_device_ids)) for d in answer.devices] == [
        (NODE, device_name(CORE_A), list(cdi_device_names(EXCLUSIVE, [CORE_A]))),
        (NODE, device_name(slot), list(cdi_device_names(SHARED, [slot]))),
    ]
    assert [list(d.request_names) for d in answer.devices] == [["cpus"], ["cpus"]]
    saved = json.loads((plugin_dir / "claims.json").read_text())["claims"]
    assert [d["device"] for d in saved["uid-web"]] == [device_name(CORE_A), device_name(slot)]


def test_a_claim_prepared_again_keeps_its_answer_and_its_device_is_refused_to_another_claim(
        start: Callable[[Claims], dra_grpc.DRAPluginStub]) -> None:
    claims = Claims()
    stub = start(claims)
    first = claims.give("a", device_name(CORE_A))
    assert prepare(stub, first)["uid-a"].error == ""

    claims.give("a", device_name(CORE_B))  # a retry must not pick again
    again = prepare(stub, first)["uid-a"]
    refused = prepare(stub, claims.give("b", device_name(CORE_A)))["uid-b"]

    assert [d.device_name for d in again.devices] == [device_name(CORE_A)]
    assert "which claim uid-a holds" in refused.error and not refused.devices
    assert unprepare(stub, first) == {"uid-a": ""}
    assert prepare(stub, claims.give("b", device_name(CORE_A)))["uid-b"].error == ""


def test_a_claim_prepared_already_is_answered_from_the_checkpoint_even_once_the_api_server_lost_it(
        start: Callable[[Claims], dra_grpc.DRAPluginStub]) -> None:
    claims = Claims()
    stub = start(claims)
    first = claims.give("a", device_name(CORE_A))
    assert prepare(stub, first)["uid-a"].error == ""
    del claims.results["a"]  # the kubelet retries after the claim is gone from the API server (a KeyError there)
    assert [d.device_name for d in prepare(stub, first)["uid-a"].devices] == [device_name(CORE_A)]


def test_a_restarted_plugin_neither_loses_a_claim_nor_gives_its_core_twice(
        start: Callable[[Claims], dra_grpc.DRAPluginStub], plugin_dir: Path) -> None:
    claims = Claims()
    held = claims.give("a", device_name(CORE_A))
    assert prepare(start(claims), held)["uid-a"].error == ""

    restarted = start(claims)  # a new process reads the same checkpoint

    assert "which claim uid-a holds" in prepare(restarted, claims.give("b", device_name(CORE_A)))["uid-b"].error
    assert [d.device_name for d in prepare(restarted, held)["uid-a"].devices] == [device_name(CORE_A)]
    assert unprepare(restarted, held) == {"uid-a": ""}
    assert json.loads((plugin_dir / "claims.json").read_text())["claims"] == {}


def test_other_drivers_results_are_left_to_them_and_a_bad_claim_fails_alone(
        start: Callable[[Claims], dra_grpc.DRAPluginStub], caplog: pytest.LogCaptureFixture) -> None:
    claims = Claims()
    aligned = claims.give("aligned", device_name(CORE_A))
    claims.results["aligned"].append(AllocatedDevice("nic", "sriov.example.com", NODE, "vf-0"))
    stale = claims.give("stale", "core-n9-p9-c9")

    answers = prepare(start(claims), aligned, stale)

    assert [d.device_name for d in answers["uid-aligned"].devices] == [device_name(CORE_A)]
    assert answers["uid-aligned"].error == ""
    assert "'core-n9-p9-c9', which node node-a does not publish" in answers["uid-stale"].error
    [line] = logged(caplog.records, "claim_refused")
    assert (line["claim"], line["uid"], line["level"]) == ("default/stale", "uid-stale", "warning")


def test_unprepare_answers_every_claim_even_one_never_prepared(
        start: Callable[[Claims], dra_grpc.DRAPluginStub]) -> None:
    assert unprepare(start(Claims()), dra_pb.Claim(namespace="default", name="x", uid="uid-x")) == {"uid-x": ""}


def test_nothing_is_given_when_the_checkpoint_cannot_be_written(
        start: Callable[[Claims], dra_grpc.DRAPluginStub], plugin_dir: Path) -> None:
    claims = Claims()
    stub = start(claims)
    (plugin_dir / "claims.json").mkdir()  # a directory where the file goes: the rename fails, as root too

    answer = prepare(stub, claims.give("a", device_name(CORE_A)))["uid-a"]

    assert "cannot save the prepared-claims checkpoint" in answer.error and not answer.devices


@pytest.mark.parametrize(("make", "complaint"), [
    (lambda path: path.write_text("{not json"), "claims.json is not a prepared-claims checkpoint"),
    (lambda path: path.write_text('{"version": 9, "claims": {}}'), "claims.json has checkpoint version 9"),
    (lambda path: path.mkdir(), "cannot read .*claims.json"),
])
def test_an_unreadable_checkpoint_is_named_at_start(plugin_dir: Path, make: Callable[[Path], object],
                                                    complaint: str) -> None:
    make(plugin_dir / "claims.json")
    with pytest.raises(ClaimError, match=complaint):
        DraPlugin(TREE, Claims(), ClaimFile(plugin_dir / "claims.json"), pool_name=NODE,
                  where=str(plugin_dir / "claims.json"))
