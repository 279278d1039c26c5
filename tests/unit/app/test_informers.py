"""Informers without a cluster: the object store (stale events, tombstones, reconcile after a
re-list), the event routing of ``eventhandlers.go`` into cache, queue and ClusterObjects, the
re-list through a reflector with a fake adapter, and the one table of watched kinds."""

from __future__ import annotations

from typing import Any

import pytest

from py_scheduler.app.client.informers import KINDS, KINDS_BY_NAME, Informers, ObjectStore
from py_scheduler.app.scheduling.event_handlers import EventHandlers
from py_scheduler.cache import kinds as kinds_table
from py_scheduler.cache.cache import Cache
from py_scheduler.cache.snapshot import ClusterObjects
from py_scheduler.framework.events import Resource
from py_scheduler.framework.memo import DEBUG_ENV, VIOLATION, DeliveryGuard, MutatedObjectError
from py_scheduler.framework.runtime import Framework
from py_scheduler.framework.types import PodInfo
from py_scheduler.plugins.queue_sort import PrioritySort
from py_scheduler.queue.scheduling_queue import ACTIVE_Q, PriorityQueue
from tests.unit.app.fakes import FakeKube

POD = KINDS_BY_NAME["Pod"]
NODE = KINDS_BY_NAME["Node"]
SVC = KINDS_BY_NAME["Service"]


def pod(name: str, rv: int, node: str = "", scheduler: str = "py-scheduler", phase: str | None = None,
        uid: str | None = None, **spec: Any) -> dict[str, Any]:
    p: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "default", "uid": uid or f"uid-{name}", "resourceVersion": str(rv)},
        "spec": {"schedulerName": scheduler, "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
                 **spec},
    }
    if node:
        p["spec"]["nodeName"] = node
    if phase:
        p["status"] = {"phase": phase}
    return p


