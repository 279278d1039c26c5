"""TopologyAwareWorkloadScheduling: TopologyPlacementGenerator (PlacementGenerate as upstream, and the
per-Pod PreFilter that keeps a gang inside one domain) and PodGroupPodsCount (PlacementScore).

Upstream cases from ``topologyaware/topology_placement_test.go`` (no constraint -> the parent placement;
one placement per domain; only the scheduled members' domain; members in two domains -> error) and
``podgrouppodscount/podgroup_pods_count_test.go`` (scheduled + proposed; normalization by the best).
"""

from __future__ import annotations

from typing import Any

from py_scheduler.framework import config
from py_scheduler.framework.features import FeatureGates
from py_scheduler.framework.interfaces import (
    Placement,
    PlacementGeneratePlugin,
    PlacementScore,
    PlacementScoreExtensions,
    PlacementScorePlugin,
    PodGroupAssignments,
    PodGroupInfo,
)
from py_scheduler.framework.types import Code, CycleState, NodeInfo, PodInfo
from py_scheduler.plugins import pod_group_pods_count as pgc
from py_scheduler.plugins import registry
from py_scheduler.plugins import topology_placement as tp
from tests.unit.plugins.test_gang_scheduling import Objects, pod, pod_group

Obj = dict[str, Any]
RACK = "example.com/rack"


