"""InterPodAffinity: golden score vectors, Filter rules (after upstream's filtering_test.go
TestRequiredAffinitySingleNode / TestRequiredAffinityMultipleNodes /
TestMultipleAffinityTermsRequireSingleMatchingPod / TestPreFilterStateAddRemovePod), scoring
details and args."""

from __future__ import annotations

from typing import Any

import pytest
from _golden_runner import case_id, golden_cases, run_scores

from py_scheduler.cache.snapshot import ClusterObjects, Snapshot
from py_scheduler.framework.errors import ConfigError
from py_scheduler.framework.types import Code, CycleState, PodInfo
from py_scheduler.plugins.inter_pod_affinity.common import (
    ERR_REASON_AFFINITY_RULES_NOT_MATCH,
    ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH,
    ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH,
    NAME,
    PRE_FILTER_STATE_KEY,
    pod_affinity_terms,
)
from py_scheduler.plugins.inter_pod_affinity.plugin import InterPodAffinity
from tests.unit.plugins.plain_handle import plain_handle

S, U, UU = Code.SUCCESS, Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE
AFF, ANTI, EXISTING = (ERR_REASON_AFFINITY_RULES_NOT_MATCH, ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH,
                       ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH)
HOST = "kubernetes.io/hostname"


def node(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": dict(labels)}}


def pod(name: str, on: str | None = None, ns: str = "default", labels: dict[str, str] | None = None,
        affinity: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if on:
        spec["nodeName"] = on
    if affinity:
        spec["affinity"] = affinity
    return {"metadata": {"name": name, "namespace": ns, "uid": f"{ns}/{name}", "labels": labels or {}}, "spec": spec}


def term(key: str, values: list[str], topology: str, op: str = "In", **kw: Any) -> dict[str, Any]:
    t: dict[str, Any] = {"labelSelector": {"matchExpressions": [{"key": key, "operator": op, "values": values}]},
                         "topologyKey": topology}
    t.update(kw)
    return t


def required(*terms: dict[str, Any], anti: bool = False) -> dict[str, Any]:
    kind = "podAntiAffinity" if anti else "podAffinity"
    return {kind: {"requiredDuringSchedulingIgnoredDuringExecution": list(terms)}}


def preferred(*weighted: tuple[int, dict[str, Any]], anti: bool = False) -> dict[str, Any]:
    return {"podAntiAffinity" if anti else "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": w, "podAffinityTerm": t} for w, t in weighted]}}


def namespaces(**labels_by_name: dict[str, str]) -> ClusterObjects:
    objs = ClusterObjects()
    for name, labels in labels_by_name.items():
        objs.upsert("Namespace", {"metadata": {"name": name, "labels": labels}})
    return objs


def run_filter(incoming: dict[str, Any], nodes: list[dict[str, Any]], existing: list[dict[str, Any]],
               objects: ClusterObjects | None = None, plugin: InterPodAffinity | None = None,
               ) -> dict[str, tuple[Code, str]]:
    """PreFilter then Filter on every node: node -> (code, reason); (SKIP, "") when PreFilter skipped."""
    pl = plugin or InterPodAffinity.create({}, plain_handle())
    snap = Snapshot.from_objects(nodes, existing, objects)
    state = CycleState(snap)
    pi = PodInfo(incoming)
    _, st = pl.pre_filter(state, pi, snap.node_info_list)
    if st.is_skip():
        return {ni.name: (Code.SKIP, "") for ni in snap.node_info_list}
    assert st.is_success(), st
    out = {}
    for ni in snap.node_info_list:
        s = pl.filter(state, pi, ni)
        if not s.is_success():
            assert s.plugin == NAME and len(s.reasons) == 1
        out[ni.name] = (s.code, s.message())
    return out


# -- golden ---------------------------------------------------------------------------------------

IPA_CASES = golden_cases("InterPodAffinity")


@pytest.mark.parametrize("case", IPA_CASES, ids=[case_id(c) for c in IPA_CASES])
def test_golden_score_vectors(case: dict[str, Any]) -> None:
    pl = InterPodAffinity.create(case.get("args") or {}, plain_handle())
    got = run_scores(pl, case)
    assert {n: got[n] for n in case["expected"]} == case["expected"]


