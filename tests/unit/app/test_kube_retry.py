"""The API client retries only what client-go retries (issue 31, item 5): a write whose connection
fails after it was sent may have reached the server and is not sent again (an Event twice is a
duplicate); any request answered 429 / 5xx with ``Retry-After`` is retried after that wait; a GET
(idempotent) is retried after a reset; the Binding is resent after a lost response (its resend ends
in 409 ``already assigned``, the binding cycle's existing path).

Against a real aiohttp server on 127.0.0.1 that resets the connection (RST) once it has read the
whole request.

Upstream: ``k8s.io/client-go/rest/request.go`` (``isErrRetryableFunc``: GET only, reset / EOF),
``with_retry.go`` (``IsNextRetry``, ``checkWait``: 429 / 5xx with ``Retry-After``).
"""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import pytest
from aiohttp import web
from kubernetes_asyncio import client as k8s_client

from py_scheduler.app.client.kube import Kube, RateLimiter
from py_scheduler.app.client.wire import KubeError


@dataclass
class Server:
    """What the server did: one entry per request it read (method, path)."""

    seen: list[tuple[str, str]] = field(default_factory=list)
    plan: list[Callable[[web.Request], web.StreamResponse | None]] = field(default_factory=list)
    """One action per request, in order (None: reset the connection); past the end, 200 ``{}``."""
    port: int = 0


def reset(request: web.Request) -> None:
    """Reset the connection (RST, no answer) after the whole request was read."""
    transport = request.transport
    assert transport is not None
    sock = transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


def answer(status: int, retry_after: str | None = None) -> Callable[[web.Request], web.StreamResponse]:
    def make(_: web.Request) -> web.StreamResponse:
        headers = {"Retry-After": retry_after} if retry_after is not None else {}
        return web.json_response({"kind": "Status", "code": status, "reason": "TooManyRequests"}, status=status,
                                 headers=headers)
    return make


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    srv = Server()

    async def handle(request: web.Request) -> web.StreamResponse:
        await request.read()
        srv.seen.append((request.method, request.path))
        action = srv.plan.pop(0) if srv.plan else answer(200)
        if action is reset:
            reset(request)
            return web.Response()  # never written: the transport is gone
        resp = action(request)
        assert resp is not None
        if resp.status == 200:
            return web.json_response({})
        return resp

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    srv.port = runner.addresses[0][1]
    try:
        yield srv
    finally:
        await runner.cleanup()


@pytest.fixture
async def kube(server: Server) -> AsyncIterator[Kube]:
    api = k8s_client.ApiClient(configuration=k8s_client.Configuration(host=f"http://127.0.0.1:{server.port}"))
    k = Kube(api, qps=0, burst=1, retries=3)
    k.initial_backoff = 0.0
    try:
        yield k
    finally:
        await k.close()


async def test_an_event_post_reset_after_it_was_sent_is_not_resent(server: Server, kube: Kube) -> None:
    server.plan = [reset]
    with pytest.raises(KubeError) as info:
        await kube.create_event("default", {"metadata": {"name": "e"}})
    assert info.value.status == 0
    assert server.seen == [("POST", "/apis/events.k8s.io/v1/namespaces/default/events")], "the Event was sent twice"


async def test_a_post_answered_429_with_retry_after_is_retried(server: Server, kube: Kube) -> None:
    server.plan = [answer(429, "0")]
    await kube.create_event("default", {"metadata": {"name": "e"}})
    assert [m for m, _ in server.seen] == ["POST", "POST"]
    assert kube.throttled == 1


async def test_a_post_answered_503_without_retry_after_is_not_retried(server: Server, kube: Kube) -> None:
    server.plan = [answer(503)]
    with pytest.raises(KubeError) as info:
        await kube.patch_pod_status("default", "p", {"status": {}})
    assert info.value.status == 503
    assert [m for m, _ in server.seen] == ["PATCH"]


@pytest.mark.parametrize("method", ["POST", "GET"])
async def test_a_503_with_retry_after_is_retried_after_that_wait_whatever_the_method(
        server: Server, kube: Kube, method: str) -> None:
    """client-go v0.37.2 ``rest/with_retry.go``: ``IsNextRetry`` asks ``checkWait``, which waits for
    "any 500 error code and 429" carrying ``Retry-After``, the method aside (the method only matters
    for a connection error, ``isErrRetryableFunc`` in ``request.go``); the wait is the header's seconds
    (``Before``: no backoff configured by default)."""
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    kube.retry_sleep = sleep
    server.plan = [answer(503, "1")]
    body = {"metadata": {"name": "c"}} if method == "POST" else None
    assert await kube.request(method, "/api/v1/namespaces/default/configmaps", body=body) == {}
    assert [m for m, _ in server.seen] == [method, method]
    assert waits == [1.0] and kube.throttled == 1


async def test_a_get_reset_is_retried(server: Server, kube: Kube) -> None:
    server.plan = [reset]
    assert await kube.request("GET", "/api/v1/nodes/n1") == {}
    assert server.seen == [("GET", "/api/v1/nodes/n1")] * 2


async def test_a_bindings_lost_response_is_resent(server: Server, kube: Kube) -> None:
    """The resend is refused with 409 by a real API server (the Pod is already bound): the binding
    cycle's existing path (tests/e2e/faults/test_toxics.py::test_lost_binding_response_binds_once)."""
    server.plan = [reset]
    await kube.bind("default", "p", "u1", "n1")
    assert [m for m, _ in server.seen] == ["POST", "POST"]


async def test_a_caller_cancelled_while_waiting_gives_its_token_back() -> None:
    """Before the bucket served two loops, waiting was an asyncio lock and a cancelled waiter took no
    token; with reservations the token is given back on cancel, so the next caller's wait is what it
    was before."""
    limiter = RateLimiter(qps=10, burst=1, now=lambda: 0.0)  # the clock stands still: waits are exact
    assert limiter.reserve() == 0.0
    waiter = asyncio.create_task(limiter.acquire())  # reserves the next token, due in 0.1 s
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert limiter.reserve() == pytest.approx(0.1)  # not 0.2: the cancelled one's token came back
