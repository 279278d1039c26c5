"""DynamicResources (DRA): PreFilter / Filter / Score / Reserve against upstream's verdicts, the
allocator's search order and limits, the CEL environment, malformed input (v1.37's default DRA
features: test_dra_features.py).

The ``ORACLE`` expectations below were produced by upstream's own v1.37.2 framework (the Go parity
oracle, ``tests/e2e/testbed/oracle``) on exactly the scenarios of ``CASES``; the numbers and reason
strings are copied from its output, so these tests need no Go.
"""

from __future__ import annotations

import copy
import json
import random
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from bench.parity_lib.runner import MinChoice
from py_scheduler.cache.snapshot import Snapshot
from py_scheduler.framework.algorithm import Algorithm
from py_scheduler.framework.config import ConfigError, ProfileConfig, build_framework
from py_scheduler.framework.runtime import SchedulingError
from py_scheduler.framework.types import Code, CycleState, PodInfo
from py_scheduler.plugins import registry
from py_scheduler.plugins.dynamic_resources import (
    ALLOCATIONS_KEY,
    NEEDS_API_ALLOCATION_KEY,
    NEEDS_API_DEALLOCATION_KEY,
    DynamicResources,
    simulated_pre_bind,
)
from py_scheduler.plugins.dynamic_resources.allocator import Allocator
from py_scheduler.plugins.dynamic_resources.common import AllocationTimeout
from py_scheduler.plugins.helpers import cel
from tests.unit.plugins.plain_handle import plain_handle

Obj = dict[str, Any]
G = "gpu.example.com"


# -- object builders ------------------------------------------------------------------------------
def node(name: str, labels: dict[str, str] | None = None, scalar: dict[str, str] | None = None) -> Obj:
    alloc = {"cpu": "4", "memory": "8Gi", "pods": "110", **(scalar or {})}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
            "status": {"allocatable": alloc, "capacity": dict(alloc)}}


def pod(name: str, claims: Sequence[Obj] = (), statuses: list[Obj] | None = None,
        ts: str = "2024-01-01T00:00:00Z", containers: list[Obj] | None = None,
        inits: list[Obj] | None = None) -> Obj:
    p: Obj = {"apiVersion": "v1", "kind": "Pod",
              "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "creationTimestamp": ts},
              "spec": {"containers": containers or [{"name": "c", "image": "x",
                                                     "resources": {"requests": {"cpu": "100m"}}}],
                       "resourceClaims": list(claims)}}
    if inits:
        p["spec"]["initContainers"] = inits
    if statuses is not None:
        p["status"] = {"resourceClaimStatuses": statuses}
    return p


def ctr(name: str, n: int, res: str = "example.com/gpu", restart: str | None = None) -> Obj:
    c: Obj = {"name": name, "image": "x", "resources": {"requests": {res: str(n), "cpu": "100m"},
                                                         "limits": {res: str(n)}}}
    if restart:
        c["restartPolicy"] = restart
    return c


def dclass(name: str, selectors: Sequence[str] = (), ext: str | None = None) -> Obj:
    dc: Obj = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
               "spec": {"selectors": [{"cel": {"expression": e}} for e in selectors]}}
    if ext:
        dc["spec"]["extendedResourceName"] = ext
    return dc


def rslice(name: str, driver: str, pool: str, node: str | None = None, devices: Sequence[Obj] = (),
           all_nodes: bool = False, node_selector: Obj | None = None, count: int = 1, gen: int = 1) -> Obj:
    spec: Obj = {"driver": driver, "pool": {"name": pool, "generation": gen, "resourceSliceCount": count},
                 "devices": list(devices)}
    if node:
        spec["nodeName"] = node
    if all_nodes:
        spec["allNodes"] = True
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name}, "spec": spec}


def dev(name: str, attrs: Obj | None = None, cap: dict[str, str] | None = None, **extra: Any) -> Obj:
    d: Obj = {"name": name, **extra}
    if attrs:
        d["attributes"] = attrs
    if cap:
        d["capacity"] = {k: {"value": v} for k, v in cap.items()}
    return d


def claim(name: str, requests: list[Obj], allocation: Obj | None = None, reserved: list[Obj] | None = None,
          constraints: list[Obj] | None = None, owner: Obj | None = None) -> Obj:
    c: Obj = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
              "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
              "spec": {"devices": {"requests": requests}}}
    if constraints:
        c["spec"]["devices"]["constraints"] = constraints
    if owner:
        c["metadata"]["ownerReferences"] = [owner]
    st: Obj = {}
    if allocation:
        st["allocation"] = allocation
    if reserved:
        st["reservedFor"] = reserved
    if st:
        c["status"] = st
    return c


def ex(cls: str = "gpu", count: int = 1, sel: Sequence[str] = (), mode: str = "ExactCount", **extra: Any) -> Obj:
    e: Obj = {"deviceClassName": cls, "allocationMode": mode, **extra}
    if mode == "ExactCount":
        e["count"] = count
    if sel:
        e["selectors"] = [{"cel": {"expression": x}} for x in sel]
    return e


def uses(*names: str) -> list[Obj]:
    return [{"name": f"x{i}", "resourceClaimName": n} for i, n in enumerate(names)]


# -- scenarios ------------------------------------------------------------------------------------
BASE = [
    node("a", {"zone": "z1"}), node("b", {"zone": "z2"}), node("c", {"zone": "z1"}),
    dclass("gpu", [f'device.driver == "{G}"']),
    rslice("s-a", G, "pa", node="a", devices=[dev("g0", {"model": {"string": "a100"}}, {"memory": "40Gi"}),
                                               dev("g1", {"model": {"string": "h100"}}, {"memory": "80Gi"})]),
    rslice("s-b", G, "pb", node="b", devices=[dev("g0", {"model": {"string": "a100"}}, {"memory": "40Gi"})]),
]
FIRST_AVAILABLE = [{"name": "r", "firstAvailable": [
    {"name": "big", "deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 1,
     "selectors": [{"cel": {"expression": f'device.attributes["{G}"].model == "h100"'}}]},
    {"name": "small", "deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 1}]}]
ON_B = {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["b"]}]}]}
OWNER = {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "uid-p", "controller": True}
TAINTED = dev("g0", taints=[{"key": "broken", "value": "yes", "effect": "NoSchedule"}])
_deleting = claim("c", [{"name": "r", "exactly": ex()}])
_deleting["metadata"].update(deletionTimestamp="2024-01-01T00:00:00Z", finalizers=["x"])
THREE = [node("a"), node("b"), node("c"), dclass("gpu", [f'device.driver == "{G}"']),
         rslice("s-a", G, "pa", node="a", devices=[dev("g0"), dev("g1")]),
         rslice("s-b", G, "pb", node="b", devices=[dev("g0")]),
         rslice("s-c", G, "pc", node="c", devices=[dev("g0"), dev("g1"), dev("g2")])]
FA3 = [{"name": "r", "firstAvailable": [
    {"name": n, "deviceClassName": "gpu", "allocationMode": "ExactCount", "count": k}
    for n, k in (("three", 3), ("two", 2), ("one", 1))]}]
EXT = [node("a", scalar={"example.com/gpu": "2"}), node("b"), node("c"),
       dclass("gpu", [f'device.driver == "{G}"'], ext="example.com/gpu"),
       rslice("s-b", G, "pb", node="b", devices=[dev("g0")]),
       rslice("s-c", G, "pc", node="c", devices=[dev("g0"), dev("g1"), dev("g2")])]
ZONE1 = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]}]}

