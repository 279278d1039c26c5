"""NodeAffinity's bound on one scheduling cycle (``CYCLE_REQUIREMENT_CHECKS``, py-scheduler's own; upstream:
``pkg/scheduler/framework/plugins/nodeaffinity/node_affinity.go`` has none).

A required affinity of many terms costs ``terms x nodes`` checks the first time it is judged (an
adversarial run: 25 000 terms against 500 nodes blocked the event loop 7 s per Pod). Past the bound
the Filter fails with Error naming the field; the verdicts judged so far stay in the plugin's
per-affinity memo, so the retries go further and end where an unbounded cycle ends. Preferred terms
(not memoized) past the bound are an Error from PreScore. The offline engine has no bound.
"""

from __future__ import annotations

from typing import Any

import pytest

from py_scheduler.cache.snapshot import Snapshot
from py_scheduler.framework.algorithm import Algorithm
from py_scheduler.framework.config import ProfileConfig, build_framework
from py_scheduler.framework.runtime import Framework, SchedulingError
from py_scheduler.framework.types import PodInfo
from py_scheduler.offline.engine import OfflineScheduler
from py_scheduler.plugins import registry
from py_scheduler.plugins.node_affinity import _UNSET, CYCLE_REQUIREMENT_CHECKS, NodeAffinity

Obj = dict[str, Any]
NODES = 40


def _cluster() -> list[Obj]:
    return [{"kind": "Node", "apiVersion": "v1",
             "metadata": {"name": f"n{i:02d}", "labels": {"kubernetes.io/hostname": f"n{i:02d}", "i": str(i)}},
             "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}}} for i in range(NODES)]


def _pod(required_terms: list[Obj] | None = None, preferred: list[Obj] | None = None) -> PodInfo:
    na: Obj = {}
    if required_terms is not None:
        na["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": required_terms}
    if preferred is not None:
        na["preferredDuringSchedulingIgnoredDuringExecution"] = preferred
    return PodInfo({"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "p", "namespace": "default", "uid": "p"},
                    "spec": {"containers": [{"name": "c", "image": "i"}], "affinity": {"nodeAffinity": na}}})


def _framework(budget: int | None) -> tuple[Framework, NodeAffinity]:
    fw = build_framework(ProfileConfig(scheduler_name="default-scheduler"), registry=registry)
    na = fw.plugins["NodeAffinity"]
    assert isinstance(na, NodeAffinity) and na.cycle_budget == CYCLE_REQUIREMENT_CHECKS
    na.cycle_budget = budget
    return fw, na


# 60 terms no node satisfies (a label no node has), then one naming node n37: 122 checks per node
TERMS = [{"matchExpressions": [{"key": f"k{j}", "operator": "Exists"}]} for j in range(60)] + [
    {"matchExpressions": [{"key": "i", "operator": "In", "values": ["37"]}]}]


def test_retries_go_further_each_time_and_end_where_an_unbounded_cycle_ends() -> None:
    fw, _ = _framework(None)
    want = Algorithm().schedule(fw, Snapshot.from_object_list(_cluster()), _pod(TERMS), explain=True)
    assert want.selected == "n37"
    fw, na = _framework(1000)
    snap = Snapshot.from_object_list(_cluster())
    judged, cut = [0], 0
    while True:
        try:
            got = Algorithm().schedule(fw, snap, _pod(TERMS), explain=True)
            break
        except SchedulingError as exc:
            assert str(exc).startswith(
                'running "NodeAffinity" filter plugin: spec.affinity.nodeAffinity.requiredDuringSchedulingIgnored'
                "DuringExecution: 61 node selector terms (122 requirement checks per node) used up this scheduling "
                "cycle's 1000 checks, py-scheduler's bound on one cycle; the nodes judged so far are remembered and "
                "the Pod is retried"), str(exc)
            column = next(iter(na._memo.values()))
            judged.append(sum(v is not None and v is not _UNSET for v in column.nodes))
            assert judged[-1] > judged[-2]  # each cut attempt judged more nodes
            cut += 1
            assert cut < NODES
    assert cut >= 3 and got.selected == want.selected


def test_an_ordinary_affinity_is_far_from_the_bound() -> None:
    fw, _ = _framework(CYCLE_REQUIREMENT_CHECKS)
    terms = [{"matchExpressions": [{"key": "i", "operator": "In", "values": ["3", "4"]},
                                   {"key": "kubernetes.io/hostname", "operator": "Exists"}]}]
    assert Algorithm().schedule(fw, Snapshot.from_object_list(_cluster()), _pod(terms), explain=True).selected in (
        "n03", "n04")


def test_preferred_terms_past_the_bound_are_an_error_from_pre_score() -> None:
    preferred = [{"weight": 1, "preference": t} for t in TERMS]
    fw, _ = _framework(NODES * 122 - 1)
    with pytest.raises(SchedulingError) as ei:
        Algorithm().schedule(fw, Snapshot.from_object_list(_cluster()), _pod(preferred=preferred), explain=True)
    assert ("spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution: 122 requirement checks per "
            f"node against {NODES} feasible nodes pass {NODES * 122 - 1}, py-scheduler's bound on one scheduling "
            "cycle") in str(ei.value)
    fw, _ = _framework(NODES * 122)
    res = Algorithm().schedule(fw, Snapshot.from_object_list(_cluster()), _pod(preferred=preferred), explain=True)
    assert res.selected == "n37"


def test_the_offline_engine_has_no_bound() -> None:
    fw, na = _framework(CYCLE_REQUIREMENT_CHECKS)
    OfflineScheduler({"default-scheduler": fw}, "default-scheduler", Snapshot.from_object_list([]))
    assert na.cycle_budget is None

