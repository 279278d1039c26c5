"""The preemption dry run's speed-ups (issue 21, workload ``Preemption``) against their plain forms.

Each shortcut must leave every result as it was:

* ``sort_by_importance`` (py_scheduler/framework/preemption.py): up to 12 Pods, Python's stable sort
  on ``(-priority, start time)`` instead of Go's ``sort.Slice`` replayed with ``MoreImportantVictim``
  (:func:`~py_scheduler.framework.gosort.sort_slice`);
* ``CycleState.clone`` (py_scheduler/framework/types.py): "is this value StateData" decided once
  per class instead of a runtime Protocol check per value;
* ``NODE_PODS_INDEPENDENT_FILTERS`` (py_scheduler/plugins/default_preemption.py): the reprieve checks
  of ``SelectVictimsOnNode`` leave out the Filter plugins whose verdict does not read the node's Pods;
* ``NodeInfo.add_pod`` / ``remove_pod`` (types.py): the affinity lists and PVC counts are skipped
  for Pods without affinity / volumes.

Clusters come from the parity generator (``bench/parity_lib/generator.py``: priorities, PDBs,
terminating Pods, nominated Pods, taints, node affinity, host ports, volumes, DRA, spreading and
Pod affinity), so the plugins run on the inputs the parity oracle checks.

Upstream: ``pkg/scheduler/framework/plugins/defaultpreemption/default_preemption.go``
(``SelectVictimsOnNode``), ``pkg/scheduler/framework/preemption/util.go`` (``MoreImportantVictim``),
``pkg/scheduler/framework/cycle_state.go`` (``Clone``), ``pkg/scheduler/framework/types.go``
(``NodeInfo.AddPodInfo`` / ``RemovePod``).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.parity_lib.generator import scenario
from bench.parity_lib.runner import profile_for
from py_scheduler.cache.snapshot import Snapshot
from py_scheduler.framework.config import build_framework
from py_scheduler.framework.gosort import sort_slice
from py_scheduler.framework.preemption import VictimsMemo, compile_pdbs, more_important_pod, sort_by_importance
from py_scheduler.framework.runtime import Framework
from py_scheduler.framework.types import Code, CycleState, NodeInfo, PodInfo, StateData, Status, _clones, pod_pvc_keys
from py_scheduler.plugins import default_preemption, registry
from py_scheduler.plugins.default_preemption import NODE_PODS_INDEPENDENT_FILTERS, DefaultPreemption

Obj = dict[str, Any]

NOW_NS = 1_800_000_000 * 10**9
SCENARIO_INDEX = st.integers(0, 10**6)
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _cluster(index: int) -> tuple[list[Obj], Snapshot, Framework, list[PodInfo]]:
    objects = scenario(21, index)
    snap = Snapshot.from_object_list(objects)
    fw = build_framework(profile_for(objects), registry=registry)
    pending = [PodInfo(o) for o in objects if o["kind"] == "Pod" and not o["spec"].get("nodeName")]
    nominated: dict[str, list[PodInfo]] = {}
    for pi in pending:
        nnn = (pi.pod.get("status") or {}).get("nominatedNodeName")
        if nnn:
            nominated.setdefault(nnn, []).append(pi)
    fw.nominator = nominated
    return objects, snap, fw, pending


def _pre_filtered(fw: Framework, snap: Snapshot, pi: PodInfo) -> CycleState | None:
    state = CycleState(snap)
    _, s, _ = fw.run_pre_filter(state, pi, snap.node_info_list)
    return state if s.is_success() else None


# -- sort_by_importance --------------------------------------------------------------------------------
@st.composite
def victims(draw: st.DrawFn) -> list[PodInfo]:
    """Up to 14 Pods with few distinct priorities and start times: many equally important."""
    out = []
    for i in range(draw(st.integers(0, 14))):
        start = draw(st.sampled_from([None, "2024-01-01T00:00:01Z", "2024-01-01T00:00:02Z", "garbage"]))
        status = {"startTime": start} if start else {}
        out.append(PodInfo({"metadata": {"name": f"v{i}", "namespace": "default", "uid": f"u{i}"},
                            "spec": {"priority": draw(st.sampled_from([0, 1, 2])), "containers": []},
                            "status": status}))
    return out


@given(victims())
@settings(max_examples=300, deadline=None)
def test_sort_by_importance_is_gos_sort_slice(pods: list[PodInfo]) -> None:
    plain = list(pods)
    sort_slice(plain, lambda a, b: more_important_pod(a, b, NOW_NS))
    fast = list(pods)
    sort_by_importance(fast, NOW_NS)
    assert [p.name for p in fast] == [p.name for p in plain]


# -- CycleState.clone ----------------------------------------------------------------------------------
class _WithClone:
    def clone(self) -> _WithClone:
        return _WithClone()


class _CloneNone:
    clone = None


class _Inherits(_WithClone):
    pass


@pytest.mark.parametrize("value", [_WithClone(), _CloneNone(), _Inherits(), {}, [], 3, "s", None, frozenset()])
def test_clones_is_the_protocol_check(value: object) -> None:
    assert _clones(type(value)) == isinstance(value, StateData)


@given(SCENARIO_INDEX)
@SETTINGS
def test_cycle_state_clone_copies_exactly_the_state_data(index: int) -> None:
    """Every value PreFilter writes is classed as the Protocol check classes it; one without
    ``clone`` is shared (StateData may return itself when immutable)."""
    _, snap, fw, pending = _cluster(index)
    for pi in pending:
        state = CycleState(snap)
        fw.run_pre_filter(state, pi, snap.node_info_list)
        copy = state.clone()
        assert copy.data.keys() == state.data.keys()
        for key, value in state.data.items():
            assert _clones(type(value)) == isinstance(value, StateData), key
            assert type(copy.data[key]) is type(value), key
            if not isinstance(value, StateData):
                assert copy.data[key] is value, key


# -- NODE_PODS_INDEPENDENT_FILTERS ---------------------------------------------------------------------
def _verdict(fw: Framework, name: str, state: CycleState, pi: PodInfo, ni: NodeInfo) -> tuple[Any, ...]:
    s = fw.plugins[name].filter(state, pi, ni)
    return s.code, tuple(s.reasons)


@given(SCENARIO_INDEX)
@SETTINGS
def test_independent_filters_do_not_read_the_nodes_pods(index: int) -> None:
    """Their verdict on a node is the same with its Pods, without them, and with another node's."""
    _, snap, fw, pending = _cluster(index)
    names = [n for n in NODE_PODS_INDEPENDENT_FILTERS if n in fw.plugins]
    assert names
    nodes = snap.node_info_list
    for pi in pending:
        state = _pre_filtered(fw, snap, pi)
        if state is None:
            continue
        for k, ni in enumerate(nodes):
            assert ni.node is not None
            empty = NodeInfo(ni.node)
            other = NodeInfo(ni.node, nodes[(k + 1) % len(nodes)].pods)
            for name in names:
                if name in state.skip_filter:
                    continue
                want = _verdict(fw, name, state, pi, ni)
                assert _verdict(fw, name, state, pi, empty) == want, name
                assert _verdict(fw, name, state, pi, other) == want, name