CASES: dict[str, list[Obj]] = {
    "no-claims": [*BASE, pod("p")],
    "not-found": [*BASE, pod("p", uses("nope"))],
    "template-pending": [*BASE, pod("p", [{"name": "x", "resourceClaimTemplateName": "t"}])],
    "template-not-owner": [*BASE, claim("gen", [{"name": "r", "exactly": ex()}]),
                           pod("p", [{"name": "x", "resourceClaimTemplateName": "t"}],
                               statuses=[{"name": "x", "resourceClaimName": "gen"}])],
    "template-owner": [*BASE, claim("gen", [{"name": "r", "exactly": ex()}], owner=OWNER),
                       pod("p", [{"name": "x", "resourceClaimTemplateName": "t"}],
                           statuses=[{"name": "x", "resourceClaimName": "gen"}])],
    "template-no-claim-needed": [*BASE, pod("p", [{"name": "x", "resourceClaimTemplateName": "t"}],
                                            statuses=[{"name": "x"}])],
    "no-class": [*BASE, claim("c", [{"name": "r", "exactly": ex("other")}]), pod("p", uses("c"))],
    "deleting": [*BASE, _deleting, pod("p", uses("c"))],
    "allocated-on-b": [*BASE, claim("c", [{"name": "r", "exactly": ex()}], allocation={
        "devices": {"results": [{"request": "r", "driver": G, "pool": "pb", "device": "g0"}]},
        "nodeSelector": ON_B}), pod("p", uses("c"))],
    "devices-taken": [*BASE, claim("other", [{"name": "r", "exactly": ex(count=2)}], allocation={
        "devices": {"results": [{"request": "r", "driver": G, "pool": "pa", "device": d} for d in ("g0", "g1")]}}),
        claim("c", [{"name": "r", "exactly": ex()}]), pod("p", uses("c"))],
    "first-available": [*BASE, claim("c", FIRST_AVAILABLE), pod("p", uses("c"))],
    "count-2": [*BASE, claim("c", [{"name": "r", "exactly": ex(count=2)}]), pod("p", uses("c"))],
    "all": [*BASE, claim("c", [{"name": "r", "exactly": ex(mode="All")}]), pod("p", uses("c"))],
    "quantity-selector": [*BASE, claim("c", [{"name": "r", "exactly": ex(
        sel=[f'device.capacity["{G}"].memory.compareTo(quantity("64Gi")) >= 0'])}]), pod("p", uses("c"))],
    "match-attribute": [*BASE, claim("c", [{"name": "r", "exactly": ex(count=2)}],
                                     constraints=[{"matchAttribute": f"{G}/model"}]), pod("p", uses("c"))],
    "distinct-attribute": [*BASE, claim("c", [{"name": "r", "exactly": ex(count=2)}],
                                        constraints=[{"distinctAttribute": f"{G}/model"}]), pod("p", uses("c"))],
    "slice-node-selector": [*BASE[:4], dclass("net", ['device.driver == "net.example.com"']),
                            rslice("net", "net.example.com", "net", node_selector=ZONE1, devices=[dev("n0")]),
                            claim("c", [{"name": "r", "exactly": ex("net")}]), pod("p", uses("c"))],
    "incomplete-pool": [*BASE[:4], rslice("s-a", G, "pa", node="a", count=2, devices=[dev("g0")]),
                        rslice("s-b", G, "pb", node="b", devices=[dev("g0")]),
                        claim("c", [{"name": "r", "exactly": ex()}]), pod("p", uses("c"))],
    "invalid-pool": [*BASE[:4], rslice("s-a", G, "pa", node="a", count=2, devices=[dev("g0")]),
                     rslice("s-a2", G, "pa", node="a", count=2, devices=[dev("g0")]),
                     claim("c", [{"name": "r", "exactly": ex()}]), pod("p", uses("c"))],
    "two-claims": [*BASE, claim("c", [{"name": "r", "exactly": ex()}]), claim("d", FIRST_AVAILABLE),
                   pod("p", uses("c", "d"))],
    "tainted": [*BASE[:4], rslice("s-a", G, "pa", node="a", devices=[TAINTED]),
                rslice("s-b", G, "pb", node="b", devices=[dev("g0")]),
                claim("c", [{"name": "r", "exactly": ex()}]), pod("p", uses("c"))],
    "tolerated": [*BASE[:4], rslice("s-a", G, "pa", node="a", devices=[TAINTED]),
                  claim("c", [{"name": "r", "exactly": ex(tolerations=[{"key": "broken", "operator": "Exists"}])}]),
                  pod("p", uses("c"))],
    "semver": [*BASE[:4], rslice("s-a", G, "pa", node="a", devices=[dev("g0", {"drv": {"version": "1.2.3"}})]),
               rslice("s-b", G, "pb", node="b", devices=[dev("g0", {"drv": {"version": "1.1.0"}})]),
               claim("c", [{"name": "r", "exactly": ex(
                   sel=[f'device.attributes["{G}"].drv.isGreaterThan(semver("1.2.0"))'])}]), pod("p", uses("c"))],
    "first-available-3": [*THREE, claim("c", FA3), pod("p", uses("c"))],
    "extended-2": [*EXT, pod("p", containers=[ctr("m", 2)])],
    "extended-inits": [*EXT, pod("p", containers=[ctr("m", 1)], inits=[ctr("i1", 2), ctr("i2", 3)])],
    "extended-implicit": [*EXT, pod("p", containers=[ctr("m", 1, res="deviceclass.resource.kubernetes.io/gpu")])],
    "extended-and-claim": [*EXT, claim("uc", [{"name": "r", "exactly": ex()}]),
                           pod("p", uses("uc"), containers=[ctr("m", 1)])],
}

def _on(nodes: str, reasons: list[str]) -> dict[str, list[str]]:
    return {n: list(reasons) for n in nodes}