def node(name: str, rack: str | None, gpus: int = 4, used: list[Obj] | None = None) -> NodeInfo:
    labels = {RACK: rack} if rack is not None else {}
    obj = {"metadata": {"name": name, "labels": labels},
           "status": {"allocatable": {"cpu": "32", "memory": "128Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}}}
    return NodeInfo(obj, [PodInfo(p) for p in used or []])


def gpu_pod(name: str, gpus: int, group: str | None = "pg", node_name: str = "") -> Obj:
    p = pod(name, group, node=node_name)
    p["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1", "nvidia.com/gpu": str(gpus)},
                                               "limits": {"nvidia.com/gpu": str(gpus)}}
    return p


def topo_group(min_count: int = 2) -> Obj:
    pg = pod_group(min_count=min_count)
    pg["spec"]["schedulingConstraints"] = {"topology": [{"key": RACK}]}
    return pg


def test_protocols() -> None:
    assert isinstance(tp.TopologyPlacement(), PlacementGeneratePlugin)
    assert isinstance(pgc.PodGroupPodsCount(), PlacementScorePlugin)
    assert isinstance(pgc.PodGroupPodsCount(), PlacementScoreExtensions)


def test_generate_placements_as_upstream() -> None:
    nodes = [node("a1", "a"), node("b1", "b"), node("a2", "a"), node("x", None)]
    parent = Placement("", nodes)
    pl = tp.TopologyPlacement()
    got, s = pl.generate_placements(CycleState(), PodGroupInfo(pod_group(), []), parent)
    assert s.is_success() and got == [parent]  # no constraint
    got, s = pl.generate_placements(CycleState(), PodGroupInfo(topo_group(), []), parent)
    assert s.is_success()
    assert [(p.name, [n.name for n in p.nodes]) for p in got] == [("a", ["a1", "a2"]), ("b", ["b1"])]
    # A member already on b1: only b remains.
    nodes[1] = node("b1", "b", used=[gpu_pod("m0", 1, node_name="b1")])
    got, s = pl.generate_placements(CycleState(), PodGroupInfo(topo_group(), []), Placement("", nodes))
    assert [p.name for p in got] == ["b"]
    # Members in two domains: an error.
    nodes[0] = node("a1", "a", used=[gpu_pod("m1", 1, node_name="a1")])
    got, s = pl.generate_placements(CycleState(), PodGroupInfo(topo_group(), []), Placement("", nodes))
    assert s.code == Code.ERROR and got == []
    assert "more than 1 domain found for pod group: a, b" in s.message()


def test_pre_filter_keeps_the_gang_in_the_best_fitting_domain() -> None:
    """Rack a: 2 nodes with 4 free GPUs each (8); rack b: one node with 4 free GPUs. A gang of four
    2-GPU members (8 GPUs) fits only in rack a; a gang of two fits both, and takes the tighter rack b."""
    nodes = [node("a1", "a"), node("a2", "a"), node("b1", "b"), node("nolabel", None, gpus=8)]
    objs = Objects()
    objs.add(topo_group(4), *[gpu_pod(f"p{i}", 2) for i in range(4)])
    pl = tp.TopologyPlacement(objs)
    state = CycleState()
    allowed, s = pl.pre_filter(state, PodInfo(gpu_pod("p0", 2)), nodes)
    assert s.is_success() and allowed == {"a1", "a2"}
    assert state.read("PreFilterTopologyPlacementGenerator")["capacity"] == {"a": 4, "b": 2}
    assert pl.explain_note(state) == (f"pod group ns/pg: topology {RACK}=a (holds the whole group; 4 members, "
                                      "room per domain: a=4, b=2)")
    assert pl.explain_note(CycleState()) is None
    small = Objects()
    small.add(topo_group(2), *[gpu_pod(f"p{i}", 2) for i in range(2)])
    allowed, s = tp.TopologyPlacement(small).pre_filter(CycleState(), PodInfo(gpu_pod("p0", 2)), nodes)
    assert allowed == {"b1"}
    big = Objects()
    big.add(topo_group(6), *[gpu_pod(f"p{i}", 2) for i in range(6)])
    state = CycleState()
    allowed, s = tp.TopologyPlacement(big).pre_filter(state, PodInfo(gpu_pod("p0", 2)), nodes)
    assert allowed == {"a1", "a2"}
    note = pl.explain_note(state)
    assert note is not None and "holds the most members, but not all: the group cannot fit whole" in note


def test_pre_filter_follows_scheduled_members_and_skips_others() -> None:
    objs = Objects()
    objs.add(topo_group(2), gpu_pod("p0", 2), gpu_pod("p1", 2))
    pl = tp.TopologyPlacement(objs)
    nodes = [node("a1", "a"), node("b1", "b", used=[gpu_pod("p0", 2, node_name="b1")]), node("b2", "b")]
    allowed, s = pl.pre_filter(CycleState(), PodInfo(gpu_pod("p1", 2)), nodes)
    assert s.is_success() and allowed == {"b1", "b2"}
    nodes[0] = node("a1", "a", used=[gpu_pod("p9", 2, node_name="a1")])
    allowed, s = pl.pre_filter(CycleState(), PodInfo(gpu_pod("p1", 2)), nodes)
    assert s.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE and allowed is None
    # No group, no constraint, no node with the key.
    assert pl.pre_filter(CycleState(), PodInfo(gpu_pod("solo", 1, None)), nodes)[1].is_skip()
    plain = Objects()
    plain.add(pod_group(min_count=2))
    assert tp.TopologyPlacement(plain).pre_filter(CycleState(), PodInfo(gpu_pod("p0", 1)), nodes)[1].is_skip()
    _, s = pl.pre_filter(CycleState(), PodInfo(gpu_pod("p1", 2)), [node("x", None)])
    assert s.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE and RACK in s.message()


def test_copies_that_fit_counts_gpus_cpu_and_pod_slots() -> None:
    ni = node("a1", "a", gpus=4, used=[gpu_pod("u", 1, None, node_name="a1")])
    assert tp.copies_that_fit(ni, PodInfo(gpu_pod("p", 1)).requests) == 3
    assert tp.copies_that_fit(ni, PodInfo(gpu_pod("p", 4)).requests) == 0
    assert tp.copies_that_fit(ni, PodInfo(pod("cpu-only")).requests) > 0


def test_pod_group_pods_count_scores_and_normalizes() -> None:
    nodes = [node("a1", "a", used=[gpu_pod("m0", 1, node_name="a1")]), node("b1", "b")]
    pl = pgc.PodGroupPodsCount()
    info = PodGroupInfo(topo_group(), [])
    pa = Placement("a", nodes[:1])
    score, s = pl.score_placement(CycleState(), info, PodGroupAssignments(pa, [(PodInfo(pod("p1")), "a1")]))
    assert (score, s.is_success()) == (2, True)
    scores = [PlacementScore(pa, 2), PlacementScore(Placement("b", nodes[1:]), 3)]
    assert pl.normalize_placement_score(CycleState(), info, scores).is_success()
    assert [x.score for x in scores] == [66, 100]
    zero = [PlacementScore(pa, 0)]
    assert pl.normalize_placement_score(CycleState(), info, zero).code == Code.ERROR


def test_gate_adds_both_plugins_after_gang_scheduling() -> None:
    gates = FeatureGates(generic_workload=True, topology_aware_workload_scheduling=True)
    mp = config.default_multipoint(registry, with_gpu=False, gates=gates)
    assert mp[-3:] == [("GangScheduling", 0), ("TopologyPlacementGenerator", 0), ("PodGroupPodsCount", 1)]
    fw = config.build_framework(config.ProfileConfig(), config.SchedulerConfig(feature_gates=gates), registry=registry)
    assert any(p.name == "TopologyPlacementGenerator" for p in fw.pre_filter_plugins)