def _dry_runs(fw: Framework, snap: Snapshot, objects: list[Obj], pi: PodInfo) -> list[tuple[Any, ...]]:
    """``select_victims_on_node`` on every node (each on its own clones): victims, violations, status."""
    pl = fw.plugins["DefaultPreemption"]
    assert isinstance(pl, DefaultPreemption)
    pl.now_ns = lambda: NOW_NS
    pl._reprieve_memo = None
    state = _pre_filtered(fw, snap, pi)
    if state is None:
        return []
    pdbs = compile_pdbs([o for o in objects if o["kind"] == "PodDisruptionBudget"])
    out = []
    for ni in snap.node_info_list:
        got, num, s = pl.select_victims_on_node(state.clone(), pi, ni.clone(), pdbs)
        out.append((ni.name, [v.key for v in got], num, s.code, tuple(s.reasons)))
    return out


@given(SCENARIO_INDEX)
@SETTINGS
def test_reprieve_shortcut_keeps_every_dry_run(index: int) -> None:
    """Each pending Pod as generated, and once more with a priority above every bound Pod's (every
    Pod of a node is then a potential victim, so most nodes go through the reprieve checks)."""
    objects, snap, fw, pending = _cluster(index)
    top = [PodInfo({**pi.pod, "spec": {**pi.pod["spec"], "priority": 10**9}}) for pi in pending]
    for pi in pending + top:
        fast = _dry_runs(fw, snap, objects, pi)
        with pytest.MonkeyPatch.context() as m:
            m.setattr(default_preemption, "NODE_PODS_INDEPENDENT_FILTERS", frozenset())
            plain = _dry_runs(fw, snap, objects, pi)
        assert fast == plain


def test_reprieve_shortcut_is_used() -> None:
    """The shortcut is on in the default profile (the property test above would pass without it)."""
    fw = build_framework(profile_for([]), registry=registry)
    pl = fw.plugins["DefaultPreemption"]
    assert isinstance(pl, DefaultPreemption)
    kept = [p.name for p in pl._reprieve_filters(fw.filter_plugins)]
    assert "NodeResourcesFit" in kept and "TaintToleration" not in kept and "NodeAffinity" not in kept
    assert pl._reprieve_filters(fw.filter_plugins) is pl._reprieve_filters(fw.filter_plugins)


