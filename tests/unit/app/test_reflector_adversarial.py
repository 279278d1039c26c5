"""Adversarial tests of the Pod reflector (``py_scheduler.app.client.reflector``) and its wiring into
:class:`~py_scheduler.app.client.informers.Informers`, read against client-go's ``tools/cache/reflector.go``
and ``tools/pager/pager.go``: failures of the watch request (401/403/429/500/410, connection),
watches the server ends at once, malformed watch events and LIST items, a ``continue`` token that
expires in the middle of a paged LIST, a stop during LIST paging, a re-LIST racing the watch, a
rotating bearer token, and the ``consistent`` flag (scheduling paused during a re-list) set again
whatever happens while the re-list runs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from aiohttp import web
from kubernetes_asyncio import client as k8s_client

from py_scheduler.app.client.informers import KINDS, KINDS_BY_NAME, Informers, ObjectStore
from py_scheduler.app.client.kube import Kube
from py_scheduler.app.client.reflector import Reflector
from py_scheduler.app.client.wire import KubeError
from tests.unit.app.fakes import FakeKube
from tests.unit.app.test_informers import handlers, node, pod
from tests.unit.app.test_reflector import Recorder, _reflector, _running, _serve, _stop, wait_until

POD = KINDS_BY_NAME["Pod"]
PODS = POD.list_path
NODES = KINDS_BY_NAME["Node"].list_path

Obj = dict[str, Any]


class GatedKube(FakeKube):
    """A FakeKube whose paged LIST can fail at a given page (``fail_at``: page index -> error, used
    once) and wait on a gate before a given page (``gate_at``: page index -> Event), and whose
    LIST of a path can block on a gate before its first page (``object_gates``: every kind's re-list
    goes through its reflector's paged LIST)."""

    def __init__(self) -> None:
        super().__init__()
        self.fail_at: dict[int, KubeError] = {}
        self.gate_at: dict[int, asyncio.Event] = {}
        self.at_gate: dict[int, asyncio.Event] = {}
        self.list_error: KubeError | None = None
        self.object_gates: dict[str, asyncio.Event] = {}
        self.at_object_gate: dict[str, asyncio.Event] = {}
        self.page_requests: list[int] = []

    async def list_pages(self, path: str, *, limit: int = 500, **_: Any) -> AsyncIterator[tuple[list[Obj], str]]:
        self.list_calls.append(path)
        gate = self.object_gates.get(path)
        if gate is not None:
            self.at_object_gate.setdefault(path, asyncio.Event()).set()
            await gate.wait()
        if self.list_error is not None and path == self.list_error.path:
            raise self.list_error
        items, rv = await FakeKube.list_objects(self, path)
        for page, i in enumerate(range(0, max(len(items), 1), limit)):
            self.page_requests.append(page)
            if page in self.gate_at:
                self.at_gate.setdefault(page, asyncio.Event()).set()
                await self.gate_at[page].wait()
            err = self.fail_at.pop(page, None)
            if err is not None:
                raise err
            yield items[i:i + limit], rv


def names(store: ObjectStore) -> set[str]:
    return {o["metadata"]["name"] for o in store.list_kind("Pod")}


# -- the watch request fails ---------------------------------------------------------------------


@pytest.mark.parametrize("status,reason", [(401, "Unauthorized"), (403, "Forbidden"), (429, "TooManyRequests"),
                                           (500, "InternalError"), (0, "ClientConnectorError")])
async def test_watch_refused_backs_off_and_rewatches_from_the_last_rv_without_relisting(
        status: int, reason: str) -> None:
    kube = FakeKube()
    kube.lists[PODS] = ([pod("a", 5)], "5")
    rec = Recorder()
    r = _reflector(kube, rec)
    delays: list[float] = []
    backoff = r._backoff

    async def recording_backoff(delay: float) -> float:
        delays.append(delay)
        return await backoff(delay)

    r._backoff = recording_backoff  # type: ignore[method-assign]
    stop, task = await _running(r)
    try:
        feed = kube.watch_feed(PODS)
        feed.put_nowait({"type": "MODIFIED", "object": pod("a", 9)})
        feed.put_nowait(KubeError(status, reason, "refused", "WATCH", PODS))
        feed.put_nowait(KubeError(status, reason, "refused", "WATCH", PODS))
        await wait_until(lambda: len(kube.watch_calls) == 3)
        assert [q["resourceVersion"] for _, q in kube.watch_calls] == ["5", "9", "9"]
        assert delays == [0.01, 0.02]  # backing off (doubling), not spinning
        assert kube.list_calls == [PODS] and rec.gaps == []
        feed.put_nowait({"type": "ADDED", "object": pod("b", 10)})
        await wait_until(lambda: names(r.store) == {"a", "b"})
    finally:
        await _stop(stop, task)


async def test_watch_ending_at_once_backs_off_and_keeps_its_resource_version() -> None:
    kube = FakeKube()
    kube.lists[PODS] = ([pod("a", 5)], "5")
    rec = Recorder()
    r = _reflector(kube, rec)
    r.backoff_max = 0.04
    delays: list[float] = []
    backoff = r._backoff

    async def recording_backoff(delay: float) -> float:
        delays.append(delay)
        return await backoff(delay)

    r._backoff = recording_backoff  # type: ignore[method-assign]
    stop, task = await _running(r)
    try:
        feed = kube.watch_feed(PODS)
        for _ in range(4):
            feed.put_nowait(None)  # the server closes each watch before any event
        await wait_until(lambda: len(kube.watch_calls) == 5)
        assert delays == [0.01, 0.02, 0.04, 0.04]
        assert {q["resourceVersion"] for _, q in kube.watch_calls} == {"5"}
        assert kube.list_calls == [PODS] and rec.gaps == []
        # a bookmark alone is not an event but moves the resourceVersion
        feed.put_nowait({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "77"}}})
        feed.put_nowait(None)
        await wait_until(lambda: len(kube.watch_calls) == 6)
        assert kube.watch_calls[-1][1]["resourceVersion"] == "77"
    finally:
        await _stop(stop, task)


