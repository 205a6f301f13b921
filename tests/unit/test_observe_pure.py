"""The pure parts of observability with literal values: live view data, pod resources folding, NFD labels,
log lines, metrics addresses."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path

import pytest

from api.podresources.v1 import podresources_pb2 as pb
from deviceplugin.cli.flags import parse_address
from deviceplugin.errors import CmkError
from deviceplugin.events import Allocation, EventLog, Observer, Observers
from deviceplugin.host.nfd import (
    FEATURE_FILE,
    check_label,
    feature_labels,
    write_features,
)
from deviceplugin.host.sysfs import discover
from deviceplugin.model.assignments import Assignments, Holding
from deviceplugin.model.devices import device_tree
from deviceplugin.model.plan import PlanOptions, Pool, plan_pools
from deviceplugin.observe.logs import JsonFormatter, KeyValueFormatter, configure
from deviceplugin.protocol.podresources import allocatable_from, holdings_from
from deviceplugin.view.live import live_data, render_live
from tests.support.records import logged
from tests.support.topologies import FIXTURES

XEON_D = discover(FIXTURES / "cmk-xeon_d/sys", FIXTURES / "cmk-xeon_d/proc")  # isolcpus=0-3,8-11
PLAN = plan_pools(XEON_D, PlanOptions(num_exclusive_cores=3, shared_slots=2, infra_slots=2))
EXCLUSIVE, SHARED, INFRA = "cmk.intel.com/exclusive-cores", "cmk.intel.com/shared", "cmk.intel.com/infra"


# --- pod resources folding ----------------------------------------------------------------------

def test_list_entries_per_numa_node_fold_into_one_holding_per_container_and_resource():
    response = pb.ListPodResourcesResponse(pod_resources=[pb.PodResources(name="p", namespace="ns", containers=[
        pb.ContainerResources(name="c", devices=[
            pb.ContainerDevices(resource_name=EXCLUSIVE, device_ids=["core-n0-p0-c0"],
                                topology=pb.TopologyInfo(nodes=[pb.NUMANode(ID=0)])),
            pb.ContainerDevices(resource_name=SHARED, device_ids=["shared-001"],
                                topology=pb.TopologyInfo(nodes=[pb.NUMANode(ID=0)])),
            pb.ContainerDevices(resource_name=SHARED, device_ids=["shared-001"],  # the same slot on node 1
                                topology=pb.TopologyInfo(nodes=[pb.NUMANode(ID=1)])),
            pb.ContainerDevices(resource_name="vendor.com/gpu", device_ids=["gpu0"]),
        ])])])
    assert holdings_from(response, [EXCLUSIVE, SHARED]) == (
        Holding("ns", "p", "c", EXCLUSIVE, ("core-n0-p0-c0",)), Holding("ns", "p", "c", SHARED, ("shared-001",)))
    assert len(holdings_from(response)) == 3  # no filter: other vendors' resources too
    allocatable = pb.AllocatableResourcesResponse(devices=[
        pb.ContainerDevices(resource_name=SHARED, device_ids=["shared-000"]),
        pb.ContainerDevices(resource_name=SHARED, device_ids=["shared-000"]),
        pb.ContainerDevices(resource_name=SHARED, device_ids=["shared-001"])])
    assert allocatable_from(allocatable) == {SHARED: frozenset({"shared-000", "shared-001"})}


def test_a_containers_claim_devices_of_our_driver_count_as_its_holding_of_their_pool():
    from deviceplugin.model.devices import device_tree
    from deviceplugin.model.resourceslices import DRIVER_NAME, driver_devices

    tree = device_tree(PLAN, XEON_D.online)
    core = next(iter(tree[EXCLUSIVE].devices))
    claim = pb.DynamicResource(claim_name="c1", claim_namespace="ns", claim_resources=[
        pb.ClaimResource(driver_name=DRIVER_NAME, pool_name="node-a", device_name=core),
        pb.ClaimResource(driver_name="nic.example.com", pool_name="node-a", device_name=core),  # not ours
    ])
    response = pb.ListPodResourcesResponse(pod_resources=[pb.PodResources(name="p", namespace="ns", containers=[
        pb.ContainerResources(name="c", dynamic_resources=[claim])])])
    assert holdings_from(response, [EXCLUSIVE, SHARED], driver_devices(tree)) == (
        Holding("ns", "p", "c", EXCLUSIVE, (core,)),)
    assert holdings_from(response, [EXCLUSIVE, SHARED]) == ()  # device-plugin mode reads device plugins' only


# --- live view ----------------------------------------------------------------------------------

def pools_of(live):
    return {pool["pool"]: pool for pool in live["pools"]}


def test_live_view_maps_ids_to_cpus_through_the_device_model():
    tree = device_tree(PLAN, XEON_D.online)
    assignments = Assignments(
        holdings=(Holding("default", "web", "app", EXCLUSIVE, ("core-n0-p0-c1",)),
                  Holding("default", "web", "side", SHARED, ("shared-001",)),
                  Holding("default", "old", "app", EXCLUSIVE, ("core-n0-p0-c7",))),  # not in this plan
        allocatable={EXCLUSIVE: frozenset({"core-n0-p0-c0", "core-n0-p0-c1"}), SHARED: frozenset({"shared-000", "shared-001"})},
    )
    pools = pools_of(live_data(tree, assignments, "/s"))
    exclusive = pools["exclusive"]
    by_pod = {c["pod"]: c for c in exclusive["containers"]}
    assert by_pod["web"]["cpus"] == "1,9"
    assert by_pod["old"]["cpus"] == "" and by_pod["old"]["devices"] == ["core-n0-p0-c7"]  # an ID this plan lacks
    assert exclusive["unknown_devices"] == ["core-n0-p0-c7"]
    assert exclusive["unhealthy_devices"] == [{"device": "core-n0-p0-c2", "cpus": "2,10",
                                               "reason": "not allocatable at the kubelet"}]
    assert exclusive["free_by_numa_node"] == {"0": {"count": 1, "devices": ["core-n0-p0-c0"]}}
    assert (exclusive["capacity"], exclusive["allocated"], exclusive["free"], exclusive["unhealthy"]) == (3, 1, 1, 1)
    assert pools["shared"]["containers"][0]["cpus"] == "3,11"  # a slot is its whole pool's CPUs
    assert {u["reason"] for u in pools["infra"]["unhealthy_devices"]} == {"resource not registered with the kubelet"}


def test_offline_cpus_in_the_tree_make_their_devices_unhealthy_and_without_allocatable_only_they():
    tree = device_tree(PLAN, XEON_D.online - {9})
    live = live_data(tree, Assignments(holdings=(), allocatable=None), "/s")
    pools = pools_of(live)
    assert pools["exclusive"]["unhealthy_devices"] == [{"device": "core-n0-p0-c1", "cpus": "1,9", "reason": "CPU offline"}]
    assert pools["infra"]["unhealthy"] == 0 and pools["infra"]["free"] == 2
    assert live["notes"] == ["the kubelet does not serve GetAllocatableResources: health is the topology's only"]
    lines = render_live(live)
    assert "  unhealthy in exclusive (CPU offline): core-n0-p0-c1" in lines
    assert "  no container holds a CMK device" in lines


# --- NFD ----------------------------------------------------------------------------------------

def test_feature_labels_for_a_node_without_isolcpus_and_with_sst_bf(tmp_path):
    no_isolation = discover(FIXTURES / "hwloc-20em64t-hybrid-1p6c2t+2ca4co1t/sys",
                            FIXTURES / "hwloc-20em64t-hybrid-1p6c2t+2ca4co1t/proc")
    plan = plan_pools(no_isolation, PlanOptions())
    labels = feature_labels(no_isolation, plan)
    assert labels["cmk.intel.com/isolcpus"] == "false"
    assert labels["cmk.intel.com/sst-bf"] == "true"  # P and E cores differ in base_frequency
    assert labels["cmk.intel.com/sst-cp"] == "false"
    assert labels["cmk.intel.com/exclusive-cores"] == str(len(plan.pools[Pool.EXCLUSIVE])) != "0"
    assert labels["cmk.intel.com/infra-cores"] == str(len(plan.pools[Pool.INFRA]))
    assert all(len(v) <= 63 for v in labels.values())


@pytest.mark.parametrize(("key", "value"), [
    ("isolcpus", "true"), ("cmk.intel.com/x", "-bad"), ("cmk.intel.com/x", "a" * 64),
    ("cmk.intel.com/" + "n" * 64, "1"), ("cmk.intel.com/x", "has space")])
def test_invalid_labels_are_refused(key, value):
    part = "key" if key == "isolcpus" or len(key) > 77 else "value"
    with pytest.raises(ValueError, match=f"^label {part} ") as err:
        check_label(key, value)
    assert repr(key if part == "key" else value) in str(err.value)


def test_feature_file_is_replaced_whole_and_an_unwritable_dir_is_one_line(tmp_path):
    write_features(tmp_path, {"cmk.intel.com/a": "1"})
    path = write_features(tmp_path, {"cmk.intel.com/a": "2"})
    assert [p.name for p in tmp_path.iterdir()] == [FEATURE_FILE]
    assert path.read_text().splitlines()[1:] == ["cmk.intel.com/a=2"]
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(CmkError, match=r"cannot write NFD features to .*file/sub \(use --nfd-features-dir DIR "):
        write_features(blocker / "sub", {"cmk.intel.com/a": "1"})


# --- log lines ----------------------------------------------------------------------------------

@pytest.fixture(autouse=True)
def restore_root_logger():
    """configure() owns the root logger, as in the daemon process; give pytest's handlers back after."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def emit_one(formatter: logging.Formatter) -> str:
    stream = io.StringIO()
    configure("DEBUG", "json" if isinstance(formatter, JsonFormatter) else "text", stream)
    events = EventLog("deviceplugin.test")
    events.warning("register_failed", "cannot register cmk.intel.com/shared at /k/kubelet.sock (UNAVAILABLE: down\n"
                   "second line); retrying with backoff up to 30 s", resource="cmk.intel.com/shared",
                   kubelet_socket="/k/kubelet.sock", code="UNAVAILABLE", details="down\nsecond line", max_delay=30.0)
    events.info("allocated", "allocated cmk.intel.com/exclusive-cores cpus-0.8,cpus-1.9: CPUs 0-1,8-9",
                pool="exclusive", resource="cmk.intel.com/exclusive-cores", devices=("cpus-0.8", "cpus-1.9"),
                cpus="0-1,8-9", seconds=0.00025)
    return stream.getvalue()


