"""The placement algorithm of :func:`py_scheduler.framework.podgroup.schedule_pod_group` on its own
(pure: a recording AssumeFn, fake PlacementGenerate / PlacementScore plugins put in a default profile
built with GenericWorkload and TopologyAwareWorkloadScheduling on).

The intent of upstream's ``TestPodGroupSchedulingPlacementAlgorithm`` and ``..._Scoring``
(``pkg/scheduler/schedule_one_podgroup_test.go``): the higher (weighted) placement score wins; no
placement generated -> Unschedulable ``no feasible placements found`` from the generator; a generator
error is returned with its plugin; a score plugin error is an Error ``running PlacementScore plugins:
plugin "X" failed with: ...``; an infeasible placement is left out whatever its score; all infeasible
-> ``0/N placements are available, first placement status: ...``. Every trial's assumption is undone
and only the chosen placement's members stay assumed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from py_scheduler.framework.features import FeatureGates
from py_scheduler.framework.interfaces import Placement, PodGroupAssignments, PodGroupInfo
from py_scheduler.framework.podgroup import schedule_pod_group
from py_scheduler.framework.types import Code, CycleState, PodInfo, Status
from tests.unit.app.test_loop import Harness

Obj = dict[str, Any]


class Generator:
    """PlacementGenerate: fixed placements (node names), or a status."""

    name = "FakeGenerator"

    def __init__(self, placements: dict[str, list[str]], status: Status | None = None) -> None:
        self.placements, self.status = placements, status

    def generate_placements(self, state: CycleState, pod_group: PodGroupInfo,
                            parent: Placement) -> tuple[list[Placement], Status]:
        if self.status is not None:
            return [], self.status
        return [Placement(n, [ni for ni in parent.nodes if ni.name in names])
                for n, names in self.placements.items()], Status.success()


class Scorer:
    """PlacementScore: a fixed score per placement name (or an error for one)."""

    def __init__(self, name: str, scores: dict[str, int], fail: str = "") -> None:
        self.name, self.scores, self.fail = name, scores, fail

    def score_placement(self, state: CycleState, pod_group: PodGroupInfo,
                        assignments: PodGroupAssignments) -> tuple[int, Status]:
        if assignments.placement.name == self.fail:
            return 0, Status.error("error for test")
        return self.scores.get(assignments.placement.name, 0), Status.success()


def _setup(plugins: list[Any], weights: dict[str, int] | None = None, cordoned: tuple[str, ...] = (),
           nominated: str = "") -> tuple[Harness, Callable[..., Any], list[str], list[str]]:
    """A default profile (gates on) with the topology plugins replaced by ``plugins``; nodes node1,
    node2; returns the harness, a runner, the assume log and the live assumed set."""
    h0 = Harness(gates=FeatureGates(generic_workload=True, topology_aware_workload_scheduling=True))
    fw = h0.fw
    for n in ("TopologyPlacementGenerator", "PodGroupPodsCount"):
        fw.plugins.pop(n, None)
    for p in plugins:
        fw.plugins[p.name] = p
    fw.weights.update(weights or {})
    fw.nominator = None  # h0's queue gave it its nominator; the harness below brings its own queue
    h = Harness(fw)
    for n in ("node1", "node2"):
        h.cache.add_node({"metadata": {"name": n, "labels": {"kubernetes.io/hostname": n}},
                          "spec": {"unschedulable": n in cordoned},
                          "status": {"allocatable": {"cpu": "4", "memory": "4Gi", "pods": "110"}}})
    h.cache.update_snapshot(h.loop.snapshot)
    log: list[str] = []
    live: list[str] = []

    def assume(p: PodInfo, node: str, state: CycleState) -> tuple[Status, Any]:
        log.append(f"+{node}")
        live.append(node)

        def revert() -> None:
            log.append(f"-{node}")
            live.remove(node)
        return Status.success(), revert

    pg = {"metadata": {"name": "pg", "namespace": "default"}, "spec": {"schedulingPolicy": {"basic": {}}}}
    pod = {"metadata": {"name": "foo", "namespace": "default", "uid": "foo"},
           "spec": {"schedulingGroup": {"podGroupName": "pg"}, "containers": [{"name": "c"}]},
           "status": {"nominatedNodeName": nominated} if nominated else {}}

    def run() -> Any:
        return schedule_pod_group(fw, h.loop.algorithm, h.loop.snapshot, PodGroupInfo(pg, [PodInfo(pod)]), assume)

    return h, run, log, live


TWO = {"placement1": ["node1"], "placement2": ["node2"]}


@pytest.mark.parametrize(("scores", "want"), [({"placement1": 2, "placement2": 1}, "node1"),
                                              ({"placement1": 1, "placement2": 2}, "node2")])
def test_the_higher_score_wins_and_only_its_members_stay_assumed(scores: dict[str, int], want: str) -> None:
    _, run, log, live = _setup([Generator(TWO), Scorer("S", scores)])
    res, reverts = run()
    assert res.status.is_success() and [m.node for m in res.members] == [want]
    assert log == ["+node1", "-node1", "+node2", "-node2", f"+{want}"] and live == [want]
    reverts.revert()
    assert live == []


@pytest.mark.parametrize(("s1", "s2", "want"), [((50, 75), (25, 10), "node1"), ((75, 50), (10, 25), "node2")])
def test_weighted_scores_are_summed(s1: tuple[int, int], s2: tuple[int, int], want: str) -> None:
    a = Scorer("A", {"placement1": s1[0], "placement2": s1[1]})
    b = Scorer("B", {"placement1": s2[0], "placement2": s2[1]})
    _, run, _, live = _setup([Generator(TWO), a, b], weights={"A": 1, "B": 2})
    res, _ = run()
    assert res.status.is_success() and live == [want]


def test_no_placement_generated_is_unschedulable() -> None:
    _, run, log, _ = _setup([Generator({})])
    res, _ = run()
    assert res.status.code == Code.UNSCHEDULABLE and res.status.message() == "no feasible placements found"
    assert res.status.plugin == "FakeGenerator" and log == [] and not res.members[0].evaluated


def test_a_generator_error_is_returned_with_its_plugin() -> None:
    _, run, _, _ = _setup([Generator({}, Status.error("error for test"))])
    res, _ = run()
    assert res.status.code == Code.ERROR and res.status.message() == "error for test"
    assert res.status.plugin == "FakeGenerator"


def test_a_score_plugin_error_is_an_error_and_nothing_stays_assumed() -> None:
    _, run, _, live = _setup([Generator(TWO), Scorer("S", {"placement1": 1}, fail="placement2")])
    res, _ = run()
    assert res.status.code == Code.ERROR
    assert res.status.message() == 'running PlacementScore plugins: plugin "S" failed with: error for test'
    assert live == []


def test_an_infeasible_placement_is_left_out_whatever_its_score() -> None:
    _, run, _, live = _setup([Generator(TWO), Scorer("S", {"placement1": 1, "placement2": 100})],
                             cordoned=("node2",))
    res, _ = run()
    assert res.status.is_success() and live == ["node1"]


def test_all_placements_infeasible() -> None:
    _, run, _, live = _setup([Generator(TWO), Scorer("S", {})], cordoned=("node1", "node2"))
    res, _ = run()
    assert res.status.code == Code.UNSCHEDULABLE and live == []
    assert res.status.message() == ("pod group is unschedulable, 0/2 placements are available, first placement "
                                    "status: minCount (1) cannot be satisfied: 0 scheduled, 0 remaining")
    assert res.members[0].result is not None and res.members[0].result.message.startswith("0/1 nodes are available")


def test_a_nominated_node_outside_the_placement_is_not_tried() -> None:
    """``GetNodeInPlacement``: the member's nominated node2 is not in the one placement (node1)."""
    _, run, _, live = _setup([Generator({"placement1": ["node1"]})], nominated="node2")
    res, _ = run()
    assert res.status.is_success() and live == ["node1"]
    r = res.members[0].result
    assert r is not None and r.nodes_evaluated == 1 and r.feasible == ["node1"]
