"""Secure serving (``py_scheduler.app.serving.secure`` + ``HealthServer``): a real HTTPS server on a free port,
its certificate verified by the client, delegated authentication/authorization against a stub of the
TokenReview / SubjectAccessReview API (the e2e tests do the same against the real API server)."""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cryptography import x509

from py_scheduler.app.client.wire import KubeError
from py_scheduler.app.process.main import ServingOptions, build_health_server
from py_scheduler.app.serving.health import HealthServer
from py_scheduler.app.serving.secure import DelegatingAuth, UserInfo, path_allowed, self_signed_cert, server_ssl_context
from py_scheduler.app.telemetry import metrics as m


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
        self.gate: asyncio.Event | None = None
        """When set: a review of a token starting with ``junk`` waits for it (a slow API, a long queue)."""
        self.audiences: dict[str, list[str]] = {}
        """Token -> the audiences it was minted for (default: the API server's, ``api``)."""

    async def request(self, method: str, path: str, *, body: Any = None, retries: int | None = None,
                      timeout: float = 0) -> Any:
        self.calls.append((path, body))
        if self.fail:
            raise KubeError(503, "ServiceUnavailable", "down", method, path)
        if path.endswith("/tokenreviews"):
            token = body["spec"]["token"]
            if self.gate is not None and token.startswith("junk"):
                await self.gate.wait()  # ignores ``timeout``, as a rate limiter's wait did
            hit = self.tokens.get(token)
            minted = self.audiences.get(token, ["api"])
            wanted = body["spec"].get("audiences") or ["api"]
            if hit is None or not set(minted) & set(wanted):
                return {"status": {"authenticated": False, "error": "invalid bearer token"}}
            return {"status": {"authenticated": True, "audiences": [a for a in wanted if a in minted],
                               "user": {"username": hit[0], "uid": "u-" + hit[0], "groups": hit[1]}}}
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
               header: str | None = None, source: str | None = None) -> tuple[int, str]:
    """GET over HTTPS; ``source``: the client's own address (another loopback address: another client)."""
    ctx = ssl.create_default_context(cafile=str(ca)) if ca else False
    headers = {"Authorization": header or f"Bearer {token}"} if (token or header) else {}
    conn = aiohttp.TCPConnector(local_addr=(source, 0)) if source else None
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10), connector=conn) as s, \
            s.get(f"https://127.0.0.1:{port}{path}", ssl=ctx, headers=headers) as r:
        if r.status == 429:
            assert r.headers["Retry-After"] == "1"
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



async def test_cache_size_is_capped_and_the_least_recently_used_goes_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """Many distinct tokens (a junk-token flood, each answered "not authenticated") keep at most
    CACHE_SIZE answers per cache (4096: lowered); the entry dropped is the least recently used one
    (``_TTLCache``: an LRU), so a token in steady use stays cached through the flood."""
    from py_scheduler.app.serving import secure

    monkeypatch.setattr(secure, "CACHE_SIZE", 8)
    reviews = Reviews()
    auth = DelegatingAuth(reviews)  # type: ignore[arg-type]
    assert await auth.authenticate("reader-token") is not None
    reader = UserInfo("system:serviceaccount:monitoring:prometheus", "u-x")
    for i in range(100):
        assert await auth.authenticate(f"junk-{i}") is None
        await auth.authorize(reader, "get", f"/debug/path-{i}")
        assert len(auth._tokens._d) <= 8 and len(auth._decisions._d) <= 8
        if i % 4 == 0:  # the scrape keeps coming: its answer is used, hence kept
            assert await auth.authenticate("reader-token") is not None
    assert len(auth._tokens._d) == 8 and len(auth._decisions._d) == 8
    reader_reviews = [b for p, b in reviews.calls if p.endswith("/tokenreviews")
                      and b["spec"]["token"] == "reader-token"]
    assert len(reader_reviews) == 1  # never dropped while in use (a FIFO would have dropped it 8 tokens later)
    sent = auth.reviews
    assert await auth.authenticate("reader-token") is not None  # used recently: still cached
    for i in range(93, 100):  # the newest seven junk tokens: still cached
        assert await auth.authenticate(f"junk-{i}") is None
    assert auth.reviews == sent
    assert await auth.authenticate("junk-92") is None  # older: dropped, reviewed again
    assert await auth.authenticate("junk-0") is None
    assert auth.reviews == sent + 2
    assert (await auth.authorize(reader, "get", "/debug/path-99"))[0] is False  # newest decision: cached
    assert auth.reviews == sent + 2
    await auth.authorize(reader, "get", "/debug/path-0")  # oldest decision: dropped
    assert auth.reviews == sent + 3


# -- bounded review work (issue 31) -------------------------------------------------------------------------

async def test_concurrent_requests_with_one_token_share_one_review() -> None:
    reviews = Reviews()
    reviews.gate = asyncio.Event()
    auth = DelegatingAuth(reviews)  # type: ignore[arg-type]
    waiting = [asyncio.create_task(auth.check("junk-1", "get", "/metrics", "10.0.0.1")) for _ in range(50)]
    await asyncio.sleep(0)
    reviews.gate.set()
    assert {await t for t in waiting} == {(401, None, "Unauthorized: the API server does not accept this token "
                                                      "(expired?)")}
    assert auth.reviews == len(reviews.calls) == 1  # not 50
    assert not auth._pending  # nothing left behind


