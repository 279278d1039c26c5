"""The offline loader's conversion of older ``resource.k8s.io`` versions equals the API server's
(issue 30, item 2): each object is created in ``v1beta1`` or ``v1beta2`` (the bed serves both,
``--runtime-config``), read back as v1, and its ``spec`` compared with
:func:`py_scheduler.offline.dra_versions.to_v1` of what was sent. An allocated claim (what a dump of
an older cluster holds) has its ``status`` written through the status subresource in its version and
compared the same way.

A device taint's ``timeAdded`` (the server's clock at creation) is the one field left out.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from py_scheduler.offline.dra_versions import to_v1
from tests.e2e.helpers import unique_name

G = "resource.k8s.io"
PLURAL = {"ResourceSlice": "resourceslices", "ResourceClaim": "resourceclaims",
          "ResourceClaimTemplate": "resourceclaimtemplates", "DeviceClass": "deviceclasses"}
Obj = dict[str, Any]

pytestmark = pytest.mark.timeout(120)


def _without_time_added(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_time_added(v) for k, v in value.items() if k != "timeAdded"}
    if isinstance(value, list):
        return [_without_time_added(v) for v in value]
    return value


@pytest.fixture
async def made(api_client: client.ApiClient) -> AsyncIterator[list[tuple[str, str]]]:
    """(kind, name) of what a test created; deleted afterwards."""
    out: list[tuple[str, str]] = []
    yield out
    custom = client.CustomObjectsApi(api_client)
    for kind, name in out:
        with contextlib.suppress(ApiException):
            if kind in ("ResourceClaim", "ResourceClaimTemplate"):
                await custom.delete_namespaced_custom_object(G, "v1", "default", PLURAL[kind], name)
            else:
                await custom.delete_cluster_custom_object(G, "v1", PLURAL[kind], name)


async def round_trip(api: client.ApiClient, made: list[tuple[str, str]], version: str, kind: str, spec: Obj) -> None:
    """Create ``spec`` as ``kind`` in ``version``; its v1 read-back's spec equals the conversion's."""
    custom = client.CustomObjectsApi(api)
    name = unique_name(kind.lower())
    obj = {"apiVersion": f"{G}/{version}", "kind": kind, "metadata": {"name": name}, "spec": spec}
    made.append((kind, name))
    if kind in ("ResourceClaim", "ResourceClaimTemplate"):
        await custom.create_namespaced_custom_object(G, version, "default", PLURAL[kind], obj)
        back = await custom.get_namespaced_custom_object(G, "v1", "default", PLURAL[kind], name)
    else:
        await custom.create_cluster_custom_object(G, version, PLURAL[kind], obj)
        back = await custom.get_cluster_custom_object(G, "v1", PLURAL[kind], name)
    if kind == "ResourceClaimTemplate" and back["spec"].get("metadata") == {}:
        del back["spec"]["metadata"]  # the server writes a template's empty ObjectMeta in every version
    mine = to_v1(kind, obj)
    assert mine["apiVersion"] == back["apiVersion"] == f"{G}/v1"
    assert _without_time_added(mine["spec"]) == _without_time_added(back["spec"]), (version, kind)


CEL = [{"cel": {"expression": 'device.attributes["gpu.example.com"].model == "H100"'}}]
TOLERATIONS = [{"key": "maintenance", "effect": "NoSchedule"}, {"key": "k", "operator": "Exists"}]
OPAQUE = [{"opaque": {"driver": "gpu.example.com", "parameters": {"kind": "GpuConfig", "sharing": {"n": 2}}}}]

V1BETA1_REQUESTS = [
    {"name": "class-only", "deviceClassName": "gpu"},
    {"name": "all", "deviceClassName": "gpu", "allocationMode": "All", "selectors": CEL},
    {"name": "two", "deviceClassName": "gpu", "count": 2, "tolerations": TOLERATIONS},
    {"name": "capacity", "deviceClassName": "gpu", "capacity": {"requests": {"memory": "40Gi"}}},
    {"name": "alternatives", "firstAvailable": [
        {"name": "big", "deviceClassName": "gpu", "selectors": CEL, "tolerations": TOLERATIONS},
        {"name": "small", "deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 2}]},
]
V1BETA1_CLAIM = {"devices": {"requests": V1BETA1_REQUESTS,
                             "constraints": [{"requests": ["two"], "matchAttribute": "gpu.example.com/nvlink"}],
                             "config": [{"requests": ["two"], **OPAQUE[0]}]}}


def _to_v1beta2_request(r: Obj) -> Obj:
    if "firstAvailable" in r:
        return r
    return {"name": r["name"], "exactly": {k: v for k, v in r.items() if k != "name"}}


V1BETA2_CLAIM = {"devices": {**V1BETA1_CLAIM["devices"],
                             "requests": [_to_v1beta2_request(r) for r in V1BETA1_REQUESTS]}}

DEVICE_FIELDS: Obj = {"attributes": {"model": {"string": "H100"}, "cores": {"int": 132}, "ok": {"bool": True},
                                     "driverVersion": {"version": "1.2.3"}},
                      "capacity": {"memory": {"value": "80Gi"}},
                      "taints": [{"key": "maintenance", "value": "x", "effect": "NoSchedule"}],
                      "allowMultipleAllocations": True}


def _slice_spec(devices: list[Obj], node: str = "", all_nodes: bool = False) -> Obj:
    spec: Obj = {"driver": "gpu.example.com", "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
                 "devices": devices}
    if node:
        spec["nodeName"] = node
    if all_nodes:
        spec["allNodes"] = True
    return spec


@pytest.mark.parametrize("version", ["v1beta1", "v1beta2"])
async def test_claims_and_templates_convert_as_the_api_server(api_client: client.ApiClient,
                                                              made: list[tuple[str, str]], version: str) -> None:
    spec = V1BETA1_CLAIM if version == "v1beta1" else V1BETA2_CLAIM
    await round_trip(api_client, made, version, "ResourceClaim", spec)
    await round_trip(api_client, made, version, "ResourceClaimTemplate", {"spec": spec})


@pytest.mark.parametrize("version", ["v1beta1", "v1beta2"])
async def test_slices_and_classes_convert_as_the_api_server(api_client: client.ApiClient,
                                                            made: list[tuple[str, str]], version: str) -> None:
    if version == "v1beta1":
        devices = [{"name": "gpu-0", "basic": DEVICE_FIELDS}, {"name": "gpu-1", "basic": {"attributes": {}}},
                   {"name": "gpu-2"}]
    else:
        devices = [{"name": "gpu-0", **DEVICE_FIELDS}, {"name": "gpu-2"}]
    await round_trip(api_client, made, version, "ResourceSlice", _slice_spec(devices, node="n-conv"))
    await round_trip(api_client, made, version, "ResourceSlice", _slice_spec(devices, all_nodes=True))
    await round_trip(api_client, made, version, "DeviceClass",
                     {"selectors": CEL, "config": OPAQUE})


def _allocated_status(pod_uid: str, share_id: str) -> Obj:
    """``status`` of an allocated, reserved claim with every field a result can carry (the API server
    requires DNS-label driver/pool/device names, request names of the claim, a UUID share ID, known
    config sources, a device status only for an allocated device; no ResourceSlice has to exist).
    ``skipNodeOperations`` is left out: its gate, DRAOptionalNodeOperations, is alpha (off) in 1.37 and
    the status strategy drops it on write, in every version."""
    return {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "two", "driver": "gpu.example.com", "pool": "pool-a", "device": "gpu-0",
                     "adminAccess": False, "tolerations": [{"key": "maintenance", "effect": "NoSchedule"}],
                     "consumedCapacity": {"memory": "40Gi"}, "shareID": share_id,
                     "bindingConditions": ["attached"], "bindingFailureConditions": ["attach-failed"]},
                    {"request": "two", "driver": "gpu.example.com", "pool": "pool-a", "device": "gpu-1"},
                    {"request": "alternatives/small", "driver": "gpu.example.com", "pool": "pool-a",
                     "device": "gpu-2"}],
                "config": [{"source": "FromClass", "requests": ["two"], **OPAQUE[0]},
                           {"source": "FromClaim", "requests": ["two"], **OPAQUE[0]}]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": ["n-conv"]}]}]}},
        "reservedFor": [{"resource": "pods", "name": "p-conv", "uid": pod_uid}],
        "devices": [{"driver": "gpu.example.com", "pool": "pool-a", "device": "gpu-0", "shareID": share_id,
                     "conditions": [{"type": "Ready", "status": "True", "reason": "Prepared", "message": "",
                                     "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                     "data": {"driverVersion": "1.2.3"},
                     "networkData": {"interfaceName": "net1", "ips": ["10.0.0.1/24"],
                                     "hardwareAddress": "00:11:22:33:44:55"}}]}


@pytest.mark.parametrize("version", ["v1beta1", "v1beta2"])
async def test_an_allocated_claims_status_converts_as_the_api_server(api_client: client.ApiClient,
                                                                     made: list[tuple[str, str]],
                                                                     version: str) -> None:
    """The claim is created in ``version``, its status written through that version's status
    subresource and read back in that version (what a dump of such a cluster holds) and as v1; the
    conversion of both the sent object and the old-version read-back gives the v1 ``status``."""
    custom = client.CustomObjectsApi(api_client)
    name = unique_name("allocated")
    spec = V1BETA1_CLAIM if version == "v1beta1" else V1BETA2_CLAIM
    obj: Obj = {"apiVersion": f"{G}/{version}", "kind": "ResourceClaim", "metadata": {"name": name},
                "spec": spec}
    made.append(("ResourceClaim", name))
    created = await custom.create_namespaced_custom_object(G, version, "default", "resourceclaims", obj)
    status = _allocated_status(str(uuid.uuid4()), str(uuid.uuid4()))
    await custom.replace_namespaced_custom_object_status(G, version, "default", "resourceclaims", name,
                                                         {**created, "status": status})
    old = await custom.get_namespaced_custom_object(G, version, "default", "resourceclaims", name)
    back = await custom.get_namespaced_custom_object(G, "v1", "default", "resourceclaims", name)
    assert back["status"]["allocation"]["devices"]["results"][0]["shareID"] == status["devices"][0]["shareID"]
    for source in ({**obj, "status": status}, old):
        mine = to_v1("ResourceClaim", source)
        assert mine["status"] == back["status"], (version, source is old)
