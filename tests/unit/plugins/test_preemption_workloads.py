"""Single-Pod preemption with GenericWorkload on, against upstream's framework (the Go oracle with
``ORACLE_FEATURE_GATES=GenericWorkload=true``): a victim that belongs to a PodGroup has the group's
priority (``GetPodPriority``: ``spec.priority``, 0 when unset) and ranks above a plain Pod of equal
priority (``MoreImportantVictim``'s ``victimRank``), so the plain Pod is evicted first.

Upstream: ``pkg/scheduler/framework/preemption/types.go`` (``NewPodVictim``), ``util.go``
(``MoreImportantVictim``, ``GetPodPriority``), ``plugins/defaultpreemption/default_preemption.go``
(``SelectVictimsOnNode``, ``isPreemptionAllowed``).
"""

from __future__ import annotations

import random
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


def _group(name: str, priority: int | None, disrupt_all: bool = False) -> Obj:
    spec: Obj = {"schedulingPolicy": {"gang": {"minCount": 1}}}
    if priority is not None:
        spec["priority"] = priority
    if disrupt_all:
        spec["disruptionMode"] = {"all": {}}
    return {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "default", "uid": f"pg-{name}"}, "spec": spec}


def _pdb(app: str, allowed: int) -> Obj:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": f"pdb-{app}", "namespace": "default", "uid": f"pdb-{app}"},
            "spec": {"selector": {"matchLabels": {"app": app}}},
            "status": {"disruptionsAllowed": allowed}}


def _pod(name: str, cpu: str, priority: int, node: str = "", group: str = "", start: str = "",
         labels: dict[str, str] | None = None) -> Obj:
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
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "labels": labels or {},
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
    # a group with disruptionMode All is one victim: making room on n1 evicts its member on n2 too
    # (getCrossNodesVictims). n2 cannot be made room on (its other Pod has a higher priority).
    "a-disruption-all-group-is-evicted-whole": ([
        _node("n1"), _node("n2"), _group("a", 100, disrupt_all=True),
        _pod("a1", "3", 100, "n1", group="a", start="2026-01-01T00:00:00Z"),
        _pod("a2", "1", 100, "n2", group="a", start="2026-01-01T00:00:00Z"),
        _pod("keeper", "3", 2000, "n2", start="2026-01-01T00:00:00Z"),
        _pod("high", "2", 1000)], ["default/a1", "default/a2"]),
    # equal priority and rank: the victim with more Pods (group a, two) is the more important one
    # and is reprieved first, so the member of group b goes, although b1 started earlier.
    "a-larger-victim-is-more-important": ([
        _node("n1"), _node("n2"), _group("a", 100, disrupt_all=True), _group("b", 100),
        _pod("a1", "2", 100, "n1", group="a", start="2026-06-01T00:00:00Z"),
        _pod("b1", "2", 100, "n1", group="b", start="2026-01-01T00:00:00Z"),
        _pod("a2", "1", 100, "n2", group="a", start="2026-06-01T00:00:00Z"),
        _pod("keeper", "3", 2000, "n2", start="2026-01-01T00:00:00Z"),
        _pod("high", "2", 1000)], ["default/b1"]),
    # a PodDisruptionBudget that a2 (on n2) would break makes the whole group a PDB-violating victim,
    # reprieved before the non-violating ones whatever their priority: p (200) goes, not a1 (100).
    "a-group-violates-its-members-budget": ([
        _node("n1"), _node("n2"), _group("a", 100, disrupt_all=True), _pdb("a2", 0),
        _pod("a1", "2", 100, "n1", group="a", start="2026-01-01T00:00:00Z"),
        _pod("p", "2", 200, "n1", start="2026-01-01T00:00:00Z"),
        _pod("a2", "1", 100, "n2", group="a", start="2026-01-01T00:00:00Z", labels={"app": "a2"}),
        _pod("keeper", "3", 2000, "n2", start="2026-01-01T00:00:00Z"),
        _pod("high", "2", 1000)], ["default/p"]),
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


