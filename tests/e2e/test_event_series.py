"""Unschedulable Pods retried again and again, on the real bed: their FailedScheduling Events are
series as client-go's events library writes them (created, then PATCHed once to a count of 2,
later repeats counted in the scheduler), so a backlog of Pods that never fit does not turn every
Pod deletion into one Event write per waiting Pod, and a new Pod's FailedScheduling and
PodScheduled=False are not queued behind such writes.

Found by an adversarial run: 150 Pods asking for ``cpu: 1e400``, with good Pods created and deleted
(each deletion moves them back to the active queue), had one Event PATCHed up to 80 times and a new
unschedulable Pod's FailedScheduling came 6-13 s after its decision (kube-scheduler: 0.3 s)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

from kubernetes_asyncio import client

from tests.e2e.helpers import (
    PAUSE_IMAGE,
    Testbed,
    create_node,
    delete_node,
    delete_pod,
    events_v1,
    unique_name,
    wait_for,
    wait_for_failed_scheduling,
    wait_for_pod_scheduled,
)
from tests.e2e.scheduler_proc import serving_profile

BAD = 40
ROUNDS = 5


def _pod(name: str, profile: str, group: str, cpu: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"schedulerName": profile, "terminationGracePeriodSeconds": 0,
                     "nodeSelector": {"e2e-group": group},
                     "containers": [{"name": "main", "image": PAUSE_IMAGE,
                                     "resources": {"requests": {"cpu": cpu}}}], **spec}}


async def test_unschedulable_pods_retried_cost_two_event_writes_and_block_no_new_pod(
        api_client: client.ApiClient, testbed: Testbed) -> None:
    core = client.CoreV1Api(api_client)
    profile = unique_name("evseries")
    group = unique_name("evs")
    nodes = [unique_name("evs-node") for _ in range(2)]
    bad = [f"{group}-bad-{i}" for i in range(BAD)]
    made: list[str] = []
    async with serving_profile(testbed, profile, verbosity=2) as sched:
        try:
            for n in nodes:
                await create_node(api_client, n, {"cpu": "4", "memory": "8Gi", "pods": "110"},
                                  labels={"e2e-group": group})
            for name in bad:  # never fits: every attempt is unschedulable
                await core.create_namespaced_pod("default", _pod(name, profile, group, "1e400"))
                made.append(name)
            for name in bad:
                await wait_for_failed_scheduling(api_client, name, "Insufficient cpu", timeout=120)
            for r in range(ROUNDS):  # each deletion of a bound Pod sends the waiting Pods back to try again
                good = [f"{group}-good-{r}-{j}" for j in range(3)]
                for g in good:
                    await core.create_namespaced_pod("default", _pod(g, profile, group, "10m"))
                for g in good:
                    await wait_for_pod_scheduled(api_client, g, timeout=60)
                for g in good:
                    await delete_pod(api_client, g)

            def attempts() -> int:
                lines = re.findall(r"Unable to schedule pod; no fit; waiting pod=default/(\S+)", sched.log())
                return sum(1 for p in lines if p.startswith(f"{group}-bad-"))

            # the waiting Pods were tried again after the deletions (most of them several times)
            await wait_for(lambda: attempts() >= 3 * BAD or None, timeout=120, what="the retries")

            # a new unschedulable Pod gets its FailedScheduling promptly
            probe = f"{group}-probe"
            await core.create_namespaced_pod("default", _pod(probe, profile, group, "10m",
                                                             affinity=_nowhere()))
            made.append(probe)
            t0 = time.monotonic()
            await wait_for_failed_scheduling(api_client, probe, "didn't match", timeout=60)
            reported = time.monotonic() - t0

            mine = [e for e in await events_v1(api_client) if e.reason == "FailedScheduling"
                    and e.regarding.name.startswith(f"{group}-bad-")]
            per_pod: dict[str, list[int]] = {}
            for e in mine:
                per_pod.setdefault(e.regarding.name, []).append(1 if e.series is None else int(e.series.count))
            # written as client-go writes them: a new Event when the Pod changed (its first
            # PodScheduled=False), a series PATCHed to 2 once, later attempts counted in the scheduler
            assert set(per_pod) == set(bad)
            assert all(len(c) <= 2 and max(c) <= 2 for c in per_pod.values()), per_pod
            assert reported < 10.0, f"the probe's FailedScheduling took {reported:.1f} s"
        finally:
            for name in made:
                await delete_pod(api_client, name, wait=False)
            for n in nodes:
                await delete_node(api_client, n)


def _nowhere() -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["nowhere"]}]}]}}}


STORM_BAD = 200
STORM_SECONDS = 30.0


async def test_a_storm_of_failed_attempts_does_not_hold_back_bindings(
        api_client: client.ApiClient, testbed: Testbed) -> None:
    """200 Pods that never fit, and a new Node every half second (the oldest deleted): each Node event
    sends all of them back to be tried, each attempt fails with a new "0/N nodes" message, hundreds of
    PodScheduled writes a second. A Pod that fits, created after every four Nodes meanwhile, is bound within
    seconds. Found by an adversarial run side by side with kube-scheduler: every failure's status
    write took a rate-limiter token ahead of later Bindings, and a fitting Pod waited up to 290 s
    (kube-scheduler: under 1.5 s, its write sits in the cycle). Now a Pod's writes coalesce to the
    latest and wait behind Bindings."""
    import asyncio

    core = client.CoreV1Api(api_client)
    profile = unique_name("storm")
    group = unique_name("storm")
    probe_node = unique_name("storm-probe")
    nodes: list[str] = []
    made: list[str] = []
    latencies: list[float] = []
    async with serving_profile(testbed, profile, verbosity=2):
        try:
            await create_node(api_client, probe_node, {"cpu": "64", "memory": "64Gi", "pods": "110"},
                              labels={"e2e-group": f"{group}-probe"})
            for i in range(STORM_BAD):
                name = f"{group}-bad-{i}"
                await core.create_namespaced_pod("default", _pod(name, profile, group, "8"))
                made.append(name)

            added = 0

            async def churn() -> None:
                nonlocal added
                loop = asyncio.get_running_loop()
                end = loop.time() + STORM_SECONDS
                while loop.time() < end:
                    n = unique_name("storm-node")
                    await create_node(api_client, n, {"cpu": "4", "memory": "8Gi", "pods": "110"},
                                      labels={"e2e-group": group})
                    nodes.append(n)
                    added += 1
                    if len(nodes) > 6:
                        await delete_node(api_client, nodes.pop(0))
                    await asyncio.sleep(0.5)  # the churn's own pace, not synchronisation

            def _more_nodes(target: int) -> Callable[[], bool | None]:
                return lambda: storm.done() or added >= target or None

            storm = asyncio.create_task(churn())
            try:
                k = 0
                while not storm.done():
                    probe = f"{group}-fit-{k}"
                    k += 1
                    t0 = time.monotonic()
                    await core.create_namespaced_pod("default", _pod(probe, profile, f"{group}-probe", "100m"))
                    made.append(probe)
                    await wait_for_pod_scheduled(api_client, probe, timeout=300)
                    latencies.append(time.monotonic() - t0)
                    # the next probe once the churn has requeued the waiting Pods four more times
                    await wait_for(_more_nodes(added + 4), timeout=60, what="four more Nodes of the churn")
            finally:
                await storm
            assert len(latencies) >= 8, latencies
            assert max(latencies) < 10.0, [round(x, 1) for x in latencies]
        finally:
            for name in made:
                await delete_pod(api_client, name, wait=False)
            for n in [*nodes, probe_node]:
                await delete_node(api_client, n)