# -- NodeInfo.add_pod / remove_pod ---------------------------------------------------------------------
@given(SCENARIO_INDEX, st.randoms(use_true_random=False))
@SETTINGS
def test_node_info_sums_after_adds_and_removes(index: int, rnd: Any) -> None:
    """After any sequence of adds and removes, the derived fields are those of the Pods held."""
    objects = scenario(21, index)
    node = next(o for o in objects if o["kind"] == "Node")
    pods = [PodInfo(o) for o in objects if o["kind"] == "Pod"]
    ni = NodeInfo(node)
    held: list[PodInfo] = []
    for _ in range(2 * len(pods)):
        if held and rnd.random() < 0.4:
            p = held.pop(rnd.randrange(len(held)))
            assert ni.remove_pod(p.uid) is p
        else:
            p = rnd.choice(pods)
            if p in held:
                continue
            ni.add_pod(p)
            held.append(p)
        assert Counter(ni.pods) == Counter(held)
        assert Counter(ni.pods_with_affinity) == Counter(p for p in held if p.has_affinity())
        assert Counter(ni.pods_with_required_anti_affinity) == Counter(
            p for p in held if p.has_required_anti_affinity())
        assert ni.pvc_ref_counts == dict(Counter(k for p in held for k in pod_pvc_keys(p.pod)))
        assert ni.requested.milli_cpu == sum(p.requests.milli_cpu for p in held)
        assert ni.requested.memory == sum(p.requests.memory for p in held)
        assert ni.non_zero_requested.milli_cpu == sum(p.non0_cpu for p in held)
        assert ni.non_zero_requested.memory == sum(p.non0_mem for p in held)


# -- VictimsMemo (dry-run results across cycles) --------------------------------------------------------
def _node_obj(i: int, cpu: int, taint: bool, unschedulable: bool) -> Obj:
    spec: Obj = {}
    if taint:
        spec["taints"] = [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]
    if unschedulable:
        spec["unschedulable"] = True
    alloc = {"cpu": str(cpu), "memory": "64Gi", "pods": "5"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": f"n{i}", "labels": {"kubernetes.io/hostname": f"n{i}", "zone": f"z{i % 2}"}},
            "spec": spec, "status": {"allocatable": alloc, "capacity": alloc}}


def _pod_obj(name: str, cpu: int, prio: int, node: str | None = None, start: str | None = None,
             port: int | None = None, tolerate: bool = False, zone: str | None = None,
             app: str = "a", nnn: str | None = None) -> Obj:
    c: Obj = {"name": "c", "image": "x", "resources": {"requests": {"cpu": f"{cpu}"}}}
    if port:
        c["ports"] = [{"containerPort": port, "hostPort": port}]
    spec: Obj = {"containers": [c], "priority": prio}
    if node:
        spec["nodeName"] = node
    if tolerate:
        spec["tolerations"] = [{"key": "dedicated", "operator": "Exists"}]
    if zone:
        spec["nodeSelector"] = {"zone": zone}
    status: Obj = {}
    if start:
        status["startTime"] = start
    if nnn:
        status["nominatedNodeName"] = nnn
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "labels": {"app": app}},
            "spec": spec, "status": status}


_STARTS = [None, None, "2024-01-01T00:00:01Z", "2024-01-01T00:00:02Z"]


@st.composite
def memo_clusters(draw: st.DrawFn) -> tuple[list[Obj], list[Obj], list[tuple[str, int]]]:
    """(nodes and bound Pods and PDBs, pending Pods, steps): small clusters of the plugins the memo
    is used with (resources, host ports, taints, cordons, node selectors), with start times, PDBs and
    nominated Pods; steps are (what, number) changes made between dry runs."""
    n = draw(st.integers(1, 5))
    objs: list[Obj] = [_node_obj(i, draw(st.sampled_from([2, 4, 8])), draw(st.booleans()) and i > 0,
                                 draw(st.integers(0, 5)) == 0) for i in range(n)]
    for k in range(draw(st.integers(0, 12))):
        objs.append(_pod_obj(f"b{k}", draw(st.sampled_from([1, 2, 3])), draw(st.sampled_from([0, 1, 5, 50])),
                             f"n{draw(st.integers(0, n - 1))}", draw(st.sampled_from(_STARTS)),
                             draw(st.sampled_from([None, None, 80])), app=draw(st.sampled_from("ab"))))
    for k in range(draw(st.integers(0, 2))):
        objs.append({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                     "metadata": {"name": f"pdb{k}", "namespace": "default"},
                     "spec": {"selector": {"matchLabels": {"app": draw(st.sampled_from("ab"))}}},
                     "status": {"disruptionsAllowed": draw(st.integers(0, 1))}})
    # Pods of one or two templates (same spec, other names: the memo's hits across Pods).
    templates = [dict(cpu=draw(st.sampled_from([1, 2, 4])), prio=draw(st.sampled_from([10, 100])),
                      port=draw(st.sampled_from([None, None, 80])), tolerate=draw(st.booleans()),
                      zone=draw(st.sampled_from([None, None, "z0"]))) for _ in range(draw(st.integers(1, 2)))]
    pending = [_pod_obj(f"p{k}", **draw(st.sampled_from(templates)),  # type: ignore[arg-type]
                        nnn=draw(st.sampled_from([None, None, None, "n0"])))
               for k in range(draw(st.integers(1, 4)))]
    steps = draw(st.lists(st.tuples(st.sampled_from(["preempt", "bind", "node", "none"]), st.integers(0, 99)),
                          min_size=1, max_size=6))
    return objs, pending, steps