# Upstream's verdicts (Go parity oracle, k8s.io/kubernetes v1.37.2) for CASES:
# feasible nodes, per-node filter reasons, DynamicResources' normalized scores, FailedScheduling message.
ORACLE: dict[str, Obj] = {
    "no-claims": {
        "feasible": ["a", "b", "c"], "dra": {"a": 0, "b": 0, "c": 0},
        "filtered": {},
        "message": None,
    },
    "not-found": {
        "feasible": [], "dra": None,
        "filtered": _on("abc", ["could not find ResourceClaim \"default/nope\""]),
        "message": ("0/3 nodes are available: could not find ResourceClaim \"default/nope\". preemption: 0/3 "
                    "nodes are available: 3 Preemption is not helpful for scheduling."),
    },
    "template-pending": {
        "feasible": [], "dra": None,
        "filtered": _on("abc", ["pod \"default/p\": ResourceClaim not created yet"]),
        "message": ("0/3 nodes are available: pod \"default/p\": ResourceClaim not created yet. preemption: 0/3 "
                    "nodes are available: 3 Preemption is not helpful for scheduling."),
    },
    "template-not-owner": {
        "feasible": [], "dra": None,
        "filtered": _on("abc", ["ResourceClaim default/gen was not created for Pod default/p (Pod is not owner)"]),
        "message": ("0/3 nodes are available: ResourceClaim default/gen was not created for Pod default/p (Pod "
                    "is not owner). preemption: 0/3 nodes are available: 3 Preemption is not helpful for "
                    "scheduling."),
    },
    "template-owner": {
        "feasible": ["a", "b"], "dra": {"a": 0, "b": 0},
        "filtered": _on("c", ["cannot allocate all claims"]),
        "message": None,
    },
    "template-no-claim-needed": {
        "feasible": ["a", "b", "c"], "dra": {"a": 0, "b": 0, "c": 0},
        "filtered": {},
        "message": None,
    },
    "no-class": {
        "feasible": [], "dra": None,
        "filtered": _on("abc", ["request r: device class other does not exist"]),
        "message": ("0/3 nodes are available: request r: device class other does not exist. preemption: 0/3 "
                    "nodes are available: 3 Preemption is not helpful for scheduling."),
    },
    "deleting": {
        "feasible": [], "dra": None,
        "filtered": _on("abc", ["resourceclaim \"c\" is being deleted"]),
        "message": ("0/3 nodes are available: resourceclaim \"c\" is being deleted. preemption: 0/3 nodes are "
                    "available: 3 Preemption is not helpful for scheduling."),
    },
    "allocated-on-b": {
        "feasible": ["b"], "dra": {"b": 0},
        "filtered": _on("ac", ["resourceclaim not available on the node"]),
        "message": None,
    },
    "devices-taken": {
        "feasible": ["b"], "dra": {"b": 0},
        "filtered": _on("ac", ["cannot allocate all claims"]),
        "message": None,
    },
    "first-available": {
        "feasible": ["a", "b"], "dra": {"a": 100, "b": 87},
        "filtered": _on("c", ["cannot allocate all claims"]),
        "message": None,
    },
    "count-2": {
        "feasible": ["a"], "dra": {"a": 0},
        "filtered": _on("bc", ["cannot allocate all claims"]),
        "message": None,
    },
    "all": {
        "feasible": ["a", "b"], "dra": {"a": 0, "b": 0},
        "filtered": _on("c", ["cannot allocate all claims"]),
        "message": None,
    },
    "quantity-selector": {
        "feasible": ["a"], "dra": {"a": 0},
        "filtered": _on("bc", ["cannot allocate all claims"]),
        "message": None,
    },
    "match-attribute": {
        "feasible": [], "dra": None,
        "filtered": _on("abc", ["cannot allocate all claims"]),
        "message": ("0/3 nodes are available: 3 cannot allocate all claims. preemption: 0/3 nodes are "
                    "available: 3 Preemption is not helpful for scheduling."),
    },
    "distinct-attribute": {
        "feasible": ["a"], "dra": {"a": 0},
        "filtered": _on("bc", ["cannot allocate all claims"]),
        "message": None,
    },
    "slice-node-selector": {
        "feasible": ["a", "c"], "dra": {"a": 0, "c": 0},
        "filtered": _on("b", ["cannot allocate all claims"]),
        "message": None,
    },
    "incomplete-pool": {
        "feasible": ["b"], "dra": {"b": 0},
        "filtered": _on("ac", ["cannot allocate all claims"]),
        "message": None,
    },
    "invalid-pool": {
        "feasible": [], "dra": None,
        "filtered": {"a": ["invalid resource pools were encountered"], **_on("bc", ["cannot allocate all claims"])},
        "message": ("0/3 nodes are available: 1 invalid resource pools were encountered, 2 cannot allocate all "
                    "claims. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."),
    },
    "two-claims": {
        "feasible": ["a"], "dra": {"a": 100},
        "filtered": _on("bc", ["cannot allocate all claims"]),
        "message": None,
    },
    "tainted": {
        "feasible": ["b"], "dra": {"b": 0},
        "filtered": _on("ac", ["cannot allocate all claims"]),
        "message": None,
    },
    "tolerated": {
        "feasible": ["a"], "dra": {"a": 0},
        "filtered": _on("bc", ["cannot allocate all claims"]),
        "message": None,
    },
    "semver": {
        "feasible": ["a"], "dra": {"a": 0},
        "filtered": _on("bc", ["cannot allocate all claims"]),
        "message": None,
    },
    "first-available-3": {
        "feasible": ["a", "b", "c"], "dra": {"a": 87, "b": 75, "c": 100},
        "filtered": {},
        "message": None,
    },
    "extended-2": {
        "feasible": ["a", "c"], "dra": {"a": 0, "c": 0},
        "filtered": _on("b", ["cannot allocate all claims"]),
        "message": None,
    },
    "extended-inits": {
        "feasible": ["c"], "dra": {"c": 0},
        "filtered": {"a": ["Insufficient example.com/gpu"], "b": ["cannot allocate all claims"]},
        "message": None,
    },
    "extended-implicit": {
        "feasible": ["b", "c"], "dra": {"b": 0, "c": 0},
        "filtered": _on("a", ["cannot allocate all claims"]),
        "message": None,
    },
    "extended-and-claim": {
        "feasible": ["c"], "dra": {"c": 0},
        "filtered": _on("ab", ["cannot allocate all claims"]),
        "message": None,
    },
}


# -- running the default profile the way explain does --------------------------------------------
def _snapshot(objects: list[Obj]) -> Snapshot:
    return Snapshot.from_object_list(objects)


def schedule(objects: list[Obj], reserve: bool = True) -> list[Any]:
    """Every pending Pod in queue order through the default profile (explain's code path)."""
    snap = _snapshot(objects)
    fw = build_framework(ProfileConfig(scheduler_name="default-scheduler"), registry=registry)
    algo = Algorithm(rng=MinChoice())
    out = []
    for p in (o for o in objects if o["kind"] == "Pod" and not o["spec"].get("nodeName")):
        pi = PodInfo(p)
        res = algo.schedule(fw, snap, pi, explain=True)
        out.append(res)
        if res.selected is not None and reserve:
            assert res.state is not None
            assert fw.run_reserve(res.state, pi, res.selected).is_success()
            snap.assume(pi, res.selected)
    return out


# -- parity with upstream ---------------------------------------------------------------------------
@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_upstream_oracle(case: str) -> None:
    res = schedule(copy.deepcopy(CASES[case]))[0]
    want = ORACLE[case]
    assert sorted(res.feasible) == want["feasible"]
    assert res.filtered == want["filtered"]
    assert res.scores.get("DynamicResources") == want["dra"]
    assert res.message == want["message"]


def test_pod_without_claims_skips_filter_but_scores_zero() -> None:
    res = schedule(copy.deepcopy(CASES["no-claims"]))[0]
    assert res.state is not None
    assert "DynamicResources" in res.state.skip_filter
    assert "DynamicResources" not in res.skipped
    assert res.scores["DynamicResources"] == {"a": 0, "b": 0, "c": 0}
    assert res.weights["DynamicResources"] == 2


def test_first_available_score_is_eight_minus_index_before_normalization() -> None:
    objs = copy.deepcopy(CASES["first-available-3"])
    snap = _snapshot(objs)
    pl = DynamicResources()
    state = CycleState(snap)
    pi = PodInfo(objs[-1])
    _, st = pl.pre_filter(state, pi, snap.node_info_list)
    assert st.is_success()
    raw = {}
    for ni in snap.node_info_list:
        assert pl.filter(state, pi, ni).is_success()
        raw[ni.name], st = pl.score(state, pi, ni)
        assert st.is_success()
    # a has 2 devices -> "two" (index 1), b has 1 -> "one" (index 2), c has 3 -> "three" (index 0)
    assert raw == {"a": 7, "b": 6, "c": 8}
    pl.normalize_score(state, pi, raw)
    assert raw == {"a": 87, "b": 75, "c": 100}


# -- Reserve / in-flight allocations -----------------------------------------------------------------
def test_reserve_records_allocation_and_flags_api_write() -> None:
    res = schedule(copy.deepcopy(CASES["first-available"]))[0]
    assert res.selected == "a"
    assert res.state is not None
    assert res.state.data[NEEDS_API_ALLOCATION_KEY] is True
    alloc = res.state.data[ALLOCATIONS_KEY]["default/c"]
    assert alloc["devices"]["results"] == [{"request": "r/big", "driver": G, "pool": "pa", "device": "g1"}]
    assert alloc["nodeSelector"] == {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["a"]}]}]}


def test_allocated_and_reserved_claim_needs_no_api_write() -> None:
    objs = [*BASE, claim("c", [{"name": "r", "exactly": ex()}], allocation={
        "devices": {"results": [{"request": "r", "driver": G, "pool": "pb", "device": "g0"}]},
        "nodeSelector": ON_B}, reserved=[{"resource": "pods", "name": "p", "uid": "uid-p"}]), pod("p", uses("c"))]
    res = schedule(objs)[0]
    assert res.selected == "b"
    assert res.state is not None
    assert NEEDS_API_ALLOCATION_KEY not in res.state.data
    objs[-2]["status"]["reservedFor"] = []
    res = schedule(objs)[0]
    assert res.state is not None and res.state.data[NEEDS_API_ALLOCATION_KEY] is True


