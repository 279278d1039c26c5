"""GPU nodes as they really are (issue 17), live: ``py-scheduler run`` on the real test bed.

One node per class, built from the public label sets of ``tests/unit/plugins/gpu/real_nodes.py``
(GPU Operator MIG single, MIG mixed, time-slicing, a stale GFD node whose device plugin is gone, a
GKE L4 node) plus two plain 8-GPU A100 nodes for packing. Each Pod selects its class's node by
``kubernetes.io/hostname``, so its FailedScheduling message carries that node's GPUFilter reason
(with the label / allocatable disagreement where there is one). Checks, per class: a Pod opting out
of slices (``whole-gpu``) never lands on MIG slices, a ``mig-profile`` Pod does, and so does a plain
``nvidia.com/gpu: 1`` (issue 30: the kubelet grants it a slice); a ``nvidia.com/mig-<profile>`` Pod is
model-checked; on a time-sliced node whose device plugin fails requests greater than one (node label)
a 2-replica Pod waits, one share binds; a stale ``gpu.count`` offers nothing; a GKE node matches
``gpu-model: L4``; 2-GPU Pods pack onto the
A100 already holding 4 GPUs, so an 8-GPU Pod still finds the other node whole.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client

from tests.e2e.helpers import PAUSE_IMAGE, Testbed, create_node, pod_events, unique_name, wait_for
from tests.e2e.test_gpu import GROUP_LABEL, GPUFleet
from tests.unit.plugins.gpu import real_nodes as rn

HOST = "kubernetes.io/hostname"


class InventoryFleet(GPUFleet):
    """GPUFleet with Nodes of arbitrary labels / allocatable and Pods of arbitrary resources."""

    async def real_node(self, kind: str, template: Any) -> str:
        name = unique_name(f"gpu-{kind}")
        obj = template(name)
        alloc = {k: v for k, v in obj["status"]["allocatable"].items()}
        alloc.update({"cpu": "32", "memory": "256Gi", "pods": "110"})
        self.nodes[name] = int(alloc.get("nvidia.com/gpu", "0"))
        await create_node(self.api, name, alloc, labels={GROUP_LABEL: self.group, **obj["metadata"]["labels"]})
        return name

    async def pod_on(self, node: str, resources: dict[str, str] | None, annotations: dict[str, str] | None = None,
                     prefix: str = "gpu-inv") -> str:
        name = unique_name(prefix)
        self.pods.append(name)
        body: dict[str, Any] = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "annotations": dict(annotations or {})},
            "spec": {"schedulerName": "py-scheduler", "terminationGracePeriodSeconds": 0,
                     "nodeSelector": {GROUP_LABEL: self.group, HOST: node},
                     "containers": [{"name": "main", "image": PAUSE_IMAGE, "resources": {
                         "requests": {"cpu": "100m", "memory": "64Mi"}, "limits": dict(resources or {})}}]},
        }
        await self.core.create_namespaced_pod("default", body)
        return name

    async def failed(self, name: str, timeout: float = 30.0) -> str:
        async def msg() -> str | None:
            for reason, m in await pod_events(self.api, name):
                if reason == "FailedScheduling":
                    return m
            return None

        got: str = await wait_for(msg, timeout=timeout, what=f"FailedScheduling for {name}")
        return got


@pytest.fixture
async def inv(testbed: Testbed, api_client: client.ApiClient) -> AsyncIterator[InventoryFleet]:
    f = InventoryFleet(testbed, api_client)
    try:
        yield f
    finally:
        await f.close()


async def test_gpu_node_classes_live(inv: InventoryFleet) -> None:
    mig = await inv.real_node("mig-single", rn.a100_mig_single)
    mixed = await inv.real_node("mig-mixed", rn.a100_mig_mixed)
    shared = await inv.real_node("shared", lambda name: rn.a100_time_sliced(
        name, {"gpu-scheduler/fail-requests-greater-than-one": "true"}))
    stale = await inv.real_node("stale", rn.stale_a100)
    gke = await inv.real_node("gke-l4", rn.gke_l4)
    sched = inv.replica("gpu-inventory")
    await sched.wait_leading()
    model = "gpu-scheduler/gpu-model"

    # MIG single: a Pod refusing slices waits; naming the profile gets a slice, so does a plain request
    whole = await inv.pod_on(mig, {"nvidia.com/gpu": "1"}, {model: "A100", "gpu-scheduler/whole-gpu": "true"})
    sliced = await inv.pod_on(mig, {"nvidia.com/gpu": "1"}, {model: "A100", "gpu-scheduler/mig-profile": "1g.10gb"})
    plain = await inv.pod_on(mig, {"nvidia.com/gpu": "1"})
    # MIG mixed: the profile resource is model-checked; a gpu-count Pod sees why there is no whole GPU
    h100 = await inv.pod_on(mixed, {"nvidia.com/mig-1g.5gb": "1"}, {model: "H100"})
    a100_slice = await inv.pod_on(mixed, {"nvidia.com/mig-1g.5gb": "1"}, {model: "A100"})
    counted = await inv.pod_on(mixed, None, {"gpu-scheduler/gpu-count": "1"})
    # time-slicing with failRequestsGreaterThanOne: 2 replicas in one container wait, one share binds
    five = await inv.pod_on(shared, {"nvidia.com/gpu": "2"})
    share = await inv.pod_on(shared, {"nvidia.com/gpu": "1"}, {model: "A100"})
    # stale GFD labels offer nothing
    ghost = await inv.pod_on(stale, None, {"gpu-scheduler/gpu-count": "1"})
    # GKE labels match a model
    l4 = await inv.pod_on(gke, {"nvidia.com/gpu": "1"}, {model: "L4"})

    got = await inv.wait_bound([sliced, plain, a100_slice, share, l4], timeout=60)
    assert {n: got[n].spec.node_name for n in got} == {sliced: mig, plain: mig, a100_slice: mixed, share: shared,
                                                       l4: gke}
    assert "node(s) had MIG slices, not whole GPUs" in await inv.failed(whole)
    assert "node(s) didn't match the requested GPU model" in await inv.failed(h100)
    assert ("label nvidia.com/gpu.count=1 but no allocatable nvidia.com/gpu: its GPUs are split into MIG "
            "instances") in await inv.failed(counted)
    assert "node(s) had shared GPUs that grant at most 1 per container" in await inv.failed(five)
    assert ("label nvidia.com/gpu.count=8 but no allocatable nvidia.com/gpu: the kubelet grants none"
            in await inv.failed(ghost))
    now = await inv.current()
    assert not any(now[n].spec.node_name for n in (whole, h100, counted, five, ghost))
    assert "Traceback" not in sched.log()


async def test_gpu_pods_pack_live(inv: InventoryFleet) -> None:
    a, b = await inv.a100(), await inv.a100()
    sched = inv.replica("gpu-pack")
    await sched.wait_leading()
    four = await inv.pod(4, prefix="gpu-pack4")
    first = (await inv.wait_bound([four]))[four].spec.node_name
    other = b if first == a else a
    twos = [await inv.pod(2, prefix="gpu-pack2") for _ in range(2)]
    got = await inv.wait_bound(twos)
    assert {got[n].spec.node_name for n in twos} == {first}  # binpack: onto the partly used node
    eight = await inv.pod(8, prefix="gpu-pack8")
    assert (await inv.wait_bound([eight]))[eight].spec.node_name == other
    inv.check(await inv.current())
    assert "Traceback" not in sched.log()