async def test_review_flood_is_capped_with_429_and_another_client_still_gets_in() -> None:
    """Junk tokens from one address hold at most MAX_REVIEWS_PER_CLIENT reviews; the rest answer 429 with
    Retry-After at once, and a legitimate scrape from another address is answered in well under a second."""
    reviews = Reviews()
    reviews.gate = asyncio.Event()
    auth = DelegatingAuth(reviews, max_per_client=8, max_in_flight=64)  # type: ignore[arg-type]
    srv = HealthServer("127.0.0.1:0", lambda: True, ssl_context=server_ssl_context(), auth=auth)
    await srv.start()
    try:
        flood = [asyncio.create_task(_get(srv.port, "/metrics", None, f"junk-{i}")) for i in range(60)]
        deadline = time.monotonic() + 20
        while sum(t.done() for t in flood) < 52 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        refused = [t.result()[0] for t in flood if t.done()]
        assert refused == [429] * 52 and len(reviews.calls) == 8  # 8 reviews held, the rest refused at once
        t0 = time.monotonic()
        status, text = await _get(srv.port, "/metrics", None, "reader-token", source="127.0.0.2")
        assert status == 200 and "scheduler_schedule_attempts_total" in text
        assert time.monotonic() - t0 < 1.0
        reviews.gate.set()
        assert sorted([(await t)[0] for t in flood]) == [401] * 8 + [429] * 52
        sent = m.REGISTRY.get_sample_value("apiserver_delegated_authn_request_total", {"code": "429"})
        assert sent is not None and sent >= 52
    finally:
        reviews.gate.set()
        await srv.stop()


async def test_review_deadline_covers_the_wait_before_sending() -> None:
    """A review waiting in the client (its rate limiter ignores the request timeout) gives up at the
    deadline: 401 in time, not a request held as long as the queue."""
    reviews = Reviews()
    reviews.gate = asyncio.Event()  # never set
    auth = DelegatingAuth(reviews, deadline=0.3)  # type: ignore[arg-type]
    t0 = time.monotonic()
    code, _, _ = await asyncio.wait_for(auth.check("junk-slow", "get", "/metrics"), timeout=5)
    assert code == 401 and time.monotonic() - t0 < 2
    assert not auth._pending and not auth._per_client


async def test_anonymous_auth_false_answers_401_without_a_review() -> None:
    reviews = Reviews()
    reviews.allowed.add(("system:anonymous", "get", "/metrics"))
    for anonymous, want in ((True, 200), (False, 401)):
        srv = HealthServer("127.0.0.1:0", lambda: True, ssl_context=server_ssl_context(),
                           auth=DelegatingAuth(reviews, anonymous=anonymous))  # type: ignore[arg-type]
        await srv.start()
        try:
            n = len(reviews.calls)
            assert (await _get(srv.port, "/metrics", None))[0] == want
            assert len(reviews.calls) == n + (1 if anonymous else 0)
            assert await _get(srv.port, "/livez", None) == (200, "ok")  # probes stay anonymous
            assert (await _get(srv.port, "/metrics", None, "reader-token"))[0] == 200
        finally:
            await srv.stop()


async def test_audiences_are_sent_and_required_in_the_answer() -> None:
    reviews = Reviews()
    reviews.tokens["scheduler-token"] = reviews.tokens["reader-token"]
    reviews.audiences["scheduler-token"] = ["py-scheduler"]
    auth = DelegatingAuth(reviews, audiences=["py-scheduler"])  # type: ignore[arg-type]
    assert (await auth.authenticate("scheduler-token")) is not None
    assert reviews.calls[-1][1]["spec"]["audiences"] == ["py-scheduler"]
    assert await auth.authenticate("reader-token") is None  # minted for the API server only
    # an answer that does not name the audience (an API server ignoring spec.audiences) is refused too
    class Deaf(Reviews):
        async def request(self, method: str, path: str, **kw: Any) -> Any:
            answer = await super().request(method, path, **{**kw, "body": {"spec": {"token": "reader-token"}}})
            answer["status"].pop("audiences", None)
            return answer

    assert await DelegatingAuth(Deaf(), audiences=["py-scheduler"]).authenticate("x") is None  # type: ignore[arg-type]
    assert await DelegatingAuth(Deaf()).authenticate("x") is not None  # type: ignore[arg-type]


async def test_request_paths_are_logged_escaped(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="py_scheduler.secure")
    reviews = Reviews()
    srv = HealthServer("127.0.0.1:0", lambda: True, ssl_context=server_ssl_context(),
                       auth=DelegatingAuth(reviews))  # type: ignore[arg-type]
    await srv.start()
    try:
        forged = "/x%0AI1205 01:02:03.000000 1 forged.go:1] owned"
        assert (await _get(srv.port, forged, None))[0] == 403
        reviews.fail = True
        assert (await _get(srv.port, forged + "2", None, "nobody-token"))[0] == 401
    finally:
        await srv.stop()
    lines = [r.getMessage() for r in caplog.records if "/x" in r.getMessage()]
    assert len(lines) == 2 and all("\n" not in ln and "\\nI1205" in ln for ln in lines), lines
