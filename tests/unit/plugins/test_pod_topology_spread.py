"""PodTopologySpread: golden score vectors, Filter rules (after upstream's filtering_test.go
TestSingleConstraint / TestMultipleConstraints / TestPreFilterStateAddPod), args, Go float helpers."""

from __future__ import annotations

import math
import struct
from typing import Any

import pytest
from _golden_runner import case_id, golden_cases, run_scores

from py_scheduler.cache.snapshot import ClusterObjects, Snapshot
from py_scheduler.framework.errors import ConfigError
from py_scheduler.framework.gomath import go_log, go_round
from py_scheduler.framework.types import Code, CycleState, PodInfo
from py_scheduler.plugins.pod_topology_spread.common import (
    ERR_REASON_CONSTRAINTS_NOT_MATCH,
    ERR_REASON_NODE_LABEL_NOT_MATCH,
    NAME,
    PRE_FILTER_STATE_KEY,
)
from py_scheduler.plugins.pod_topology_spread.plugin import PodTopologySpread
from tests.unit.plugins.plain_handle import plain_handle

FOO = {"matchExpressions": [{"key": "foo", "operator": "Exists"}]}
TAINT = {"key": "k", "value": "v", "effect": "NoSchedule"}


def node(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": dict(labels)}, "status": {"allocatable": {"pods": "32"}}}


def pod(name: str, on: str | None = None, ns: str = "default", labels: dict[str, str] | None = None,
        **spec: Any) -> dict[str, Any]:
    s = dict(spec)
    if on:
        s["nodeName"] = on
    return {"metadata": {"name": name, "namespace": ns, "uid": f"{ns}-{name}", "labels": labels or {}}, "spec": s}


def tsc(max_skew: int, key: str, action: str = "DoNotSchedule", selector: Any = FOO, **kw: Any) -> dict[str, Any]:
    c = {"maxSkew": max_skew, "topologyKey": key, "whenUnsatisfiable": action, "labelSelector": selector}
    c.update(kw)
    return c


def foo_pods(spec: str) -> list[dict[str, Any]]:
    """``"node-a:2 node-b:1"`` -> that many foo-labelled pods bound to each node."""
    out = []
    for part in spec.split():
        n, cnt = part.split(":")
        out += [pod(f"p-{n}-{i}", on=n, labels={"foo": ""}) for i in range(int(cnt))]
    return out


ZONE_NODES = [node("node-a", zone="zone1", node="node-a"), node("node-b", zone="zone1", node="node-b"),
              node("node-x", zone="zone2", node="node-x"), node("node-y", zone="zone2", node="node-y")]


def run_filter(incoming: dict[str, Any], nodes: list[dict[str, Any]], existing: list[dict[str, Any]],
               plugin: PodTopologySpread | None = None, objects: ClusterObjects | None = None,
               ) -> tuple[dict[str, Code], CycleState, PodInfo]:
    """PreFilter over all nodes, then Filter on each: node -> status code (SKIP when PreFilter
    skipped)."""
    pl = plugin or PodTopologySpread.create({}, plain_handle())
    snap = Snapshot.from_objects(nodes, existing, objects)
    state = CycleState(snap)
    pi = PodInfo(incoming)
    _, st = pl.pre_filter(state, pi, snap.node_info_list)
    if st.is_skip():
        return {ni.name: Code.SKIP for ni in snap.node_info_list}, state, pi
    assert st.is_success(), st
    out = {}
    for ni in snap.node_info_list:
        s = pl.filter(state, pi, ni)
        if not s.is_success():
            assert s.plugin == NAME
            assert s.reasons == ([ERR_REASON_NODE_LABEL_NOT_MATCH] if s.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
                                 else [ERR_REASON_CONSTRAINTS_NOT_MATCH])
        out[ni.name] = s.code
    return out, state, pi


S, U, UU = Code.SUCCESS, Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE


# -- golden ---------------------------------------------------------------------------------------

PTS_CASES = golden_cases("PodTopologySpread")


@pytest.mark.parametrize("case", PTS_CASES, ids=[case_id(c) for c in PTS_CASES])
def test_golden_score_vectors(case: dict[str, Any]) -> None:
    pl = PodTopologySpread.create(case.get("args") or {}, plain_handle())
    got = run_scores(pl, case)
    assert {n: got[n] for n in case["expected"]} == case["expected"]


def test_golden_cases_present() -> None:
    assert len(PTS_CASES) >= 17


# -- Filter ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "incoming", "nodes", "existing", "want"), [
    ("no existing pods", pod("p", labels={"foo": ""}, topologySpreadConstraints=[tsc(1, "zone")]),
     ZONE_NODES, [], {"node-a": S, "node-b": S, "node-x": S, "node-y": S}),
    ("pods spread 3/3 across zones, all fit", pod("p", labels={"foo": ""}, topologySpreadConstraints=[tsc(1, "zone")]),
     ZONE_NODES, foo_pods("node-a:1 node-b:2 node-x:2 node-y:1"), {"node-a": S, "node-b": S, "node-x": S, "node-y": S}),
    ("2/1/0/3 on nodes, only node-x fits", pod("p", labels={"foo": ""}, topologySpreadConstraints=[tsc(1, "node")]),
     ZONE_NODES, foo_pods("node-a:2 node-b:1 node-y:3"), {"node-a": U, "node-b": U, "node-x": S, "node-y": U}),
    ("2/1/0/3 maxSkew 2: node-b and node-x fit",
     pod("p", labels={"foo": ""}, topologySpreadConstraints=[tsc(2, "node")]),
     ZONE_NODES, foo_pods("node-a:2 node-b:1 node-y:3"), {"node-a": U, "node-b": S, "node-x": S, "node-y": U}),
    ("2/1/0/3 but pod doesn't match itself", pod("p", labels={"bar": ""}, topologySpreadConstraints=[tsc(1, "node")]),
     ZONE_NODES, foo_pods("node-a:2 node-b:1 node-y:3"), {"node-a": U, "node-b": S, "node-x": S, "node-y": U}),
    ("missing topology label is unresolvable", pod("p", labels={"foo": ""}, topologySpreadConstraints=[tsc(1, "rack")]),
     ZONE_NODES, [], {"node-a": UU, "node-b": UU, "node-x": UU, "node-y": UU}),
    ("1/2 across zones because node-b lacks 'zone'",
     pod("p", labels={"foo": ""}, topologySpreadConstraints=[tsc(1, "zone")]),
     [node("node-a", zone="zone1"), node("node-b", zonew="zone1"), node("node-x", zone="zone2"),
      node("node-y", zone="zone2")],
     foo_pods("node-a:1 node-b:1 node-x:1 node-y:1"), {"node-a": S, "node-b": UU, "node-x": U, "node-y": U}),
    ("pods in another namespace do not count",
     pod("p", labels={"foo": ""}, topologySpreadConstraints=[tsc(1, "zone")]), ZONE_NODES,
     [pod("x1", on="node-a", ns="other", labels={"foo": ""}), pod("x2", on="node-b", ns="other", labels={"foo": ""}),
      pod("y1", on="node-x", labels={"foo": ""})], {"node-a": S, "node-b": S, "node-x": U, "node-y": U}),
    ("terminating pods are excluded", pod("p", labels={"foo": ""}, topologySpreadConstraints=[tsc(1, "node")]),
     [node("node-a", node="node-a"), node("node-b", node="node-b")],
     [{**pod("t", on="node-a", labels={"foo": ""}),
       "metadata": {"name": "t", "namespace": "default", "uid": "t", "labels": {"foo": ""},
                    "deletionTimestamp": "2020-01-01T00:00:00Z"}},
      pod("b1", on="node-b", labels={"foo": ""})], {"node-a": S, "node-b": U}),
    ("null labelSelector: no pod ever counts", pod("p", labels={"foo": ""},
                                                 topologySpreadConstraints=[tsc(1, "zone", selector=None)]),
     ZONE_NODES, foo_pods("node-a:3"), {"node-a": S, "node-b": S, "node-x": S, "node-y": S}),
])
def test_single_constraint(name: str, incoming: dict[str, Any], nodes: list[dict[str, Any]],
                           existing: list[dict[str, Any]], want: dict[str, Code]) -> None:
    got, _, _ = run_filter(incoming, nodes, existing)
    assert got == want, name