def test_golden_cases_present() -> None:
    assert len(IPA_CASES) >= 16


# -- Filter: incoming pod's affinity --------------------------------------------------------------

ZONES = [node("nodeA", zone="az1", **{HOST: "nodeA"}), node("nodeB", zone="az1", **{HOST: "nodeB"}),
         node("nodeC", zone="az2", **{HOST: "nodeC"}), node("nodeD", **{HOST: "nodeD"})]


def test_required_affinity_follows_matching_pod_domain() -> None:
    incoming = pod("p", affinity=required(term("app", ["db"], "zone")))
    got = run_filter(incoming, ZONES, [pod("db", on="nodeA", labels={"app": "db"})])
    assert got == {"nodeA": (S, ""), "nodeB": (S, ""), "nodeC": (UU, AFF), "nodeD": (UU, AFF)}


def test_required_affinity_ignores_other_namespace_and_not_in_operator() -> None:
    other_ns = [pod("db", on="nodeA", ns="other", labels={"app": "db"})]
    got = run_filter(pod("p", affinity=required(term("app", ["db"], "zone"))), ZONES, other_ns)
    # No pod matches in the pod's namespace and the pod doesn't match its own term: nowhere.
    assert {v[0] for v in got.values()} == {UU}
    got = run_filter(pod("p", affinity=required(term("app", ["web"], "zone", op="NotIn"))), ZONES,
                     [pod("db", on="nodeC", labels={"app": "db"})])
    assert got["nodeC"] == (S, "") and got["nodeA"] == (UU, AFF)


def test_all_terms_must_match_a_single_pod() -> None:
    incoming = pod("p", affinity=required(term("foo", ["bar"], HOST), term("baz", ["qux"], HOST)))
    nodes = [node(n, **{HOST: n}) for n in ("node-1", "node-2", "node-3")]
    existing = [pod("a", on="node-1", labels={"foo": "bar"}), pod("b", on="node-1", labels={"baz": "qux"}),
                pod("c", on="node-3", labels={"foo": "bar", "baz": "qux"})]
    got = run_filter(incoming, nodes, existing)
    assert got == {"node-1": (UU, AFF), "node-2": (UU, AFF), "node-3": (S, "")}


def test_self_affinity_first_pod_of_a_group() -> None:
    """No pod matches anywhere and the pod matches its own terms: every node with the topology keys
    fits; nodes without them do not."""
    incoming = pod("p", labels={"foo": "bar", "service": "securityscan"},
                   affinity=required(term("foo", ["bar"], "zone"), term("service", ["securityscan"], "zone")))
    got = run_filter(incoming, ZONES, [pod("other", on="nodeA", labels={"foo": "baz"})])
    assert got == {"nodeA": (S, ""), "nodeB": (S, ""), "nodeC": (S, ""), "nodeD": (UU, AFF)}


def test_self_affinity_does_not_apply_once_a_pod_matches_somewhere() -> None:
    incoming = pod("p", labels={"foo": "bar"}, affinity=required(term("foo", ["bar"], "zone")))
    got = run_filter(incoming, ZONES, [pod("m", on="nodeC", labels={"foo": "bar"})])
    assert got == {"nodeA": (UU, AFF), "nodeB": (UU, AFF), "nodeC": (S, ""), "nodeD": (UU, AFF)}


def test_self_affinity_requires_matching_own_terms() -> None:
    """Upstream 'The first pod of the collection can only be scheduled on nodes labelled with the
    requested topology keys': a pod matching only one of its two terms fits nowhere."""
    incoming = pod("p", labels={"foo": "bar"},
                   affinity=required(term("foo", ["bar"], "zone"), term("service", ["securityscan"], "zone")))
    got = run_filter(incoming, ZONES, [pod("p1", on="nodeA", labels={"foo": "bar"})])
    assert {v for v in got.values()} == {(UU, AFF)}


# -- Filter: anti-affinity ------------------------------------------------------------------------

def test_incoming_anti_affinity_blocks_whole_domain() -> None:
    incoming = pod("p", affinity=required(term("foo", ["abc"], "zone"), anti=True))
    got = run_filter(incoming, ZONES, [pod("x", on="nodeA", labels={"foo": "abc"})])
    assert got == {"nodeA": (U, ANTI), "nodeB": (U, ANTI), "nodeC": (S, ""), "nodeD": (S, "")}


