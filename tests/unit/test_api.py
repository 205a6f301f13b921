"""The api/ package: committed stubs, kubelet wire compatibility, name and ID validation.

Wire compatibility is checked three ways, because each catches a different
mistake: descriptors against the contract's table (a wrong number or type in
a .proto), method paths seen by a real gRPC server (a wrong package or
service name), and bytes decoded without any descriptor (what the kubelet
would actually parse).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import FieldDescriptor

from api import constants
from api.dra.v1 import api_pb2 as dra_pb2
from api.dra.v1 import api_pb2_grpc as dra_pb2_grpc
from api.pluginregistration.v1 import api_pb2 as registration_pb2
from api.pluginregistration.v1 import api_pb2_grpc as registration_pb2_grpc
from api.podresources.v1 import podresources_pb2, podresources_pb2_grpc
from api.v1beta1 import deviceplugin_pb2, deviceplugin_pb2_grpc

REPO_ROOT = Path(__file__).resolve().parents[2]

# --- committed stubs -------------------------------------------------------------------


def run_generate(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the generator the way CI does, importing api/ from ``root`` only."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, "-m", "api.generate", *args],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.fixture
def repo_copy(tmp_path: Path) -> Path:
    """A copy of api/ to damage, so the real stubs stay untouched."""
    shutil.copytree(REPO_ROOT / "api", tmp_path / "api", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def test_committed_stubs_match_a_fresh_generation() -> None:
    result = run_generate(REPO_ROOT, "--check")
    assert result.returncode == 0, result.stderr


def test_check_names_a_stub_edited_by_hand(repo_copy: Path) -> None:
    stub = repo_copy / "api/v1beta1/deviceplugin_pb2.py"
    stub.write_text(stub.read_text() + "# edited\n")

    result = run_generate(repo_copy, "--check")

    assert result.returncode == 1
    assert "api/v1beta1/deviceplugin_pb2.py: differs from a fresh generation" in result.stderr
    assert "podresources" not in result.stderr


def test_check_names_a_proto_changed_without_regenerating(repo_copy: Path) -> None:
    proto = repo_copy / "api/v1beta1/deviceplugin.proto"
    proto.write_text(proto.read_text().replace("bool read_only = 3;", "bool read_only = 4;"))

    result = run_generate(repo_copy, "--check")

    assert result.returncode == 1
    assert "api/v1beta1/deviceplugin_pb2.py: differs" in result.stderr


def test_check_names_missing_and_stale_stubs(repo_copy: Path) -> None:
    (repo_copy / "api/podresources/v1/podresources_pb2.pyi").unlink()
    (repo_copy / "api/v1beta1/old_pb2.py").write_text("")

    result = run_generate(repo_copy, "--check")

    assert result.returncode == 1
    assert "api/podresources/v1/podresources_pb2.pyi: missing" in result.stderr
    assert "api/v1beta1/old_pb2.py: stale" in result.stderr


def test_check_blames_a_grpcio_tools_version_mismatch_instead_of_asking_to_regenerate(repo_copy: Path) -> None:
    """Regenerating with the wrong grpcio-tools would churn every stub; the fix is the pinned version."""
    stub = repo_copy / "api/v1beta1/deviceplugin_pb2_grpc.py"
    stub.write_text(re.sub(r"GRPC_GENERATED_VERSION = '[^']+'", "GRPC_GENERATED_VERSION = '1.0.0'", stub.read_text()))

    result = run_generate(repo_copy, "--check")

    assert result.returncode == 1
    assert "generated with grpcio-tools 1.0.0" in result.stderr
    assert "run `python -m api.generate`" not in result.stderr


def test_check_names_a_kubelet_proto_edited_by_hand(repo_copy: Path) -> None:
    """The DRA protos are the kubelet's files unchanged: an edit, even one that regenerates cleanly, fails."""
    proto = repo_copy / "api/dra/v1/api.proto"
    proto.write_text(proto.read_text().replace("// The pool which contains the device. Required.", "// The pool."))

    assert run_generate(repo_copy).returncode == 0  # stubs follow the edit...
    result = run_generate(repo_copy, "--check")

    assert result.returncode == 1  # ...but the proto is no longer upstream's
    assert "api/dra/v1/api.proto: differs from k8s.io/kubelet@v0.36.3/pkg/apis/dra/v1/api.proto" in result.stderr
    assert "run `python -m api.generate`" not in result.stderr


