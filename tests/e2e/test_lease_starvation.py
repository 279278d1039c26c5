"""The scheduler's own load must not starve its Lease (issue 20 item 0).

Before leader election had a client of its own, Lease renewals waited in the same client-side rate
limiter (and connection pool) as Bindings, PATCHes and Events:

* at client QPS 5 a burst of Pods queued enough writes that a renewal missed the 10 s renew deadline:
  the leader lost its Lease and leadership flapped between replicas;
* at the default 50 / 100, an 800-Pod backlog at start-up made the fence refuse Bindings
  ("lease could have expired; not binding") about 10 s after the replica became leader.

Both are reproduced here on the real bed; with the leader-election client (``Kube.derive``) the
Lease is renewed on time throughout (the largest gap between two renewals the API shows stays under
the renew deadline), nothing is fenced off, nothing is lost and every Pod ends bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from tests.e2e.faults import invariants
from tests.e2e.helpers import Testbed, create_node, create_pod, delete_node, unique_name, wait_for
from tests.e2e.scheduler_proc import SchedulerProcess

RENEW_DEADLINE = 10.0
FENCED = "lease could have expired"
LOST = ("lost leadership", "leaderelection lost")


class Starvation:
    """One test's Nodes, labelled Pods, replica and Lease watcher, all removed at the end."""

    def __init__(self, testbed: Testbed, api: client.ApiClient) -> None:
        self.testbed = testbed
        self.api = api
        self.group = unique_name("starve")
        self.lease = unique_name("py-sched-starve")
        self.nodes: list[str] = []
        self.replica: SchedulerProcess | None = None
        self.renewals: list[dt.datetime] = []
        self.holders: set[str] = set()
        self.transitions: set[int] = set()
        self.pods: set[str] = set()

    def start(self, name: str, qps: float, burst: int) -> SchedulerProcess:
        cfg = Path(self.testbed.dir) / f"{name}.config.json"
        cfg.write_text(json.dumps({"apiVersion": "kubescheduler.config.k8s.io/v1",
                                   "kind": "KubeSchedulerConfiguration",
                                   "clientConnection": {"qps": qps, "burst": burst}}))
        self.replica = SchedulerProcess(Path(self.testbed.kubeconfig), Path(self.testbed.dir) / "logs" / f"{name}.log",
                                        lease_name=self.lease, verbosity=2, extra_args=["--config", str(cfg)])
        self.replica.start()
        return self.replica

    async def add_nodes(self, n: int, allocatable: dict[str, str]) -> None:
        for _ in range(n):
            name = unique_name("starve-node")
            self.nodes.append(name)
            await create_node(self.api, name, allocatable, labels={"py-scheduler-e2e/starve": self.group})

    async def add_pods(self, n: int) -> list[str]:
        names = [unique_name("starve-pod") for _ in range(n)]
        sem = asyncio.Semaphore(32)

        async def one(name: str) -> None:
            async with sem:
                await create_pod(self.api, name, scheduler_name="py-scheduler", requests={"cpu": "10m"},
                                 labels={"py-scheduler-e2e/starve": self.group},
                                 spec={"nodeSelector": {"py-scheduler-e2e/starve": self.group}})

        await asyncio.gather(*(one(x) for x in names))
        self.pods.update(names)
        return names

    async def unbound(self) -> int:
        pods = await client.CoreV1Api(self.api).list_namespaced_pod(
            "default", label_selector=f"py-scheduler-e2e/starve={self.group}")
        return sum(1 for p in pods.items if not p.spec.node_name)

    async def watch_lease(self, stop: asyncio.Event) -> None:
        """Record every distinct renewTime (and holder, transitions) of the Lease until ``stop``."""
        coord = client.CoordinationV1Api(self.api)
        while not stop.is_set():
            with contextlib.suppress(ApiException):
                lease = await coord.read_namespaced_lease(self.lease, "kube-system")
                spec = lease.spec
                if spec.renew_time is not None and (not self.renewals or spec.renew_time != self.renewals[-1]):
                    self.renewals.append(spec.renew_time)
                self.holders.add(spec.holder_identity or "")
                self.transitions.add(int(spec.lease_transitions or 0))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=0.5)

    def largest_renewal_gap(self) -> float:
        gaps = [(b - a).total_seconds() for a, b in zip(self.renewals, self.renewals[1:], strict=False)]
        return max(gaps, default=0.0)

    async def close(self) -> None:
        if self.replica is not None:
            self.replica.terminate()
        with contextlib.suppress(ApiException):
            await client.CoreV1Api(self.api).delete_collection_namespaced_pod(
                "default", label_selector=f"py-scheduler-e2e/starve={self.group}", grace_period_seconds=0)
        for n in self.nodes:
            await delete_node(self.api, n)


@pytest.fixture
async def starve(testbed: Testbed, api_client: client.ApiClient) -> AsyncIterator[Starvation]:
    s = Starvation(testbed, api_client)
    try:
        yield s
    finally:
        await s.close()


async def _run_until_bound(s: Starvation, pods: int, timeout: float) -> None:
    stop = asyncio.Event()
    watcher = asyncio.create_task(s.watch_lease(stop))
    try:
        async def all_bound() -> bool:
            assert s.replica is not None and s.replica.alive(), s.replica and s.replica.log()[-3000:]
            return await s.unbound() == 0

        await wait_for(all_bound, timeout=timeout, interval=1.0, what=f"all {pods} Pods bound")
    finally:
        stop.set()
        await watcher


async def _assert_lease_kept(s: Starvation) -> None:
    assert s.replica is not None
    # the fault suite's invariants: no overcommit, bound once, no crash, no Traceback
    report = await invariants.check(s.api, pod_names=s.pods, procs=[s.replica], killed=set(),
                                    group_nodes=set(s.nodes))
    assert report.violations == [] and report.bound == len(s.pods), (report.violations, report.bound)
    log = s.replica.log()
    assert not [ln for ln in log.splitlines() if any(x in ln for x in LOST)], log[-3000:]
    fenced = log.count(FENCED)
    assert fenced == 0, f"{fenced} Bindings fenced off"
    assert s.holders == {s.replica.identity()} and s.transitions == {0}, (s.holders, s.transitions)
    assert len(s.renewals) >= 3
    gap = s.largest_renewal_gap()
    assert gap < RENEW_DEADLINE, f"a renewal came {gap:.1f} s after the previous one"


async def test_burst_at_qps_5_keeps_the_lease(starve: Starvation) -> None:
    """100 Pods at once against client QPS 5 / burst 10: ~20 s of queued Bindings (twice the renew
    deadline). The Lease is renewed every retry period throughout and never changes hands."""
    await starve.add_nodes(2, {"cpu": "16", "memory": "64Gi", "pods": "110"})
    replica = starve.start("starve-qps5", qps=5, burst=10)
    await replica.wait_leading()
    await starve.add_pods(100)
    await _run_until_bound(starve, 100, timeout=240)
    await _assert_lease_kept(starve)
    assert replica.log().count("Successfully bound") >= 100


async def test_startup_backlog_of_800_pods_is_not_fenced_off(starve: Starvation) -> None:
    """800 pending Pods exist before the replica starts (default QPS 50 / burst 100): it becomes
    leader with the whole backlog to bind at once. No Binding is fenced off, none is lost."""
    await starve.add_nodes(4, {"cpu": "64", "memory": "256Gi", "pods": "250"})
    await starve.add_pods(800)
    replica = starve.start("starve-backlog", qps=50, burst=100)
    await replica.wait_leading(timeout=120)
    await _run_until_bound(starve, 800, timeout=480)
    await _assert_lease_kept(starve)
