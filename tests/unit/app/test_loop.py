"""The scheduling loop without a cluster: a real default profile, the live cache and queue, a fake
API adapter. Covers binding, the failure paths (FitError, bind conflict, bind error, malformed Pod,
Reserve rejection), Reserve annotations written before the Binding, the leader fence and the
pop/undo when leadership is missing."""

from __future__ import annotations

import asyncio
from typing import Any

from py_scheduler.app.client.kube import KubeAPIClient
from py_scheduler.app.client.leader import AlwaysLeader
from py_scheduler.app.client.wire import Conflict, KubeError, NotFound
from py_scheduler.app.scheduling.binder import Binder
from py_scheduler.app.scheduling.loop import Housekeeping, SchedulingLoop
from py_scheduler.cache.cache import Cache
from py_scheduler.framework.algorithm import Algorithm
from py_scheduler.framework.config import ProfileConfig, build_framework
from py_scheduler.framework.features import FeatureGates
from py_scheduler.framework.handle import Handle, ObjectLister
from py_scheduler.framework.runtime import Framework
from py_scheduler.framework.types import Code, CycleState, NodeInfo, PodInfo, Status
from py_scheduler.plugins import registry
from py_scheduler.plugins.default_binder import DefaultBinder
from py_scheduler.plugins.queue_sort import PrioritySort
from py_scheduler.queue.scheduling_queue import BACKOFF_Q, UNSCHEDULABLE_Q, PriorityQueue
from tests.unit.app.fakes import FakeKube

Obj = dict[str, Any]


class Leader(AlwaysLeader):
    def __init__(self) -> None:
        super().__init__("me_1")
        self.valid = True

    def is_leader_valid(self) -> bool:
        return self.valid


class CacheObjects:
    """An ObjectLister over the cache's cluster objects (what the informers hold in the live process)."""

    def __init__(self, cache: Cache) -> None:
        self.cache = cache

    def get(self, kind: str, namespace: str, name: str) -> Obj | None:
        return self.cache.objects.get(kind, f"{namespace}/{name}" if namespace else name)

    def list(self, kind: str) -> list[Obj]:
        return self.cache.objects.list(kind)