@pytest.mark.parametrize("error", [
    {"code": 410, "reason": "Expired", "message": "too old resource version: 5 (9)"},
    {"reason": "Expired", "message": "the resourceVersion is expired"},
    {"code": 500, "message": "too old resource version: 5 (9)"},
])
async def test_expired_error_event_in_any_form_relists(error: Obj) -> None:
    kube = FakeKube()
    kube.lists[PODS] = ([pod("a", 5)], "5")
    rec = Recorder()
    r = _reflector(kube, rec)
    stop, task = await _running(r)
    try:
        kube.lists[PODS] = ([pod("b", 12)], "12")
        kube.watch_feed(PODS).put_nowait({"type": "ERROR", "object": {"kind": "Status", **error}})
        await wait_until(lambda: len(kube.watch_calls) == 2)
        assert kube.watch_calls[1][1]["resourceVersion"] == "12" and names(r.store) == {"b"}
        assert rec.ends == [(2, True)]
    finally:
        await _stop(stop, task)


# -- malformed events and LIST items -------------------------------------------------------------


async def test_malformed_watch_events_are_skipped_and_the_reflector_keeps_running() -> None:
    kube = FakeKube()
    kube.lists[PODS] = ([pod("a", 5)], "5")
    rec = Recorder()
    r = _reflector(kube, rec)
    stop, task = await _running(r)
    try:
        feed = kube.watch_feed(PODS)
        for bad in ([1, 2], "text", {"type": "ADDED"}, {"type": "ADDED", "object": "x"},
                    {"type": "ADDED", "object": {"metadata": "not-an-object", "spec": {}}},
                    {"type": "MODIFIED", "object": {"metadata": ["x"]}},
                    {"type": "ADDED", "object": {"kind": "Pod", "spec": {}}},  # no metadata at all
                    {"type": "DELETED", "object": {"metadata": None}},
                    {"type": "WHATEVER", "object": pod("z", 6)}):
            feed.put_nowait(bad)
        feed.put_nowait({"type": "ADDED", "object": pod("b", 7)})
        await wait_until(lambda: names(r.store) == {"a", "b"} or task.done())
        assert not task.done(), task.exception()
        assert len(r.store.list_kind("Pod")) == 2  # nothing stored under an empty key
        assert r.last_rv == "7" and kube.list_calls == [PODS]
    finally:
        await _stop(stop, task)


async def test_malformed_list_items_are_skipped_and_the_list_completes() -> None:
    kube = FakeKube()
    kube.lists[PODS] = ([pod("a", 5), {"metadata": "x"}, "junk", {"kind": "Pod"}, pod("b", 6)], "6")  # type: ignore[list-item]
    rec = Recorder()
    r = _reflector(kube, rec)
    stop, task = await _running(r)
    try:
        assert names(r.store) == {"a", "b"} and len(r.store.list_kind("Pod")) == 2
        await wait_until(lambda: len(kube.watch_calls) == 1)
        assert kube.watch_calls[0][1]["resourceVersion"] == "6"
    finally:
        await _stop(stop, task)


