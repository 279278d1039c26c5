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
import json
import ssl
from pathlib import Path
from typing import Any

import aiohttp
import kopf
import pytest
from aiohttp import web

from py_scheduler.app.client import internals


def test_call_api_sends_what_kubernetes_asyncio_call_api_sends() -> None:
    """internals.call_api: the same request as ``ApiClient.call_api`` with raw JSON (method, path,
    query, headers with the refreshed bearer token and the User-Agent, body bytes), for a POST with a
    body, a GET with a query, a watch's GET without a Content-Type and a DELETE, sent through both to
    a local server; and the internals it reads (``rest_client.pool_manager`` / ``proxy`` /
    ``proxy_headers`` / ``server_hostname``, ``default_headers``, ``cookie``) are still there."""
    from kubernetes_asyncio.client import ApiClient, Configuration

    import py_scheduler.app.client.wire  # noqa: F401 - installs the body encoder both paths use

    seen: list[tuple[str, str, dict[str, str], bytes]] = []
    skip = {"Host", "Content-Length"}

    async def handler(req: web.Request) -> web.Response:
        headers = {k: v for k, v in req.headers.items() if k not in skip}
        seen.append((req.method, str(req.rel_url), headers, await req.read()))
        return web.json_response({"ok": True})

    async def check() -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        port = int(runner.addresses[0][1])
        cfg = Configuration(host=f"http://127.0.0.1:{port}")
        cfg.api_key = {"BearerToken": "old"}
        cfg.api_key_prefix = {"BearerToken": "Bearer"}

        async def refresh(c: Configuration) -> None:
            c.api_key["BearerToken"] = f"fresh{len(seen)}"

        cfg.refresh_api_key_hook = refresh
        api = ApiClient(configuration=cfg)
        api.user_agent = "py-scheduler/test"
        client = api.rest_client
        for name in ("pool_manager", "proxy", "proxy_headers", "server_hostname"):
            assert hasattr(client, name), f"kubernetes_asyncio's RESTClientObject lost {name}"
        assert isinstance(client.pool_manager, aiohttp.ClientSession)
        assert isinstance(api.default_headers, dict) and hasattr(api, "cookie")
        timeout = aiohttp.ClientTimeout(total=5)
        cases = [("POST", "/api/v1/namespaces/ns/pods/p/binding", [],
                  {"Content-Type": "application/json", "Accept": "application/json"},
                  {"kind": "Binding", "metadata": {"name": "p<&>", "annotations": {"a": "\u00e9"}}}),
                 ("GET", "/api/v1/pods", [("fieldSelector", "spec.nodeName=,x"), ("limit", "500")],
                  {"Content-Type": "application/json", "Accept": "application/json"}, None),
                 ("GET", "/api/v1/pods", [("watch", "true"), ("resourceVersion", "7")], {"Accept": "application/json"},
                  None),
                 ("DELETE", "/api/v1/namespaces/ns/pods/p", [], {"Content-Type": "application/json",
                  "Accept": "application/json"}, {"kind": "DeleteOptions", "preconditions": {"uid": "u"}})]
        try:
            for method, path, query, headers, body in cases:
                theirs = await api.call_api(path, method, query_params=list(query), header_params=dict(headers),
                                            body=body, auth_settings=["BearerToken"], _preload_content=False,
                                            _request_timeout=timeout)
                await theirs.read()
                theirs.release()
                ours = await internals.call_api(api, path, method, query=query, headers=dict(headers), body=body,
                                                timeout=timeout)
                assert ours.status == 200
                await ours.read()
                ours.release()
                a, b = seen[-2], seen[-1]
                assert a[2].pop("Authorization") == f"Bearer fresh{len(seen) - 2}"
                assert b[2].pop("Authorization") == f"Bearer fresh{len(seen) - 1}"
                assert a == b, f"{method}: kubernetes_asyncio sent {a}, internals.call_api sent {b}"
        finally:
            await api.close()
            await runner.cleanup()

    asyncio.run(check())


