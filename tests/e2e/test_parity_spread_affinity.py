"""Differential test: PodTopologySpread and InterPodAffinity against upstream's own v1.37.2 framework.

Random clusters (zones / racks / hostnames with missing labels, taints, namespaces with labels, a
Service and a ReplicaSet for default spreading, bound Pods with (anti-)affinity, terminating Pods)
and pending Pods with random spread constraints (minDomains, matchLabelKeys, inclusion policies) and
pod (anti-)affinity terms (namespaceSelector, namespaces) go through the Go parity oracle
(``tests/e2e/testbed/oracle``: kube-scheduler's real default profile). For every node the first
rejection by one of these two plugins (or none) and their normalized scores on the feasible nodes
must equal upstream's. Pending Pods are bound where upstream put them before the next one.

The oracle binary is built on first use (``bench.parity_lib.runner.oracle_binary``), cached
beside the test bed's binaries under ``~/.cache/py-scheduler/testbed``.
"""

from __future__ import annotations

import copy
import json
import random
import subprocess
from typing import Any

import pytest

from bench.parity_lib.runner import oracle_binary
from py_scheduler.cache.snapshot import ClusterObjects, Snapshot
from py_scheduler.framework.types import CycleState, PodInfo
from py_scheduler.plugins.inter_pod_affinity.plugin import InterPodAffinity
from py_scheduler.plugins.pod_topology_spread.plugin import PodTopologySpread
from tests.unit.plugins.plain_handle import plain_handle

Obj = dict[str, Any]
HOST = "kubernetes.io/hostname"
MY_REASONS = {
    "node(s) didn't match pod topology spread constraints",
    "node(s) didn't match pod topology spread constraints (missing required label)",
    "node(s) didn't match pod affinity rules", "node(s) didn't match pod anti-affinity rules",
    "node(s) didn't satisfy existing pods anti-affinity rules",
}


ORACLE = oracle_binary()  # built once per oracle source, beside the test bed's binaries