def test_generate_repairs_what_check_reports(repo_copy: Path) -> None:
    stub = repo_copy / "api/v1beta1/deviceplugin_pb2_grpc.py"
    original = stub.read_bytes()
    stub.write_text("broken\n")
    (repo_copy / "api/v1beta1/old_pb2.py").write_text("")

    assert run_generate(repo_copy).returncode == 0

    assert stub.read_bytes() == original
    assert not (repo_copy / "api/v1beta1/old_pb2.py").exists()
    assert run_generate(repo_copy, "--check").returncode == 0


def test_all_apis_import_together_in_a_fresh_interpreter() -> None:
    """Shared names (TopologyInfo, Device, the Registration service) must stay apart in their packages."""
    code = (
        "from api.v1beta1 import deviceplugin_pb2, deviceplugin_pb2_grpc\n"
        "from api.podresources.v1 import podresources_pb2, podresources_pb2_grpc\n"
        "from api.pluginregistration.v1 import api_pb2 as reg, api_pb2_grpc as reg_grpc\n"
        "from api.dra.v1 import api_pb2 as dra, api_pb2_grpc as dra_grpc\n"
        "print(deviceplugin_pb2.TopologyInfo.DESCRIPTOR.full_name,\n"
        "      podresources_pb2.TopologyInfo.DESCRIPTOR.full_name,\n"
        "      deviceplugin_pb2.Device.DESCRIPTOR.full_name, dra.Device.DESCRIPTOR.full_name,\n"
        "      deviceplugin_pb2.DESCRIPTOR.services_by_name['Registration'].full_name,\n"
        "      reg.DESCRIPTOR.services_by_name['Registration'].full_name)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [
        "v1beta1.TopologyInfo",
        "v1.TopologyInfo",
        "v1beta1.Device",
        "k8s.io.kubelet.pkg.apis.dra.v1.Device",
        "v1beta1.Registration",
        "pluginregistration.Registration",
    ]


# --- descriptors against the contract table --------------------------------------------

# Copied from docs/design/kubelet-contract.md, written the way the contract writes types.
DEVICE_PLUGIN_MESSAGES = {
    "DevicePluginOptions": [("pre_start_required", 1, "bool"), ("get_preferred_allocation_available", 2, "bool")],
    "RegisterRequest": [
        ("version", 1, "string"),
        ("endpoint", 2, "string"),
        ("resource_name", 3, "string"),
        ("options", 4, "DevicePluginOptions"),
    ],
    "Empty": [],
    "ListAndWatchResponse": [("devices", 1, "repeated Device")],
    "TopologyInfo": [("nodes", 1, "repeated NUMANode")],
    "NUMANode": [("ID", 1, "int64")],
    "Device": [("ID", 1, "string"), ("health", 2, "string"), ("topology", 3, "TopologyInfo")],
    "PreStartContainerRequest": [("devices_ids", 1, "repeated string")],
    "PreStartContainerResponse": [],
    "PreferredAllocationRequest": [("container_requests", 1, "repeated ContainerPreferredAllocationRequest")],
    "ContainerPreferredAllocationRequest": [
        ("available_deviceIDs", 1, "repeated string"),
        ("must_include_deviceIDs", 2, "repeated string"),
        ("allocation_size", 3, "int32"),
    ],
    "PreferredAllocationResponse": [("container_responses", 1, "repeated ContainerPreferredAllocationResponse")],
    "ContainerPreferredAllocationResponse": [("deviceIDs", 1, "repeated string")],
    "AllocateRequest": [("container_requests", 1, "repeated ContainerAllocateRequest")],
    "ContainerAllocateRequest": [("devices_ids", 1, "repeated string")],
    "CDIDevice": [("name", 1, "string")],
    "AllocateResponse": [("container_responses", 1, "repeated ContainerAllocateResponse")],
    "ContainerAllocateResponse": [
        ("envs", 1, "map<string,string>"),
        ("mounts", 2, "repeated Mount"),
        ("devices", 3, "repeated DeviceSpec"),
        ("annotations", 4, "map<string,string>"),
        ("cdi_devices", 5, "repeated CDIDevice"),
    ],
    "Mount": [("container_path", 1, "string"), ("host_path", 2, "string"), ("read_only", 3, "bool")],
    "DeviceSpec": [("container_path", 1, "string"), ("host_path", 2, "string"), ("permissions", 3, "string")],
}

