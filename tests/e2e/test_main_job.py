"""``py-scheduler run`` against the real test bed (etcd + kube-apiserver v1.37.2 + upstream
kube-scheduler): placements and totals, FailedScheduling, recovery when room appears, coexistence
with the upstream scheduler, and the creation-to-binding latency.

Every test runs its own ``py-scheduler run --v 10`` subprocess with its own Lease and its own Nodes,
labelled with a per-test value that the test's Pods select (``nodeSelector`` only filters, it does
not change any score), so Nodes other tests may leave behind never take part.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client

from py_scheduler.plugins import registry
from tests.e2e.helpers import (
    Testbed,
    create_node,
    create_pod,
    delete_node,
    delete_pod,
    events_v1,
    unique_name,
    wait_for,
    wait_for_pod_scheduled,
)
from tests.e2e.scheduler_proc import running_scheduler

GROUP_LABEL = "py-scheduler-e2e/group"
NODE_16GI = {"cpu": "4", "memory": "16Gi", "pods": "110"}


class Cleanup:
    """Nodes and Pods a test created, deleted at the end."""

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self.group = unique_name("g")
        self.nodes: list[str] = []
        self.pods: list[str] = []

    async def node(self, name: str, allocatable: dict[str, str], **kw: Any) -> str:
        labels = {GROUP_LABEL: self.group, **kw.pop("labels", {})}
        self.nodes.append(name)
        await create_node(self.api, name, allocatable, labels=labels, **kw)
        return name

    async def pod(self, name: str, *, scheduler_name: str | None = "py-scheduler", spec: dict[str, Any] | None = None,
                  **kw: Any) -> str:
        self.pods.append(name)
        s = {"nodeSelector": {GROUP_LABEL: self.group}, **(spec or {})}
        await create_pod(self.api, name, scheduler_name=scheduler_name, spec=s, **kw)
        return name

    async def close(self) -> None:
        await asyncio.gather(*(delete_pod(self.api, p) for p in self.pods), return_exceptions=True)
        for n in self.nodes:
            await delete_node(self.api, n)


@pytest.fixture
async def objs(api_client: client.ApiClient) -> AsyncIterator[Cleanup]:
    c = Cleanup(api_client)
    try:
        yield c
    finally:
        await c.close()


async def events_of(api: client.ApiClient, pod: str, reason: str) -> list[Any]:
    """events.k8s.io/v1 Events about ``pod`` with ``reason``."""
    return [e for e in await events_v1(api) if e.regarding and e.regarding.name == pod and e.reason == reason]


async def condition(api: client.ApiClient, pod: str, ctype: str = "PodScheduled") -> Any:
    p = await client.CoreV1Api(api).read_namespaced_pod(pod, "default")
    return next((c for c in p.status.conditions or [] if c.type == ctype), None)


def strip_preemption_tail(msg: str) -> str:
    """Upstream adds `` preemption: ...`` (DefaultPreemption's verdict) after the histogram."""
    return msg.split(" preemption:", 1)[0]


# ------------------------------------------------------------------------------------------------


async def test_published_two_node_case(testbed: Testbed, api_client: client.ApiClient, objs: Cleanup) -> None:
    """The v1.37.2 experiment: A (disk=ssd, tainted dedicated=a:PreferNoSchedule) and B, 4 CPU /
    16Gi / 110 pods; two request-less Pods preferring disk=ssd (weight 50).

    Pod 1 tolerates the taint: TaintToleration 3x100 on both, NodeAffinity 2x100 on A only,
    NodeResourcesFit 97 (cpu (4000-100)*100/4000=97, memory (16Gi-200Mi)*100/16Gi=98, mean 97),
    BalancedAllocation skipped (no requests) -> A 597, B 397. Pod 2 does not tolerate it:
    TaintToleration 0 on A; Fit on A with pod 1 assumed = (95+97)/2 = 96 -> A 296, B 397.
    """
    a, b = unique_name("two-a"), unique_name("two-b")
    await objs.node(a, NODE_16GI, labels={"disk": "ssd"},
                    taints=[{"key": "dedicated", "value": "a", "effect": "PreferNoSchedule"}])
    await objs.node(b, NODE_16GI)
    aff = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 50, "preference": {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}}]}}
    tol = [{"key": "dedicated", "operator": "Equal", "value": "a", "effect": "PreferNoSchedule"}]
    async with running_scheduler(testbed, "two-node") as sched:
        p1 = await objs.pod(unique_name("two-p1"), spec={"affinity": aff, "tolerations": tol})
        bound1 = await wait_for_pod_scheduled(api_client, p1)
        p2 = await objs.pod(unique_name("two-p2"), spec={"affinity": aff})
        bound2 = await wait_for_pod_scheduled(api_client, p2)
        assert bound1.spec.node_name == a
        assert bound2.spec.node_name == b
        assert sched.final_scores(f"default/{p1}") == {a: 597, b: 397}
        assert sched.final_scores(f"default/{p2}") == {a: 296, b: 397}
        per_plugin = sched.plugin_scores(f"default/{p1}")
        assert per_plugin[("TaintToleration", a)] == 300 and per_plugin[("NodeAffinity", a)] == 200
        evs = await wait_for(lambda: events_of(api_client, p1, "Scheduled"), what="Scheduled event")
        assert evs[0].note == f"Successfully assigned default/{p1} to {a}"
        assert evs[0].type == "Normal" and evs[0].action == "Binding"
        assert evs[0].reporting_controller == "py-scheduler"
        assert evs[0].reporting_instance == sched.identity()
        # the scheduler only watches: no annotations (kopf once would have added its own), no finalizers
        core = client.CoreV1Api(api_client)
        for obj in (await core.read_namespaced_pod(p1, "default"), await core.read_node(a)):
            assert not any("kopf" in k for k in (obj.metadata.annotations or {})), obj.metadata.annotations
            assert not obj.metadata.finalizers


