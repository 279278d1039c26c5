"""GPU plugins live: ``py-scheduler run`` on the real test bed with a small GPU fleet.

Node objects carry GPU Feature Discovery labels, the ``gpu-scheduler/nvlink-groups`` annotation and
``nvidia.com/gpu`` allocatable (set through the status subresource by ``create_node``). Checks that
the indices Reserve picks reach the Pod as the ``gpu-scheduler/gpu-indices`` annotation with the
Binding (its ``metadata.annotations``), that a burst never shares an index or exceeds a node's GPUs, that deleting a Pod (grace 0)
frees its GPUs for the next one, and that a new leader rebuilds the allocation from the API.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from tests.e2e.helpers import (
    PAUSE_IMAGE,
    Testbed,
    create_node,
    delete_pod,
    pod_events,
    unique_name,
    wait_for,
)
from tests.e2e.scheduler_proc import SchedulerProcess, stop_and_clean_up

GROUP_LABEL = "py-scheduler-e2e/gpu-group"
IDX = "gpu-scheduler/gpu-indices"
A100_GROUPS = ({0, 1, 2, 3}, {4, 5, 6, 7})


class GPUFleet:
    """GPU Nodes, Pods and scheduler replicas of one test; everything is removed at the end."""

    def __init__(self, testbed: Testbed, api: client.ApiClient) -> None:
        self.testbed = testbed
        self.api = api
        self.core = client.CoreV1Api(api)
        self.group = unique_name("gpu")
        self.lease = unique_name("py-sched-gpu")
        self.nodes: dict[str, int] = {}  # name -> GPUs
        self.pods: list[str] = []
        self.replicas: list[SchedulerProcess] = []

    def replica(self, name: str) -> SchedulerProcess:
        p = SchedulerProcess(Path(self.testbed.kubeconfig), Path(self.testbed.dir) / "logs" / f"{name}.log",
                             lease_name=self.lease, verbosity=4)
        p.start()
        self.replicas.append(p)
        return p

    async def node(self, kind: str, gpus: int, labels: dict[str, str],
                   annotations: dict[str, str] | None = None) -> str:
        name = unique_name(f"gpu-{kind}")
        self.nodes[name] = gpus
        alloc = {"cpu": "32", "memory": "256Gi", "pods": "110"}
        if gpus:
            alloc["nvidia.com/gpu"] = str(gpus)
        await create_node(self.api, name, alloc, labels={GROUP_LABEL: self.group, **labels})
        if annotations:
            await self.core.patch_node(name, {"metadata": {"annotations": annotations}})
        return name

    async def a100(self) -> str:
        return await self.node("a100", 8, {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
                                           "nvidia.com/gpu.memory": "40960", "nvidia.com/gpu.count": "8"},
                               {"gpu-scheduler/nvlink-groups": "0-3;4-7"})

    async def h100(self) -> str:
        return await self.node("h100", 8, {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                                           "nvidia.com/gpu.memory": "81559", "nvidia.com/gpu.count": "8",
                                           "gpu-scheduler/max-nvlink-group-size": "8"})

    async def l4(self) -> str:
        return await self.node("l4", 1, {"nvidia.com/gpu.product": "NVIDIA-L4", "nvidia.com/gpu.memory": "23034",
                                         "nvidia.com/gpu.count": "1"})

    async def pod(self, gpus: int, annotations: dict[str, str] | None = None, prefix: str = "gpu-pod") -> str:
        name = unique_name(prefix)
        self.pods.append(name)
        body: dict[str, Any] = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "annotations": dict(annotations or {})},
            "spec": {
                "schedulerName": "py-scheduler",
                "terminationGracePeriodSeconds": 0,
                "nodeSelector": {GROUP_LABEL: self.group},
                "containers": [{"name": "main", "image": PAUSE_IMAGE, "resources": {
                    "requests": {"cpu": "100m", "memory": "64Mi"},
                    "limits": {"nvidia.com/gpu": str(gpus)}}}],
            },
        }
        await self.core.create_namespaced_pod("default", body)
        return name

    async def delete(self, name: str) -> None:
        await delete_pod(self.api, name)
        self.pods.remove(name)

    async def current(self) -> dict[str, Any]:
        """name -> V1Pod for this test's Pods that still exist."""
        pods = await self.core.list_namespaced_pod("default")
        wanted = set(self.pods)
        return {p.metadata.name: p for p in pods.items if p.metadata.name in wanted}

    async def wait_bound(self, names: list[str], timeout: float = 60.0) -> dict[str, Any]:
        async def bound() -> dict[str, Any] | None:
            got = await self.current()
            sel = {n: got[n] for n in names if n in got}
            return sel if len(sel) == len(names) and all(p.spec.node_name for p in sel.values()) else None

        return await wait_for(bound, timeout=timeout, what=f"{len(names)} GPU pods bound")

    def check(self, pods: dict[str, Any]) -> dict[str, set[int]]:
        """Every bound Pod carries indices for its GPUs, in range, disjoint per node; returns node -> used."""
        used: dict[str, set[int]] = {}
        for name, p in pods.items():
            node = p.spec.node_name
            if not node:
                continue
            raw = (p.metadata.annotations or {}).get(IDX)
            assert raw, f"{name} bound to {node} without {IDX}"
            idx = {int(i) for i in raw.split(",")}
            want = int(p.spec.containers[0].resources.limits["nvidia.com/gpu"])
            assert len(idx) == want, (name, raw)
            assert all(0 <= i < self.nodes[node] for i in idx), (name, node, raw)
            assert not used.setdefault(node, set()) & idx, f"{name} shares a GPU index on {node}: {raw}"
            used[node] |= idx
        return used

    async def close(self) -> None:
        await stop_and_clean_up(self.api, self.replicas, self.pods, self.nodes)


