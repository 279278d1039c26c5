"""The optional batch forms ``filter_nodes`` / ``score_nodes`` give exactly what ``filter`` / ``score``
give node by node (same statuses, same scores, same order), on the parity generator's random
clusters (taints, extended resources, images, overhead, sidecars...) plus GPU, negative-quantity and
cordoned-node cases. The runtime relies on this equivalence (py_scheduler/framework/runtime.py)."""

from __future__ import annotations

import copy
import random
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from py_scheduler.cache.cache import Cache
from py_scheduler.cache.snapshot import ClusterObjects, Snapshot
from py_scheduler.framework.config import ProfileConfig, build_framework
from py_scheduler.framework.interfaces import BatchFilterPlugin, BatchScorePlugin
from py_scheduler.framework.runtime import Framework
from py_scheduler.framework.types import CycleState, NodeInfo, PodInfo, Status
from py_scheduler.plugins import registry
from py_scheduler.plugins.helpers.columns import FREE_CPU, POD_COUNT, NodeColumns

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

from bench.bench_lib import workloads  # noqa: E402
from bench.parity_lib.generator import scenario  # noqa: E402

Obj = dict[str, Any]


def _key(st: Status) -> tuple[int, tuple[str, ...], str]:
    return int(st.code), tuple(st.reasons), st.plugin


def _check(fw: Framework, snap: Snapshot, pod: PodInfo, nodes: list[NodeInfo] | None = None) -> int:
    """Compare batch and node-by-node forms for every plugin of ``fw`` on ``nodes`` (default: the
    snapshot's list); returns comparisons made."""
    if nodes is None:
        nodes = list(snap.node_info_list)
    state = CycleState(snap)
    for pl in fw.pre_filter_plugins:
        _, s = pl.pre_filter(state, pod, nodes)
        if s.is_skip():
            state.skip_filter.add(pl.name)
    n = 0
    for pl in fw.filter_plugins:
        if not isinstance(pl, BatchFilterPlugin) or pl.name in state.skip_filter:
            continue
        one = [_key(pl.filter(state, pod, ni)) for ni in nodes]
        got = pl.filter_nodes(state, pod, nodes)
        many = [_key(Status.success())] * len(nodes) if got is None else [_key(s) for s in got]
        assert [k[:2] for k in many] == [k[:2] for k in one], pl.name
        n += 1
    for pl in fw.pre_score_plugins:
        if pl.pre_score(state, pod, nodes).is_skip():
            state.skip_score.add(pl.name)
    for pl in fw.score_plugins:
        if not isinstance(pl, BatchScorePlugin) or pl.name in state.skip_score:
            continue
        one = [pl.score(state, pod, ni) for ni in nodes]
        values, st = pl.score_nodes(state, pod, nodes)
        if any(not s.is_success() for _, s in one):
            assert not st.is_success(), pl.name
            continue
        assert st.is_success(), pl.name
        assert values == [sc for sc, _ in one], pl.name
        n += 1
    return n


def _cluster(objects: list[Obj]) -> tuple[Snapshot, list[PodInfo]]:
    pods = [o for o in objects if o["kind"] == "Pod"]
    snap = Snapshot.from_object_list(objects)
    pending = [PodInfo(p) for p in pods if not p["spec"].get("nodeName")]
    return snap, pending


@pytest.mark.parametrize("seed", [3, 11])
def test_batch_equals_node_by_node_on_random_clusters(seed: int) -> None:
    fw = build_framework(ProfileConfig(scheduler_name="default-scheduler"), registry=registry)
    compared = 0
    for index in range(40):
        snap, pending = _cluster(scenario(seed, index))
        for pod in pending:
            compared += _check(fw, snap, pod)
    assert compared > 200