# The pod resources fields the contract names; the kubelet may send more.
POD_RESOURCES_FIELDS = {
    "ListPodResourcesResponse": [("pod_resources", 1, "repeated PodResources")],
    "PodResources": [
        ("name", 1, "string"),
        ("namespace", 2, "string"),
        ("containers", 3, "repeated ContainerResources"),
    ],
    "ContainerResources": [
        ("name", 1, "string"),
        ("devices", 2, "repeated ContainerDevices"),
        ("cpu_ids", 3, "repeated int64"),
        ("memory", 4, "repeated ContainerMemory"),
    ],
    "ContainerDevices": [
        ("resource_name", 1, "string"),
        ("device_ids", 2, "repeated string"),
        ("topology", 3, "TopologyInfo"),
    ],
    "AllocatableResourcesResponse": [
        ("devices", 1, "repeated ContainerDevices"),
        ("cpu_ids", 2, "repeated int64"),
        ("memory", 3, "repeated ContainerMemory"),
    ],
    "GetPodResourcesRequest": [("pod_name", 1, "string"), ("pod_namespace", 2, "string")],
    "GetPodResourcesResponse": [("pod_resources", 1, "PodResources")],
    "TopologyInfo": [("nodes", 1, "repeated NUMANode")],
    "NUMANode": [("ID", 1, "int64")],
}

# The plugin watcher's registration (pluginregistration v1) and the DRA plugin service (dra v1), every field.
PLUGIN_REGISTRATION_MESSAGES = {
    "PluginInfo": [
        ("type", 1, "string"),
        ("name", 2, "string"),
        ("endpoint", 3, "string"),
        ("supported_versions", 4, "repeated string"),
    ],
    "RegistrationStatus": [("plugin_registered", 1, "bool"), ("error", 2, "string")],
    "RegistrationStatusResponse": [],
    "InfoRequest": [],
}

DRA_MESSAGES = {
    "NodePrepareResourcesRequest": [("claims", 1, "repeated Claim")],
    "NodePrepareResourcesResponse": [("claims", 1, "map<string,NodePrepareResourceResponse>")],
    "NodePrepareResourceResponse": [("devices", 1, "repeated Device"), ("error", 2, "string")],
    "Device": [
        ("request_names", 1, "repeated string"),
        ("pool_name", 2, "string"),
        ("device_name", 3, "string"),
        ("cdi_device_ids", 4, "repeated string"),
        ("share_id", 5, "optional string"),
    ],
    "NodeUnprepareResourcesRequest": [("claims", 1, "repeated Claim")],
    "NodeUnprepareResourcesResponse": [("claims", 1, "map<string,NodeUnprepareResourceResponse>")],
    "NodeUnprepareResourceResponse": [("error", 1, "string")],
    "Claim": [("namespace", 1, "string"), ("uid", 2, "string"), ("name", 3, "string")],
}

CONTRACT_METHODS = {
    "/v1beta1.Registration/Register": (False, False),
    "/v1beta1.DevicePlugin/GetDevicePluginOptions": (False, False),
    "/v1beta1.DevicePlugin/ListAndWatch": (False, True),
    "/v1beta1.DevicePlugin/GetPreferredAllocation": (False, False),
    "/v1beta1.DevicePlugin/Allocate": (False, False),
    "/v1beta1.DevicePlugin/PreStartContainer": (False, False),
    "/v1.PodResourcesLister/List": (False, False),
    "/v1.PodResourcesLister/GetAllocatableResources": (False, False),
    "/v1.PodResourcesLister/Get": (False, False),
    "/pluginregistration.Registration/GetInfo": (False, False),
    "/pluginregistration.Registration/NotifyRegistrationStatus": (False, False),
    "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources": (False, False),
    "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeUnprepareResources": (False, False),
}

_SCALARS = {
    FieldDescriptor.TYPE_BOOL: "bool",
    FieldDescriptor.TYPE_STRING: "string",
    FieldDescriptor.TYPE_INT32: "int32",
    FieldDescriptor.TYPE_INT64: "int64",
    FieldDescriptor.TYPE_UINT64: "uint64",
}


def _type_name(field: FieldDescriptor) -> str:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return field.message_type.name
    return _SCALARS[field.type]


