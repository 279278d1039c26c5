"""PodTopologySpread's scoring speed-ups against upstream's plain scoring, on random clusters that
change between cycles.

What is checked (upstream ``pkg/scheduler/framework/plugins/podtopologyspread/scoring.go``, written
out plainly below as :func:`_plain`): PreScore's state (constraints, ignored nodes, the counts per
topology value over every node of the snapshot, the ``log(size + 2)`` weights), ``score_nodes`` (the
column form) and ``score`` node by node, and NormalizeScore, for one plugin instance kept across
cycles, so that its count memos (shared with PreFilter) are carried while Pods come and go, nodes
are relabelled, lose a topology key, come and go, and the node list is a snapshot clone. Incoming
Pods have 1-3 ScheduleAnyway constraints (zone, rack, hostname; selectors matching some Pods, every
Pod or none; node inclusion policies honoring taints or a nodeSelector) or none, with a Service
selecting them (the System / List default constraints).
"""

from __future__ import annotations

import math
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from py_scheduler.cache.snapshot import ClusterObjects, Snapshot
from py_scheduler.framework.gomath import go_div, go_round
from py_scheduler.framework.types import CycleState, NodeInfo, PodInfo
from py_scheduler.plugins.pod_topology_spread.common import (
    LABEL_HOSTNAME,
    PRE_SCORE_STATE_KEY,
    SCHEDULE_ANYWAY,
    _InclusionContext,
    count_pods_match_selector,
    node_labels_match_spread_constraints,
)
from py_scheduler.plugins.pod_topology_spread.plugin import PodTopologySpread
from py_scheduler.plugins.pod_topology_spread.scoring import PreScoreState, score_for_count, topology_normalizing_weight

Obj = dict[str, Any]
ZONE, RACK = "zone", "rack"
KEYS = (ZONE, RACK, LABEL_HOSTNAME)

_uid = iter(range(10**9))


def _node(name: str, zone: str | None, rack: str | None, host: bool, taint: bool) -> Obj:
    labels = {"name": name}
    for k, v in ((ZONE, zone), (RACK, rack), (LABEL_HOSTNAME, name if host else None)):
        if v is not None:
            labels[k] = v
    n: Obj = {"metadata": {"name": name, "labels": labels}, "status": {"allocatable": {"pods": "100"}}}
    if taint:
        n["spec"] = {"taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]}
    return n


def _pod(app: str, ns: str = "default", on: str | None = None, deleting: bool = False, **spec: Any) -> Obj:
    i = next(_uid)
    meta: Obj = {"name": f"p{i}", "namespace": ns, "uid": f"u{i}", "labels": {"app": app}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    s: Obj = dict(spec)
    if on:
        s["nodeName"] = on
    return {"metadata": meta, "spec": s}


_zone = st.sampled_from(["z0", "z1", "z2", "", None])
_rack = st.sampled_from(["r0", "r1", None])
_node_args = st.tuples(_zone, _rack, st.sampled_from([True, True, True, False]), st.booleans())

_constraint = st.fixed_dictionaries({
    "maxSkew": st.integers(1, 3),
    "topologyKey": st.sampled_from(KEYS),
    "whenUnsatisfiable": st.sampled_from([SCHEDULE_ANYWAY, SCHEDULE_ANYWAY, "DoNotSchedule"]),
    "labelSelector": st.sampled_from([{"matchLabels": {"app": "a"}}, {"matchLabels": {"app": "b"}}, {}, None]),
}, optional={"nodeTaintsPolicy": st.just("Honor"), "nodeAffinityPolicy": st.just("Ignore")})

_incoming = st.tuples(
    st.sampled_from("ab"),
    st.lists(_constraint, max_size=3).filter(lambda cs: len({(c["topologyKey"], c["whenUnsatisfiable"])
                                                              for c in cs}) == len(cs)),
    st.sampled_from([None, {ZONE: "z0"}]),
)

_change = st.tuples(st.integers(0, 6), st.integers(0, 10**6), _node_args, st.sampled_from("ab"),
                    st.booleans())


def _plain(pl: PodTopologySpread, snap: Snapshot, pod: PodInfo,
           feasible: list[NodeInfo]) -> tuple[PreScoreState | None, list[int], dict[str, int]]:
    """Upstream's PreScore, Score (node by node) and NormalizeScore, written out plainly."""
    constraints = pl.get_constraints(pod, SCHEDULE_ANYWAY, snap.objects)
    all_nodes = snap.node_info_list
    if not all_nodes or not constraints:
        return None, [], {}
    require_all = bool(pod.spec.get("topologySpreadConstraints")) or not pl.system_defaulted
    ignored: set[str] = set()
    counts: list[dict[str, int]] = [{} for _ in constraints]
    for ni in feasible:
        if require_all and not node_labels_match_spread_constraints(ni.labels, constraints):
            ignored.add(ni.name)
            continue
        for i, c in enumerate(constraints):
            if c.topology_key != LABEL_HOSTNAME:
                counts[i].setdefault(ni.labels.get(c.topology_key, ""), 0)
    weights = [topology_normalizing_weight(len(feasible) - len(ignored) if c.topology_key == LABEL_HOSTNAME
                                           else len(counts[i])) for i, c in enumerate(constraints)]
    ctx = _InclusionContext(pod, constraints)
    for ni in all_nodes:
        if ni.node is None or (require_all and not node_labels_match_spread_constraints(ni.labels, constraints)):
            continue
        for i, c in enumerate(constraints):
            v = ni.labels.get(c.topology_key, "")
            if ctx.match(c, ni.node) and v in counts[i]:
                counts[i][v] += count_pods_match_selector(ni.pods, c.selector, pod.namespace)
    raw: list[int] = []
    for ni in feasible:
        score = 0.0
        if ni.name not in ignored:
            for i, c in enumerate(constraints):
                v = ni.labels.get(c.topology_key)
                if v is None:
                    continue
                cnt = (count_pods_match_selector(ni.pods, c.selector, pod.namespace) if c.topology_key == LABEL_HOSTNAME
                       else counts[i][v])
                score += score_for_count(cnt, c.max_skew, weights[i])
        raw.append(int(go_round(score)))
    scores = [-1 if ni.name in ignored else sc for ni, sc in zip(feasible, raw, strict=True)]
    valid = [sc for ni, sc in zip(feasible, scores, strict=True) if ni.name not in ignored]
    lo, hi = min(valid, default=math.inf), max([0, *valid])
    normalized = {ni.name: 0 if sc == -1 else 100 if hi == 0 else go_div(100 * (hi + int(lo) - sc), hi)
                  for ni, sc in zip(feasible, scores, strict=True)}
    return PreScoreState(list(constraints), ignored, counts, weights), raw, normalized


def _apply(snap: Snapshot, change: tuple[int, int, tuple[Any, ...], str, bool], step: int) -> None:
    what, pick, (zone, rack, host, taint), app, flag = change
    lst = snap.node_info_list
    ni = lst[pick % len(lst)]
    if what == 0:
        ni.add_pod(PodInfo(_pod(app, ns="other" if flag and pick % 3 == 0 else "default", on=ni.name,
                                deleting=flag and pick % 3 == 1)))
    elif what == 1 and ni.pods:
        ni.remove_pod(ni.pods[pick % len(ni.pods)].uid)
    elif what == 2:
        ni.set_node(_node(ni.name, zone, rack, host, taint))
    elif what == 3 and len(lst) > 2:
        snap.node_info_list = [n for n in lst if n is not ni]
    elif what == 4:
        snap.node_info_list = [*lst, NodeInfo(_node(f"new{step}-{pick}", zone, rack, host, taint))]
    elif what == 5:
        snap.node_info_list = [n.clone() for n in lst]
    else:  # the list reordered (the same NodeInfos at other positions)
        k = pick % len(lst)
        snap.node_info_list = lst[k:] + lst[:k]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.filter_too_much])