@pytest.fixture
async def fleet(testbed: Testbed, api_client: client.ApiClient) -> AsyncIterator[GPUFleet]:
    f = GPUFleet(testbed, api_client)
    try:
        yield f
    finally:
        await f.close()


async def test_gpu_placement_burst_and_delete(fleet: GPUFleet, api_client: client.ApiClient) -> None:
    a100, h100, l4 = await fleet.a100(), await fleet.h100(), await fleet.l4()
    await fleet.node("cpu", 0, {})
    sched = fleet.replica("gpu-main")
    await sched.wait_leading()

    # 2x A100 / 40 GB / NVLink: the A100 node, both GPUs in one NVLink group
    train = await fleet.pod(2, {"gpu-scheduler/gpu-model": "A100", "gpu-scheduler/gpu-memory-gb": "40",
                                "gpu-scheduler/nvlink-required": "true"}, prefix="gpu-train")
    got = await fleet.wait_bound([train])
    assert got[train].spec.node_name == a100
    idx = {int(i) for i in got[train].metadata.annotations[IDX].split(",")}
    assert any(idx <= g for g in A100_GROUPS), idx

    # a model nobody has: FailedScheduling with GPUFilter's reason, never bound
    b200 = await fleet.pod(1, {"gpu-scheduler/gpu-model": "B200"}, prefix="gpu-b200")

    async def failed(name: str) -> str | None:
        for reason, msg in await pod_events(api_client, name):
            if reason == "FailedScheduling":
                return msg
        return None

    msg = await wait_for(lambda: failed(b200), timeout=30, what="FailedScheduling for the B200 pod")
    assert "node(s) didn't match the requested GPU model" in msg, msg

    # a burst of 2-GPU Pods: 6 left on the A100, 8 on the H100, the L4 has 1 -> 7 fit, the 8th waits
    burst = list(await asyncio.gather(*(fleet.pod(2, prefix="gpu-burst") for _ in range(8))))

    async def seven_bound() -> dict[str, Any] | None:
        got = await fleet.current()
        bound = [n for n in burst if got[n].spec.node_name]
        return got if len(bound) == 7 else None

    got = await wait_for(seven_bound, timeout=60, what="7 of 8 burst pods bound")
    used = fleet.check(got)
    assert used[a100] == set(range(8)) and used[h100] == set(range(8)) and l4 not in used
    waiting = next(n for n in burst if not got[n].spec.node_name)
    msg = await wait_for(lambda: failed(waiting), timeout=30, what="FailedScheduling for the 8th burst pod")
    assert msg.startswith("0/"), msg

    # deleting a bound Pod (grace 0) frees its GPUs for the waiting one, at the same indices
    victim = next(n for n in burst if got[n].spec.node_name == h100)
    freed = got[victim].metadata.annotations[IDX]
    await fleet.delete(victim)
    got = await fleet.wait_bound([waiting], timeout=60)
    assert got[waiting].spec.node_name == h100
    assert got[waiting].metadata.annotations[IDX] == freed
    fleet.check(await fleet.current())
    assert "Traceback" not in sched.log()


async def test_new_leader_rebuilds_gpu_allocation(fleet: GPUFleet) -> None:
    """SIGKILL the leader in the middle of a burst: the standby takes over, rebuilds every node's
    allocation from the Pods' annotations and never hands out an index twice."""
    nodes = [await fleet.a100(), await fleet.a100()]
    a = fleet.replica("gpu-le-a")
    await a.wait_leading()
    b = fleet.replica("gpu-le-b")
    await b.wait_log("attempting to acquire leader lease")
    first = list(await asyncio.gather(*(fleet.pod(1, prefix="gpu-le") for _ in range(5))))
    await wait_for(lambda: a.log().count("Successfully bound") >= 3, timeout=60, what="the leader binding")
    a.kill()
    killed = time.monotonic()
    second = list(await asyncio.gather(*(fleet.pod(2, prefix="gpu-le") for _ in range(5))))
    # 16 GPUs: 5 x 1 + 5 x 2 = 15 fit
    got = await fleet.wait_bound(first + second, timeout=90)
    await b.wait_log("became the leader", timeout=5)
    assert time.monotonic() - killed < 60
    used = fleet.check(got)
    assert sum(len(v) for v in used.values()) == 15 and set(used) <= set(nodes)
    assert "Traceback" not in b.log()
