"""Reaching ``/debug/decisions`` with secure serving through the API server's Pod proxy, which
forwards no identity (``py_scheduler.app.serving.secure``: the token in ``X-Py-Scheduler-Authorization`` or
in the login page's cookie; ``py_scheduler.app.scheduling.decisions``: the login page, POST login, logout).
A real HTTPS server and the stub TokenReview / SubjectAccessReview API of test_secure."""

from __future__ import annotations

import base64
import json
import logging
import time
from typing import Any

import aiohttp
import pytest

from py_scheduler.app.scheduling.decisions import DecisionLog
from py_scheduler.app.serving.decisions_http import add_routes
from py_scheduler.app.serving.health import HealthServer
from py_scheduler.app.serving.secure import (
    TOKEN_COOKIE,
    TOKEN_HEADER,
    DelegatingAuth,
    server_ssl_context,
    token_cookie,
    token_max_age,
)
from py_scheduler.framework.types import PodInfo
from tests.unit.app.test_secure import Reviews

READER = "system:serviceaccount:monitoring:prometheus"  # "reader-token" in Reviews
NAV = {"Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"}
"""What a browser sends with a top-level navigation (the only requests the cookie counts for)."""


async def _req(port: int, path: str, *, method: str = "GET", headers: dict[str, str] | None = None,
               data: dict[str, str] | None = None) -> tuple[int, str, aiohttp.typedefs.LooseHeaders]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10),
                                     cookie_jar=aiohttp.DummyCookieJar()) as s, \
            s.request(method, f"https://127.0.0.1:{port}{path}", ssl=False, headers=headers or {}, data=data,
                      allow_redirects=False) as r:
        return r.status, await r.text(), r.headers


@pytest.fixture
async def server() -> Any:
    reviews = Reviews()
    reviews.allowed |= {(READER, "get", "/debug/decisions"), (READER, "get", "/debug/decisions/ui")}
    auth = DelegatingAuth(reviews)  # type: ignore[arg-type]
    srv = HealthServer("127.0.0.1:0", lambda: True, ssl_context=server_ssl_context(), auth=auth)
    log = DecisionLog(10, 3, clock=lambda: 1_700_000_000.0)
    log.record(PodInfo({"metadata": {"name": "web", "namespace": "ns", "uid": "u1"}, "spec": {}}), "py-scheduler", 1,
               "unschedulable", message="0/0 nodes are available.")
    add_routes(srv.app, log, lambda: True, auth)
    await srv.start()
    try:
        yield srv.port, reviews
    finally:
        await srv.stop()


async def test_token_header_behind_the_proxy_is_reviewed_like_authorization(server: Any) -> None:
    port, reviews = server
    q = "/debug/decisions?pod=ns/web"
    status, body, _ = await _req(port, q, headers={TOKEN_HEADER: "Bearer reader-token"})
    assert status == 200 and json.loads(body)["decisions"][0]["pod"] == "ns/web"
    assert (await _req(port, q, headers={TOKEN_HEADER: "Bearer nobody-token"}))[0] == 403
    assert (await _req(port, q, headers={TOKEN_HEADER: "Bearer forged"}))[0] == 401
    assert (await _req(port, q, headers={TOKEN_HEADER: "reader-token"}))[0] == 401  # not "Bearer <token>"
    assert (await _req(port, q))[0] == 403  # anonymous
    # Authorization wins over the header (a direct caller's own identity)
    assert (await _req(port, q, headers={"Authorization": "Bearer nobody-token",
                                         TOKEN_HEADER: "Bearer reader-token"}))[0] == 403
    # the cookie too, with the same reviews, on a browser's navigation
    assert (await _req(port, q, headers={"Cookie": f"{TOKEN_COOKIE}=reader-token", **NAV}))[0] == 200
    assert (await _req(port, q, headers={"Cookie": f"{TOKEN_COOKIE}=nobody-token", **NAV}))[0] == 403
    sars = [b["spec"] for p, b in reviews.calls if p.endswith("subjectaccessreviews")]
    assert {"path": "/debug/decisions", "verb": "get"} in [s["nonResourceAttributes"] for s in sars]