@pytest.mark.parametrize(("min_domains", "want"), [
    (4, {"node-a": U, "node-b": U, "node-c": S}),  # 3 domains < 4: the global minimum counts as 0
    (2, {"node-a": S, "node-b": S, "node-c": S}),
    (None, {"node-a": S, "node-b": S, "node-c": S}),
])
def test_min_domains_on_nodes(min_domains: int | None, want: dict[str, Code]) -> None:
    kw = {} if min_domains is None else {"minDomains": min_domains}
    incoming = pod("p", labels={"foo": ""}, topologySpreadConstraints=[tsc(2, "node", **kw)])
    nodes = [node("node-a", node="node-a"), node("node-b", node="node-b"), node("node-c", node="node-c")]
    got, _, _ = run_filter(incoming, nodes, foo_pods("node-a:2 node-b:2 node-c:1"))
    assert got == want


@pytest.mark.parametrize(("min_domains", "want"), [
    (3, {"node-a": U, "node-b": U, "node-x": S, "node-y": S}),
    (1, {"node-a": S, "node-b": S, "node-x": S, "node-y": S}),
])
def test_min_domains_on_zones(min_domains: int, want: dict[str, Code]) -> None:
    incoming = pod("p", labels={"foo": ""}, topologySpreadConstraints=[tsc(2, "zone", minDomains=min_domains)])
    got, _, _ = run_filter(incoming, ZONE_NODES, foo_pods("node-a:1 node-b:1 node-y:1"))
    assert got == want


