"""DefaultPreemption (PostFilter), the preemption evaluator and nominated Pods in Filter.

Sources of the expected values:

* ``ORACLE``: the output of upstream's own v1.37.2 framework (the Go oracle in
  ``tests/e2e/testbed/oracle``, with a nominator fed from the pending Pods' ``nominatedNodeName``
  and ``evaluateNominatedNode``) on the ``SCENARIOS`` below, copied here so the tests need no Go;
* ``TestPostFilter`` / ``TestPodEligibleToPreemptOthers`` / ``TestSelectBestCandidate`` cases of
  ``pkg/scheduler/framework/plugins/defaultpreemption/default_preemption_test.go``, ported;
* hand-worked arithmetic, explained next to each case.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import pytest

from py_scheduler.cache.snapshot import ClusterObjects, Snapshot
from py_scheduler.framework.algorithm import Algorithm
from py_scheduler.framework.config import ConfigError, ProfileConfig, build_framework
from py_scheduler.framework.handle import Handle
from py_scheduler.framework.preemption import (
    Victims,
    compile_pdbs,
    filter_pods_with_pdb_violation,
    pick_one_node_for_preemption,
    pod_terminating_by_preemption,
)
from py_scheduler.framework.runtime import Framework, SchedulingError
from py_scheduler.framework.types import Code, CycleState, NodeInfo, PodInfo, Status
from py_scheduler.plugins import registry
from py_scheduler.plugins.default_preemption import (
    ERR_POLICY_NEVER,
    ERR_TERMINATING_VICTIM,
    ERR_WAITING_FOR_PREEMPTION,
    DefaultPreemption,
    DefaultPreemptionArgs,
)
from py_scheduler.plugins.node_resources_fit import NodeResourcesFit
from tests.unit.plugins.plain_handle import plain_handle

Obj = dict[str, Any]

NOW_NS = 1_800_000_000 * 10**9  # 2027-01-15: later than every startTime below
TERMINATING: dict[str, Any] = {
    "meta": {"deletionTimestamp": "2024-01-02T00:00:00Z"},
    "status": {"conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}]},
}


# -- object builders ---------------------------------------------------------------------------------
def node(name: str, cpu: str = "1", mem: str = "4Gi", pods: str = "110", labels: dict[str, str] | None = None) -> Obj:
    alloc = {"cpu": cpu, "memory": mem, "pods": pods}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
            "spec": {}, "status": {"allocatable": alloc, "capacity": alloc}}


def pod(name: str, cpu: str | None = None, mem: str | None = None, node: str | None = None, prio: int | None = None,
        labels: dict[str, str] | None = None, start: str | None = None, policy: str | None = None,
        nnn: str | None = None, ts: str = "2024-01-01T00:00:00Z", spec: Obj | None = None,
        meta: Obj | None = None, status: Obj | None = None) -> Obj:
    req = {k: v for k, v in (("cpu", cpu), ("memory", mem)) if v}
    s: Obj = {"containers": [{"name": "c", "image": "busybox", "resources": {"requests": req} if req else {}}]}
    if node:
        s["nodeName"] = node
    if prio is not None:
        s["priority"] = prio
    if policy:
        s["preemptionPolicy"] = policy
    s.update(spec or {})
    st: Obj = dict(status or {})
    if start:
        st["startTime"] = start
    if nnn:
        st["nominatedNodeName"] = nnn
    if node:
        st.setdefault("phase", "Running")
    m: Obj = {"name": name, "namespace": "default", "uid": f"uid-{name}", "creationTimestamp": ts,
              "labels": labels or {}}
    m.update(meta or {})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": m, "spec": s, "status": st}


def pdb(name: str, match: dict[str, str], allowed: int, disrupted: Sequence[str] = ()) -> Obj:
    status: Obj = {"disruptionsAllowed": allowed, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1}
    if disrupted:
        status["disruptedPods"] = {n: "2024-01-01T00:00:00Z" for n in disrupted}
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"selector": {"matchLabels": match}, "minAvailable": 1}, "status": status}


def anti(app: str, key: str = "kubernetes.io/hostname") -> Obj:
    return {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}]}}}


def t(sec: int) -> str:
    return f"2024-01-01T00:00:{sec:02d}Z"


# -- scenarios checked against the Go oracle ------------------------------------------------------------
SCENARIOS: dict[str, list[Obj]] = {
    # 2 CPUs asked of 1-CPU nodes: Filter says UnschedulableAndUnresolvable, nothing to dry-run.
    "not_helpful": [node("n1"), node("n2"), pod("p", cpu="2")],
    # Room is taken by Pods of the same priority: no victims.
    "no_victims": [node("n1"), node("n2"), pod("a", cpu="800m", node="n1", start=t(0)),
                   pod("b", cpu="800m", node="n2", start=t(1)), pod("p", cpu="500m")],
    # Equal candidates but for the start time: the node whose victim started last wins.
    "latest_start_time": [node("n1"), node("n2"), pod("a", cpu="800m", node="n1", start=t(0)),
                          pod("b", cpu="800m", node="n2", start=t(1)), pod("p", cpu="500m", prio=10)],
    # n1: wrong tier (unresolvable); n2: only a higher-priority Pod; n3: still short of CPU with the
    # lower-priority Pod gone (600m + 500m > 1000m).
    "mixed_reasons": [node("n1", labels={"tier": "y"}), node("n2", labels={"tier": "x"}),
                      node("n3", labels={"tier": "x"}),
                      pod("hi2", cpu="800m", node="n2", prio=100, start=t(1)),
                      pod("hi3", cpu="600m", node="n3", prio=100, start=t(2)),
                      pod("lo3", cpu="300m", node="n3", prio=0, start=t(3)),
                      pod("p", cpu="500m", prio=10, spec={"nodeSelector": {"tier": "x"}})],
    # Fewest PDB violations beats the lower victim priority.
    "pdb_violation_avoided": [node("n1"), node("n2"),
                              pod("guarded", cpu="800m", node="n1", prio=0, labels={"app": "guarded"}, start=t(5)),
                              pod("free", cpu="800m", node="n2", prio=5, labels={"app": "free"}, start=t(1)),
                              pdb("pdb-guarded", {"app": "guarded"}, 0), pod("p", cpu="500m", prio=10)],
    # The PDB's disruptedPods lists the victim: its eviction is already accounted for.
    "pdb_disrupted_pods": [node("n1"), node("n2"),
                           pod("guarded", cpu="800m", node="n1", prio=0, labels={"app": "guarded"}, start=t(5)),
                           pod("free", cpu="800m", node="n2", prio=5, labels={"app": "free"}, start=t(1)),
                           pdb("pdb-guarded", {"app": "guarded"}, 0, disrupted=["guarded"]),
                           pod("p", cpu="500m", prio=10)],
    # Reprieve order: the PDB-protected Pod a is tried first and kept (700m + 900m <= 2000m); then c
    # (500m) and b (700m) no longer fit and are evicted, most important first.
    "reprieve_pdb_first": [node("n1", cpu="2"),
                           pod("a", cpu="700m", node="n1", prio=1, labels={"app": "a"}, start=t(1)),
                           pod("b", cpu="700m", node="n1", prio=2, labels={"app": "b"}, start=t(2)),
                           pod("c", cpu="500m", node="n1", prio=3, labels={"app": "c"}, start=t(3)),
                           pdb("pdb-a", {"app": "a"}, 0), pod("p", cpu="900m", prio=10)],
    # Minimal victim set: only the lowest-priority Pod has to go.
    "minimal_victims": [node("n1", cpu="2"),
                        pod("a", cpu="600m", node="n1", prio=1, start=t(1)),
                        pod("b", cpu="600m", node="n1", prio=2, start=t(2)),
                        pod("c", cpu="600m", node="n1", prio=3, start=t(3)),
                        pod("p", cpu="700m", prio=10)],
    "policy_never": [node("n1"), pod("a", cpu="800m", node="n1", start=t(0)),
                     pod("p", cpu="500m", prio=10, policy="Never")],
    # Already nominated to n1 where a lower-priority victim is terminating: wait for it.
    "terminating_on_nominated": [node("n1"), node("n2"),
                                 pod("v", cpu="800m", node="n1", start=t(0), **TERMINATING),
                                 pod("w", cpu="800m", node="n2", start=t(1)),
                                 pod("p", cpu="500m", prio=10, nnn="n1")],
    # Required anti-affinity to app=x: evicting the lower-priority app=x Pod fixes n1
    # (InterPodAffinity RemovePod); n2's app=x Pod has a higher priority.
    "anti_affinity_victim": [node("n1", cpu="4"), node("n2", cpu="4"),
                             pod("x1", cpu="100m", node="n1", prio=0, labels={"app": "x"}, start=t(1)),
                             pod("x2", cpu="100m", node="n2", prio=100, labels={"app": "x"}, start=t(2)),
                             pod("p", cpu="100m", prio=10, spec=anti("x"))],
    # Zone spread (maxSkew 1): both app=a Pods of zone za have to go (PodTopologySpread
    # RemovePod/AddPod), zone zb's node is full with a higher-priority Pod.
    "spread_victims": [node("n1", cpu="4", labels={"topology.kubernetes.io/zone": "za"}),
                       node("n2", cpu="1", labels={"topology.kubernetes.io/zone": "zb"}),
                       pod("a1", cpu="100m", node="n1", prio=0, labels={"app": "a"}, start=t(1)),
                       pod("a2", cpu="100m", node="n1", prio=0, labels={"app": "a"}, start=t(2)),
                       pod("big", cpu="1", node="n2", prio=100, start=t(3)),
                       pod("p", cpu="100m", prio=10, labels={"app": "a"}, spec={"topologySpreadConstraints": [
                           {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                            "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "a"}}}]})],
    # hi (priority 100) stays pending, nominated to n1; lo (10) must leave it the room there, lo2
    # (200) need not.
    "nominated_pods_in_filter": [node("n1", cpu="2"), node("n2", cpu="2"),
                                 pod("v", cpu="1500m", node="n1", prio=0, start=t(0), **TERMINATING),
                                 pod("w", cpu="1000m", node="n2", prio=50, start=t(1)),
                                 pod("hi", cpu="1500m", prio=100, nnn="n1"),
                                 pod("lo", cpu="400m", prio=10, ts=t(1)),
                                 pod("lo2", cpu="400m", prio=200, ts=t(2))],
    # hi cannot fit (n1: waiting for its terminating victim, n2: a higher-priority Pod) and stays
    # nominated to n1. Affinity to a Pod that is only nominated: the first pass (hi added) passes on
    # n1, the second (without it) does not -- both must pass, so lo fits nowhere.
    "nominated_affinity_needs_both_passes": [
        node("n1", cpu="4", mem="4Gi"), node("n2", cpu="4", mem="4Gi"),
        pod("v", mem="3Gi", node="n1", prio=0, start=t(0), **TERMINATING),
        pod("top", mem="3Gi", node="n2", prio=500, start=t(1)),
        pod("hi", mem="2Gi", prio=100, nnn="n1", labels={"app": "hi"}),
        pod("lo", cpu="100m", prio=10, labels={"app": "lo"}, spec={"affinity": {"podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "hi"}}, "topologyKey": "kubernetes.io/hostname"}]}}})],
    # Anti-affinity to a nominated Pod of higher priority keeps lo off n1.
    "nominated_anti_affinity": [
        node("n1", cpu="4", mem="4Gi"), node("n2", cpu="4", mem="4Gi"),
        pod("v", mem="3Gi", node="n1", prio=0, start=t(0), **TERMINATING),
        pod("top", mem="3Gi", node="n2", prio=500, start=t(1)),
        pod("hi", mem="2Gi", prio=100, nnn="n1", labels={"app": "hi"}),
        pod("lo", cpu="100m", prio=10, labels={"app": "lo"}, spec=anti("hi"))],
    # status.nominatedNodeName is tried first and taken although n2 would score higher.
    "evaluate_nominated_node": [node("n1", cpu="2"), node("n2", cpu="4"),
                                pod("w", cpu="1000m", node="n1", prio=50, start=t(0)),
                                pod("a", cpu="400m", prio=10, nnn="n1"),
                                pod("b", cpu="400m", prio=5, ts=t(2)),
                                pod("c", cpu="400m", prio=5, nnn="gone", ts=t(3))],
    # A victim that has not started counts as started now: the latest, so its node is preferred.
    "start_time_missing": [node("n1"), node("n2"), pod("a", cpu="800m", node="n1", start=t(0)),
                           pod("b", cpu="800m", node="n2"), pod("p", cpu="500m", prio=10)],
    # Pod count: the node holds 2 Pods at most; the Pod needs one of the two lower-priority slots.
    "too_many_pods": [node("n1", cpu="4", pods="2"),
                      pod("a", cpu="100m", node="n1", prio=3, start=t(1)),
                      pod("b", cpu="100m", node="n1", prio=1, start=t(2)),
                      pod("p", cpu="100m", prio=10)],
}

# Upstream's verdicts, from the Go oracle (k8s.io/kubernetes v1.37.2's framework and default
# plugins), per pending Pod in queue order: (pod, selected, message, nominated, victims).
ORACLE: dict[str, list[tuple[str, str | None, str | None, str | None, list[str]]]] = {
    'anti_affinity_victim': [
        ('default/p', None,
            ("0/2 nodes are available: 2 node(s) didn't match pod anti-affinity rules. preemption: found "
             'a potential placement for pod on node n1, preempting 1 victims'),
            'n1', ['default/x1']),
    ],
    'evaluate_nominated_node': [
        ('default/a', 'n1',
            None,
            None, []),
        ('default/b', 'n2',
            None,
            None, []),
        ('default/c', 'n2',
            None,
            None, []),
    ],
    'latest_start_time': [
        ('default/p', None,
            ('0/2 nodes are available: 2 Insufficient cpu. preemption: found a potential placement for '
             'pod on node n2, preempting 1 victims'),
            'n2', ['default/b']),
    ],
    'minimal_victims': [
        ('default/p', None,
            ('0/1 nodes are available: 1 Insufficient cpu. preemption: found a potential placement for '
             'pod on node n1, preempting 1 victims'),
            'n1', ['default/a']),
    ],
    'mixed_reasons': [
        ('default/p', None,
            ("0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 2 "
             'Insufficient cpu. preemption: 0/3 nodes are available: 1 Insufficient cpu, 1 No preemption '
             'victims found for incoming pod, 1 Preemption is not helpful for scheduling.'),
            None, []),
    ],
    'no_victims': [
        ('default/p', None,
            ('0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are available: 2 No '
             'preemption victims found for incoming pod.'),
            None, []),
    ],
    'nominated_affinity_needs_both_passes': [
        ('default/hi', None,
            ('0/2 nodes are available: 2 Insufficient memory. preemption: not eligible due to a '
             'terminating pod on the nominated node.'),
            None, []),
        ('default/lo', None,
            ("0/2 nodes are available: 2 node(s) didn't match pod affinity rules. preemption: 0/2 nodes "
             'are available: 2 Preemption is not helpful for scheduling.'),
            None, []),
    ],
    'nominated_anti_affinity': [
        ('default/hi', None,
            ('0/2 nodes are available: 2 Insufficient memory. preemption: not eligible due to a '
             'terminating pod on the nominated node.'),
            None, []),
        ('default/lo', 'n2',
            None,
            None, []),
    ],
    'nominated_pods_in_filter': [
        ('default/lo2', 'n2',
            None,
            None, []),
        ('default/hi', None,
            ('0/2 nodes are available: 2 Insufficient cpu. preemption: not eligible due to a terminating '
             'pod on the nominated node.'),
            None, []),
        ('default/lo', 'n2',
            None,
            None, []),
    ],
    'not_helpful': [
        ('default/p', None,
            ('0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are available: 2 '
             'Preemption is not helpful for scheduling.'),
            None, []),
    ],
    'pdb_disrupted_pods': [
        ('default/p', None,
            ('0/2 nodes are available: 2 Insufficient cpu. preemption: found a potential placement for '
             'pod on node n1, preempting 1 victims'),
            'n1', ['default/guarded']),
    ],
    'pdb_violation_avoided': [
        ('default/p', None,
            ('0/2 nodes are available: 2 Insufficient cpu. preemption: found a potential placement for '
             'pod on node n2, preempting 1 victims'),
            'n2', ['default/free']),
    ],
    'policy_never': [
        ('default/p', None,
            ('0/1 nodes are available: 1 Insufficient cpu. preemption: not eligible due to '
             'preemptionPolicy=Never.'),
            None, []),
    ],
    'reprieve_pdb_first': [
        ('default/p', None,
            ('0/1 nodes are available: 1 Insufficient cpu. preemption: found a potential placement for '
             'pod on node n1, preempting 2 victims'),
            'n1', ['default/b', 'default/c']),
    ],
    'spread_victims': [
        ('default/p', None,
            ("0/2 nodes are available: 1 Insufficient cpu, 1 node(s) didn't match pod topology spread "
             'constraints. preemption: found a potential placement for pod on node n1, preempting 2 '
             'victims'),
            'n1', ['default/a1', 'default/a2']),
    ],
    'start_time_missing': [
        ('default/p', None,
            ('0/2 nodes are available: 2 Insufficient cpu. preemption: found a potential placement for '
             'pod on node n2, preempting 1 victims'),
            'n2', ['default/b']),
    ],
    'terminating_on_nominated': [
        ('default/p', None,
            ('0/2 nodes are available: 2 Insufficient cpu. preemption: not eligible due to a terminating '
             'pod on the nominated node.'),
            None, []),
    ],
    'too_many_pods': [
        ('default/p', None,
            ('0/1 nodes are available: 1 Too many pods. preemption: found a potential placement for pod '
             'on node n1, preempting 1 victims'),
            'n1', ['default/b']),
    ],
}


class _FixedRng(random.Random):
    def choice(self, seq: Sequence[Any]) -> Any:
        return min(seq)


def schedule_all(objects: list[Obj]) -> list[tuple[str, str | None, str | None, str | None, list[str]]]:
    """The scenario through the default profile in queue order, nominated Pods from the pending
    Pods' ``status.nominatedNodeName`` (dropped once placed), placed Pods assumed."""
    pods = [o for o in objects if o["kind"] == "Pod"]
    snap = Snapshot.from_object_list(objects)
    fw = build_framework(ProfileConfig(scheduler_name="default-scheduler"), registry=registry)
    dp = fw.plugins["DefaultPreemption"]
    dp.offset_rand = lambda n: 0
    dp.now_ns = lambda: NOW_NS
    algo = Algorithm(rng=_FixedRng())
    pending = sorted((p for p in pods if not p["spec"].get("nodeName")),
                     key=lambda p: (-(p["spec"].get("priority") or 0), p["metadata"]["creationTimestamp"]))
    infos = [PodInfo(p) for p in pending]
    nominator: dict[str, list[PodInfo]] = {}
    for pi in infos:
        nnn = (pi.pod.get("status") or {}).get("nominatedNodeName")
        if nnn:
            nominator.setdefault(nnn, []).append(pi)
    fw.connect_nominator(nominator)  # updated in place below, as the queue's is
    out = []
    for pi in infos:
        res = algo.schedule(fw, snap, pi)
        pf = res.post_filter
        nominated = pf.nominated_node_name if pf is not None and pf.nominated_node_name else None
        victims = sorted(v.key for v in pf.victims) if pf is not None else []
        out.append((pi.key, res.selected, res.message, nominated, victims))
        if res.selected is not None:
            for lst in nominator.values():
                if pi in lst:
                    lst.remove(pi)
            snap.assume(pi, res.selected)
    return out


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario_matches_upstream_oracle(name: str) -> None:
    assert schedule_all(SCENARIOS[name]) == ORACLE[name]