def test_existing_pods_anti_affinity_is_respected() -> None:
    """An existing pod's required anti-affinity matching the incoming pod rejects its domain, even
    when the incoming pod has no affinity of its own."""
    existing = [pod("guard", on="nodeC", labels={"app": "guard"},
                    affinity=required(term("security", ["S1"], "zone"), anti=True))]
    got = run_filter(pod("p", labels={"security": "S1"}), ZONES, existing)
    assert got == {"nodeA": (S, ""), "nodeB": (S, ""), "nodeC": (U, EXISTING), "nodeD": (S, "")}
    # A pod the term does not select: nothing to check at all.
    got = run_filter(pod("p", labels={"security": "S2"}), ZONES, existing)
    assert {v[0] for v in got.values()} == {Code.SKIP}


def test_existing_anti_affinity_term_needs_the_topology_key_on_its_node() -> None:
    existing = [pod("guard", on="nodeD", affinity=required(term("security", ["S1"], "zone"), anti=True))]
    got = run_filter(pod("p", labels={"security": "S1"}), ZONES, existing)
    assert {v[0] for v in got.values()} == {Code.SKIP}


def test_affinity_and_anti_affinity_combined() -> None:
    incoming = pod("p", labels={"service": "s"}, affinity={
        **required(term("service", ["securityscan"], "zone")),
        **required(term("service", ["antivirusscan"], HOST), anti=True)})
    existing = [pod("scan", on="nodeA", labels={"service": "securityscan"}),
                pod("av", on="nodeB", labels={"service": "antivirusscan"})]
    got = run_filter(incoming, ZONES, existing)
    assert got == {"nodeA": (S, ""), "nodeB": (U, ANTI), "nodeC": (UU, AFF), "nodeD": (UU, AFF)}


# -- namespaceSelector ------------------------------------------------------------------------------

def test_affinity_namespace_selector_resolved_against_namespaces() -> None:
    objs = namespaces(**{"team1-a": {"team": "team1"}, "team2-a": {"team": "team2"}})
    sel = {"matchLabels": {"team": "team1"}}
    incoming = pod("p", ns="team2-a", affinity=required(term("app", ["db"], "zone", namespaceSelector=sel)))
    in_team1 = [pod("db", on="nodeC", ns="team1-a", labels={"app": "db"})]
    in_team2 = [pod("db", on="nodeC", ns="team2-a", labels={"app": "db"})]
    assert run_filter(incoming, ZONES, in_team1, objs)["nodeC"] == (S, "")
    assert run_filter(incoming, ZONES, in_team1, objs)["nodeA"] == (UU, AFF)
    # The selector replaces the default (own namespace): a pod in team2 does not count.
    assert run_filter(incoming, ZONES, in_team2, objs)["nodeC"] == (UU, AFF)
    # An empty namespaceSelector selects every namespace.
    incoming_all = pod("p", ns="x", affinity=required(term("app", ["db"], "zone", namespaceSelector={})))
    assert run_filter(incoming_all, ZONES, in_team2, objs)["nodeC"] == (S, "")


def test_existing_anti_affinity_namespace_selector_uses_incoming_namespace_labels() -> None:
    objs = namespaces(**{"team1-a": {"team": "team1"}, "team2-a": {"team": "team2"}})
    existing = [pod("guard", on="nodeA", ns="team2-a", affinity=required(
        term("app", ["web"], "zone", namespaceSelector={"matchLabels": {"team": "team1"}}), anti=True))]
    got = run_filter(pod("p", ns="team1-a", labels={"app": "web"}), ZONES, existing, objs)
    assert got["nodeA"] == (U, EXISTING) and got["nodeB"] == (U, EXISTING) and got["nodeC"] == (S, "")
    got = run_filter(pod("p", ns="team2-a", labels={"app": "web"}), ZONES, existing, objs)
    assert {v[0] for v in got.values()} == {Code.SKIP}