def test_in_flight_devices_are_taken_and_shared_claim_waits() -> None:
    objs = [*BASE, claim("c1", [{"name": "r", "exactly": ex(count=2)}]), claim("c2", [{"name": "r", "exactly": ex()}]),
            pod("p1", uses("c1")), pod("p2", uses("c2"), ts="2024-01-01T00:00:01Z"),
            pod("p3", uses("c1"), ts="2024-01-01T00:00:02Z")]
    r1, r2, r3 = schedule(objs)
    assert r1.selected == "a"  # the only node with two devices
    assert r2.feasible == ["b"]  # a's devices are in flight for c1
    assert r2.filtered["a"] == ["cannot allocate all claims"]
    assert r3.selected is None
    assert r3.filtered["a"] == ["resource claim default/c1 is in the process of being allocated"]


def test_unreserve_releases_in_flight_allocation() -> None:
    objs = [*BASE, claim("c", [{"name": "r", "exactly": ex(count=2)}]), pod("p", uses("c"))]
    snap = _snapshot(objs)
    pl = DynamicResources()
    pi = PodInfo(objs[-1])
    for _ in range(2):
        state = CycleState(snap)
        _, st = pl.pre_filter(state, pi, snap.node_info_list)
        assert st.is_success()
        assert pl.filter(state, pi, snap.get("a")).is_success()
        assert pl.reserve(state, pi, "a").is_success()
        assert pl.in_flight_claims() == ["default/c"]
        pl.unreserve(state, pi, "a")
        assert pl.in_flight_claims() == []
        assert NEEDS_API_ALLOCATION_KEY not in state.data


def test_in_flight_entry_dropped_once_claim_status_shows_allocation() -> None:
    objs = [*BASE, claim("c", [{"name": "r", "exactly": ex()}]), pod("p", uses("c"))]
    snap = _snapshot(objs)
    pl = DynamicResources()
    pi = PodInfo(objs[-1])
    state = CycleState(snap)
    pl.pre_filter(state, pi, snap.node_info_list)
    assert pl.filter(state, pi, snap.get("b")).is_success()
    assert pl.reserve(state, pi, "b").is_success()
    written = copy.deepcopy(snap.objects.get("ResourceClaim", "default/c"))
    assert written is not None
    written["status"] = {"allocation": state.data[ALLOCATIONS_KEY]["default/c"],
                         "reservedFor": [{"resource": "pods", "name": "p", "uid": "uid-p"}]}
    snap.objects.upsert("ResourceClaim", written)
    state2 = CycleState(snap)
    _, st = pl.pre_filter(state2, pi, snap.node_info_list)
    assert st.is_success()
    assert pl.in_flight_claims() == []
    assert pl.filter(state2, pi, snap.get("a")).reasons == ["resourceclaim not available on the node"]
    assert pl.filter(state2, pi, snap.get("b")).is_success()


