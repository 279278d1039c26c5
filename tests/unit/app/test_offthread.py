"""API requests on a thread of their own (``--request-thread``, issue 32 item 2): every request of the
scheduler's client and its Event client runs on ``py-scheduler-requests``; watches stay on the
caller's loop; the caller still waits for each answer; one rate limiter serves both loops."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from py_scheduler.app.client import internals
from py_scheduler.app.client.credentials import load_connection_info
from py_scheduler.app.client.kube import Fenced, Kube, KubeAPIClient, RateLimiter
from py_scheduler.app.client.offthread import RequestThread
from tests.unit.app.fakes import kubeconfig_file


class _Api:
    """A few API paths; ``gate`` holds the Binding until set."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.gate.set()
        self.bindings = 0

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/api/v1/namespaces/default/pods/p", self.pod)
        app.router.add_post("/api/v1/namespaces/default/pods/p/binding", self.bind)
        app.router.add_post("/apis/events.k8s.io/v1/namespaces/default/events", self.event)
        app.router.add_get("/api/v1/pods", self.watch)
        app.router.add_get("/api/v1/nodes", self.nodes)
        return app

    async def nodes(self, request: web.Request) -> web.Response:
        return web.json_response({"kind": "NodeList", "apiVersion": "v1", "metadata": {"resourceVersion": "7"},
                                  "items": [{"metadata": {"name": "n1"}}]})

    async def pod(self, request: web.Request) -> web.Response:
        return web.json_response({"kind": "Pod", "metadata": {"name": "p"}})

    async def bind(self, request: web.Request) -> web.Response:
        await self.gate.wait()
        self.bindings += 1
        return web.json_response({"kind": "Status", "status": "Success"}, status=201)

    async def event(self, request: web.Request) -> web.Response:
        return web.json_response(await request.json(), status=201)

    async def watch(self, request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        await resp.write(json.dumps({"type": "ADDED", "object": {"metadata": {"name": "p"}}}).encode() + b"\n")
        await resp.write_eof()
        return resp


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[_Api, Kube, list[tuple[str, str]]]]:
    api = _Api()
    async with TestServer(api.app()) as server:
        cfg = kubeconfig_file(tmp_path, server=str(server.make_url("")).rstrip("/"))
        kube = Kube.from_connection_info(await load_connection_info(cfg), request_thread=True)
        seen: list[tuple[str, str]] = []
        call_api = internals.call_api

        async def recording(a: Any, path: str, method: str, **kw: Any) -> Any:
            seen.append((f"{method} {path}", threading.current_thread().name))
            return await call_api(a, path, method, **kw)

        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(internals, "call_api", recording)
            try:
                yield api, kube, seen
            finally:
                await kube.close()


async def test_requests_run_on_the_request_thread_and_watches_and_lists_on_the_callers(
        served: tuple[_Api, Kube, list[tuple[str, str]]]) -> None:
    api, kube, seen = served
    main = threading.current_thread().name
    assert (await kube.get_pod("default", "p") or {})["metadata"]["name"] == "p"
    await kube.bind("default", "p", "u1", "n1")
    await kube.create_event("default", {"kind": "Event", "metadata": {"name": "e"}})
    events = [e async for e in kube.watch("/api/v1/pods", {})]
    assert [e["type"] for e in events] == ["ADDED"]
    pages = [p async for p in kube.list_pages("/api/v1/nodes")]
    assert pages == [([{"metadata": {"name": "n1"}, "kind": "Node", "apiVersion": "v1"}], "7")]
    assert seen == [("GET /api/v1/namespaces/default/pods/p", "py-scheduler-requests"),
                    ("POST /api/v1/namespaces/default/pods/p/binding", "py-scheduler-requests"),
                    ("POST /apis/events.k8s.io/v1/namespaces/default/events", "py-scheduler-requests"),
                    ("GET /api/v1/pods", main), ("GET /api/v1/nodes", main)]
    assert api.bindings == 1


async def test_the_fence_is_asked_on_the_request_thread_right_before_sending(
        served: tuple[_Api, Kube, list[tuple[str, str]]]) -> None:
    api, kube, seen = served
    asked: list[str] = []

    def fence() -> bool:  # the client asks once before queueing the request (yes), then at send time (no)
        asked.append(threading.current_thread().name)
        return len(asked) == 1

    with pytest.raises(Fenced):
        await KubeAPIClient(kube, fence=fence).bind("default", "p", "u1", "n1")
    assert asked == [threading.current_thread().name, "py-scheduler-requests"]
    assert api.bindings == 0 and seen == []