POLICY_NODES = [node("node-a", node="node-a", foo=""), node("node-b", node="node-b", foo=""),
                node("node-x", node="node-x", foo=""), node("node-y", node="node-y")]
NODE_AFFINITY = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
    {"matchExpressions": [{"key": "foo", "operator": "In", "values": [""]}]}]}}}


@pytest.mark.parametrize(("spec", "want_y"), [
    ({"nodeSelector": {"foo": ""}}, S),  # Honor (default): node-y's pod is not counted
    ({"nodeSelector": {"foo": ""}, "policy": "Ignore"}, U),
    ({"affinity": NODE_AFFINITY}, S),
    ({"affinity": NODE_AFFINITY, "policy": "Ignore"}, U),
])
def test_node_affinity_policy(spec: dict[str, Any], want_y: Code) -> None:
    spec = dict(spec)
    kw = {"nodeAffinityPolicy": spec.pop("policy")} if "policy" in spec else {}
    incoming = pod("p", labels={"foo": ""}, topologySpreadConstraints=[tsc(1, "node", **kw)], **spec)
    got, _, _ = run_filter(incoming, POLICY_NODES, foo_pods("node-a:1 node-b:1 node-y:1"))
    # Filter alone (NodeAffinity would reject node-y): node-y passes only when its pod is not counted.
    assert got == {"node-a": U, "node-b": U, "node-x": S, "node-y": want_y}


@pytest.mark.parametrize(("policy", "tolerate", "want_y"), [
    ("Honor", False, S),
    (None, False, U),
    ("Honor", True, U),  # tolerated taint: node-y counts again
])
def test_node_taints_policy(policy: str | None, tolerate: bool, want_y: Code) -> None:
    nodes = [*POLICY_NODES[:3], {**node("node-y", node="node-y"), "spec": {"taints": [TAINT]}}]
    kw = {"nodeTaintsPolicy": policy} if policy else {}
    extra = {"tolerations": [{"key": "k", "operator": "Exists"}]} if tolerate else {}
    incoming = pod("p", labels={"foo": ""}, topologySpreadConstraints=[tsc(1, "node", **kw)], **extra)
    got, _, _ = run_filter(incoming, nodes, foo_pods("node-a:1 node-b:1 node-y:1"))
    assert got == {"node-a": U, "node-b": U, "node-x": S, "node-y": want_y}


@pytest.mark.parametrize(("gates", "want_y"), [("", S), ("TaintTolerationComparisonOperators=true", U)])
def test_node_taints_policy_follows_the_comparison_operators_gate(gates: str, want_y: Code) -> None:
    """nodeTaintsPolicy Honor with a ``Gt`` toleration: upstream's ``matchNodeInclusionPolicies``
    takes ``fts.EnableTaintTolerationComparisonOperators``; off, node-y's taint (slots=5) is not
    tolerated and node-y is left out of the count; on, 5 > 3 tolerates it and its pod counts."""
    from py_scheduler.framework.features import FeatureGates

    nodes = [*POLICY_NODES[:3], {**node("node-y", node="node-y"),
                                 "spec": {"taints": [{"key": "slots", "value": "5", "effect": "NoSchedule"}]}}]
    tol = [{"key": "slots", "operator": "Gt", "value": "3", "effect": "NoSchedule"}]
    incoming = pod("p", labels={"foo": ""}, topologySpreadConstraints=[tsc(1, "node", nodeTaintsPolicy="Honor")],
                   tolerations=tol)
    pl = PodTopologySpread.create({}, plain_handle(feature_gates=FeatureGates.parse(gates)))
    got, _, _ = run_filter(incoming, nodes, foo_pods("node-a:1 node-b:1 node-y:1"), plugin=pl)
    assert got == {"node-a": U, "node-b": U, "node-x": S, "node-y": want_y}