def _unplaced(name: str) -> list[str]:
    """Nodes the given scenario's Pod ``name`` may go to when no nominator is given."""
    objects = SCENARIOS["nominated_pods_in_filter" if name == "lo" else name]
    nodes = [o for o in objects if o["kind"] == "Node"]
    pods = [o for o in objects if o["kind"] == "Pod"]
    snap = Snapshot.from_objects(nodes, [p for p in pods if p["spec"].get("nodeName")])
    fw = build_framework(ProfileConfig(scheduler_name="default-scheduler"), registry=registry)
    target = next(p for p in pods if p["metadata"]["name"] == "lo")
    return Algorithm(rng=_FixedRng()).schedule(fw, snap, PodInfo(target), explain=True).feasible


def test_nominated_pods_are_what_keeps_lo_off_n1() -> None:
    # Without the nominator both nodes fit lo; with it (ORACLE above) only n2 does.
    assert sorted(_unplaced("lo")) == ["n1", "n2"]
    assert sorted(_unplaced("nominated_anti_affinity")) == ["n1", "n2"]


# -- upstream TestPostFilter, ported (NodeResourcesFit + a PreFilterExtensions test plugin) ----------
SMALL = {"cpu": "100m", "memory": "100"}
MEDIUM = {"cpu": "200m", "memory": "200"}
LARGE = {"cpu": "300m", "memory": "300"}
VERY_LARGE = {"cpu": "500m", "memory": "500"}
ONE_POD = {"pods": "1"}
NODE_RES = {"cpu": "200m", "memory": "400"}
LOW, MID, HIGH, VERY_HIGH, NEG = 0, 100, 1000, 10000, -100
U = Status(Code.UNSCHEDULABLE)
UU = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE)