def _candidates(pl: DefaultPreemption, state: CycleState, pi: PodInfo, snap: Snapshot) -> tuple[Any, ...]:
    nodes = list(snap.node_info_list)
    unsched = {ni.name: Status(Code.UNSCHEDULABLE, ["x"]) for ni in nodes}
    cands, statuses, errs = pl.evaluator.find_candidates(state, pi, nodes, unsched)
    return ([(c.name, [v.key for v in c.victims.pods], c.victims.num_pdb_violations) for c in cands],
            {k: (s.code, tuple(s.reasons), s.plugin) for k, s in statuses.items()}, errs)


@given(memo_clusters())
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_victims_memo_keeps_every_dry_run(cluster: tuple[list[Obj], list[Obj], list[tuple[str, int]]]) -> None:
    """Dry runs with the memo equal dry runs without it, on every node, before and after each change
    of the cluster (victims evicted, a Pod bound, a Node object replaced) and for every Pod."""
    objs, pending, steps = cluster
    snap = Snapshot.from_object_list(objs)
    fw = build_framework(profile_for([]), registry=registry)
    pl = fw.plugins["DefaultPreemption"]
    assert isinstance(pl, DefaultPreemption)
    pl.now_ns = lambda: NOW_NS
    pl.offset_rand = lambda _n: 0
    pl.args = default_preemption.DefaultPreemptionArgs(100, 100)
    pis = [PodInfo(p) for p in pending]
    fw.nominator = {"n0": [pi for pi in pis if pi.pod["status"].get("nominatedNodeName")]}
    bound = 0
    for what, k in steps:
        for pi in pis:
            state = _pre_filtered(fw, snap, pi)
            if state is None:
                continue
            with_memo = _candidates(pl, state, pi, snap)
            with pytest.MonkeyPatch.context() as m:
                m.setattr(pl, "victims_memo_context", lambda *_a: None)
                plain = _candidates(pl, state, pi, snap)
            assert with_memo == plain
        ni = snap.node_info_list[k % len(snap.node_info_list)]
        if what == "preempt" and ni.pods:
            ni.remove_pod(ni.pods[k % len(ni.pods)].uid)
        elif what == "bind":
            bound += 1
            ni.add_pod(PodInfo(_pod_obj(f"new{bound}", 1, k % 20, ni.name, _STARTS[k % 4])))
        elif what == "node":
            assert ni.node is not None
            ni.set_node(_node_obj(int(ni.name[1:]), 2 + k % 8, k % 3 == 0, k % 5 == 0))


def test_victims_memo_is_used_and_bounded() -> None:
    """The Preemption workload's shape (every node full of low-priority Pods): the second Pod's dry
    run reads every node from the memo; a changed node is computed again."""
    objs = [_node_obj(i, 4, False, False) for i in range(6)]
    objs += [_pod_obj(f"low{i}", 2, 0, f"n{i % 6}") for i in range(12)]
    snap = Snapshot.from_object_list(objs)
    fw = build_framework(profile_for([]), registry=registry)
    pl = fw.plugins["DefaultPreemption"]
    assert isinstance(pl, DefaultPreemption)
    memo = pl._victims_memo
    first, second = (PodInfo(_pod_obj(f"hi{k}", 3, 10)) for k in range(2))
    for pi in (first, second):
        state = _pre_filtered(fw, snap, pi)
        assert state is not None
        _candidates(pl, state, pi, snap)
    assert memo.misses == 6 and memo.hits == 6 and len(memo) == 6
    snap.node_info_list[0].remove_pod(snap.node_info_list[0].pods[0].uid)
    state = _pre_filtered(fw, snap, second)
    assert state is not None
    _candidates(pl, state, second, snap)
    assert memo.misses == 7 and memo.hits == 11
    small = VictimsMemo(max_entries=2)
    for ni in snap.node_info_list[:3]:
        small.put("c", ni, [], 0, Status.success())
    assert len(small) == 1
