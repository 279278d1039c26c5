"""The in-tree plugins' queueing hints on the bed: a Pod rejected by NodeAffinity is not requeued by
another Pod's binding nor by a Node that does not match it, and is requeued (and bound) when a
matching Node appears (upstream ``nodeaffinity`` ``EventsToRegister`` /
``isSchedulableAfterNodeChange``). Before the plugins registered their events, each of those
unrelated events moved the Pod back to the backoff queue for another failed attempt.

What the queue did is read from py-scheduler's own ``scheduler_queue_incoming_pods_total{event}``;
the barrier that an event has been handled is ``/debug/cache`` showing the object at its last
resourceVersion (the informers store an object and offer its event to the queue in one step).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import partial

import pytest
from kubernetes_asyncio import client

from bench.bench_lib.soak import serving_port
from tests.e2e.faults import cachediff
from tests.e2e.helpers import (
    PAUSE_IMAGE,
    Testbed,
    create_node,
    create_pod,
    delete_node,
    delete_pod,
    unique_name,
    wait_for,
    wait_for_failed_scheduling,
    wait_for_pod_scheduled,
)
from tests.e2e.scheduler_proc import SchedulerProcess, serving_profile
from tests.e2e.test_deploy_rbac import http_get

PY = "py-queue-hints"

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
async def py_hints(testbed: Testbed) -> AsyncIterator[SchedulerProcess]:
    """py-scheduler serving profile ``py-queue-hints``."""
    async with serving_profile(testbed, PY, verbosity=2) as sched:
        yield sched


def pod_and_node_moves(metrics: str) -> dict[str, float]:
    """``queue/event -> count`` of ``scheduler_queue_incoming_pods_total`` for Pod and Node events
    (``AssignedPodAdd``, ``NodeAdd``, ``NodeUpdateNodeLabel``...)."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(metrics):
        for s in fam.samples:
            ev = s.labels.get("event", "")
            if s.name == "scheduler_queue_incoming_pods_total" and ev.startswith(("AssignedPod", "Node")):
                out[f"{s.labels.get('queue')}/{ev}"] = s.value
    return out


async def test_node_affinity_pod_waits_for_a_matching_node(api_client: client.ApiClient,
                                                          py_hints: SchedulerProcess) -> None:
    port = serving_port(py_hints)
    assert port is not None
    token = await cachediff.debug_reader_token(api_client)
    core = client.CoreV1Api(api_client)
    zone = unique_name("zone")
    other_node, match_node = unique_name("qh-other"), unique_name("qh-match")
    waiting, bystander = unique_name("qh-waiting"), unique_name("qh-bystander")

    async def moves() -> dict[str, float]:
        status, text = await http_get(port, "/metrics", token)
        assert status == 200, text[:300]
        return pod_and_node_moves(text)

    async def informers_hold(kind: str, key: str, rv: str) -> bool:
        dump = await cachediff.fetch_dump(port, token)
        return bool(dump["informers"].get(kind, {}).get(key) == rv)

    async def parked() -> bool:
        dump = await cachediff.fetch_dump(port, token)
        return bool(dump["queue"].get("unschedulable") == 1)

    try:
        node = await create_node(api_client, other_node, labels={"zone": f"{zone}-b"})
        await create_pod(api_client, waiting, scheduler_name=PY, spec={"nodeSelector": {"zone": zone}})
        await wait_for_failed_scheduling(api_client, waiting, "didn't match Pod's node affinity/selector")
        ok: bool = await wait_for(parked, timeout=30, what="the Pod among the unschedulable Pods")
        before = await moves()

        # Unrelated events: another Pod bound, a Node relabelled to another zone.
        await create_pod(api_client, bystander, scheduler_name=PY)
        await wait_for_pod_scheduled(api_client, bystander)
        bound = await core.read_namespaced_pod(bystander, "default")
        ok = await wait_for(partial(informers_hold, "Pod", f"default/{bystander}", bound.metadata.resource_version),
                            timeout=30, what="py-scheduler's informers to hold the bound bystander")
        node = await core.patch_node(other_node, {"metadata": {"labels": {"zone": f"{zone}-c"}}})
        ok = await wait_for(partial(informers_hold, "Node", other_node, node.metadata.resource_version),
                            timeout=30, what="py-scheduler's informers to hold the relabelled Node")
        assert ok and await moves() == before, "an unrelated binding or Node change moved the Pod"
        assert await parked()

        # A matching Node: requeued and bound there.
        await create_node(api_client, match_node, labels={"zone": zone})
        got = await wait_for_pod_scheduled(api_client, waiting)
        assert got.spec.node_name == match_node
        after = await moves()
        # The matching Node's add moves it (its status, allocatable included, comes in a second write:
        # a retry in between fails for NodeResourcesFit and is requeued by NodeUpdateNodeAllocatable).
        delta = {k.split("/", 1)[1]: v - before.get(k, 0.0) for k, v in after.items() if before.get(k) != v}
        assert delta.get("NodeAdd") == 1.0, (before, after)
        assert set(delta) <= {"NodeAdd", "NodeUpdateNodeAllocatable"}, (before, after)
    finally:
        for p in (waiting, bystander):
            await delete_pod(api_client, p)
        for n in (other_node, match_node):
            await delete_node(api_client, n)


