"""API write bodies keep the bytes the API server stored (issue 30, item 0).

The API server keeps a RawExtension (a ResourceClaim's opaque ``config`` ``parameters``) as the bytes
it received and compares them byte for byte on update; kubectl and client-go send Go's
``encoding/json`` bytes. A claim read back and PUT with Python's default separators is refused
(``spec: Invalid value: null: field is immutable``). These tests check the bytes that leave the
process through the real kubernetes_asyncio REST client, and grep the package for any other
serialization that could reach the wire.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any, ClassVar

from kubernetes_asyncio import client as k8s_client

from py_scheduler.app.client.kube import Kube, KubeAPIClient
from py_scheduler.app.client.wire import wire_json

PACKAGE = Path(__file__).resolve().parents[3] / "py_scheduler"

CLAIM: dict[str, Any] = {
    "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
    "metadata": {"name": "c", "namespace": "default", "resourceVersion": "7",
                 "finalizers": ["resource.kubernetes.io/delete-protection"]},
    "spec": {"devices": {"requests": [{"name": "r0", "exactly": {"deviceClassName": "gpu"}}],
                         "config": [{"requests": ["r0"], "opaque": {"driver": "gpu.nvidia.com", "parameters": {
                             "apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
                             "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}},
                             "note": "größe <80GB> & ✓", "z": 1, "a": [0.5, None, True]}}}]}}}

GO_BYTES = (  # json.Marshal of the same document (keys in this order) by Go 1.25's encoding/json
    b'{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaim","metadata":{"name":"c","namespace":"default",'
    b'"resourceVersion":"7","finalizers":["resource.kubernetes.io/delete-protection"]},"spec":{"devices":'
    b'{"requests":[{"name":"r0","exactly":{"deviceClassName":"gpu"}}],"config":[{"requests":["r0"],"opaque":'
    b'{"driver":"gpu.nvidia.com","parameters":{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig",'
    b'"sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Long"}},'
    + "\"note\":\"größe \\u003c80GB\\u003e \\u0026 ✓\",".encode()
    + b'"z":1,"a":[0.5,null,true]}}}]}}}')


class _Response:
    status = 200
    headers: ClassVar[dict[str, str]] = {}

    async def read(self) -> bytes:
        return b"{}"

    def release(self) -> None:
        pass


class _Session:
    """Stands in for the aiohttp session under the real REST client: records what would be sent."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    async def request(self, **args: Any) -> _Response:
        self.sent.append(args)
        return _Response()


async def test_a_claim_update_goes_out_as_go_encodes_it() -> None:
    api = k8s_client.ApiClient(k8s_client.Configuration(host="http://127.0.0.1:9"))
    real_session = api.rest_client.pool_manager
    session = _Session()
    api.rest_client.pool_manager = session
    try:
        await KubeAPIClient(Kube(api, qps=0, burst=1)).update(
            "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/c", CLAIM)
    finally:
        await real_session.close()
    (sent,) = session.sent
    data = sent["data"]
    assert (data.encode() if isinstance(data, str) else data) == GO_BYTES


def test_wire_json_escapes_as_go() -> None:
    assert wire_json({"s": "\u2028\u2029\x01\b\f\n\r\t\"\\/\x7f é"}) == \
        '{"s":"\\u2028\\u2029\\u0001\\b\\f\\n\\r\\t\\"\\\\/\x7f é"}'
    assert json.loads(wire_json(CLAIM)) == CLAIM


# Serializations in the package that never become a request body, with why.
NOT_A_REQUEST_BODY = {
    ("framework/batch.py", "canonical_signature"): "a cache key",
    ("framework/signers.py", "_dumps"): "a sort / cache key",
    ("framework/labels.py", "_quote"): "a value quoted in a validation message",
    ("framework/memo.py", "*"): "DeliveryGuard's fingerprint of a delivered object (debug only)",
    ("plugins/dynamic_resources/allocator.py", "*"): "a cache key of claim specs",
    ("plugins/dynamic_resources/selector_memo.py", "_content"): "a cache key of a device's CEL inputs",
    ("plugins/node_affinity.py", "*"): "a cache key",
    ("offline/simulate.py", "*"): "simulate's -o json on stdout",
    ("offline/explain.py", "*"): "explain's -o json on stdout",
    ("app/client/wire.py", "wire_json"): "the request body encoder itself",
    ("fakegpu/plugin.py", "write_cdi_spec"): "a CDI spec file on the node",
    ("kubectl_plugin.py", "resolved_kubeconfig"): "a private kubeconfig file",
    ("kubectl_plugin.py", "emit"): "kubectl py-scheduler's -o json / yaml on stdout",
}


def _serializer_calls() -> list[tuple[str, str, int, str]]:
    """``(path under py_scheduler, enclosing function, line, call)`` of every ``json.dumps`` /
    ``orjson.dumps`` / ``json.dump`` / ``yaml.dump`` / ``.encode()`` of a dict in the package."""
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        funcs = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            call = ast.unparse(node.func)
            if call not in {"json.dumps", "json.dump", "orjson.dumps", "yaml.dump", "yaml.safe_dump"}:
                continue
            around = [f for f in funcs if f.lineno <= node.lineno <= (f.end_lineno or f.lineno)]
            name = min(around, key=lambda f: (f.end_lineno or 0) - f.lineno).name if around else "<module>"
            out.append((str(path.relative_to(PACKAGE)), name, node.lineno, ast.unparse(node)))
    return out


def test_no_api_write_path_serializes_with_other_separators() -> None:
    """Every request body is encoded by :func:`wire_json` (kubernetes_asyncio's REST client encodes
    with it); any other serialization in the package must be one that never reaches the API."""
    from kubernetes_asyncio.client import rest

    assert rest.json.dumps is wire_json
    calls = _serializer_calls()
    assert calls, "the grep found nothing: the walk is broken"
    stray = [c for c in calls if (c[0], c[1]) not in NOT_A_REQUEST_BODY and (c[0], "*") not in NOT_A_REQUEST_BODY]
    assert not stray, f"serializations that may reach the API server with non-Go bytes: {stray}"
    (encoder,) = [c for c in calls if c[0] == "app/client/wire.py"]
    assert "separators=(',', ':')" in encoder[3], encoder  # ast.unparse writes single quotes
    assert "ensure_ascii=False" in encoder[3] and "sort_keys" not in encoder[3], encoder