def test_explicit_namespaces_list() -> None:
    incoming = pod("p", affinity=required(term("app", ["db"], "zone", namespaces=["other"])))
    got = run_filter(incoming, ZONES, [pod("db", on="nodeC", ns="other", labels={"app": "db"})])
    assert got["nodeC"] == (S, "") and got["nodeA"] == (UU, AFF)


# -- PreFilter details ----------------------------------------------------------------------------

def test_prefilter_skips_without_terms() -> None:
    got = run_filter(pod("p", labels={"a": "b"}), ZONES, [pod("x", on="nodeA", labels={"a": "b"})])
    assert {v[0] for v in got.values()} == {Code.SKIP}


def test_malformed_term_is_unresolvable_with_field() -> None:
    pl = InterPodAffinity.create({}, plain_handle())
    snap = Snapshot.from_objects(ZONES)
    bad = pod("p", affinity=required(term("service", ["{{.bad-value.}}"], "zone")))
    _, st = pl.pre_filter(CycleState(snap), PodInfo(bad), snap.node_info_list)
    assert st.code == UU and st.plugin == NAME
    assert st.message().startswith("parsing pod: ")
    assert "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector" in st.message()
    assert "{{.bad-value.}}" in st.message()


def test_existing_pod_with_malformed_terms_is_ignored_not_fatal() -> None:
    bad = pod("bad", on="nodeA", labels={"x": "y"}, affinity=required(
        {"labelSelector": {"matchExpressions": [{"key": "a", "operator": "Nope"}]}, "topologyKey": "zone"},
        anti=True))
    got = run_filter(pod("p", labels={"a": "b"}), ZONES, [bad])
    assert {v[0] for v in got.values()} == {Code.SKIP}


def test_terms_are_parsed_once_per_pod() -> None:
    pi = PodInfo(pod("p", affinity=required(term("app", ["db"], "zone"))))
    first = pod_affinity_terms(pi)
    assert pod_affinity_terms(pi) is first
    assert len(first.required_affinity) == 1 and first.required_affinity[0].namespaces == frozenset({"default"})


def test_add_and_remove_pod() -> None:
    """PreFilterExtensions keep all three counters right (upstream TestPreFilterStateAddRemovePod)."""
    pl = InterPodAffinity.create({}, plain_handle())
    incoming = PodInfo(pod("p", labels={"security": "S1"}, affinity={
        **required(term("app", ["db"], "zone")), **required(term("app", ["noisy"], "zone"), anti=True)}))
    snap = Snapshot.from_objects(ZONES, [pod("db", on="nodeA", labels={"app": "db"})])
    state = CycleState(snap)
    assert pl.pre_filter(state, incoming, snap.node_info_list)[1].is_success()

    def verdicts(st: CycleState) -> dict[str, Code]:
        return {ni.name: pl.filter(st, incoming, ni).code for ni in snap.node_info_list}

    base = {"nodeA": S, "nodeB": S, "nodeC": UU, "nodeD": UU}
    assert verdicts(state) == base
    c = state.clone()
    db2 = PodInfo(pod("db2", on="nodeC", labels={"app": "db"}))
    assert pl.add_pod(c, incoming, db2, snap.get("nodeC")).is_success()
    assert verdicts(c) == {"nodeA": S, "nodeB": S, "nodeC": S, "nodeD": UU}
    noisy = PodInfo(pod("noisy", on="nodeB", labels={"app": "noisy"}))
    assert pl.add_pod(c, incoming, noisy, snap.get("nodeB")).is_success()
    assert verdicts(c) == {"nodeA": U, "nodeB": U, "nodeC": S, "nodeD": UU}
    guard = PodInfo(pod("guard", on="nodeC", affinity=required(term("security", ["S1"], "zone"), anti=True)))
    assert pl.add_pod(c, incoming, guard, snap.get("nodeC")).is_success()
    assert verdicts(c)["nodeC"] == U
    for p, n in ((guard, "nodeC"), (noisy, "nodeB"), (db2, "nodeC")):
        assert pl.remove_pod(c, incoming, p, snap.get(n)).is_success()
    assert verdicts(c) == base
    assert verdicts(state) == base  # the original state was not touched by the clone's updates
    removed = state.clone()
    assert pl.remove_pod(removed, incoming, snap.get("nodeA").pods[0], snap.get("nodeA")).is_success()
    assert removed.read(PRE_FILTER_STATE_KEY).affinity_counts == {}


