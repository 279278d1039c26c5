"""NodeAffinity (upstream ``nodeaffinity/node_affinity_test.go`` cases: TestNodeAffinity,
TestNodeAffinityPriority, args validation) plus the golden vectors and malformed input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from py_scheduler.cache.snapshot import Snapshot
from py_scheduler.framework.algorithm import Algorithm
from py_scheduler.framework.errors import ConfigError, PodParseError
from py_scheduler.framework.runtime import Framework
from py_scheduler.framework.types import Code, CycleState, NodeInfo, PodInfo, Status
from py_scheduler.plugins import registry
from py_scheduler.plugins.helpers.node_selector import RequiredNodeAffinity
from py_scheduler.plugins.node_affinity import (
    ERR_REASON_CONFLICT,
    ERR_REASON_ENFORCED,
    ERR_REASON_POD,
    NodeAffinity,
)
from tests.unit.plugins.plain_handle import plain_handle

GOLDEN = Path(__file__).resolve().parents[3].parent / "shared" / "golden" / "score_vectors.jsonl"
NAME = "NodeAffinity"
REJECT_POD = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [ERR_REASON_POD], NAME)
REJECT_ENFORCED = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [ERR_REASON_ENFORCED], NAME)


def expr(key: str, op: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": op, "values": list(values)}


def name_in(*names: str) -> dict[str, Any]:
    return expr("metadata.name", "In", *names)


def required(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}


def preferred(*terms: tuple[int, list[dict[str, Any]]]) -> dict[str, Any]:
    return {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": w, "preference": {"matchExpressions": e}} for w, e in terms]}}


def pod(**spec: Any) -> PodInfo:
    return PodInfo({"metadata": {"name": "p", "namespace": "default", "uid": "u"}, "spec": spec})


def node(name: str = "node1", labels: dict[str, str] | None = None) -> NodeInfo:
    return NodeInfo({"metadata": {"name": name, "labels": labels or {}}})


def run_filter(pl: NodeAffinity, p: PodInfo, ni: NodeInfo, pre_filter: bool = True,
               ) -> tuple[set[str] | None, Status | None, Status]:
    """(PreFilterResult, PreFilter status or None when not run / Success, Filter status)."""
    state = CycleState()
    result: set[str] | None = None
    pf_status: Status | None = None
    if pre_filter:
        result, st = pl.pre_filter(state, p, [ni])
        if st.is_skip():
            pf_status = st
        elif not st.is_success():
            return result, st, Status.success()
    return result, pf_status, pl.filter(state, p, ni)


FILTER_CASES: list[tuple[str, dict[str, Any], str, dict[str, str], Status | None, set[str] | None]] = [
    ("missing labels", {"nodeSelector": {"foo": "bar"}}, "node1", {}, REJECT_POD, None),
    ("same labels", {"nodeSelector": {"foo": "bar"}}, "node1", {"foo": "bar"}, None, None),
    ("node labels are superset", {"nodeSelector": {"foo": "bar"}}, "node1", {"foo": "bar", "baz": "blah"}, None, None),
    ("node labels are subset", {"nodeSelector": {"foo": "bar", "baz": "blah"}}, "node1", {"foo": "bar"},
     REJECT_POD, None),
    ("In operator", {"affinity": required({"matchExpressions": [expr("foo", "In", "bar", "value2")]})},
     "node1", {"foo": "bar"}, None, None),
    ("Gt operator", {"affinity": required({"matchExpressions": [expr("kernel-version", "Gt", "0204")]})},
     "node1", {"kernel-version": "0206"}, None, None),
    ("NotIn operator", {"affinity": required({"matchExpressions": [expr("mem-type", "NotIn", "DDR", "DDR2")]})},
     "node1", {"mem-type": "DDR3"}, None, None),
    ("Exists operator", {"affinity": required({"matchExpressions": [expr("GPU", "Exists")]})},
     "node1", {"GPU": "NVIDIA-GRID-K1"}, None, None),
    ("affinity doesn't match", {"affinity": required({"matchExpressions": [expr("foo", "In", "value1", "value2")]})},
     "node1", {"foo": "bar"}, REJECT_POD, None),
    ("empty MatchExpressions matches nothing", {"affinity": required({"matchExpressions": []})},
     "node1", {"foo": "bar"}, REJECT_POD, None),
    ("multiple matchExpressions ANDed, match",
     {"affinity": required({"matchExpressions": [expr("GPU", "Exists"), expr("GPU", "NotIn", "AMD", "INTER")]})},
     "node1", {"GPU": "NVIDIA-GRID-K1"}, None, None),
    ("multiple matchExpressions ANDed, no match",
     {"affinity": required({"matchExpressions": [expr("GPU", "Exists"), expr("GPU", "In", "AMD", "INTER")]})},
     "node1", {"GPU": "NVIDIA-GRID-K1"}, REJECT_POD, None),
    ("multiple terms ORed", {"affinity": required({"matchExpressions": [expr("foo", "In", "bar", "value2")]},
                                                  {"matchExpressions": [expr("diffkey", "In", "wrong", "value2")]})},
     "node1", {"foo": "bar"}, None, None),
    ("affinity and nodeSelector both match",
     {"nodeSelector": {"foo": "bar"}, "affinity": required({"matchExpressions": [expr("foo", "Exists")]})},
     "node1", {"foo": "bar"}, None, None),
    ("affinity matches but nodeSelector doesn't",
     {"nodeSelector": {"foo": "bar"}, "affinity": required({"matchExpressions": [expr("foo", "Exists")]})},
     "node1", {"foo": "barrrrrr"}, REJECT_POD, None),
    ("invalid value in term",
     {"affinity": required({"matchExpressions": [expr("foo", "NotIn", "invalid value: ___@#$%^")]})},
     "node1", {"foo": "bar"}, REJECT_POD, None),
    ("matchFields In matches", {"affinity": required({"matchFields": [name_in("node1")]})},
     "node1", {"foo": "bar"}, None, {"node1"}),
    ("matchFields In doesn't match", {"affinity": required({"matchFields": [name_in("node1")]})},
     "node2", {"foo": "bar"}, REJECT_POD, {"node1"}),
    ("two terms: matchFields doesn't match but matchExpressions does",
     {"affinity": required({"matchFields": [name_in("node1")]}, {"matchExpressions": [expr("foo", "In", "bar")]})},
     "node2", {"foo": "bar"}, None, None),
    ("one term: matchFields doesn't match, matchExpressions matches",
     {"affinity": required({"matchFields": [name_in("node1")], "matchExpressions": [expr("foo", "In", "bar")]})},
     "node2", {"foo": "bar"}, REJECT_POD, {"node1"}),
    ("one term: both match",
     {"affinity": required({"matchFields": [name_in("node1")], "matchExpressions": [expr("foo", "In", "bar")]})},
     "node1", {"foo": "bar"}, None, {"node1"}),
    ("two terms: neither matches",
     {"affinity": required({"matchFields": [name_in("node1")]},
                           {"matchExpressions": [expr("foo", "In", "not-match")]})},
     "node2", {"foo": "bar"}, REJECT_POD, None),
    ("two terms of node.Name affinity",
     {"affinity": required({"matchFields": [name_in("node1")]}, {"matchFields": [name_in("node2")]})},
     "node2", {}, None, {"node1", "node2"}),
    ("matchFields narrowing intersects within a term (multi-value In is a parse error)",
     {"affinity": required({"matchFields": [name_in("node1", "node2"), name_in("node2", "node3")]})},
     "node2", {}, REJECT_POD, {"node2"}),
]


@pytest.mark.parametrize(("name", "spec", "node_name", "labels", "want", "want_result"), FILTER_CASES,
                         ids=[c[0] for c in FILTER_CASES])
def test_filter(name: str, spec: dict[str, Any], node_name: str, labels: dict[str, str], want: Status | None,
                want_result: set[str] | None) -> None:
    pl = NodeAffinity()
    result, pf_status, got = run_filter(pl, pod(**spec), node(node_name, labels))
    assert pf_status is None
    assert result == want_result
    assert got == (want or Status.success())


def test_pre_filter_skip_without_node_selector_or_required_affinity() -> None:
    for spec in ({}, {"affinity": {"nodeAffinity": {}}},
                 {"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}}):
        result, st = NodeAffinity().pre_filter(CycleState(), pod(**spec), [])
        assert result is None and st.is_skip()
    # Skip is not returned when the plugin has an added required affinity.
    pl = NodeAffinity.create({"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [expr("zone", "In", "a")]}]}}}, plain_handle())
    result, st = pl.pre_filter(CycleState(), pod(), [])
    assert result is None and st.is_success()


def test_pre_filter_conflicting_match_fields() -> None:
    spec = {"affinity": required({"matchFields": [name_in("node1"), name_in("node2")]})}
    result, st = NodeAffinity().pre_filter(CycleState(), pod(**spec), [])
    assert result is None
    assert st == Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [ERR_REASON_CONFLICT], NAME)
    # Filter alone still says the Pod's affinity does not match.
    assert NodeAffinity().filter(CycleState(), pod(**spec), node("node1")) == REJECT_POD


def added_required(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}


@pytest.mark.parametrize(("spec", "args", "want"), [
    ({"affinity": required({"matchExpressions": [expr("zone", "In", "foo")]})},
     added_required({"matchFields": [name_in("node2")]}), None),
    ({"affinity": required({"matchExpressions": [expr("zone", "In", "bar")]})},
     added_required({"matchFields": [name_in("node2")]}), REJECT_POD),
    ({}, added_required({"matchExpressions": [expr("zone", "In", "bar")]}), REJECT_ENFORCED),
])
def test_filter_with_added_affinity(spec: dict[str, Any], args: dict[str, Any], want: Status | None) -> None:
    pl = NodeAffinity.create(args, plain_handle())
    _, _, got = run_filter(pl, pod(**spec), node("node2", {"zone": "foo"}))
    assert got == (want or Status.success())


def test_filter_works_without_pre_filter() -> None:
    pl = NodeAffinity()
    ok = pod(nodeSelector={"foo": "bar"})
    assert pl.filter(CycleState(), ok, node("node1", {"foo": "bar"})).is_success()
    aff = pod(affinity=required({"matchExpressions": [expr("foo", "In", "bar")]}))
    assert pl.filter(CycleState(), aff, node("node1", {"foo": "bar"})).is_success()
    assert pl.filter(CycleState(), aff, node("node1", {"foo": "baz"})) == REJECT_POD


@pytest.mark.parametrize("spec", [
    {"nodeSelector": "disk=ssd"},
    {"nodeSelector": {"disk": 1}},
    {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": ["x"]}}},
])
def test_malformed_required_affinity_is_unresolvable_naming_the_field(spec: dict[str, Any]) -> None:
    p = pod(**spec)
    _, st = NodeAffinity().pre_filter(CycleState(), p, [])
    assert st.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert "spec." in st.message() and "invalid value" in st.message()
    # Filter on its own (PreFilter disabled) gives the same verdict instead of raising.
    st2 = NodeAffinity().filter(CycleState(), p, node("node1"))
    assert st2.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE


def test_non_object_node_affinity_is_rejected_when_the_pod_is_parsed() -> None:
    # PodInfo refuses {"nodeAffinity": "x"} itself (PodParseError naming the field), before any plugin.
    with pytest.raises(PodParseError) as exc:
        pod(affinity={"nodeAffinity": "x"})
    assert exc.value.field == "spec.affinity.nodeAffinity"


# -- Score -----------------------------------------------------------------------------------------------

LABEL1 = {"foo": "bar"}
LABEL2 = {"key": "value"}
LABEL5 = {"foo": "bar", "key": "value", "az": "az1"}
AFFINITY1 = preferred((2, [expr("foo", "In", "bar")]))
AFFINITY2 = preferred((2, [expr("foo", "In", "bar")]), (4, [expr("key", "In", "value")]),
                      (5, [expr("foo", "In", "bar"), expr("key", "In", "value"), expr("az", "In", "az1")]))


def run_score(pl: NodeAffinity, p: PodInfo, nodes: list[NodeInfo], pre_score: bool = True) -> dict[str, int]:
    state = CycleState()
    if pre_score:
        st = pl.pre_score(state, p, nodes)
        if st.is_skip():
            return {ni.name: 0 for ni in nodes}
        assert st.is_success(), st
    scores = {}
    for ni in nodes:
        sc, st = pl.score(state, p, ni)
        assert st.is_success(), st
        scores[ni.name] = sc
    assert pl.normalize_score(state, p, scores).is_success()
    return scores


def test_pre_score_skip_and_error() -> None:
    assert NodeAffinity().pre_score(CycleState(), pod(), []).is_skip()
    broken = pod(affinity=preferred((2, [expr("invalid key", "In", "bar")])))
    st = NodeAffinity().pre_score(CycleState(), broken, [])
    assert st.code == Code.ERROR
    assert ('[0].matchExpressions[0].key: Invalid value: "invalid key": name part must consist of alphanumeric '
            "characters") in st.message()
    # Added preferred terms keep PreScore from skipping.
    pl = NodeAffinity.create({"addedAffinity": AFFINITY1["nodeAffinity"]}, plain_handle())
    assert pl.pre_score(CycleState(), pod(), []).is_success()


def test_score_all_match_with_different_priorities() -> None:
    nodes = [node("node1", LABEL1), node("node5", LABEL5), node("node2", LABEL2)]
    assert run_score(NodeAffinity(), pod(affinity=AFFINITY2), nodes) == {"node1": 18, "node5": 100, "node2": 36}
    # Same result when PreScore is not called (Score falls back to parsing the Pod).
    assert run_score(NodeAffinity(), pod(affinity=AFFINITY2), nodes, pre_score=False) == {
        "node1": 18, "node5": 100, "node2": 36}


def test_score_added_affinity() -> None:
    pl = NodeAffinity.create({"addedAffinity": AFFINITY1["nodeAffinity"]}, plain_handle())
    assert run_score(pl, pod(), [node("node1", LABEL1), node("node2", LABEL2)]) == {"node1": 100, "node2": 0}


def test_score_added_affinity_and_pod_affinity() -> None:
    pl = NodeAffinity.create({"addedAffinity": preferred((3, [expr("key", "In", "value")]))["nodeAffinity"]},
                             plain_handle())
    nodes = [node("node1", LABEL1), node("node2", LABEL2), node("node3", LABEL5)]
    assert run_score(pl, pod(affinity=AFFINITY1), nodes) == {"node1": 40, "node2": 60, "node3": 100}


def _golden(plugin: str) -> list[dict[str, Any]]:
    if not GOLDEN.exists():
        return []
    return [c for c in map(json.loads, filter(str.strip, GOLDEN.read_text().splitlines())) if c["plugin"] == plugin]


@pytest.mark.skipif(not GOLDEN.exists(), reason="shared golden vectors not present")
@pytest.mark.parametrize("case", _golden("NodeAffinity"), ids=lambda c: c["source"].rsplit(":", 1)[-1][:60])
def test_golden_vectors(case: dict[str, Any]) -> None:
    pl = registry.get(NAME)(case.get("args") or {}, plain_handle())
    assert isinstance(pl, NodeAffinity)
    nodes = [NodeInfo(n) for n in case["nodes"]]
    assert run_score(pl, PodInfo(case["pod"]), nodes) == case["expected"]


# -- args ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("args", "message"), [
    ({"foo": 1}, "unknown field"),
    ({"addedAffinity": "x"}, "addedAffinity"),
    ({"addedAffinity": {"requiredDuringSchedulingRequiredDuringExecution": {}}}, "unknown field"),
    (added_required({"matchExpressions": [expr("foo", "Bogus", "x")]}),
     'addedAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0]'
     '.operator: Unsupported value: "Bogus"'),
    (added_required({"matchFields": [name_in("a", "b")]}),
     "addedAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchFields[0].values"),
    ({"addedAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "preference": {"matchExpressions": [expr("foo", "In")]}}]}},
     "addedAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].matchExpressions[0].values"),
    ({"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": "x"}}},
     "nodeSelectorTerms"),
])
def test_invalid_args(args: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        NodeAffinity.create(args, plain_handle())
    assert message in str(exc.value)


def test_valid_args() -> None:
    pl = NodeAffinity.create({"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "NodeAffinityArgs",
                              "addedAffinity": {
                                  "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                                      {"matchExpressions": [expr("zone", "In", "a")]}]},
                                  "preferredDuringSchedulingIgnoredDuringExecution": [
                                      {"weight": 5, "preference": {"matchExpressions": [expr("disk", "In", "ssd")]}}]}},
                             plain_handle())
    assert pl.added_node_selector is not None and pl.added_pref_terms is not None
    assert NodeAffinity.create({}, plain_handle()).added_node_selector is None


# -- through the runtime: PreFilterResult narrowing -----------------------------------------------------------

def test_runtime_narrows_to_named_nodes() -> None:
    nodes = [{"metadata": {"name": f"n{i}", "labels": {}}} for i in range(4)]
    fw = Framework("t", [(NodeAffinity(), 2)])
    p = pod(affinity=required({"matchFields": [name_in("n2")]}))
    res = Algorithm().schedule(fw, Snapshot.from_objects(nodes), p, explain=True)
    assert res.selected == "n2"
    assert res.feasible == ["n2"]
    conflict = pod(affinity=required({"matchFields": [name_in("n1"), name_in("n2")]}))
    res = Algorithm().schedule(fw, Snapshot.from_objects(nodes), conflict)
    assert res.selected is None
    assert res.message == "0/4 nodes are available: pod affinity terms conflict."


def _batch(pl: NodeAffinity, p: PodInfo, nodes: list[NodeInfo]) -> list[int]:
    state = CycleState()
    _, st = pl.pre_filter(state, p, nodes)
    assert st.is_success()
    out = pl.filter_nodes(state, p, nodes)
    return [0 if out is None else int(s.code) for s in (out or [Status.success()] * len(nodes))]


def test_filter_nodes_memo_reused_across_pods_and_refreshed_on_node_update() -> None:
    """The batch Filter memoizes each node's verdict per required affinity and Node object: a second
    Pod with the same affinity reuses it, a replaced Node object (a Node update) is matched again,
    a different affinity has its own verdicts, and every answer equals node-by-node Filter."""
    pl = NodeAffinity()
    zone_a = required({"matchExpressions": [expr("zone", "In", "a")]})
    nodes = [node(f"n{i}", {"zone": "a" if i % 3 == 0 else "b"}) for i in range(9)]
    calls = 0
    real = RequiredNodeAffinity.match

    def counting(self: RequiredNodeAffinity, n: Any) -> bool:
        nonlocal calls
        calls += 1
        return real(self, n)

    RequiredNodeAffinity.match = counting  # type: ignore[method-assign]
    try:
        first = _batch(pl, pod(affinity=zone_a), nodes)
        assert calls == 9
        assert first == [0 if i % 3 == 0 else int(Code.UNSCHEDULABLE_AND_UNRESOLVABLE) for i in range(9)]
        assert _batch(pl, PodInfo({"metadata": {"name": "q", "uid": "v"}, "spec": {"affinity": zone_a}}),
                      nodes) == first
        assert calls == 9  # reused
        nodes[1].set_node({"metadata": {"name": "n1", "labels": {"zone": "a"}}})  # a Node update
        again = _batch(pl, pod(affinity=zone_a), nodes)
        assert calls == 10 and again[1] == 0
        other = _batch(pl, pod(nodeSelector={"zone": "b"}), nodes)
        assert calls == 19
        for p, got in ((pod(affinity=zone_a), again), (pod(nodeSelector={"zone": "b"}), other)):
            assert got == [int(run_filter(pl, p, ni)[2].code) for ni in nodes]
    finally:
        RequiredNodeAffinity.match = real  # type: ignore[method-assign]


def test_filter_nodes_memo_is_bounded() -> None:
    from py_scheduler.plugins import node_affinity as na

    pl = NodeAffinity()
    nodes = [node(f"n{i}", {"k": str(i)}) for i in range(3)]
    for i in range(na._MEMO_AFFINITIES + 5):
        _batch(pl, pod(nodeSelector={"k": str(i % 3), "x": str(i)}), nodes)
    assert len(pl._memo) == na._MEMO_AFFINITIES