async def test_unschedulable_pod_gets_upstream_message_then_schedules_when_room_appears(
        testbed: Testbed, api_client: client.ApiClient, objs: Cleanup) -> None:
    for _ in range(2):
        await objs.node(unique_name("small"), {"cpu": "2", "memory": "4Gi", "pods": "110"})
    reqs = {"cpu": "3", "memory": "1Gi"}
    # The same Pod for the upstream scheduler gives the reference message.
    ref = await objs.pod(unique_name("ref"), scheduler_name=None, requests=reqs)
    ref_ev = await wait_for(lambda: events_of(api_client, ref, "FailedScheduling"), timeout=60,
                            what="upstream FailedScheduling")
    await delete_pod(api_client, ref)
    async with running_scheduler(testbed, "unschedulable") as sched:
        pod = await objs.pod(unique_name("big"), requests=reqs)
        evs = await wait_for(lambda: events_of(api_client, pod, "FailedScheduling"), timeout=60,
                             what="FailedScheduling")
        ours = evs[0].note
        # word for word, the preemption verdict included (without it when DefaultPreemption is absent)
        want = ref_ev[0].note if "DefaultPreemption" in registry.available() else strip_preemption_tail(ref_ev[0].note)
        assert ours == want, (ours, ref_ev[0].note)
        assert "Insufficient cpu" in ours
        assert evs[0].type == "Warning" and evs[0].action == "Scheduling"
        assert evs[0].reporting_controller == "py-scheduler"
        cond = await wait_for(lambda: condition(api_client, pod), what="PodScheduled condition")
        assert (cond.status, cond.reason, cond.message) == ("False", "Unschedulable", ours)
        # Room appears: the Node add event requeues the Pod, no restart needed.
        big = await objs.node(unique_name("big-node"), {"cpu": "4", "memory": "8Gi", "pods": "110"})
        bound = await wait_for_pod_scheduled(api_client, pod, timeout=60)
        assert bound.spec.node_name == big
        assert sched.alive()


async def test_odd_pod_fails_and_the_loop_goes_on(testbed: Testbed, api_client: client.ApiClient,
                                                  objs: Cleanup) -> None:
    node = await objs.node(unique_name("odd-node"), {"cpu": "4", "memory": "8Gi", "pods": "110"})
    async with running_scheduler(testbed, "odd"):
        huge = await objs.pod(unique_name("huge"), requests={"cpu": "100000", "memory": "1Ei"})
        fine = await objs.pod(unique_name("fine"), requests={"cpu": "100m"})
        bound = await wait_for_pod_scheduled(api_client, fine, timeout=60)
        assert bound.spec.node_name == node
        evs = await wait_for(lambda: events_of(api_client, huge, "FailedScheduling"), timeout=60,
                             what="FailedScheduling of the huge pod")
        assert "Insufficient cpu" in evs[0].note and "Insufficient memory" in evs[0].note
        cond = await condition(api_client, huge)
        assert cond is not None and cond.reason == "Unschedulable"