async def test_gpu_model_pod_waits_for_a_gpu_node_change(api_client: client.ApiClient,
                                                         py_hints: SchedulerProcess) -> None:
    """A Pod GPUFilter rejected (wrong GPU model) is not requeued by another Pod's binding nor by a
    relabel of a Node offering no GPU, and is requeued and bound when the GPU node's product label
    changes to the wanted model (``plugins/gpu/events.py``)."""
    port = serving_port(py_hints)
    assert port is not None
    token = await cachediff.debug_reader_token(api_client)
    core = client.CoreV1Api(api_client)
    gpu_node, plain_node = unique_name("qh-gpu"), unique_name("qh-plain")
    waiting, bystander = unique_name("qh-gpu-waiting"), unique_name("qh-gpu-bystander")

    async def moves() -> dict[str, float]:
        status, text = await http_get(port, "/metrics", token)
        assert status == 200, text[:300]
        return pod_and_node_moves(text)

    async def informers_hold(kind: str, key: str, rv: str) -> bool:
        dump = await cachediff.fetch_dump(port, token)
        return bool(dump["informers"].get(kind, {}).get(key) == rv)

    async def parked() -> bool:
        dump = await cachediff.fetch_dump(port, token)
        return bool(dump["queue"].get("unschedulable") == 1)

    try:
        await create_node(api_client, gpu_node, {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "8"},
                          labels={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB", "nvidia.com/gpu.count": "8"})
        await create_node(api_client, plain_node, labels={"role": "a"})
        await core.create_namespaced_pod("default", {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": waiting, "annotations": {"gpu-scheduler/gpu-model": "H100"}},
            "spec": {"schedulerName": PY, "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "c", "image": PAUSE_IMAGE, "resources": {
                         "requests": {"cpu": "100m"}, "limits": {"nvidia.com/gpu": "1"}}}]}})
        await wait_for_failed_scheduling(api_client, waiting, "didn't match the requested GPU model")
        ok: bool = await wait_for(parked, timeout=30, what="the Pod among the unschedulable Pods")
        before = await moves()

        # Unrelated events: another Pod bound, a Node without GPUs relabelled.
        await create_pod(api_client, bystander, scheduler_name=PY)
        await wait_for_pod_scheduled(api_client, bystander)
        bound = await core.read_namespaced_pod(bystander, "default")
        ok = await wait_for(partial(informers_hold, "Pod", f"default/{bystander}", bound.metadata.resource_version),
                            timeout=30, what="py-scheduler's informers to hold the bound bystander")
        node = await core.patch_node(plain_node, {"metadata": {"labels": {"role": "b"}}})
        ok = await wait_for(partial(informers_hold, "Node", plain_node, node.metadata.resource_version),
                            timeout=30, what="py-scheduler's informers to hold the relabelled Node")
        assert ok and await moves() == before, "an unrelated binding or Node change moved the GPU Pod"
        assert await parked()

        # The GPU node now offers the wanted model: requeued and bound there.
        await core.patch_node(gpu_node, {"metadata": {"labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}})
        got = await wait_for_pod_scheduled(api_client, waiting)
        assert got.spec.node_name == gpu_node
        after = await moves()
        delta = {k.split("/", 1)[1]: v - before.get(k, 0.0) for k, v in after.items() if before.get(k) != v}
        assert delta.get("NodeUpdateNodeLabel") == 1.0, (before, after)
    finally:
        for p in (waiting, bystander):
            await delete_pod(api_client, p)
        for n in (gpu_node, plain_node):
            await delete_node(api_client, n)