_STARTS = ["2026-01-01T00:00:00Z", "2026-03-01T00:00:00Z", "2026-06-01T00:00:00Z"]


def random_workload_cluster(seed: int) -> list[Obj]:
    """2-5 nodes of 4 or 8 CPUs; 1-3 PodGroups (priority 0, 100 or 500; ``disruptionMode`` All in
    60 % of them, Single in 20 %) with 1-4 members bound across the nodes; up to 4 plain bound Pods
    (priority 0-2000); half the time a PodDisruptionBudget (0 or 1 disruptions allowed) over one of
    three labels; then 1-3 pending Pods of priority 200 or 1000 asking 1-4 CPUs."""
    r = random.Random(seed)
    objs: list[Obj] = []
    free: dict[str, int] = {}
    for i in range(r.randint(2, 5)):
        node = _node(f"n{i}")
        cpu = r.choice([4, 8])
        node["status"]["allocatable"] = node["status"]["capacity"] = {"cpu": str(cpu), "memory": "32Gi",
                                                                      "pods": "110"}
        objs.append(node)
        free[f"n{i}"] = cpu * 1000

    def place(milli: int) -> str:
        fits = [n for n, f in free.items() if f >= milli]
        if not fits:
            return ""
        n = r.choice(fits)
        free[n] -= milli
        return n

    def bound(name: str, milli: int, priority: int, group: str = "") -> None:
        node = place(milli)
        if node:
            objs.append(_pod(name, f"{milli}m", priority, node, group, r.choice(_STARTS),
                             {"app": r.choice("xyz")}))

    for g in range(r.randint(1, 3)):
        priority = r.choice([0, 100, 100, 500])
        mode = r.random()
        group = _group(f"g{g}", priority, disrupt_all=mode < 0.6)
        if 0.6 <= mode < 0.8:
            group["spec"]["disruptionMode"] = {"single": {}}
        objs.append(group)
        for k in range(r.randint(1, 4)):
            bound(f"g{g}m{k}", r.choice([500, 1000, 2000]), priority, f"g{g}")
    for k in range(r.randint(0, 4)):
        bound(f"p{k}", r.choice([500, 1000, 2000, 3000]), r.choice([0, 100, 500, 2000]))
    if r.random() < 0.5:
        objs.append(_pdb(r.choice("xyz"), r.choice([0, 1])))
    for k in range(r.randint(1, 3)):
        objs.append(_pod(f"high{k}", str(r.randint(1, 4)), r.choice([200, 1000])))
    return objs


@pytest.mark.parametrize("seed", range(40))
def test_random_workload_clusters_preempt_as_upstream(seed: int) -> None:
    """A differential check against the Go oracle over random clusters of pod groups (All, Single,
    none), plain Pods and budgets: every pending Pod's outcome, message, nomination and victims agree.
    On the code before group victims, 27 of 200 such clusters disagreed (seeds 0-199 of an equal
    generator); 1 000 more agreed after."""
    objs = random_workload_cluster(seed)
    want = run_oracle(oracle_binary(), objs, GATES)
    got = run_py(objs, want, FeatureGates.parse(GATES))
    assert compare(want, got) == []


@pytest.mark.parametrize("seed", range(20))
def test_group_pods_index_equals_a_scan(seed: int) -> None:
    """The speed-up's plain form: ``GroupPods.members`` gives, for every group, the Pods naming it in
    node order, as a scan of every node's Pods does."""
    from py_scheduler.cache.snapshot import Snapshot
    from py_scheduler.framework.group_preemption import GroupPods
    from py_scheduler.framework.podgroup import pod_group_name

    snap = Snapshot.from_object_list(random_workload_cluster(seed))
    index = GroupPods(snap.node_info_list)
    names = {(p.namespace, pod_group_name(p.pod)) for ni in snap.node_info_list for p in ni.pods}
    names.add(("default", "none"))
    for ns, name in names:
        if name is None:
            continue
        scan = [p for ni in snap.node_info_list for p in ni.pods if p.namespace == ns and pod_group_name(p.pod) == name]
        assert index.members(ns, name) == scan
