"""``py-scheduler run`` on the real test bed with the plugins that need more than a Binding:

* VolumeBinding: a Pod whose PVC is unbound (WaitForFirstConsumer class with a provisioner) would need
  PreBind's PVC update (the selected-node annotation) that py-scheduler does not make: FailedScheduling
  with VolumeBinding's message, PodScheduled=False/Unschedulable, never bound. A Pod whose PVC is already
  bound to a PV with node affinity is bound to that node.
* DynamicResources (resource.k8s.io/v1, served by the bed's kube-apiserver v1.37): a Pod whose
  ResourceClaim has to be allocated is bound after PreBind wrote the allocation and the reservation
  (the side-by-side DRA cases are in test_dra.py).
* GPU gauges: after a GPU Pod is bound, ``/metrics`` shows ``py_scheduler_gpu_allocated`` for its node.

Each test has its own Nodes, labelled with a per-test value its Pods select, and its own objects.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from tests.e2e.helpers import (
    PAUSE_IMAGE,
    Testbed,
    create_node,
    delete_node,
    delete_pod,
    events_v1,
    unique_name,
    wait_for,
    wait_for_pod_scheduled,
)
from tests.e2e.scheduler_proc import SchedulerProcess, running_scheduler

GROUP_LABEL = "py-scheduler-e2e/integration"
DRIVER = "csi.py-scheduler-e2e.example.com"
DRA_DRIVER = "gpu.py-scheduler-e2e.example.com"
A100 = "NVIDIA-A100-SXM4-40GB"


async def _ignore_404(coro: Awaitable[Any]) -> None:
    try:
        await coro
    except ApiException as e:
        if e.status != 404:
            raise


class Objects:
    """What a test creates, deleted at the end (Pods first, then claims, then cluster objects)."""

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.group = unique_name("int")
        self.nodes: list[str] = []
        self.pods: list[str] = []
        self.cleanups: list[Callable[[], Awaitable[Any]]] = []

    async def node(self, prefix: str, allocatable: dict[str, str] | None = None,
                   labels: dict[str, str] | None = None) -> str:
        name = unique_name(prefix)
        self.nodes.append(name)
        await create_node(self.api, name, allocatable or {"cpu": "4", "memory": "8Gi", "pods": "110"},
                          labels={GROUP_LABEL: self.group, **(labels or {})})
        return name

    async def pod(self, prefix: str, *, requests: dict[str, str] | None = None, limits: dict[str, str] | None = None,
                  **spec: Any) -> str:
        name = unique_name(prefix)
        self.pods.append(name)
        res: dict[str, Any] = {"requests": {"cpu": "100m", "memory": "64Mi", **(requests or {})}}
        if limits:
            res["limits"] = limits
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
                "spec": {"schedulerName": "py-scheduler", "terminationGracePeriodSeconds": 0,
                         "nodeSelector": {GROUP_LABEL: self.group},
                         "containers": [{"name": "main", "image": PAUSE_IMAGE, "resources": res}], **spec}}
        await self.core.create_namespaced_pod("default", body)
        return name

    def later(self, fn: Callable[[], Awaitable[Any]]) -> None:
        self.cleanups.append(fn)

    async def close(self) -> None:
        await asyncio.gather(*(delete_pod(self.api, p) for p in self.pods), return_exceptions=True)
        for fn in reversed(self.cleanups):
            try:
                await _ignore_404(fn())
            except Exception as e:  # cleanup must go on
                print(f"cleanup failed: {e!r}")
        for n in self.nodes:
            await delete_node(self.api, n)


@pytest.fixture
async def objs(api_client: client.ApiClient) -> AsyncIterator[Objects]:
    o = Objects(api_client)
    try:
        yield o
    finally:
        await o.close()


async def failed_scheduling(api: client.ApiClient, pod: str, needle: str) -> list[str]:
    """Notes of the events.k8s.io/v1 FailedScheduling Events about ``pod`` that contain ``needle``."""
    return [e.note for e in await events_v1(api)
            if e.regarding and e.regarding.name == pod and e.reason == "FailedScheduling" and needle in (e.note or "")]


async def assert_failed_not_bound(api: client.ApiClient, pod: str, needle: str) -> str:
    """Wait for FailedScheduling containing ``needle``; the Pod is unbound with PodScheduled=False
    (Unschedulable) carrying the same message. Returns the event's note."""
    notes = await wait_for(lambda: failed_scheduling(api, pod, needle), timeout=60,
                           what=f"FailedScheduling for {pod} containing {needle!r}")
    note = notes[0]

    async def condition() -> Any:
        p = await client.CoreV1Api(api).read_namespaced_pod(pod, "default")
        assert not p.spec.node_name, f"{pod} was bound to {p.spec.node_name}"
        cond = next((c for c in p.status.conditions or [] if c.type == "PodScheduled"), None)
        return cond if cond is not None and cond.message == note else None

    cond = await wait_for(condition, timeout=30, what=f"PodScheduled condition of {pod}")
    assert (cond.status, cond.reason) == ("False", "Unschedulable")
    return note