def contract_type(field: FieldDescriptor) -> str:
    """A field's type in the contract's notation, e.g. ``repeated Device`` or ``map<string,string>``."""
    if field.type == FieldDescriptor.TYPE_MESSAGE and field.message_type.GetOptions().map_entry:
        key, value = field.message_type.fields_by_name["key"], field.message_type.fields_by_name["value"]
        return f"map<{_type_name(key)},{_type_name(value)}>"
    if field.is_repeated:
        return f"repeated {_type_name(field)}"
    synthetic = field.containing_oneof is not None and field.containing_oneof.name == f"_{field.name}"
    return f"optional {_type_name(field)}" if synthetic else _type_name(field)


def fields_of(module, message: str) -> list[tuple[str, int, str]]:
    return [(f.name, f.number, contract_type(f)) for f in module.DESCRIPTOR.message_types_by_name[message].fields]


@pytest.mark.parametrize(
    ("module", "package"),
    [
        (deviceplugin_pb2, "v1beta1"),
        (podresources_pb2, "v1"),
        (registration_pb2, "pluginregistration"),
        (dra_pb2, "k8s.io.kubelet.pkg.apis.dra.v1"),
    ],
)
def test_files_are_proto3_in_the_kubelet_packages(module, package: str) -> None:
    file_proto = descriptor_pb2.FileDescriptorProto()
    module.DESCRIPTOR.CopyToProto(file_proto)
    assert (file_proto.package, file_proto.syntax) == (package, "proto3")


def test_device_plugin_defines_exactly_the_contract_messages() -> None:
    assert set(deviceplugin_pb2.DESCRIPTOR.message_types_by_name) == set(DEVICE_PLUGIN_MESSAGES)


@pytest.mark.parametrize(("message", "expected"), DEVICE_PLUGIN_MESSAGES.items(), ids=list(DEVICE_PLUGIN_MESSAGES))
def test_device_plugin_message_fields_match_the_contract(message: str, expected: list) -> None:
    assert fields_of(deviceplugin_pb2, message) == expected


@pytest.mark.parametrize(("message", "expected"), POD_RESOURCES_FIELDS.items(), ids=list(POD_RESOURCES_FIELDS))
def test_pod_resources_message_fields_match_the_contract(message: str, expected: list) -> None:
    actual = fields_of(podresources_pb2, message)
    assert [field for field in actual if field[0] in {name for name, _, _ in expected}] == expected


@pytest.mark.parametrize(
    ("module", "messages"), [(registration_pb2, PLUGIN_REGISTRATION_MESSAGES), (dra_pb2, DRA_MESSAGES)]
)
def test_kubelet_plugin_apis_define_exactly_the_contract_messages_and_fields(module, messages: dict) -> None:
    assert {name: fields_of(module, name) for name in module.DESCRIPTOR.message_types_by_name} == messages


def test_dra_service_is_the_one_the_kubelet_lists_as_v1_dra_plugin() -> None:
    """The kubelet picks the service by the string ``v1.DRAPlugin`` a plugin lists in supported_versions."""
    [service] = dra_pb2.DESCRIPTOR.services_by_name.values()
    assert service.full_name.endswith(".v1.DRAPlugin")


def test_services_have_exactly_the_contract_methods_and_streaming_flags() -> None:
    found = {
        f"/{service.full_name}/{method.name}": (method.client_streaming, method.server_streaming)
        for module in (deviceplugin_pb2, podresources_pb2, registration_pb2, dra_pb2)
        for service in module.DESCRIPTOR.services_by_name.values()
        for method in service.methods
    }
    assert found == CONTRACT_METHODS


# --- method paths on a real gRPC server --------------------------------------------------


class _RecordMethods(grpc.ServerInterceptor):
    """Records the method path of every call the server receives."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def intercept_service(self, continuation, handler_call_details):
        self.seen.append(handler_call_details.method)
        return continuation(handler_call_details)


@pytest.fixture
def socket_path() -> Iterator[str]:
    """A short path: unix socket paths are limited to 107 bytes, pytest's tmp_path can be longer."""
    directory = tempfile.mkdtemp(prefix="cmk-api-test-")
    yield os.path.join(directory, "s.sock")
    shutil.rmtree(directory)


