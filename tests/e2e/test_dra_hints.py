"""DynamicResources' queueing hints on the bed: a Pod rejected for lack of devices is not requeued by
another claim's changes, and is requeued (and bound) when a ResourceSlice brings a device.

What the queue did is read from py-scheduler's own ``scheduler_queue_incoming_pods_total{event}``;
the barrier that the claim events have been handled is ``/debug/cache`` showing the claim at its
last resourceVersion (the informers store an object and offer its event to the queue in one step).
No kube-controller-manager: the claims are named, not generated from templates.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client

from bench.bench_lib.soak import serving_port
from tests.e2e.faults import cachediff
from tests.e2e.helpers import Testbed, wait_for
from tests.e2e.scheduler_proc import SchedulerProcess, serving_profile
from tests.e2e.test_deploy_rbac import http_get
from tests.e2e.test_dra import G, Run, V, gpu

PY = "py-dra-hints"

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
async def py_hints(testbed: Testbed) -> AsyncIterator[SchedulerProcess]:
    """py-scheduler serving profile ``py-dra-hints``."""
    async with serving_profile(testbed, PY, verbosity=2) as sched:
        yield sched


def claim_moves(metrics: str) -> dict[str, float]:
    """``queue/event -> count`` of ``scheduler_queue_incoming_pods_total`` samples for claim and slice events."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(metrics):
        for s in fam.samples:
            ev = s.labels.get("event", "")
            if s.name == "scheduler_queue_incoming_pods_total" and ev.startswith(f"{G}/Resource"):
                out[f"{s.labels.get('queue')}/{ev}"] = s.value
    return out


async def test_unrelated_claim_does_not_requeue_and_a_new_slice_does(api_client: client.ApiClient,
                                                                     py_hints: SchedulerProcess) -> None:
    port = serving_port(py_hints)
    assert port is not None
    token = await cachediff.debug_reader_token(api_client)

    async def moves() -> dict[str, float]:
        status, text = await http_get(port, "/metrics", token)
        assert status == 200, text[:300]
        return claim_moves(text)

    async def informers_hold(claim: str, rv: str) -> bool:
        dump = await cachediff.fetch_dump(port, token)
        return bool(dump["informers"].get("ResourceClaim", {}).get(f"default/{claim}") == rv)

    r = Run(api_client, PY)
    try:
        await r.add_nodes(1)
        await r.add_class()
        await r.add_claim("mine", [r.request()])
        await r.add_pod("p", claims=["mine"])
        await r.failed_scheduling("p", "cannot allocate all claims")

        async def parked() -> bool:
            dump = await cachediff.fetch_dump(port, token)
            return bool(dump["queue"].get("unschedulable") == 1)

        await wait_for(parked, timeout=30, what="the Pod among the unschedulable Pods")
        # another Pod's claim: created, then its status written (as a scheduler's allocation would)
        await r.add_claim("other", [r.request()])
        other: dict[str, Any] = await r.custom.patch_namespaced_custom_object_status(
            G, V, "default", "resourceclaims", r.n("other"),
            {"status": {"allocation": {"devices": {"results": [
                {"request": "r0", "driver": r.driver, "pool": r.n("n1"), "device": "gpu-9"}]}}}},
            _content_type="application/merge-patch+json")
        rv = other["metadata"]["resourceVersion"]
        await wait_for(lambda: informers_hold(r.n("other"), rv), timeout=30,
                       what="py-scheduler's informers to hold the other claim's status")
        assert await moves() == {}, "an unrelated claim's events moved the Pod"
        assert await parked()

        await r.add_slice("n1", [gpu("gpu-0")])
        assert await r.bound("p") == r.n("n1")
        got = await moves()
        assert any(k.endswith(f"{G}/ResourceSliceAdd") for k in got), got
        assert not any("ResourceClaim" in k for k in got), got
    finally:
        await r.cleanup()
