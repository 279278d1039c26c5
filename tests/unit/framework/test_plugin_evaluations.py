"""``scheduler_plugin_evaluation_total``'s counts (framework.go ``setInstrumentedPlugins``): PreFilter and
PreScore once per cycle, Filter and Score once per node a plugin ran on. The counts a shard's verdicts
give (:meth:`Framework.count_filtered`, for nodes another process filtered) must equal those the plain
node-by-node filter gives on the same nodes.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from py_scheduler.framework.runtime import Framework
from py_scheduler.framework.types import Code, CycleState, NodeInfo, PodInfo, Status

POD = {"metadata": {"name": "p", "namespace": "default", "uid": "uid-p"},
       "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}]}}


def _node(name: str) -> NodeInfo:
    return NodeInfo({"metadata": {"name": name}, "status": {"allocatable": {"cpu": "4", "pods": "110"}}})


class _Rejects:
    """A Filter (and PreFilter / PreScore / Score) plugin rejecting the nodes in ``reject``."""

    def __init__(self, name: str, reject: set[str]) -> None:
        self.name = name
        self.reject = reject

    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> tuple[None, Status]:
        return None, Status.success()

    def filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status:
        return Status(Code.UNSCHEDULABLE, ["no"]) if node_info.name in self.reject else Status.success()

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> Status:
        return Status.success()

    def score(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> tuple[int, Status]:
        return 1, Status.success()


def _framework(plugins: list[Any]) -> Framework:
    return Framework("p", [(p, 1) for p in plugins])


def test_each_point_counts_what_upstream_counts() -> None:
    names = [f"n{i}" for i in range(10)]
    nodes = [_node(n) for n in names]
    fw = _framework([_Rejects("A", {"n1", "n3", "n5"}), _Rejects("B", {"n0"}), _Rejects("C", set())])
    pod, state = PodInfo(POD), CycleState(None)
    fw.run_pre_filter(state, pod, nodes)
    out = fw.filter_chunk(fw.filter_plugins, state, pod, nodes)
    assert out is not None and sum(s is not None for s in out) == 4
    feasible = [ni for ni, s in zip(nodes, out, strict=True) if s is None]
    fw.run_pre_score(state, pod, feasible)
    fw.run_score(state, pod, feasible)
    assert dict(fw.evaluations["PreFilter"]) == {"A": 1, "B": 1, "C": 1}
    assert dict(fw.evaluations["Filter"]) == {"A": 10, "B": 7, "C": 6}
    assert dict(fw.evaluations["PreScore"]) == {"A": 1, "B": 1, "C": 1}
    assert dict(fw.evaluations["Score"]) == {"A": 6, "B": 6, "C": 6}
    fw.run_filter(state, pod, nodes[1])  # node by node (preemption's dry runs): A rejects n1
    assert dict(fw.evaluations["Filter"]) == {"A": 11, "B": 7, "C": 6}


@pytest.mark.parametrize("seed", range(20))
def test_counts_from_verdicts_equal_the_node_by_node_counts(seed: int) -> None:
    rng = random.Random(seed)
    names = [f"n{i}" for i in range(rng.randint(0, 40))]
    plugins = [_Rejects(f"P{k}", {n for n in names if rng.random() < 0.3}) for k in range(rng.randint(1, 5))]
    nodes = [_node(n) for n in names]
    plain, from_verdicts = _framework(plugins), _framework(plugins)
    out = plain.filter_chunk(plain.filter_plugins, CycleState(None), PodInfo(POD), nodes)
    from_verdicts.count_filtered(from_verdicts.filter_plugins, out if out is not None else [None] * len(nodes))
    assert from_verdicts.evaluations["Filter"] == plain.evaluations["Filter"]