def test_generated_stubs_and_servicers_use_the_contract_paths(socket_path: str) -> None:
    """Every stub call reaches the generated servicer: the path the client sends is the one the kubelet uses."""
    recorder = _RecordMethods()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), interceptors=[recorder])
    deviceplugin_pb2_grpc.add_RegistrationServicer_to_server(deviceplugin_pb2_grpc.RegistrationServicer(), server)
    deviceplugin_pb2_grpc.add_DevicePluginServicer_to_server(deviceplugin_pb2_grpc.DevicePluginServicer(), server)
    podresources_pb2_grpc.add_PodResourcesListerServicer_to_server(
        podresources_pb2_grpc.PodResourcesListerServicer(), server
    )
    registration_pb2_grpc.add_RegistrationServicer_to_server(registration_pb2_grpc.RegistrationServicer(), server)
    dra_pb2_grpc.add_DRAPluginServicer_to_server(dra_pb2_grpc.DRAPluginServicer(), server)
    server.add_insecure_port(f"unix://{socket_path}")
    server.start()
    try:
        with grpc.insecure_channel(f"unix://{socket_path}") as channel:
            registration = deviceplugin_pb2_grpc.RegistrationStub(channel)
            plugin = deviceplugin_pb2_grpc.DevicePluginStub(channel)
            lister = podresources_pb2_grpc.PodResourcesListerStub(channel)
            watcher_side = registration_pb2_grpc.RegistrationStub(channel)
            dra = dra_pb2_grpc.DRAPluginStub(channel)
            calls = [
                lambda: registration.Register(deviceplugin_pb2.RegisterRequest()),
                lambda: plugin.GetDevicePluginOptions(deviceplugin_pb2.Empty()),
                lambda: list(plugin.ListAndWatch(deviceplugin_pb2.Empty())),
                lambda: plugin.GetPreferredAllocation(deviceplugin_pb2.PreferredAllocationRequest()),
                lambda: plugin.Allocate(deviceplugin_pb2.AllocateRequest()),
                lambda: plugin.PreStartContainer(deviceplugin_pb2.PreStartContainerRequest()),
                lambda: lister.List(podresources_pb2.ListPodResourcesRequest()),
                lambda: lister.GetAllocatableResources(podresources_pb2.AllocatableResourcesRequest()),
                lambda: lister.Get(podresources_pb2.GetPodResourcesRequest()),
                lambda: watcher_side.GetInfo(registration_pb2.InfoRequest()),
                lambda: watcher_side.NotifyRegistrationStatus(registration_pb2.RegistrationStatus()),
                lambda: dra.NodePrepareResources(dra_pb2.NodePrepareResourcesRequest()),
                lambda: dra.NodeUnprepareResources(dra_pb2.NodeUnprepareResourcesRequest()),
            ]
            for call in calls:
                with pytest.raises(grpc.RpcError) as failure:
                    call()
                # The base servicer answered: an unknown path would say "Method not found!".
                assert failure.value.code() == grpc.StatusCode.UNIMPLEMENTED
                assert failure.value.details() == "Method not implemented!"
            assert isinstance(plugin.ListAndWatch, grpc.UnaryStreamMultiCallable)
    finally:
        server.stop(None)
    assert recorder.seen == list(CONTRACT_METHODS)