async def test_side_by_side_with_upstream(testbed: Testbed, api_client: client.ApiClient, objs: Cleanup) -> None:
    for _ in range(2):
        await objs.node(unique_name("sbs"), {"cpu": "8", "memory": "16Gi", "pods": "110"})
    async with running_scheduler(testbed, "side-by-side") as sched:
        ours = [await objs.pod(unique_name("ours"), requests={"cpu": "100m"}) for _ in range(5)]
        theirs = [await objs.pod(unique_name("theirs"), scheduler_name=None, requests={"cpu": "100m"})
                  for _ in range(5)]
        for p in ours + theirs:
            await wait_for_pod_scheduled(api_client, p, timeout=60)
        for p in ours:
            evs = await wait_for(lambda p=p: events_of(api_client, p, "Scheduled"), what=f"Scheduled event of {p}")
            assert {e.reporting_controller for e in evs} == {"py-scheduler"}
        for p in theirs:
            evs = await wait_for(lambda p=p: events_of(api_client, p, "Scheduled"), what=f"Scheduled event of {p}")
            assert {e.reporting_controller for e in evs} == {"default-scheduler"}
            assert f"pod=default/{p}" not in sched.log()


async def test_creation_to_binding_latency(testbed: Testbed, api_client: client.ApiClient, objs: Cleanup) -> None:
    """Seconds from the create call to the accepted Binding: 50 Pods one at a time (each created once
    the previous one is bound: the latency of one Pod), then a burst of 50 created back to back
    (queueing included). The binding time is the ``Successfully bound pod to node`` log line (wall
    clock, same host), so the test's own client adds nothing. Figures are printed and written to
    ``<bed>/logs/latency.txt``."""
    for _ in range(3):
        await objs.node(unique_name("lat"), {"cpu": "32", "memory": "64Gi", "pods": "110"})
    async with running_scheduler(testbed, "latency", verbosity=2) as sched:

        async def measure(names: list[str], one_by_one: bool) -> list[float]:
            created: dict[str, float] = {}
            for n in names:
                created[n] = time.time()
                await objs.pod(n, requests={"cpu": "10m"})
                if one_by_one:
                    await wait_for(lambda n=n: f"default/{n}" in sched.bound_times(), timeout=30, interval=0.005,
                                   what=f"{n} bound")

            def all_bound() -> dict[str, float] | None:
                out = sched.bound_times()
                return out if all(f"default/{n}" in out for n in names) else None

            bound = await wait_for(all_bound, timeout=120, what="all pods bound")
            return sorted(bound[f"default/{n}"] - created[n] for n in names)

        single = await measure([unique_name("lat-one") for _ in range(50)], one_by_one=True)
        burst = await measure([unique_name("lat-burst") for _ in range(50)], one_by_one=False)

        def fmt(lat: list[float]) -> str:
            return (f"median {statistics.median(lat) * 1000:.0f} ms, p90 {lat[int(len(lat) * 0.9) - 1] * 1000:.0f} ms, "
                    f"max {lat[-1] * 1000:.0f} ms")

        report = (f"creation->binding, 50 pods one at a time: {fmt(single)}\n"
                  f"creation->binding, burst of 50 pods: {fmt(burst)}")
        print("\n" + report)
        (sched.log_path.parent / "latency.txt").write_text(report + "\n")
        assert statistics.median(single) < 1.0, report
        assert statistics.median(burst) < 5.0, report


async def test_survives_apiserver_restart(testbed: Testbed, api_client: client.ApiClient, objs: Cleanup) -> None:
    """The watches break and the Lease cannot be renewed while kube-apiserver restarts; the process
    keeps running, re-watches (its reflectors) and reconciles, and schedules new Pods on new Nodes afterwards."""
    await objs.node(unique_name("hiccup"), {"cpu": "4", "memory": "8Gi", "pods": "110"})
    async with running_scheduler(testbed, "apiserver-restart") as sched:
        before = await objs.pod(unique_name("before"), requests={"cpu": "100m"})
        await wait_for_pod_scheduled(api_client, before)
        try:
            await asyncio.to_thread(testbed.restart_apiserver)
        finally:
            # The bed's upstream kube-scheduler exits when it loses its lease during the outage
            # (as upstream does); later tests need it, so start a fresh one.
            await asyncio.to_thread(_restart_upstream_scheduler, testbed)
        # A Node and a Pod created after the restart: the Pod asks for more than the first Node has.
        later = unique_name("hiccup-later")
        await wait_for(lambda: objs.node(later, {"cpu": "16", "memory": "8Gi", "pods": "110"}), timeout=60,
                       interval=0.5, what="creating a node after the restart")
        after = unique_name("after")
        await wait_for(lambda: objs.pod(after, requests={"cpu": "8"}), timeout=60, interval=0.5,
                       what="creating a pod after the restart")
        bound = await wait_for_pod_scheduled(api_client, after, timeout=90)
        assert bound.spec.node_name == later
        assert sched.alive()


