"""PodTopologySpread's PreFilter count memo (issue 9) gives exactly the counts of upstream's loop over
all nodes (``podtopologyspread/filtering.go`` calPreFilterState), recomputed here independently,
while the cluster changes between cycles: Pods added / removed / terminating, Nodes relabelled or
losing a topology key, nodes coming and going, Pods of other namespaces, several constraints and
Pods whose node inclusion policies need the node-by-node path."""

from __future__ import annotations

import random
from typing import Any

from py_scheduler.cache.snapshot import Snapshot
from py_scheduler.framework.types import CycleState, NodeInfo, PodInfo
from py_scheduler.plugins.pod_topology_spread.common import PRE_FILTER_STATE_KEY
from py_scheduler.plugins.pod_topology_spread.filtering import PreFilterState
from py_scheduler.plugins.pod_topology_spread.plugin import PodTopologySpread

Obj = dict[str, Any]
ZONE = "zone"
RACK = "rack"


def _node(name: str, zone: str | None, rack: str | None, taint: bool = False) -> Obj:
    labels = {"name": name}
    if zone is not None:
        labels[ZONE] = zone
    if rack is not None:
        labels[RACK] = rack
    n: Obj = {"metadata": {"name": name, "labels": labels}, "status": {"allocatable": {"pods": "100"}}}
    if taint:
        n["spec"] = {"taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]}
    return n


_uid = iter(range(10**9))


def _pod(app: str, ns: str = "default", on: str | None = None, deleting: bool = False, **spec: Any) -> Obj:
    i = next(_uid)
    meta: Obj = {"name": f"p{i}", "namespace": ns, "uid": f"u{i}", "labels": {"app": app}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    s: Obj = dict(spec)
    if on:
        s["nodeName"] = on
    return {"metadata": meta, "spec": s}


def _incoming(app: str, keys: list[str], **spec: Any) -> PodInfo:
    cons = [{"maxSkew": 1, "topologyKey": k, "whenUnsatisfiable": "DoNotSchedule",
             "labelSelector": {"matchLabels": {"app": app}}} for k in keys]
    return PodInfo(_pod(app, topologySpreadConstraints=cons, **spec))


def _expected(pod: PodInfo, nodes: list[NodeInfo], keys: list[str], honor_taints: bool) -> list[dict[str, int]]:
    """Upstream's counting, written out plainly (selector ``app=<pod's app>``; only the taint
    inclusion policy is exercised here)."""
    app = pod.labels["app"]
    out: list[dict[str, int]] = [{} for _ in keys]
    for ni in nodes:
        if ni.node is None or not all(k in ni.labels for k in keys):
            continue
        if honor_taints and ni.taints:
            continue
        for i, k in enumerate(keys):
            n = sum(1 for p in ni.pods if p.namespace == pod.namespace and p.labels.get("app") == app
                    and "deletionTimestamp" not in p.pod["metadata"])
            v = ni.labels[k]
            out[i][v] = out[i].get(v, 0) + n
    return out


def _counts(pl: PodTopologySpread, snap: Snapshot, pod: PodInfo) -> list[dict[str, int]]:
    state = CycleState(snap)
    _, st = pl.pre_filter(state, pod, snap.node_info_list)
    assert st.is_success(), st.reasons
    s = state.data[PRE_FILTER_STATE_KEY]
    assert isinstance(s, PreFilterState)
    for i, counts in enumerate(s.tp_value_to_match_num):
        if counts:
            assert s.critical_paths[i].min_match_num == min(counts.values())
    return s.tp_value_to_match_num


def test_memo_follows_pod_and_node_changes_on_random_clusters() -> None:
    rng = random.Random(7)
    names = [f"n{i}" for i in range(40)]
    nodes = [_node(n, f"z{rng.randrange(4)}", f"r{rng.randrange(6)}") for n in names]
    pods = [_pod(rng.choice("ab"), ns=rng.choice(["default", "other"]), on=rng.choice(names)) for _ in range(60)]
    snap = Snapshot.from_objects(nodes, pods)
    pl = PodTopologySpread()
    checks = 0
    for step in range(150):
        ni = rng.choice(snap.node_info_list)
        action = rng.randrange(6)
        if action == 0:
            ni.add_pod(PodInfo(_pod(rng.choice("ab"), ns=rng.choice(["default", "other"]), on=ni.name,
                                    deleting=rng.random() < 0.2)))
        elif action == 1 and ni.pods:
            ni.remove_pod(rng.choice(ni.pods).uid)
        elif action == 2:  # relabel: new zone, or the zone / rack key gone
            ni.set_node(_node(ni.name, rng.choice(["z0", "z1", "z9", None]), rng.choice(["r0", "r7", None])))
        elif action == 3 and len(snap.node_info_list) > 5:  # a node goes
            snap.node_info_list = [n for n in snap.node_info_list if n is not ni]
        elif action == 4:  # a node comes
            name = f"new{step}"
            snap.node_info_list = [*snap.node_info_list, NodeInfo(_node(name, f"z{rng.randrange(5)}", "r1"))]
        elif action == 5:  # a snapshot clone of the list (same generations)
            snap.node_info_list = [n.clone() for n in snap.node_info_list]
        for app in "ab":
            for keys in ([ZONE], [ZONE, RACK], [RACK]):
                pod = _incoming(app, keys)
                assert _counts(pl, snap, pod) == _expected(pod, snap.node_info_list, keys, False), (step, app, keys)
                assert _counts(PodTopologySpread(), snap, pod) == _expected(pod, snap.node_info_list, keys, False)
                checks += 1
    assert checks == 150 * 6
    assert len(pl._count_memos) == 8  # (keys, key, selector, namespace) combinations in use: 4 per app


def test_memo_and_node_by_node_path_mix() -> None:
    """A constraint honoring taints takes the node-by-node path, one that does not the memo; both
    agree with plain counting as tainted nodes and Pods change."""
    nodes = [_node(f"n{i}", f"z{i % 3}", "r0", taint=i % 4 == 0) for i in range(12)]
    pods = [_pod("a", on=f"n{i % 12}") for i in range(30)]
    snap = Snapshot.from_objects(nodes, pods)
    pl = PodTopologySpread()
    cons = [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
             "labelSelector": {"matchLabels": {"app": "a"}}, "nodeTaintsPolicy": "Honor"},
            {"maxSkew": 1, "topologyKey": RACK, "whenUnsatisfiable": "DoNotSchedule",
             "labelSelector": {"matchLabels": {"app": "a"}}}]
    for round_ in range(4):
        pod = PodInfo(_pod("a", topologySpreadConstraints=cons))
        got = _counts(pl, snap, pod)
        assert got[0] == _expected(pod, snap.node_info_list, [ZONE, RACK], True)[0]
        assert got[1] == _expected(pod, snap.node_info_list, [ZONE, RACK], False)[1]
        assert sum(got[1].values()) == len([p for ni in snap.node_info_list for p in ni.pods])
        snap.node_info_list[round_].add_pod(PodInfo(_pod("a", on=snap.node_info_list[round_].name)))
        snap.node_info_list[round_ + 1].set_node(_node(snap.node_info_list[round_ + 1].name, "z1", "r0",
                                                       taint=True))


def test_returned_counts_are_the_callers() -> None:
    """AddPod / RemovePod change the PreFilter state's counts: the memo's totals must not change."""
    snap = Snapshot.from_objects([_node(f"n{i}", f"z{i % 2}", "r0") for i in range(4)],
                                 [_pod("a", on="n0"), _pod("a", on="n1")])
    pl = PodTopologySpread()
    pod = _incoming("a", [ZONE])
    first = _counts(pl, snap, pod)
    first[0]["z0"] += 10
    assert _counts(pl, snap, pod) == [{"z0": 1, "z1": 1}]


def _status_keys(pl: PodTopologySpread, state: CycleState, pod: PodInfo,
                 nodes: list[NodeInfo]) -> tuple[list[tuple[int, tuple[str, ...]]], list[tuple[int, tuple[str, ...]]]]:
    got = pl.filter_nodes(state, pod, nodes)
    batch: list[tuple[int, tuple[str, ...]]] = (
        [(0, ())] * len(nodes) if got is None else [(int(s.code), tuple(s.reasons)) for s in got])
    one = [(int(s.code), tuple(s.reasons)) for s in (pl.filter(state, pod, ni) for ni in nodes)]
    return batch, one


def test_filter_nodes_from_memoized_values_equals_filter() -> None:
    """Filter's batch form reads chunks' topology values from the PreFilter memo: runs, runs
    wrapping around the list end, arbitrary subsets, and chunks holding a changed NodeInfo (a
    clone with an extra Pod, as with nominated Pods; a relabelled node) give what filter gives."""
    rng = random.Random(3)
    names = [f"n{i}" for i in range(30)]
    nodes = [_node(n, f"z{i % 4}" if i % 7 else None, f"r{i % 3}") for i, n in enumerate(names)]
    pods = [_pod(rng.choice("ab"), on=rng.choice(names)) for _ in range(70)]
    snap = Snapshot.from_objects(nodes, pods)
    pl = PodTopologySpread()
    fast = 0
    for step in range(60):
        keys = [[ZONE], [ZONE, RACK], [RACK]][step % 3]
        pod = _incoming(rng.choice("ab"), keys)
        if step % 2:  # larger maxSkew for the first constraint: fewer rejections
            pod.spec["topologySpreadConstraints"][0]["maxSkew"] = 2
            pod.memos.clear()
        state = CycleState(snap)
        _, st = pl.pre_filter(state, pod, snap.node_info_list)
        assert st.is_success()
        s = state.data[PRE_FILTER_STATE_KEY]
        assert isinstance(s, PreFilterState) and s.value_memos is not None
        lst = snap.node_info_list
        n = len(lst)
        a, b = sorted(rng.sample(range(n + 1), 2))
        w = rng.randrange(1, n)
        changed = list(lst[a:b])
        if changed:
            k = rng.randrange(len(changed))
            clone = changed[k].clone()
            clone.add_pod(PodInfo(_pod(pod.labels["app"], on=clone.name)))
            changed[k] = clone
        chunks = [lst[a:b], lst[w:] + lst[:rng.randrange(w)], rng.sample(lst, rng.randrange(1, n)), changed]
        for chunk in chunks:
            batch, one = _status_keys(pl, state, pod, chunk)
            assert batch == one, (step, chunk)
            if chunk:
                gens = [ni.generation for ni in chunk]
                fast += all(m.values_for(chunk, gens) is not None for m in s.value_memos)
        snap.node_info_list[rng.randrange(n)].add_pod(PodInfo(_pod(rng.choice("ab"))))
        if step % 5 == 0:
            ni = rng.choice(snap.node_info_list)
            ni.set_node(_node(ni.name, rng.choice(["z0", "z5", None]), "r1"))
    assert fast >= 60  # the runs and wrapped runs took the memoized path


def test_constraints_on_keys_no_node_has_build_no_memo() -> None:
    """Thousands of constraints on keys no Node carries (an adversarial Pod: 12 000 of them blocked the
    loop 5-6 s per cycle at 500 nodes, kube-scheduler bound it in 1 s): counts are upstream's (none)
    and no count memo is built, in PreFilter and in PreScore; with keys some node has, the memos are."""
    snap = Snapshot.from_objects([_node(f"n{i}", f"z{i % 3}", "r0") for i in range(20)],
                                 [_pod("a", on=f"n{i}") for i in range(10)])
    keys = [ZONE, *(f"k{j}" for j in range(300))]
    pl = PodTopologySpread()
    pod = _incoming("a", keys)
    assert _counts(pl, snap, pod) == _expected(pod, snap.node_info_list, keys, False) == [{} for _ in keys]
    assert len(pl._count_memos) == 0
    soft = PodInfo(_pod("a", topologySpreadConstraints=[
        {"maxSkew": 1, "topologyKey": k, "whenUnsatisfiable": "ScheduleAnyway",
         "labelSelector": {"matchLabels": {"app": "a"}}} for k in keys]))
    state = CycleState(snap)
    assert pl.pre_score(state, soft, snap.node_info_list).is_success()
    assert len(pl._count_memos) == 0
    assert state.data["PreScorePodTopologySpread"].ignored_nodes == {ni.name for ni in snap.node_info_list}
    assert _counts(pl, snap, _incoming("a", [ZONE, RACK])) == [{"z0": 4, "z1": 3, "z2": 3}, {"r0": 10}]
    assert len(pl._count_memos) == 2