def test_call_api_passes_the_rest_clients_settings_as_kubernetes_asyncio_does() -> None:
    """internals.call_api hands aiohttp what ``ApiClient.call_api`` hands it, with the settings a
    local server cannot see set: a proxy and its headers, a TLS server name, a cookie, a caller's
    header that a default header overrides, an empty body; and a bytes body goes out unchanged."""
    from kubernetes_asyncio.client import ApiClient, Configuration

    import py_scheduler.app.client.wire  # noqa: F401 - installs the body encoder both paths use

    class Recorded(Exception):
        pass

    calls: list[dict[str, Any]] = []

    async def record(**kwargs: Any) -> Any:
        calls.append(kwargs)
        raise Recorded

    async def check() -> None:
        cfg = Configuration(host="https://api.example:6443")
        cfg.api_key = {"BearerToken": "t"}
        cfg.api_key_prefix = {"BearerToken": "Bearer"}
        cfg.proxy = "http://proxy.example:3128"
        cfg.proxy_headers = {"Proxy-Authorization": "Basic eA=="}
        cfg.tls_server_name = "kubernetes.default"
        api = ApiClient(configuration=cfg, cookie="session=1")
        api.user_agent = "py-scheduler/test"
        api.rest_client.pool_manager.request = record  # type: ignore[method-assign]
        timeout = aiohttp.ClientTimeout(total=5)
        try:
            for method, headers, body in [
                    ("PATCH", {"Content-Type": "application/merge-patch+json", "User-Agent": "caller"},
                     {"metadata": {"labels": {"a": "b"}}}),
                    ("DELETE", {"Content-Type": "application/json"}, {})]:
                with pytest.raises(Recorded):
                    await api.call_api("/api/v1/x", method, query_params=[("q", "1")], header_params=dict(headers),
                                       body=body, auth_settings=["BearerToken"], _preload_content=False,
                                       _request_timeout=timeout)
                with pytest.raises(Recorded):
                    await internals.call_api(api, "/api/v1/x", method, query=[("q", "1")], headers=dict(headers),
                                             body=body, timeout=timeout)
                theirs, ours = calls[-2], calls[-1]
                assert theirs == ours, f"{method}: kubernetes_asyncio passed {theirs}, internals.call_api {ours}"
                assert ours["proxy"] and ours["proxy_headers"] and ours["server_hostname"]
                assert ours["headers"]["Cookie"] == "session=1"
                assert ours["headers"]["User-Agent"] == "py-scheduler/test"
            with pytest.raises(Recorded):  # bytes go out as they are (kubernetes_asyncio refused them as JSON)
                await internals.call_api(api, "/api/v1/x", "POST", query=[], headers={}, body=b'{"kind":"B"}',
                                         timeout=timeout)
            assert calls[-1]["data"] == b'{"kind":"B"}'
        finally:
            await api.close()

    asyncio.run(check())


def test_kubernetes_asyncio_call_api_takes_the_keywords_offline_live_passes() -> None:
    """offline/live.py (``simulate --kubeconfig``) and the e2e helpers call ``ApiClient.call_api(path,
    method, query_params=, header_params=, auth_settings=, _preload_content=)`` directly."""
    from kubernetes_asyncio.client import ApiClient

    params = inspect.signature(ApiClient.call_api).parameters
    missing = [k for k in ("query_params", "header_params", "body", "auth_settings", "_preload_content",
                           "_request_timeout") if k not in params]
    assert not missing, f"ApiClient.call_api lost {missing}: update py_scheduler/offline/live.py"
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



def _tls_files(tmp: Path) -> dict[str, Path]:
    """A root CA, an intermediate it signs, a server certificate for 127.0.0.1 from the root and a
    client leaf from the intermediate (ECDSA P-256, with key identifiers, so strict verification as
    Python 3.13's default context does accepts them), as PEM files under ``tmp``;
    ``client-chain.crt`` is the leaf with the intermediate written after it."""
    import datetime as dt
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = dt.datetime.now(dt.UTC)
    keys = {n: ec.generate_private_key(ec.SECP256R1()) for n in ("root", "mid", "server", "client")}

    def cert(cn: str, key: str, issuer: x509.Certificate | None, issuer_key: str, *, ca: bool) -> x509.Certificate:
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
        pub = keys[key].public_key()
        b = (x509.CertificateBuilder().subject_name(name).issuer_name(issuer.subject if issuer else name)
             .public_key(pub).serial_number(x509.random_serial_number())
             .not_valid_before(now - dt.timedelta(hours=1)).not_valid_after(now + dt.timedelta(days=1))
             .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
             .add_extension(x509.SubjectKeyIdentifier.from_public_key(pub), critical=False)
             .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(keys[issuer_key].public_key()),
                            critical=False))
        if ca:
            b = b.add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                              key_encipherment=False, data_encipherment=False, key_agreement=False,
                                              key_cert_sign=True, crl_sign=True, encipher_only=False,
                                              decipher_only=False), critical=True)
        elif cn == "server":
            b = (b.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
                 .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                                critical=False))
        else:
            b = b.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        return b.sign(keys[issuer_key], hashes.SHA256())

    def pem(c: x509.Certificate) -> bytes:
        return c.public_bytes(serialization.Encoding.PEM)

    def key_pem(k: str) -> bytes:
        return keys[k].private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                     serialization.NoEncryption())

    root = cert("test-root", "root", None, "root", ca=True)
    mid = cert("test-intermediate", "mid", root, "root", ca=True)
    server = cert("server", "server", root, "root", ca=False)
    client = cert("test-client", "client", mid, "mid", ca=False)
    files = {"root.crt": pem(root), "store.crt": pem(root) + pem(mid), "server.crt": pem(server),
             "server.key": key_pem("server"), "client.crt": pem(client),
             "client-chain.crt": pem(client) + pem(mid), "client.key": key_pem("client")}
    for name, data in files.items():
        (tmp / name).write_bytes(data)
    return {name: tmp / name for name in files}


