"""Least privilege and TLS details of issue 31: the reader example's rights, ``explain``'s token file,
redirects and certificate checks, ``/debug/memory``'s actions behind ``--profiling``, the serving
certificate's own CA and the Pod's IP, ``--tls-min-version``."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from cryptography import x509
from typer.testing import CliRunner

from py_scheduler.app.serving.memdebug import PATH, MemoryDebug
from py_scheduler.app.serving.memdebug import add_routes as add_memory_routes
from py_scheduler.app.serving.secure import self_signed_cert, server_ssl_context
from py_scheduler.offline.recorded import _direct, _via_proxy, client_tls

REPO = Path(__file__).resolve().parents[3]


# -- the reader example ---------------------------------------------------------------------------------

def test_reader_token_gets_only_get_on_the_decisions_urls() -> None:
    docs = list(yaml.safe_load_all((REPO / "deploy" / "examples" / "decisions-reader.yaml").read_text()))
    roles = {(d["kind"], d["metadata"]["name"]): d for d in docs if d["kind"] in ("Role", "ClusterRole")}
    held: list[dict[str, Any]] = []  # every rule the ServiceAccount decisions-reader holds
    for b in (d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        if any(s["kind"] == "ServiceAccount" and s["name"] == "decisions-reader" for s in b["subjects"]):
            held += roles[(b["roleRef"]["kind"], b["roleRef"]["name"])]["rules"]
    assert held == [{"nonResourceURLs": ["/debug/decisions", "/debug/decisions/*"], "verbs": ["get"]}]
    proxy = roles[("Role", "py-scheduler-decisions-proxy")]
    assert any("pods/proxy" in r.get("resources", ()) for r in proxy["rules"])  # the human user's right


def test_deployment_gives_the_pod_ip_to_the_certificate() -> None:
    docs = yaml.safe_load_all((REPO / "deploy" / "deployment.yaml").read_text())
    dep = next(d for d in docs if d and d["kind"] == "Deployment")
    env = {e["name"]: e for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"


# -- explain ------------------------------------------------------------------------------------------------

def test_explain_reads_the_token_from_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from py_scheduler import cli
    from py_scheduler.offline import explain

    seen: list[str | None] = []
    monkeypatch.setattr(explain, "explain_main", lambda **kw: seen.append(kw["token"]) or 0)
    (tmp_path / "token").write_text("secret-from-file\n")
    (tmp_path / "empty").write_text("\n")
    base = ["explain", "--snapshot", str(tmp_path / "s.yaml")]
    assert CliRunner().invoke(cli.app, [*base, "--token-file", str(tmp_path / "token")]).exit_code == 0
    assert seen == ["secret-from-file"]
    for extra in (["--token-file", str(tmp_path / "token"), "--token", "x"], ["--token-file", str(tmp_path / "empty")],
                  ["--token-file", str(tmp_path / "missing")]):
        res = CliRunner().invoke(cli.app, [*base, *extra])
        assert res.exit_code == 2 and "--token-file" in res.output, res.output
    assert seen == ["secret-from-file"]


@asynccontextmanager
async def _https(routes: dict[str, Callable[[web.Request], Awaitable[web.StreamResponse]]],
                 ctx: ssl.SSLContext | None = None) -> AsyncIterator[str]:
    app = web.Application()
    for path, handler in routes.items():
        app.router.add_get(path, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx if ctx is not None else server_ssl_context())
    await site.start()
    try:
        yield f"https://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


async def test_explain_follows_no_redirect_with_the_token() -> None:
    """A scheduler URL answering 302 to another origin: nothing is sent there, least of all the token."""
    stolen: list[dict[str, str]] = []

    async def thief(req: web.Request) -> web.Response:
        stolen.append(dict(req.headers))
        return web.json_response({"decisions": [{"pod": "default/a"}]})

    async with _https({"/steal": thief}) as other:
        async def redirect(_req: web.Request) -> web.Response:
            raise web.HTTPFound(f"{other}/steal")

        async with _https({"/debug/decisions": redirect}) as url:
            found = await _direct(url, "default/a", "u", token="reader-secret")
    assert found.record is None and "HTTP 302" in found.reason and not stolen


async def test_explain_through_the_proxy_follows_no_redirect(tmp_path: Path) -> None:
    """Through the API server's Pod proxy (a stand-in API here): a 302 from the leader is an answer,
    not followed with X-Py-Scheduler-Authorization."""
    stolen: list[dict[str, str]] = []

    async def thief(req: web.Request) -> web.Response:
        stolen.append(dict(req.headers))
        return web.json_response({"decisions": [{"pod": "default/a"}]})

    thief_app = web.Application()
    thief_app.router.add_get("/steal", thief)
    async with TestServer(thief_app) as elsewhere:
        async def lease(_r: web.Request) -> web.Response:
            return web.json_response({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                      "metadata": {"name": "py-scheduler"}, "spec": {"holderIdentity": "leader_1"}})

        async def pod(_r: web.Request) -> web.Response:
            return web.json_response({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "leader"},
                                      "spec": {"serviceAccountName": "py-scheduler", "containers": []},
                                      "status": {"phase": "Running"}})

        async def proxied(_r: web.Request) -> web.Response:
            raise web.HTTPFound(str(elsewhere.make_url("/steal")))

        api = web.Application()
        api.router.add_get("/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/py-scheduler", lease)
        api.router.add_get("/api/v1/namespaces/kube-system/pods/leader", pod)
        api.router.add_get("/api/v1/namespaces/kube-system/pods/https:leader:10259/proxy/debug/decisions", proxied)
        async with TestServer(api) as server:
            kubeconfig = tmp_path / "kubeconfig"
            kubeconfig.write_text(
                f"apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters: [{{name: k, cluster: {{server: "
                f"'{str(server.make_url('')).rstrip('/')}'}}}}]\nusers: [{{name: u, user: {{token: admin}}}}]\n"
                "contexts: [{name: c, context: {cluster: k, user: u}}]\n")
            found = await _via_proxy(kubeconfig, "default/a", "u", "kube-system/py-scheduler", 10259, "https",
                                     "reader-secret")
    assert found.record is None and "HTTP 302" in found.reason, found.reason
    assert not stolen


async def test_decisions_url_checks_the_certificate_unless_on_loopback(tmp_path: Path) -> None:
    assert client_tls("https://127.0.0.1:10259", None) is False  # kubectl port-forward
    assert client_tls("https://[::1]:10259", None) is False and client_tls("https://localhost:1", None) is False
    remote = client_tls("https://10.0.0.7:10259", None)
    assert isinstance(remote, ssl.SSLContext) and remote.verify_mode == ssl.CERT_REQUIRED and remote.check_hostname
    chain, key = self_signed_cert("sched")
    (tmp_path / "tls.crt").write_bytes(chain)
    (tmp_path / "tls.key").write_bytes(key)
    ca = tmp_path / "ca.crt"
    ca.write_bytes(chain[chain.index(b"-----BEGIN CERTIFICATE-----", 1):])  # the CA alone
    pinned = client_tls("https://127.0.0.1:10259", ca)
    assert isinstance(pinned, ssl.SSLContext) and pinned.verify_mode == ssl.CERT_REQUIRED

    async def decisions(_r: web.Request) -> web.Response:
        return web.json_response({"decisions": [{"pod": "default/a"}]})

    ctx = server_ssl_context(tmp_path / "tls.crt", tmp_path / "tls.key")
    async with _https({"/debug/decisions": decisions}, ctx) as url:
        assert (await _direct(url, "default/a", "u", ca_file=ca)).record == {"pod": "default/a"}
        other = tmp_path / "other-ca.crt"
        other_chain = self_signed_cert("other")[0]
        other.write_bytes(other_chain[other_chain.index(b"-----BEGIN CERTIFICATE-----", 1):])
        refused = await _direct(url, "default/a", "u", ca_file=other)
        assert refused.record is None and "--scheduler-ca-file" in refused.reason, refused.reason


# -- /debug/memory --------------------------------------------------------------------------------------------

async def test_memory_actions_need_profiling_and_post() -> None:
    for profiling in (False, True):
        app = web.Application()
        add_memory_routes(app, MemoryDebug(), profiling=profiling)
        async with TestClient(TestServer(app)) as c:
            assert (await c.get(PATH)).status == 200  # reading is no action
            for q in ({"gc": "1"}, {"trace": "0"}, {"mark": "1"}):
                assert (await c.get(PATH, params=q)).status == 400, q  # never by GET
            r = await c.post(PATH, params={"gc": "1"})
            if profiling:
                assert r.status == 200 and "collected_now" in await r.json()
            else:
                assert r.status == 405



# -- the flags through the command line ------------------------------------------------------------------------

def _run_cli(monkeypatch: pytest.MonkeyPatch, *flags: str) -> tuple[Any, list[dict[str, Any]]]:
    """``py-scheduler run FLAGS`` through the real typer parser, up to ``run_scheduler`` (recorded, not run)."""
    from py_scheduler import cli
    from py_scheduler.app.process import main

    seen: list[dict[str, Any]] = []
    monkeypatch.setattr(main, "run_scheduler", lambda **kw: seen.append(kw) or 0)
    monkeypatch.setattr(cli, "imports_done", lambda: None)  # no gc.freeze in the test process
    return CliRunner().invoke(cli.app, ["run", *flags]), seen


def test_run_passes_profiling_and_tls_min_version_to_the_serving_options(monkeypatch: pytest.MonkeyPatch) -> None:
    from py_scheduler.app.process.main import ServingOptions

    res, seen = _run_cli(monkeypatch)
    assert res.exit_code == 0, res.output
    assert seen[0]["serving"] == ServingOptions()  # off, VersionTLS12: kube-scheduler's defaults
    assert (seen[0]["serving"].profiling, seen[0]["serving"].tls_min_version) == (False, "VersionTLS12")
    res, seen = _run_cli(monkeypatch, "--profiling", "--tls-min-version", "VersionTLS13")
    assert res.exit_code == 0, res.output
    assert (seen[0]["serving"].profiling, seen[0]["serving"].tls_min_version) == (True, "VersionTLS13")
    res, seen = _run_cli(monkeypatch, "--tls-min-version=VersionTLS12")
    assert res.exit_code == 0 and seen[0]["serving"].tls_min_version == "VersionTLS12"


@pytest.mark.parametrize("value", ["VersionTLS10", "VersionTLS11", "TLS13", "1.3", "versiontls13"])
def test_run_refuses_an_unknown_tls_min_version_before_starting(monkeypatch: pytest.MonkeyPatch,
                                                                 value: str) -> None:
    """As kube-scheduler's ``cliflag.TLSVersion`` (``unknown tls version``) refuses it at start, before
    any login; TLS 1.0 and 1.1, which upstream still accepts, are not offered (Python's ssl module)."""
    res, seen = _run_cli(monkeypatch, "--tls-min-version", value)
    assert res.exit_code == 2, res.output
    assert seen == []  # refused before run_scheduler: no login, no server
    text = " ".join(res.output.replace("│", " ").split())  # typer wraps its error box
    assert "--tls-min-version" in text and f"unknown tls version {value!r}" in text, text
    assert "VersionTLS12, VersionTLS13" in text, text


# -- the serving certificate ------------------------------------------------------------------------------------

def test_serving_certificate_has_its_own_ca_and_the_pod_ip(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    chain, _ = self_signed_cert("sched-0", ips=["10.244.1.7"])
    leaf, ca = x509.load_pem_x509_certificates(chain)
    assert leaf.issuer == ca.subject and leaf.subject != ca.subject
    assert not leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert not leaf.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {str(a) for a in san.get_values_for_type(x509.IPAddress)} == {"127.0.0.1", "::1", "10.244.1.7"}
    # server_ssl_context takes the Pod's IP from POD_IP (the Deployment's downward API)
    monkeypatch.setenv("POD_IP", "not-an-ip")
    with pytest.raises(ValueError, match="POD_IP"):
        server_ssl_context()
    monkeypatch.setenv("POD_IP", "10.244.1.8")
    seen: list[Any] = []
    import py_scheduler.app.serving.secure as secure

    real = secure.self_signed_cert
    monkeypatch.setattr(secure, "self_signed_cert", lambda **kw: seen.append(kw) or real(**kw))
    server_ssl_context()
    assert seen == [{"ips": ["10.244.1.8"]}]


async def test_tls_min_version() -> None:
    assert server_ssl_context(min_version="VersionTLS13").minimum_version == ssl.TLSVersion.TLSv1_3
    assert server_ssl_context().minimum_version == ssl.TLSVersion.TLSv1_2
    with pytest.raises(ValueError, match="tls-min-version"):
        server_ssl_context(min_version="VersionTLS10")
    import asyncio

    async def ok(_r: web.Request) -> web.Response:
        return web.Response(text="ok")

    old = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    old.check_hostname, old.verify_mode = False, ssl.CERT_NONE
    old.maximum_version = ssl.TLSVersion.TLSv1_2
    async with _https({"/": ok}, server_ssl_context(min_version="VersionTLS13")) as url:
        port = int(url.rsplit(":", 1)[1])
        with pytest.raises((ssl.SSLError, ConnectionError)):
            _, w = await asyncio.open_connection("127.0.0.1", port, ssl=old)
            w.close()
