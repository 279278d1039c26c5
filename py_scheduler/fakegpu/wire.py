"""The kubelet device-plugin API v1beta1 on the wire: messages and method paths, built at import.

Source of the wire format: ``k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1/api.proto`` (package
``v1beta1``; services ``Registration`` on the kubelet's ``kubelet.sock`` and ``DevicePlugin`` on the
plugin's own socket) and ``constants.go`` beside it (``Version = "v1beta1"``, the socket directory
``/var/lib/kubelet/device-plugins/``, ``Healthy``/``Unhealthy``). No generated code is shipped: the file
descriptor below names each message's fields with the numbers and types the API publishes, and
protobuf's ``message_factory`` makes the classes from it. A unit test compares these fields with the
.proto in the Go module cache, so a change upstream fails loudly.

Each message class is exported under its API name (``RegisterRequest``, ``AllocateResponse``...);
gRPC method paths are ``/v1beta1.<Service>/<Method>``.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

API_VERSION = "v1beta1"
"""``pluginapi.Version``: what a plugin sends in ``RegisterRequest.version``."""
KUBELET_SOCKET = "kubelet.sock"
HEALTHY = "Healthy"

_F = descriptor_pb2.FieldDescriptorProto
_STRING, _BOOL, _INT32, _INT64, _MSG = _F.TYPE_STRING, _F.TYPE_BOOL, _F.TYPE_INT32, _F.TYPE_INT64, _F.TYPE_MESSAGE
_REP, _OPT = _F.LABEL_REPEATED, _F.LABEL_OPTIONAL

# message -> [(field name, number, type, label, message type or "")]; map<string,string> fields are the
# repeated nested *Entry messages protoc itself makes for them.
MESSAGES: dict[str, list[tuple[str, int, int, int, str]]] = {
    "DevicePluginOptions": [("pre_start_required", 1, _BOOL, _OPT, ""),
                            ("get_preferred_allocation_available", 2, _BOOL, _OPT, "")],
    "RegisterRequest": [("version", 1, _STRING, _OPT, ""), ("endpoint", 2, _STRING, _OPT, ""),
                        ("resource_name", 3, _STRING, _OPT, ""),
                        ("options", 4, _MSG, _OPT, "DevicePluginOptions")],
    "Empty": [],
    "ListAndWatchResponse": [("devices", 1, _MSG, _REP, "Device")],
    "TopologyInfo": [("nodes", 1, _MSG, _REP, "NUMANode")],
    "NUMANode": [("ID", 1, _INT64, _OPT, "")],
    "Device": [("ID", 1, _STRING, _OPT, ""), ("health", 2, _STRING, _OPT, ""),
               ("topology", 3, _MSG, _OPT, "TopologyInfo")],
    "PreStartContainerRequest": [("devices_ids", 1, _STRING, _REP, "")],
    "PreStartContainerResponse": [],
    "PreferredAllocationRequest": [("container_requests", 1, _MSG, _REP, "ContainerPreferredAllocationRequest")],
    "ContainerPreferredAllocationRequest": [("available_deviceIDs", 1, _STRING, _REP, ""),
                                            ("must_include_deviceIDs", 2, _STRING, _REP, ""),
                                            ("allocation_size", 3, _INT32, _OPT, "")],
    "PreferredAllocationResponse": [("container_responses", 1, _MSG, _REP, "ContainerPreferredAllocationResponse")],
    "ContainerPreferredAllocationResponse": [("deviceIDs", 1, _STRING, _REP, "")],
    "AllocateRequest": [("container_requests", 1, _MSG, _REP, "ContainerAllocateRequest")],
    "ContainerAllocateRequest": [("devices_ids", 1, _STRING, _REP, "")],
    "CDIDevice": [("name", 1, _STRING, _OPT, "")],
    "AllocateResponse": [("container_responses", 1, _MSG, _REP, "ContainerAllocateResponse")],
    "ContainerAllocateResponse": [("envs", 1, _MSG, _REP, "ContainerAllocateResponse.EnvsEntry"),
                                  ("mounts", 2, _MSG, _REP, "Mount"),
                                  ("devices", 3, _MSG, _REP, "DeviceSpec"),
                                  ("annotations", 4, _MSG, _REP, "ContainerAllocateResponse.AnnotationsEntry"),
                                  ("cdi_devices", 5, _MSG, _REP, "CDIDevice")],
    "Mount": [("container_path", 1, _STRING, _OPT, ""), ("host_path", 2, _STRING, _OPT, ""),
              ("read_only", 3, _BOOL, _OPT, "")],
    "DeviceSpec": [("container_path", 1, _STRING, _OPT, ""), ("host_path", 2, _STRING, _OPT, ""),
                   ("permissions", 3, _STRING, _OPT, "")],
}
_MAP_FIELDS = {"ContainerAllocateResponse": ("EnvsEntry", "AnnotationsEntry")}


def _file() -> descriptor_pb2.FileDescriptorProto:
    fd = descriptor_pb2.FileDescriptorProto(name="py_scheduler/fakegpu/deviceplugin_v1beta1.proto",
                                            package=API_VERSION, syntax="proto3")
    for name, fields in MESSAGES.items():
        msg = fd.message_type.add(name=name)
        for entry in _MAP_FIELDS.get(name, ()):
            nested = msg.nested_type.add(name=entry)
            nested.options.map_entry = True
            nested.field.add(name="key", number=1, type=_STRING, label=_OPT, json_name="key")
            nested.field.add(name="value", number=2, type=_STRING, label=_OPT, json_name="value")
        for fname, number, ftype, label, type_name in fields:
            field = msg.field.add(name=fname, number=number, type=ftype, label=label)
            if type_name:
                field.type_name = f".{API_VERSION}.{type_name}"
    return fd


_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_file())


def message(name: str) -> Any:
    """The generated message class of API message ``name`` (e.g. ``"AllocateRequest"``)."""
    return message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"{API_VERSION}.{name}"))


DevicePluginOptions = message("DevicePluginOptions")
RegisterRequest = message("RegisterRequest")
Empty = message("Empty")
ListAndWatchResponse = message("ListAndWatchResponse")
Device = message("Device")
PreStartContainerRequest = message("PreStartContainerRequest")
PreStartContainerResponse = message("PreStartContainerResponse")
PreferredAllocationRequest = message("PreferredAllocationRequest")
PreferredAllocationResponse = message("PreferredAllocationResponse")
AllocateRequest = message("AllocateRequest")
AllocateResponse = message("AllocateResponse")

# service -> method -> (request class, response class, server-streaming)
METHODS: dict[str, dict[str, tuple[Any, Any, bool]]] = {
    "Registration": {"Register": (RegisterRequest, Empty, False)},
    "DevicePlugin": {
        "GetDevicePluginOptions": (Empty, DevicePluginOptions, False),
        "ListAndWatch": (Empty, ListAndWatchResponse, True),
        "GetPreferredAllocation": (PreferredAllocationRequest, PreferredAllocationResponse, False),
        "Allocate": (AllocateRequest, AllocateResponse, False),
        "PreStartContainer": (PreStartContainerRequest, PreStartContainerResponse, False),
    },
}


def method_path(service: str, method: str) -> str:
    """gRPC path of ``service``'s ``method``: ``/v1beta1.DevicePlugin/Allocate``."""
    return f"/{API_VERSION}.{service}/{method}"