def test_send_certificate_file_only_stops_openssl_adding_the_trust_stores_chain(tmp_path: Path) -> None:
    """internals.send_certificate_file_only: aiohttp's ``TCPConnector._ssl``, CPython's ``SSL_CTX``
    pointer in ``ssl.SSLContext`` and OpenSSL's ``SSL_MODE_NO_AUTO_CHAIN``. The server trusts only the
    root; the client's leaf comes from an intermediate that sits in the client's trust store but not in
    its certificate file. OpenSSL builds the chain from that store and sends the intermediate, so the
    server accepts; with the leaf alone (what client-go sends) it cannot, and the handshake fails.
    With the intermediate written in the certificate file, it is sent either way."""
    f = _tls_files(tmp_path)

    async def handler(req: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def get(port: int, cert: Path, *, file_only: bool) -> str:
        ctx = ssl.create_default_context(cafile=str(f["store.crt"]))  # as kubernetes_asyncio's rest.py builds it
        ctx.load_cert_chain(str(cert), str(f["client.key"]))
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx))
        try:
            if file_only:
                assert internals.send_certificate_file_only(session), (
                    "send_certificate_file_only could not reach the SSL_CTX (aiohttp's TCPConnector._ssl, "
                    "CPython's SSLContext layout or libssl's SSL_CTX_ctrl/SSL_CTX_get_options changed)")
                assert (internals.ssl_mode(ctx) or 0) & internals._SSL_MODE_NO_AUTO_CHAIN
            try:
                async with session.get(f"https://127.0.0.1:{port}/") as resp:
                    return await resp.text()
            except aiohttp.ClientConnectionError as exc:  # TLS 1.3: the server's alert ends the connection
                return f"refused: {type(exc).__name__}"
        finally:
            await session.close()

    async def check() -> None:
        server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(f["root.crt"]))
        server_ctx.load_cert_chain(str(f["server.crt"]), str(f["server.key"]))
        server_ctx.verify_mode = ssl.CERT_REQUIRED
        app = web.Application()
        app.router.add_get("/", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_ctx).start()
        port = int(runner.addresses[0][1])
        try:
            assert await get(port, f["client.crt"], file_only=False) == "ok"  # OpenSSL sent the store's chain
            assert (await get(port, f["client.crt"], file_only=True)).startswith("refused")
            assert await get(port, f["client-chain.crt"], file_only=True) == "ok"  # the file's chain is kept
        finally:
            await runner.cleanup()

    asyncio.run(check())


def test_every_client_of_the_scheduler_process_sends_its_certificate_file_only(tmp_path: Path) -> None:
    """kube.prepare_session runs for each ApiClient the scheduler makes: the scheduler's, its Event
    client's (derive); the request process builds its own two through the same
    ``Kube.from_connection_info``."""
    from py_scheduler.app.client.credentials import load_connection_info
    from py_scheduler.app.client.kube import Kube

    f = _tls_files(tmp_path)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443",
                                               "certificate-authority": str(f["root.crt"])}}],
        "users": [{"name": "u", "user": {"client-certificate": str(f["client.crt"]),
                                         "client-key": str(f["client.key"])}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))

    def mode(api: Any) -> int:
        return internals.ssl_mode(api.rest_client.pool_manager.connector._ssl) or 0

    async def check() -> None:
        kube = Kube.from_connection_info(await load_connection_info(kubeconfig))
        try:
            assert kube.event_client is not None
            for name, api in {"scheduler": kube.api, "events": kube.event_client.api}.items():
                assert mode(api) & internals._SSL_MODE_NO_AUTO_CHAIN, name
        finally:
            await kube.close()

    asyncio.run(check())