@given(nodes=st.lists(_node_args, min_size=1, max_size=10),
       pods=st.lists(st.tuples(st.sampled_from("ab"), st.integers(0, 99), st.booleans()), max_size=25),
       list_defaulting=st.booleans(),
       rounds=st.lists(st.tuples(_incoming, st.lists(st.integers(0, 99), min_size=1, max_size=10),
                                 st.lists(_change, max_size=4)), min_size=1, max_size=6),
       data=st.data())
def test_scoring_equals_upstreams_plain_scoring(nodes: list[tuple[Any, ...]], pods: list[tuple[str, int, bool]],
                                               list_defaulting: bool,
                                               rounds: list[tuple[Any, list[int], list[Any]]],
                                               data: st.DataObject) -> None:
    names = [f"n{i}" for i in range(len(nodes))]
    objs = ClusterObjects()
    objs.upsert("Service", {"kind": "Service", "metadata": {"name": "svc", "namespace": "default"},
                            "spec": {"selector": {"app": "a"}}})
    snap = Snapshot.from_objects(
        [_node(n, *a) for n, a in zip(names, nodes, strict=True)],
        [_pod(app, on=names[k % len(names)], deleting=d and k % 4 == 0) for app, k, d in pods], objs)
    if list_defaulting:
        pl = PodTopologySpread([{"maxSkew": 2, "topologyKey": ZONE, "whenUnsatisfiable": SCHEDULE_ANYWAY},
                                {"maxSkew": 1, "topologyKey": LABEL_HOSTNAME,
                                 "whenUnsatisfiable": SCHEDULE_ANYWAY}], "List")
    else:
        pl = PodTopologySpread()
    for step, ((app, constraints, selector), picks, changes) in enumerate(rounds):
        spec: Obj = {}
        if constraints:
            spec["topologySpreadConstraints"] = constraints
        if selector:
            spec["nodeSelector"] = selector
        pod = PodInfo(_pod(app, **spec))
        lst = snap.node_info_list
        feasible = list(dict.fromkeys(lst[k % len(lst)] for k in picks))
        if data.draw(st.booleans(), label="feasible are clones"):
            feasible = [ni.clone() for ni in feasible]
        want_state, want_raw, want_norm = _plain(pl, snap, pod, feasible)
        state = CycleState(snap)
        st_ = pl.pre_score(state, pod, feasible)
        if want_state is None:
            assert st_.is_skip()
        else:
            assert st_.is_success(), st_.reasons
            got = state.data[PRE_SCORE_STATE_KEY]
            assert isinstance(got, PreScoreState)
            assert list(map(repr, got.constraints)) == list(map(repr, want_state.constraints))  # selectors: new objects
            assert (got.ignored_nodes, got.topology_value_to_pod_counts, got.topology_normalizing_weight) == (
                want_state.ignored_nodes, want_state.topology_value_to_pod_counts,
                want_state.topology_normalizing_weight), step
            values, s = pl.score_nodes(state, pod, feasible)
            assert s.is_success()
            assert values == want_raw
            assert [pl.score(state, pod, ni)[0] for ni in feasible] == want_raw
            scores = {ni.name: v for ni, v in zip(feasible, values, strict=True)}
            assert pl.normalize_score(state, pod, scores).is_success()
            assert scores == want_norm
        for c in changes:
            _apply(snap, c, step)