# --- bytes on the wire, decoded without descriptors --------------------------------------


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def raw_fields(data: bytes) -> list[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) for each field: what any protobuf parser sees."""
    fields: list[tuple[int, int, int | bytes]] = []
    pos = 0
    while pos < len(data):
        tag, pos = _varint(data, pos)
        number, wire_type = tag >> 3, tag & 7
        if wire_type == 0:
            value, pos = _varint(data, pos)
            fields.append((number, wire_type, value))
        elif wire_type == 2:
            length, pos = _varint(data, pos)
            fields.append((number, wire_type, data[pos : pos + length]))
            pos += length
        else:
            raise AssertionError(f"unexpected wire type {wire_type} for field {number}")
    return fields


def _tag(number: int, wire_type: int) -> bytes:
    return bytes([number << 3 | wire_type])


def _len(number: int, payload: bytes) -> bytes:
    return _tag(number, 2) + bytes([len(payload)]) + payload


VARINT, LEN = 0, 2


def test_device_encodes_id_health_and_numa_node_at_the_contract_numbers() -> None:
    device = deviceplugin_pb2.Device(
        ID="core-3",
        health=constants.HEALTHY,
        topology=deviceplugin_pb2.TopologyInfo(nodes=[deviceplugin_pb2.NUMANode(ID=1)]),
    )
    fields = raw_fields(device.SerializeToString())
    assert fields[:2] == [(1, LEN, b"core-3"), (2, LEN, b"Healthy")]
    number, wire_type, topology = fields[2]
    assert (number, wire_type, len(fields)) == (3, LEN, 3)
    [(node_number, node_wire_type, node)] = raw_fields(topology)
    assert (node_number, node_wire_type) == (1, LEN)
    assert raw_fields(node) == [(1, VARINT, 1)]


def test_register_request_encodes_options_at_field_4() -> None:
    request = deviceplugin_pb2.RegisterRequest(
        version=constants.API_VERSION,
        endpoint="cmk-exclusive.sock",
        resource_name="cmk.intel.com/exclusive-cores",
        options=deviceplugin_pb2.DevicePluginOptions(get_preferred_allocation_available=True),
    )
    assert raw_fields(request.SerializeToString()) == [
        (1, LEN, b"v1beta1"),
        (2, LEN, b"cmk-exclusive.sock"),
        (3, LEN, b"cmk.intel.com/exclusive-cores"),
        (4, LEN, _tag(2, VARINT) + b"\x01"),
    ]


def test_preferred_allocation_request_from_kubelet_bytes_decodes() -> None:
    """Bytes built by hand, the way the kubelet's encoder lays them out."""
    container = _len(1, b"cpu-0") + _len(1, b"cpu-1") + _len(2, b"cpu-1") + _tag(3, VARINT) + b"\x02"
    request = deviceplugin_pb2.PreferredAllocationRequest.FromString(_len(1, container))
    [parsed] = request.container_requests
    assert list(parsed.available_deviceIDs) == ["cpu-0", "cpu-1"]
    assert list(parsed.must_include_deviceIDs) == ["cpu-1"]
    assert parsed.allocation_size == 2


def test_allocate_response_maps_and_cdi_devices_encode_at_the_contract_numbers() -> None:
    response = deviceplugin_pb2.ContainerAllocateResponse(
        envs={"CMK_CPUS": "2-3"},
        annotations={"cmk.intel.com/cpus": "2-3"},
        cdi_devices=[deviceplugin_pb2.CDIDevice(name="intel.com/cmk=exclusive")],
    )
    fields = raw_fields(response.SerializeToString())
    assert [(number, wire_type) for number, wire_type, _ in fields] == [(1, LEN), (4, LEN), (5, LEN)]
    assert raw_fields(fields[0][2]) == [(1, LEN, b"CMK_CPUS"), (2, LEN, b"2-3")]
    assert raw_fields(fields[2][2]) == [(1, LEN, b"intel.com/cmk=exclusive")]


def test_plugin_info_encodes_type_name_endpoint_and_versions_at_the_upstream_numbers() -> None:
    info = registration_pb2.PluginInfo(
        type="DRAPlugin", name="cpu.cmk.intel.com", endpoint="/p/dra.sock", supported_versions=["v1.DRAPlugin"]
    )
    assert raw_fields(info.SerializeToString()) == [
        (1, LEN, b"DRAPlugin"),
        (2, LEN, b"cpu.cmk.intel.com"),
        (3, LEN, b"/p/dra.sock"),
        (4, LEN, b"v1.DRAPlugin"),
    ]


def test_prepare_response_keys_claims_by_uid_and_encodes_cdi_ids_at_field_4() -> None:
    device = dra_pb2.Device(pool_name="node-a", device_name="core-3", cdi_device_ids=["cmk.intel.com/cpu=x"])
    response = dra_pb2.NodePrepareResourcesResponse(
        claims={"uid-1": dra_pb2.NodePrepareResourceResponse(devices=[device])}
    )
    [(number, wire_type, entry)] = raw_fields(response.SerializeToString())
    assert (number, wire_type) == (1, LEN)
    key, value = raw_fields(entry)
    assert key == (1, LEN, b"uid-1")
    [(_, _, encoded_device)] = raw_fields(value[2])
    assert raw_fields(encoded_device) == [(2, LEN, b"node-a"), (3, LEN, b"core-3"), (4, LEN, b"cmk.intel.com/cpu=x")]
    assert not device.HasField("share_id")  # optional: absent stays absent on the wire