# -- PostFilter ---------------------------------------------------------------------------------
def test_post_filter_names_the_claim_upstream_would_deallocate() -> None:
    on_c = {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gone"]}]}]}
    objs = [*BASE, claim("c", [{"name": "r", "exactly": ex()}], allocation={
        "devices": {"results": [{"request": "r", "driver": G, "pool": "px", "device": "g0"}]}, "nodeSelector": on_c}),
        pod("p", uses("c"))]
    res = schedule(objs)[0]
    assert res.selected is None
    assert res.state is not None
    assert res.state.data[NEEDS_API_DEALLOCATION_KEY] == "default/c"
    assert res.message is not None
    assert res.message.startswith("0/3 nodes are available: 3 resourceclaim not available on the node. "
                                  "deallocation of ResourceClaim completed")


# -- malformed input ---------------------------------------------------------------------------------
def test_malformed_resource_claims_field_rejects_only_that_pod() -> None:
    bad = pod("p")
    bad["spec"]["resourceClaims"] = {"name": "x"}
    res = schedule([*BASE, bad, pod("q", ts="2024-01-01T00:00:01Z")])
    assert res[0].selected is None
    assert res[0].filtered["a"] == ["invalid value {'name': 'x'} for spec.resourceClaims: expected a list of "
                                    "PodResourceClaims"]
    assert res[1].selected is not None


def test_malformed_slice_is_ignored() -> None:
    broken = rslice("s-x", G, "px", node="c", devices=[dev("g0")])
    broken["spec"]["pool"] = "not-an-object"
    res = schedule([*BASE, broken, claim("c", [{"name": "r", "exactly": ex()}]), pod("p", uses("c"))])[0]
    assert sorted(res.feasible) == ["a", "b"]
    assert res.filtered["c"] == ["cannot allocate all claims"]


def test_cel_runtime_error_is_a_scheduling_error_with_upstream_message() -> None:
    objs = [*BASE[:4], rslice("s-a", G, "pa", node="a", devices=[dev("g0", {"model": {"string": "a100"}})]),
            claim("c", [{"name": "r", "exactly": ex(sel=[f'device.attributes["{G}"].missing == "x"'])}]),
            pod("p", uses("c"))]
    with pytest.raises(SchedulingError) as ei:
        schedule(objs)
    # upstream: running "DynamicResources" filter plugin: claim default/c: selector #0 on device
    # gpu.example.com/pb/g0: CEL runtime error: no such key: missing. consider using ...
    assert ("claim default/c: selector #0 on device gpu.example.com/pa/g0: CEL runtime error: no such key: missing. "
            "consider using CEL optional chaining (.? followed by orValue()) or guarding the check with has() for "
            "optional fields") in str(ei.value)


def test_cel_compile_error_names_the_class_and_position() -> None:
    objs = [*BASE[:3], dclass("gpu", ['device.driver = "x"']),
            rslice("s-a", G, "pa", node="a", devices=[dev("g0")]), claim("c", [{"name": "r", "exactly": ex()}]),
            pod("p", uses("c"))]
    with pytest.raises(SchedulingError) as ei:
        schedule(objs)
    assert "class gpu: selector #0: CEL compile error: compilation failed: ERROR: <input>:1:15: Syntax error" in str(
        ei.value)


def test_filter_timeout_is_an_error() -> None:
    a = Allocator(set(), {"gpu": dclass("gpu")}, [rslice("s-a", G, "pa", node="a", devices=[dev("g0")])])
    with pytest.raises(AllocationTimeout):
        a.allocate(node("a"), [claim("c", [{"name": "r", "exactly": ex()}])], deadline=0.0)


def test_allocator_picks_combinations_in_pool_slice_device_order() -> None:
    slices = [rslice("z", G, "p2", node="a", devices=[dev("d0")]),
              rslice("b", G, "p1", node="a", count=2, devices=[dev("d1"), dev("d2")]),
              rslice("a", G, "p1", node="a", count=2, devices=[dev("d3")])]
    a = Allocator({(G, "p1", "d3")}, {"gpu": dclass("gpu")}, slices)
    result = a.allocate(node("a"), [claim("c", [{"name": "r", "exactly": ex(count=3)}])])
    assert result is not None
    assert [r["device"] for r in result[0]["devices"]["results"]] == ["d1", "d2", "d0"]


def test_result_size_limit_falls_back_to_smaller_subrequest() -> None:
    devices = [dev(f"d{i}") for i in range(40)]
    a = Allocator(set(), {"gpu": dclass("gpu")}, [rslice("s", G, "p", node="a", devices=devices)])
    fa = [{"name": "r", "firstAvailable": [
        {"name": "all", "deviceClassName": "gpu", "allocationMode": "All"},
        {"name": "four", "deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 4}]}]
    result = a.allocate(node("a"), [claim("c", fa)])
    assert result is not None
    assert [r["request"] for r in result[0]["devices"]["results"]] == ["r/four"] * 4


# -- args -----------------------------------------------------------------------------------------
def test_args() -> None:
    pl = DynamicResources.create({"filterTimeout": "1m30s", "bindingTimeout": "10m"}, plain_handle())
    assert (pl.filter_timeout, pl.binding_timeout) == (90.0, 600.0)
    assert DynamicResources.create({}, plain_handle()).filter_timeout == 10.0
    with pytest.raises(ConfigError, match="filterTimeout: Invalid value: '-1s': must be zero or positive"):
        DynamicResources.create({"filterTimeout": "-1s"}, plain_handle())
    with pytest.raises(ConfigError, match=r"bindingTimeout.*must be at least 1 second"):
        DynamicResources.create({"bindingTimeout": "500ms"}, plain_handle())
    with pytest.raises(ConfigError, match="invalid duration"):
        DynamicResources.create({"filterTimeout": "ten"}, plain_handle())
    with pytest.raises(ConfigError, match="unknown field"):
        DynamicResources.create({"timeout": "1s"}, plain_handle())


# -- CEL environment ----------------------------------------------------------------------------------
DEVICE = {"name": "g0", "attributes": {"model": {"string": "a100"}, f"{G}/idx": {"int": 3},
                                       "other.io/ver": {"version": "1.2.3"}, "ok": {"bool": True}},
          "capacity": {"memory": {"value": "40Gi"}}}


# What Kubernetes' CEL environment adds to plain CEL (checked against upstream by
# test_cel_selectors_match_upstream below)
KUBERNETES_ENVIRONMENT = [
    # lists built by + compare element by element (kube-scheduler bound these; py-scheduler said false)
    ('[1] + [2] == [1, 2]', True), ('["a"] + ["b"] == ["a", "b"]', True), ('[1] + [2] == [1, 3]', False),
    ('{"k": [1] + [2]} == {"k": [1, 2]}', True), ('[1] + [2] != [1, 2]', False),
    # lowerAscii / upperAscii change ASCII letters only
    ('"é".upperAscii() == "é"', True), ('"\u212a".lowerAscii() == "\u212a"', True),
    ('"ÀBc".lowerAscii() == "Àbc"', True), ('"ßx".upperAscii() == "ßX"', True),
    # ordering across int, uint and double (cel.CrossTypeNumericComparisons in the base environment)
    ('7 > 6.5', True), (f'device.attributes["{G}"].idx > 2.5', True), ('1u < 2.5', True), ('2 >= 2u', True),
    ('3 <= 2.9', False), ('"a" < "b"', True), ('-1 < 1u', True), ('2.5 > 2u', True),
    # beyond 2^53 an int meets a double as a double (cel-go's compareDoubleInt)
    ('9007199254740993 > 9007199254740992.0', False), ('9007199254740993 >= 9007199254740992.0', True),
    ('"a"' + '.replace("a", "aaaa")' * 9 + '.size() == 262144', True),
    # semver with normalize (apiserver semverlib), blang's limits
    ('semver("v1.2.3", true).major() == 1', True), ('isSemver("v1", true)', True), ('isSemver("v1")', False),
    ('isSemver("18446744073709551616.0.0")', False), ('semver("18446744073709551615.0.0").major() == -1', True),
    ('semver("1.2.3-rc.1+b.2").isLessThan(semver("1.2.3"))', True),
    # the strings extension, version 2 (cel-go ext/strings.go)
    ('"abc".indexOf("c", 1) == 2', True), ('"abc".indexOf("a", 1) == -1', True), ('"abc".indexOf("", 9) == 3', True),
    ('"abcabc".lastIndexOf("bc") == 4', True), ('"abcabc".lastIndexOf("bc", 3) == 1', True),
    ('"abc".lastIndexOf("") == 3', True), ('"a".lastIndexOf("abc") == -1', True),
    ('"abc".substring(1) == "bc"', True), ('"abc".substring(1, 2) == "b"', True), ('"añb".charAt(1) == "ñ"', True),
    ('"abc".charAt(3) == ""', True), ('"aaa".replace("a", "b") == "bbb"', True),
    ('"aaa".replace("a", "b", 2) == "bba"', True),
    ('"abc".split("").size() == 3', True), ('"a,b,c".split(",", 2) == ["a", "b,c"]', True),
    ('"abc".split("", 2) == ["a", "bc"]', True), ('"a,b".split(",", 0).size() == 0', True),
    ('"a,b".split(",", -1) == ["a", "b"]', True),
    ('"\\u001ca ".trim() == "\\u001ca"', True), ('"\\u00a0a\\u2003".trim() == "a"', True),
    # parseQuantityString lets either part of the number be empty: each of these is a quantity of 0
    ('quantity(".") == quantity("0") && quantity("-") == quantity("0") && quantity("+.") == quantity("0")', True),
    ('quantity("m").compareTo(quantity("0")) == 0 && quantity("Ki") == quantity(".e3")', True),
    ('isQuantity("-m") && isQuantity("E") && !isQuantity("..") && !isQuantity("")', True),
    ('quantity("-.5").compareTo(quantity("0")) < 0 && quantity("1.G") == quantity("1G")', True),
    # cel-go's common/types, where celpy answered otherwise (a differential fuzz against the oracle)
    (f'double(device.attributes["{G}"].idx) * 1.0 == device.attributes["{G}"].idx', True),
    ('type(1.0 + 2.0) == double && type(1) == int && type("a") == string && type(1u) != int', True),
    ('-1.0 / 0.0 < 0.0 && string(1.0 / 0.0) == "+Inf" && string(0.0 / 0.0) == "NaN"', True),
    ('-7 / 2 == -3 && -7 % 2 == -1 && 7u / 2u == 3u', True),
    ('string(true) == "true" && string(100.0) == "100" && string(1e6) == "1e+06" && string(-0.0) == "-0"', True),
    ('string(0.0001) == "0.0001" && string(1.5e-05) == "1.5e-05" && string(123456.7) == "123456.7"', True),
    ('double("0x1p-2") == 0.25 && double("-Inf") < 0.0 && double("1e3") == 1000.0', True),
    (f'bool(device.attributes["{G}"].model.replace("a100", "T"))', True),
    ('quantity("1") != quantity("2").sub(1) && !(quantity("1") in [quantity("1").add(0)])', True),
    ('(false ? [1][5] : 2) == 2 && [1, 2].exists(x, x == 2 || [1][5] == 1)', True),
    ('[1, 2, 3].map(x, x > 1, x * 2) == [4, 6] && [[1, 2]].map(l, l.map(x, x > 1, x)) == [[2]]', True),
    # isInteger / asInteger read how apimachinery holds the quantity (int64Amount or inf.Dec)
    ('!quantity("2000m").isInteger() && !quantity("3Pi").isInteger() && !quantity("1.5Gi").isInteger()', True),
    ('quantity("2k").isInteger() && quantity("40Gi").isInteger() && quantity("1k").add(1).asInteger() == 1001', True),
    ('quantity("8E").sub(-9223372036854775807 - 1).isInteger() && !quantity("5").add(quantity("1500m")).isInteger()',
     True),
]


@pytest.mark.parametrize(("expr", "want"), [
    (f'device.attributes["{G}"].model == "a100"', True),
    (f'device.attributes["{G}"].idx > 2 && device.attributes["{G}"].ok', True),
    (f'device.driver == "{G}"', True),
    (f'device.capacity["{G}"].memory.compareTo(quantity("40Gi")) >= 0', True),
    (f'device.capacity["{G}"].memory.isGreaterThan(quantity("40Gi"))', False),
    (f'device.capacity["{G}"].memory == quantity("40960Mi")', True),
    (f'device.capacity["{G}"].memory.add(1).isGreaterThan(quantity("40Gi"))', True),
    ('device.attributes["other.io"].ver.isGreaterThan(semver("1.2.0"))', True),
    ('device.attributes["other.io"].ver.major() == 1', True),
    ('has(device.attributes["x.io"].model)', False),
    ('"x.io" in device.attributes', False),
    (f'device.attributes["{G}"].model == 1', False),
    (f'device.attributes["{G}"].idx == 3.0', True),
    (f'device.attributes["{G}"].model in ["a100", "h100"]', True),
    (f'device.attributes["{G}"].model.lowerAscii().startsWith("a1")', True),
    ("device.allowMultipleAllocations", False),
    (f'device.attributes["{G}"].model.matches("^a[0-9]+$")', True),
    (f'matches(device.attributes["{G}"].model, "h1")', False),
    (f'device.attributes["{G}"].model.matches(r"\\d")', True),
    (f'"(a100)".matches("^\\\\(" + device.attributes["{G}"].model + "\\\\)$")', True),
    (f'"a100".matches(device.attributes["{G}"].model + "(") || true', True),
    *KUBERNETES_ENVIRONMENT,
])
def test_cel_environment(expr: str, want: bool) -> None:
    assert cel.device_matches(cel.compile_selector(expr), cel.device_variable(G, DEVICE)) is want


FUNCTION_ERRORS = [
    # functions' own errors in cel-go's / blang's / resource's words, not celpy's "return error for overflow"
    ('"abc".substring(2, 1) == ""', cel.CELRuntimeError, "invalid substring range. start: 2, end: 1"),
    ('"abc".charAt(4) == ""', cel.CELRuntimeError, "index out of range: 4"),
    ('"abc".indexOf("a", -1) == 0', cel.CELRuntimeError, "index out of range: -1"),
    ('1 < double("NaN")', cel.CELRuntimeError, "NaN values cannot be ordered"),
    ('double("NaN") >= 1u', cel.CELRuntimeError, "NaN values cannot be ordered"),
    ('1.0 < double("NaN")', cel.CELRuntimeError, "NaN values cannot be ordered"),
    # a replace whose result alone costs more than upstream's runtime limit (one unit a character)
    ('"a"' + '.replace("a", "aaaa")' * 12 + ' == ""', cel.CELRuntimeError,
     "operation cancelled: actual cost limit exceeded"),
    ('semver("v1.2.3").major() == 1', cel.CELRuntimeError, 'Invalid character(s) found in major number "v1"'),
    ('semver("1.02.3").major() == 1', cel.CELRuntimeError, 'Minor number must not contain leading zeroes "02"'),
    ('semver("1.2").major() == 1', cel.CELRuntimeError, "No Major.Minor.Patch elements found"),
    ('quantity("1KK") == quantity("1")', cel.CELRuntimeError, "unable to parse quantity's suffix"),
    ('quantity("1Ei5") == quantity("1")', cel.CELRuntimeError, "unable to parse quantity's suffix"),
    ('quantity("1e") == quantity("1")', cel.CELRuntimeError, "unable to parse quantity's suffix"),
    ('quantity("1 ") == quantity("1")', cel.CELRuntimeError, "quantities must match the regular expression"),
    ('semver("1..3").major() == 1', cel.CELRuntimeError, 'strconv.ParseUint: parsing "": invalid syntax'),
    ('semver("1.2.3-01").major() == 1', cel.CELRuntimeError,
     'Numeric PreRelease version must not contain leading zeroes "01"'),
    ('semver("1.2.3-").major() == 1', cel.CELRuntimeError, "Prerelease is empty"),
    ('semver("1.2.3+").major() == 1', cel.CELRuntimeError, "Build meta data is empty"),
    ('semver("1.2.3-a$").major() == 1', cel.CELRuntimeError, 'Invalid character(s) found in prerelease "a$"'),
    ('semver("1.2.3+a_b").major() == 1', cel.CELRuntimeError, 'Invalid character(s) found in build meta data "a_b"'),
    ('semver("1.2-a", true).major() == 1', cel.CELRuntimeError,
     "short version cannot contain PreRelease/Build meta data"),
    ('quantity("1.5.5") == quantity("1")', cel.CELRuntimeError,
     "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"),
    ('[1, 2, 3][-1] == 3', cel.CELRuntimeError, "index out of bounds: -1"),
    ('{"a": 1}["b"] == 1', cel.CELRuntimeError, "no such key: b. consider using CEL optional chaining"),
    ('1 + [1][5] == 2', cel.CELRuntimeError, "index out of bounds: 5"),
    ('[1, 2].all(x, [1][5] == 1)', cel.CELRuntimeError, "index out of bounds: 5"),
    ('([1][5] == 1 ? 1 : 2) == 1', cel.CELRuntimeError, "index out of bounds: 5"),
    ('9223372036854775807 + 1 == 0', cel.CELRuntimeError, "integer overflow"),
    ('(-9223372036854775807 - 1) % -1 == 0', cel.CELRuntimeError, "integer overflow"),
    ('0u - 1u == 0u', cel.CELRuntimeError, "unsigned integer overflow"),
    ('1 / 0 == 0', cel.CELRuntimeError, "division by zero"),
    ('1 % 0 == 0', cel.CELRuntimeError, "modulus by zero"),
    (f'int(device.attributes["{G}"].model.replace("a100", " 1")) == 1', cel.CELRuntimeError,
     "type conversion error from 'string' to 'int'"),
    (f'double(device.attributes["{G}"].model.replace("a100", "1e400")) > 0.0', cel.CELRuntimeError,
     "type conversion error from 'string' to 'double'"),
    (f'uint(double(device.attributes["{G}"].idx) * -0.01) == 0u', cel.CELRuntimeError, "unsigned integer overflow"),
    ('quantity("1500m").asInteger() == 1', cel.CELRuntimeError, "cannot convert value to integer"),
    ('quantity("1Pi").asInteger() == 1', cel.CELRuntimeError, "cannot convert value to integer"),
    ('dyn(quantity("1")) == dyn(1)', cel.CELRuntimeError, "no such overload"),
    ('dyn([true]).join(",") == ""', cel.CELRuntimeError, "no such overload: join(list, string)"),
    ('dyn([1]).join() == ""', cel.CELRuntimeError, "no such overload: join(list)"),
    # && and || with an error on each side report the first (cel-go's evalAnd / evalOr)
    (f'device.attributes["{G}"].a == 1 && device.attributes["{G}"].b == 1', cel.CELRuntimeError, "no such key: a."),
    (f'device.attributes["{G}"].a == 1 || device.attributes["{G}"].b == 1', cel.CELRuntimeError, "no such key: a."),
    (f'device.attributes["{G}"].a == 1 && (false || device.attributes["{G}"].b == 1)', cel.CELRuntimeError,
     "no such key: a."),
]


@pytest.mark.parametrize(("expr", "err", "msg"), [
    ('device.attributes["x.io"].model == "a"', cel.CELRuntimeError, "no such key: model. consider using"),
    (f'device.attributes["{G}"].model', cel.CELRuntimeError, "could not be converted to bool"),
    ("foo == 1", cel.CELCompileError, "undeclared reference to 'foo'"),
    ("1 +", cel.CELCompileError, "compilation failed: ERROR: <input>:1:3: Syntax error"),
    (f'device.attributes["{G}"].?model.orValue("") == ""', cel.CELCompileError, "not supported"),
    # a literal pattern fails when cel-go plans the program (MatchesRegexOptimization), a computed one when it runs
    (f'device.attributes["{G}"].model.matches("(")', cel.CELCompileError,
     'compilation failed: ERROR: <input>:1:52: invalid matches argument\n'
     f' | device.attributes["{G}"].model.matches("(")\n'
     ' | ...................................................^'),
    (f'matches(device.attributes["{G}"].model, "[a")', cel.CELCompileError,
     "program instantiation failed: error parsing regexp: missing closing ]: `[a`"),
    (f'"x".matches(device.attributes["{G}"].model + "**")', cel.CELRuntimeError,
     "error parsing regexp: invalid nested repetition operator: `**`"),
    *FUNCTION_ERRORS,
])
def test_cel_errors(expr: str, err: type[Exception], msg: str) -> None:
    with pytest.raises(err, match=re.escape(msg)):
        cel.device_matches(cel.compile_selector(expr), cel.device_variable(G, DEVICE))


# Go's regexp.Compile(pattern).Error() for each, printed by go1.25's regexp package (RE2 syntax)
@pytest.mark.parametrize(("pattern", "go_error"), [
    ("(", "error parsing regexp: missing closing ): `(`"),
    ("[a", "error parsing regexp: missing closing ]: `[a`"),
    ("a**", "error parsing regexp: invalid nested repetition operator: `**`"),
    ("\\", "error parsing regexp: trailing backslash at end of expression: ``"),
    ("x{2,1}", "error parsing regexp: invalid repeat count: `{2,1}`"),
    ("a{1001}", "error parsing regexp: invalid repeat count: `{1001}`"),
    ("(?P<n", "error parsing regexp: invalid named capture: `(?P<n`"),
    ("a)", "error parsing regexp: unexpected ): `a)`"),
    ("\\8", "error parsing regexp: invalid escape sequence: `\\8`"),
    ("[z-a]", "error parsing regexp: invalid character class range: `z-a`"),
    ("gpu.example.com[", "error parsing regexp: missing closing ]: `[`"),
    ("a{2}{3}", "error parsing regexp: invalid nested repetition operator: `{2}{3}`"),
    ("*a", "error parsing regexp: missing argument to repetition operator: `*`"),
    ("(?z)", "error parsing regexp: invalid or unsupported Perl syntax: `(?z`"),
    ("(?i)abc", None), ("\\pN", None), ("(?<n>a)", None),
])
def test_regexp_errors_in_gos_words(pattern: str, go_error: str | None) -> None:
    assert cel.regexp_error(pattern) == go_error


# What k8s.io/dynamic-resource-allocation@v0.37.2's CompileCELExpression / DeviceMatches (cel-go v0.29.2)
# answer for a device of driver gpu.example.com, recorded from a Go program built against them.
_GO_MATCHES = [
    ('device.driver.matches("(")', "compilation failed: ERROR: <input>:1:23: invalid matches argument\n"
     ' | device.driver.matches("(")\n | ......................^'),
    ('matches(device.driver, "(")', "program instantiation failed: error parsing regexp: missing closing ): `(`"),
    ('matches("(", device.driver)', "compilation failed: ERROR: <input>:1:9: invalid matches argument\n"
     ' | matches("(", device.driver)\n | ........^'),
    ('matches("abc", "(")', "program instantiation failed: error parsing regexp: missing closing ): `(`"),
    ('device.driver.matches("(") && device.driver.matches(\n  "[a")',
     "compilation failed: ERROR: <input>:1:23: invalid matches argument\n"
     ' | device.driver.matches("(") && device.driver.matches(\n | ......................^\n'
     'ERROR: <input>:2:3: invalid matches argument\n |   "[a")\n | ..^'),
    ("'hello'.matches('x++')", "compilation failed: ERROR: <input>:1:17: invalid matches argument\n"
     " | 'hello'.matches('x++')\n | ................^"),
    ('device.driver.matches("\\\\C")', "compilation failed: ERROR: <input>:1:23: invalid matches argument\n"
     ' | device.driver.matches("\\\\C")\n | ......................^'),
    ('device.driver.matches("' + "(" * 1000 + "a" + ")" * 1000 + '")', "compilation failed: ERROR: <input>:1:23: "
     'invalid matches argument\n | device.driver.matches("' + "(" * 1000 + "a" + ")" * 1000 + '")\n | '
     + "." * 22 + "^"),
    ('device.driver.matches("' + "(" * 999 + "a" + ")" * 999 + '")', True),
    ('device.driver.matches("gpu.*")', True),
    ('device.driver.matches("[(]\\\\(")', False),
    ('device.driver + "(" == "x" || device.driver.matches(device.driver + "(")',
     RuntimeError("error parsing regexp: missing closing ): `gpu.example.com(`")),
]


@pytest.mark.parametrize(("expr", "want"), _GO_MATCHES, ids=range(len(_GO_MATCHES)))
def test_matches_as_cel_go_answers(expr: str, want: object) -> None:
    selector = cel.compile_selector(expr)
    if isinstance(want, str):
        assert selector.error is not None and str(selector.error) == want
        return
    assert selector.error is None, selector.error
    device = cel.device_variable(G, {"name": "g0"})
    if isinstance(want, RuntimeError):
        with pytest.raises(cel.CELRuntimeError) as err:
            cel.device_matches(selector, device)
        assert str(err.value) == str(want)
    else:
        assert cel.device_matches(selector, device) is want


def test_a_bad_pattern_writes_nothing_on_stderr(capfd: pytest.CaptureFixture[str]) -> None:
    """RE2 logs every pattern it cannot parse on file descriptor 2 unless told not to."""
    with pytest.raises(cel.CELRuntimeError, match="missing closing"):
        cel.device_matches(cel.compile_selector(f'"x".matches(device.attributes["{G}"].model + "(")'),
                           cel.device_variable(G, DEVICE))
    assert cel.compile_selector('"x".matches("(x")').error is not None
    assert capfd.readouterr().err == ""


def test_a_class_with_a_bad_pattern_fails_the_cycle_naming_class_and_selector() -> None:
    objs = [*BASE[:3], dclass("gpu", ['device.driver.matches("gpu.*(")']),
            rslice("s-a", G, "pa", node="a", devices=[dev("g0")]), claim("c", [{"name": "r", "exactly": ex()}]),
            pod("p", uses("c"))]
    with pytest.raises(SchedulingError) as ei:
        schedule(objs)
    assert ("class gpu: selector #0: CEL compile error: compilation failed: ERROR: <input>:1:23: invalid matches "
            'argument\n | device.driver.matches("gpu.*(")\n | ......................^') in str(ei.value)


def test_cel_bad_attribute_value() -> None:
    with pytest.raises(cel.CELRuntimeError, match="attribute idx"):
        cel.device_variable(G, {"name": "g", "attributes": {"idx": {"int": "x"}}})
    with pytest.raises(cel.CELRuntimeError, match="attribute v: parse semantic version"):
        cel.device_variable(G, {"name": "g", "attributes": {"v": {"version": "01.2"}}})


def test_status_codes_are_unresolvable() -> None:
    res = schedule(copy.deepcopy(CASES["count-2"]))[0]
    assert res.diagnosis is not None
    assert {st.code for st in res.diagnosis.node_to_status.values()} == {Code.UNSCHEDULABLE_AND_UNRESOLVABLE}


# -- differential test against the oracle (built on first use) ----------------------------------------------
@pytest.fixture(scope="module")
def oracle() -> Path:
    """The Go oracle (upstream's framework), built on first use and cached beside the test bed."""
    from bench.parity_lib.runner import oracle_binary

    return oracle_binary()


MODELS = ["a100", "h100", "l4"]
NET = "net.example.com"


def random_cluster(seed: int) -> list[Obj]:
    """Nodes with node-local GPU slices (random models, memory, NUMA, taints), shared NIC slices by
    node selector / all nodes, some devices already allocated, one pending Pod with 1-2 claims of
    exact / firstAvailable / All requests, CEL selectors, tolerations and attribute constraints."""
    r = random.Random(seed)
    n = r.randint(2, 4)
    objs = [node(f"n{i}", {"zone": f"z{i % 2}"}) for i in range(n)]
    objs += [dclass("gpu", [f'device.driver == "{G}"']), dclass("net", [f'device.driver == "{NET}"']),
             dclass("big", [f'device.driver == "{G}"',
                            f'device.capacity["{G}"].memory.compareTo(quantity("48Gi")) >= 0'])]
    pools: dict[str, list[Obj]] = {}
    for i in range(n):
        if r.random() < 0.8:
            devs = [dev(f"g{j}", {"model": {"string": r.choice(MODELS)}, "idx": {"int": j},
                                  "numa": {"int": r.randint(0, 1)}}, {"memory": r.choice(["40Gi", "80Gi"])})
                    for j in range(r.randint(2, 5))]
            if r.random() < 0.2:
                devs[0]["taints"] = [{"key": "bad", "effect": r.choice(["NoSchedule", "NoExecute", "None"])}]
            objs.append(rslice(f"s-n{i}", G, f"p{i}", node=f"n{i}", devices=devs))
            pools[f"p{i}"] = devs
    if r.random() < 0.5:
        objs.append(rslice("net-z0", NET, "netz0", node_selector={"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "zone", "operator": "In", "values": ["z0"]}]}]}, devices=[dev("n0"), dev("n1")]))
    if r.random() < 0.3:
        objs.append(rslice("net-all", NET, "netall", all_nodes=True, devices=[dev("x0")]))
    for k, (pool, devs) in enumerate(pools.items()):
        if r.random() < 0.3:
            on = {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": ["n" + pool[1:]]}]}]}
            objs.append(claim(f"used{k}", [{"name": "r", "exactly": ex()}], allocation={
                "devices": {"results": [{"request": "r", "driver": G, "pool": pool, "device": r.choice(devs)["name"]}]},
                "nodeSelector": on}, reserved=[{"resource": "pods", "name": "x", "uid": "x"}]))

    def request() -> Obj:
        cls = r.choice(["gpu", "gpu", "big", "net"])
        sel = [f'device.attributes["{G}"].model == "{r.choice(MODELS)}"'] if cls != "net" and r.random() < 0.4 else []
        e = ex(cls, count=r.choice([1, 1, 1, 2]), sel=sel, mode="All" if r.random() < 0.1 else "ExactCount")
        if r.random() < 0.1:
            e["tolerations"] = [{"key": "bad", "operator": "Exists"}]
        return e

    refs = []
    for ci in range(r.choice([1, 1, 2])):
        reqs: list[Obj] = []
        for ri in range(r.choice([1, 1, 2])):
            if r.random() < 0.4:
                reqs.append({"name": f"r{ri}", "firstAvailable": [
                    {"name": f"s{si}", **request()} for si in range(r.randint(2, 3))]})
            else:
                reqs.append({"name": f"r{ri}", "exactly": request()})
        cons = None
        if r.random() < 0.3:
            cons = [{r.choice(["matchAttribute", "distinctAttribute"]): f"{G}/" + r.choice(["model", "numa", "idx"])}]
        objs.append(claim(f"c{ci}", reqs, constraints=cons))
        refs.append(f"c{ci}")
    objs.append(pod("p", uses(*refs)))
    return objs


def match_oracle(objs: list[Obj], oracle: Path) -> tuple[Any, Obj] | None:
    """Schedule the pending Pod of ``objs`` here and with upstream's framework (the Go oracle) and
    assert they agree (feasible nodes, filter reasons, scores, message; or the same Error). Returns
    (our result, the oracle's JSON line) when the Pod was scheduled or rejected, None after an Error."""
    proc = subprocess.run([str(oracle)], input=json.dumps({"objects": objs}), capture_output=True, text=True,
                          timeout=120)
    if proc.returncode != 0:  # upstream failed the Pod with an Error (e.g. "asks for all devices, but ...")
        with pytest.raises(SchedulingError) as ei:
            schedule(objs)
        assert str(ei.value).split("plugin: ")[-1] in proc.stderr
        return None
    want: Obj = json.loads(proc.stdout.splitlines()[0])
    if want.get("error"):  # the oracle reports a plugin Error (not a rejection) in the JSON line
        with pytest.raises(SchedulingError) as ei:
            schedule(objs)
        assert str(ei.value) == want["error"]
        return None
    got = schedule(objs)[0]
    assert sorted(got.feasible) == want["feasible"]
    assert got.filtered == want["filtered"]
    assert got.scores == want["scores"]
    assert got.message == want["message"]
    return got, want


@pytest.mark.parametrize("expr", [e for e, _ in KUBERNETES_ENVIRONMENT] + [e for e, _, _ in FUNCTION_ERRORS])
def test_cel_selectors_match_upstream(expr: str, oracle: Path) -> None:
    """Each selector of KUBERNETES_ENVIRONMENT / FUNCTION_ERRORS in a claim, here and in upstream's
    framework: the same nodes, or the same Error."""
    objs = [node("n0"), dclass("gpu", [f'device.driver == "{G}"']),
            rslice("s-n0", G, "p0", node="n0", devices=[dev("g0", {"model": {"string": "a100"}, "idx": {"int": 3}},
                                                            {"memory": "40Gi"})]),
            claim("c", [{"name": "r", "exactly": ex(sel=[expr])}]), pod("p", uses("c"))]
    match_oracle(objs, oracle)


@pytest.mark.parametrize("seed", range(40))
def test_random_clusters_match_upstream(seed: int, oracle: Path) -> None:
    match_oracle(random_cluster(seed), oracle)


def test_simulated_pre_bind_lets_later_pods_share_the_claim() -> None:
    objs = [*CASES["first-available"], pod("q", uses("c"), ts="2024-01-01T00:00:05Z"),
            claim("d", [{"name": "r", "exactly": ex(count=2)}]), pod("r", uses("d"), ts="2024-01-01T00:00:06Z")]
    snap = _snapshot(objs)
    fw = build_framework(ProfileConfig(scheduler_name="default-scheduler"), registry=registry)
    algo = Algorithm(rng=MinChoice())
    selected = []
    for p in (o for o in objs if o["kind"] == "Pod"):
        pi = PodInfo(p)
        res = algo.schedule(fw, snap, pi, explain=True)
        selected.append(res.selected)
        if res.selected is not None and res.state is not None:
            assert fw.run_reserve(res.state, pi, res.selected).is_success()
            assert simulated_pre_bind(res.state, pi) == ["default/c"] or pi.name == "r"
            snap.assume(pi, res.selected)
    # q shares c (allocated to a's h100 with a node selector for a); r needs two free devices:
    # a has one left (g0), b has one -> nowhere.
    assert selected == ["a", "a", None]
    written = snap.objects.get("ResourceClaim", "default/c")
    assert written is not None
    assert [r["uid"] for r in written["status"]["reservedFor"]] == ["uid-p", "uid-q"]


def test_events_to_register_include_resource_slices_as_upstream() -> None:
    """A ResourceSlice added or updated (new devices) must move a waiting DRA Pod back to the
    active queue; the wildcard registration used without ``events_to_register`` has no slices."""
    from py_scheduler.framework.events import ActionType, ClusterEvent, Resource, match_any_cluster_event

    events = [e.event for e in DynamicResources().events_to_register()]
    for res, action in ((Resource.RESOURCE_SLICE, ActionType.ADD), (Resource.RESOURCE_SLICE, ActionType.UPDATE),
                        (Resource.RESOURCE_CLAIM, ActionType.DELETE), (Resource.DEVICE_CLASS, ActionType.ADD),
                        (Resource.NODE, ActionType.UPDATE_NODE_LABEL),
                        (Resource.TARGET_POD, ActionType.UPDATE_POD_GENERATED_RESOURCE_CLAIM)):
        assert match_any_cluster_event(ClusterEvent(res, action), events), (res, action)
    assert not match_any_cluster_event(ClusterEvent(Resource.RESOURCE_SLICE, ActionType.DELETE), events)
    assert not match_any_cluster_event(ClusterEvent(Resource.NODE, ActionType.UPDATE_NODE_TAINT), events)