def unode(name: str, capacity: dict[str, str], labels: dict[str, str] | None = None) -> Obj:
    """``st.MakeNode().Capacity(...)``: 32 pods unless given."""
    alloc = {"pods": "32", **capacity}
    return {"metadata": {"name": name, "labels": labels or {}}, "status": {"allocatable": alloc, "capacity": alloc}}


def upod(name: str, node: str = "", prio: int | None = None, req: dict[str, str] | None = None,
         start: str | None = None, labels: dict[str, str] | None = None) -> Obj:
    spec: Obj = {"containers": [{"name": "c", "resources": {"requests": dict(req or {})}}]}
    if node:
        spec["nodeName"] = node
    if prio is not None:
        spec["priority"] = prio
    status: Obj = {"startTime": start} if start else {}
    return {"metadata": {"name": name, "namespace": "default", "uid": name, "labels": labels or {}},
            "spec": spec, "status": status}


class ErrorOnLabelPlugin:
    """Upstream's ``TestPlugin``: AddPod / RemovePod fail on nodes labelled ``error=true``."""

    name = "test-plugin"

    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> tuple[None, Status]:
        return None, Status.success()

    def add_pod(self, state: CycleState, pod: PodInfo, to_add: PodInfo, node_info: NodeInfo) -> Status:
        if node_info.labels.get("error") == "true":
            return Status.error(f"failed to add pod: {pod.name}")
        return Status.success()

    def remove_pod(self, state: CycleState, pod: PodInfo, to_remove: PodInfo, node_info: NodeInfo) -> Status:
        if node_info.labels.get("error") == "true":
            return Status.error(f"failed to remove pod: {pod.name}")
        return Status.success()

    def filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status:
        return Status.success()


