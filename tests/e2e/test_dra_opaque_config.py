"""DRA claims carrying opaque driver configuration bind (issue 30, item 0), side by side with
kube-scheduler v1.37.2 on the same bed (the runs, fixtures and outcome of :mod:`tests.e2e.test_dra`).

The API server keeps a RawExtension (``config[].opaque.parameters``) as the bytes it received and
compares them byte for byte when the scheduler writes the claim back (the finalizer PUT; the spec is
immutable). The objects are therefore created here as kubectl and client-go send them: Go's
``encoding/json`` bytes (compact, UTF-8, ``<`` ``>`` ``&`` escaped), encoded by the test itself,
not by the code under test. Before the fix, py-scheduler's PreBind PUT the claim with Python's
default separators and the API server refused it (``spec: Invalid value: null: field is
immutable``) on every retry: the Pod never bound.
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes_asyncio import client

from tests.e2e.scheduler_proc import SchedulerProcess
from tests.e2e.test_dra import G, Run, V, gpu, kube_dra, py_dra, side_by_side

__all__ = ["kube_dra", "py_dra"]  # the module-scoped schedulers this module runs on

Obj = dict[str, Any]

GPU_CONFIG: Obj = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
                   "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}}
"""NVIDIA's DRA driver's GPU sharing settings, as its time-slicing example writes them."""

NESTED_UNICODE: Obj = {"apiVersion": "example.com/v1", "kind": "Tuning",
                       "profile": {"name": "größe-✓ <80GB> & «ünïcödé»", "levels": [1, 2, {"deep": {"x": None,
                                   "flags": [True, False], "ratio": 0.5}}], "note": "line\nbreak\ttab"},
                       "emptyObject": {}, "emptyList": []}
"""Nested objects and lists, non-ASCII text, characters Go escapes (``<`` ``>`` ``&``), control
characters, null, booleans and a fraction."""


def go_json(obj: Any) -> bytes:
    """``obj`` as Go's ``encoding/json`` (kubectl, client-go) writes it."""
    text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"),
                    ("\u2029", "\\u2029")):
        text = text.replace(ch, esc)
    return text.encode()


async def create_as_kubectl(api: client.ApiClient, plural: str, obj: Obj) -> None:
    """POST ``obj`` into ``default`` as Go-encoded bytes (kubernetes_asyncio would re-encode a dict)."""
    url = f"{api.configuration.host}/apis/{G}/{V}/namespaces/default/{plural}"
    resp = await api.rest_client.pool_manager.request(
        "POST", url, data=go_json({"apiVersion": f"{G}/{V}", **obj}),
        headers={"Content-Type": "application/json", "Accept": "application/json"})
    async with resp:
        assert resp.status == 201, await resp.text()


def devices_with_config(r: Run, parameters: Obj) -> Obj:
    return {"requests": [{"name": "r0", "exactly": r.request()}],
            "config": [{"requests": ["r0"], "opaque": {"driver": r.driver, "parameters": parameters}}]}


async def allocated_configs(r: Run) -> list[Any]:
    """Per claim of the run (by name), the opaque parameters its allocation carries."""
    out = []
    for c in sorted(await r.all_claims(), key=lambda c: str(c["metadata"]["name"])):
        alloc = (c.get("status") or {}).get("allocation") or {}
        out.append([cfg["opaque"]["parameters"] for cfg in (alloc.get("devices") or {}).get("config") or []])
    return out


async def test_claims_with_opaque_config_bind(api_client: client.ApiClient,
                                              py_dra: SchedulerProcess, kube_dra: str) -> None:
    """A Pod with a ResourceClaimTemplate carrying a ``GpuConfig`` and an explicit ResourceClaim carrying
    nested, unicode parameters binds; each allocation carries its claim's configuration."""

    async def case(r: Run) -> Obj:
        await r.add_nodes(1)
        await r.add_class()
        await r.add_slice("n1", [gpu("gpu-0"), gpu("gpu-1")])
        await create_as_kubectl(r.api, "resourceclaimtemplates", {
            "kind": "ResourceClaimTemplate", "metadata": {"name": r.n("timesliced")},
            "spec": {"spec": {"devices": devices_with_config(r, GPU_CONFIG)}}})
        r.templates.append(r.n("timesliced"))
        await create_as_kubectl(r.api, "resourceclaims", {
            "kind": "ResourceClaim", "metadata": {"name": r.n("tuned")},
            "spec": {"devices": devices_with_config(r, NESTED_UNICODE)}})
        r.claims.append(r.n("tuned"))
        await r.add_pod("trainer", claims=["tuned"], templates=["timesliced"])
        await r.bound("trainer", timeout=60)
        return {"configs": await allocated_configs(r), **await r.outcome()}

    py, kube = await side_by_side(api_client, case)
    assert py == kube, (py, kube)
    assert py["pods"] == {"X-trainer": "X-n1"}
    assert sorted(map(json.dumps, py["configs"])) == sorted(map(json.dumps, [[GPU_CONFIG], [NESTED_UNICODE]]))
    assert all(c["reserved"] == ["X-trainer"] for c in py["claims"].values()), py