class Harness:
    """The loop over a fake API. Its DefaultBinder (built here, or found in ``fw``) binds through
    the live :class:`KubeAPIClient` over the fake, fenced by ``leader`` and the cache's nodes."""

    def __init__(self, fw: Framework | None = None, objects: ObjectLister | None = None,
                 gates: FeatureGates | None = None) -> None:
        self.kube = FakeKube()
        self.cache = Cache()
        self.leader = Leader()
        client = KubeAPIClient(self.kube, fence=lambda: self.leader.is_leader_valid(),  # type: ignore[arg-type]
                               node_exists=self.cache.has_node)
        # The plugins' object lister is the informers' in the live process: here the cache's objects.
        self.handle = Handle.detached(gates, objects if objects is not None else CacheObjects(self.cache), client)
        self.fw = fw or build_framework(ProfileConfig(), handle=self.handle, registry=registry)
        for pl in self.fw.bind_plugins:
            if isinstance(pl, DefaultBinder):
                pl.handle = self.handle
        self.pods: dict[str, Obj] = {}
        self.queue = PriorityQueue({"py-scheduler": self.fw}, pod_lister=lambda ns, n: self.pods.get(f"{ns}/{n}"))
        self.loop = SchedulingLoop(frameworks={"py-scheduler": self.fw}, algorithm=Algorithm(), cache=self.cache,
                                   queue=self.queue, binder=Binder(self.kube, "me_1"),  # type: ignore[arg-type]
                                   leader=self.leader, pod_lister=lambda ns, n: self.pods.get(f"{ns}/{n}"))

    def node(self, name: str, cpu: str = "4") -> None:
        self.cache.add_node({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
                             "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"}}})

    def pod(self, name: str, cpu: str = "1", **spec: Any) -> Obj:
        p: Obj = {"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "resourceVersion": "1"},
                  "spec": {"schedulerName": "py-scheduler",
                           "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}], **spec}}
        self.pods[f"default/{name}"] = p
        self.queue.add(p)
        return p

    async def cycle(self) -> None:
        qpi = self.queue.pop_nowait()
        assert qpi is not None
        self.loop.schedule_one(qpi)
        await self.loop.drain()


async def test_binds_and_reports_scheduled() -> None:
    h = Harness()
    h.node("n1")
    h.pod("a")
    await h.cycle()
    assert ("bind", ("default/a", "n1", "uid-a")) in h.kube.calls
    ev = h.kube.events[-1]
    assert ev["reason"] == "Scheduled" and ev["note"] == "Successfully assigned default/a to n1"
    assert ev["reportingController"] == "py-scheduler" and ev["reportingInstance"] == "me_1"
    assert ev["regarding"]["uid"] == "uid-a" and ev["action"] == "Binding" and ev["type"] == "Normal"
    assert h.cache.is_assumed_pod(h.pods["default/a"])  # until the watch confirms it
    assert h.queue.in_flight_uids() == []
    # the next Pod sees the assumed one
    ni = h.cache.node_info("n1")
    assert ni is not None and ni.requested.milli_cpu == 1000


async def test_fit_error_gives_event_condition_and_unschedulable_queue() -> None:
    h = Harness()
    h.node("n1", cpu="1")
    h.node("n2", cpu="1")
    h.pod("big", cpu="2")
    await h.cycle()
    ev = h.kube.events[-1]
    assert ev["reason"] == "FailedScheduling" and ev["type"] == "Warning" and ev["action"] == "Scheduling"
    assert ev["note"].startswith("0/2 nodes are available: 2 Insufficient cpu.")
    key, patch = h.kube.status_patches[-1]
    cond = patch["status"]["conditions"][0]
    assert key == "default/big"
    assert (cond["type"], cond["status"], cond["reason"]) == ("PodScheduled", "False", "Unschedulable")
    assert cond["message"] == ev["note"]
    assert h.queue.where("default", "big") == UNSCHEDULABLE_Q
    assert not any(c[0] == "bind" for c in h.kube.calls)


async def test_bind_conflict_on_a_pod_bound_elsewhere_reports_and_is_not_requeued() -> None:
    # handleBindingCycleError -> handleSchedulingFailure: the informer shows the Pod bound, so it is not
    # requeued, but upstream still records FailedScheduling and writes PodScheduled=False (SchedulerError).
    h = Harness()
    h.node("n1")
    h.pod("a")
    msg = 'Operation cannot be fulfilled on pods/binding "a": pod a is already assigned to node "n2"'
    h.kube.bind_error = Conflict(409, "Conflict", msg)
    qpi = h.queue.pop_nowait()
    assert qpi is not None
    h.pods["default/a"] = {**h.pods["default/a"], "spec": {**h.pods["default/a"]["spec"], "nodeName": "n2"}}
    h.loop.schedule_one(qpi)
    await h.loop.drain()
    assert not h.cache.is_assumed_pod(qpi.pod)
    ni = h.cache.node_info("n1")
    assert ni is not None and not ni.pods
    assert h.queue.where("default", "a") is None and h.queue.in_flight_uids() == []
    failed = [e for e in h.kube.events if e["reason"] == "FailedScheduling"]
    assert [e["note"] for e in failed] == [f'running Bind plugin "DefaultBinder": {msg}']
    assert failed[0]["regarding"]["uid"] == "uid-a"
    key, patch = h.kube.status_patches[-1]
    cond = patch["status"]["conditions"][0]
    assert key == "default/a" and (cond["status"], cond["reason"]) == ("False", "SchedulerError")
    assert cond["message"] == failed[0]["note"]


async def test_bind_not_found_reports_and_is_not_requeued() -> None:
    h = Harness()
    h.node("n1")
    h.pod("a")
    h.kube.bind_error = NotFound(404, "NotFound", 'pods "a" not found')
    qpi = h.queue.pop_nowait()
    assert qpi is not None
    del h.pods["default/a"]  # the informer saw the deletion
    h.loop.schedule_one(qpi)
    await h.loop.drain()
    assert h.cache.pod_count() == 0
    assert h.queue.where("default", "a") is None and h.queue.in_flight_uids() == []
    failed = [e for e in h.kube.events if e["reason"] == "FailedScheduling"]
    assert [e["note"] for e in failed] == ['running Bind plugin "DefaultBinder": pods "a" not found']
    # the condition write is still attempted (it fails with 404 against a real API server)
    assert [k for k, _ in h.kube.status_patches] == ["default/a"]


async def test_bind_not_found_with_stale_informer_requeues_to_error_backoff() -> None:
    # The informer has not seen the deletion yet: upstream requeues (the Delete event removes it later).
    h = Harness()
    h.node("n1")
    h.pod("a")
    h.kube.bind_error = NotFound(404, "NotFound", 'pods "a" not found')
    await h.cycle()
    assert h.queue.where("default", "a") == BACKOFF_Q
    qpi = h.queue.get("default", "a")
    assert qpi is not None and qpi.consecutive_errors_count == 1 and not qpi.rejector_plugins()
    assert [e["reason"] for e in h.kube.events] == ["FailedScheduling"]


async def test_bind_conflict_on_a_recreated_pod_is_silent() -> None:
    # The Binding's UID precondition failed: a new Pod of the same name exists. Upstream skips requeueing
    # and status updates ("Pod was recreated while handling scheduling failure").
    h = Harness()
    h.node("n1")
    h.pod("a")
    h.kube.bind_error = Conflict(409, "Conflict", "Precondition failed: UID in precondition: uid-a, UID in "
                                                  "object meta: uid-a2")
    qpi = h.queue.pop_nowait()
    assert qpi is not None
    h.pods["default/a"] = {**h.pods["default/a"], "metadata": {**h.pods["default/a"]["metadata"], "uid": "uid-a2"}}
    h.loop.schedule_one(qpi)
    await h.loop.drain()
    assert h.cache.pod_count() == 0
    assert h.queue.where("default", "a") is None and h.queue.in_flight_uids() == []
    assert not h.kube.events and not h.kube.status_patches


async def test_bind_error_goes_to_backoff_with_scheduler_error() -> None:
    h = Harness()
    h.node("n1")
    h.pod("a")
    h.kube.bind_error = KubeError(500, "InternalError", "etcdserver: request timed out")
    await h.cycle()
    assert h.queue.where("default", "a") == BACKOFF_Q
    cond = h.kube.status_patches[-1][1]["status"]["conditions"][0]
    assert cond["reason"] == "SchedulerError" and "etcdserver: request timed out" in cond["message"]
    assert h.cache.pod_count() == 0


async def test_malformed_pod_fails_alone_and_loop_goes_on() -> None:
    h = Harness()
    h.node("n1")
    h.pod("bad", cpu="one")
    h.pod("good")
    await h.cycle()
    await h.cycle()
    failed = [e for e in h.kube.events if e["reason"] == "FailedScheduling"]
    assert len(failed) == 1 and failed[0]["regarding"]["name"] == "bad"
    assert "spec.containers[0].resources.requests.cpu" in failed[0]["note"] and "'one'" in failed[0]["note"]
    assert ("bind", ("default/good", "n1", "uid-good")) in h.kube.calls
    assert h.queue.where("default", "bad") == UNSCHEDULABLE_Q


async def test_fence_refuses_bind_and_keeps_the_pod() -> None:
    h = Harness()
    h.node("n1")
    h.pod("a")
    qpi = h.queue.pop_nowait()
    assert qpi is not None
    h.loop.schedule_one(qpi)
    h.leader.valid = False  # leadership could expire before the bind task runs
    await h.loop.drain()
    assert not any(c[0] == "bind" for c in h.kube.calls)
    assert h.cache.pod_count() == 0
    assert h.queue.where("default", "a") == BACKOFF_Q


class Annotating:
    """Reserve writes annotations (as GPU plugins do); Unreserve records the call."""

    name = "Annotating"

    def __init__(self, reject: bool = False) -> None:
        self.reject = reject
        self.unreserved: list[str] = []

    def filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status:
        return Status.success()

    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        if self.reject:
            return Status(Code.UNSCHEDULABLE, ["no GPU left"])
        state.pod_annotations["example.com/gpu-index"] = "0"
        return Status.success()

    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        self.unreserved.append(pod.key)


async def test_reserve_annotations_are_assumed_and_travel_in_the_binding() -> None:
    plugin = Annotating()
    h = Harness(Framework("py-scheduler", [(PrioritySort(), 0), (plugin, 0), (DefaultBinder(), 0)]))
    h.node("n1")
    h.pod("a")
    await h.cycle()
    # No separate write: the only Pod write is the Binding, and it carries the annotations.
    assert [c[0] for c in h.kube.calls if c[0] not in ("event", "event-series")] == ["bind"]
    assert h.kube.bound_annotations["default/a"] == {"example.com/gpu-index": "0"}
    assumed = h.cache.get_pod(h.pods["default/a"])
    assert assumed is not None and assumed.pod["metadata"]["annotations"] == {"example.com/gpu-index": "0"}
    assert assumed.node_name == "n1"


async def test_reserve_rejection_is_unschedulable_and_unreserved() -> None:
    plugin = Annotating(reject=True)
    h = Harness(Framework("py-scheduler", [(PrioritySort(), 0), (plugin, 0), (DefaultBinder(), 0)]))
    h.node("n1")
    h.pod("a")
    await h.cycle()
    assert plugin.unreserved == ["default/a"]
    ev = h.kube.events[-1]
    assert ev["reason"] == "FailedScheduling" and ev["note"] == "0/1 nodes are available: 1 no GPU left."
    assert h.queue.where("default", "a") == UNSCHEDULABLE_Q
    assert h.cache.pod_count() == 0


async def test_deleting_pod_is_skipped() -> None:
    h = Harness()
    h.node("n1")
    p = h.pod("a")
    p["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    await h.cycle()
    assert h.kube.events[-1]["note"] == "skip schedule deleting pod: default/a"
    assert not any(c[0] == "bind" for c in h.kube.calls)


async def test_run_waits_for_leadership_then_schedules() -> None:
    h = Harness()
    h.node("n1")
    h.leader.leading.clear()
    h.leader.valid = False
    h.pod("a")
    stop = asyncio.Event()
    task = asyncio.ensure_future(h.loop.run(stop))
    try:
        await asyncio.sleep(0)
        assert not any(c[0] == "bind" for c in h.kube.calls)
        h.leader.valid = True
        h.leader.leading.set()

        async def bound() -> None:
            while not any(c[0] == "bind" for c in h.kube.calls):
                await asyncio.sleep(0.01)

        await asyncio.wait_for(bound(), timeout=5)
    finally:
        stop.set()
        h.queue.close()
        await asyncio.wait_for(task, timeout=5)


def test_housekeeping_expires_and_publishes() -> None:
    h = Harness()
    h.node("n1")
    Housekeeping(h.cache, h.queue).tick()
    from py_scheduler.app.telemetry.metrics import REGISTRY

    assert REGISTRY.get_sample_value("scheduler_cache_size", {"type": "nodes"}) == 1


async def test_housekeeping_waits_for_the_sync_before_its_first_tick() -> None:
    """Before the informers' sync, no tick: the snapshot would follow a half-filled cache on the thread
    that fills it (and delay /readyz); once synced, it ticks at once. A stop before the sync ends it."""
    h = Harness()
    h.node("n1")
    hk = Housekeeping(h.cache, h.queue, period=3600)
    ticks: list[int] = []
    hk.tick = lambda: ticks.append(len(ticks))  # type: ignore[method-assign]
    stop, synced = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(hk.run(stop, synced))
    for _ in range(20):
        await asyncio.sleep(0)
    assert ticks == []
    synced.set()

    async def ticked() -> None:
        while not ticks:
            await asyncio.sleep(0)

    await asyncio.wait_for(ticked(), timeout=5)
    assert ticks == [0]
    stop.set()
    await asyncio.wait_for(task, timeout=5)

    never = asyncio.Event()
    stop2 = asyncio.Event()
    task2 = asyncio.create_task(hk.run(stop2, never))
    stop2.set()
    await asyncio.wait_for(task2, timeout=5)
    assert ticks == [0]


class Preempting:
    """A Filter that rejects every node plus a PostFilter that nominates n1 evicting one victim,
    with DefaultPreemption's asynchronous-preemption hooks."""

    name = "Preempting"

    def __init__(self, victim: PodInfo) -> None:
        self.victim = victim
        self.marks: list[str] = []

    def filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status:
        return Status(Code.UNSCHEDULABLE, ["Insufficient cpu"])

    def post_filter(self, state: CycleState, pod: PodInfo, statuses: dict[str, Status]) -> tuple[Any, Status]:
        from py_scheduler.framework.interfaces import PostFilterResult

        return PostFilterResult("n1", [self.victim]), Status.success()

    def mark_preempting(self, uid: str) -> None:
        self.marks.append(f"start {uid}")

    def last_victim(self, uid: str, gone: Any) -> None:
        self.marks.append(f"last {uid}")

    def preemption_finished(self, uid: str) -> None:
        self.marks.append(f"end {uid}")


async def test_preemption_evicts_victims_and_nominates() -> None:
    victim = PodInfo({"metadata": {"name": "low", "namespace": "default", "uid": "uid-low"},
                      "spec": {"nodeName": "n1", "containers": [{"name": "c"}]}})
    plugin = Preempting(victim)
    h = Harness(Framework("py-scheduler", [(PrioritySort(), 0), (plugin, 0), (DefaultBinder(), 0)]))
    h.node("n1")
    h.pod("high")
    await h.cycle()
    assert h.kube.deleted == [("default/low", "uid-low")]
    assert plugin.marks == ["start uid-high", "last uid-high", "end uid-high"]
    preempted = [e for e in h.kube.events if e["reason"] == "Preempted"]
    assert preempted and preempted[0]["regarding"]["name"] == "low"
    assert preempted[0]["note"] == "Preempted by pod uid-high on node n1"
    status = next(p for k, p in h.kube.status_patches if k == "default/high")["status"]
    assert status["nominatedNodeName"] == "n1"
    # as upstream's, the preemptor waits for the victims' deletion events: not activated by the preemption
    assert h.queue.where("default", "high") == "unschedulable"


async def test_preemption_registers_its_last_victim_with_the_pre_enqueue_gate() -> None:
    """``lastVictimsPendingPreemption``: while the last victim is still there, PreEnqueue holds the
    preemptor; once the informer shows it deleted (or being deleted) the gate opens even before the
    preemption's task ends, so the victim's deletion event is not lost. A failed eviction activates
    the preemptor (no deletion event will come)."""
    from py_scheduler.plugins.default_preemption import DefaultPreemption

    dp = DefaultPreemption()
    pod = PodInfo({"metadata": {"name": "high", "namespace": "default", "uid": "uid-high"}, "spec": {}})
    dp.mark_preempting("uid-high")
    assert not dp.pre_enqueue(pod).is_success()
    present = [True]
    dp.last_victim("uid-high", lambda: not present[0])
    assert not dp.pre_enqueue(pod).is_success()
    present[0] = False
    assert dp.pre_enqueue(pod).is_success() and not dp.is_pod_running_preemption("uid-high")
    dp.preemption_finished("uid-high")
    assert dp.pre_enqueue(pod).is_success()

    victim = PodInfo({"metadata": {"name": "low", "namespace": "default", "uid": "uid-low"},
                      "spec": {"nodeName": "n1", "containers": [{"name": "c"}]}})
    plugin = Preempting(victim)
    h = Harness(Framework("py-scheduler", [(PrioritySort(), 0), (plugin, 0), (DefaultBinder(), 0)]))
    from py_scheduler.app.client.wire import KubeError

    async def refuse(*_a: Any, **_k: Any) -> None:
        raise KubeError(500, "InternalError", "etcd timeout")

    h.kube.delete_pod = refuse  # type: ignore[method-assign]
    h.node("n1")
    h.pod("high")
    await h.cycle()
    assert h.queue.where("default", "high") in ("active", "backoff")


async def test_preemption_clears_lower_priority_nominations_on_the_node() -> None:
    """``getLowerPriorityNominatedPods`` / ``clearNominatedNodeName``: before evicting, a Pod of lower
    priority nominated to the preemptor's node loses its ``status.nominatedNodeName``; one of equal or
    higher priority, or nominated elsewhere, keeps it."""
    victim = PodInfo({"metadata": {"name": "low", "namespace": "default", "uid": "uid-low"},
                      "spec": {"nodeName": "n1", "containers": [{"name": "c"}]}})
    plugin = Preempting(victim)
    h = Harness(Framework("py-scheduler", [(PrioritySort(), 0), (plugin, 0), (DefaultBinder(), 0)]))
    h.node("n1")
    h.node("n2")
    for name, prio, node in (("waiting", 10, "n1"), ("peer", 100, "n1"), ("elsewhere", 10, "n2")):
        p = h.pod(name, priority=prio)
        p["status"] = {"nominatedNodeName": node}
        qpi = h.queue.get("default", name)
        assert qpi is not None
        h.queue.add_nominated_pod(PodInfo(p), node)
    high = h.pod("high", priority=100)
    h.queue.activate([high])
    while (qpi := h.queue.pop_nowait()) is not None and qpi.pod_info.name != "high":
        pass
    assert qpi is not None
    h.loop.schedule_one(qpi)
    await h.loop.drain()
    cleared = [k for k, p in h.kube.status_patches if p == {"status": {"nominatedNodeName": None}}]
    assert cleared == ["default/waiting"]
    assert h.kube.deleted == [("default/low", "uid-low")]


class Flaky:
    """Rejects first, then fails with an internal error."""

    name = "Flaky"

    def __init__(self) -> None:
        self.calls = 0

    def filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status:
        self.calls += 1
        if self.calls == 1:
            return Status(Code.UNSCHEDULABLE, ["flaky says no"])
        return Status.error("backend unavailable")


async def test_internal_error_after_rejection_is_an_error_not_a_rejection() -> None:
    plugin = Flaky()
    h = Harness(Framework("py-scheduler", [(PrioritySort(), 0), (plugin, 0), (DefaultBinder(), 0)]))
    h.node("n1")
    h.pod("a")
    await h.cycle()
    qpi = h.queue.get("default", "a")
    assert qpi is not None and qpi.unschedulable_plugins == frozenset({"Flaky"})
    h.queue.activate([h.pods["default/a"]])
    await h.cycle()
    qpi = h.queue.get("default", "a")
    assert qpi is not None and qpi.unschedulable_plugins == frozenset() and qpi.consecutive_errors_count == 1
    assert h.queue.where("default", "a") == BACKOFF_Q
    cond = h.kube.status_patches[-1][1]["status"]["conditions"][0]
    assert cond["reason"] == "SchedulerError" and "backend unavailable" in cond["message"]


async def test_a_cycle_that_raises_requeues_the_pod() -> None:
    """A bug in a scheduling cycle (here the pod group lookup raising) costs the Pod an attempt, not
    its place: ``run`` puts it back in the queue (error backoff) instead of only ending its in-flight
    state, and keeps scheduling."""
    from py_scheduler.app.scheduling import loop as loop_module

    h = Harness()
    h.node("n1")
    h.pod("a")
    real = loop_module.pod_group_of
    raised = asyncio.Event()

    def boom(fw: Any, pi: Any) -> Any:
        raised.set()
        raise RuntimeError("bug")

    loop_module.pod_group_of = boom  # type: ignore[assignment]
    stop = asyncio.Event()
    task = asyncio.ensure_future(h.loop.run(stop))
    try:
        await asyncio.wait_for(raised.wait(), timeout=5)

        async def requeued() -> None:
            while h.queue.where("default", "a") is None:
                await asyncio.sleep(0.01)

        await asyncio.wait_for(requeued(), timeout=5)
        assert h.queue.in_flight_uids() == []
    finally:
        loop_module.pod_group_of = real
        stop.set()
        h.queue.close()
        await asyncio.wait_for(task, timeout=5)
