"""Two ``py-scheduler run`` replicas on one Lease: only the leader binds; a SIGKILLed leader is
replaced after the lease expires and every Pod ends bound once without overcommitting a Node; a
SIGTERMed leader releases the Lease so the standby takes over at once."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from tests.e2e.helpers import (
    Testbed,
    create_node,
    create_pod,
    events_v1,
    unique_name,
    wait_for,
)
from tests.e2e.scheduler_proc import SchedulerProcess, stop_and_clean_up, wait_exit

GROUP_LABEL = "py-scheduler-e2e/group"


class Bed:
    """Nodes, Pods and replicas of one test, all removed at the end."""

    def __init__(self, testbed: Testbed, api: client.ApiClient) -> None:
        self.testbed = testbed
        self.api = api
        self.group = unique_name("le")
        self.lease = unique_name("py-sched-le")
        self.nodes: list[str] = []
        self.pods: list[str] = []
        self.replicas: list[SchedulerProcess] = []

    def replica(self, name: str) -> SchedulerProcess:
        p = SchedulerProcess(Path(self.testbed.kubeconfig), Path(self.testbed.dir) / "logs" / f"{name}.log",
                             lease_name=self.lease, verbosity=4)
        p.start()
        self.replicas.append(p)
        return p

    async def node(self, allocatable: dict[str, str]) -> str:
        name = unique_name("le-node")
        self.nodes.append(name)
        await create_node(self.api, name, allocatable, labels={GROUP_LABEL: self.group})
        return name

    async def pod(self, requests: dict[str, str]) -> str:
        name = unique_name("le-pod")
        self.pods.append(name)
        await create_pod(self.api, name, scheduler_name="py-scheduler", requests=requests,
                         spec={"nodeSelector": {GROUP_LABEL: self.group}})
        return name

    async def close(self) -> None:
        await stop_and_clean_up(self.api, self.replicas, self.pods, self.nodes)


@pytest.fixture
async def bed(testbed: Testbed, api_client: client.ApiClient) -> AsyncIterator[Bed]:
    b = Bed(testbed, api_client)
    try:
        yield b
    finally:
        await b.close()


async def pods_of(api: client.ApiClient, names: list[str]) -> dict[str, Any]:
    pods = await client.CoreV1Api(api).list_namespaced_pod("default")
    wanted = set(names)
    return {p.metadata.name: p for p in pods.items if p.metadata.name in wanted}


async def scheduled_events(api: client.ApiClient, names: list[str]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {n: [] for n in names}
    for e in await events_v1(api):
        if e.reason == "Scheduled" and e.regarding is not None and e.regarding.name in out:
            out[e.regarding.name].append(e)
    return out


async def lease_holder(api: client.ApiClient, name: str) -> str:
    lease = await client.CoordinationV1Api(api).read_namespaced_lease(name, "kube-system")
    return lease.spec.holder_identity or ""


async def test_only_the_leader_binds(bed: Bed, api_client: client.ApiClient) -> None:
    await bed.node({"cpu": "8", "memory": "16Gi", "pods": "110"})
    a = bed.replica("le-only-a")
    await a.wait_leading()
    b = bed.replica("le-only-b")
    await b.wait_log("attempting to acquire leader lease")
    pods = [await bed.pod({"cpu": "100m"}) for _ in range(10)]

    async def all_events() -> dict[str, list[Any]] | None:
        evs = await scheduled_events(api_client, pods)
        return evs if all(evs.values()) else None

    evs = await wait_for(all_events, timeout=60, what="Scheduled events for all pods")
    assert {e.reporting_instance for es in evs.values() for e in es} == {a.identity()}
    assert await lease_holder(api_client, bed.lease) == a.identity()
    assert "became the leader" not in b.log()
    assert "Successfully bound" not in b.log()


async def test_leader_killed_during_burst(bed: Bed, api_client: client.ApiClient) -> None:
    """SIGKILL the leader after ~15 of 50 Pods are bound (Pods keep arriving): the standby takes
    the Lease once it expires, binds the rest; every Pod is bound exactly once, the standby never
    hits an already-bound Pod, and no Node's CPU is overcommitted (50 x 600m on 4 x 8 CPU)."""
    nodes = [await bed.node({"cpu": "8", "memory": "32Gi", "pods": "110"}) for _ in range(4)]
    a = bed.replica("le-kill-a")
    await a.wait_leading()
    b = bed.replica("le-kill-b")
    await b.wait_log("attempting to acquire leader lease")
    pods: list[str] = []
    killed_at = 0.0
    for i in range(50):
        pods.append(await bed.pod({"cpu": "600m", "memory": "100Mi"}))
        if not killed_at and a.log().count("Successfully bound") >= 15:
            a.kill()
            killed_at = time.monotonic()
        if i < 30:
            want = len(pods) - 3
            await wait_for(lambda want=want: a.log().count("Successfully bound") >= want or not a.alive(),
                           timeout=10, interval=0.01, what="the leader to keep up")
    if not killed_at:
        a.kill()
        killed_at = time.monotonic()
    assert 0 < a.log().count("Successfully bound") < 50

    async def all_bound() -> dict[str, Any] | None:
        got = await pods_of(api_client, pods)
        return got if len(got) == len(pods) and all(p.spec.node_name for p in got.values()) else None

    bound = await wait_for(all_bound, timeout=90, what="all 50 pods bound after the failover")
    await b.wait_log("became the leader", timeout=5)
    took_over = time.monotonic() - killed_at
    assert took_over < 40, took_over
    # once: no Pod has two Scheduled events; the standby never tried to bind a bound Pod
    evs = await scheduled_events(api_client, pods)
    assert all(len(es) <= 1 for es in evs.values()), {k: len(v) for k, v in evs.items() if len(v) > 1}
    assert "Not binding pod" not in b.log()
    assert "Failed to bind pod" not in b.log()
    instances = {e.reporting_instance for es in evs.values() for e in es}
    assert instances <= {a.identity(), b.identity()} and b.identity() in instances
    # no overcommit: sum of CPU requests per node <= 8000m
    per_node: dict[str, int] = {n: 0 for n in nodes}
    for p in bound.values():
        per_node[p.spec.node_name] += 600
    assert all(v <= 8000 for v in per_node.values()), per_node
    assert await lease_holder(api_client, bed.lease) == b.identity()


async def test_sigterm_releases_the_lease(bed: Bed, api_client: client.ApiClient) -> None:
    await bed.node({"cpu": "8", "memory": "16Gi", "pods": "110"})
    a = bed.replica("le-term-a")
    await a.wait_leading()
    b = bed.replica("le-term-b")
    await b.wait_log("attempting to acquire leader lease")
    t0 = time.monotonic()
    a.proc.send_signal(15)  # type: ignore[union-attr]
    assert await wait_exit(a) == 0
    assert "released lease" in a.log()
    await b.wait_leading(timeout=15)
    # well before the 15 s lease of a crashed leader would have expired
    assert time.monotonic() - t0 < 10
    pod = await bed.pod({"cpu": "100m"})

    async def bound() -> bool:
        got = await pods_of(api_client, [pod])
        return bool(got) and bool(got[pod].spec.node_name)

    await wait_for(bound, timeout=30, what="the new leader binds")
