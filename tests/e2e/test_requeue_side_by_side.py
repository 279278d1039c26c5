"""Which cluster events send an unschedulable Pod back to be tried, py-scheduler and kube-scheduler v1.37.2
side by side: NodeResourcesFit's queueing hints.

Each scheduler gets a Pod NodeResourcesFit rejects on a Node of its own; then an event that cannot help
it, then one that can. Once each event has been handled (``scheduler_event_handling_duration_seconds``
counted it, so the hints ran), ``scheduler_queue_incoming_pods_total{event=...}`` says how many Pods it
moved out of the unschedulable ones: none for the useless event, the Pod for the useful one, in both
schedulers. (The DeviceClass hint, ``isSchedulableAfterDeviceClassEvent``, is checked in
tests/unit/plugins/test_node_resources_fit_events.py.) An
adversarial run found py-scheduler retrying after each useless event below (one more failed attempt
and FailedScheduling event each time), where kube-scheduler's hints say QueueSkip:

- a Node added without the extended resource the Pod asks (``isFit``; no DeviceClass backs it);
- a Pod on the Node scaled down in memory when the Pod asks only cpu
  (``haveEnoughRelevantResourcesDecreased``);
- PodTopologySpread under profile default constraints: a Pod of another app added where the Pod's
  Service-selected mates crowd a zone (the hints build the default constraints' selector, as
  ``getConstraints``).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from tests.e2e.helpers import PAUSE_IMAGE, Testbed, create_node, unique_name, wait_for
from tests.e2e.test_gang import GangBed
from tests.e2e.test_metrics_side_by_side import scrape, start_both

pytestmark = [pytest.mark.timeout(300)]

ZONE = "topology.kubernetes.io/zone"

class RequeueBed(GangBed):
    """The gang tests' bed (Nodes, Pods, both schedulers, cleaned up) plus the Services a case makes."""

    def __init__(self, testbed: Testbed, api: client.ApiClient, tmp: Path) -> None:
        super().__init__(testbed, api, tmp)
        self.services: list[str] = []

    async def close(self) -> None:
        for name in self.services:
            await self.core.delete_namespaced_service(name, "default")
        await super().close()


@pytest.fixture
async def bed(testbed: Testbed, api_client: client.ApiClient, tmp_path: Path) -> AsyncIterator[RequeueBed]:
    b = RequeueBed(testbed, api_client, tmp_path)
    try:
        yield b
    finally:
        await b.close()