def make_framework(args: DefaultPreemptionArgs | None = None,
                   extra: Sequence[Any] = ()) -> tuple[Framework, DefaultPreemption]:
    handle = Handle.detached()
    dp = DefaultPreemption(args, handle, offset_rand=lambda n: 0, now_ns=lambda: NOW_NS)
    plugins: list[tuple[Any, int]] = [(NodeResourcesFit.create({}, handle), 1), *((p, 0) for p in extra), (dp, 0)]
    fw = Framework("test", plugins, handle=handle)
    assert dp.handle.profile is fw  # the Handle given at create() reaches the profile's framework
    return fw, dp


def prepare(nodes: list[Obj], pods: list[Obj], preemptor: Obj, pdbs: Sequence[Obj] = (),
            extra: Sequence[Any] = (), args: DefaultPreemptionArgs | None = None
            ) -> tuple[Framework, DefaultPreemption, CycleState, PodInfo]:
    cobj = ClusterObjects()
    for o in pdbs:
        cobj.upsert("PodDisruptionBudget", o)
    snap = Snapshot.from_objects(nodes, pods, cobj)
    fw, dp = make_framework(args, extra)
    state = CycleState(snap)
    pi = PodInfo(preemptor)
    _, s, _ = fw.run_pre_filter(state, pi, snap.node_info_list)
    assert s.is_success()
    return fw, dp, state, pi


def run_post_filter(nodes: list[Obj], pods: list[Obj], preemptor: Obj, statuses: dict[str, Status],
                    pdbs: Sequence[Obj] = (), extra: Sequence[Any] = ()) -> tuple[str | None, Status, list[str]]:
    _, dp, state, pi = prepare(nodes, pods, preemptor, pdbs, extra)
    result, status = dp.post_filter(state, pi, statuses)
    nominated = None if result is None else result.nominated_node_name
    victims = [] if result is None else [v.name for v in result.victims]
    return nominated, status, victims


def found(node_name: str, n: int = 1) -> str:
    return f"preemption: found a potential placement for pod on node {node_name}, preempting {n} victims"


def test_post_filter_higher_priority_can_be_made_schedulable() -> None:
    nominated, status, victims = run_post_filter(
        [unode("node1", ONE_POD)], [upod("p1", "node1")], upod("p", prio=HIGH), {"node1": U})
    assert (nominated, status.code, status.reasons, victims) == ("node1", Code.SUCCESS, [found("node1")], ["p1"])


def test_post_filter_tied_priority_is_still_unschedulable() -> None:
    nominated, status, _ = run_post_filter([unode("node1", ONE_POD)], [upod("p1", "node1")], upod("p"),
                                           {"node1": U})
    assert nominated == ""  # clear the nomination
    assert status.code == Code.UNSCHEDULABLE
    assert status.reasons == ["preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."]


@pytest.mark.parametrize("statuses", [{"node1": UU}, {}], ids=["unresolvable", "absent"])
def test_post_filter_respects_filter_statuses(statuses: dict[str, Status]) -> None:
    nominated, status, _ = run_post_filter([unode("node1", ONE_POD)], [upod("p1", "node1")], upod("p", prio=HIGH),
                                           statuses)
    assert nominated == ""
    assert status.reasons == ["preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."]


def test_post_filter_pod_can_be_made_schedulable_on_one_node() -> None:
    nominated, status, victims = run_post_filter(
        [unode("node1", ONE_POD), unode("node2", ONE_POD)],
        [upod("p1", "node1", prio=HIGH), upod("p2", "node2", prio=LOW)], upod("p", prio=MID),
        {"node1": U, "node2": U})
    assert (nominated, status.reasons, victims) == ("node2", [found("node2")], ["p2"])