async def test_browser_signs_in_sees_the_page_and_signs_out(server: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    port, _ = server
    # no credentials: the sign-in page (401), a relative POST form carrying the query on
    status, body, headers = await _req(port, "/debug/decisions/ui?pod=ns/web&limit=3")
    assert status == 401 and headers["Content-Type"].startswith("text/html")
    assert '<form method=post action="login">' in body and 'name=pod value="ns/web"' in body
    assert "default-src 'none'" in headers["Content-Security-Policy"] and "Set-Cookie" not in headers
    # the JSON endpoint keeps its plain 403 for programs
    assert (await _req(port, "/debug/decisions"))[0] == 403
    # a token that is no token, an unknown one, one without the right: the form again, with why
    form = {"pod": "ns/web", "limit": "3"}
    assert (await _req(port, "/debug/decisions/login", method="POST", data={**form, "token": "a b;c"}))[0] == 401
    status, body, headers = await _req(port, "/debug/decisions/login", method="POST", data={**form, "token": "forged"})
    assert status == 401 and "does not accept this token" in body and "Set-Cookie" not in headers
    status, body, _ = await _req(port, "/debug/decisions/login", method="POST",
                                 data={**form, "token": "nobody-token"})
    assert status == 403 and "cannot get path &quot;/debug/decisions/ui&quot;" in body
    # the right token: a cookie scoped to the login URL's directory (no Path) for at most an hour (an
    # opaque token: no exp to go by), then the page
    status, _, headers = await _req(port, "/debug/decisions/login", method="POST",
                                    data={**form, "token": "reader-token"})
    assert status == 303 and headers["Location"] == "ui?pod=ns%2Fweb&limit=3"
    cookie = headers["Set-Cookie"]
    assert cookie == f"{TOKEN_COOKIE}=reader-token; Max-Age=3600; HttpOnly; Secure; SameSite=Strict"
    status, body, _ = await _req(port, "/debug/decisions/ui?pod=ns/web&limit=3",
                                 headers={"Cookie": f"{TOKEN_COOKIE}=reader-token", **NAV})
    assert status == 200 and "ns/web" in body
    assert '<form method=post action="logout"><button type=submit id=logout>Sign out</button></form>' in body
    # sign out: a POST (a GET is no sign-out: any page could make the browser fetch it); the cookie is cleared
    assert (await _req(port, "/debug/decisions/logout", headers={"Cookie": f"{TOKEN_COOKIE}=reader-token"}))[0] == 405
    status, body, headers = await _req(port, "/debug/decisions/logout", method="POST",
                                       headers={"Cookie": f"{TOKEN_COOKIE}=reader-token", **NAV})
    assert status == 200 and "signed out" in body
    assert headers["Set-Cookie"] == f"{TOKEN_COOKIE}=; Max-Age=0; HttpOnly; Secure; SameSite=Strict"
    # a cookie the API server no longer accepts (expired): the form, and the cookie cleared
    status, body, headers = await _req(port, "/debug/decisions/ui",
                                       headers={"Cookie": f"{TOKEN_COOKIE}=forged", **NAV})
    assert status == 401 and "<form" in body and "Max-Age=0" in headers["Set-Cookie"]
    assert not [t for t in ("reader-token", "nobody-token", "forged") if t in caplog.text]  # tokens never logged


async def test_cross_site_sign_in_and_out_are_refused(server: Any) -> None:
    """Login CSRF: another site's page posting its own token to the sign-in form (the victim then reads
    and acts as the attacker) or signing the victim out. Go's CrossOriginProtection rules."""
    port, _ = server
    form = {"token": "reader-token"}
    for headers in ({"Sec-Fetch-Site": "cross-site"}, {"Sec-Fetch-Site": "same-site"},
                    {"Origin": "https://evil.example"}, {"Origin": "null"}):
        status, body, got = await _req(port, "/debug/decisions/login", method="POST", data=form, headers=headers)
        assert status == 403 and "another site" in body and "Set-Cookie" not in got, headers
        status, _, got = await _req(port, "/debug/decisions/logout", method="POST", headers=headers)
        assert status == 403 and "Set-Cookie" not in got, headers
    # the same origin (the browser's word for it, or an Origin naming this host), or no browser at all
    for headers in ({"Sec-Fetch-Site": "same-origin"}, {"Origin": f"https://127.0.0.1:{port}"}, {}):
        status, _, got = await _req(port, "/debug/decisions/login", method="POST", data=form, headers=headers)
        assert status == 303 and got["Set-Cookie"].startswith(f"{TOKEN_COOKIE}=reader-token;"), headers


async def test_cookie_counts_only_for_a_document_navigation(server: Any) -> None:
    """A page of another site cannot use the browser's cookie: fetch(), <img>, <iframe> (Sec-Fetch-Dest
    other than document, or Mode other than navigate) are anonymous; so is a client sending no Sec-Fetch."""
    port, _ = server
    cookie = {"Cookie": f"{TOKEN_COOKIE}=reader-token"}
    assert (await _req(port, "/debug/decisions", headers={**cookie, **NAV}))[0] == 200
    for other in ({"Sec-Fetch-Mode": "cors", "Sec-Fetch-Dest": "empty"},
                  {"Sec-Fetch-Mode": "no-cors", "Sec-Fetch-Dest": "image"},
                  {"Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "iframe"}, {}):
        assert (await _req(port, "/debug/decisions", headers={**cookie, **other}))[0] == 403, other  # anonymous


def test_cookie_lives_at_most_as_long_as_the_token() -> None:
    def jwt(claims: dict[str, Any]) -> str:
        part = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
        return f"eyJhbGciOiJSUzI1NiJ9.{part}.c2ln"

    now = 1_800_000_000
    assert token_max_age(jwt({"exp": now + 600}), now) == 600
    assert token_max_age(jwt({"exp": now - 5}), now) == 0  # expired: a cookie gone at once
    assert token_max_age(jwt({"exp": now + 10**8}), now) == 12 * 3600  # a year-long token: half a day
    assert token_max_age(jwt({"sub": "x"}), now) == token_max_age("opaque-token", now) == 3600
    assert token_max_age("a.!!!.c", now) == 3600
    max_age = int(token_cookie(jwt({"exp": int(time.time()) + 600})).split("Max-Age=")[1].split(";")[0])
    assert 590 <= max_age <= 600


async def test_every_answer_has_the_security_headers_and_no_versions(server: Any) -> None:
    port, _ = server
    signed_in = {"Cookie": f"{TOKEN_COOKIE}=reader-token", **NAV}
    for path, headers in (("/healthz", {}), ("/debug/decisions", {}), ("/nope", {}), ("/debug/decisions/ui", {}),
                          ("/debug/decisions/ui", signed_in), ("/debug/decisions", {"Authorization": "Bearer forged"})):
        status, _, got = await _req(port, path, headers=headers)
        csp = got["Content-Security-Policy"]
        assert "frame-ancestors 'none'; form-action 'self'; base-uri 'none'" in csp, (path, status, csp)
        assert got["X-Content-Type-Options"] == "nosniff" and got["Server"] == "py-scheduler", (path, got)
        if path == "/debug/decisions/ui":  # the page keeps its own policy (no scripts) too
            assert csp.startswith("default-src 'none'; style-src 'unsafe-inline'; frame-ancestors"), csp