# -- paged LIST: continue expiry, stop, racing the watch ---------------------------------------


async def test_continue_token_expiry_restarts_the_list_and_deletes_nothing_on_a_partial_list() -> None:
    kube = GatedKube()
    kube.lists[PODS] = ([pod(f"p{i}", 10 + i) for i in range(6)], "20")
    rec = Recorder()
    r = _reflector(kube, rec)
    store = r.store
    r.page_limit = 2
    stop, task = await _running(r)
    try:
        await wait_until(lambda: len(kube.watch_calls) == 1)
        # a gap: the re-list's continue token expires after its first page (etcd compacted meanwhile)
        kube.fail_at[1] = KubeError(410, "Expired", "The provided continue parameter is too old to display a "
                                    "consistent list result.", "GET", PODS)
        kube.lists[PODS] = ([pod(f"p{i}", 30 + i) for i in range(1, 6)] + [pod("q", 40)], "41")
        kube.page_requests.clear()
        kube.watch_feed(PODS).put_nowait(KubeError(410, "Expired", "too old resource version", "WATCH", PODS))
        await wait_until(lambda: len(kube.watch_calls) == 2)
        assert kube.page_requests == [0, 1, 0, 1, 2]  # the list started over from its first page
        assert rec.ends == [(0, False), (5, True)]  # p1, p2 applied by the failed try; p3-p5, q and p0's deletion
        assert names(store) == {"p1", "p2", "p3", "p4", "p5", "q"}
        assert kube.watch_calls[1][1]["resourceVersion"] == "41"
        deleted = [old for old, new in rec.deltas if new is None]
        assert deleted == ["p0@10"]
    finally:
        await _stop(stop, task)


async def test_stop_during_list_paging_is_prompt_and_deletes_nothing() -> None:
    kube = GatedKube()
    kube.lists[PODS] = ([pod(f"p{i}", 10 + i) for i in range(4)], "20")
    rec = Recorder()
    r = _reflector(kube, rec)
    store = r.store
    r.page_limit = 2
    stop, task = await _running(r)
    await wait_until(lambda: len(kube.watch_calls) == 1)
    await _stop(stop, task)
    # run again; the watch is gone (410): the re-list is stopped in the middle of its pages
    kube.gate_at[1] = asyncio.Event()
    kube.lists[PODS] = ([pod("p0", 30)], "31")
    kube.watch_feed(PODS).put_nowait(KubeError(410, "Expired", "too old", "WATCH", PODS))
    stop = asyncio.Event()
    task = asyncio.ensure_future(r.run(stop))
    kube.lists[PODS] = ([pod("p0", 30), pod("p1", 11), pod("p9", 32)], "33")
    await asyncio.wait_for(kube.at_gate.setdefault(1, asyncio.Event()).wait(), timeout=5)
    await _stop(stop, task)
    assert names(store) == {"p0", "p1", "p2", "p3"}  # page 0 applied, nothing swept
    assert r.last_rv == "20"  # still the expired one: the next run lists again
    kube.gate_at.clear()
    stop = asyncio.Event()
    task = asyncio.ensure_future(r.run(stop))
    kube.watch_feed(PODS).put_nowait(KubeError(410, "Expired", "too old", "WATCH", PODS))
    await wait_until(lambda: r.last_rv == "33")
    assert names(store) == {"p0", "p1", "p9"}
    await _stop(stop, task)


async def test_a_relist_racing_the_watch_never_moves_the_resource_version_back() -> None:
    kube = GatedKube()
    kube.lists[PODS] = ([pod("a", 5), pod("b", 6)], "6")
    rec = Recorder()
    r = _reflector(kube, rec)
    store = r.store
    r.page_limit = 1
    stop, task = await _running(r)
    try:
        await wait_until(lambda: len(kube.watch_calls) == 1)
        # a resync re-list taken at resourceVersion 6 is slow; meanwhile the watch moves to 9
        kube.gate_at[1] = asyncio.Event()
        relist = asyncio.ensure_future(r.relist())
        await asyncio.wait_for(kube.at_gate.setdefault(1, asyncio.Event()).wait(), timeout=5)
        feed = kube.watch_feed(PODS)
        feed.put_nowait({"type": "DELETED", "object": pod("b", 8)})
        feed.put_nowait({"type": "ADDED", "object": pod("c", 9)})
        await wait_until(lambda: r.last_rv == "9")
        kube.gate_at[1].set()
        await asyncio.wait_for(relist, timeout=5)
        assert names(store) == {"a", "c"}  # b (deleted at 8) not resurrected by the list at 6; c kept
        assert r.last_rv == "9"
        feed.put_nowait(None)  # the server ends the watch: resume from 9, not 6
        await wait_until(lambda: len(kube.watch_calls) == 2)
        assert kube.watch_calls[1][1]["resourceVersion"] == "9"
    finally:
        await _stop(stop, task)