def test_filter_without_state_is_an_error() -> None:
    pl = InterPodAffinity.create({}, plain_handle())
    snap = Snapshot.from_objects(ZONES)
    assert pl.filter(CycleState(snap), PodInfo(pod("p")), snap.get("nodeA")).code == Code.ERROR


# -- scoring details ------------------------------------------------------------------------------

def _scores(pl: InterPodAffinity, incoming: dict[str, Any], existing: list[dict[str, Any]],
            nodes: list[dict[str, Any]] = ZONES) -> dict[str, int] | None:
    snap = Snapshot.from_objects(nodes, existing)
    state = CycleState(snap)
    pi = PodInfo(incoming)
    st = pl.pre_score(state, pi, snap.node_info_list)
    if st.is_skip():
        return None
    assert st.is_success()
    scores = {ni.name: pl.score(state, pi, ni)[0] for ni in snap.node_info_list}
    assert pl.normalize_score(state, pi, scores).is_success()
    return scores


def test_hard_pod_affinity_weight_scores_existing_required_terms() -> None:
    existing = [pod("e", on="nodeC", affinity=required(term("app", ["web"], "zone")))]
    incoming = pod("p", labels={"app": "web"})
    assert _scores(InterPodAffinity.create({}, plain_handle()), incoming, existing) == {
        "nodeA": 0, "nodeB": 0, "nodeC": 100, "nodeD": 0}
    assert _scores(InterPodAffinity.create({"hardPodAffinityWeight": 0}, plain_handle()), incoming, existing) is None


def test_preferred_anti_affinity_and_truncation() -> None:
    """Raw scores 0 / -3 / 0 / 0 over zones... normalization: (s - min) / (max - min) * 100, truncated."""
    incoming = pod("p", affinity={
        **preferred((3, term("app", ["x"], "zone")), anti=True),
        **preferred((2, term("app", ["y"], HOST)))})
    existing = [pod("x", on="nodeA", labels={"app": "x"}), pod("y", on="nodeC", labels={"app": "y"})]
    # nodeA, nodeB: -3 (zone az1); nodeC: +2 (hostname nodeC); nodeD: 0 -> min -3, max 2, diff 5
    assert _scores(InterPodAffinity.create({}, plain_handle()), incoming, existing) == {
        "nodeA": 0, "nodeB": 0, "nodeC": 100, "nodeD": 60}


def test_equal_raw_scores_normalize_to_zero() -> None:
    incoming = pod("p", affinity=preferred((5, term("app", ["x"], "zone"))))
    existing = [pod("x", on="nodeA", labels={"app": "x"})]
    nodes = ZONES[:2]
    assert _scores(InterPodAffinity.create({}, plain_handle()), incoming, existing, nodes) == {"nodeA": 0, "nodeB": 0}


def test_prescore_skips_when_nothing_matches() -> None:
    assert _scores(InterPodAffinity.create({}, plain_handle()), pod("p"), [pod("x", on="nodeA")]) is None


# -- args -------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("args", "needle"), [
    ({"hardPodAffinityWeight": 101}, "hardPodAffinityWeight: Invalid value: 101: not in valid range [0, 100]"),
    ({"hardPodAffinityWeight": -1}, "hardPodAffinityWeight: Invalid value: -1: not in valid range [0, 100]"),
    ({"hardPodAffinityWeight": "1"}, "hardPodAffinityWeight: Invalid value"),
    ({"ignorePreferredTermsOfExistingPods": "yes"}, "ignorePreferredTermsOfExistingPods: Invalid value"),
    ({"defaultingType": "System"}, "defaultingType: unknown field"),
])
def test_args_validation(args: dict[str, Any], needle: str) -> None:
    with pytest.raises(ConfigError) as ei:
        InterPodAffinity.create(args, plain_handle())
    assert needle in str(ei.value)


def test_args_defaults() -> None:
    pl = InterPodAffinity.create({}, plain_handle())
    assert pl.hard_pod_affinity_weight == 1
    assert pl.ignore_preferred_terms_of_existing_pods is False
