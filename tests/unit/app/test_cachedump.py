"""The ``/debug/cache`` dump and the differential checker, without a cluster: a store and cache fed
the way the informers feed them, dumped, and compared with what a LIST would answer."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from py_scheduler.app.client.informers import KINDS, KINDS_BY_NAME, ObjectStore
from py_scheduler.app.scheduling.event_handlers import EventHandlers
from py_scheduler.app.serving.cachedump import PATH, CacheDump, add_routes, process_stats
from py_scheduler.cache.cache import Cache
from py_scheduler.framework.types import PodInfo
from py_scheduler.queue.scheduling_queue import PriorityQueue
from tests.e2e.faults import cachediff
from tests.unit.app.test_informers import node, pod

POD = KINDS_BY_NAME["Pod"]
NODE = KINDS_BY_NAME["Node"]
SVC = KINDS_BY_NAME["Service"]


def _world() -> tuple[ObjectStore, Cache, PriorityQueue, EventHandlers]:
    store, cache = ObjectStore(), Cache()
    queue = PriorityQueue({})
    return store, cache, queue, EventHandlers(cache, queue, {"py-scheduler"})


def _feed(store: ObjectStore, handlers: EventHandlers, wk: Any, obj: dict[str, Any]) -> None:
    delta = store.apply(wk, None, obj)
    assert delta is not None
    handlers.on_delta(wk, *delta)


def _listed(*objs: tuple[str, dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {wk.kind: [] for wk in KINDS}
    for kind, o in objs:
        out[kind].append(copy.deepcopy(o))
    return out


def test_dump_holds_every_kind_the_cache_and_the_process_figures() -> None:
    store, cache, queue, h = _world()
    _feed(store, h, NODE, node("n1", 3))
    _feed(store, h, POD, pod("a", 4, node="n1"))
    _feed(store, h, POD, pod("b", 5))
    _feed(store, h, SVC, {"metadata": {"name": "s", "namespace": "ns", "resourceVersion": "6"}})
    d = CacheDump(store, cache, queue, is_leader=lambda: True).dump()
    assert set(d["informers"]) == {wk.kind for wk in KINDS}
    assert d["informers"]["Pod"] == {"default/a": "4", "default/b": "5"}
    assert d["informers"]["Service"] == {"ns/s": "6"}
    assert d["cache"]["nodes"] == ["n1"]
    assert d["cache"]["pods"] == {"uid-a": {"pod": "default/a", "node": "n1", "assumed": False,
                                            "bindingFinished": False}}
    assert d["queue"]["active"] == 1 and d["leader"] is True
    assert d["process"]["rss_bytes"] > 0 and d["process"]["open_fds"] > 0


async def test_process_stats_counts_the_running_tasks() -> None:
    before = process_stats()["asyncio_tasks"]
    t = asyncio.create_task(asyncio.Event().wait())  # a task that stays pending until cancelled
    try:
        assert process_stats()["asyncio_tasks"] == (before or 0) + 1
    finally:
        t.cancel()


def test_equal_views_have_no_difference_and_an_assumed_pod_in_flight_is_not_one() -> None:
    store, cache, queue, h = _world()
    n1, a, b = node("n1", 3), pod("a", 4, node="n1"), pod("b", 5)
    for wk, o in ((NODE, n1), (POD, a), (POD, b)):
        _feed(store, h, wk, o)
    cache.assume_pod(PodInfo({**b, "spec": {**b["spec"], "nodeName": "n1"}}))  # binding in flight
    d = CacheDump(store, cache, queue, is_leader=lambda: True).dump()
    assert cachediff.differences(d, _listed(("Node", n1), ("Pod", a), ("Pod", b))) == set()
    # the API already has it bound there (the watch event not yet delivered): still fine for the cache
    b_bound = {**b, "spec": {**b["spec"], "nodeName": "n1"}}
    diffs = cachediff.differences(d, _listed(("Node", n1), ("Pod", a), ("Pod", b_bound)))
    assert diffs == set()  # same resourceVersion on purpose: only the cache side is looked at here


def test_every_kind_of_divergence_is_reported() -> None:
    store, cache, queue, h = _world()
    n1, n2, a, b = node("n1", 3), node("n2", 4), pod("a", 5, node="n1"), pod("b", 6)
    for wk, o in ((NODE, n1), (NODE, n2), (POD, a), (POD, b)):
        _feed(store, h, wk, o)
    cache.assume_pod(PodInfo({**b, "spec": {**b["spec"], "nodeName": "n1"}}))
    d = CacheDump(store, cache, queue, is_leader=lambda: True).dump()
    # the API: n2 deleted, a moved on (newer version, another node), b bound elsewhere, c bound unseen
    a2 = {**pod("a", 9, node="n1"), "spec": {**a["spec"], "nodeName": "n3"}}
    b2 = pod("b", 10, node="n3")
    c = pod("c", 11, node="n1")
    got = cachediff.differences(d, _listed(("Node", n1), ("Pod", a2), ("Pod", b2), ("Pod", c)))
    assert got == {
        ("informer:Node", "n2", "4", ""),
        ("cache:Node", "n2", "present", ""),
        ("informer:Pod", "default/a", "5", "9"),
        ("cache:Pod", "uid-a", "n1", "n3"),
        ("informer:Pod", "default/b", "6", "10"),
        ("cache:assumed Pod", "uid-b", "n1", "n3"),
        ("informer:Pod", "default/c", "", "11"),
        ("cache:Pod", "uid-c", "", "n1"),
    }


def test_a_kind_the_replica_does_not_watch_is_not_compared() -> None:
    # GenericWorkload off: the replica neither watches nor dumps PodGroups, and the API's are no divergence
    store, cache, queue, h = _world()
    n1 = node("n1", 3)
    _feed(store, h, NODE, n1)
    d = CacheDump(store, cache, queue, is_leader=lambda: True,
                  kinds=[wk for wk in KINDS if wk.kind != "PodGroup"]).dump()
    assert "PodGroup" not in d["informers"]
    pg = {"metadata": {"name": "g", "namespace": "default", "resourceVersion": "8"}}
    assert cachediff.differences(d, _listed(("Node", n1), ("PodGroup", pg))) == set()
    # watched (dumped, even empty): the same PodGroup is a divergence
    d_on = CacheDump(store, cache, queue, is_leader=lambda: True).dump()
    assert cachediff.differences(d_on, _listed(("Node", n1), ("PodGroup", pg))) == {
        ("informer:PodGroup", "default/g", "", "8")}


async def test_list_all_lists_only_the_kinds_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []

    async def fake_kind(_api: Any, wk: Any) -> list[dict[str, Any]]:
        asked.append(wk.kind)
        return []

    monkeypatch.setattr(cachediff, "list_kind", fake_kind)
    got = await cachediff.list_all(None, {"Node", "Pod"})  # type: ignore[arg-type]
    assert sorted(asked) == ["Node", "Pod"] and set(got) == {"Node", "Pod"}


async def test_check_until_quiet_tolerates_changes_in_flight_but_not_a_persistent_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    n1 = node("n1", 3)
    dump_ok = {"informers": {"Node": {"n1": "3"}}, "cache": {"nodes": ["n1"], "pods": {}}}
    # round 1: the LIST already has n2, the dump not yet (in flight); round 2: both have it
    lists = [_listed(("Node", n1), ("Node", node("n2", 4))), _listed(("Node", n1), ("Node", node("n2", 4)))]
    dumps = [dump_ok, {"informers": {"Node": {"n1": "3", "n2": "4"}}, "cache": {"nodes": ["n1", "n2"], "pods": {}}}]

    async def fake_list(_api: Any, _kinds: Any = None) -> dict[str, list[dict[str, Any]]]:
        return lists.pop(0) if len(lists) > 1 else lists[0]

    async def fetch() -> dict[str, Any]:
        return dumps.pop(0) if len(dumps) > 1 else dumps[0]

    monkeypatch.setattr(cachediff, "list_all", fake_list)
    res = await cachediff.check_until_quiet(fetch, None, settle=0.2, interval=0.01, timeout=5)  # type: ignore[arg-type]
    assert res.clean and res.rounds == 2 and not res.persistent

    # a stale object that never changes: reported once it has persisted ``settle`` seconds
    stale = _listed(("Node", node("n1", 7)))

    async def stale_list(_api: Any, _kinds: Any = None) -> dict[str, list[dict[str, Any]]]:
        return stale

    async def same() -> dict[str, Any]:
        return dump_ok

    monkeypatch.setattr(cachediff, "list_all", stale_list)
    res = await cachediff.check_until_quiet(same, None, settle=0.1, interval=0.01, timeout=5)  # type: ignore[arg-type]
    assert not res.clean and res.persistent == {("informer:Node", "n1", "3", "7")} and res.seconds < 5


async def test_the_route_serves_the_dump_as_json() -> None:
    store, cache, queue, h = _world()
    _feed(store, h, NODE, node("n1", 3))
    app = web.Application()
    add_routes(app, CacheDump(store, cache, queue, is_leader=lambda: False))
    async with TestClient(TestServer(app)) as c:
        r = await c.get(PATH)
        assert r.status == 200
        body = await r.json()
    assert body["cache"]["nodes"] == ["n1"] and body["leader"] is False
    assert body["process"]["asyncio_tasks"] >= 1
