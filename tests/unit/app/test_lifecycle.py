"""kopf as the process runtime (``py_scheduler.app.process.lifecycle``) and the one login path
(``py_scheduler.app.client.credentials``).

* the login path: a kubeconfig (token, inline client certificate, proxy, tls-server-name) and the
  in-cluster service account become the right :class:`kopf.ConnectionInfo`; the client built from it
  sends that token; an in-cluster token is re-read once its record expires;
* the handlers: start-up logs in and starts the body with a client built from the very record kopf's
  login handler then returns; a second login reads the credentials afresh; clean-up stops the body,
  takes its exit code and closes the client; a bad kubeconfig fails start-up permanently;
* the whole operator, as a child process against a fake API server: SIGTERM (kopf's signal handling)
  leads to clean-up and exit 0; a body that dies by itself stops the operator with exit 1; kopf's
  only traffic is the discovery GETs (no LIST, no watch) with the token our login returned.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import os
import signal
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import kopf
import pytest
from aiohttp import web
from kubernetes_asyncio.config import incluster_config

from py_scheduler.app.client.credentials import (
    ClusterConnection,
    Credentials,
    api_configuration,
    load_connection_info,
)
from py_scheduler.app.client.kube import Kube
from py_scheduler.app.process import lifecycle
from tests.unit.app.fakes import kubeconfig_file

REPO_ROOT = Path(__file__).resolve().parents[3]


# -- the login path --------------------------------------------------------------------------------------------
async def test_kubeconfig_token_becomes_connection_info(tmp_path: Path) -> None:
    kc = kubeconfig_file(tmp_path, cluster_extra=', proxy-url: "http://proxy.test:3128", tls-server-name: api.internal')
    info = await load_connection_info(kc)
    assert isinstance(info, kopf.ConnectionInfo)
    assert (info.server, info.scheme, info.token, info.insecure) == ("https://api.example.test:6443", "Bearer", "abc",
                                                                     True)
    assert (info.proxy_url, info.tls_server_name, info.expiration) == ("http://proxy.test:3128", "api.internal", None)
    assert info.as_http_headers() == {"Authorization": "Bearer abc"}  # what kopf's own client sends


async def test_kubeconfig_client_certificate_data_becomes_paths(tmp_path: Path) -> None:
    pem_cert = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    pem_key = "-----BEGIN EC PRIVATE KEY-----\nMHc\n-----END EC PRIVATE KEY-----\n"
    user = (f"client-certificate-data: {base64.b64encode(pem_cert.encode()).decode()}, "
            f"client-key-data: {base64.b64encode(pem_key.encode()).decode()}")
    info = await load_connection_info(kubeconfig_file(tmp_path, user=user))
    assert info.token is None and info.scheme is None
    assert info.certificate_path is not None and info.private_key_path is not None
    assert Path(str(info.certificate_path)).read_text() == pem_cert
    assert Path(str(info.private_key_path)).read_text() == pem_key


@pytest.fixture
def in_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake service account mount and the env vars a Pod gets; returns the token file."""
    token, ca = tmp_path / "token", tmp_path / "ca.crt"
    token.write_text("sa-token-1")
    ca.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(token))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(ca))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    return token


async def test_in_cluster_token_becomes_connection_info_that_expires(in_cluster: Path) -> None:
    before = datetime.datetime.now(datetime.UTC)
    info = await load_connection_info(None)
    assert (info.server, info.scheme, info.token) == ("https://10.0.0.1:443", "Bearer", "sa-token-1")
    assert info.ca_path == str(in_cluster.parent / "ca.crt")
    assert not info.insecure
    assert info.expiration is not None
    assert before + datetime.timedelta(seconds=59) <= info.expiration <= before + datetime.timedelta(seconds=61)


async def test_not_in_a_cluster_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(incluster_config.ConfigException):
        await load_connection_info(None)


async def test_client_takes_the_rotated_token_once_the_record_expired(in_cluster: Path) -> None:
    creds = Credentials(lambda: load_connection_info(None))
    first = await creds.login()
    cfg = api_configuration(first, creds)
    assert await cfg.get_api_key_with_prefix("BearerToken") == "Bearer sa-token-1"
    in_cluster.write_text("sa-token-2")  # the kubelet rotated the token
    assert await cfg.get_api_key_with_prefix("BearerToken") == "Bearer sa-token-1"  # not expired yet: no re-read
    creds._info = ClusterConnection(**{**first.__dict__, "expiration": datetime.datetime(2000, 1, 1)})
    assert await cfg.get_api_key_with_prefix("BearerToken") == "Bearer sa-token-2"
    assert creds.info is not None and creds.info.token == "sa-token-2"