def test_text_lines_are_key_value_one_line_per_event():
    failed, allocated = emit_one(KeyValueFormatter()).splitlines()
    assert " level=warning logger=deviceplugin.test event=register_failed resource=cmk.intel.com/shared " \
           "kubelet_socket=/k/kubelet.sock code=UNAVAILABLE details=\"down\\nsecond line\" max_delay=30 " \
           "msg=\"cannot register cmk.intel.com/shared at /k/kubelet.sock (UNAVAILABLE: down\\nsecond line); " \
           "retrying with backoff up to 30 s\"" in failed
    assert " level=info logger=deviceplugin.test event=allocated pool=exclusive " \
           "resource=cmk.intel.com/exclusive-cores devices=cpus-0.8,cpus-1.9 cpus=0-1,8-9 seconds=0.00025 " \
           "msg=\"allocated cmk.intel.com/exclusive-cores cpus-0.8,cpus-1.9: CPUs 0-1,8-9\"" in allocated
    assert failed.startswith("time=") and failed.split()[0].endswith("Z")


def test_json_lines_parse_and_keep_lists():
    failed, allocated = map(json.loads, emit_one(JsonFormatter()).splitlines())
    assert allocated["event"] == "allocated" and allocated["devices"] == ["cpus-0.8", "cpus-1.9"]
    assert failed["details"] == "down\nsecond line" and failed["level"] == "warning"


