"""A watch gap (a reflector re-lists after ``410 Gone``) is reconciled before anything is scheduled again.

Reproduces the fault suite's finding (tests/e2e/faults/test_faults.py::test_watch_gap_410_gone):
a Node deleted while the watches were down was never removed from the cache (then kopf carried the
Nodes, and its re-list was taken for its initial listing), and Pods re-listed in the same gap were
bound to the deleted Node. Now every kind has a reflector that says when it re-lists: the re-list
of any kind turns what vanished into delete events, triggers a re-list of every other kind, and
the scheduling loop pauses (``Informers.consistent``) until that is done. (The reflector's own 410
path: tests/unit/app/test_reflector.py.)
"""

from __future__ import annotations

import asyncio
from collections import Counter

from py_scheduler.app.client.informers import KINDS, Informers
from py_scheduler.app.client.wire import KubeError
from py_scheduler.framework.events import EVENT_NODE_DELETE
from tests.unit.app.fakes import FakeKube
from tests.unit.app.test_informers import handlers, node, pod
from tests.unit.app.test_loop import Harness
from tests.unit.app.test_reflector import wait_until

NODES = "/api/v1/nodes"


def _kube_listing_everything() -> FakeKube:
    kube = FakeKube()
    for wk in KINDS:
        kube.lists[wk.list_path] = ([], "1")
    return kube


async def test_relist_reconciles_every_kind_then_resumes() -> None:
    h, cache, _ = handlers()
    kube = _kube_listing_everything()
    kube.lists["/api/v1/nodes"] = ([node("keep", 1), node("gone", 2)], "2")
    inf = Informers(kube, h, resync_period=0)  # type: ignore[arg-type]
    stop = asyncio.Event()
    task = asyncio.ensure_future(inf.run(stop))
    try:
        await asyncio.wait_for(inf.synced.wait(), timeout=5)
        assert inf.consistent.is_set() and sorted(cache.node_names()) == ["gone", "keep"]
        # the gap: Node "gone" deleted, Pod "p" created; only the Service watch gets 410 so far (the
        # Node and Pod watches resume later, from resourceVersions still in etcd's history)
        kube.lists["/api/v1/nodes"] = ([node("keep", 1)], "9")
        kube.lists["/api/v1/pods"] = ([pod("p", 8)], "9")
        kube.watch_feed("/api/v1/services").put_nowait(KubeError(410, "Expired", "too old", "WATCH", "services"))
        await wait_until(lambda: not inf.consistent.is_set())
        await asyncio.wait_for(inf.consistent.wait(), timeout=5)
        assert cache.node_names() == ["keep"]  # the Node LIST was part of the reconcile
        assert inf.pod("default", "p") is not None  # and the Pods' (through the reflector's re-list)
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=5)


async def test_loop_pauses_while_the_cache_is_inconsistent() -> None:
    harness = Harness()
    consistent = asyncio.Event()
    harness.loop.cache_consistent = consistent
    harness.node("n1")
    harness.pod("a")
    stop = asyncio.Event()
    task = asyncio.ensure_future(harness.loop.run(stop))
    try:
        for _ in range(20):
            await asyncio.sleep(0.01)  # let the loop run a few rounds: it must not pop
        assert not any(c[0] == "bind" for c in harness.kube.calls)
        consistent.set()

        async def bound() -> None:
            while not any(c[0] == "bind" for c in harness.kube.calls):
                await asyncio.sleep(0.01)

        await asyncio.wait_for(bound(), timeout=5)
    finally:
        stop.set()
        harness.queue.close()
        await asyncio.wait_for(task, timeout=5)


async def test_a_failing_list_of_another_kind_does_not_keep_scheduling_paused() -> None:
    h, cache, _ = handlers()
    kube = _kube_listing_everything()
    kube.lists["/api/v1/nodes"] = ([node("keep", 1), node("gone", 2)], "2")
    inf = Informers(kube, h, resync_period=0)  # type: ignore[arg-type]
    stop = asyncio.Event()
    task = asyncio.ensure_future(inf.run(stop))
    try:
        await asyncio.wait_for(inf.synced.wait(), timeout=5)
        del kube.lists["/api/v1/services"]  # Services cannot be listed right now
        kube.lists["/api/v1/nodes"] = ([node("keep", 1)], "9")
        kube.watch_feed(NODES).put_nowait(KubeError(410, "Expired", "too old", "WATCH", NODES))
        await wait_until(lambda: not inf.consistent.is_set())
        await asyncio.wait_for(inf.consistent.wait(), timeout=5)
        assert cache.node_names() == ["keep"]
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=5)