def test_post_filter_min_highest_priority_with_pdbs() -> None:
    key = "test.kubernetes.io/is-violating-pdb"
    pods = [upod("p1", "node1", prio=HIGH, labels={key: "non-violating"}),
            upod("p2", "node1", prio=LOW, labels={key: "violating"}),
            upod("p3", "node2", prio=MID, labels={key: "violating"})]
    pdbs = [{"metadata": {"name": "violating-pdb", "namespace": "default"},
             "spec": {"selector": {"matchLabels": {key: "violating"}}, "minAvailable": "100%"}},
            {"metadata": {"name": "non-violating-pdb", "namespace": "default"},
             "spec": {"selector": {"matchLabels": {key: "non-violating"}}, "minAvailable": "0"},
             "status": {"disruptionsAllowed": 2**31 - 1}}]
    nominated, status, _ = run_post_filter([unode("node1", ONE_POD), unode("node2", ONE_POD)], pods,
                                           upod("p", prio=VERY_HIGH), {"node1": U, "node2": U}, pdbs)
    assert (nominated, status.reasons) == ("node2", [found("node2")])


def test_post_filter_not_enough_resources_after_removing_low_priority_pods() -> None:
    nominated, status, _ = run_post_filter([unode("node1", NODE_RES), unode("node2", NODE_RES)],
                                           [upod("p1", "node1"), upod("p2", "node2")],
                                           upod("p", prio=HIGH, req=LARGE), {"node1": U, "node2": U})
    assert nominated == ""
    assert status.reasons == ["preemption: 0/2 nodes are available: 2 Insufficient cpu."]


def test_post_filter_mixed_reasons() -> None:
    nominated, status, _ = run_post_filter(
        [unode("node1", ONE_POD), unode("node2", NODE_RES), unode("node3", ONE_POD)],
        [upod("p1", "node1", prio=HIGH), upod("p2", "node2"), upod("p3", "node3", prio=HIGH)],
        upod("p", prio=HIGH, req=LARGE), {"node1": U, "node2": U, "node3": U})
    assert nominated == ""
    assert status.reasons == ["preemption: 0/3 nodes are available: 1 Insufficient cpu, "
                              "2 No preemption victims found for incoming pod."]


def test_post_filter_mixed_with_unresolvable_and_absent_nodes() -> None:
    _, status, _ = run_post_filter([unode(f"node{i}", NODE_RES) for i in range(1, 5)],
                                   [upod("p1", "node1"), upod("p2", "node2")], upod("p", prio=HIGH, req=LARGE),
                                   {"node1": U, "node2": U, "node4": UU})
    assert status.reasons == ["preemption: 0/4 nodes are available: 2 Insufficient cpu, "
                              "2 Preemption is not helpful for scheduling."]


def test_post_filter_prefilter_extension_error_on_the_only_node() -> None:
    nominated, status, _ = run_post_filter([unode("node1", LARGE, labels={"error": "true"})], [upod("p1", "node1")],
                                           upod("p", prio=HIGH, req=LARGE), {"node1": U},
                                           extra=[ErrorOnLabelPlugin()])
    assert nominated is None
    assert status.code == Code.ERROR
    assert status.reasons == [
        'preemption: running RemovePod on PreFilter plugin "test-plugin": failed to remove pod: p']


def test_post_filter_error_on_one_node_other_node_still_a_candidate() -> None:
    nominated, status, victims = run_post_filter(
        [unode("node1", LARGE, labels={"error": "true"}), unode("node2", LARGE)],
        [upod("p1", "node1"), upod("p2", "node2", req=MEDIUM)], upod("p", prio=HIGH, req=LARGE),
        {"node1": U, "node2": U}, extra=[ErrorOnLabelPlugin()])
    assert (nominated, status.code, status.reasons, victims) == ("node2", Code.SUCCESS, [found("node2")], ["p2"])


def test_fit_error_message_carries_the_preemption_tail() -> None:
    """Through Algorithm.schedule: the FailedScheduling message is upstream's (the task's example)."""
    snap = Snapshot.from_objects([node("n1"), node("n2")])
    fw = build_framework(ProfileConfig(scheduler_name="default-scheduler"), registry=registry)
    res = Algorithm().schedule(fw, snap, PodInfo(pod("p", cpu="2")))
    assert res.message == ("0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are available: "
                           "2 Preemption is not helpful for scheduling.")
    assert res.post_filter is not None and res.post_filter.nominated_node_name == ""


# -- upstream TestSelectBestCandidate, ported ----------------------------------------------------------
BEST_CANDIDATE_CASES: list[tuple[str, int, list[tuple[str, str, int, dict[str, str], int]], dict[str, str], str]] = [
    # (name, nodes, pods (name, node, priority, request, start second), preemptor request, expected)
    ("min highest priority", 3, [
        ("p1.1", "node1", MID, MEDIUM, 0), ("p1.2", "node1", MID, LARGE, 0),
        ("p2.1", "node2", MID, MEDIUM, 0), ("p2.2", "node2", LOW, MEDIUM, 0),
        ("p3.1", "node3", LOW, MEDIUM, 0), ("p3.2", "node3", LOW, MEDIUM, 0)], VERY_LARGE, "node3"),
    ("min sum of priorities", 3, [
        ("p1.1", "node1", MID, MEDIUM, 0), ("p1.2", "node1", MID, LARGE, 0),
        ("p2.1", "node2", MID, LARGE, 0), ("p2.2", "node2", LOW, MEDIUM, 0),
        ("p3.1", "node3", MID, MEDIUM, 0), ("p3.2", "node3", MID, MEDIUM, 0)], VERY_LARGE, "node2"),
    ("min number of pods", 3, [
        ("p1.1", "node1", MID, SMALL, 0), ("p1.2", "node1", NEG, SMALL, 0), ("p1.3", "node1", MID, SMALL, 0),
        ("p1.4", "node1", NEG, SMALL, 0), ("p2.1", "node2", MID, LARGE, 0), ("p2.2", "node2", NEG, MEDIUM, 0),
        ("p3.1", "node3", MID, MEDIUM, 0), ("p3.2", "node3", NEG, SMALL, 0), ("p3.3", "node3", LOW, SMALL, 0)],
     VERY_LARGE, "node2"),
    ("sum of adjusted priorities", 3, [
        ("p1.1", "node1", MID, SMALL, 0), ("p1.2", "node1", NEG, SMALL, 0), ("p1.3", "node1", NEG, SMALL, 0),
        ("p2.1", "node2", MID, LARGE, 0), ("p2.2", "node2", NEG, MEDIUM, 0),
        ("p3.1", "node3", MID, MEDIUM, 0), ("p3.2", "node3", NEG, SMALL, 0), ("p3.3", "node3", LOW, SMALL, 0)],
     VERY_LARGE, "node2"),
    ("non-overlapping criteria", 4, [
        ("p1.1", "node1", MID, SMALL, 0), ("p1.2", "node1", LOW, SMALL, 0), ("p1.3", "node1", LOW, SMALL, 0),
        ("p2.1", "node2", HIGH, LARGE, 0),
        ("p3.1", "node3", MID, MEDIUM, 0), ("p3.2", "node3", LOW, SMALL, 0), ("p3.3", "node3", LOW, SMALL, 0),
        ("p3.4", "node3", LOW, MEDIUM, 0),
        ("p4.1", "node4", MID, MEDIUM, 0), ("p4.2", "node4", MID, SMALL, 0), ("p4.3", "node4", MID, SMALL, 0),
        ("p4.4", "node4", NEG, SMALL, 0)], VERY_LARGE, "node1"),
    ("different start time per node", 3, [
        ("p1.1", "node1", MID, MEDIUM, 2), ("p1.2", "node1", MID, MEDIUM, 2),
        ("p2.1", "node2", MID, MEDIUM, 3), ("p2.2", "node2", MID, MEDIUM, 3),
        ("p3.1", "node3", MID, MEDIUM, 1), ("p3.2", "node3", MID, MEDIUM, 1)], VERY_LARGE, "node2"),
    ("different start time for all pods", 3, [
        ("p1.1", "node1", MID, MEDIUM, 4), ("p1.2", "node1", MID, MEDIUM, 2),
        ("p2.1", "node2", MID, MEDIUM, 5), ("p2.2", "node2", MID, MEDIUM, 1),
        ("p3.1", "node3", MID, MEDIUM, 3), ("p3.2", "node3", MID, MEDIUM, 6)], VERY_LARGE, "node3"),
    ("different priority and start time", 3, [
        ("p1.1", "node1", LOW, MEDIUM, 4), ("p1.2", "node1", MID, MEDIUM, 2),
        ("p2.1", "node2", MID, MEDIUM, 6), ("p2.2", "node2", LOW, MEDIUM, 1),
        ("p3.1", "node3", LOW, MEDIUM, 3), ("p3.2", "node3", MID, MEDIUM, 5)], VERY_LARGE, "node2"),
]


