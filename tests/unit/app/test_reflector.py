"""The Pod reflector without a cluster: line splitting of a watch body (split and huge lines), the
adapter's watch against a local HTTP server, and the LIST/WATCH state machine against a fake stream
(bookmarks, a watch the server ends, 410 as an ERROR event or as the HTTP status, a broken
connection, stop). The real API server is exercised by tests/e2e/test_watch_reflector.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
import pytest
from aiohttp import web
from kubernetes_asyncio import client as k8s_client

from py_scheduler.app.client.informers import KINDS, KINDS_BY_NAME, Informers, ObjectStore
from py_scheduler.app.client.kube import Kube
from py_scheduler.app.client.reflector import Reflector
from py_scheduler.app.client.wire import KubeError, split_lines
from py_scheduler.queue.scheduling_queue import ACTIVE_Q
from tests.unit.app.fakes import FakeKube
from tests.unit.app.test_informers import handlers, node, pod

POD = KINDS_BY_NAME["Pod"]
PODS = POD.list_path

Obj = dict[str, Any]


async def _chunks(*parts: bytes) -> AsyncIterator[bytes]:
    for p in parts:
        yield p


async def _collect(it: AsyncIterator[bytes]) -> list[bytes]:
    return [x async for x in it]


async def wait_until(pred: Callable[[], bool], timeout: float = 5.0) -> None:
    async def poll() -> None:
        while not pred():
            await asyncio.sleep(0.005)

    await asyncio.wait_for(poll(), timeout=timeout)


# -- split_lines ---------------------------------------------------------------------------------


async def test_split_lines_joins_records_split_across_chunks() -> None:
    got = await _collect(split_lines(_chunks(b'{"a":', b'1}\n{"b"', b":2}\n\n", b'{"c":3}')))
    assert got == [b'{"a":1}', b'{"b":2}', b'{"c":3}']


async def test_split_lines_accepts_a_huge_record_in_small_chunks() -> None:
    big = b'{"x":"' + b"y" * 3_000_000 + b'"}'
    stream = big + b"\n" + b'{"z":1}\n'
    got = await _collect(split_lines(_chunks(*(stream[i:i + 4096] for i in range(0, len(stream), 4096)))))
    assert got == [big, b'{"z":1}']


# -- Kube.watch over real HTTP -------------------------------------------------------------------


async def _serve(handler: Callable[[web.Request], Any]) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_get(PODS, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"


def _kube(host: str) -> Kube:
    cfg = k8s_client.Configuration()
    cfg.host = host
    return Kube(k8s_client.ApiClient(configuration=cfg), qps=0)


async def test_kube_watch_streams_events_including_lines_over_aiohttp_readline_limit() -> None:
    big_pod = pod("big", 7)
    big_pod["metadata"]["annotations"] = {"blob": "x" * 400_000}  # > aiohttp's 128 KiB line limit
    seen_query: dict[str, str] = {}

    async def handler(request: web.Request) -> web.StreamResponse:
        seen_query.update(request.query)
        resp = web.StreamResponse()
        await resp.prepare(request)
        for ev in ({"type": "ADDED", "object": pod("a", 5)}, {"type": "MODIFIED", "object": big_pod},
                   {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}}):
            data = orjson.dumps(ev) + b"\n"
            for i in range(0, len(data), 50_000):  # several chunks per line
                await resp.write(data[i:i + 50_000])
        await resp.write_eof()
        return resp

    runner, host = await _serve(handler)
    kube = _kube(host)
    try:
        events = [ev async for ev in kube.watch(PODS, {"resourceVersion": "4", "allowWatchBookmarks": True,
                                                       "fieldSelector": POD.field_selector})]
    finally:
        await kube.close()
        await runner.cleanup()
    assert [e["type"] for e in events] == ["ADDED", "MODIFIED", "BOOKMARK"]
    assert events[1]["object"]["metadata"]["annotations"]["blob"] == "x" * 400_000
    assert seen_query["watch"] == "true" and seen_query["resourceVersion"] == "4"
    assert seen_query["allowWatchBookmarks"] == "true" and seen_query["fieldSelector"] == POD.field_selector


async def test_kube_watch_refused_with_410_raises_the_status() -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.json_response({"kind": "Status", "code": 410, "reason": "Expired",
                                  "message": "too old resource version: 4 (90)"}, status=410)

    runner, host = await _serve(handler)
    kube = _kube(host)
    try:
        with pytest.raises(KubeError) as err:
            async for _ in kube.watch(PODS, {"resourceVersion": "4"}):
                pass
    finally:
        await kube.close()
        await runner.cleanup()
    assert err.value.status == 410 and err.value.reason == "Expired"


async def test_kube_watch_broken_mid_stream_is_a_connection_error() -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        await resp.write(orjson.dumps({"type": "ADDED", "object": pod("a", 5)}) + b"\n{\"type\": \"MODI")
        assert request.transport is not None
        request.transport.close()  # the connection drops in the middle of an event
        return resp

    runner, host = await _serve(handler)
    kube = _kube(host)
    got: list[Obj] = []
    try:
        with pytest.raises(KubeError) as err:
            async for ev in kube.watch(PODS, {}):
                got.append(ev)
    finally:
        await kube.close()
        await runner.cleanup()
    assert [e["type"] for e in got] == ["ADDED"]
    assert err.value.status == 0


# -- Reflector state machine ---------------------------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.deltas: list[tuple[str | None, str | None]] = []
        self.gaps: list[str] = []
        self.ends: list[tuple[int, bool]] = []

    def on_delta(self, wk: Any, old: Obj | None, new: Obj | None) -> None:
        name = lambda o: None if o is None else f"{o['metadata']['name']}@{o['metadata']['resourceVersion']}"  # noqa: E731
        self.deltas.append((name(old), name(new)))


def _reflector(kube: FakeKube, rec: Recorder, store: ObjectStore | None = None) -> Reflector:
    return Reflector(kube, POD, store if store is not None else ObjectStore(), rec.on_delta,  # type: ignore[arg-type]
                     on_relist_start=rec.gaps.append, on_relist_end=lambda n, ok: rec.ends.append((n, ok)),
                     min_watch_timeout=60, backoff_initial=0.01, backoff_max=0.02, rand=lambda: 0.5)


async def _running(r: Reflector) -> tuple[asyncio.Event, asyncio.Task[None]]:
    stop = asyncio.Event()
    task = asyncio.ensure_future(r.run(stop))
    await asyncio.wait_for(r.listed.wait(), timeout=5)
    return stop, task


async def _stop(stop: asyncio.Event, task: asyncio.Task[None]) -> None:
    stop.set()
    await asyncio.wait_for(task, timeout=2)


async def test_lists_in_pages_then_watches_from_the_list_rv() -> None:
    kube = FakeKube()
    kube.lists[PODS] = ([pod(f"p{i}", 10 + i) for i in range(5)], "20")
    rec = Recorder()
    r = _reflector(kube, rec)
    r.page_limit = 2
    stop, task = await _running(r)
    try:
        await wait_until(lambda: len(kube.watch_calls) == 1)
        path, q = kube.watch_calls[0]
        assert path == PODS and q["resourceVersion"] == "20" and q["allowWatchBookmarks"] is True
        assert q["timeoutSeconds"] == 90 and q["fieldSelector"] == POD.field_selector
        assert len(r.store.list_kind("Pod")) == 5 and len(rec.deltas) == 5
        feed = kube.watch_feed(PODS)
        feed.put_nowait({"type": "ADDED", "object": pod("new", 21)})
        feed.put_nowait({"type": "MODIFIED", "object": pod("p0", 22, node="n1")})
        feed.put_nowait({"type": "DELETED", "object": pod("p1", 23)})
        await wait_until(lambda: len(rec.deltas) == 8)
        assert rec.deltas[5:] == [(None, "new@21"), ("p0@10", "p0@22"), ("p1@11", None)]
        assert r.last_rv == "23"
    finally:
        await _stop(stop, task)


async def test_bookmark_moves_only_the_resource_version_and_a_closed_watch_resumes_from_it() -> None:
    kube = FakeKube()
    kube.lists[PODS] = ([pod("a", 5)], "5")
    rec = Recorder()
    r = _reflector(kube, rec)
    stop, task = await _running(r)
    try:
        feed = kube.watch_feed(PODS)
        feed.put_nowait({"type": "ADDED", "object": pod("b", 6)})
        feed.put_nowait({"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": {"resourceVersion": "40"}}})
        feed.put_nowait(None)  # the server ends the watch (timeoutSeconds)
        await wait_until(lambda: len(kube.watch_calls) == 2)
        assert kube.watch_calls[1][1]["resourceVersion"] == "40"
        assert kube.list_calls == [PODS]  # no re-list
        assert sorted(o["metadata"]["name"] for o in r.store.list_kind("Pod")) == ["a", "b"]
        assert rec.deltas == [(None, "a@5"), (None, "b@6")] and rec.gaps == []
    finally:
        await _stop(stop, task)


@pytest.mark.parametrize("gone", ["error-event", "http-410"])
async def test_410_relists_and_reconciles_what_vanished(gone: str) -> None:
    kube = FakeKube()
    kube.lists[PODS] = ([pod("a", 5), pod("b", 6)], "6")
    rec = Recorder()
    r = _reflector(kube, rec)
    stop, task = await _running(r)
    try:
        await wait_until(lambda: len(kube.watch_calls) == 1)
        # while the watch was away: b deleted, c created, a bound
        kube.lists[PODS] = ([pod("a", 30, node="n1"), pod("c", 31)], "40")
        feed = kube.watch_feed(PODS)
        if gone == "error-event":
            feed.put_nowait({"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired",
                                                         "message": "too old resource version: 6 (35)"}})
        else:
            feed.put_nowait(KubeError(410, "Expired", "too old resource version: 6 (35)", "WATCH", PODS))
        await wait_until(lambda: len(kube.watch_calls) == 2)
        assert kube.list_calls == [PODS, PODS]
        assert kube.watch_calls[1][1]["resourceVersion"] == "40"
        assert rec.gaps and "410" in rec.gaps[0] and rec.ends == [(3, True)]
        assert sorted(rec.deltas[2:], key=str) == sorted([("a@5", "a@30"), (None, "c@31"), ("b@6", None)], key=str)
        assert {o["metadata"]["name"] for o in r.store.list_kind("Pod")} == {"a", "c"}
    finally:
        await _stop(stop, task)


async def test_broken_connection_backs_off_and_rewatches_without_relisting() -> None:
    kube = FakeKube()
    kube.lists[PODS] = ([pod("a", 5)], "5")
    rec = Recorder()
    r = _reflector(kube, rec)
    stop, task = await _running(r)
    try:
        feed = kube.watch_feed(PODS)
        feed.put_nowait({"type": "MODIFIED", "object": pod("a", 8)})
        feed.put_nowait(KubeError(0, "ClientPayloadError", "connection reset", "WATCH", PODS))
        await wait_until(lambda: len(kube.watch_calls) == 3 or len(kube.watch_calls) == 2)
        assert kube.watch_calls[1][1]["resourceVersion"] == "8"
        assert kube.list_calls == [PODS]
        feed.put_nowait({"type": "ERROR", "object": {"kind": "Status", "code": 500, "message": "internal"}})
        await wait_until(lambda: len(kube.watch_calls) == 3)
        assert kube.list_calls == [PODS] and rec.gaps == []
    finally:
        await _stop(stop, task)


async def test_failing_initial_list_is_retried_and_stop_is_prompt() -> None:
    kube = FakeKube()  # no Pod list yet: the LIST 404s
    rec = Recorder()
    r = _reflector(kube, rec)
    stop = asyncio.Event()
    task = asyncio.ensure_future(r.run(stop))
    await wait_until(lambda: len(kube.list_calls) >= 2)
    assert not r.listed.is_set()
    kube.lists[PODS] = ([pod("a", 5)], "5")
    await asyncio.wait_for(r.listed.wait(), timeout=5)
    await wait_until(lambda: len(kube.watch_calls) == 1)
    await _stop(stop, task)  # the watch blocks on the feed: stop cancels it


# -- Informers with the reflector ----------------------------------------------------------------


class CountingEvent(asyncio.Event):
    def __init__(self) -> None:
        super().__init__()
        self.clears = 0

    def clear(self) -> None:
        self.clears += 1
        super().clear()


async def test_informers_sync_from_the_reflector_and_a_pod_410_reconciles_every_kind() -> None:
    h, cache, queue = handlers()
    kube = FakeKube()
    for wk in KINDS:
        kube.lists[wk.list_path] = ([], "1")
    kube.lists["/api/v1/nodes"] = ([node("keep", 1), node("gone", 2)], "2")
    kube.lists[PODS] = ([pod("bound", 3, node="keep"), pod("pending", 4)], "4")
    inf = Informers(kube, h, resync_period=0)  # type: ignore[arg-type]
    inf.consistent = CountingEvent()
    stop = asyncio.Event()
    task = asyncio.ensure_future(inf.run(stop))
    try:
        await asyncio.wait_for(inf.synced.wait(), timeout=5)
        assert sorted(kube.list_calls) == sorted(wk.list_path for wk in KINDS)  # start-up: every kind once
        assert inf.pod("default", "pending") is not None and queue.where("default", "pending") == ACTIVE_Q
        assert cache.pod_count() == 1
        assert sorted(cache.node_names()) == ["gone", "keep"]
        # a gap: the Pod watch breaks (after every kind's start-up LIST), Node "gone" and Pod "bound"
        # are deleted meanwhile; the Pods' reconnect gets 410
        kube.watch_feed(PODS).put_nowait(KubeError(0, "ServerDisconnectedError", "", "WATCH", PODS))
        await wait_until(lambda: inf.reflectors["Pod"].watches == 2)
        kube.lists["/api/v1/nodes"] = ([node("keep", 1)], "9")
        kube.lists[PODS] = ([pod("pending", 4)], "9")
        kube.watch_feed(PODS).put_nowait({"type": "ERROR", "object": {"code": 410, "reason": "Expired"}})
        await wait_until(lambda: inf.consistent.clears == 1 and inf.consistent.is_set())  # type: ignore[attr-defined]
        assert cache.node_names() == ["keep"]  # the Node LIST was part of the reconcile
        assert inf.pod("default", "bound") is None and cache.pod_count() == 0
        # the Pods' re-list after the 410, then every other kind once (their watches broke too)
        assert kube.list_calls[len(KINDS)] == PODS
        assert sorted(kube.list_calls[len(KINDS):]) == sorted(wk.list_path for wk in KINDS)
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=5)
    assert all(t.done() for t in inf._reflector_tasks.values())