async def test_a_failed_relogin_keeps_the_old_token_for_a_while(in_cluster: Path) -> None:
    creds = Credentials(lambda: load_connection_info(None))
    first = await creds.login()
    creds._info = ClusterConnection(**{**first.__dict__, "expiration": datetime.datetime(2000, 1, 1)})
    in_cluster.unlink()  # the mount went away
    info = await creds.current()
    assert info.token == "sa-token-1"
    assert info.expiration is not None and info.expiration > datetime.datetime.now(datetime.UTC)


def test_api_configuration_carries_every_field() -> None:
    info = ClusterConnection(server="https://h:6443", ca_path="/ca", insecure=False, scheme="Basic", token="dTpw",
                             certificate_path="/crt", private_key_path="/key", proxy_url="http://p:1",
                             tls_server_name="api.internal")
    cfg = api_configuration(info)
    assert (cfg.host, cfg.ssl_ca_cert, cfg.cert_file, cfg.key_file, cfg.verify_ssl) == (
        "https://h:6443", "/ca", "/crt", "/key", True)
    assert (cfg.proxy, cfg.tls_server_name, cfg.api_key["BearerToken"]) == ("http://p:1", "api.internal", "Basic dTpw")
    with pytest.raises(ValueError, match="paths expected"):
        api_configuration(kopf.ConnectionInfo(server="https://h", ca_data=b"xx"))


# -- the handlers ----------------------------------------------------------------------------------------------
async def test_startup_builds_the_client_from_the_record_login_hands_to_kopf(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}
    waits: list[float] = []

    async def sleep(delay: float) -> None:
        waits.append(delay)

    monkeypatch.setattr(lifecycle, "_sleep", sleep)

    async def serve(kube: Kube, stop: asyncio.Event) -> int:
        seen["auth"] = await kube.api.configuration.get_api_key_with_prefix("BearerToken")
        seen["host"] = kube.api.configuration.host
        await stop.wait()
        seen["stopped"] = True
        return 0

    rt = lifecycle.Runtime(kubeconfig=kubeconfig_file(tmp_path), serve=serve, qps=5, burst=10, stop=asyncio.Event())
    await lifecycle.startup(memo=rt)
    assert rt.task is not None and rt.kube is not None
    first = await lifecycle.login(memo=rt)
    assert first is rt.credentials.info  # kopf gets the record the client was built from
    assert waits == []
    # kopf asks again before its copy expired: the API server refused it (401). Read again after a
    # backoff, and hand over a record kopf has not seen refused (else kopf stops the operator).
    again = await lifecycle.login(memo=rt)
    third = await lifecycle.login(memo=rt)
    assert waits == [1.0, 2.0]
    for rec in (again, third):
        assert (rec.server, rec.token) == (first.server, first.token) and rec.expiration is not None
    assert len({first, again, third}) == 3
    await asyncio.wait_for(_until(lambda: "auth" in seen), 5)
    assert seen["auth"] == "Bearer abc" and seen["host"] == "https://api.example.test:6443"
    assert rt.kube.limiter.qps == 5 and rt.kube.limiter.burst == 10
    await lifecycle.cleanup(memo=rt)
    assert seen["stopped"] and rt.stop.is_set() and rt.exit_code == 0
    assert rt.kube.api.rest_client.pool_manager.closed


async def test_cleanup_takes_the_bodys_exit_code_and_a_crash_as_1(tmp_path: Path) -> None:
    async def dies(kube: Kube, stop: asyncio.Event) -> int:
        return 1

    async def crashes(kube: Kube, stop: asyncio.Event) -> int:
        raise RuntimeError("boom")

    for body in (dies, crashes):
        rt = lifecycle.Runtime(kubeconfig=kubeconfig_file(tmp_path), serve=body, qps=5, burst=10, stop=asyncio.Event())
        await lifecycle.startup(memo=rt)
        await asyncio.wait_for(rt.stop.wait(), 5)  # the body's end stops the operator (kopf's stop_flag)
        await lifecycle.cleanup(memo=rt)
        assert rt.exit_code == 1, body.__name__