def _sample(text: str, name: str, **labels: str) -> float:
    """The sum of the samples ``name`` whose labels include ``labels`` (0 when there is none)."""
    total = 0.0
    for m in re.finditer(rf"^{re.escape(name)}(?:\{{([^}}]*)\}})? (\S+)$", text, re.M):
        have = dict(re.findall(r'([a-zA-Z_]+)="([^"]*)"', m.group(1) or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            total += float(m.group(2))
    return total


def _moved(text: str) -> float:
    """Pods cluster events moved to activeQ or backoffQ (not new Pods, not the backoff's own pops)."""
    incoming = "scheduler_queue_incoming_pods_total"
    return (_sample(text, incoming, queue="active") + _sample(text, incoming, queue="backoff")
            - _sample(text, incoming, event="PopFromBackoffQ") - _sample(text, incoming, event="UnscheduledPodAdd"))


class Run:
    """One scheduler's objects and its view of them through its ``/metrics``. Each run's Pods ask one
    unit of an extended resource of their own (``resource``), so every other run's Node rejects them
    for NodeResourcesFit too, and that plugin is their only rejector in both schedulers."""

    def __init__(self, bed: RequeueBed, scheduler: str, url: str) -> None:
        self.bed, self.scheduler, self.url = bed, scheduler, url
        self.tag = unique_name("rq")
        self.resource = f"{self.tag}.example.com/slot"

    async def node(self, allocatable: dict[str, str], slots: int = 0, zone: str = "") -> str:
        name = unique_name(f"{self.tag}-n")
        self.bed.nodes[name] = 0
        extra = {self.resource: str(slots)} if slots else {}
        await create_node(self.bed.api, name, {"pods": "110", **allocatable, **extra},
                          labels={ZONE: zone} if zone else None)
        return name

    async def pod(self, requests: dict[str, str], node: str = "", labels: dict[str, str] | None = None) -> str:
        name = unique_name(f"{self.tag}-p")
        self.bed.pods.append(name)
        resources: dict[str, Any] = {"requests": dict(requests)}
        spec: dict[str, Any] = {"terminationGracePeriodSeconds": 0,
                                "containers": [{"name": "main", "image": PAUSE_IMAGE, "resources": resources}]}
        if node:
            spec["nodeName"] = node
        else:  # extended resources are not overcommitted: their limits are their requests
            spec["schedulerName"] = self.scheduler
            resources["requests"][self.resource] = "1"
            resources["limits"] = {self.resource: "1"}
        await self.bed.core.create_namespaced_pod("default", {"apiVersion": "v1", "kind": "Pod",
                                                              "metadata": {"name": name, "labels": labels or {}},
                                                              "spec": spec})
        return name

    async def unschedulable(self) -> float:
        return _sample(await scrape(self.url), "scheduler_pending_pods", queue="unschedulable")

    async def after(self, event: str, act: Callable[[], Awaitable[object]]) -> float:
        """Do ``act``, wait until this scheduler has handled one more ``event`` (the act's last), and
        return how many Pods the act's events moved out of the unschedulable ones."""
        text = await scrape(self.url)
        handled_before = _sample(text, "scheduler_event_handling_duration_seconds_count", event=event)
        moved_before = _moved(text)
        await act()

        async def handled() -> str | None:
            text = await scrape(self.url)
            done = _sample(text, "scheduler_event_handling_duration_seconds_count", event=event) > handled_before
            return text if done else None

        text = await wait_for(handled, timeout=30, what=f"{self.scheduler} handled {event}")
        return _moved(text) - moved_before


async def _rejected(run: Run, pod: str) -> None:
    async def waiting() -> bool:
        p = await run.bed.core.read_namespaced_pod(pod, "default")
        failed = any(c.type == "PodScheduled" and c.reason == "Unschedulable" for c in p.status.conditions or ())
        return failed and await run.unschedulable() == 1

    await wait_for(waiting, timeout=60, what=f"{pod} unschedulable in {run.scheduler}'s queue")


async def _extended_resource(run: Run) -> list[float]:
    """A Node without the Pod's extended resource cannot help (isFit), one with it can. A created
    Node's allocatable arrives with its status write (NodeUpdateNodeAllocatable)."""
    await run.node({"cpu": "8", "memory": "16Gi"})
    await _rejected(run, await run.pod({"cpu": "100m"}))
    return [await run.after("NodeUpdateNodeAllocatable", lambda: run.node({"cpu": "8", "memory": "16Gi"})),
            await run.after("NodeUpdateNodeAllocatable", lambda: run.node({"cpu": "8", "memory": "16Gi"}, slots=1))]


async def _scale_down(run: Run) -> list[float]:
    """A Pod on the Node shrinking its memory cannot help a Pod short of cpu; shrinking its cpu can
    (haveEnoughRelevantResourcesDecreased)."""
    node = await run.node({"cpu": "2", "memory": "4Gi"}, slots=1)
    filler = await run.pod({"cpu": "1500m", "memory": "1Gi"}, node=node)
    await _rejected(run, await run.pod({"cpu": "1"}))

    async def resize(requests: dict[str, str]) -> None:
        await run.bed.core.patch_namespaced_pod_resize(filler, "default", {
            "spec": {"containers": [{"name": "main", "resources": {"requests": requests}}]}})

    return [await run.after("AssignedPodUpdate", lambda: resize({"memory": "512Mi"})),
            await run.after("AssignedPodUpdate", lambda: resize({"cpu": "500m"}))]


async def _default_spread(run: Run) -> list[float]:
    """Profile default constraints (``defaultingType: List``, DoNotSchedule on the zone), whose selector
    comes from the Service selecting the Pod: a Pod of another app added in the crowded zone cannot
    help, one of the Pod's own relabelled away can (``buildDefaultConstraints`` in the hints)."""
    app = {"app": run.tag}
    await run.bed.core.create_namespaced_service("default", {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": run.tag},
        "spec": {"selector": app, "ports": [{"port": 80}]}})
    run.bed.services.append(run.tag)
    crowded = await run.node({"cpu": "8", "memory": "16Gi"}, slots=1, zone="a")
    await run.node({"cpu": "500m", "memory": "16Gi"}, slots=1, zone="b")
    mates = [await run.pod({"cpu": "100m"}, node=crowded, labels=app) for _ in range(2)]
    await _rejected(run, await run.pod({"cpu": "1"}, labels=app))

    async def relabel() -> None:
        await run.bed.core.patch_namespaced_pod(mates[0], "default", {"metadata": {"labels": {"app": "gone"}}})

    return [await run.after("AssignedPodAdd", lambda: run.pod({"cpu": "100m"}, node=crowded,
                                                                labels={"app": "unrelated"})),
            await run.after("AssignedPodUpdate", relabel)]


SPREAD_DEFAULTS = [{"name": "PodTopologySpread", "args": {
    "defaultingType": "List",
    "defaultConstraints": [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule"}]}}]
CASES = {"extended-resource": _extended_resource, "scale-down": _scale_down, "default-spread": _default_spread}


@pytest.mark.parametrize("case", sorted(CASES))
async def test_a_useless_event_leaves_the_pod_waiting_and_a_useful_one_moves_it_side_by_side(
        bed: RequeueBed, case: str) -> None:
    names, urls, py = await start_both(bed, "requeue", SPREAD_DEFAULTS if case == "default-spread" else None)
    got = {impl: await CASES[case](Run(bed, names[impl], urls[impl])) for impl in ("kube", "py")}
    assert got["kube"] == [0, 1], got  # the oracle: the useless event moves nothing, the useful one the Pod
    assert got["py"] == got["kube"], got
    assert "Traceback" not in py.log()