# -- the bearer token rotates --------------------------------------------------------------------


async def test_watch_reconnects_with_the_rotated_token() -> None:
    seen: list[str] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        auth = request.headers.get("Authorization", "")
        seen.append(auth)
        if auth != "Bearer token-2":
            return web.json_response({"kind": "Status", "code": 401, "reason": "Unauthorized"}, status=401)
        resp = web.StreamResponse()
        await resp.prepare(request)
        await resp.write(orjson.dumps({"type": "ADDED", "object": pod("a", 5)}) + b"\n")
        await resp.write_eof()
        return resp

    runner, host = await _serve(handler)
    cfg = k8s_client.Configuration()
    cfg.host = host
    cfg.api_key = {"BearerToken": "token-1"}
    cfg.api_key_prefix = {"BearerToken": "Bearer"}
    rotations = iter(["token-2"])

    def refresh(c: k8s_client.Configuration) -> None:  # the in-cluster loader's hook: re-read the token file
        c.api_key["BearerToken"] = next(rotations, c.api_key["BearerToken"])

    kube = Kube(k8s_client.ApiClient(configuration=cfg), qps=0)
    try:
        with pytest.raises(KubeError) as err:
            async for _ in kube.watch(PODS, {}):
                pass
        assert err.value.status == 401
        cfg.refresh_api_key_hook = refresh  # the token file changed; the hook runs on every request
        events = [ev async for ev in kube.watch(PODS, {})]
    finally:
        await kube.close()
        await runner.cleanup()
    assert seen == ["Bearer token-1", "Bearer token-2"]
    assert [e["type"] for e in events] == ["ADDED"]


async def test_watch_line_that_is_not_json_ends_the_watch_after_the_good_events() -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        await resp.write(orjson.dumps({"type": "ADDED", "object": pod("a", 5)}) + b"\n<html>proxy error</html>\n")
        await resp.write(orjson.dumps({"type": "ADDED", "object": pod("b", 6)}) + b"\n")
        await resp.write_eof()
        return resp

    runner, host = await _serve(handler)
    cfg = k8s_client.Configuration()
    cfg.host = host
    kube = Kube(k8s_client.ApiClient(configuration=cfg), qps=0)
    got: list[Obj] = []
    try:
        with pytest.raises(KubeError) as err:
            async for ev in kube.watch(PODS, {}):
                got.append(ev)
    finally:
        await kube.close()
        await runner.cleanup()
    assert [e["object"]["metadata"]["name"] for e in got] == ["a"]
    assert err.value.status == 0 and err.value.reason == "DecodeError"  # the reflector re-watches from rv 5


# -- Informers: the consistent flag --------------------------------------------------------------


def _informers(kube: FakeKube, **kw: Any) -> tuple[Informers, Any, Any]:
    h, cache, queue = handlers()
    for wk in KINDS:
        kube.lists.setdefault(wk.list_path, ([], "1"))
    inf = Informers(kube, h, **kw)  # type: ignore[arg-type]
    for r in inf.reflectors.values():
        r.backoff_initial, r.backoff_max = 0.01, 0.02
    return inf, cache, queue


async def test_consistent_is_set_again_after_a_relist_that_fails_repeatedly() -> None:
    kube = GatedKube()
    kube.lists[PODS] = ([pod("a", 5)], "5")
    inf, _, _ = _informers(kube, resync_period=0)
    stop = asyncio.Event()
    task = asyncio.ensure_future(inf.run(stop))
    try:
        await asyncio.wait_for(inf.consistent.wait(), timeout=5)
        kube.list_error = KubeError(503, "ServiceUnavailable", "apiserver restarting", "GET", PODS)
        kube.watch_feed(PODS).put_nowait(KubeError(410, "Expired", "too old", "WATCH", PODS))
        await wait_until(lambda: len(kube.list_calls) >= 4)
        assert not inf.consistent.is_set()  # paused while the re-list keeps failing
        kube.lists[PODS] = ([pod("b", 9)], "9")
        kube.list_error = None
        await asyncio.wait_for(inf.consistent.wait(), timeout=5)
        assert inf.pod("default", "a") is None and inf.pod("default", "b") is not None
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=5)