def test_batch_equals_node_by_node_gpu_negative_and_cordoned() -> None:
    rng = random.Random(5)
    nodes = workloads.make_nodes(40)
    nodes[3]["spec"]["unschedulable"] = True
    nodes[4]["spec"]["taints"] = [{"key": "k", "value": "v", "effect": "PreferNoSchedule"}]
    nodes[5]["spec"]["taints"] = [{"key": "k", "effect": "NoSchedule"}]
    nodes[6]["status"]["allocatable"]["cpu"] = "0"
    nodes[7]["status"]["allocatable"]["memory"] = "-1Gi"
    nodes[8]["status"]["allocatable"]["pods"] = "0"
    bound = list(workloads.init_pods(workloads.get_workload("GPU"), 40, 30))
    snap = Snapshot.from_objects(nodes, bound)
    fw = build_framework(ProfileConfig(), registry=registry)
    compared = 0
    for i in range(12):
        wl = rng.choice(list(workloads.WORKLOADS.values()))
        raw = wl.pod(1000 + i, "ns", "py-scheduler", f"u{i}")
        if i % 4 == 1:
            raw["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "40"
        if i % 4 == 2:  # huge (a negative request is refused by PodInfo, as by the API server)
            raw["spec"]["containers"][0]["resources"]["requests"]["memory"] = "8Ei"
        compared += _check(fw, snap, PodInfo(raw))
    assert compared > 30


@pytest.mark.parametrize("zeros", [True, False])
@pytest.mark.parametrize("strategy", ["LeastAllocated", "MostAllocated"])
def test_vectorized_resource_scores_equal_node_by_node(strategy: str, zeros: bool) -> None:
    """Enough nodes for the numpy path of the resource scorers: random allocatable / used amounts
    (with ``zeros``, zero cpu or memory on some nodes; over-committed ones), against ``score`` node by
    node (NodeResourcesFit with the strategy, BalancedAllocation)."""
    rng = random.Random(17 if zeros else 19)
    nodes = workloads.make_nodes(300)
    for i, n in enumerate(nodes):
        alloc = n["status"]["allocatable"]
        alloc["cpu"] = "0" if zeros and i % 37 == 0 else f"{rng.randint(1, 64000)}m"
        alloc["memory"] = "0" if zeros and i % 41 == 0 else str(rng.randint(1, 2**38))
    bound = []
    for i in range(900):
        p = workloads.get_workload("SchedulingBasic").pod(i, "ns", "py-scheduler", f"b{i}")
        req = p["spec"]["containers"][0]["resources"]["requests"]
        req["cpu"] = f"{rng.randint(0, 9000)}m"
        req["memory"] = str(rng.randint(0, 2**36))
        if i % 5 == 0:
            del req["cpu"]
        p["spec"]["nodeName"] = workloads.node_name(rng.randrange(300))
        bound.append(p)
    snap = Snapshot.from_objects(nodes, bound)
    args = {"scoringStrategy": {"type": strategy, "resources": [{"name": "cpu", "weight": 3},
                                                                 {"name": "memory", "weight": 1}]}}
    fw = build_framework(ProfileConfig(plugin_config={"NodeResourcesFit": args}), registry=registry)
    compared = 0
    for i in range(8):
        raw = workloads.get_workload("SchedulingBasic").pod(5000 + i, "ns", "py-scheduler", f"u{i}")
        raw["spec"]["containers"][0]["resources"]["requests"] = {"cpu": f"{rng.randint(0, 4000)}m",
                                                                  "memory": str(rng.randint(0, 2**33))}
        compared += _check(fw, snap, PodInfo(raw))
    assert compared >= 16


# -- snapshot node columns kept up to date incrementally --------------------------------------------
def _assert_columns_match_fresh(snap: Snapshot) -> None:
    """The snapshot's (incrementally maintained) columns equal columns built from scratch."""
    cols = snap.derived(NodeColumns)
    fresh = NodeColumns(list(snap.node_info_list))
    assert cols.n == fresh.n == len(snap.node_info_list)
    assert np.array_equal(cols.values, fresh.values)
    assert np.array_equal(cols.filter_ok, fresh.filter_ok)
    assert np.array_equal(cols.score_ok, fresh.score_ok)
    assert (cols.bad_filter, cols.bad_score) == (fresh.bad_filter, fresh.bad_score)
    assert cols.gens == fresh.gens
    assert cols.pos_by_gen == fresh.pos_by_gen
    for name, col in cols.scalars.items():
        new = fresh.scalar(name)
        assert np.array_equal(col.alloc, new.alloc) and np.array_equal(col.free, new.free), name
        assert np.array_equal(col.ok, new.ok) and col.bad == new.bad, name


def _pod(i: int, rng: random.Random, uid: str, node: str | None = None) -> Obj:
    raw = workloads.get_workload(rng.choice(["SchedulingBasic", "GPU", "NodeAffinity"])).pod(
        i, "ns", "py-scheduler", uid)
    req = raw["spec"]["containers"][0]["resources"].setdefault("requests", {})
    kind = i % 6
    if kind == 1:
        req["cpu"] = f"{rng.randint(1, 40000)}m"
    elif kind == 2:
        req["memory"] = str(rng.randint(1, 2**37))
    elif kind == 3:
        req.pop("cpu", None)
        req.pop("memory", None)
    elif kind == 4:
        req["ephemeral-storage"] = f"{rng.randint(1, 200)}Gi"
    if node is not None:
        raw["spec"]["nodeName"] = node
    return raw


def _views(snap: Snapshot, rng: random.Random) -> list[list[NodeInfo]]:
    """Node lists as the runtime passes them: the whole list, rotated runs (wrapping around the end)
    and runs with holes (nodes rejected by earlier plugins / PreFilterResult)."""
    nodes = list(snap.node_info_list)
    n = len(nodes)
    start = rng.randrange(n)
    rotated = nodes[start:] + nodes[:start]
    holes = [ni for ni in rotated if rng.random() < 0.8]
    return [nodes, rotated[: max(40, n // 2)], holes]


def test_columns_follow_cache_updates_and_batch_equals_node_by_node() -> None:
    """Pods assumed / added / removed, nodes added / removed / resized (negative, huge, zero-pod
    allocatable) through the Cache: after each ``update_snapshot`` the snapshot's columns equal
    freshly built ones, are not rebuilt while the node list stays, and NodeResourcesFit /
    BalancedAllocation batch forms equal node-by-node calls on whole, rotated and holed lists."""
    rng = random.Random(23)
    cache = Cache()
    raw_nodes = workloads.make_nodes(80)
    for node in raw_nodes[:70]:
        cache.add_node(node)
    present = set(range(70))
    uid = 0
    bound: dict[str, Obj] = {}
    for i in range(200):
        uid += 1
        p = _pod(i, rng, f"b{uid}", workloads.node_name(rng.randrange(70)))
        cache.add_pod(p)
        bound[f"b{uid}"] = p
    snap = Snapshot()
    cache.update_snapshot(snap)
    fw = build_framework(ProfileConfig(), registry=registry)
    kept_columns = snap.derived(NodeColumns)
    compared = 0
    scalars_seen: set[str] = set()
    for step in range(30):
        op = step % 6
        if op == 0:  # assume a few Pods (the live loop's path)
            for _ in range(3):
                uid += 1
                raw = _pod(uid, rng, f"a{uid}", workloads.node_name(rng.randrange(70)))
                cache.assume_pod(PodInfo(raw))
        elif op == 1:  # confirmed / new bound Pods and deletions
            for _ in range(4):
                uid += 1
                p = _pod(uid, rng, f"b{uid}", workloads.node_name(rng.randrange(70)))
                cache.add_pod(p)
                bound[f"b{uid}"] = p
            for key in rng.sample(sorted(bound), 3):
                cache.remove_pod(bound.pop(key))
        elif op == 2:  # node resized: negative memory, huge cpu, no pods, back to normal
            i = rng.choice(sorted(present))
            node = copy.deepcopy(raw_nodes[i])
            alloc = node["status"]["allocatable"]
            alloc.update(rng.choice([{"memory": "-1Gi"}, {"cpu": "9E"}, {"pods": "0"}, {"cpu": "0"},
                                     {"memory": "16Ei"}, {}]))
            cache.update_node(raw_nodes[i], node)
            raw_nodes[i] = node
        elif op == 3:  # a node comes: the columns are rebuilt for the new list
            if step < 20:
                cache.add_node(raw_nodes[70 + step // 6])
                present.add(70 + step // 6)
        elif op == 4:  # a node goes
            i = rng.choice(sorted(present))
            present.discard(i)
            cache.remove_node(raw_nodes[i])
        cache.update_snapshot(snap)
        if op in (0, 1, 2, 5):
            assert snap.derived(NodeColumns) is kept_columns, "columns rebuilt although the node list did not change"
        kept_columns = snap.derived(NodeColumns)
        _assert_columns_match_fresh(snap)
        for _ in range(2):
            uid += 1
            pod = PodInfo(_pod(uid, rng, f"u{uid}"))
            for view in _views(snap, rng):
                compared += _check(fw, snap, pod, view)
        scalars_seen.update(snap.derived(NodeColumns).scalars)
    assert compared > 300
    assert "nvidia.com/gpu" in scalars_seen


def test_columns_follow_snapshot_assume_and_in_place_changes() -> None:
    """``Snapshot.assume`` refreshes the column of the node; a NodeInfo changed in place without
    telling the snapshot (the offline engine's removal) is re-read on the next gather; a clone with
    extra Pods (nominated Pods, preemption dry runs) is never matched to the snapshot's columns."""
    rng = random.Random(31)
    nodes = workloads.make_nodes(64)
    bound = [_pod(i, rng, f"b{i}", workloads.node_name(rng.randrange(64))) for i in range(150)]
    snap = Snapshot.from_objects(nodes, bound)
    fw = build_framework(ProfileConfig(), registry=registry)
    cols = snap.derived(NodeColumns)
    compared = 0
    for i in range(40):
        pod = PodInfo(_pod(1000 + i, rng, f"u{i}"))
        compared += _check(fw, snap, pod, _views(snap, rng)[1])
        snap.assume(pod, workloads.node_name(rng.randrange(64)))
        assert snap.derived(NodeColumns) is cols
        _assert_columns_match_fresh(snap)
    assert compared > 60
    victim = snap.node_info_list[5]
    uid = victim.pods[0].uid if victim.pods else ""
    if not victim.pods:
        snap.assume(PodInfo(_pod(2000, rng, "x2000")), victim.name)
        uid = "x2000"
    victim.remove_pod(uid)  # behind the snapshot's back
    got = cols.gather(snap.node_info_list)
    assert got is not None
    assert int(got.values[POD_COUNT, 5]) == len(victim.pods)
    _assert_columns_match_fresh(snap)
    clone = snap.node_info_list[7].clone()
    clone.add_pod(PodInfo(_pod(3000, rng, "x3000", clone.name)))
    assert cols.gather([*snap.node_info_list[:7], clone]) is None
    unchanged_clone = snap.node_info_list[9].clone()
    got = cols.gather([unchanged_clone])
    assert got is not None and int(got.values[POD_COUNT, 0]) == len(unchanged_clone.pods)


def test_vectorized_filter_reasons_equal_node_by_node() -> None:
    """Enough nodes for NodeResourcesFit's array Filter, with full nodes, over-committed ones and
    quantities outside int64's safe range: exact reasons and codes of ``filter`` for every node."""
    rng = random.Random(41)
    nodes = workloads.make_nodes(120)
    for i, n in enumerate(nodes):
        alloc = n["status"]["allocatable"]
        alloc["cpu"] = f"{rng.randint(0, 8000)}m"
        alloc["memory"] = str(rng.randint(0, 2**32))
        alloc["pods"] = str(rng.randint(0, 4))
        alloc["ephemeral-storage"] = f"{rng.randint(0, 50)}Gi"
        if i % 29 == 0:
            alloc["memory"] = "-2Gi"
        if i % 31 == 0:
            alloc["cpu"] = "8E"
    bound = [_pod(i, rng, f"b{i}", workloads.node_name(rng.randrange(120))) for i in range(200)]
    snap = Snapshot.from_objects(nodes, bound)
    fw = build_framework(ProfileConfig(), registry=registry)
    fit = next(pl for pl in fw.filter_plugins if pl.name == "NodeResourcesFit")
    failing = 0
    for i in range(30):
        raw = _pod(500 + i, rng, f"u{i}")
        if i % 10 == 9:
            raw["spec"]["containers"][0]["resources"]["requests"]["memory"] = "8Ei"
        pod = PodInfo(raw)
        for view in _views(snap, rng):
            _check(fw, snap, pod, view)
            state = CycleState(snap)
            fit.pre_filter(state, pod, view)
            got = fit.filter_nodes(state, pod, view)
            failing += 0 if got is None else sum(1 for s in got if s.code)
    assert failing > 100


def test_gather_runs_wraps_and_holes() -> None:
    """``NodeColumns.gather`` returns the columns of the asked nodes in their order for contiguous
    runs, runs wrapping around the end of ``node_info_list`` and selections with holes."""
    rng = random.Random(43)
    nodes = workloads.make_nodes(50)
    nodes[4]["status"]["allocatable"]["memory"] = "-1Gi"  # score_ok False
    nodes[9]["status"]["allocatable"]["cpu"] = "9E"  # filter_ok False
    bound = [_pod(i, rng, f"b{i}", workloads.node_name(rng.randrange(50))) for i in range(120)]
    snap = Snapshot.from_objects(nodes, bound)
    cols = snap.derived(NodeColumns)
    assert (cols.bad_filter, cols.bad_score) == (1, 2)
    listed = snap.node_info_list
    for start, length, keep in [(0, 50, 1.0), (10, 20, 1.0), (35, 30, 1.0), (49, 50, 1.0), (20, 40, 0.6)]:
        pos = [(start + j) % 50 for j in range(length) if rng.random() < keep]
        got = cols.gather([listed[p] for p in pos])
        assert got is not None
        assert np.array_equal(got.values, cols.values[:, pos])
        assert got.filter_ok is not None and got.score_ok is not None
        assert got.filter_ok.tolist() == [bool(cols.filter_ok[p]) for p in pos]
        assert got.score_ok.tolist() == [bool(cols.score_ok[p]) for p in pos]
        for j, p in enumerate(pos):
            ni = listed[p]
            assert int(got.values[FREE_CPU, j]) == (
                ni.allocatable.milli_cpu - ni.requested.milli_cpu if got.filter_ok[j] else 0)


def test_gather_reuses_its_check_only_while_no_nodeinfo_changes() -> None:
    """``NodeColumns.gather`` hands back its last result for the same nodes (identity) while no NodeInfo
    changed, without reading generations; after any change (an assume, a Pod put on a node behind the
    snapshot's back, a new NodeInfo) it checks again. Property: on random steps every gather equals
    the columns built from scratch at the asked positions, or is None exactly when the check-every-time
    form (``_gather``) is None."""
    rng = random.Random(47)
    nodes = workloads.make_nodes(40)
    bound = [_pod(i, rng, f"b{i}", workloads.node_name(rng.randrange(40))) for i in range(60)]
    snap = Snapshot.from_objects(nodes, bound)
    cols = snap.derived(NodeColumns)
    listed = snap.node_info_list
    reused = 0
    asked: list[NodeInfo] = list(listed[:10])
    for step in range(300):
        op = rng.randrange(6)
        if op == 0:
            start, length = rng.randrange(40), rng.randint(1, 40)
            asked = [listed[(start + j) % 40] for j in range(length)]
        elif op == 1:
            snap.assume(PodInfo(_pod(5000 + step, rng, f"a{step}")), rng.choice(listed).name)
        elif op == 2:  # behind the snapshot's back: the columns are not told
            ni = rng.choice(asked)
            ni.pods = (*ni.pods, PodInfo(_pod(6000 + step, rng, f"x{step}", ni.name)))
        elif op == 3:  # a clone with an extra Pod: never the snapshot's
            k = rng.randrange(len(asked))
            clone = asked[k].clone()
            clone.add_pod(PodInfo(_pod(7000 + step, rng, f"c{step}", clone.name)))
            asked = [*asked[:k], clone, *asked[k + 1:]]
        elif op == 4:
            asked = list(asked)  # another list, the same nodes: reused
        else:  # as many other nodes: not reused
            start = rng.randrange(40)
            asked = [listed[(start + j) % 40] for j in range(len(asked))]
        before = cols.verified
        got = cols.gather(asked)
        if got is not None and before is not None and got is before[2]:
            reused += 1
        plain = cols._gather(asked)
        assert (got is None) == (plain is None)
        if got is None:
            continue
        fresh = NodeColumns(list(listed))
        pos = [listed.index(ni) for ni in asked]
        assert np.array_equal(got.values, fresh.values[:, pos]), step
    assert reused > 20
    _assert_columns_match_fresh(snap)


@pytest.mark.parametrize("ignore", [False, True])
def test_vectorized_filter_scalar_resources_equal_node_by_node(ignore: bool) -> None:
    """NodeResourcesFit's array Filter with scalar requests: GPUs on 10% of the nodes, an extended
    resource a DeviceClass maps (left to DynamicResources on nodes without it), hugepages, huge and
    zero requests, ``ignoredResources`` / ``ignoredResourceGroups``: the same statuses as ``filter``."""
    rng = random.Random(47)
    nodes = workloads.make_nodes(90)
    for i, n in enumerate(nodes):
        alloc = n["status"]["allocatable"]
        if i % 3 == 0:
            alloc["example.com/dongle"] = str(rng.randint(0, 3))
        if i % 4 == 0:
            alloc["hugepages-2Mi"] = f"{rng.randint(0, 8) * 2}Mi"
        if i % 23 == 0:
            alloc["example.com/dongle"] = "9E"
        if i % 5 == 0:
            alloc["cpu"] = f"{rng.randint(0, 2000)}m"
    bound = list(workloads.init_pods(workloads.get_workload("GPU"), 90, 20))
    objects = ClusterObjects()
    objects.upsert("DeviceClass", {"kind": "DeviceClass", "metadata": {"name": "dongles"},
                                   "spec": {"extendedResourceName": "example.com/dongle"}})
    snap = Snapshot.from_objects(nodes, bound, objects)
    args = {"ignoredResources": ["example.com/dongle"], "ignoredResourceGroups": ["nvidia.com"]} if ignore else {}
    fw = build_framework(ProfileConfig(plugin_config={"NodeResourcesFit": args}), registry=registry)
    fit = next(pl for pl in fw.filter_plugins if pl.name == "NodeResourcesFit")
    failing = 0
    for i in range(24):
        raw = workloads.get_workload("GPU").pod(700 + i, "ns", "py-scheduler", f"u{i}")
        req = raw["spec"]["containers"][0]["resources"]["requests"]
        lim = raw["spec"]["containers"][0]["resources"].setdefault("limits", {})
        if i % 3 == 0:
            req["example.com/dongle"] = lim["example.com/dongle"] = str(rng.randint(0, 3))
        if i % 4 == 1:
            req["hugepages-2Mi"] = lim["hugepages-2Mi"] = f"{rng.randint(1, 6) * 2}Mi"
        if i % 8 == 5:
            req["example.com/dongle"] = lim["example.com/dongle"] = "8E"
        if i % 6 == 2:
            req["cpu"] = "1500m"
        pod = PodInfo(raw)
        for view in _views(snap, rng):
            _check(fw, snap, pod, view)
            state = CycleState(snap)
            fit.pre_filter(state, pod, view)
            got = fit.filter_nodes(state, pod, view)
            failing += 0 if got is None else sum(1 for s in got if s.code)
    assert failing > 200
