"""PriorityQueue: ordering, backoff, unschedulable Pods and event-driven requeueing, gates,
in-flight events, flushes. A fake clock drives time; nothing sleeps.

Cases follow upstream's ``backend/queue/scheduling_queue_test.go`` and ``backoff_queue_test.go``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from py_scheduler.framework.events import (
    EVENT_ASSIGNED_POD_DELETE,
    EVENT_NODE_ADD,
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    QueueingHint,
    Resource,
)
from py_scheduler.framework.interfaces import PreFilterResult
from py_scheduler.framework.runtime import Framework
from py_scheduler.framework.types import Code, CycleState, NodeInfo, PodInfo, Status
from py_scheduler.plugins.queue_sort import PrioritySort
from py_scheduler.plugins.scheduling_gates import SchedulingGates
from py_scheduler.queue.scheduling_queue import (
    ACTIVE_Q,
    BACKOFF_Q,
    GATED,
    PARSE_ERROR_PLUGIN,
    UNSCHEDULABLE_Q,
    PriorityQueue,
    QueuedPodInfo,
)


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def step(self, dt: float) -> None:
        self.t += dt


class NodeOnlyFilter:
    """A Filter plugin interested only in Node/Add events (with a hint that skips nodes labelled
    ``skip=true``)."""

    name = "NodeOnly"

    def filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status:
        return Status.success()

    def events_to_register(self) -> list[ClusterEventWithHint]:
        def hint(pod: dict[str, Any], old: Any, new: Any) -> QueueingHint:
            labels = ((new or {}).get("metadata") or {}).get("labels") or {}
            return QueueingHint.QUEUE_SKIP if labels.get("skip") == "true" else QueueingHint.QUEUE

        return [ClusterEventWithHint(ClusterEvent(Resource.NODE, ActionType.ADD), hint)]


class PodDeletePreFilter:
    """A PreFilter plugin interested in assigned Pod deletions only (no hint)."""

    name = "PodDelete"

    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> tuple[PreFilterResult, Status]:
        return None, Status.success()

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [ClusterEventWithHint(ClusterEvent(Resource.POD, ActionType.DELETE))]


class AllEventsFilter:
    """A Filter plugin without events_to_register: registered for every event."""

    name = "AllEvents"

    def filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status:
        return Status.success()


class RecordingMetrics:
    def __init__(self) -> None:
        self.incoming_calls: list[tuple[str, str]] = []
        self.last_pending: tuple[int, int, int, int] = (0, 0, 0, 0)
        self.reasons: dict[tuple[str, str], int] = {}

    def incoming(self, queue: str, event: str) -> None:
        self.incoming_calls.append((queue, event))

    def pending(self, active: int, backoff: int, unschedulable: int, gated: int) -> None:
        self.last_pending = (active, backoff, unschedulable, gated)

    def unschedulable_reason(self, plugin: str, profile: str, delta: int) -> None:
        self.reasons[(plugin, profile)] = self.reasons.get((plugin, profile), 0) + delta


def framework() -> Framework:
    plugins = [PrioritySort(), SchedulingGates(), NodeOnlyFilter(), PodDeletePreFilter(), AllEventsFilter()]
    return Framework("py-scheduler", [(p, 0) for p in plugins])


def make_queue(clock: Clock, **kw: Any) -> PriorityQueue:
    return PriorityQueue({"py-scheduler": framework()}, now=clock, **kw)


def pod(name: str, priority: int = 0, uid: str | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default", "uid": uid or f"uid-{name}", "resourceVersion": "1"},
        "spec": {"schedulerName": "py-scheduler", "priority": priority,
                 "containers": [{"name": "c", "image": "i"}], **spec},
    }


def node(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}}


def fail(q: PriorityQueue, qpi: QueuedPodInfo, *plugins: str) -> str | None:
    qpi.unschedulable_plugins = frozenset(plugins)
    return q.add_unschedulable_if_not_present(qpi)


def test_pop_order_priority_then_time() -> None:
    clock = Clock()
    q = make_queue(clock)
    q.add(pod("low", 1))
    clock.step(1)
    q.add(pod("high", 10))
    clock.step(1)
    q.add(pod("low2", 1))
    names = [q.pop_nowait().pod_info.name for _ in range(3)]  # type: ignore[union-attr]
    assert names == ["high", "low", "low2"]
    assert q.pop_nowait() is None


async def test_pop_awaits_next_pod() -> None:
    q = make_queue(Clock())
    task = asyncio.ensure_future(q.pop())
    await asyncio.sleep(0)
    assert not task.done()
    q.add(pod("a"))
    qpi = await asyncio.wait_for(task, timeout=5)
    assert qpi is not None and qpi.pod_info.name == "a" and qpi.attempts == 1


async def test_close_wakes_pop() -> None:
    q = make_queue(Clock())
    task = asyncio.ensure_future(q.pop())
    await asyncio.sleep(0)
    q.close()
    assert await asyncio.wait_for(task, timeout=5) is None


@pytest.mark.parametrize(("count", "want"), [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (5, 10.0), (20, 10.0)])
def test_backoff_duration_doubles_to_max(count: int, want: float) -> None:
    q = make_queue(Clock())
    assert q._backoff_q.calculate_backoff_duration(count) == want


def test_backoff_disabled_with_zero_max() -> None:
    clock = Clock()
    q = make_queue(clock, pod_max_backoff=0)
    q.add(pod("a"))
    qpi = q.pop_nowait()
    assert qpi is not None
    # an internal error: no rejector -> straight to activeQ since there is no backoff
    assert q.add_unschedulable_if_not_present(qpi) == ACTIVE_Q


def test_error_goes_to_backoff_and_flushes_after_window() -> None:
    clock = Clock(1000.2)
    q = make_queue(clock)
    q.add(pod("a"))
    qpi = q.pop_nowait()
    assert qpi is not None
    assert q.add_unschedulable_if_not_present(qpi) == BACKOFF_Q
    assert qpi.consecutive_errors_count == 1
    # backoff 1 s from 1000.2 -> 1001.2, aligned down to 1001.0; backing off while 1001 >= floor(now)
    assert q._backoff_q.backoff_time(qpi) == 1001.0
    clock.t = 1001.9
    assert q.flush_backoff_q_completed() == 0
    assert q.where("default", "a") == BACKOFF_Q
    # errors wait in the error backoff queue, which pop never takes from early
    assert q.pop_nowait() is None
    clock.t = 1002.0
    assert q.flush_backoff_q_completed() == 1
    assert q.where("default", "a") == ACTIVE_Q


def test_pop_from_backoff_when_active_empty() -> None:
    clock = Clock()
    m = RecordingMetrics()
    q = make_queue(clock, metrics=m)
    q.add(pod("a"))
    qpi = q.pop_nowait()
    assert qpi is not None
    # rejected by NodeOnly, then a node is added while it is in flight -> backoffQ
    q.move_all_to_active_or_backoff(EVENT_NODE_ADD, None, node("n1"))
    assert fail(q, qpi, "NodeOnly") == BACKOFF_Q
    again = q.pop_nowait()
    assert again is not None and again.pod_info.name == "a" and again.attempts == 2
    assert ("active", "PopFromBackoffQ") in m.incoming_calls


def test_unschedulable_waits_for_matching_event() -> None:
    clock = Clock()
    m = RecordingMetrics()
    q = make_queue(clock, metrics=m)
    q.add(pod("a"))
    qpi = q.pop_nowait()
    assert qpi is not None
    assert fail(q, qpi, "NodeOnly") == UNSCHEDULABLE_Q
    assert m.reasons[("NodeOnly", "py-scheduler")] == 1
    assert m.last_pending == (0, 0, 1, 0)
    # an event NodeOnly did not register: stays
    q.move_all_to_active_or_backoff(EVENT_ASSIGNED_POD_DELETE, pod("other"), None)
    assert q.where("default", "a") == UNSCHEDULABLE_Q
    # the hint says skip for this node
    q.move_all_to_active_or_backoff(EVENT_NODE_ADD, None, node("n1", skip="true"))
    assert q.where("default", "a") == UNSCHEDULABLE_Q
    # a matching node: still within backoff (1 s) -> backoffQ
    q.move_all_to_active_or_backoff(EVENT_NODE_ADD, None, node("n2"))
    assert q.where("default", "a") == BACKOFF_Q
    assert ("backoff", "NodeAdd") in m.incoming_calls


def test_a_pod_kept_unschedulable_is_counted_incoming_once() -> None:
    """``scheduler_queue_incoming_pods_total`` counts a Pod arriving in the unschedulable Pods
    (``addOrUpdate``), not each event or update that leaves it there; found side by side."""
    clock = Clock()
    m = RecordingMetrics()
    q = make_queue(clock, metrics=m)
    q.add(pod("a"))
    qpi = q.pop_nowait()
    assert qpi is not None and fail(q, qpi, "NodeOnly") == UNSCHEDULABLE_Q
    arrived = list(m.incoming_calls)
    q.move_all_to_active_or_backoff(EVENT_NODE_ADD, None, node("n1", skip="true"))
    q.update(pod("a"), {**pod("a"), "metadata": {**pod("a")["metadata"], "labels": {"x": "y"},
                                                 "resourceVersion": "2"}})
    assert q.where("default", "a") == UNSCHEDULABLE_Q
    assert m.incoming_calls == arrived


def test_event_after_backoff_goes_straight_to_active() -> None:
    clock = Clock()
    q = make_queue(clock)
    q.add(pod("a"))
    qpi = q.pop_nowait()
    assert qpi is not None
    fail(q, qpi, "PodDelete")
    clock.step(5)
    # Pod/Delete registration matches AssignedPod/Delete
    q.move_all_to_active_or_backoff(EVENT_ASSIGNED_POD_DELETE, pod("victim"), None)
    assert q.where("default", "a") == ACTIVE_Q


def test_more_specific_registration_does_not_match_general_update() -> None:
    clock = Clock()
    q = make_queue(clock)
    q.add(pod("a"))
    qpi = q.pop_nowait()
    assert qpi is not None
    fail(q, qpi, "NodeOnly")
    clock.step(20)
    q.move_all_to_active_or_backoff(ClusterEvent(Resource.NODE, ActionType.UPDATE_NODE_LABEL), node("n"), node("n"))
    assert q.where("default", "a") == UNSCHEDULABLE_Q
    q.move_all_to_active_or_backoff(ClusterEvent(Resource.NODE, ActionType.UPDATE_NODE_LABEL), node("n"), node("n"))
    # AllEvents rejection is requeued by anything
    qpi2 = q.get("default", "a")
    assert qpi2 is not None
    q.delete(qpi2.pod)
    q.add(pod("b"))
    b = q.pop_nowait()
    assert b is not None
    fail(q, b, "AllEvents")
    clock.step(20)
    q.move_all_to_active_or_backoff(ClusterEvent(Resource.NODE, ActionType.UPDATE_NODE_LABEL), node("n"), node("n"))
    assert q.where("default", "b") == ACTIVE_Q


def test_event_while_in_flight_requeues_on_failure() -> None:
    clock = Clock()
    q = make_queue(clock)
    q.add(pod("a"))
    q.add(pod("b"))
    a = q.pop_nowait()
    assert a is not None
    # an unrelated event while in flight does not help
    q.move_all_to_active_or_backoff(EVENT_ASSIGNED_POD_DELETE, pod("x"), None)
    assert fail(q, a, "NodeOnly") == UNSCHEDULABLE_Q
    b = q.pop_nowait()
    assert b is not None
    q.move_all_to_active_or_backoff(EVENT_NODE_ADD, None, node("n"))
    # a (unschedulable) moved by the event; b (in flight) remembers it
    assert q.where("default", "a") == BACKOFF_Q
    assert fail(q, b, "NodeOnly") == BACKOFF_Q
    assert q.in_flight_uids() == []


def test_events_are_forgotten_once_nothing_is_in_flight() -> None:
    clock = Clock()
    q = make_queue(clock)
    q.add(pod("a"))
    a = q.pop_nowait()
    assert a is not None
    q.done(a.uid)
    q.move_all_to_active_or_backoff(EVENT_NODE_ADD, None, node("n"))
    q.add(pod("c"))
    c = q.pop_nowait()
    assert c is not None
    # the node was added before c was popped: it does not count for c
    assert fail(q, c, "NodeOnly") == UNSCHEDULABLE_Q


def test_flush_unschedulable_leftover_after_max_duration() -> None:
    clock = Clock()
    q = make_queue(clock)
    q.add(pod("a"))
    a = q.pop_nowait()
    assert a is not None
    fail(q, a, "NodeOnly")
    clock.step(299)
    q.flush_unschedulable_pods_leftover()
    assert q.where("default", "a") == UNSCHEDULABLE_Q
    clock.step(2)
    q.flush_unschedulable_pods_leftover()
    assert q.where("default", "a") == ACTIVE_Q
    qpi = q.get("default", "a")
    assert qpi is not None and qpi.was_flushed_from_unschedulable


def test_gated_pod_waits_until_gates_removed() -> None:
    clock = Clock()
    m = RecordingMetrics()
    q = make_queue(clock, metrics=m)
    gated = pod("g", schedulingGates=[{"name": "example.com/wait"}])
    q.add(gated)
    assert q.where("default", "g") == GATED
    assert m.last_pending == (0, 0, 0, 1)
    assert q.pop_nowait() is None
    # node events do not ungate it, nor even offer it to PreEnqueue again: SchedulingGates registers
    # only TargetPod/UpdatePodSchedulingGatesEliminated (upstream's EventsToRegister), so the Pod is
    # skipped and no incoming-Pods counter moves
    before = list(m.incoming_calls)
    q.move_all_to_active_or_backoff(EVENT_NODE_ADD, None, node("n"))
    assert q.where("default", "g") == GATED
    assert m.incoming_calls == before
    # an update that keeps the gate keeps it gated
    labelled = pod("g", schedulingGates=[{"name": "example.com/wait"}])
    labelled["metadata"]["labels"] = {"x": "y"}
    q.update(gated, labelled)
    assert q.where("default", "g") == GATED
    ungated = pod("g")
    q.update(labelled, ungated)
    assert q.where("default", "g") == ACTIVE_Q
    got = q.pop_nowait()
    assert got is not None and got.attempts == 1 and "schedulingGates" not in got.pod["spec"]


def test_update_replaces_pod_info_in_active() -> None:
    q = make_queue(Clock())
    old = pod("a", 1)
    q.add(old)
    new = pod("a", 1)
    new["metadata"]["labels"] = {"v": "2"}
    q.update(old, new)
    got = q.pop_nowait()
    assert got is not None and got.pod_info.labels == {"v": "2"}


def test_update_of_in_flight_pod_is_recorded_as_event() -> None:
    clock = Clock()
    q = make_queue(clock)
    old = pod("a")
    q.add(old)
    a = q.pop_nowait()
    assert a is not None
    new = pod("a")
    new["spec"]["tolerations"] = [{"key": "k", "operator": "Exists"}]
    q.update(old, new)
    assert q.where("default", "a") == "in-flight"
    # AllEvents is registered for TargetPod updates too: the recorded update requeues it
    assert fail(q, a, "AllEvents") == BACKOFF_Q


def test_delete_removes_from_every_subqueue() -> None:
    clock = Clock()
    m = RecordingMetrics()
    q = make_queue(clock, metrics=m)
    for n in ("a", "b", "c"):
        q.add(pod(n))
    b = q.pop_nowait()
    assert b is not None
    fail(q, b, "NodeOnly")
    q.delete(pod("a"))
    q.delete(pod("b"))
    assert q.where("default", "a") is None and q.where("default", "b") is None
    assert m.reasons[("NodeOnly", "py-scheduler")] == 0
    assert q.lengths()[ACTIVE_Q] == 1


def test_parse_error_pod_waits_for_its_own_update() -> None:
    clock = Clock()
    q = make_queue(clock)
    bad = pod("bad")
    bad["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "lots"}}
    q.add(bad)
    qpi = q.pop_nowait()
    assert qpi is not None and qpi.parse_error is not None
    assert "spec.containers[0].resources.requests.cpu" in str(qpi.parse_error)
    assert fail(q, qpi, PARSE_ERROR_PLUGIN) == UNSCHEDULABLE_Q
    q.move_all_to_active_or_backoff(EVENT_NODE_ADD, None, node("n"))
    assert q.where("default", "bad") == UNSCHEDULABLE_Q
    good = pod("bad")
    good["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    q.update(bad, good)
    assert q.where("default", "bad") == ACTIVE_Q
    again = q.pop_nowait()
    assert again is not None and again.parse_error is None and again.pod_info.requests.milli_cpu == 1000


def test_undo_pop_restores_pod_without_attempt() -> None:
    q = make_queue(Clock())
    q.add(pod("a"))
    a = q.pop_nowait()
    assert a is not None
    q.undo_pop(a)
    assert q.where("default", "a") == ACTIVE_Q
    again = q.pop_nowait()
    assert again is not None and again.attempts == 1


def test_add_of_known_pod_updates_it() -> None:
    q = make_queue(Clock())
    q.add(pod("a"))
    newer = pod("a")
    newer["metadata"]["labels"] = {"k": "v"}
    q.add(newer)
    assert q.lengths()[ACTIVE_Q] == 1
    got = q.pop_nowait()
    assert got is not None and got.pod_info.labels == {"k": "v"}


def test_pre_enqueue_error_status_gates() -> None:
    class Broken:
        name = "Broken"

        def pre_enqueue(self, pod: PodInfo) -> Status:
            raise RuntimeError("boom")

    fw = Framework("py-scheduler", [(PrioritySort(), 0), (Broken(), 0)])
    q = PriorityQueue({"py-scheduler": fw}, now=Clock())
    q.add(pod("a"))
    assert q.where("default", "a") == GATED
    got = q.get("default", "a")
    assert got is not None and got.gating_plugin == "Broken"
    assert Code.ERROR  # the plugin error is logged, the Pod waits


async def test_run_flushes_backoff_in_background() -> None:
    q = PriorityQueue({"py-scheduler": framework()}, pop_from_backoff_q=False)  # real clock
    q.add(pod("a"))
    a = q.pop_nowait()
    assert a is not None
    assert q.add_unschedulable_if_not_present(a) == BACKOFF_Q
    runner = asyncio.ensure_future(q.run())
    try:
        got = await asyncio.wait_for(q.pop(), timeout=5)
        assert got is not None and got.pod_info.name == "a"
    finally:
        runner.cancel()


def test_activate_moves_unschedulable_and_backoff_pods_and_marks_in_flight() -> None:
    clock = Clock()
    q = make_queue(clock)
    for n in ("u", "b", "f"):
        q.add(pod(n))
    u, b, f = q.pop_nowait(), q.pop_nowait(), q.pop_nowait()
    assert u is not None and b is not None and f is not None
    fail(q, u, "NodeOnly")
    q.move_all_to_active_or_backoff(EVENT_NODE_ADD, None, node("n"))  # b and f see it in flight
    assert fail(q, b, "NodeOnly") == BACKOFF_Q
    q.activate([pod("u"), pod("b"), pod("f"), pod("unknown")])
    assert q.where("default", "u") == ACTIVE_Q and q.where("default", "b") == ACTIVE_Q
    # f was in flight: the ForceActivate event sends it straight back
    f.unschedulable_plugins = frozenset({"PodDelete"})
    assert q.add_unschedulable_if_not_present(f) == BACKOFF_Q


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_gated_count_matches_a_scan_under_random_operations(seed: int) -> None:
    """The pending gauges' gated count is kept as a running set (not a scan per queue event); after
    any sequence of adds, gate changes, failures, events and deletions it equals a full scan."""
    import random

    rng = random.Random(seed)
    clock = Clock()
    m = RecordingMetrics()
    q = make_queue(clock, metrics=m)
    live: dict[str, dict[str, Any]] = {}
    for step in range(400):
        op = rng.random()
        name = f"p{rng.randrange(25)}"
        gates = [{"name": "example.com/wait"}] if rng.random() < 0.5 else []
        new = pod(name, **({"schedulingGates": gates} if gates else {}))
        new["metadata"]["resourceVersion"] = str(step + 2)
        if op < 0.3:
            if name in live:
                q.update(live[name], new)
            else:
                q.add(new)
            live[name] = new
        elif op < 0.45 and name in live:
            q.delete(live.pop(name))
        elif op < 0.7:
            qpi = q.pop_nowait()
            if qpi is not None:
                fail(q, qpi, "NodeOnlyFilter")
        elif op < 0.85:
            q.move_all_to_active_or_backoff(EVENT_NODE_ADD, None, node(f"n{step}"))
        else:
            clock.step(rng.choice([0.5, 2, 20, 400]))
            q.flush_backoff_q_completed()
            q.flush_unschedulable_pods_leftover()
        scan = sum(1 for x in q._unschedulable.values() if x.gated)
        assert len(q._unschedulable.gated_keys) == scan
        assert q.lengths()["gated"] == scan
        if m.last_pending != (0, 0, 0, 0):
            assert m.last_pending[3] == scan or step == 0


def test_in_flight_event_counts_hold_the_events_an_in_flight_pod_may_need() -> None:
    """``scheduler_inflight_events``: events recorded while a Pod is in flight, by label, plus
    ``PodPopped``; all gone once no Pod is in flight."""
    q = make_queue(Clock())
    assert q.in_flight_event_counts() == {}
    q.add(pod("a"))
    qpi = q.pop_nowait()
    assert qpi is not None
    q.move_all_to_active_or_backoff(EVENT_NODE_ADD, None, node("n1"))
    q.move_all_to_active_or_backoff(EVENT_NODE_ADD, None, node("n2"))
    assert q.in_flight_event_counts() == {"PodPopped": 1, "NodeAdd": 2}
    q.done(qpi.uid)
    assert q.in_flight_event_counts() == {}