def test_a_plain_logging_call_with_extra_fields_renders_them_too():
    stream = io.StringIO()
    configure("INFO", "text", stream)
    logging.getLogger("x").info("rebalanced", extra={"event": "rebalanced", "pool": "shared", "moved": 2})
    (line,) = stream.getvalue().splitlines()
    assert line.endswith(" level=info logger=x event=rebalanced pool=shared moved=2 msg=rebalanced")


def test_an_observer_that_fails_is_logged_and_the_next_is_still_told(caplog):
    class Broken(Observer):
        def allocated(self, allocation: Allocation, seconds: float) -> None:
            raise RuntimeError("broken metric")

    class Seen(Observer):
        def __init__(self) -> None:
            self.allocations: list[Allocation] = []

        def allocated(self, allocation: Allocation, seconds: float) -> None:
            self.allocations.append(allocation)

    seen = Seen()
    allocation = Allocation("exclusive", "cmk.intel.com/exclusive-cores", ("cpus-0.8",), "0,8")
    Observers(Broken(), seen).allocated(allocation, 0.001)
    assert seen.allocations == [allocation]
    (failed,) = caplog.records
    assert failed.levelname == "ERROR" and failed.getMessage() == "observer Broken failed" and failed.exc_info


def test_a_traceback_stays_on_one_line():
    stream = io.StringIO()
    configure("INFO", "json", stream)
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logging.getLogger("x").exception("failed")
    (line,) = stream.getvalue().splitlines()
    assert "RuntimeError: boom" in json.loads(line)["error"]


