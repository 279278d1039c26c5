"""A watch gap (kopf or the Pod reflector re-lists after ``410 Gone``) is reconciled before anything is scheduled again.

Reproduces the fault suite's finding (tests/e2e/faults/test_faults.py::test_watch_gap_410_gone):
a Node deleted while the watches were down was never removed from the cache - the Node kind's watch
had delivered no event since start-up, so its re-list was taken for kopf's initial listing - and
Pods re-listed in the same gap were bound to the deleted Node within the second before any
reconcile. Now a second listing burst of a kind is a re-list, it reconciles every kind, and the
scheduling loop pauses (``Informers.consistent``) until that is done. (The Pod reflector's own
410 path: tests/unit/app/test_reflector.py.)
"""

from __future__ import annotations

import asyncio
import time

from py_scheduler.app.informers import KINDS, Informers
from tests.unit.app.fakes import FakeKube
from tests.unit.app.test_informers import handlers, node, pod
from tests.unit.app.test_loop import Harness


def _kube_listing_everything() -> FakeKube:
    kube = FakeKube()
    for wk in KINDS:
        kube.lists[wk.list_path] = ([], "1")
    return kube


def test_second_listing_burst_of_a_quiet_kind_is_a_relist() -> None:
    h, _, _ = handlers()
    inf = Informers(FakeKube(), h)  # type: ignore[arg-type]
    inf.on_event("Node", None, node("n1", 1))  # kopf's initial listing (before our sync)
    inf.synced.set()
    inf.consistent.set()
    inf._synced_at = time.monotonic()
    inf.on_event("Node", None, node("n1", 1))  # same burst: still the initial listing
    assert inf._listing_seen == {} and inf.consistent.is_set()
    inf._last_listing["Node"] = time.monotonic() - 5 * inf.relist_quiet  # that burst ended a while ago
    inf.on_event("Node", None, node("n1", 1))  # no watch event ever, but a new burst: a re-list
    assert "Node" in inf._listing_seen
    assert not inf.consistent.is_set()


async def test_relist_reconciles_every_kind_then_resumes() -> None:
    h, cache, _ = handlers()
    kube = _kube_listing_everything()
    kube.lists["/api/v1/nodes"] = ([node("keep", 1), node("gone", 2)], "2")
    inf = Informers(kube, h, relist_quiet=0.05, resync_period=0)  # type: ignore[arg-type]
    stop = asyncio.Event()
    task = asyncio.ensure_future(inf.run(stop))
    try:
        await asyncio.wait_for(inf.synced.wait(), timeout=5)
        assert inf.consistent.is_set() and sorted(cache.node_names()) == ["gone", "keep"]
        # the gap: Node "gone" deleted, Pod "p" created; only kopf's Service watch re-lists (its
        # watch had run); the Pods come through their reflector, which has seen no 410 yet
        kube.lists["/api/v1/nodes"] = ([node("keep", 1)], "9")
        kube.lists["/api/v1/pods"] = ([pod("p", 8)], "9")
        inf._watching.add("Service")
        inf.on_event("Service", None, {"metadata": {"name": "s", "namespace": "default", "resourceVersion": "7"}})
        assert not inf.consistent.is_set()
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
    inf = Informers(kube, h, relist_quiet=0.05, resync_period=0)  # type: ignore[arg-type]
    stop = asyncio.Event()
    task = asyncio.ensure_future(inf.run(stop))
    try:
        await asyncio.wait_for(inf.synced.wait(), timeout=5)
        del kube.lists["/api/v1/services"]  # Services cannot be listed right now
        kube.lists["/api/v1/nodes"] = ([node("keep", 1)], "9")
        inf._watching.add("Node")
        inf.on_event("Node", None, node("keep", 1))
        await asyncio.wait_for(inf.consistent.wait(), timeout=5)
        assert cache.node_names() == ["keep"]
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=5)
