"""TaintToleration (upstream ``tainttoleration/taint_toleration_test.go`` cases, golden vectors, the
published two-node example) and malformed tolerations."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from py_scheduler.cache.snapshot import Snapshot
from py_scheduler.framework.algorithm import Algorithm
from py_scheduler.framework.errors import ConfigError
from py_scheduler.framework.runtime import Framework
from py_scheduler.framework.types import Code, CycleState, NodeInfo, PodInfo, Status
from py_scheduler.plugins import registry
from py_scheduler.plugins.helpers.tolerations import TolerationIndex, find_untolerated_taint
from py_scheduler.plugins.node_affinity import NodeAffinity
from py_scheduler.plugins.taint_toleration import ERR_REASON_UNTOLERATED, TaintToleration
from tests.unit.plugins.plain_handle import plain_handle

GOLDEN = Path(__file__).resolve().parents[3].parent / "shared" / "golden" / "score_vectors.jsonl"
UNTOLERATED = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ["node(s) had untolerated taint(s)"], "TaintToleration")


def pod(tolerations: list[dict[str, Any]] | None = None, **spec: Any) -> PodInfo:
    s: dict[str, Any] = dict(spec)
    if tolerations is not None:
        s["tolerations"] = tolerations
    return PodInfo({"metadata": {"name": "pod1", "namespace": "default", "uid": "u1"}, "spec": s})


def node(name: str, taints: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"taints": taints or []}}


def taint(key: str, value: str, effect: str) -> dict[str, Any]:
    return {"key": key, "value": value, "effect": effect}


def run_score(pl: TaintToleration, p: PodInfo, nodes: list[dict[str, Any]]) -> dict[str, int]:
    infos = [NodeInfo(n) for n in nodes]
    state = CycleState()
    assert pl.pre_score(state, p, infos).is_success()  # never Skips
    scores: dict[str, int] = {}
    for ni in infos:
        sc, st = pl.score(state, p, ni)
        assert st.is_success()
        scores[ni.name] = sc
    assert pl.normalize_score(state, p, scores).is_success()
    return scores


# -- Filter ----------------------------------------------------------------------------------------------

DEDICATED_USER1 = taint("dedicated", "user1", "NoSchedule")


@pytest.mark.parametrize(("tolerations", "taints", "want"), [
    # A pod having no tolerations can't be scheduled onto a node with nonempty taints.
    ([], [DEDICATED_USER1], UNTOLERATED),
    ([{"key": "dedicated", "operator": "Equal", "value": "user1", "effect": "NoSchedule"}], [DEDICATED_USER1], None),
    ([{"key": "dedicated", "operator": "Equal", "value": "user2", "effect": "NoSchedule"}], [DEDICATED_USER1],
     UNTOLERATED),
    ([{"key": "foo", "operator": "Exists", "effect": "NoSchedule"}], [taint("foo", "bar", "NoSchedule")], None),
    # Multiple tolerations, multiple taints, all tolerated.
    ([{"key": "dedicated", "operator": "Equal", "value": "user2", "effect": "NoSchedule"},
      {"key": "foo", "operator": "Exists", "effect": "NoSchedule"}],
     [taint("dedicated", "user2", "NoSchedule"), taint("foo", "bar", "NoSchedule")], None),
    # Key and value match but the (non-empty) effect does not.
    ([{"key": "foo", "operator": "Equal", "value": "bar", "effect": "PreferNoSchedule"}],
     [taint("foo", "bar", "NoSchedule")], UNTOLERATED),
    # Empty toleration effect tolerates every effect.
    ([{"key": "foo", "operator": "Equal", "value": "bar"}], [taint("foo", "bar", "NoSchedule")], None),
    # PreferNoSchedule taints never block.
    ([{"key": "dedicated", "operator": "Equal", "value": "user2", "effect": "NoSchedule"}],
     [taint("dedicated", "user1", "PreferNoSchedule")], None),
    ([], [taint("dedicated", "user1", "PreferNoSchedule")], None),
    # NoExecute blocks too.
    ([], [taint("evict", "x", "NoExecute")], UNTOLERATED),
    # Gt / Lt tolerations tolerate nothing with the default (off) comparison-operator gate.
    ([{"key": "sla", "operator": "Gt", "value": "900", "effect": "NoSchedule"}], [taint("sla", "950", "NoSchedule")],
     UNTOLERATED),
    ([{"key": "sla", "operator": "Lt", "value": "900", "effect": "NoSchedule"}], [taint("sla", "800", "NoSchedule")],
     UNTOLERATED),
])
def test_filter(tolerations: list[dict[str, Any]], taints: list[dict[str, Any]], want: Status | None) -> None:
    got = TaintToleration().filter(CycleState(), pod(tolerations), NodeInfo(node("n", taints)))
    assert got == (want or Status.success())


@pytest.mark.parametrize(("op", "value", "taint_value", "fits"), [
    ("Gt", "900", "800", False),
    ("Gt", "900", "950", True),
    ("Lt", "900", "950", False),
    ("Lt", "900", "800", True),
    ("Gt", "900", "high", False),  # non-numeric taint value
])
def test_filter_comparison_operators_with_gate_on(op: str, value: str, taint_value: str, fits: bool) -> None:
    pl = TaintToleration(enable_comparison_operators=True)
    tol = [{"key": "sla", "operator": op, "value": value, "effect": "NoSchedule"}]
    got = pl.filter(CycleState(), pod(tol), NodeInfo(node("n", [taint("sla", taint_value, "NoSchedule")])))
    assert got.is_success() is fits
    if not fits:
        assert got.reasons == [ERR_REASON_UNTOLERATED]


@pytest.mark.parametrize(("tol_value", "taint_value", "logged"), [
    ("900", "high", "failed to parse taint value as int64: must be a valid decimal integer in canonical form"),
    ("900", "0950", "failed to parse taint value as int64: must be a valid decimal integer in canonical form"),
    ("900", "", "failed to parse taint value as int64: must be non-empty"),
    ("9e2", "950", "failed to parse toleration value as int64: must be a valid decimal integer in canonical form"),
    ("900", "99999999999999999999",
     'failed to parse taint value as int64: strconv.ParseInt: parsing "99999999999999999999": value out of range'),
])
def test_filter_comparison_with_a_non_integer_value_logs_upstreams_parse_message(
        caplog: pytest.LogCaptureFixture, tol_value: str, taint_value: str, logged: str) -> None:
    """Upstream's ``compareNumericValues`` (k8s.io/api core/v1 toleration.go) logs the parse error and
    tolerates nothing; the Filter reason is the generic one (issue 30, item 6)."""
    pl = TaintToleration(enable_comparison_operators=True)
    tol = [{"key": "sla", "operator": "Gt", "value": tol_value, "effect": "NoSchedule"}]
    with caplog.at_level("ERROR", logger="py_scheduler.plugins.helpers.tolerations"):
        got = pl.filter(CycleState(), pod(tol), NodeInfo(node("n", [taint("sla", taint_value, "NoSchedule")])))
    assert got == UNTOLERATED
    assert [r.getMessage().split(" toleration=")[0].split(" taint=")[0] for r in caplog.records] == [logged]


def test_filter_mixed_tolerations_gate_off_only_equal_honored() -> None:
    tols = [{"key": "sla", "operator": "Gt", "value": "900", "effect": "NoSchedule"},
            {"key": "zone", "operator": "Equal", "value": "a", "effect": "NoSchedule"}]
    pl = TaintToleration()
    assert pl.filter(CycleState(), pod(tols), NodeInfo(node("n", [taint("zone", "a", "NoSchedule")]))).is_success()
    blocked = pl.filter(CycleState(), pod(tols), NodeInfo(node("n", [taint("sla", "950", "NoSchedule")])))
    assert blocked == UNTOLERATED


@pytest.mark.parametrize("tolerations", ["oops", [1], [{"key": "a", "value": 3}]])
def test_filter_malformed_tolerations_is_unresolvable_naming_the_field(tolerations: object) -> None:
    p = PodInfo({"metadata": {"name": "bad"}, "spec": {"tolerations": tolerations}})
    got = TaintToleration().filter(CycleState(), p, NodeInfo(node("n", [DEDICATED_USER1])))
    assert got.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert "spec.tolerations" in got.message()
    st = TaintToleration().pre_score(CycleState(), p, [])
    assert st.code == Code.ERROR and "spec.tolerations" in st.message()


# -- Score -----------------------------------------------------------------------------------------------

def test_score_tolerated_taints_get_the_same_score_no_matter_how_many() -> None:
    tols = [{"key": "cpu-type", "operator": "Equal", "value": "arm64", "effect": "PreferNoSchedule"},
            {"key": "disk-type", "operator": "Equal", "value": "ssd", "effect": "PreferNoSchedule"}]
    nodes = [node("nodeA"), node("nodeB", [taint("cpu-type", "arm64", "PreferNoSchedule")]),
             node("nodeC", [taint("cpu-type", "arm64", "PreferNoSchedule"),
                            taint("disk-type", "ssd", "PreferNoSchedule")])]
    assert run_score(TaintToleration(), pod(tols), nodes) == {"nodeA": 100, "nodeB": 100, "nodeC": 100}


def test_score_only_prefer_no_schedule_taints_and_tolerations_count() -> None:
    tols = [{"key": "cpu-type", "operator": "Equal", "value": "arm64", "effect": "NoSchedule"},
            {"key": "disk-type", "operator": "Equal", "value": "ssd", "effect": "NoSchedule"}]
    nodes = [node("nodeA"), node("nodeB", [taint("cpu-type", "arm64", "NoSchedule")]),
             node("nodeC", [taint("cpu-type", "arm64", "PreferNoSchedule"),
                            taint("disk-type", "ssd", "PreferNoSchedule")])]
    assert run_score(TaintToleration(), pod(tols), nodes) == {"nodeA": 100, "nodeB": 100, "nodeC": 0}


def test_score_default_no_taints_no_tolerations() -> None:
    nodes = [node("nodeA"), node("nodeB", [taint("cpu-type", "arm64", "PreferNoSchedule")])]
    assert run_score(TaintToleration(), pod([]), nodes) == {"nodeA": 100, "nodeB": 0}


@pytest.mark.parametrize(("op", "value", "want"), [("Gt", "950", {"nodeA": 0, "nodeB": 100}),
                                                   ("Lt", "900", {"nodeA": 100, "nodeB": 0})])
def test_score_comparison_operators_with_gate_on(op: str, value: str, want: dict[str, int]) -> None:
    tols = [{"key": "node.kubernetes.io/sla", "operator": op, "value": value, "effect": "PreferNoSchedule"}]
    nodes = [node("nodeA", [taint("node.kubernetes.io/sla", "800", "PreferNoSchedule")]),
             node("nodeB", [taint("node.kubernetes.io/sla", "999", "PreferNoSchedule")])]
    assert run_score(TaintToleration(enable_comparison_operators=True), pod(tols), nodes) == want
    # Gate off (default): the toleration tolerates nothing, both nodes have one intolerable taint.
    assert run_score(TaintToleration(), pod(tols), nodes) == {"nodeA": 0, "nodeB": 0}


def test_score_without_pre_score_is_an_error() -> None:
    sc, st = TaintToleration().score(CycleState(), pod([]), NodeInfo(node("n")))
    assert sc == 0
    assert st.code == Code.ERROR and "PreScoreTaintToleration" in st.message()


def _golden(plugin: str) -> list[dict[str, Any]]:
    if not GOLDEN.exists():
        return []
    return [c for c in map(json.loads, filter(str.strip, GOLDEN.read_text().splitlines())) if c["plugin"] == plugin]


@pytest.mark.skipif(not GOLDEN.exists(), reason="shared golden vectors not present")
@pytest.mark.parametrize("case", _golden("TaintToleration"), ids=lambda c: c["source"].rsplit(":", 1)[-1][:60])
def test_golden_vectors(case: dict[str, Any]) -> None:
    pl = registry.get("TaintToleration")(case.get("args") or {}, plain_handle())
    assert isinstance(pl, TaintToleration)
    assert run_score(pl, PodInfo(case["pod"]), case["nodes"]) == case["expected"]


# -- the published two-node example ----------------------------------------------------------------------

def _two_nodes() -> list[dict[str, Any]]:
    alloc = {"cpu": "4", "memory": "16Gi", "pods": "110"}
    a = {"metadata": {"name": "A", "labels": {"disk": "ssd"}},
         "spec": {"taints": [taint("dedicated", "a", "PreferNoSchedule")]}, "status": {"allocatable": alloc}}
    b = {"metadata": {"name": "B"}, "spec": {}, "status": {"allocatable": alloc}}
    return [a, b]


def _published_pod(tolerate: bool) -> PodInfo:
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "image": "busybox"}],
        "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 50,
             "preference": {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}}]}},
    }
    if tolerate:
        spec["tolerations"] = [{"key": "dedicated", "operator": "Equal", "value": "a", "effect": "PreferNoSchedule"}]
    return PodInfo({"metadata": {"name": "web", "namespace": "default", "uid": "w1"}, "spec": spec})


@pytest.mark.parametrize(("tolerate", "want_taint", "want_affinity", "winner"), [
    (True, {"A": 100, "B": 100}, {"A": 100, "B": 0}, "A"),
    (False, {"A": 0, "B": 100}, {"A": 100, "B": 0}, "B"),
])
def test_published_two_node_case(tolerate: bool, want_taint: dict[str, int], want_affinity: dict[str, int],
                                 winner: str) -> None:
    fw = Framework("test", [(TaintToleration(), 3), (NodeAffinity(), 2)])
    res = Algorithm().schedule(fw, Snapshot.from_objects(_two_nodes()), _published_pod(tolerate), explain=True)
    assert sorted(res.feasible) == ["A", "B"]
    assert res.scores["TaintToleration"] == want_taint
    assert res.scores["NodeAffinity"] == want_affinity
    # Weighted: TaintToleration x3, NodeAffinity x2.
    assert res.totals == {n: 3 * want_taint[n] + 2 * want_affinity[n] for n in ("A", "B")}
    assert res.selected == winner


def test_create_rejects_args() -> None:
    assert isinstance(TaintToleration.create({"kind": "TaintTolerationArgs"}, plain_handle()), TaintToleration)
    with pytest.raises(ConfigError):
        TaintToleration.create({"enable": True}, plain_handle())


def test_pre_filter_is_a_noop() -> None:
    r, st = TaintToleration().pre_filter(CycleState(), pod([]), [])
    assert r is None and st.is_success()


# -- the TaintTolerationComparisonOperators gate through --feature-gates ---------------------------


@pytest.mark.parametrize(("gates", "fits", "scores"), [
    ("", False, {"gt": 0, "lt": 0}),
    ("TaintTolerationComparisonOperators=false", False, {"gt": 0, "lt": 0}),
    ("TaintTolerationComparisonOperators=true", True, {"gt": 100, "lt": 0}),
])
def test_gate_from_feature_gates_reaches_filter_and_score(gates: str, fits: bool, scores: dict[str, int]) -> None:
    """``create()`` reads the gate from its Handle (``FeatureGates.parse``, the path of ``--feature-gates``
    of run / explain / simulate): off by default in v1.37, a ``Gt`` toleration tolerates nothing (Filter
    rejects, Score counts every PreferNoSchedule taint); on, it compares as upstream's
    ``compareNumericValues`` (taint 950 > 900 tolerated, 800 not)."""
    from py_scheduler.framework.features import FeatureGates, parse_feature_gates
    from py_scheduler.plugins.node_unschedulable import NodeUnschedulable

    handle = plain_handle(feature_gates=FeatureGates.of(parse_feature_gates(gates)))
    pl = TaintToleration.create({}, handle)
    nu = NodeUnschedulable.create({}, handle)
    assert pl.enable_comparison_operators is fits and nu.enable_comparison_operators is fits
    tol = [{"key": "sla", "operator": "Gt", "value": "900"}]
    got = pl.filter(CycleState(), pod(tol), NodeInfo(node("n", [taint("sla", "950", "NoSchedule")])))
    assert got.is_success() is fits
    nodes = [node("gt", [taint("sla", "950", "PreferNoSchedule")]),
             node("lt", [taint("sla", "800", "PreferNoSchedule")])]
    assert run_score(pl, pod(tol), nodes) == scores


_KEYS = ["", "a", "b", "node.kubernetes.io/not-ready"]


@settings(max_examples=300, deadline=None)
@given(tolerations=st.lists(st.fixed_dictionaries({
    "key": st.sampled_from(_KEYS), "operator": st.sampled_from(["", "Equal", "Exists", "Lt", "Gt", "Bad"]),
    "value": st.sampled_from(["", "1", "5", "x"]), "effect": st.sampled_from(["", "NoSchedule", "NoExecute",
                                                                              "PreferNoSchedule"])}), max_size=12),
       taints=st.lists(st.fixed_dictionaries({
           "key": st.sampled_from(_KEYS), "value": st.sampled_from(["", "1", "3", "x"]),
           "effect": st.sampled_from(["NoSchedule", "NoExecute", "PreferNoSchedule"])}), max_size=5),
       gate=st.booleans(), effects=st.sampled_from([None, frozenset({"NoSchedule", "NoExecute"})]))
def test_the_toleration_index_answers_as_the_list(tolerations: list[dict[str, str]], taints: list[dict[str, str]],
                                                 gate: bool, effects: frozenset[str] | None) -> None:
    """``TolerationIndex`` (tolerations by key, the key-less apart: a Pod of thousands of tolerations
    cost ~1 s per Node event in the TaintToleration hint, checking each) finds the same untolerated
    taint as the plain list."""
    assert find_untolerated_taint(taints, TolerationIndex(tolerations), effects, gate) == \
        find_untolerated_taint(taints, tolerations, effects, gate)
