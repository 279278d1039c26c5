"""The third-party internals py-scheduler relies on (:mod:`py_scheduler.app.client.internals`) are still there.

Each test names the item and the dependency, so a lock refresh (``make lock`` runs this file in a
scratch venv) that changes one fails here, loudly, instead of in a scheduler that misbehaves silently.
"""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import importlib.util
import inspect
from pathlib import Path

import aiohttp
import kopf
from aiohttp import web

from py_scheduler.app.client import internals


def test_kubernetes_asyncio_call_api_takes_the_keywords_we_pass() -> None:
    """kube.py / internals.call_api: ``ApiClient.call_api(path, method, **keywords)``."""
    from kubernetes_asyncio.client import ApiClient

    params = inspect.signature(ApiClient.call_api).parameters
    missing = [k for k in internals.CALL_API_KEYWORDS if k not in params]
    assert not missing, f"ApiClient.call_api lost {missing}: update py_scheduler/app/client/internals.py"
    assert list(params)[1:3] == ["resource_path", "method"], list(params)[:3]


def test_kubernetes_asyncio_package_inits_are_imports_and_constants() -> None:
    """lazy_k8s: each deferred package ``__init__`` holds only ``from X import N`` / ``import X as N``
    lines and string constants (anything else would run only through the slow fallback)."""
    for name in internals.LAZY_PACKAGES:
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin, f"{name} is gone"
        for node in ast.parse(Path(spec.origin).read_text()).body:
            target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
            ok = (isinstance(node, ast.ImportFrom | ast.Import)
                  or (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))  # a docstring
                  or (isinstance(target, ast.Name) and target.id == "__all__")  # served by the real __init__
                  or (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                      and isinstance(node.value.value, str)))
            assert ok, f"{name}/__init__.py:{node.lineno}: {ast.unparse(node)[:80]!r} is not an import or constant"


def test_aiohttp_client_session_trust_env_attribute() -> None:
    """internals.no_trust_env: ``ClientSession._trust_env``, read per request."""

    async def check() -> None:
        session = aiohttp.ClientSession(trust_env=True)
        try:
            assert getattr(session, "_trust_env", None) is True, "aiohttp ClientSession no longer has _trust_env"
            internals.no_trust_env(session)
            assert session.trust_env is False
        finally:
            await session.close()

    asyncio.run(check())


def test_aiohttp_runner_addresses_names_the_bound_port() -> None:
    """health.py: the public ``BaseRunner.addresses`` gives the port bound for port 0."""

    async def check() -> None:
        runner = web.AppRunner(web.Application())
        await runner.setup()
        try:
            await web.TCPSite(runner, "127.0.0.1", 0).start()
            (address,) = runner.addresses
            assert address[0] == "127.0.0.1" and int(address[1]) > 0, address
        finally:
            await runner.cleanup()

    asyncio.run(check())


def test_kopf_authenticator_coroutine_name() -> None:
    """app/process/lifecycle.py silences the "never awaited" warning of kopf's credentials coroutine by its name."""
    spec = importlib.util.find_spec("kopf._core.engines.activities")
    assert spec is not None, "kopf moved kopf._core.engines.activities"
    from kopf._core.engines import activities

    fn = getattr(activities, internals.KOPF_AUTHENTICATOR, None)
    assert fn is not None and inspect.iscoroutinefunction(fn), "kopf's credentials coroutine was renamed"


def test_kopf_connection_info_is_a_frozen_keyword_dataclass() -> None:
    """credentials.ClusterConnection extends ``kopf.ConnectionInfo`` (a frozen dataclass) by one field."""
    from py_scheduler.app.client.credentials import ClusterConnection

    assert dataclasses.is_dataclass(kopf.ConnectionInfo)
    assert kopf.ConnectionInfo.__dataclass_params__.frozen  # type: ignore[attr-defined]
    info = ClusterConnection(server="https://127.0.0.1:6443", token="t", tls_server_name="api")
    assert isinstance(info, kopf.ConnectionInfo) and info.tls_server_name == "api" and info.token == "t"
    names = {f.name for f in dataclasses.fields(kopf.ConnectionInfo)}
    assert {"server", "ca_path", "insecure", "username", "password", "scheme", "token", "certificate_path",
            "private_key_path", "default_namespace", "expiration"} <= names, names


def test_kubernetes_asyncio_rest_encodes_bodies_with_its_json_name() -> None:
    """encode_request_bodies_with: ``RESTClientObject.request`` calls ``json.dumps(body)`` through the
    module's ``json`` name, and after the swap that name is ours."""
    from kubernetes_asyncio.client import rest

    from py_scheduler.app.client.wire import wire_json

    assert "json.dumps(body)" in inspect.getsource(rest.RESTClientObject.request), \
        "kubernetes_asyncio.client.rest no longer encodes bodies with json.dumps(body): re-check the hook"
    assert rest.json.dumps is wire_json