def rsel(r: random.Random) -> Obj | None:
    c = r.random()
    if c < 0.3:
        return {"matchExpressions": [{"key": "app", "operator": "Exists"}]}
    if c < 0.55:
        values = r.sample(["a", "b", "c"], r.randint(1, 2))
        return {"matchExpressions": [{"key": "app", "operator": "In", "values": values}]}
    if c < 0.7:
        return {"matchLabels": {"tier": r.choice(["x", "y"])}}
    if c < 0.8:
        return {"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["c"]}]}
    if c < 0.9:
        return {}
    return None


def rlabels(r: random.Random) -> dict[str, str]:
    lab = {}
    if r.random() < 0.85:
        lab["app"] = r.choice(["a", "b", "c"])
    if r.random() < 0.6:
        lab["tier"] = r.choice(["x", "y"])
    return lab


def rterm(r: random.Random) -> Obj:
    t = {"topologyKey": r.choice(["zone", HOST, "rack", "zone"])}
    s = rsel(r)
    if s is not None or r.random() < 0.5:
        t["labelSelector"] = s
    c = r.random()
    if c < 0.15:
        t["namespaceSelector"] = {"matchLabels": {"team": r.choice(["a", "b"])}}
    elif c < 0.22:
        t["namespaceSelector"] = {}
    elif c < 0.3:
        t["namespaces"] = r.sample(["default", "ns-a", "ns-b"], r.randint(1, 2))
    return t


def raffinity(r: random.Random, p_req: float, p_pref: float) -> Obj:
    aff = {}
    for kind in ("podAffinity", "podAntiAffinity"):
        sec = {}
        if r.random() < p_req:
            sec["requiredDuringSchedulingIgnoredDuringExecution"] = [rterm(r) for _ in range(r.randint(1, 2))]
        if r.random() < p_pref:
            sec["preferredDuringSchedulingIgnoredDuringExecution"] = [
                {"weight": r.randint(1, 100), "podAffinityTerm": rterm(r)} for _ in range(r.randint(1, 2))]
        if sec:
            aff[kind] = sec
    return aff


def rconstraints(r: random.Random) -> list[Obj]:
    out = []
    keys = r.sample(["zone", HOST, "rack", "topology.kubernetes.io/zone"], r.randint(1, 2))
    for k in keys:
        c = {"maxSkew": r.randint(1, 3), "topologyKey": k,
             "whenUnsatisfiable": r.choice(["DoNotSchedule", "ScheduleAnyway"])}
        s = rsel(r)
        if s is not None or r.random() < 0.5:
            c["labelSelector"] = s
        if c["whenUnsatisfiable"] == "DoNotSchedule" and r.random() < 0.25:
            c["minDomains"] = r.randint(1, 5)
        if r.random() < 0.25:
            c["matchLabelKeys"] = ["tier"]
        if r.random() < 0.3:
            c["nodeAffinityPolicy"] = r.choice(["Honor", "Ignore"])
        if r.random() < 0.3:
            c["nodeTaintsPolicy"] = r.choice(["Honor", "Ignore"])
        out.append(c)
    return out


def scenario(seed: int) -> tuple[list[Obj], list[Obj], list[Obj], list[Obj]]:
    r = random.Random(seed)
    nodes = []
    for i in range(r.randint(3, 7)):
        name = f"n{i}"
        labels = {HOST: name}
        if r.random() < 0.85:
            labels["zone"] = r.choice(["z1", "z2", "z3"])
        if r.random() < 0.5:
            labels["topology.kubernetes.io/zone"] = r.choice(["z1", "z2"])
        if r.random() < 0.7:
            labels["rack"] = r.choice(["r1", "r2"])
        if r.random() < 0.5:
            labels["foo"] = ""
        n = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
             "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"},
                        "capacity": {"cpu": "64", "memory": "256Gi", "pods": "110"}}}
        if r.random() < 0.2:
            n["spec"] = {"taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]}
        nodes.append(n)
    objs = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}},
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns-a", "labels": {"team": "a"}}},
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns-b", "labels": {"team": "b"}}}]
    if r.random() < 0.5:
        objs.append({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc", "namespace": "default"},
                     "spec": {"selector": {"app": r.choice(["a", "b"])}, "ports": [{"port": 80}]}})
    rs_sel = None
    if r.random() < 0.4:
        rs_sel = {"matchLabels": {"tier": r.choice(["x", "y"])}}
        objs.append({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "rs", "namespace": "default",
                     "uid": "rs-uid"}, "spec": {"selector": rs_sel, "template": {"metadata": {"labels": {}}}}})

    def mkpod(name: str, ns: str, bound_to: str | None = None) -> Obj:
        p = {"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}", "labels": rlabels(r),
                          "creationTimestamp": f"2024-01-01T00:00:{len(name):02d}Z"},
             "spec": {"containers": [{"name": "c", "image": "i"}]}}
        if bound_to:
            p["spec"]["nodeName"] = bound_to
        return p

    bound = []
    for j in range(r.randint(0, 14)):
        p = mkpod(f"b{j}", r.choice(["default", "default", "ns-a", "ns-b"]), r.choice(nodes)["metadata"]["name"])
        aff = raffinity(r, 0.15, 0.2)
        if aff:
            p["spec"]["affinity"] = aff
        if r.random() < 0.05:
            p["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
            p["metadata"]["finalizers"] = ["x"]
        bound.append(p)
    pending = []
    for j in range(4):
        p = mkpod(f"pend{j}", r.choice(["default", "default", "default", "ns-a"]))
        p["metadata"]["creationTimestamp"] = f"2024-01-02T00:00:{j:02d}Z"
        if r.random() < 0.6:
            p["spec"]["topologySpreadConstraints"] = rconstraints(r)
        aff = raffinity(r, 0.35, 0.35)
        if r.random() < 0.2:
            aff["nodeAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "foo", "operator": "Exists"}]}]}}
        if aff:
            p["spec"]["affinity"] = aff
        if r.random() < 0.15:
            p["spec"]["nodeSelector"] = {"foo": ""}
        if r.random() < 0.2:
            p["spec"]["tolerations"] = [{"key": "k", "operator": "Exists"}]
        if rs_sel is not None and r.random() < 0.4:
            p["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs",
                                                 "uid": "rs-uid", "controller": True}]
        pending.append(p)
    return nodes, objs, bound, pending


def _compare(seed: int) -> list[str]:
    """Differences between upstream and py-scheduler for one generated scenario."""
    assert ORACLE is not None
    pts = PodTopologySpread.create({}, plain_handle())
    ipa = InterPodAffinity.create({}, plain_handle())
    nodes, objs, bound, pending = scenario(seed)
    out = subprocess.run([str(ORACLE)], input=json.dumps({"objects": nodes + objs + bound + pending}),
                         capture_output=True, text=True, timeout=120, check=True)
    results = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    assert len(results) == len(pending)
    co = ClusterObjects()
    for o in objs:
        co.upsert(o["kind"], o)
    cur_bound = copy.deepcopy(bound)
    by_key = {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p for p in pending}
    diffs: list[str] = []
    for res in results:
        p = by_key[res["pod"]]
        snap = Snapshot.from_objects(nodes, cur_bound, co)
        pi = PodInfo(p)
        state = CycleState(snap)
        pre = [(pl, pl.pre_filter(state, pi, snap.node_info_list)[1]) for pl in (pts, ipa)]
        for _, st in pre:
            assert st.is_success() or st.is_skip(), st
        for ni in snap.node_info_list:
            want = res["filtered"].get(ni.name)
            if want is not None and not set(want) & MY_REASONS:
                continue  # rejected by a plugin that runs before these two
            got = None
            for pl, st in pre:
                if st.is_skip():
                    continue
                f = pl.filter(state, pi, ni)
                if not f.is_success():
                    got = f.reasons
                    break
            if got != want:
                diffs.append(f"seed {seed} {res['pod']} filter on {ni.name}: upstream {want}, ours {got}")
        feasible = [snap.get(n) for n in res["feasible"]]
        if feasible:
            for pl, name in ((pts, "PodTopologySpread"), (ipa, "InterPodAffinity")):
                st = CycleState(snap)
                scores: dict[str, int] | None = None
                if not pl.pre_score(st, pi, feasible).is_skip():
                    scores = {ni.name: pl.score(st, pi, ni)[0] for ni in feasible}
                    column, cs = pl.score_nodes(st, pi, feasible)  # the column form the runtime calls
                    if not cs.is_success() or list(column) != list(scores.values()):
                        diffs.append(f"seed {seed} {res['pod']} {name}: score_nodes {list(column)}, "
                                     f"score {list(scores.values())}")
                    pl.normalize_score(st, pi, scores)
                if scores != res["scores"].get(name):
                    diffs.append(f"seed {seed} {res['pod']} {name}: upstream {res['scores'].get(name)}, "
                                 f"ours {scores}")
        if res["selected"]:
            b = copy.deepcopy(p)
            b["spec"]["nodeName"] = res["selected"]
            cur_bound.append(b)
    return diffs


@pytest.mark.parametrize("chunk", range(4))
def test_matches_upstream_on_random_clusters(chunk: int) -> None:
    diffs: list[str] = []
    for seed in range(chunk * 40, chunk * 40 + 40):
        diffs += _compare(seed)
    assert not diffs, "\n".join(diffs[:20])