@pytest.mark.parametrize("case", BEST_CANDIDATE_CASES, ids=[c[0] for c in BEST_CANDIDATE_CASES])
def test_select_best_candidate(case: tuple[str, int, list[tuple[str, str, int, dict[str, str], int]],
                                           dict[str, str], str]) -> None:
    _, n, pods, req, expected = case
    nodes = [unode(f"node{i}", VERY_LARGE) for i in range(1, n + 1)]
    bound = [upod(name, node_name, prio, r, t(sec)) for name, node_name, prio, r, sec in pods]
    _, dp, state, pi = prepare(nodes, bound, upod("p", prio=HIGH, req=req))
    infos = state.snapshot.node_info_list
    offset, num = dp.get_offset_and_num_candidates(len(infos))
    candidates, _, errs = dp.evaluator.dry_run_preemption(state, pi, infos, [], offset, num)
    assert not errs
    best = dp.evaluator.select_candidate(candidates)
    assert best is not None and best.name == expected


def test_select_best_candidate_fits_on_both_nodes() -> None:
    """Equal candidates: upstream accepts either node; here the first in dry-run order."""
    nodes = [unode("node1", VERY_LARGE), unode("node2", VERY_LARGE)]
    bound = [upod("p1", "node1", MID, LARGE, t(0)), upod("p2", "node2", MID, LARGE, t(0))]
    _, dp, state, pi = prepare(nodes, bound, upod("p", prio=HIGH, req=LARGE))
    infos = state.snapshot.node_info_list
    candidates, _, _ = dp.evaluator.dry_run_preemption(state, pi, infos, [], 1, 2)
    assert [c.name for c in candidates] == ["node2", "node1"]  # from the offset on
    best = dp.evaluator.select_candidate(candidates)
    assert best is not None and best.name == "node2"


# -- candidate sampling ------------------------------------------------------------------------------
@pytest.mark.parametrize(("pct", "absolute", "n", "want"), [
    (10, 100, 50, 50), (10, 100, 1000, 100), (10, 100, 2000, 200), (40, 10, 100, 40), (0, 5, 3, 3), (5, 0, 10, 0)])
def test_calculate_num_candidates(pct: int, absolute: int, n: int, want: int) -> None:
    dp = DefaultPreemption(DefaultPreemptionArgs(pct, absolute))
    assert dp.calculate_num_candidates(n) == want


def test_dry_run_stops_after_enough_candidates_from_the_offset() -> None:
    """numCandidates 1: the first node from the offset that yields a PDB-respecting candidate ends the
    run; nodes after it are never looked at (no status)."""
    nodes = [unode(f"node{i}", ONE_POD) for i in range(1, 4)]
    bound = [upod(f"v{i}", f"node{i}", LOW, start=t(i)) for i in range(1, 4)]
    _, dp, state, pi = prepare(nodes, bound, upod("p", prio=HIGH), args=DefaultPreemptionArgs(0, 1))
    infos = state.snapshot.node_info_list
    offset, num = 1, dp.calculate_num_candidates(len(infos))
    assert num == 1
    candidates, statuses, _ = dp.evaluator.dry_run_preemption(state, pi, infos, [], offset, num)
    assert [c.name for c in candidates] == ["node2"] and statuses == {}


def test_dry_run_continues_past_pdb_violating_candidates() -> None:
    """A PDB-violating candidate does not end the run: a respecting one is still looked for and
    preferred."""
    nodes = [unode(f"node{i}", ONE_POD) for i in range(1, 3)]
    bound = [upod("v1", "node1", LOW, start=t(1), labels={"app": "x"}), upod("v2", "node2", MID, start=t(2))]
    pdbs = [pdb("pdb-x", {"app": "x"}, 0)]
    _, dp, state, pi = prepare(nodes, bound, upod("p", prio=HIGH), pdbs, args=DefaultPreemptionArgs(0, 1))
    infos = state.snapshot.node_info_list
    candidates, _, _ = dp.evaluator.dry_run_preemption(state, pi, infos, compile_pdbs(pdbs), 0, 1)
    assert [(c.name, c.victims.num_pdb_violations) for c in candidates] == [("node2", 0), ("node1", 1)]
    best = dp.evaluator.select_candidate(candidates)
    assert best is not None and best.name == "node2"  # despite the higher victim priority


def test_offset_rand_is_used_and_defaults_to_a_valid_offset() -> None:
    seen: list[int] = []
    dp = DefaultPreemption(offset_rand=lambda n: seen.append(n) or n - 1)
    assert dp.get_offset_and_num_candidates(7) == (6, 7) and seen == [7]
    default = DefaultPreemption()
    assert all(0 <= default.get_offset_and_num_candidates(5)[0] < 5 for _ in range(50))


# -- upstream TestPodEligibleToPreemptOthers, ported ---------------------------------------------------
def _eligible(preemptor: Obj, pods: list[Obj], nominated_status: Status) -> tuple[bool, str]:
    _, dp, state, pi = prepare([unode("node1", VERY_LARGE)], pods, preemptor)
    return dp.pod_eligible_to_preempt_others(state, pi, nominated_status)