def _restart_upstream_scheduler(testbed: Testbed) -> None:
    testbed.stop_kube_scheduler()
    testbed.start_kube_scheduler()


async def test_metrics_and_health_endpoints(testbed: Testbed, api_client: client.ApiClient, objs: Cleanup) -> None:
    import re

    import aiohttp

    await objs.node(unique_name("metrics"), {"cpu": "4", "memory": "8Gi", "pods": "110"})
    # the content of the endpoints, not their transport (HTTPS + delegated auth: test_deploy_rbac.py)
    async with running_scheduler(testbed, "metrics", verbosity=2, extra_args=["--plain-http"]) as sched:
        port = int(re.search(r"serving /metrics, /healthz, /livez, /readyz on [^:]+:(\d+)", sched.log()).group(1))  # type: ignore[union-attr]
        pod = await objs.pod(unique_name("m"), requests={"cpu": "100m"})
        await wait_for_pod_scheduled(api_client, pod)
        base = f"http://127.0.0.1:{port}"
        async with aiohttp.ClientSession() as http:
            for path in ("/healthz", "/livez", "/readyz"):
                async with http.get(base + path) as r:
                    assert (r.status, await r.text()) == (200, "ok"), path

            async def scheduled_count() -> float | None:
                async with http.get(base + "/metrics") as r:
                    text = await r.text()
                m = re.search(r'scheduler_schedule_attempts_total\{profile="py-scheduler",result="scheduled"\} (\S+)',
                              text)
                return float(m.group(1)) if m else None

            assert await wait_for(scheduled_count, what="schedule attempts metric") >= 1
            async with http.get(base + "/metrics") as r:
                text = await r.text()
            assert 'scheduler_pending_pods{queue="active"}' in text
            assert 'scheduler_cache_size{type="nodes"}' in text


async def test_preemption_evicts_a_lower_priority_pod(testbed: Testbed, api_client: client.ApiClient,
                                                     objs: Cleanup) -> None:
    """A high-priority Pod that fits nowhere preempts a low-priority one: the victim is deleted (with a
    ``Preempted`` event), the preemptor is nominated to the node and then bound there."""
    sched_api = client.SchedulingV1Api(api_client)
    low_pc, high_pc = unique_name("low"), unique_name("high")
    await sched_api.create_priority_class({"metadata": {"name": low_pc}, "value": 100})
    await sched_api.create_priority_class({"metadata": {"name": high_pc}, "value": 100000})
    try:
        node = await objs.node(unique_name("pre"), {"cpu": "2", "memory": "4Gi", "pods": "110"})
        async with running_scheduler(testbed, "preemption"):
            low = await objs.pod(unique_name("victim"), requests={"cpu": "1500m"}, spec={"priorityClassName": low_pc})
            await wait_for_pod_scheduled(api_client, low)
            high = await objs.pod(unique_name("preemptor"), requests={"cpu": "1500m"},
                                  spec={"priorityClassName": high_pc})
            bound = await wait_for_pod_scheduled(api_client, high, timeout=60)
            assert bound.spec.node_name == node
            preempted = await wait_for(lambda: events_of(api_client, low, "Preempted"), what="Preempted event")
            assert preempted[0].note.startswith("Preempted by pod ") and preempted[0].note.endswith(f"on node {node}")
            core = client.CoreV1Api(api_client)
            assert low not in {p.metadata.name for p in (await core.list_namespaced_pod("default")).items}
            # the attempt that preempted failed with the FitError plus DefaultPreemption's verdict, as upstream
            failed = await events_of(api_client, high, "FailedScheduling")
            assert failed and "1 Insufficient cpu." in failed[0].note
            assert failed[0].note.endswith(
                f" preemption: found a potential placement for pod on node {node}, preempting 1 victims")
    finally:
        for pc in (low_pc, high_pc):
            await sched_api.delete_priority_class(pc)
