"""Secure serving (``py_scheduler.app.secure`` + ``HealthServer``): a real HTTPS server on a free port,
its certificate verified by the client, delegated authentication/authorization against a stub of the
TokenReview / SubjectAccessReview API (the e2e tests do the same against the real API server)."""

from __future__ import annotations

import json
import logging
import ssl
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cryptography import x509

from py_scheduler.app import metrics as m
from py_scheduler.app.health import HealthServer
from py_scheduler.app.kube import KubeError
from py_scheduler.app.main import ServingOptions, build_health_server
from py_scheduler.app.secure import DelegatingAuth, UserInfo, path_allowed, self_signed_cert, server_ssl_context


class Reviews:
    """TokenReview: ``tokens`` maps a token to (user, groups); SubjectAccessReview: ``allowed`` holds
    (user, verb, path) triples. ``fail`` makes every review a 503."""

    def __init__(self) -> None:
        self.tokens: dict[str, tuple[str, list[str]]] = {
            "reader-token": ("system:serviceaccount:monitoring:prometheus", ["system:serviceaccounts"]),
            "nobody-token": ("system:serviceaccount:default:default", ["system:serviceaccounts"]),
            "admin-token": ("admin", ["system:masters"]),
        }
        self.allowed = {("system:serviceaccount:monitoring:prometheus", "get", "/metrics"),
                        ("system:serviceaccount:monitoring:prometheus", "get", "/debug/extra")}
        self.calls: list[tuple[str, Any]] = []
        self.fail = False

    async def request(self, method: str, path: str, *, body: Any = None, retries: int | None = None,
                      timeout: float = 0) -> Any:
        self.calls.append((path, body))
        if self.fail:
            raise KubeError(503, "ServiceUnavailable", "down", method, path)
        if path.endswith("/tokenreviews"):
            hit = self.tokens.get(body["spec"]["token"])
            if hit is None:
                return {"status": {"authenticated": False, "error": "invalid bearer token"}}
            return {"status": {"authenticated": True, "user": {"username": hit[0], "uid": "u-" + hit[0],
                                                               "groups": hit[1]}}}
        spec = body["spec"]
        na = spec["nonResourceAttributes"]
        return {"status": {"allowed": (spec["user"], na["verb"], na["path"]) in self.allowed}}


@pytest.fixture
def cert_files(tmp_path: Path) -> tuple[Path, Path]:
    cert, key = self_signed_cert("sched.example.test")
    (tmp_path / "tls.crt").write_bytes(cert)
    (tmp_path / "tls.key").write_bytes(key)
    return tmp_path / "tls.crt", tmp_path / "tls.key"


async def _get(port: int, path: str, ca: Path | None, token: str | None = None,
               header: str | None = None) -> tuple[int, str]:
    ctx = ssl.create_default_context(cafile=str(ca)) if ca else False
    headers = {"Authorization": header or f"Bearer {token}"} if (token or header) else {}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as s, \
            s.get(f"https://127.0.0.1:{port}{path}", ssl=ctx, headers=headers) as r:
        return r.status, await r.text()