def _with(p: Obj, **extra: Any) -> Obj:
    for section, values in extra.items():
        p.setdefault(section, {}).update(values)
    return p


TERMINATING_VICTIM = {"metadata": {"deletionTimestamp": "2024-01-02T00:00:00Z"},
                      "status": {"conditions": [{"type": "DisruptionTarget", "status": "True",
                                                 "reason": "PreemptionByScheduler"}]}}


@pytest.mark.parametrize(("preemptor", "pods", "nominated_status", "want"), [
    # nominated node, its lower-priority Pod terminating, but the node is unresolvable now: preempt again
    (_with(upod("p", prio=HIGH), status={"nominatedNodeName": "node1"}),
     [_with(upod("p1", "node1", LOW), metadata={"deletionTimestamp": "2024-01-02T00:00:00Z"})], UU, (True, "")),
    (upod("p", prio=HIGH), [], Status.success(), (True, "")),
    (_with(upod("p", prio=HIGH), spec={"preemptionPolicy": "Never"}), [], Status.success(), (False, ERR_POLICY_NEVER)),
    # the victim is terminating because of preemption (DisruptionTarget condition): wait for it
    (_with(upod("p", prio=HIGH), status={"nominatedNodeName": "node1"}),
     [_with(upod("p1", "node1", LOW), **TERMINATING_VICTIM)], Status.success(), (False, ERR_TERMINATING_VICTIM)),
    # terminating for another reason: not a preemption victim
    (_with(upod("p", prio=HIGH), status={"nominatedNodeName": "node1"}),
     [_with(upod("p1", "node1", LOW), metadata={"deletionTimestamp": "2024-01-02T00:00:00Z"})], Status.success(),
     (True, "")),
    # a terminating Pod of higher priority is not this Pod's victim
    (_with(upod("p", prio=LOW), status={"nominatedNodeName": "node1"}),
     [_with(upod("p1", "node1", HIGH), **TERMINATING_VICTIM)], Status.success(), (True, "")),
], ids=["nominated-unresolvable", "not-nominated", "never", "victim-terminating", "other-terminating",
        "higher-priority-terminating"])
def test_pod_eligible_to_preempt_others(preemptor: Obj, pods: list[Obj], nominated_status: Status,
                                        want: tuple[bool, str]) -> None:
    assert _eligible(preemptor, pods, nominated_status) == want


def test_pod_terminating_by_preemption_reads_the_first_disruption_target_condition() -> None:
    p = _with(upod("v", "n"), **TERMINATING_VICTIM)
    assert pod_terminating_by_preemption(p)
    p["status"]["conditions"].insert(0, {"type": "DisruptionTarget", "status": "False"})
    assert not pod_terminating_by_preemption(p)
    assert not pod_terminating_by_preemption(_with(upod("w", "n"), status=TERMINATING_VICTIM["status"]))


# -- PDB accounting (FilterVictimsWithPDBViolation) ------------------------------------------------------
def _pi(name: str, labels: dict[str, str], namespace: str = "default") -> PodInfo:
    p = upod(name, "n", labels=labels)
    p["metadata"]["namespace"] = namespace
    return PodInfo(p)


def test_pdb_budget_is_consumed_in_victim_order() -> None:
    pdbs = compile_pdbs([pdb("one", {"app": "x"}, 1)])
    violating, ok = filter_pods_with_pdb_violation([_pi("a", {"app": "x"}), _pi("b", {"app": "x"})], pdbs)
    assert [p.name for p in ok] == ["a"] and [(p.name, n) for p, n in violating] == [("b", 1)]


def test_pdb_matching_rules() -> None:
    pdbs = compile_pdbs([
        pdb("disrupted", {"app": "d"}, 0, disrupted=["d1"]),
        {"metadata": {"name": "empty", "namespace": "default"}, "spec": {"selector": {}}},
        {"metadata": {"name": "nil", "namespace": "default"}, "spec": {}},
        {"metadata": {"name": "bad", "namespace": "default"},
         "spec": {"selector": {"matchExpressions": [{"key": "app", "operator": "Near"}]}}},
        {"metadata": {"name": "garbled", "namespace": "default"}, "spec": {"selector": {"matchLabels": {"app": "g"}}},
         "status": {"disruptionsAllowed": "two"}},
        "not an object",  # type: ignore[list-item]
    ])
    pods = [_pi("d1", {"app": "d"}),            # listed in disruptedPods: not counted
            _pi("d2", {"app": "d"}),            # budget 0: violates
            _pi("o", {"app": "d"}, "other"),    # other namespace
            _pi("nolabels", {}),                # no labels never violates
            _pi("e", {"app": "e"}),             # empty / nil / invalid selectors match nothing
            _pi("g", {"app": "g"})]             # non-integer disruptionsAllowed counts as 0
    violating, ok = filter_pods_with_pdb_violation(pods, pdbs)
    assert [p.name for p, _ in violating] == ["d2", "g"]
    assert [p.name for p in ok] == ["d1", "o", "nolabels", "e"]


# -- candidate ranking (pickOneNodeForPreemption) ------------------------------------------------------------
def _victims(*pods: tuple[int, int | None], pdb_violations: int = 0) -> Victims:
    """(priority, start second or None) per victim, most important first."""
    return Victims([PodInfo(upod(f"v{i}", "n", prio, start=None if s is None else t(s)))
                    for i, (prio, s) in enumerate(pods)], pdb_violations)


@pytest.mark.parametrize(("victims", "want"), [
    ({"a": _victims((0, 1), pdb_violations=1), "b": _victims((100, 1))}, "b"),
    ({"a": _victims((100, 1)), "b": _victims((50, 1), (50, 1))}, "b"),
    ({"a": _victims((100, 1), (-100, 1), (-100, 1)), "b": _victims((100, 1), (-100, 1))}, "b"),
    # adjusted sums (priority + 2^31): three negative victims cost more than two
    ({"a": _victims((10, 1), (-5, 1), (-5, 1)), "b": _victims((10, 1), (-5, 1))}, "b"),
    ({"a": _victims((10, 1), (10, 1)), "b": _victims((10, 1), (0, 1), (0, 1), (0, 1))}, "a"),
    ({"a": _victims((10, 3)), "b": _victims((10, 5)), "c": _victims((10, 4))}, "b"),
    # the earliest start among the highest-priority victims counts; lower-priority ones do not
    ({"a": _victims((10, 5), (10, 1)), "b": _victims((10, 4), (5, 0))}, "b"),
    # not started = now: the latest
    ({"a": _victims((10, 5)), "b": _victims((10, None))}, "b"),
    ({"a": _victims((10, 5)), "b": _victims((10, 5))}, "a"),
    ({}, ""),
], ids=["pdb", "highest-priority", "sum", "negative-sum", "num-pods", "start-time", "start-time-top-priority",
        "not-started", "tie-first", "empty"])