def test_match_label_keys_restrict_counted_pods() -> None:
    """matchLabelKeys: only pods with the incoming pod's value of ``rev`` are counted."""
    incoming = pod("p", labels={"foo": "", "rev": "2"},
                   topologySpreadConstraints=[tsc(1, "node", matchLabelKeys=["rev", "absent"])])
    nodes = [node("node-a", node="node-a"), node("node-b", node="node-b")]
    existing = [pod("old1", on="node-a", labels={"foo": "", "rev": "1"}),
                pod("old2", on="node-a", labels={"foo": "", "rev": "1"}),
                pod("new1", on="node-b", labels={"foo": "", "rev": "2"})]
    got, _, _ = run_filter(incoming, nodes, existing)
    assert got == {"node-a": S, "node-b": U}
    # Without matchLabelKeys all three are counted: 2/1 -> node-a fails, node-b fits.
    incoming2 = pod("p", labels={"foo": "", "rev": "2"}, topologySpreadConstraints=[tsc(1, "node")])
    got2, _, _ = run_filter(incoming2, nodes, existing)
    assert got2 == {"node-a": U, "node-b": S}


def test_multiple_constraints_zone_and_node() -> None:
    """Upstream 'two Constraints on zone and node, spreads = [3/3, 2/1/0/3]': only node-x fits."""
    incoming = pod("p", labels={"foo": ""}, topologySpreadConstraints=[tsc(1, "zone"), tsc(1, "node")])
    got, _, _ = run_filter(incoming, ZONE_NODES, foo_pods("node-a:2 node-b:1 node-y:3"))
    assert got == {"node-a": U, "node-b": U, "node-x": S, "node-y": U}


def test_soft_constraints_skip_prefilter() -> None:
    incoming = pod("p", labels={"foo": ""}, topologySpreadConstraints=[tsc(1, "zone", "ScheduleAnyway")])
    got, state, _ = run_filter(incoming, ZONE_NODES, [])
    assert set(got.values()) == {Code.SKIP}
    assert PRE_FILTER_STATE_KEY not in state.data


def test_system_defaults_have_no_hard_constraints() -> None:
    objects = ClusterObjects()
    objects.upsert("Service", {"metadata": {"name": "s", "namespace": "default"}, "spec": {"selector": {"foo": ""}}})
    got, _, _ = run_filter(pod("p", labels={"foo": ""}), ZONE_NODES, foo_pods("node-a:3"), objects=objects)
    assert set(got.values()) == {Code.SKIP}


def test_list_default_hard_constraint_uses_replicaset_selector() -> None:
    """A List default DoNotSchedule constraint takes its selector from the owning ReplicaSet."""
    pl = PodTopologySpread.create({"defaultingType": "List", "defaultConstraints": [
        {"maxSkew": 1, "topologyKey": "node", "whenUnsatisfiable": "DoNotSchedule"}]}, plain_handle())
    objects = ClusterObjects()
    objects.upsert("ReplicaSet", {"metadata": {"name": "rs", "namespace": "default"},
                                  "spec": {"selector": {"matchLabels": {"app": "web"}}}})
    owner = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "controller": True, "uid": "u"}]
    incoming = pod("p", labels={"app": "web"})
    incoming["metadata"]["ownerReferences"] = owner
    nodes = [node("node-a", node="node-a"), node("node-b", node="node-b")]
    existing = [pod("w1", on="node-a", labels={"app": "web"}), pod("o1", on="node-b", labels={"app": "other"})]
    got, _, _ = run_filter(incoming, nodes, existing, plugin=pl, objects=objects)
    assert got == {"node-a": U, "node-b": S}
    # Not selected by anything: no default constraint applies.
    got2, _, _ = run_filter(pod("p2", labels={"app": "web"}), nodes, existing, plugin=pl, objects=objects)
    assert set(got2.values()) == {Code.SKIP}


