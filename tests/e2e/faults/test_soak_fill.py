"""The soak's memo-filling churn (``bench/bench_lib/soak_fill.py``: :class:`FillChurn`) on the real
test bed, against one py-scheduler replica: each of its five churns does what it is there for -
unschedulable Pods get FailedScheduling Events, DRA Pods are bound with their claims allocated on
the slice Node, PV Pods are bound to their PV's Node, preemption happens, GPU Nodes come and go -
and its cleanup leaves nothing behind.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import pytest
from kubernetes_asyncio import client

from bench.bench_lib.soak_fill import FillChurn
from tests.e2e.faults import invariants
from tests.e2e.faults.scenarios import FaultEnv
from tests.e2e.helpers import wait_for

RUN_SECONDS = 60.0


@pytest.mark.timeout(150)
async def test_fill_churn_reaches_every_memo(env: FaultEnv) -> None:
    churn: dict[str, int] = {}
    lines: list[str] = []

    def count(what: str) -> None:
        churn[what] = churn.get(what, 0) + 1

    sched = env.replica("fill")
    await sched.wait_leading()
    fill = FillChurn(env, random.Random(1), count, lines.append, interval=1.0, live=5)
    custom = client.CustomObjectsApi(env.api)
    seen: dict[str, set[str]] = {k: set() for k in ("failed", "dra", "dra shared", "pv", "preempted", "gpu gone")}
    gpu_nodes: set[str] = set()

    async def observed() -> bool:
        """Accumulate the evidence (the churn deletes its objects as it goes): all of it yet?"""
        gpu_nodes.update(fill.gpu_nodes)
        nodes, pods, events = await invariants.cluster_state(env.api)
        by_name = {p["metadata"]["name"]: p for p in pods if p["metadata"].get("namespace") == "default"}
        existing = {n["metadata"]["name"] for n in nodes}
        seen["gpu gone"] |= gpu_nodes - existing - set(fill.gpu_nodes)
        nowhere = set(fill.unschedulable)
        for e in events:
            reg = e.get("regarding") or {}
            if e.get("reason") == "FailedScheduling" and reg.get("name") in nowhere \
                    and "didn't match Pod's node affinity/selector" in (e.get("note") or ""):
                seen["failed"].add(reg["name"])
            if e.get("reason") == "Preempted" and (e.get("note") or "").startswith("Preempted by pod "):
                seen["preempted"].add(reg.get("name", ""))
        claims = {c["metadata"]["name"]: c for c in (await custom.list_namespaced_custom_object(
            "resource.k8s.io", "v1", "default", "resourceclaims"))["items"]}
        for pod, claim in list(fill.dra):
            p, c = by_name.get(pod), claims.get(claim)
            if p is None or c is None or (p.get("spec") or {}).get("nodeName") != fill.slice_node:
                continue
            results = ((((c.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results")) or []
            reserved = [r.get("name") for r in (c.get("status") or {}).get("reservedFor") or []]
            if results and results[0]["driver"] == fill.driver and results[0]["pool"] == fill.slice_node \
                    and reserved == [pod]:
                seen["dra"].add(pod)
                if results[0].get("shareID") and results[0].get("consumedCapacity"):  # a capacity request's
                    seen["dra shared"].add(pod)
        for pod, _, _ in list(fill.pv):
            if (by_name.get(pod, {}).get("spec") or {}).get("nodeName") == fill.slice_node:
                seen["pv"].add(pod)
        return (len(seen["failed"]) >= 3 and len(seen["dra"]) >= 3 and len(seen["dra shared"]) >= 1
                and len(seen["pv"]) >= 3 and len(seen["gpu gone"]) >= 2 and len(seen["preempted"]) >= 1
                and churn.get("fill preemptors bound", 0) >= 1)

    t0 = time.monotonic()
    try:
        await fill.setup()
        run = asyncio.create_task(fill.run(time.monotonic() + RUN_SECONDS))
        try:
            await wait_for(observed, timeout=RUN_SECONDS, interval=1.0,
                           what=f"every churn's effect (seen so far {({k: len(v) for k, v in seen.items()})}, "
                                f"churn {churn}, errors {lines})")
        finally:
            await run
        # nothing overcommitted, each Pod bound once, the replica alive and without a Traceback
        report = invariants.Report()
        nodes, pods, events = await invariants.cluster_state(env.api)
        invariants.check_capacity(nodes, pods, report)
        invariants.check_bound_once(pods, events, {"fill": sched.log()}, report)
        invariants.check_processes(env.replicas, env.killed, report)
        assert report.violations == [], report.violations[:10]
    finally:
        await fill.cleanup()
    print(f"fill churn {time.monotonic() - t0:.0f} s: {churn}; seen {({k: len(v) for k, v in seen.items()})}")
    assert churn.get("fill API errors", 0) == 0, lines
    assert churn["fill GPU nodes removed"] >= 2 and churn["fill preemption rounds"] >= 2, churn
    # the cleanup left nothing of the churn's
    left: list[Any] = [p.metadata.name for p in (await env.core.list_namespaced_pod("default")).items
                       if (p.metadata.annotations or {}).get("py-scheduler-soak/fill") == fill.tag]
    left += [c["metadata"]["name"] for c in (await custom.list_namespaced_custom_object(
        "resource.k8s.io", "v1", "default", "resourceclaims"))["items"] if c["metadata"]["name"].startswith(fill.tag)]
    left += [pv.metadata.name for pv in (await env.core.list_persistent_volume()).items
             if pv.metadata.name.startswith(fill.tag)]
    left += [n.metadata.name for n in (await env.core.list_node()).items if n.metadata.name in gpu_nodes
             or (n.metadata.name.startswith("flt-fill-") and n.metadata.name in env.all_nodes)]
    assert left == [], left
