"""Every long-lived structure stays within its stated bound under churn (issue 31, item 6: the CI
variant of the soak's plateau; the bounds and their sizes at 5000 nodes / 30 000 Pods are listed in
docs/operations.md, "Memory bounds").

Each case drives more distinct keys through the structure than its bound (a large bound is lowered
through the module's constant or constructor argument, so the test takes seconds, not the hours of
churn a real process would need) and checks its size never exceeds it. Structures bounded by the
cluster itself (queue, nominator, unschedulable pool) are driven through add + delete cycles and must
end empty.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from py_scheduler.app.client import reflector
from py_scheduler.app.scheduling import binder as binder_mod
from py_scheduler.app.scheduling.decisions import DecisionLog
from py_scheduler.framework import memo as memo_mod
from py_scheduler.framework import types as types_mod
from py_scheduler.framework.preemption import VictimsMemo
from py_scheduler.framework.runtime import Framework
from py_scheduler.framework.types import NodeInfo, PodInfo
from py_scheduler.plugins.dynamic_resources import capacity, selector_memo
from py_scheduler.plugins.dynamic_resources import pools as pools_mod
from py_scheduler.plugins.gpu import accounting
from py_scheduler.plugins.gpu import filter as gpu_filter
from py_scheduler.plugins.gpu.common import keys_from_args
from py_scheduler.plugins.helpers import cel, extended_resources, queueing_hints, storage
from py_scheduler.plugins.queue_sort import PrioritySort
from py_scheduler.queue.scheduling_queue import PriorityQueue

Obj = dict[str, Any]


def _pod(i: int, nominated: str | None = None) -> Obj:
    p: Obj = {"metadata": {"name": f"p{i}", "namespace": "default", "uid": f"u{i}", "resourceVersion": "1"},
              "spec": {"schedulerName": "py-scheduler", "containers": [{"name": "c", "resources": {
                  "requests": {"cpu": f"{i % 1000 + 1}m"}}}]}}
    if nominated:
        p["status"] = {"nominatedNodeName": nominated}
    return p


def test_reflector_tombstones_are_capped_whatever_the_deletion_rate() -> None:
    """Fails on 458e1a3: tombstones were bounded by time only (a burst of deletions inside the 15 min
    window kept them all)."""
    store = reflector.ObjectStore(now=lambda: 0.0, tombstone_max=1000)
    class Kind:
        kind = "Pod"

        @staticmethod
        def key(obj: Obj) -> str:
            return f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"

    peak = 0
    for i in range(5000):
        store.apply(Kind, "DELETED", _pod(i))  # type: ignore[arg-type]
        peak = max(peak, store.tombstones())
    assert peak <= 1000 and store.tombstones() == 1000
    assert reflector.ObjectStore().tombstone_max == reflector.TOMBSTONES_MAX
    # the newest deletions are the ones kept: a stale re-add of the last one is still refused
    stale = _pod(4999)
    stale["metadata"]["resourceVersion"] = "0"
    assert store.apply(Kind, "ADDED", stale) is None  # type: ignore[arg-type]


def test_event_series_are_capped() -> None:
    class FakeKube:
        async def create_event(self, ns: str, body: Obj) -> Obj:
            return body

        async def patch_event(self, ns: str, name: str, patch: Obj) -> Obj:
            return patch

    b = binder_mod.Binder(FakeKube(), "me")  # type: ignore[arg-type]

    async def churn() -> int:
        peak = 0
        for i in range(binder_mod.EVENT_SERIES_MAX + 500):
            await b.failed_scheduling(_pod(i), f"0/{i} nodes are available", "py-scheduler")
            peak = max(peak, len(b._series))
        return peak

    assert asyncio.run(churn()) == binder_mod.EVENT_SERIES_MAX


def test_decision_ring_is_capped() -> None:
    log = DecisionLog(capacity=300)
    for i in range(1000):
        log.record(PodInfo(_pod(i)), "py-scheduler", 1, "unschedulable", message="no")
    assert len(log.records) == 300 and log.dropped == 700


def test_module_level_memos_are_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    # CEL programs (LRU of 256)
    for i in range(memo_mod.CEL_SELECTORS.size + 50):
        cel.compile_selector(f'device.driver == "d{i}.example.com"')
        assert len(memo_mod.CEL_SELECTORS) <= memo_mod.CEL_SELECTORS.size
    # DRA selector results across cycles (200 000: lowered)
    memo = selector_memo.SelectorMemo(max_size=500)
    devices = [{"name": f"d{i}"} for i in range(1500)]
    for d in devices:
        memo.put("true", "drv", d, True)
        assert len(memo) <= 500
    # DRA quantity strings (4096)
    for i in range(memo_mod.QUANTITIES.size + 500):
        capacity._q(f"{i}Mi")
        assert len(memo_mod.QUANTITIES) <= memo_mod.QUANTITIES.size
    # PodInfo request parses (4096), event-offered PodInfos (4096)
    for i in range(memo_mod.REQUESTS.size + 500):
        PodInfo(_pod(i))
        assert len(memo_mod.REQUESTS) <= memo_mod.REQUESTS.size
    pods = [_pod(i) for i in range(memo_mod.HINT_POD_INFOS.size + 500)]
    for p in pods:
        queueing_hints.hint_pod_info(p)
        assert len(memo_mod.HINT_POD_INFOS) <= memo_mod.HINT_POD_INFOS.size
    # PV node affinities (50 000: lowered)
    monkeypatch.setattr(memo_mod.PV_NODE_AFFINITY, "size", 300)
    pvs = [{"spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "zone", "operator": "In", "values": [f"z{i}"]}]}]}}}} for i in range(1000)]
    for pv in pvs:
        storage.compiled_node_affinity(pv)
        assert len(memo_mod.PV_NODE_AFFINITY) <= 300
    # GPU request tokens (4096: lowered)
    monkeypatch.setattr(gpu_filter, "_TOKENS_MAX", 100)
    for i in range(400):
        gpu_filter._token(("req", i))  # type: ignore[arg-type]
        assert len(gpu_filter._TOKENS) <= 100
    # extended-resource name caches
    for fn in (extended_resources.__dict__[n] for n in dir(extended_resources)):
        info = getattr(fn, "cache_info", None)
        if info is not None:
            assert info().maxsize is not None and info().maxsize <= 4096


def test_gpu_node_state_memo_is_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    """(keys, node, generation) LRU of MEMO_CAPACITY (8192: lowered), two generations per node; the
    per-node generation index never outlives the LRU's entries."""
    monkeypatch.setattr(accounting, "MEMO_CAPACITY", 200)
    accounting.clear_memo()
    keys = keys_from_args({})
    try:
        for i in range(1000):  # node churn: every node a new name
            node = {"metadata": {"name": f"n{i}", "labels": {}},
                    "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "8"}}}
            ni = NodeInfo(node)
            for _ in range(3):  # three generations of each
                ni.generation += 1
                accounting.derive_state(ni, keys)
            assert len(accounting._memo) <= 200
            assert len(accounting._generations) <= 200
    finally:
        accounting.clear_memo()


def test_dra_slice_view_per_node_memos_are_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    """Node churn under an unchanged slice set (SLICE_VIEW_NODES_MAX, 20 000: lowered)."""
    monkeypatch.setattr(pools_mod, "SLICE_VIEW_NODES_MAX", 100)
    view = pools_mod.SliceView([])
    for i in range(500):
        node = {"metadata": {"name": f"n{i}"}}
        view.pools(node, f"n{i}")
        view.device_ids(node, f"n{i}")
        assert len(view._pools) <= 100 and len(view._ids) <= 100


def test_preemption_dry_run_memo_is_capped() -> None:
    memo = VictimsMemo(max_entries=100)
    for i in range(500):
        ni = NodeInfo({"metadata": {"name": f"n{i}"}, "status": {"allocatable": {"cpu": "1"}}})
        memo.put("ctx", ni, [], 0, types_mod.Status.success())
        assert len(memo._entries) <= 100


def test_queue_nominator_and_pool_follow_the_pods() -> None:
    """Bounded by the pending Pods themselves: 3000 Pods added, nominated, made unschedulable and
    deleted leave nothing behind."""
    q = PriorityQueue({"py-scheduler": Framework("py-scheduler", [(PrioritySort(), 0)])})
    pods = [_pod(i, nominated=f"n{i % 50}") for i in range(3000)]
    for p in pods:
        q.add(p)
    for _ in range(1000):
        qpi = q.pop_nowait()
        assert qpi is not None
        q.add_unschedulable_if_not_present(qpi)
        q.done(qpi.uid)
    assert len(q.nominator) == 50
    for p in pods:
        q.delete(p)
    assert len(q.nominator) == 0 and q._nominated_pod_to_node == {}
    assert sum(q.lengths().values()) == 0
    assert q._active.in_flight == {}


def test_queue_hint_memos_are_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    """``_interest_memo`` (event -> of interest?) and ``_group_memo`` ((group, event) -> hint functions)
    under churn of distinct events and groups (``_MEMO_MAX``, 4096: lowered): never more than the
    bound, and still right after being cleared (the Pods whose hints skip every event stay put)."""
    from py_scheduler.framework.events import ActionType, ClusterEvent, ClusterEventWithHint, QueueingHint, Resource
    from py_scheduler.queue import scheduling_queue as sq

    monkeypatch.setattr(sq, "_MEMO_MAX", 100)

    class NodeSkip:
        """A Filter registered for every Node change whose hint always skips."""

        name = "NodeSkip"

        def filter(self, state: Any, pod: PodInfo, node_info: NodeInfo) -> types_mod.Status:
            return types_mod.Status.success()

        def events_to_register(self) -> list[ClusterEventWithHint]:
            return [ClusterEventWithHint(ClusterEvent(Resource.NODE, ActionType.ALL),
                                         lambda pod, old, new: QueueingHint.QUEUE_SKIP)]

    q = PriorityQueue({"py-scheduler": Framework("py-scheduler", [(PrioritySort(), 0), (NodeSkip(), 0)])})
    pods = [_pod(i) for i in range(6)]
    rejectors = [frozenset({"NodeSkip"}), frozenset({"NodeSkip", "Other"}), frozenset({"NodeSkip", "Other", "Third"})]
    for i, p in enumerate(pods):  # three groups (rejector sets), two Pods each
        q.add(p)
        qpi = q.pop_nowait()
        assert qpi is not None
        qpi.unschedulable_plugins = rejectors[i % 3]
        q.add_unschedulable_if_not_present(qpi)
        q.done(qpi.uid)
    peak_interest = peak_group = 0
    for bits in range(1, 1001):  # 1000 distinct Node events (combinations of action bits)
        q.move_all_to_active_or_backoff(ClusterEvent(Resource.NODE, ActionType(bits)))
        peak_interest = max(peak_interest, len(q._interest_memo))
        peak_group = max(peak_group, len(q._group_memo))
    assert peak_interest == 100 and peak_group == 100  # filled, never past the bound
    assert q.lengths()["unschedulable"] == 6  # every event skipped, memo cleared or not