def _no_bind(sched: SchedulerProcess, pod: str) -> None:
    assert f"Successfully bound pod to node pod=default/{pod} " not in sched.log()


# -- VolumeBinding -----------------------------------------------------------------------------------------
# Unbound WaitForFirstConsumer claims are bound / provisioned by VolumeBinding's PreBind now: see
# tests/e2e/test_volume_binding.py (side by side with kube-scheduler, kube-controller-manager running).


async def test_bound_claim_schedules_onto_the_volumes_node(testbed: Testbed, api_client: client.ApiClient,
                                                           objs: Objects) -> None:
    # The two other nodes are bigger, so LeastAllocated would pick them without the PV's node affinity.
    big = {"cpu": "16", "memory": "32Gi", "pods": "110"}
    await objs.node("vb-big", big)
    target = await objs.node("vb-pv")
    await objs.node("vb-big", big)
    pv, claim = unique_name("pv"), unique_name("bound")
    await objs.core.create_persistent_volume({
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "",
                 "persistentVolumeReclaimPolicy": "Retain",
                 "csi": {"driver": DRIVER, "volumeHandle": pv},
                 "claimRef": {"namespace": "default", "name": claim},
                 "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                     {"key": "kubernetes.io/hostname", "operator": "In", "values": [target]}]}]}}}})
    objs.later(lambda: objs.core.delete_persistent_volume(pv))
    await objs.core.create_namespaced_persistent_volume_claim("default", {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": claim, "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "", "volumeName": pv,
                 "resources": {"requests": {"storage": "1Gi"}}}})
    objs.later(lambda: objs.core.delete_namespaced_persistent_volume_claim(claim, "default"))
    async with running_scheduler(testbed, "int-volume-bound", verbosity=4):
        pod = await objs.pod("bound-pod", requests={"cpu": "1"},
                             volumes=[{"name": "v", "persistentVolumeClaim": {"claimName": claim}}])
        bound = await wait_for_pod_scheduled(api_client, pod, timeout=60)
        assert bound.spec.node_name == target
        assert await failed_scheduling(api_client, pod, "") == []


# -- DynamicResources ----------------------------------------------------------------------------------------
async def _dra_served(api: client.ApiClient) -> bool:
    try:
        groups = await client.ApisApi(api).get_api_versions()
    except ApiException:
        return False
    return any(g.name == "resource.k8s.io" and any(v.version == "v1" for v in g.versions) for g in groups.groups)


async def test_claim_needing_allocation_is_allocated_then_bound(testbed: Testbed, api_client: client.ApiClient,
                                                     objs: Objects) -> None:
    # DynamicResourceAllocation is GA in 1.37: the bed's kube-apiserver must serve resource.k8s.io/v1.
    assert await _dra_served(api_client), "resource.k8s.io/v1 is not served by the bed's kube-apiserver"
    custom = client.CustomObjectsApi(api_client)
    g, v = "resource.k8s.io", "v1"
    dclass, rslice, claim = unique_name("e2e-gpu"), unique_name("slice"), unique_name("claim")
    node = await objs.node("dra")
    await custom.create_cluster_custom_object(g, v, "deviceclasses", {
        "apiVersion": f"{g}/{v}", "kind": "DeviceClass", "metadata": {"name": dclass},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRA_DRIVER}"'}}]}})
    objs.later(lambda: custom.delete_cluster_custom_object(g, v, "deviceclasses", dclass))
    await custom.create_cluster_custom_object(g, v, "resourceslices", {
        "apiVersion": f"{g}/{v}", "kind": "ResourceSlice", "metadata": {"name": rslice},
        "spec": {"driver": DRA_DRIVER, "nodeName": node,
                 "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                 "devices": [{"name": "gpu-0"}, {"name": "gpu-1"}]}})
    objs.later(lambda: custom.delete_cluster_custom_object(g, v, "resourceslices", rslice))
    await custom.create_namespaced_custom_object(g, v, "default", "resourceclaims", {
        "apiVersion": f"{g}/{v}", "kind": "ResourceClaim", "metadata": {"name": claim},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": dclass,
                                                                      "allocationMode": "ExactCount",
                                                                      "count": 1}}]}}})
    objs.later(lambda: custom.delete_namespaced_custom_object(g, v, "default", "resourceclaims", claim))
    async with running_scheduler(testbed, "int-dra", verbosity=4) as sched:
        pod = await objs.pod("dra-pod", resourceClaims=[{"name": "gpu", "resourceClaimName": claim}])
        bound = await wait_for_pod_scheduled(api_client, pod, timeout=30)
        assert bound.spec.node_name == node, sched.log()[-3000:]
    stored = await custom.get_namespaced_custom_object(g, v, "default", "resourceclaims", claim)
    status = stored.get("status") or {}
    assert [r["device"] for r in status["allocation"]["devices"]["results"]] == ["gpu-0"]
    assert [r["name"] for r in status["reservedFor"]] == [pod]
    assert "resource.kubernetes.io/delete-protection" in stored["metadata"]["finalizers"]


