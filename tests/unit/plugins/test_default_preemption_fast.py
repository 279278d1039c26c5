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
from py_scheduler.framework.preemption import compile_pdbs, more_important_pod, sort_by_importance
from py_scheduler.framework.runtime import Framework
from py_scheduler.framework.types import CycleState, NodeInfo, PodInfo, StateData, _clones, pod_pvc_keys
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
    if fw.handle is not None:
        fw.handle.snapshot = snap
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