def test_pick_one_node_for_preemption(victims: dict[str, Victims], want: str) -> None:
    assert pick_one_node_for_preemption(victims, None, NOW_NS) == want


def test_pick_one_node_with_custom_score_funcs() -> None:
    victims = {"a": _victims((0, 1)), "b": _victims((0, 1)), "c": _victims((0, 1))}
    assert pick_one_node_for_preemption(victims, [lambda n: 1 if n != "a" else 0, lambda n: ord(n)], NOW_NS) == "c"


# -- nominated Pods in Filter (framework.go RunFilterPluginsWithNominatedPods) ------------------------------
def test_no_nominator_keeps_plain_filter_and_nominator_is_restored() -> None:
    fw, _ = make_framework()
    snap = Snapshot.from_objects([unode("n", {"cpu": "1"})])
    state, pi = CycleState(snap), PodInfo(upod("p", req={"cpu": "600m"}))
    fw.run_pre_filter(state, pi, snap.node_info_list)
    assert fw.run_filter_with_nominated_pods(state, pi, snap.get("n")).is_success()
    nominated = PodInfo(upod("hi", prio=10, req={"cpu": "600m"}))
    lower = PodInfo(upod("lo", prio=-1, req={"cpu": "600m"}))
    itself = PodInfo(upod("p", prio=5, req={"cpu": "600m"}))  # same UID as the Pod: skipped
    fw.nominator = {"n": [lower, itself]}
    assert fw.run_filter_with_nominated_pods(state, pi, snap.get("n")).is_success()
    fw.nominator = {"n": [nominated]}
    st = fw.run_filter_with_nominated_pods(state, pi, snap.get("n"))
    assert st.code == Code.UNSCHEDULABLE and st.reasons == ["Insufficient cpu"]
    assert len(snap.get("n").pods) == 0  # the clone took the nominated Pod, not the snapshot
    assert Algorithm().schedule(fw, snap, pi).selected is None
    fw.nominator = None
    assert Algorithm().schedule(fw, snap, pi).selected == "n"


def test_nominated_pod_add_pod_failure_is_a_scheduling_error() -> None:
    fw, _ = make_framework(extra=[ErrorOnLabelPlugin()])
    snap = Snapshot.from_objects([unode("n", {"cpu": "1"}, labels={"error": "true"})])
    with pytest.raises(SchedulingError, match='running AddPod on PreFilter plugin "test-plugin": failed to add pod: p'):
        fw.connect_nominator({"n": [PodInfo(upod("hi", prio=10))]})
        Algorithm().schedule(fw, snap, PodInfo(upod("p")))


# -- asynchronous preemption bookkeeping -----------------------------------------------------------------
def test_pre_enqueue_holds_the_pod_while_its_preemption_runs() -> None:
    dp = DefaultPreemption()
    pi = PodInfo(upod("p"))
    assert dp.pre_enqueue(pi).is_success()
    dp.mark_preempting(pi.uid)
    st = dp.pre_enqueue(pi)
    assert (st.code, st.reasons, st.plugin) == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [ERR_WAITING_FOR_PREEMPTION],
                                                "DefaultPreemption")
    dp.preemption_finished(pi.uid)
    assert dp.pre_enqueue(pi).is_success() and not dp.is_pod_running_preemption(pi.uid)
    (ev,) = dp.events_to_register()
    assert ev.event.label() == "AssignedPodDelete"
    assert ev.hint_fn is not None and int(ev.hint_fn({}, None, None)) == 0  # QueueSkip


# -- args ------------------------------------------------------------------------------------------------------
def test_args_defaults() -> None:
    assert DefaultPreemptionArgs.from_dict({}) == DefaultPreemptionArgs(10, 100)
    assert DefaultPreemptionArgs.from_dict({"minCandidateNodesPercentage": 0, "minCandidateNodesAbsolute": 3}) == \
        DefaultPreemptionArgs(0, 3)


@pytest.mark.parametrize(("args", "message"), [
    ({"minCandidateNodesPercentage": 120},
     "minCandidateNodesPercentage: Invalid value: 120: not in valid range [0, 100]"),
    ({"minCandidateNodesAbsolute": -1}, "minCandidateNodesAbsolute: Invalid value: -1: not in valid range [0, inf)"),
    ({"minCandidateNodesPercentage": 0, "minCandidateNodesAbsolute": 0},
     "[minCandidateNodesPercentage: Invalid value: 0: cannot be zero at the same time as minCandidateNodesAbsolute, "
     "minCandidateNodesAbsolute: Invalid value: 0: cannot be zero at the same time as minCandidateNodesPercentage]"),
    ({"minCandidateNodesPercentage": "10"}, 'minCandidateNodesPercentage: Invalid value: "10": must be an integer'),
    ({"minCandidates": 1}, 'minCandidates: unknown field "minCandidates"'),
])
def test_args_validation(args: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        DefaultPreemptionArgs.from_dict(args)
    assert str(exc.value) == message
    profile = ProfileConfig(plugin_config={"DefaultPreemption": args})
    with pytest.raises(ConfigError, match=r"^pluginConfig\[DefaultPreemption\]\.args: "):
        build_framework(profile, registry=registry)


def test_registry_builds_the_plugin_into_the_default_profile() -> None:
    fw = build_framework(ProfileConfig(), registry=registry)
    dp = fw.plugins["DefaultPreemption"]
    assert isinstance(dp, DefaultPreemption) and dp.handle.profile is fw and fw.handle is dp.handle
    assert [p.name for p in fw.post_filter_plugins][-1] == "DefaultPreemption"
    assert isinstance(registry.get("DefaultPreemption")({"minCandidateNodesAbsolute": 7}, plain_handle()),
                      DefaultPreemption)


# -- bad input never escapes -------------------------------------------------------------------------------------
def test_malformed_fields_do_not_raise() -> None:
    pods = [_with(upod("v1", "node1", LOW, labels={"app": "x"}), status={"startTime": "yesterday"}),
            _with(upod("v2", "node1", LOW), status={"startTime": 12})]
    weird = [{"metadata": {"name": "weird", "namespace": "default"},
              "spec": {"selector": {"matchLabels": {"app": ["x"]}}}, "status": {"disruptedPods": ["v1"]}}]
    preemptor = _with(upod("p", prio=HIGH), spec={"preemptionPolicy": 5}, status={"nominatedNodeName": 7})
    nominated, status, victims = run_post_filter([unode("node1", {"pods": "2"})], pods, preemptor, {"node1": U},
                                                 weird)
    assert (nominated, status.code) == ("node1", Code.SUCCESS)
    assert victims == ["v2"]  # both unstarted (= now): the later in node order is the less important one
