"""Per-GPU accounting: indices derived from the NodeInfo's Pods, Reserve's choice, rebuild after restart."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from py_scheduler.cache.snapshot import Snapshot
from py_scheduler.framework.types import Code, CycleState, NodeInfo, PodInfo
from py_scheduler.plugins.gpu.accounting import clear_memo, derive_state, largest_intact_group, pick
from py_scheduler.plugins.gpu.filter import GPUFilter
from py_scheduler.plugins.gpu.model import GPUKeys
from tests.unit.plugins.gpu.gpu_objects import a100_node, gpu_node, gpu_pod, h100_node

Obj = dict[str, Any]
KEYS = GPUKeys()
IDX = "gpu-scheduler/gpu-indices"


@pytest.fixture(autouse=True)
def _fresh_memo() -> None:
    clear_memo()


def reserve(pl: GPUFilter, snap: Snapshot, pod: Obj, node: str) -> tuple[int, ...]:
    """PreFilter + Filter + Reserve on ``node``, then assume a copy carrying the annotation."""
    state = CycleState(snap)
    pi = PodInfo(pod)
    _, s = pl.pre_filter(state, pi, snap.node_info_list)
    assert s.is_success(), s
    assert pl.filter(state, pi, snap.get(node)).is_success()
    s = pl.reserve(state, pi, node)
    assert s.is_success(), s
    value = state.pod_annotations[IDX]
    annotated = dict(pod, metadata=dict(pod["metadata"], annotations={**pod["metadata"]["annotations"], IDX: value}))
    snap.assume(PodInfo(annotated), node)
    return tuple(int(i) for i in value.split(","))


def test_two_pods_never_share_an_index() -> None:
    snap = Snapshot.from_objects([a100_node("a")])
    pl = GPUFilter()
    got = [reserve(pl, snap, gpu_pod(f"p{i}", 2), "a") for i in range(4)]
    assert got == [(0, 1), (2, 3), (4, 5), (6, 7)]
    state = derive_state(snap.get("a"), KEYS)
    assert state.free == frozenset()
    pi = PodInfo(gpu_pod("late", 1))
    cs = CycleState(snap)
    pl.pre_filter(cs, pi, snap.node_info_list)
    assert pl.filter(cs, pi, snap.get("a")).code == Code.UNSCHEDULABLE
    assert pl.reserve(cs, pi, "a").code == Code.UNSCHEDULABLE
    assert IDX not in cs.pod_annotations


def test_best_fit_group_keeps_the_other_group_whole() -> None:
    snap = Snapshot.from_objects([a100_node("a")], [gpu_pod("x", 2, node="a", annotations={IDX: "4,5"})])
    pl = GPUFilter()
    # group 4-7 has 2 free, group 0-3 has 4: a 2-GPU pod takes 6,7 and leaves 0-3 intact
    assert reserve(pl, snap, gpu_pod("p", 2), "a") == (6, 7)
    assert largest_intact_group(derive_state(snap.get("a"), KEYS)) == 4
    nv = {"gpu-scheduler/nvlink-required": "true"}
    assert reserve(pl, snap, gpu_pod("q", 4, annotations=nv), "a") == (0, 1, 2, 3)


def test_spread_across_groups_without_nvlink() -> None:
    snap = Snapshot.from_objects([a100_node("a")], [gpu_pod("x", 1, node="a", annotations={IDX: "0"}),
                                                    gpu_pod("y", 2, node="a", annotations={IDX: "4,5"})])
    ns = derive_state(snap.get("a"), KEYS)
    assert pick(ns, 5, False) == (1, 2, 3, 6, 7)
    assert pick(ns, 5, True) is None
    assert pick(ns, 6, False) is None


def test_deleted_or_finished_pod_frees_its_indices() -> None:
    nodes = [a100_node("a")]
    held = gpu_pod("held", 4, node="a", annotations={IDX: "0,1,2,3"})
    before = derive_state(Snapshot.from_objects(nodes, [held]).get("a"), KEYS)
    assert before.free == frozenset({4, 5, 6, 7})
    # deleted: the Pod is simply not in the next snapshot
    assert derive_state(Snapshot.from_objects(nodes, []).get("a"), KEYS).free == frozenset(range(8))
    # finished: Succeeded / Failed Pods are left out of the NodeInfo
    done = dict(held, status={"phase": "Succeeded"})
    assert derive_state(Snapshot.from_objects(nodes, [done]).get("a"), KEYS).free == frozenset(range(8))
    # in the live cache: removing the Pod from the NodeInfo bumps the generation, the memo recomputes
    ni = NodeInfo(nodes[0], [PodInfo(held)])
    assert len(derive_state(ni, KEYS).free) == 4
    ni.remove_pod(held["metadata"]["uid"])
    assert len(derive_state(ni, KEYS).free) == 8


def test_pods_bound_by_others_without_annotation_still_count() -> None:
    pods = [gpu_pod("ours", 2, node="a", annotations={IDX: "0,1"}, created="2026-01-01T00:00:02Z"),
            gpu_pod("theirs", 3, node="a", created="2026-01-01T00:00:01Z"),
            gpu_pod("bad", 1, node="a", annotations={IDX: "zz"}, created="2026-01-01T00:00:03Z")]
    ns = derive_state(Snapshot.from_objects([a100_node("a")], pods).get("a"), KEYS)
    by_name = {k.split("-")[1]: v for k, v in ns.allocations.items()}
    assert by_name == {"ours": (0, 1), "theirs": (2, 3, 4), "bad": (5,)}
    assert ns.free == frozenset({6, 7})
    assert {k.split("-")[1] for k in ns.virtual} == {"theirs", "bad"}
    pl = GPUFilter()
    pi = PodInfo(gpu_pod("p", 3))
    cs = CycleState()
    pl.pre_filter(cs, pi, [])
    assert pl.filter(cs, pi, Snapshot.from_objects([a100_node("a")], pods).get("a")).code == Code.UNSCHEDULABLE


def test_conflicting_or_out_of_range_annotations_are_counted_virtually() -> None:
    pods = [gpu_pod("first", 2, node="a", annotations={IDX: "0,1"}, created="2026-01-01T00:00:01Z"),
            gpu_pod("dup", 2, node="a", annotations={IDX: "1,2"}, created="2026-01-01T00:00:02Z"),
            gpu_pod("far", 1, node="a", annotations={IDX: "9"}, created="2026-01-01T00:00:03Z"),
            gpu_pod("short", 2, node="a", annotations={IDX: "7"}, created="2026-01-01T00:00:04Z")]
    ns = derive_state(Snapshot.from_objects([a100_node("a")], pods).get("a"), KEYS)
    by_name = {k.split("-")[1]: v for k, v in ns.allocations.items()}
    assert by_name == {"first": (0, 1), "dup": (2, 3), "far": (4,), "short": (5, 6)}
    assert ns.free == frozenset({7})


def test_overcommitted_node_has_no_free_gpus() -> None:
    pods = [gpu_pod("x", 6, node="a"), gpu_pod("y", 6, node="a")]
    ns = derive_state(Snapshot.from_objects([a100_node("a")], pods).get("a"), KEYS)
    assert ns.free == frozenset() and ns.overcommitted == 4


def test_rebuild_after_restart_gives_the_same_allocation() -> None:
    nodes = [a100_node("a"), h100_node("h")]
    snap = Snapshot.from_objects(nodes)
    pl = GPUFilter()
    placed: list[Obj] = []
    for i, (n, node) in enumerate([(2, "a"), (1, "a"), (3, "h"), (4, "a"), (2, "h")]):
        pod = gpu_pod(f"p{i}", n, created=f"2026-01-01T00:00:{i:02d}Z")
        reserve(pl, snap, pod, node)
    for ni in snap.node_info_list:
        placed.extend(p.pod for p in ni.pods)
    before = {n: derive_state(snap.get(n), KEYS) for n in ("a", "h")}
    # "restart": a new process state (no memo, a new plugin instance), the API's Pods in another order
    clear_memo()
    again = Snapshot.from_objects(nodes, list(reversed(placed)))
    after = {n: derive_state(again.get(n), KEYS) for n in ("a", "h")}
    for n in ("a", "h"):
        assert after[n].allocations == before[n].allocations
        assert after[n].free == before[n].free
        assert not after[n].virtual
    nxt = gpu_pod("next", 2)
    assert reserve(GPUFilter(), again, nxt, "h") == reserve(pl, snap, dict(nxt), "h")


def test_memo_is_keyed_by_generation() -> None:
    ni = NodeInfo(a100_node("a"))
    s1 = derive_state(ni, KEYS)
    assert derive_state(ni, KEYS) is s1
    assert derive_state(ni.clone(), KEYS) is s1  # an unchanged clone keeps its generation
    ni.add_pod(PodInfo(gpu_pod("x", 1, node="a")))
    assert derive_state(ni, KEYS) is not s1
    ni.set_node(gpu_node("a", 2))
    assert derive_state(ni, KEYS).spec.total == 2


def test_reserve_unknown_node_is_an_error_and_non_gpu_pods_are_untouched() -> None:
    snap = Snapshot.from_objects([a100_node("a")])
    pl = GPUFilter()
    cs = CycleState(snap)
    pi = PodInfo(gpu_pod("p", 1))
    pl.pre_filter(cs, pi, snap.node_info_list)
    assert pl.reserve(cs, pi, "ghost").code == Code.ERROR
    cs2 = CycleState(snap)
    plain = PodInfo(gpu_pod("cpu-only"))
    assert pl.pre_filter(cs2, plain, snap.node_info_list)[1].is_skip()
    assert pl.reserve(cs2, plain, "a").is_success()
    assert cs2.pod_annotations == {}
    pl.reserve(cs, pi, "a")
    assert cs.pod_annotations == {IDX: "0"}
    pl.unreserve(cs, pi, "a")
    assert cs.pod_annotations == {}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 5), st.booleans(), st.integers(0, 30)), min_size=1, max_size=25))
def test_random_sequences_never_share_or_exceed(ops: list[tuple[int, bool, int]]) -> None:
    """Schedule / delete at random (with foreign un-annotated Pods mixed in): indices stay disjoint,
    in range, and every Pod the filter admits gets a placement."""
    clear_memo()
    nodes = [a100_node("a"), h100_node("h")]
    bound: list[Obj] = []
    pl = GPUFilter()
    for i, (count, nvlink, r) in enumerate(ops):
        if r < 5 and bound:  # delete one
            bound.pop(r % len(bound))
            continue
        snap = Snapshot.from_objects(nodes, bound)
        node = "a" if r % 2 else "h"
        if r % 7 == 0:  # bound by another scheduler: no annotation
            if len(derive_state(snap.get(node), KEYS).free) >= count:
                bound.append(gpu_pod(f"foreign{i}", count, node=node))
            continue
        pod = gpu_pod(f"p{i}", count, annotations={"gpu-scheduler/nvlink-required": "true"} if nvlink else {})
        cs = CycleState(snap)
        pi = PodInfo(pod)
        pl.pre_filter(cs, pi, snap.node_info_list)
        if not pl.filter(cs, pi, snap.get(node)).is_success():
            continue
        assert pl.reserve(cs, pi, node).is_success()
        meta = dict(pod["metadata"], annotations={**pod["metadata"]["annotations"], **cs.pod_annotations})
        bound.append(dict(pod, metadata=meta, spec=dict(pod["spec"], nodeName=node)))
        final = derive_state(Snapshot.from_objects(nodes, bound).get(node), KEYS)
        assert not final.virtual - {p["metadata"]["uid"] for p in bound if IDX not in p["metadata"]["annotations"]}
    snap = Snapshot.from_objects(nodes, bound)
    for name in ("a", "h"):
        state = derive_state(snap.get(name), KEYS)
        held = [i for idx in state.allocations.values() for i in idx]
        assert len(held) == len(set(held)) and all(0 <= i < 8 for i in held)
        assert state.overcommitted == 0
        assert len(held) + len(state.free) == 8