def test_add_and_remove_pod_update_counts() -> None:
    """PreFilterExtensions: adding a matching pod on node-x makes node-x exceed the skew; removing it
    restores the original verdicts. A pod of another namespace changes nothing."""
    pl = PodTopologySpread.create({}, plain_handle())
    incoming = pod("p", labels={"foo": ""}, topologySpreadConstraints=[tsc(1, "node")])
    snap = Snapshot.from_objects(ZONE_NODES, foo_pods("node-a:1 node-b:1 node-y:1"))
    state = CycleState(snap)
    pi = PodInfo(incoming)
    assert pl.pre_filter(state, pi, snap.node_info_list)[1].is_success()
    x = snap.get("node-x")

    def verdicts(st: CycleState) -> dict[str, Code]:
        return {ni.name: pl.filter(st, pi, ni).code for ni in snap.node_info_list}

    assert verdicts(state) == {"node-a": U, "node-b": U, "node-x": S, "node-y": U}
    added = PodInfo(pod("new", on="node-x", labels={"foo": ""}))
    clone = state.clone()
    assert pl.add_pod(clone, pi, added, x).is_success()
    assert verdicts(clone) == {"node-a": S, "node-b": S, "node-x": S, "node-y": S}
    assert verdicts(state) == {"node-a": U, "node-b": U, "node-x": S, "node-y": U}  # the clone is independent
    assert pl.add_pod(clone, pi, PodInfo(pod("n2", on="node-x", labels={"foo": ""})), x).is_success()
    assert verdicts(clone)["node-x"] == U
    assert pl.remove_pod(clone, pi, added, x).is_success()
    assert pl.remove_pod(clone, pi, added, x).is_success()
    assert verdicts(clone) == verdicts(state)
    other_ns = PodInfo(pod("o", on="node-x", ns="other", labels={"foo": ""}))
    assert pl.add_pod(state, pi, other_ns, x).is_success()
    assert verdicts(state)["node-x"] == S


def test_filter_without_prefilter_state_is_an_error() -> None:
    pl = PodTopologySpread.create({}, plain_handle())
    snap = Snapshot.from_objects(ZONE_NODES)
    st = pl.filter(CycleState(snap), PodInfo(pod("p")), snap.get("node-a"))
    assert st.code == Code.ERROR


@pytest.mark.parametrize(("constraint", "field"), [
    ({**tsc(1, "zone"), "labelSelector": {"matchExpressions": [{"key": "foo", "operator": "Bogus"}]}},
     "spec.topologySpreadConstraints[0].labelSelector"),
    ({**tsc(1, "zone"), "maxSkew": "one"}, "spec.topologySpreadConstraints[0].maxSkew"),
    ({**tsc(1, "zone", "ScheduleAnyway"), "minDomains": 1.5}, "spec.topologySpreadConstraints[0].minDomains"),
    ("not-a-constraint", "spec.topologySpreadConstraints[0]"),
])
def test_malformed_constraint_rejects_pod_with_field(constraint: Any, field: str) -> None:
    pl = PodTopologySpread.create({}, plain_handle())
    snap = Snapshot.from_objects(ZONE_NODES)
    pi = PodInfo(pod("p", labels={"foo": ""}, topologySpreadConstraints=[constraint]))
    _, st = pl.pre_filter(CycleState(snap), pi, snap.node_info_list)
    assert st.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert st.plugin == NAME
    assert field in st.message()


def test_constraints_are_parsed_once() -> None:
    pi = PodInfo(pod("p", labels={"foo": ""}, topologySpreadConstraints=[tsc(1, "zone")]))
    pl = PodTopologySpread.create({}, plain_handle())
    objs = ClusterObjects()
    first = pl.get_constraints(pi, "DoNotSchedule", objs)
    assert any(m.name == NAME for m in pi.memos)
    pi.pod["spec"]["topologySpreadConstraints"] = []  # the memo, not the dict, is used from now on
    assert pl.get_constraints(pi, "DoNotSchedule", objs) == first


# -- Score details ----------------------------------------------------------------------------------

def test_prescore_skips_without_soft_constraints() -> None:
    pl = PodTopologySpread.create({}, plain_handle())
    snap = Snapshot.from_objects(ZONE_NODES)
    pi = PodInfo(pod("p", labels={"foo": ""}, topologySpreadConstraints=[tsc(1, "zone")]))
    assert pl.pre_score(CycleState(snap), pi, snap.node_info_list).is_skip()
    # no constraints and nothing selects the pod: system defaults have no selector -> Skip
    assert pl.pre_score(CycleState(snap), PodInfo(pod("q", labels={"foo": ""})), snap.node_info_list).is_skip()