async def test_login_after_kopfs_copy_expired_reads_afresh_without_waiting(
        in_cluster: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    waits: list[float] = []

    async def sleep(delay: float) -> None:
        waits.append(delay)

    monkeypatch.setattr(lifecycle, "_sleep", sleep)
    rt = lifecycle.Runtime(kubeconfig=None, serve=_never, qps=5, burst=10, stop=asyncio.Event())
    first = await rt.credentials.login()
    assert await lifecycle.login(memo=rt) is first
    rt.given_to_kopf = ClusterConnection(**{**first.__dict__, "expiration": datetime.datetime(2000, 1, 1)})
    in_cluster.write_text("sa-token-2")
    fresh = await lifecycle.login(memo=rt)
    assert waits == [] and fresh.token == "sa-token-2" and fresh is rt.credentials.info


async def _never(kube: Kube, stop: asyncio.Event) -> int:
    raise AssertionError("not started in this test")


async def test_startup_with_a_bad_kubeconfig_fails_permanently(tmp_path: Path) -> None:
    async def serve(kube: Kube, stop: asyncio.Event) -> int:
        raise AssertionError("must not start")

    rt = lifecycle.Runtime(kubeconfig=tmp_path / "missing", serve=serve, qps=5, burst=10, stop=asyncio.Event())
    with pytest.raises(kopf.PermanentError):
        await lifecycle.startup(memo=rt)
    assert rt.exit_code == 1 and rt.task is None and rt.kube is None


def test_settings_and_registry() -> None:
    s = lifecycle.operator_settings()
    assert (s.peering.standalone, s.posting.enabled, s.scanning.disabled) == (True, False, True)
    backoffs = list(zip(range(12), s.networking.error_backoffs, strict=False))
    assert [b for _, b in backoffs] == [*lifecycle.KOPF_BACKOFFS, 30.0, 30.0, 30.0, 30.0]
    reg = lifecycle.operator_registry()
    assert not reg._watching.get_all_handlers() and not reg._changing.get_all_handlers()
    assert not reg._spawning.get_all_handlers() and not reg._webhooks.get_all_handlers()
    assert not reg._indexing.get_all_handlers()


async def _until(cond: Any) -> None:
    while not cond():
        await asyncio.sleep(0.01)


# -- the whole operator in a child process ---------------------------------------------------------------------
CHILD = textwrap.dedent("""
    import asyncio, sys
    from pathlib import Path
    from py_scheduler.app.process import lifecycle
    from py_scheduler.app.telemetry.klog import setup_logging

    async def serve(kube, stop):
        await kube.request("GET", "/version")
        print("started", flush=True)
        if sys.argv[2] == "die":
            return 1
        await stop.wait()
        print("body shut down", flush=True)
        return 0

    setup_logging(2)
    sys.exit(asyncio.run(lifecycle.run(Path(sys.argv[1]), serve)))
""")


@pytest.fixture
async def fake_api() -> AsyncIterator[tuple[str, list[tuple[str, str, str]]]]:
    """A plain-HTTP API server that answers kopf's discovery and ``/version``; records
    (method, path?query, Authorization) of every request."""
    seen: list[tuple[str, str, str]] = []

    async def handle(request: web.Request) -> web.Response:
        seen.append((request.method, request.path_qs, request.headers.get("Authorization", "")))
        body: dict[str, Any] = {
            "/api": {"versions": ["v1"]}, "/apis": {"groups": []}, "/api/v1": {"resources": []},
            "/version": {"gitVersion": "v1.37.2"},
        }.get(request.path, {})
        return web.json_response(body)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        await runner.cleanup()


async def _child(tmp_path: Path, server: str, mode: str) -> asyncio.subprocess.Process:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    kc = kubeconfig_file(tmp_path, server=server, user="token: child-token")
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return await asyncio.create_subprocess_exec(sys.executable, str(script), str(kc), mode, cwd=REPO_ROOT, env=env,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)


async def _read_until(proc: asyncio.subprocess.Process, needle: bytes, timeout: float = 60) -> bytes:
    assert proc.stdout is not None
    out = b""
    async with asyncio.timeout(timeout):
        while needle not in out:
            line = await proc.stdout.readline()
            if not line:
                raise AssertionError(f"child ended before {needle!r}:\n{out.decode()}")
            out += line
    return out


async def test_sigterm_runs_cleanup_and_exits_0_with_no_list_or_watch(
        tmp_path: Path, fake_api: tuple[str, list[tuple[str, str, str]]]) -> None:
    server, seen = fake_api
    proc = await _child(tmp_path, server, "wait")
    try:
        await _read_until(proc, b"started")
        # kopf's discovery runs next to the body; wait for it to finish before stopping
        await asyncio.wait_for(_until(lambda: sum(1 for _, p, _ in seen if p.startswith("/api")) >= 3), 30)
        proc.send_signal(signal.SIGTERM)
        out = (await asyncio.wait_for(proc.communicate(), 30))[0].decode()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, out
    assert "body shut down" in out
    assert ("GET", "/version", "Bearer child-token") in seen  # the Kube client, built from our ConnectionInfo
    kopf_requests = [(m, p, a) for m, p, a in seen if p != "/version"]
    assert kopf_requests and all(m == "GET" and a == "Bearer child-token" for m, _, a in kopf_requests)
    assert {p for _, p, _ in kopf_requests} <= {"/api", "/api/v1", "/apis"}, kopf_requests  # discovery only
    assert not any("watch" in p or "limit=" in p for _, p, _ in seen)


async def test_a_body_that_ends_by_itself_stops_the_operator_with_1(
        tmp_path: Path, fake_api: tuple[str, list[tuple[str, str, str]]]) -> None:
    server, _ = fake_api
    proc = await _child(tmp_path, server, "die")
    out = (await asyncio.wait_for(proc.communicate(), 60))[0].decode()
    assert proc.returncode == 1, out
    assert "started" in out