async def test_https_with_given_certificate_and_delegated_auth(cert_files: tuple[Path, Path],
                                                              caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    reviews = Reviews()
    auth = DelegatingAuth(reviews)  # type: ignore[arg-type]
    srv = HealthServer("127.0.0.1:0", lambda: True, ssl_context=server_ssl_context(*cert_files), auth=auth)

    async def extra(_r: Any) -> aiohttp.web.Response:
        return aiohttp.web.Response(text="extra")

    srv.add_get("/debug/extra", extra)
    m.SCHEDULE_ATTEMPTS.labels(result="scheduled", profile="secure-test").inc()
    await srv.start()
    ca = cert_files[0]
    try:
        # probes: no token, no review
        for path in ("/healthz", "/livez", "/readyz"):
            assert await _get(srv.port, path, ca) == (200, "ok")
        assert reviews.calls == []
        # anonymous: authorized as system:anonymous -> 403, also for a path that does not exist
        status, body = await _get(srv.port, "/metrics", ca)
        assert status == 403
        assert json.loads(body)["message"] == 'forbidden: User "system:anonymous" cannot get path "/metrics"'
        assert (await _get(srv.port, "/nope", ca))[0] == 403
        assert (await _get(srv.port, "/debug/extra", ca))[0] == 403
        # an unknown token -> 401; a token without the right -> 403; with it -> the metrics
        assert (await _get(srv.port, "/metrics", ca, "forged"))[0] == 401
        assert (await _get(srv.port, "/metrics", ca, header="Basic YTpi"))[0] == 401
        assert (await _get(srv.port, "/metrics", ca, "nobody-token"))[0] == 403
        status, text = await _get(srv.port, "/metrics", ca, "reader-token")
        assert status == 200 and 'scheduler_schedule_attempts_total{profile="secure-test",result="scheduled"}' in text
        assert await _get(srv.port, "/debug/extra", ca, "reader-token") == (200, "extra")
        # system:masters needs no SubjectAccessReview
        n = len(reviews.calls)
        assert (await _get(srv.port, "/anything", ca, "admin-token"))[0] == 404
        assert [p for p, _ in reviews.calls[n:]] == ["/apis/authentication.k8s.io/v1/tokenreviews"]
        # answers are cached: a second scrape asks nothing
        n = len(reviews.calls)
        assert (await _get(srv.port, "/metrics", ca, "reader-token"))[0] == 200
        assert len(reviews.calls) == n
        sar = next(b for p, b in reviews.calls if p.endswith("subjectaccessreviews")
                   and b["spec"]["user"].endswith(":prometheus"))
        assert sar["spec"]["nonResourceAttributes"] == {"path": "/metrics", "verb": "get"}
        assert sar["spec"]["uid"] and sar["spec"]["groups"]
        assert "Forbidden: user=system:anonymous" in caplog.text  # refusals are logged (at debug) ...
        assert not [t for t in ("reader-token", "nobody-token", "forged", "YTpi") if t in caplog.text]  # tokens never
    finally:
        await srv.stop()


async def test_review_failures_refuse_and_probes_still_answer() -> None:
    reviews = Reviews()
    reviews.fail = True
    srv = HealthServer("127.0.0.1:0", lambda: True, ssl_context=server_ssl_context(),
                       auth=DelegatingAuth(reviews))  # type: ignore[arg-type]
    await srv.start()
    try:
        assert (await _get(srv.port, "/metrics", None, "reader-token"))[0] == 401  # TokenReview failed
        assert (await _get(srv.port, "/metrics", None))[0] == 500  # SubjectAccessReview failed
        assert await _get(srv.port, "/healthz", None) == (200, "ok")
    finally:
        await srv.stop()


async def test_plain_http_only_when_asked() -> None:
    srv = build_health_server("127.0.0.1:0", lambda: True, None, ServingOptions(plain_http=True))  # type: ignore[arg-type]
    await srv.start()
    try:
        async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{srv.port}/metrics") as r:
            assert r.status == 200
    finally:
        await srv.stop()

    class KubeStub(Reviews):
        def derive(self, purpose: str) -> Reviews:
            return self

    async def debug(_r: Any) -> aiohttp.web.Response:
        return aiohttp.web.Response(text="debug")

    srv = build_health_server("127.0.0.1:0", lambda: True, KubeStub(), ServingOptions(),  # type: ignore[arg-type]
                              routes={"/debug/x": debug})
    assert srv.scheme == "https" and srv.auth is not None and "/debug/x" in srv.paths
    await srv.start()
    try:
        assert (await _get(srv.port, "/debug/x", None))[0] == 403  # the hook's routes are protected too
        assert (await _get(srv.port, "/debug/x", None, "reader-token"))[0] == 403
        assert await _get(srv.port, "/debug/x", None, "admin-token") == (200, "debug")
    finally:
        await srv.stop()
    with pytest.raises(ValueError, match="together"):
        build_health_server("127.0.0.1:0", lambda: True, KubeStub(),  # type: ignore[arg-type]
                            ServingOptions(tls_cert_file=Path("/x")))


def test_self_signed_certificate_names() -> None:
    cert = x509.load_pem_x509_certificate(self_signed_cert("host-a")[0])
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(san.get_values_for_type(x509.DNSName)) == {"localhost", "host-a"}
    assert {str(a) for a in san.get_values_for_type(x509.IPAddress)} == {"127.0.0.1", "::1"}
    assert (cert.not_valid_after_utc - cert.not_valid_before_utc).days >= 365


def test_always_allow_paths() -> None:
    pats = ["/healthz", "/readyz", "/livez", "/debug/public/*"]
    assert path_allowed("/healthz", pats) and path_allowed("/debug/public/x", pats)
    assert not path_allowed("/healthz/x", pats) and not path_allowed("/metrics", pats)
    assert not path_allowed("/debug/publi", pats)


async def test_cache_expires() -> None:
    class Clock:
        t = 0.0

        def __call__(self) -> float:
            return self.t

    clock, reviews = Clock(), Reviews()
    auth = DelegatingAuth(reviews, now=clock)  # type: ignore[arg-type]
    user = await auth.authenticate("reader-token")
    assert user is not None and user.name.endswith(":prometheus")
    assert (await auth.authorize(user, "get", "/metrics"))[0]
    assert await auth.authenticate("forged") is None
    assert auth.reviews == 3
    await auth.authenticate("reader-token")
    await auth.authenticate("forged")
    assert auth.reviews == 3
    clock.t += 10.5
    await auth.authenticate("forged")
    assert not (await auth.authorize(UserInfo("x"), "get", "/metrics"))[0]
    assert auth.reviews == 5
