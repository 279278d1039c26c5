"""Single-Pod preemption with GenericWorkload on, against upstream's framework (the Go oracle with
``ORACLE_FEATURE_GATES=GenericWorkload=true``): a victim that belongs to a PodGroup has the group's
priority (``GetPodPriority``: ``spec.priority``, 0 when unset) and ranks above a plain Pod of equal
priority (``MoreImportantVictim``'s ``victimRank``), so the plain Pod is evicted first.

Upstream: ``pkg/scheduler/framework/preemption/types.go`` (``NewPodVictim``), ``util.go``
(``MoreImportantVictim``, ``GetPodPriority``), ``plugins/defaultpreemption/default_preemption.go``
(``SelectVictimsOnNode``, ``isPreemptionAllowed``).
"""

from __future__ import annotations

from typing import Any

import pytest

from bench.parity_lib.runner import compare, oracle_binary, run_oracle, run_py
from py_scheduler.framework.features import FeatureGates

Obj = dict[str, Any]
GATES = "GenericWorkload=true"


def _node(name: str) -> Obj:
    alloc = {"cpu": "4", "memory": "8Gi", "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "uid": f"uid-{name}",
                                                             "labels": {"kubernetes.io/hostname": name}},
            "spec": {}, "status": {"allocatable": alloc, "capacity": alloc}}


def _group(name: str, priority: int | None) -> Obj:
    spec: Obj = {"schedulingPolicy": {"gang": {"minCount": 1}}}
    if priority is not None:
        spec["priority"] = priority
    return {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "default", "uid": f"pg-{name}"}, "spec": spec}


def _pod(name: str, cpu: str, priority: int, node: str = "", group: str = "", start: str = "") -> Obj:
    spec: Obj = {"schedulerName": "default-scheduler", "priority": priority,
                 "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}]}
    status: Obj = {"phase": "Running" if node else "Pending"}
    if node:
        spec["nodeName"] = node
    if group:
        spec["schedulingGroup"] = {"podGroupName": group}
    if start:
        status["startTime"] = start
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}",
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": spec, "status": status}


SCENARIOS: dict[str, tuple[list[Obj], list[str]]] = {
    # a plain Pod and a group member of equal priority (100, the group's too), the member started
    # later: upstream evicts the plain Pod (a group outranks a Pod), not the later-started member.
    "a-group-member-outranks-a-plain-pod": ([
        _node("n1"), _group("g", 100),
        _pod("plain", "2", 100, "n1", start="2026-01-01T00:00:00Z"),
        _pod("member", "2", 100, "n1", group="g", start="2026-06-01T00:00:00Z"),
        _pod("high", "2", 1000)], ["default/plain"]),
    # a member of priority 500 in a group with no priority is a victim of priority 0.
    "a-member-has-its-groups-priority": ([
        _node("n1"), _group("g", None),
        _pod("member", "3", 500, "n1", group="g", start="2026-01-01T00:00:00Z"),
        _pod("low", "2", 100)], ["default/member"]),
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_victims_of_a_workload_cluster_match_upstream(name: str) -> None:
    objs, victims = SCENARIOS[name]
    want = run_oracle(oracle_binary(), objs, GATES)
    got = run_py(objs, want, FeatureGates.parse(GATES))
    assert [r.get("victims") for r in want] == [victims]  # the case is what it says upstream
    assert compare(want, got) == []
    assert [r.get("victims") for r in got] == [victims]


def test_with_the_gate_off_the_pods_own_priority_and_start_time_decide() -> None:
    objs, _ = SCENARIOS["a-group-member-outranks-a-plain-pod"]
    want = run_oracle(oracle_binary(), objs, "")
    got = run_py(objs, want, FeatureGates.parse(""))
    assert compare(want, got) == [] and [r.get("victims") for r in got] == [["default/member"]]