def test_ignored_nodes_score_zero() -> None:
    """A node without the topology key is ignored (0) with explicit constraints."""
    pl = PodTopologySpread.create({}, plain_handle())
    nodes = [node("node-a", zone="z1"), node("node-b", zone="z2"), node("node-c")]
    snap = Snapshot.from_objects(nodes, foo_pods("node-a:2"))
    state = CycleState(snap)
    pi = PodInfo(pod("p", labels={"foo": ""}, topologySpreadConstraints=[tsc(1, "zone", "ScheduleAnyway")]))
    assert pl.pre_score(state, pi, snap.node_info_list).is_success()
    scores = {ni.name: pl.score(state, pi, ni)[0] for ni in snap.node_info_list}
    assert scores["node-c"] == 0
    assert pl.normalize_score(state, pi, scores).is_success()
    assert scores == {"node-a": 0, "node-b": 100, "node-c": 0}


# -- args -------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("args", "needle"), [
    ({"defaultingType": "Foo"}, 'defaultingType: Unsupported value: "Foo"'),
    ({"defaultConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}]},
     "defaultingType: Invalid value: \"System\": when .defaultConstraints are not empty"),
    ({"defaultingType": "List", "defaultConstraints": [
        {"maxSkew": 0, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}]},
     "defaultConstraints[0].maxSkew: Invalid value: 0: not in valid range (0, inf)"),
    ({"defaultingType": "List", "defaultConstraints": [{"maxSkew": 1, "whenUnsatisfiable": "DoNotSchedule"}]},
     "defaultConstraints[0].topologyKey: Required value"),
    ({"defaultingType": "List", "defaultConstraints": [
        {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "Sometimes"}]},
     "defaultConstraints[0].whenUnsatisfiable: Unsupported value"),
    ({"defaultingType": "List", "defaultConstraints": [
        {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {}}]},
     "defaultConstraints[0].labelSelector: Forbidden"),
    ({"defaultingType": "List", "defaultConstraints": [
        {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"},
        {"maxSkew": 2, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}]},
     'defaultConstraints[1]: Duplicate value: "{zone, DoNotSchedule}"'),
    ({"defaultingType": "List", "defaultConstraints": [
        {"maxSkew": 1, "topologyKey": "bad key!", "whenUnsatisfiable": "DoNotSchedule"}]},
     "defaultConstraints[0].topologyKey: Invalid value"),
    ({"hardPodAffinityWeight": 1}, "hardPodAffinityWeight: unknown field"),
])
def test_args_validation(args: dict[str, Any], needle: str) -> None:
    with pytest.raises(ConfigError) as ei:
        PodTopologySpread.create(args, plain_handle())
    assert needle in str(ei.value)


def test_args_defaults() -> None:
    pl = PodTopologySpread.create({}, plain_handle())
    assert pl.system_defaulted
    assert [(c["topologyKey"], c["maxSkew"]) for c in pl.default_constraints] == [
        ("kubernetes.io/hostname", 3), ("topology.kubernetes.io/zone", 5)]
    pl2 = PodTopologySpread.create({"defaultingType": "List"}, plain_handle())
    assert not pl2.system_defaulted and pl2.default_constraints == []


# -- Go float helpers -------------------------------------------------------------------------------

@pytest.mark.parametrize(("x", "want"), [(0.5, 1.0), (1.5, 2.0), (2.5, 3.0), (-2.5, -3.0), (2.4999999, 2.0),
                                         (-0.4, -0.0), (7.0, 7.0), (4503599627370497.0, 4503599627370497.0)])
def test_go_round_half_away_from_zero(x: float, want: float) -> None:
    assert go_round(x) == want
    assert math.copysign(1.0, go_round(x)) == math.copysign(1.0, want)


def _f(bits: int) -> float:
    return float(struct.unpack("<d", struct.pack("<Q", bits))[0])


@pytest.mark.parametrize(("x", "bits"), [
    # Go 1.26 math.Log on amd64, as IEEE-754 bit patterns (C log(3) ends in ...030B).
    (2.0, 0x3FE62E42FEFA39EF), (3.0, 0x3FF193EA7AAD030A), (10.0, 0x40026BB1BBB55516),
    (102.0, 0x40127FF8DF87C7BD),
])
def test_go_log_matches_go(x: float, bits: int) -> None:
    assert go_log(x) == _f(bits)


def test_go_log_special_values() -> None:
    assert go_log(0.0) == -math.inf
    assert math.isnan(go_log(-1.0))
    assert go_log(math.inf) == math.inf