# -- GPU gauges ------------------------------------------------------------------------------------------------
async def test_gpu_gauges_move_when_a_gpu_pod_is_bound(testbed: Testbed, api_client: client.ApiClient,
                                                       objs: Objects) -> None:
    node = await objs.node("gauge", {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "8"},
                           labels={"nvidia.com/gpu.product": A100, "nvidia.com/gpu.memory": "40960",
                                   "nvidia.com/gpu.count": "8"})
    # the gauges, not the transport (HTTPS + delegated auth: test_deploy_rbac.py)
    async with running_scheduler(testbed, "int-gpu-gauges", verbosity=2, extra_args=["--plain-http"]) as sched:
        m = re.search(r"serving /metrics, /healthz, /livez, /readyz on [^:]+:(\d+)", sched.log())
        assert m is not None, sched.log()[-2000:]
        url = f"http://127.0.0.1:{m.group(1)}/metrics"

        def sample(text: str, name: str) -> float | None:
            for line in text.splitlines():
                if line.startswith(name + "{") and f'node="{node}"' in line and f'model="{A100}"' in line:
                    return float(line.rsplit(" ", 1)[1])
            return None

        async with aiohttp.ClientSession() as http:
            async def gauges() -> tuple[float, float] | None:
                async with http.get(url) as r:
                    text = await r.text()
                a, f = sample(text, "py_scheduler_gpu_allocated"), sample(text, "py_scheduler_gpu_free")
                return (a, f) if a is not None and f is not None else None

            before = await wait_for(gauges, timeout=30, what=f"GPU gauges for {node}")
            assert before == (0.0, 8.0)
            pod = await objs.pod("gauge-pod", requests={"nvidia.com/gpu": "3"}, limits={"nvidia.com/gpu": "3"})
            bound = await wait_for_pod_scheduled(api_client, pod, timeout=60)
            assert bound.spec.node_name == node

            async def allocated() -> tuple[float, float] | None:
                got = await gauges()
                return got if got is not None and got[0] > 0 else None

            assert await wait_for(allocated, timeout=30, what="py_scheduler_gpu_allocated > 0") == (3.0, 5.0)