def test_pod_resources_from_a_newer_kubelet_decode_despite_unknown_fields() -> None:
    """Fields we left out of the proto (e.g. ContainerResources.isolation = 6) must not break parsing."""
    devices = _len(1, b"cmk.intel.com/exclusive-cores") + _len(2, b"core-2")
    container = _len(1, b"app") + _len(2, devices) + _len(6, b"\x0a\x00")
    pod = _len(1, b"web") + _len(2, b"default") + _len(3, container)
    response = podresources_pb2.ListPodResourcesResponse.FromString(_len(1, pod))
    [parsed_pod] = response.pod_resources
    [parsed_container] = parsed_pod.containers
    [parsed_devices] = parsed_container.devices
    assert (parsed_pod.name, parsed_pod.namespace, parsed_container.name) == ("web", "default", "app")
    assert (parsed_devices.resource_name, list(parsed_devices.device_ids)) == (
        "cmk.intel.com/exclusive-cores",
        ["core-2"],
    )


# --- constants and validation -------------------------------------------------------------


def test_constants_are_the_contract_values() -> None:
    assert (constants.API_VERSION, constants.HEALTHY, constants.UNHEALTHY) == ("v1beta1", "Healthy", "Unhealthy")
    assert os.path.join(constants.DEVICE_PLUGIN_DIR, constants.KUBELET_SOCKET_NAME) == (
        "/var/lib/kubelet/device-plugins/kubelet.sock"
    )
    assert constants.POD_RESOURCES_SOCKET == "/var/lib/kubelet/pod-resources/kubelet.sock"
    assert constants.MAX_DEVICE_ID_LENGTH == 63
    assert constants.RESOURCE_NAME_PREFIX == "cmk.intel.com/"


@pytest.mark.parametrize(
    "name",
    [
        "cmk.intel.com/exclusive-cores",
        "cmk.intel.com/shared-cores",
        "cmk.intel.com/infra_cores.v2",
        "example.com/GPU",
        "a/b",
        "cmk.intel.com/" + "n" * 63,
        "p" * 244 + "/x",
    ],
)
def test_valid_resource_names_pass(name: str) -> None:
    assert constants.validate_resource_name(name) is None


@pytest.mark.parametrize(
    ("name", "complaint"),
    [
        ("exclusive-cores", "needs a domain prefix and a '/'"),
        ("", "needs a domain prefix and a '/'"),
        ("CMK.intel.com/exclusive-cores", "DNS-1123 subdomain"),
        ("cmk_intel.com/exclusive-cores", "DNS-1123 subdomain"),
        ("-cmk.intel.com/exclusive-cores", "DNS-1123 subdomain"),
        ("cmk..intel.com/exclusive-cores", "DNS-1123 subdomain"),
        ("kubernetes.io/cores", "kubernetes.io/"),
        ("node.kubernetes.io/cores", "kubernetes.io/"),
        ("requests.cmk.intel.com/cores", "'requests.'"),
        ("cmk.intel.com/" + "n" * 64, "64 characters; at most 63"),
        ("p" * 245 + "/x", "245 characters; at most 244"),
        ("cmk.intel.com/a/b", "exactly one '/'"),
        ("/exclusive-cores", "empty prefix"),
        ("cmk.intel.com/", "empty name"),
        ("cmk.intel.com/-cores", "start and end with a letter or digit"),
        ("cmk.intel.com/cores.", "start and end with a letter or digit"),
        ("cmk.intel.com/exclusive cores", "only letters, digits"),
    ],
)
def test_invalid_resource_names_say_what_is_wrong(name: str, complaint: str) -> None:
    message = constants.validate_resource_name(name)
    assert message is not None and complaint in message


@pytest.mark.parametrize("device_id", ["core-0", "cpu-12", "n0.core_3", "7", "x" * 63])
def test_valid_device_ids_pass(device_id: str) -> None:
    assert constants.validate_device_id(device_id) is None


@pytest.mark.parametrize(
    ("device_id", "complaint"),
    [
        ("", "empty"),
        ("x" * 64, "64 characters; at most 63"),
        ("core 0", "only letters, digits"),
        ("cpu-1,cpu-2", "only letters, digits"),
        ("-core0", "start and end"),
    ],
)
def test_invalid_device_ids_say_what_is_wrong(device_id: str, complaint: str) -> None:
    message = constants.validate_device_id(device_id)
    assert message is not None and complaint in message