async def test_a_node_deleted_during_a_watch_gap_becomes_a_node_delete_event() -> None:
    """The Node reflector's own 410: the re-LIST lacks a Node the cache holds -> (old, None) ->
    the cache drops it and the queue sees ``NodeDelete`` with the old Node, as a watch DELETED would."""
    h, cache, queue = handlers()
    seen: list[tuple[str, object, object]] = []
    move = queue.move_all_to_active_or_backoff

    def recording(event, old, new, *a):  # type: ignore[no-untyped-def]
        seen.append((event.label(), old, new))
        return move(event, old, new, *a)

    queue.move_all_to_active_or_backoff = recording  # type: ignore[method-assign]
    kube = _kube_listing_everything()
    kube.lists[NODES] = ([node("keep", 1), node("gone", 2)], "2")
    inf = Informers(kube, h, resync_period=0)  # type: ignore[arg-type]
    stop = asyncio.Event()
    task = asyncio.ensure_future(inf.run(stop))
    try:
        await asyncio.wait_for(inf.synced.wait(), timeout=5)
        assert sorted(cache.node_names()) == ["gone", "keep"]
        seen.clear()
        kube.lists[NODES] = ([node("keep", 1)], "9")
        kube.watch_feed(NODES).put_nowait({"type": "ERROR", "object": {"code": 410, "reason": "Expired"}})
        await wait_until(lambda: cache.node_names() == ["keep"])
        deletes = [(old, new) for label, old, new in seen if label == EVENT_NODE_DELETE.label()]
        assert deletes == [(node("gone", 2), None)]
        await asyncio.wait_for(inf.consistent.wait(), timeout=5)
        assert inf.reflectors["Node"].last_rv == "9"
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=5)


async def test_watches_gone_in_turn_relist_each_kind_once() -> None:
    """After a kube-apiserver restart with etcd compacted every watch breaks, then each gets 410 on
    its own reconnect, in turn: the first re-list (Pods) re-lists every other kind; a kind whose 410
    comes later re-lists itself only - the others were listed after its gap began."""
    h, cache, _ = handlers()
    kube = _kube_listing_everything()
    kube.lists[NODES] = ([node("keep", 1), node("gone", 2)], "2")
    inf = Informers(kube, h, resync_period=0)  # type: ignore[arg-type]
    for r in inf.reflectors.values():
        r.backoff_initial = r.backoff_max = 0.01
    stop = asyncio.Event()
    task = asyncio.ensure_future(inf.run(stop))
    try:
        await asyncio.wait_for(inf.synced.wait(), timeout=5)
        assert len(kube.list_calls) == len(KINDS)
        watches = len(kube.watch_calls)
        for wk in KINDS:  # the restart: every watch breaks, each reflector re-watches after its backoff
            kube.watch_feed(wk.list_path).put_nowait(KubeError(0, "ServerDisconnectedError", "", "WATCH", ""))
        await wait_until(lambda: len(kube.watch_calls) == watches + len(KINDS))
        kube.lists[NODES] = ([node("keep", 1)], "9")
        kube.watch_feed("/api/v1/pods").put_nowait(KubeError(410, "Expired", "too old", "WATCH", "pods"))
        await wait_until(lambda: len(kube.list_calls) == 2 * len(KINDS) and inf.consistent.is_set())
        assert cache.node_names() == ["keep"]
        for wk in KINDS:  # the others' 410s arrive later, one by one
            if wk.kind != "Pod":
                kube.watch_feed(wk.list_path).put_nowait(KubeError(410, "Expired", "too old", "WATCH", ""))
        await wait_until(lambda: len(kube.list_calls) >= 3 * len(KINDS) - 1 and inf.consistent.is_set())
        for _ in range(20):
            await asyncio.sleep(0)  # let any further (wrong) re-list start
        # start-up, the Pods' gap (Pods + every other kind), each other kind's own 410: no more
        assert Counter(kube.list_calls) == {wk.list_path: 2 if wk.kind == "Pod" else 3 for wk in KINDS}
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=5)