async def test_consistent_is_set_again_when_the_relist_ends_during_a_resync() -> None:
    """A Pod re-list (after 410) that finishes while the informers' loop is busy with its periodic
    resync must still end the pause: its wake-up may not be lost."""
    kube = GatedKube()
    kube.lists[PODS] = ([pod("a", 5)], "5")
    kube.lists[NODES] = ([node("n1", 1)], "1")
    inf, _, _ = _informers(kube, resync_period=0.05)
    stop = asyncio.Event()
    task = asyncio.ensure_future(inf.run(stop))
    try:
        await asyncio.wait_for(inf.consistent.wait(), timeout=5)
        gate = kube.object_gates[NODES] = asyncio.Event()
        await asyncio.wait_for(kube.at_object_gate.setdefault(NODES, asyncio.Event()).wait(), timeout=5)
        inf.resync_period = 3600.0  # the next resync is far away (the default is 10 min)
        # the resync is stuck listing Nodes; the Pod watch gets 410 and the reflector re-lists
        kube.lists[PODS] = ([pod("b", 9)], "9")
        lists = len(kube.list_calls)
        kube.watch_feed(PODS).put_nowait(KubeError(410, "Expired", "too old", "WATCH", PODS))
        await wait_until(lambda: len(kube.list_calls) > lists and inf.pod("default", "b") is not None)
        assert not inf.consistent.is_set()
        await wait_until(lambda: not inf._relisting)
        del kube.object_gates[NODES]
        gate.set()  # the resync goes on (Pods, the other kinds) and ends
        await asyncio.wait_for(inf.consistent.wait(), timeout=3)
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=5)


async def test_many_gaps_in_a_row_end_consistent() -> None:
    kube = GatedKube()
    kube.lists[PODS] = ([pod("a", 5)], "5")
    inf, _, _ = _informers(kube, resync_period=0)
    stop = asyncio.Event()
    task = asyncio.ensure_future(inf.run(stop))
    try:
        await asyncio.wait_for(inf.consistent.wait(), timeout=5)
        feed = kube.watch_feed(PODS)
        for i in range(5):
            kube.lists[PODS] = ([pod(f"g{i}", 10 + i)], str(10 + i))
            feed.put_nowait(KubeError(410, "Expired", "too old", "WATCH", PODS))
            await wait_until(lambda i=i: inf.pod("default", f"g{i}") is not None)  # type: ignore[misc]
        await asyncio.wait_for(inf.consistent.wait(), timeout=3)
        assert [o["metadata"]["name"] for o in inf.store.list_kind("Pod")] == ["g4"]
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=5)



# -- an optional kind whose API is not served ----------------------------------------------------


async def test_an_absent_optional_kind_counts_as_listed_and_is_listed_again_until_served() -> None:
    """DeviceClass (resource.k8s.io) on a cluster without DRA: the LIST's 404 makes the kind empty and
    synced (start-up is not held up), nothing is watched, and the LIST is tried again every
    ``absent_retry`` seconds; once served, its objects arrive and the watch starts."""
    wk = KINDS_BY_NAME["DeviceClass"]
    kube = FakeKube()
    rec = Recorder()
    r = Reflector(kube, wk, ObjectStore(), rec.on_delta, min_watch_timeout=60,  # type: ignore[arg-type]
                  backoff_initial=0.01, backoff_max=0.02, absent_retry=0.01)
    stop, task = await _running(r)
    try:
        assert r.absent and kube.watch_calls == []
        await wait_until(lambda: len(kube.list_calls) >= 3)
        assert kube.watch_calls == []
        kube.lists[wk.list_path] = ([{"metadata": {"name": "gpu", "resourceVersion": "7"}}], "7")
        await wait_until(lambda: len(kube.watch_calls) == 1)
        assert not r.absent and rec.deltas == [(None, "gpu@7")]
        assert kube.watch_calls[0][1]["resourceVersion"] == "7"
    finally:
        await _stop(stop, task)
