"""A required node affinity of many terms cannot stall py-scheduler, side by side with kube-scheduler.

20 000 terms against 200 Nodes are 8 000 000 requirement checks the first time they are judged: ~4 s
on the one thread that also answers ``/livez`` (an adversarial run: 25 000 terms against 500 Nodes
blocked it 7 s per Pod). py-scheduler's NodeAffinity stops each cycle at ``CYCLE_REQUIREMENT_CHECKS``
with a FailedScheduling event naming the field, keeps the verdicts judged so far, and the retried Pod
ends on the Node kube-scheduler picks, while ``/livez`` keeps answering.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes_asyncio import client

from tests.e2e.helpers import (
    Testbed,
    create_node,
    create_pod,
    delete_node,
    delete_pod,
    unique_name,
    wait_for,
    wait_for_failed_scheduling,
)
from tests.e2e.test_dra_cel_cost import probing, py_scheduler

pytestmark = pytest.mark.timeout(400)

KUBE = "kube-na-bound"
NODES, TERMS, WANTED = 200, 20_000, 137


@pytest.fixture(scope="module")
def kube_na(testbed: Testbed) -> Iterator[str]:
    """An upstream kube-scheduler serving profile ``kube-na-bound`` on its own Lease."""
    testbed.start_kube_scheduler(KUBE, config={
        "leaderElection": {"leaderElect": True, "resourceNamespace": "kube-system", "resourceName": KUBE},
        "profiles": [{"schedulerName": KUBE}]})
    yield KUBE
    testbed.stop_kube_scheduler(KUBE)


def _affinity(tag: str) -> dict[str, Any]:
    """TERMS terms no Node satisfies (each a label no Node has), then one naming Node WANTED of this run."""
    terms: list[dict[str, Any]] = [{"matchExpressions": [{"key": f"k{j}", "operator": "Exists"}]}
                                   for j in range(TERMS)]
    terms.append({"matchExpressions": [{"key": "na-run", "operator": "In", "values": [tag]},
                                       {"key": "i", "operator": "In", "values": [str(WANTED)]}]})
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}


async def _node_of(api: client.ApiClient, name: str) -> str | None:
    pod = await client.CoreV1Api(api).read_namespaced_pod(name, "default")
    return pod.spec.node_name or None


async def test_a_huge_required_affinity_is_judged_over_several_cycles_side_by_side(
        testbed: Testbed, api_client: client.ApiClient, kube_na: str) -> None:
    tag = unique_name("na")
    nodes = [f"{tag}-{i}" for i in range(NODES)]
    pods: list[str] = []
    try:
        for i, name in enumerate(nodes):
            await create_node(api_client, name, labels={"na-run": tag, "i": str(i)})
        kube_pod = f"{tag}-kube"
        await create_pod(api_client, kube_pod, scheduler_name=kube_na, spec={"affinity": _affinity(tag)})
        pods.append(kube_pod)
        want: str = await wait_for(lambda: _node_of(api_client, kube_pod), timeout=60,
                                   interval=0.2, what="kube-scheduler's bind")
        assert want == f"{tag}-{WANTED}"
        async with py_scheduler(testbed) as (sched, livez):
            py_pod = f"{tag}-py"
            async with probing(livez) as latencies:
                await asyncio.sleep(0)  # the probe's first answer is taken with the loop idle
                await create_pod(api_client, py_pod, scheduler_name="py-dra-cost", spec={"affinity": _affinity(tag)})
                pods.append(py_pod)
                event = await wait_for_failed_scheduling(api_client, py_pod, "py-scheduler's bound on one cycle",
                                                         timeout=120)
                got: str = await wait_for(lambda: _node_of(api_client, py_pod),
                                          timeout=150, interval=0.2, what="py-scheduler's bind")
            assert got == want
            assert event.startswith(
                'running "NodeAffinity" filter plugin: spec.affinity.nodeAffinity.requiredDuringSchedulingIgnored'
                f"DuringExecution: {TERMS + 1} node selector terms ({2 * TERMS + 3} requirement checks per node) used "
                "up this scheduling cycle's 2000000 checks, py-scheduler's bound on one cycle; the nodes judged so "
                "far are remembered and the Pod is retried"), event
            assert len(latencies) >= 5 and max(latencies) < 2.5, latencies
            assert "Traceback" not in sched.log()
    finally:
        await asyncio.gather(*(delete_pod(api_client, p) for p in pods), return_exceptions=True)
        for name in nodes:
            await delete_node(api_client, name)