def node(name: str, rv: int, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": str(rv), "labels": labels},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}}


# -- ObjectStore ---------------------------------------------------------------------------------


def test_store_turns_events_into_deltas_and_drops_stale_ones() -> None:
    s = ObjectStore()
    assert s.apply(POD, "ADDED", pod("a", 5)) == (None, pod("a", 5))
    assert s.apply(POD, None, pod("a", 5)) is None  # the same version again (a listing)
    assert s.apply(POD, "MODIFIED", pod("a", 4)) is None  # older
    old, new = s.apply(POD, "MODIFIED", pod("a", 7, node="n")) or (None, None)
    assert old is not None and new is not None and new["spec"]["nodeName"] == "n"
    assert s.apply(POD, "DELETED", pod("a", 9)) == (pod("a", 7, node="n"), None)
    # a late listing event from before the deletion cannot resurrect it
    assert s.apply(POD, None, pod("a", 7, node="n")) is None
    # a newer object under the same name (recreated) is an add
    assert s.apply(POD, "ADDED", pod("a", 12, uid="uid-2")) == (None, pod("a", 12, uid="uid-2"))


def test_store_strips_managed_fields() -> None:
    s = ObjectStore()
    p = pod("a", 1)
    p["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    s.apply(POD, "ADDED", p)
    stored = s.get("Pod", "default/a")
    assert stored is not None and "managedFields" not in stored["metadata"]


def test_reconcile_removes_what_vanished_but_keeps_newer_objects() -> None:
    s = ObjectStore()
    s.apply(NODE, "ADDED", node("gone", 3))
    s.apply(NODE, "ADDED", node("kept", 4))
    s.apply(NODE, "ADDED", node("newer", 20))  # created after the LIST was taken
    deltas = s.reconcile(NODE, [node("kept", 4), node("fresh", 9)], "10")
    assert sorted((o or n or {})["metadata"]["name"] for o, n in deltas) == ["fresh", "gone"]
    assert (node("gone", 3), None) in deltas
    assert {n["metadata"]["name"] for n in s.list_kind("Node")} == {"kept", "fresh", "newer"}


def test_tombstones_expire_without_any_relist() -> None:
    """A watch that never breaks and no resync (``resync_period=0``): deletions are still forgotten
    after ``tombstone_ttl`` (before, only a re-LIST pruned them and they piled up for ever)."""
    clock = [0.0]
    s = ObjectStore(now=lambda: clock[0], tombstone_ttl=900.0)
    for minute in range(120):  # two hours, 100 deletions a minute
        clock[0] = minute * 60.0
        for i in range(100):
            p = pod(f"p{minute}-{i}", minute * 1000 + 2 * i)
            s.apply(POD, "ADDED", p)
            s.apply(POD, "DELETED", pod(f"p{minute}-{i}", minute * 1000 + 2 * i + 1))
    assert len(s) == 0
    assert s.tombstones() <= 1.25 * 15 * 100 + 100, s.tombstones()
    # the recent ones are still there: a stale listing of a Pod deleted 5 minutes ago changes nothing
    assert s.apply(POD, None, pod("p115-3", 115 * 1000 + 6)) is None
    # one deleted 20 minutes ago is forgotten: the same stale listing would now add it
    assert s.apply(POD, None, pod("p99-3", 99 * 1000 + 6)) == (None, pod("p99-3", 99 * 1000 + 6))


# -- EventHandlers -------------------------------------------------------------------------------


def handlers() -> tuple[EventHandlers, Cache, PriorityQueue]:
    """Handlers over a real cache and queue, every delta checked by a strict :class:`DeliveryGuard`
    (an in-place change of a delivered object by the cache or the queue fails the test)."""
    fw = Framework("py-scheduler", [(PrioritySort(), 0)])
    cache = Cache()
    queue = PriorityQueue({"py-scheduler": fw})
    h = EventHandlers(cache, queue, ["py-scheduler"])
    h.on_delta = DeliveryGuard(strict=True).wrap(h.on_delta)  # type: ignore[method-assign]
    return h, cache, queue


def test_in_place_change_of_a_delivered_pod_is_caught_at_its_next_event() -> None:
    h, _, _ = handlers()
    h.on_delta(NODE, None, node("n1", 1))
    a = pod("a", 1)
    h.on_delta(POD, None, a)
    a["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "2"  # a bug: changing what was delivered
    with pytest.raises(MutatedObjectError, match=r"Pod default/a changed at \.spec\.containers\[0\]\.resources"
                                                 r"\.requests\.cpu: '1' -> '2'"):
        h.on_delta(POD, a, pod("a", 2, node="n1"))


def test_in_place_change_by_a_handler_is_caught_when_it_returns(caplog: pytest.LogCaptureFixture) -> None:
    h, cache, _ = handlers()
    h.on_delta(NODE, None, node("n1", 1))

    def add_pod(p: dict[str, Any]) -> None:
        p["metadata"]["labels"] = {"touched": "yes"}

    cache.add_pod = add_pod  # type: ignore[assignment, method-assign]
    with pytest.raises(MutatedObjectError, match=r"\.metadata\.labels"):
        h.on_delta(POD, None, pod("b", 1, node="n1"))
    # not strict (the live process): logged at ERROR once, counted, the stream goes on
    guard = DeliveryGuard()
    b = pod("c", 1, node="n1")
    guard.wrap(EventHandlers(cache, h.queue, ["py-scheduler"]).on_delta)(POD, None, b)
    guard.check_all()
    assert len(guard.violations) == 1 and VIOLATION in caplog.text


def test_the_debug_variable_turns_the_guard_on(monkeypatch: pytest.MonkeyPatch) -> None:
    h, _, _ = handlers()
    monkeypatch.delenv(DEBUG_ENV, raising=False)
    assert Informers(FakeKube(), h).guard is None  # type: ignore[arg-type]
    monkeypatch.setenv(DEBUG_ENV, "1")
    inf = Informers(FakeKube(), h)  # type: ignore[arg-type]
    assert inf.guard is not None and inf.reflectors["Pod"].on_delta is not h.on_delta


def test_unbound_pod_of_ours_is_queued_others_are_not() -> None:
    h, cache, queue = handlers()
    h.on_delta(POD, None, pod("ours", 1))
    h.on_delta(POD, None, pod("theirs", 1, scheduler="default-scheduler"))
    assert queue.where("default", "ours") == ACTIVE_Q
    assert queue.where("default", "theirs") is None
    assert cache.pod_count() == 0


def test_binding_moves_pod_from_queue_to_cache() -> None:
    h, cache, queue = handlers()
    h.on_delta(NODE, None, node("n1", 1))
    h.on_delta(POD, None, pod("a", 2))
    h.on_delta(POD, pod("a", 2), pod("a", 3, node="n1"))
    assert queue.where("default", "a") is None
    ni = cache.node_info("n1")
    assert ni is not None and ni.requested.milli_cpu == 1000


def test_bound_pods_of_any_scheduler_are_accounted() -> None:
    h, cache, _ = handlers()
    h.on_delta(NODE, None, node("n1", 1))
    h.on_delta(POD, None, pod("x", 2, node="n1", scheduler="default-scheduler"))
    ni = cache.node_info("n1")
    assert ni is not None and len(ni.pods) == 1


def test_terminal_pod_releases_resources() -> None:
    h, cache, _ = handlers()
    h.on_delta(NODE, None, node("n1", 1))
    h.on_delta(POD, None, pod("a", 2, node="n1"))
    h.on_delta(POD, pod("a", 2, node="n1"), pod("a", 3, node="n1", phase="Succeeded"))
    ni = cache.node_info("n1")
    assert ni is not None and not ni.pods


def test_deleted_pods_leave_queue_and_cache() -> None:
    h, cache, queue = handlers()
    h.on_delta(NODE, None, node("n1", 1))
    h.on_delta(POD, None, pod("q", 2))
    h.on_delta(POD, None, pod("b", 3, node="n1"))
    h.on_delta(POD, pod("q", 2), None)
    h.on_delta(POD, pod("b", 3, node="n1"), None)
    assert queue.where("default", "q") is None
    assert cache.pod_count() == 0


def test_assumed_pod_deleted_releases_its_room() -> None:
    h, cache, queue = handlers()
    h.on_delta(NODE, None, node("n1", 1))
    p = pod("a", 2)
    h.on_delta(POD, None, p)
    qpi = queue.pop_nowait()
    assert qpi is not None
    cache.assume_pod(PodInfo({**p, "spec": {**p["spec"], "nodeName": "n1"}}))
    h.on_delta(POD, p, None)
    assert not cache.is_assumed_pod(p) and cache.pod_count() == 0


def test_recreated_pod_seen_as_update_replaces_the_old_one() -> None:
    h, cache, _ = handlers()
    h.on_delta(NODE, None, node("n1", 1))
    h.on_delta(POD, None, pod("a", 2, node="n1", uid="old"))
    h.on_delta(POD, pod("a", 2, node="n1", uid="old"), pod("a", 5, node="n1", uid="new"))
    ni = cache.node_info("n1")
    assert ni is not None and [p.uid for p in ni.pods] == ["new"]


def test_node_events_update_cache() -> None:
    h, cache, _ = handlers()
    h.on_delta(NODE, None, node("n1", 1))
    h.on_delta(NODE, node("n1", 1), node("n1", 2, zone="z"))
    ni = cache.node_info("n1")
    assert ni is not None and ni.labels == {"zone": "z"}
    h.on_delta(NODE, node("n1", 2), None)
    assert cache.node_info("n1") is None


def test_other_kinds_go_to_cluster_objects() -> None:
    h, cache, _ = handlers()
    svc = {"metadata": {"name": "s", "namespace": "ns1", "resourceVersion": "1"}, "spec": {"selector": {"a": "b"}}}
    h.on_delta(SVC, None, svc)
    assert cache.objects.get("Service", "ns1/s") == svc
    h.on_delta(SVC, svc, None)
    assert cache.objects.list("Service") == []


def test_handler_errors_are_contained() -> None:
    h, cache, _ = handlers()

    def boom(*_: Any) -> None:
        raise RuntimeError("bug")

    cache.add_node = boom  # type: ignore[method-assign]
    h.on_delta(NODE, None, node("n1", 1))  # logged, not raised


# -- Informers.reconcile -------------------------------------------------------------------------


async def test_reconcile_through_the_reflector_and_optional_kinds() -> None:
    h, cache, _ = handlers()
    kube = FakeKube()
    inf = Informers(kube, h)  # type: ignore[arg-type]
    kube.lists["/api/v1/nodes"] = ([node("stale", 1)], "1")
    assert await inf.reconcile(NODE) == 1
    kube.lists["/api/v1/nodes"] = ([node("n1", 5)], "6")
    assert await inf.reconcile(NODE) == 2  # n1 added, stale deleted
    assert cache.node_names() == ["n1"]
    assert await inf.reconcile(KINDS_BY_NAME["DeviceClass"]) == 0  # 404: an optional kind is empty
    assert inf.unavailable == {"DeviceClass"}
    kube.lists["/apis/resource.k8s.io/v1/deviceclasses"] = ([{"metadata": {"name": "gpu", "resourceVersion": "7"}}],
                                                            "7")
    assert await inf.reconcile(KINDS_BY_NAME["DeviceClass"]) == 1 and inf.unavailable == set()
    assert cache.objects.get("DeviceClass", "gpu") is not None


def test_every_kind_has_its_reflector_and_no_other_watch_machinery() -> None:
    h, _, _ = handlers()
    inf = Informers(FakeKube(), h)  # type: ignore[arg-type]
    assert set(inf.reflectors) == {wk.kind for wk in KINDS}
    assert inf.reflectors["Pod"]._watch_query()["fieldSelector"] == "status.phase!=Succeeded,status.phase!=Failed"
    assert all(r.store is inf.store for r in inf.reflectors.values())


# -- the one table of watched kinds -------------------------------------------------------------


def test_kinds_table_event_resources_are_the_queue_resources() -> None:
    names = {v for k, v in vars(Resource).items() if k.isupper()}
    for wk in kinds_table.KINDS:
        assert wk.event_resource is None or wk.event_resource in names, wk


def test_cluster_objects_key_kinds_as_the_table_says() -> None:
    objs = ClusterObjects()
    for wk in kinds_table.KINDS:
        if wk.kind in ("Node", "Pod"):
            continue
        obj = {"metadata": {"name": "x", "namespace": "ns"}}
        objs.upsert(wk.kind, obj)
        assert objs.get(wk.kind, wk.key(obj)) is obj, wk.kind


def test_each_delta_is_timed_under_the_cluster_events_it_was_handled_as() -> None:
    """``scheduler_event_handling_duration_seconds``'s labels, as eventhandlers.go observes them."""
    fw = Framework("py-scheduler", [(PrioritySort(), 0)])
    seen: list[str] = []
    h = EventHandlers(Cache(), PriorityQueue({"py-scheduler": fw}), ["py-scheduler"],
                      observe=lambda label, seconds: seen.append(label) if seconds >= 0 else None)

    def labels(kind: Any, old: dict[str, Any] | None, new: dict[str, Any] | None) -> list[str]:
        seen.clear()
        h.on_delta(kind, old, new)
        return list(seen)

    assert labels(NODE, None, node("n1", 1)) == ["NodeAdd"]
    tainted = {**node("n1", 2), "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}}
    assert labels(NODE, node("n1", 1), tainted) == ["NodeUpdateNodeTaint"]
    assert labels(NODE, tainted, {**tainted, "metadata": {**tainted["metadata"], "resourceVersion": "3"}}) == []
    assert labels(POD, None, pod("a", 1)) == ["UnscheduledPodAdd"]
    assert labels(POD, pod("a", 1), pod("a", 2, priority=5)) == ["UnscheduledPodUpdate"]
    assert labels(POD, pod("a", 2), pod("a", 3, node="n1")) == ["AssignedPodAdd", "UnscheduledPodDelete"]
    assert labels(POD, pod("a", 3, node="n1"), {**pod("a", 4, node="n1"),
                                                 "metadata": {**pod("a", 4)["metadata"], "labels": {"x": "y"}}}
                  ) == ["AssignedPodUpdate", "AssignedPodUpdatePodLabel"]
    assert labels(POD, pod("a", 4, node="n1"), None) == ["AssignedPodDelete"]
    assert labels(POD, None, pod("other", 1, scheduler="someone-else")) == []
    assert labels(SVC, None, {"metadata": {"name": "s", "namespace": "default", "resourceVersion": "1"}}) == []
    assert labels(NODE, tainted, None) == ["NodeDelete"]