# --- metrics address ----------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    ("0.0.0.0:9464", ("0.0.0.0", 9464)), ("[::1]:0", ("::1", 0)), ("localhost:80", ("localhost", 80))])
def test_metrics_addresses(text, expected):
    assert parse_address(text) == expected


@pytest.mark.parametrize("text", ["9464", ":9464", "host:", "host:http", "host:70000"])
def test_bad_metrics_addresses_say_what_is_expected(text):
    with pytest.raises(ValueError, match="expected HOST:PORT"):
        parse_address(text)


def test_an_allocation_spends_a_look_up_only_when_its_own_turn_came(caplog):
    """A round made for a newer allocation must not use up an older one's attempts early."""
    from pathlib import Path

    from deviceplugin.model.assignments import Holding
    from deviceplugin.observe.resolver import AllocationResolver

    resolver = AllocationResolver(Path("/nonexistent"), delays=(0.5, 1.0, 2.0))
    old = Allocation("exclusive", "cmk.intel.com/exclusive-cores", ("cpus-0.8",), "0,8")
    new = Allocation("exclusive", "cmk.intel.com/exclusive-cores", ("cpus-1.9",), "1,9")
    # the newer one is due now; the older one has two look-ups behind it and is due in 2 s
    after = resolver._after_lookup([(2, 102.0, old), (0, 100.0, new)], holdings=[], now=100.0)
    assert after == [(2, 102.0, old), (1, 101.0, new)]
    # at its own turn the older one spends its last attempt and is dropped (the newer one, due too, goes on)
    assert resolver._after_lookup(after, holdings=[], now=102.0) == [(2, 104.0, new)]
    # any round resolves whatever is held, due or not
    held = [Holding("net", "dpdk", "fwd", "cmk.intel.com/exclusive-cores", ("cpus-1.9",))]
    caplog.set_level(logging.INFO, logger="deviceplugin")
    assert resolver._after_lookup([(1, 105.0, new)], holdings=held, now=102.0) == []
    assert logged(caplog.records, "allocation_resolved") == [{
        "event": "allocation_resolved", "pool": "exclusive", "resource": "cmk.intel.com/exclusive-cores",
        "devices": ("cpus-1.9",), "cpus": "1,9", "namespace": "net", "pod": "dpdk", "container": "fwd",
        "msg": "cmk.intel.com/exclusive-cores cpus-1.9 (CPUs 1,9) held by net/dpdk container fwd", "level": "info"}]


def test_every_event_the_daemon_logs_is_listed_in_the_docs():
    import re
    from pathlib import Path

    names = logged_event_names(Path(__file__).resolve().parents[2] / "deviceplugin")
    assert {"serving_again", "allocated", "config_error"} <= names  # the scan finds the calls
    docs = Path(__file__).resolve().parents[2].joinpath("docs/user/observability.md").read_text()
    logs = docs.partition("\n## Logs\n")[2]
    listed = set(re.findall(r"`([a-z_]+)`", logs.partition("\n## ")[0]))
    assert names <= listed, f"the Logs section of docs/user/observability.md misses {sorted(names - listed)}"


def logged_event_names(package: Path) -> set[str]:
    """The event names of every ``EventLog`` call in ``package``: the first argument of ``events.<level>("name", ...)``."""
    import ast

    names = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "events"
                    and node.func.attr in ("debug", "info", "warning", "error", "exception")
                    and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                names.add(node.args[0].value)
    return names
