"""Reaching ``/debug/decisions`` with secure serving through the API server's Pod proxy, which
forwards no identity (``py_scheduler.app.secure``: the token in ``X-Py-Scheduler-Authorization`` or
in the login page's cookie; ``py_scheduler.app.decisions``: the login page, POST login, logout).
A real HTTPS server and the stub TokenReview / SubjectAccessReview API of test_secure."""

from __future__ import annotations

import json
import logging
from typing import Any

import aiohttp
import pytest

from py_scheduler.app.decisions import DecisionLog, add_routes
from py_scheduler.app.health import HealthServer
from py_scheduler.app.secure import TOKEN_COOKIE, TOKEN_HEADER, DelegatingAuth, server_ssl_context
from py_scheduler.framework.types import PodInfo
from tests.unit.app.test_secure import Reviews

READER = "system:serviceaccount:monitoring:prometheus"  # "reader-token" in Reviews


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
    # the cookie too, with the same reviews
    assert (await _req(port, q, headers={"Cookie": f"{TOKEN_COOKIE}=reader-token"}))[0] == 200
    assert (await _req(port, q, headers={"Cookie": f"{TOKEN_COOKIE}=nobody-token"}))[0] == 403
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
    # the right token: a session cookie scoped to the login URL's directory, then the page
    status, _, headers = await _req(port, "/debug/decisions/login", method="POST",
                                    data={**form, "token": "reader-token"})
    assert status == 303 and headers["Location"] == "ui?pod=ns%2Fweb&limit=3"
    cookie = headers["Set-Cookie"]
    assert cookie == f"{TOKEN_COOKIE}=reader-token; HttpOnly; Secure; SameSite=Strict"  # no Path, no expiry
    status, body, _ = await _req(port, "/debug/decisions/ui?pod=ns/web&limit=3",
                                 headers={"Cookie": f"{TOKEN_COOKIE}=reader-token"})
    assert status == 200 and "ns/web" in body and '<a href="logout" id=logout>sign out</a>' in body
    # sign out: the cookie is cleared
    status, body, headers = await _req(port, "/debug/decisions/logout",
                                       headers={"Cookie": f"{TOKEN_COOKIE}=reader-token"})
    assert status == 200 and "signed out" in body
    assert headers["Set-Cookie"] == f"{TOKEN_COOKIE}=; Max-Age=0; HttpOnly; Secure; SameSite=Strict"
    # a cookie the API server no longer accepts (expired): the form, and the cookie cleared
    status, body, headers = await _req(port, "/debug/decisions/ui", headers={"Cookie": f"{TOKEN_COOKIE}=forged"})
    assert status == 401 and "<form" in body and "Max-Age=0" in headers["Set-Cookie"]
    assert not [t for t in ("reader-token", "nobody-token", "forged") if t in caplog.text]  # tokens never logged