async def test_the_caller_waits_for_the_answer_and_cancelling_it_cancels_the_request(
        served: tuple[_Api, Kube, list[tuple[str, str]]]) -> None:
    api, kube, seen = served
    api.gate.clear()
    bind = asyncio.create_task(kube.bind("default", "p", "u1", "n1"))
    async with asyncio.timeout(10):
        while not seen:
            await asyncio.sleep(0.01)
    assert not bind.done()  # the answer has not come: the binding cycle is still waiting
    bind.cancel()
    with pytest.raises(asyncio.CancelledError):
        await bind
    assert kube.thread is not None
    loop = kube.thread.loop
    running = kube.thread.call(lambda: [t for t in asyncio.all_tasks(loop) if not t.done()])
    async with asyncio.timeout(10):
        while any(not t.done() for t in running):
            await asyncio.sleep(0.01)
    assert all(t.cancelled() for t in running)
    api.gate.set()


async def test_close_stops_the_thread_and_closes_both_sessions(tmp_path: Path) -> None:
    cfg = kubeconfig_file(tmp_path, server="http://127.0.0.1:9")
    kube = Kube.from_connection_info(await load_connection_info(cfg), request_thread=True)
    assert kube.thread is not None and kube.event_client is not None and kube.event_client.thread is kube.thread
    thread = kube.thread
    sessions = [kube.api.rest_client.pool_manager, kube._request_api.rest_client.pool_manager,
                kube.event_client.api.rest_client.pool_manager]
    assert len({id(s) for s in sessions}) == 3
    await kube.close()
    assert all(s.closed for s in sessions)
    assert thread.loop.is_closed() or not thread._thread.is_alive()


def test_one_limiter_serves_two_loops_at_its_rate() -> None:
    """The watches (cycle loop) and the requests (request thread) share their client's token bucket;
    an asyncio lock there would be bound to one loop."""
    limiter = RateLimiter(qps=20, burst=1)
    thread = RequestThread("limiter-test")
    try:
        async def take(n: int) -> None:
            for _ in range(n):
                await limiter.acquire()

        async def both() -> float:
            start = time.monotonic()
            await asyncio.gather(take(5), thread.run(take(5)))
            return time.monotonic() - start

        elapsed = asyncio.run(both())
    finally:
        thread.stop()
    # 10 tokens, 1 in the bucket, 20 per second: at least 9 / 20 s, however fast the machine
    assert elapsed >= 0.45 - 0.01


def test_the_run_flag_reaches_the_scheduler(monkeypatch: pytest.MonkeyPatch) -> None:
    """``py-scheduler run`` keeps requests on the cycle's loop by default (measured: on one core the
    thread moves CPU rather than saving it); ``--request-thread`` turns it on."""
    from typer.testing import CliRunner

    from py_scheduler.app.process import main as process_main
    from py_scheduler.cli import app

    got: list[bool] = []

    def fake_run(**kw: Any) -> int:
        got.append(kw["request_thread"])
        return 0

    monkeypatch.setattr(process_main, "run_scheduler", fake_run)
    for argv in (["run"], ["run", "--no-request-thread"], ["run", "--request-thread"]):
        assert CliRunner().invoke(app, argv).exit_code == 0
    assert got == [False, False, True]


async def test_the_runtime_builds_and_stops_the_thread(tmp_path: Path) -> None:
    from py_scheduler.app.process import lifecycle

    cfg = kubeconfig_file(tmp_path, server="http://127.0.0.1:9")

    async def serve(kube: Kube, stop: asyncio.Event) -> int:
        await stop.wait()
        return 0

    rt = lifecycle.Runtime(kubeconfig=cfg, serve=serve, qps=5, burst=10, stop=asyncio.Event(), request_thread=True)
    await lifecycle.startup(memo=rt)
    assert rt.kube is not None and rt.kube.thread is not None
    thread = rt.kube.thread
    await lifecycle.cleanup(memo=rt)
    assert not thread._thread.is_alive()


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
