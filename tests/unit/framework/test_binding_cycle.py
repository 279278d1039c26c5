"""The binding cycle's extension points (py_scheduler.framework.binding_cycle) and the loop's
runBindingCycle around them: Permit Success / Wait / Reject with the waiting-Pods map (per-plugin
timeouts, Allow / Reject from elsewhere, rejection on Pod deletion), PreBindPreFlight skips,
PreBind and Bind failures unreserved in reverse order, Bind's Skip chain, PostBind, metrics."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from py_scheduler.app.scheduling.event_handlers import EventHandlers
from py_scheduler.app.telemetry import metrics as m
from py_scheduler.framework import binding_cycle as bc
from py_scheduler.framework.handle import Handle
from py_scheduler.framework.runtime import Framework
from py_scheduler.framework.types import Code, CycleState, NodeInfo, PodInfo, Status
from py_scheduler.plugins.default_binder import DefaultBinder
from py_scheduler.plugins.queue_sort import PrioritySort
from py_scheduler.queue.scheduling_queue import BACKOFF_Q, UNSCHEDULABLE_Q
from tests.gang_permit import GANG_LABEL, GangPermit
from tests.unit.app.test_loop import Harness

Obj = dict[str, Any]


def _pi(name: str = "p", uid: str | None = None) -> PodInfo:
    return PodInfo({"metadata": {"name": name, "namespace": "default", "uid": uid or f"uid-{name}"},
                    "spec": {"containers": [{"name": "c"}]}})


class Rec:
    """A plugin at every binding-cycle point that records its calls in ``log`` and answers as told."""

    def __init__(self, name: str, log: list[str], *, permit: Status | None = None, wait: float = 0.0,
                 pre_flight: Status | None = None, pre_bind: Status | None = None, bind: Status | None = None,
                 raises: str = "") -> None:
        self.name = name
        self.log = log
        self._permit = permit or Status.success()
        self._wait = wait
        self._pre_flight = pre_flight or Status.success()
        self._pre_bind = pre_bind or Status.success()
        self._bind = bind or Status.skip()
        self.raises = raises

    def _maybe_raise(self, point: str) -> None:
        if self.raises == point:
            raise RuntimeError(f"{self.name} broke in {point}")

    def filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status:
        return Status.success()

    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        self.log.append(f"reserve:{self.name}")
        return Status.success()

    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        self.log.append(f"unreserve:{self.name}")
        self._maybe_raise("unreserve")

    def permit(self, state: CycleState, pod: PodInfo, node_name: str) -> tuple[Status, float]:
        self.log.append(f"permit:{self.name}")
        self._maybe_raise("permit")
        return self._permit, self._wait

    def pre_bind_pre_flight(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        return self._pre_flight

    async def pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        self.log.append(f"prebind:{self.name}")
        self._maybe_raise("prebind")
        return self._pre_bind

    async def bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        self.log.append(f"bind:{self.name}")
        self._maybe_raise("bind")
        return self._bind

    def post_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        self.log.append(f"postbind:{self.name}")
        self._maybe_raise("postbind")


def _fw(*plugins: Any, observer: Any = None) -> Framework:
    """A profile of ``plugins``; plugins holding a Handle (GangPermit) share the profile's, as
    ``build_framework`` gives every factory the one whose ``profile`` the Framework fills in."""
    handle = Handle.detached()
    for p in plugins:
        if isinstance(getattr(p, "handle", None), Handle):
            p.handle = handle
    return Framework("py-scheduler", [(PrioritySort(), 0), *((p, 0) for p in plugins)], observer=observer,
                     handle=handle)


# -- the waiting-Pods map -------------------------------------------------------------------------------
async def test_waiting_pod_is_allowed_only_when_every_plugin_allowed() -> None:
    wp = bc.WaitingPod(_pi(), {"A": 10.0, "B": 10.0})
    wp.allow("A")
    assert wp.pending_plugins() == ["B"] and not wp.done
    wp.allow("B")
    assert (await asyncio.wait_for(wp.outcome(), 1)).is_success()
    assert not wp.reject("A", "too late")  # the first outcome wins


async def test_waiting_pod_times_out_per_plugin_with_upstreams_message() -> None:
    wp = bc.WaitingPod(_pi(), {"A": 10.0, "Slow": 0.05})
    wp.allow("A")
    st = await asyncio.wait_for(wp.outcome(), 2)
    assert st.code == Code.UNSCHEDULABLE and st.plugin == "Slow"
    assert st.message() == "rejected due to timeout after waiting 50ms at plugin Slow"


async def test_rejected_from_elsewhere_and_by_deletion() -> None:
    pods = bc.WaitingPods()
    wp = bc.WaitingPod(_pi(), {"A": 60.0})
    pods.add(wp)
    assert pods.reject("uid-p") and not pods.reject("nobody")
    st = await asyncio.wait_for(wp.outcome(), 1)
    assert (st.code, st.message(), st.plugin) == (Code.UNSCHEDULABLE, "removed", "")
    wp2 = bc.WaitingPod(_pi("q"), {"A": 60.0})
    assert wp2.preempt("DefaultPreemption", "preempted")
    assert (await wp2.outcome()).code == Code.ERROR


@pytest.mark.parametrize(("seconds", "text"), [(10, "10s"), (1.5, "1.5s"), (900, "15m0s"), (0.5, "500ms"),
                                               (3723, "1h2m3s")])
def test_timeout_reads_like_go_durations(seconds: float, text: str) -> None:
    assert bc._go_duration(seconds) == text


# -- the extension points -------------------------------------------------------------------------------
async def test_permit_reject_error_and_wait_capped_at_15_minutes() -> None:
    log: list[str] = []
    fw = _fw(Rec("W", log, permit=Status(Code.WAIT), wait=3600), Rec("S", log))
    st, waits = bc.run_permit(fw, CycleState(), _pi(), "n1")
    assert st.code == Code.WAIT and waits == {"W": bc.MAX_PERMIT_TIMEOUT}
    assert st.reasons[-1] == "one or more plugins asked to wait and no plugin rejected pod"
    fw = _fw(Rec("W", log, permit=Status(Code.WAIT), wait=5), Rec("R", log, permit=Status.unschedulable("no")))
    st, waits = bc.run_permit(fw, CycleState(), _pi(), "n1")
    assert (st.code, st.plugin, st.message(), waits) == (Code.UNSCHEDULABLE, "R", "no", {})
    fw = _fw(Rec("E", log, permit=Status.error("boom")))
    st, _ = bc.run_permit(fw, CycleState(), _pi(), "n1")
    assert (st.code, st.message()) == (Code.ERROR, 'running Permit plugin "E": boom')
    fw = _fw(Rec("X", log, raises="permit"))
    st, _ = bc.run_permit(fw, CycleState(), _pi(), "n1")
    assert st.code == Code.ERROR and "X broke in permit" in st.message()


async def test_pre_flight_skips_plugins_without_work_and_rejects_unsupported_codes() -> None:
    log: list[str] = []
    fw = _fw(Rec("Skip", log, pre_flight=Status.skip()), Rec("Work", log))
    state = CycleState()
    assert bc.run_pre_bind_pre_flights(fw, state, _pi(), "n1").is_success()
    assert (await bc.run_pre_bind(fw, state, _pi(), "n1")).is_success()
    assert log == ["prebind:Work"]
    fw = _fw(Rec("Skip", log, pre_flight=Status.skip()))
    assert bc.run_pre_bind_pre_flights(fw, CycleState(), _pi(), "n1").is_skip()
    fw = _fw(Rec("Bad", log, pre_flight=Status.unschedulable("x")))
    st = bc.run_pre_bind_pre_flights(fw, CycleState(), _pi(), "n1")
    assert st.code == Code.ERROR and st.message() == (
        'PreBindPreFlight Bad returned "Unschedulable", which is unsupported. '
        "It is supposed to return Success, Skip, or Error status")


async def test_bind_skip_passes_to_the_next_and_the_first_answer_wins() -> None:
    log: list[str] = []
    fw = _fw(Rec("A", log), Rec("B", log, bind=Status.success()), Rec("C", log, bind=Status.error("x")))
    assert (await bc.run_bind(fw, CycleState(), _pi(), "n1")).is_success()
    assert log == ["bind:A", "bind:B"]
    fw = _fw(Rec("A", log), Rec("C", log, bind=Status.error("409 already bound")))
    st = await bc.run_bind(fw, CycleState(), _pi(), "n1")
    assert (st.code, st.message()) == (Code.ERROR, 'running Bind plugin "C": 409 already bound')
    assert (await bc.run_bind(_fw(Rec("A", log)), CycleState(), _pi(), "n1")).is_skip()


async def test_unreserve_runs_in_reverse_and_survives_a_raising_plugin() -> None:
    log: list[str] = []
    fw = _fw(Rec("A", log), Rec("B", log, raises="unreserve"), Rec("C", log))
    bc.run_unreserve(fw, CycleState(), _pi(), "n1")
    assert log == ["unreserve:C", "unreserve:B", "unreserve:A"]


async def test_extension_points_are_observed_with_upstreams_names() -> None:
    seen: list[tuple[str, str, str]] = []
    log: list[str] = []
    fw = _fw(Rec("A", log, bind=Status.success()), observer=lambda p, pl, c, s: seen.append((p, pl, c)))
    state = CycleState()
    bc.run_permit(fw, state, _pi(), "n1")
    bc.run_pre_bind_pre_flights(fw, state, _pi(), "n1")
    await bc.run_pre_bind(fw, state, _pi(), "n1")
    await bc.run_bind(fw, state, _pi(), "n1")
    bc.run_post_bind(fw, state, _pi(), "n1")
    bc.run_unreserve(fw, state, _pi(), "n1")
    points = [(p, c) for p, pl, c in seen if not pl]
    assert points == [("Permit", "Success"), ("PreBindPreFlight", "Success"), ("PreBind", "Success"),
                      ("Bind", "Success"), ("PostBind", "Success"), ("Unreserve", "Success")]
    assert ("Bind", "A", "Success") in seen


# -- through the loop -----------------------------------------------------------------------------------
def _harness(*plugins: Any) -> Harness:
    h = Harness(_fw(*plugins, DefaultBinder()))
    h.node("n1")
    return h


async def test_loop_runs_the_points_in_order_and_post_binds() -> None:
    log: list[str] = []
    h = _harness(Rec("A", log), Rec("B", log))
    h.pod("a")
    await h.cycle()
    assert log == ["reserve:A", "reserve:B", "permit:A", "permit:B", "prebind:A", "prebind:B", "bind:A", "bind:B",
                   "postbind:A", "postbind:B"]
    assert ("bind", ("default/a", "n1", "uid-a")) in h.kube.calls  # A and B skipped Bind: DefaultBinder bound
    # PreBind had work: the Pod was nominated to the node first (NominatedNodeNameForExpectation).
    assert h.kube.status_patches[0] == ("default/a", {"status": {"nominatedNodeName": "n1"}})


@pytest.mark.parametrize("where", ["prebind", "bind"])
async def test_loop_unreserves_in_reverse_and_forgets_on_pre_bind_or_bind_failure(where: str) -> None:
    log: list[str] = []
    fail = Status.error("disk on fire")
    a = Rec("A", log)
    b = Rec("B", log, pre_bind=fail) if where == "prebind" else Rec("B", log, bind=fail)
    h = _harness(a, b)
    h.pod("a")
    await h.cycle()
    assert log[-2:] == ["unreserve:B", "unreserve:A"]
    assert not any(c[0] == "bind" for c in h.kube.calls)
    assert h.cache.pod_count() == 0  # forgotten
    point = "PreBind" if where == "prebind" else "Bind"
    fs = [e["note"] for e in h.kube.events if e["reason"] == "FailedScheduling"]
    assert fs == [f'running {point} plugin "B": disk on fire']
    assert h.queue.where("default", "a") == BACKOFF_Q


async def test_loop_permit_rejection_is_a_fit_error_and_the_plugin_its_rejector() -> None:
    log: list[str] = []
    h = _harness(Rec("A", log), Rec("P", log, permit=Status.unschedulable("not now")))
    h.pod("a")
    await h.cycle()
    assert log[-2:] == ["unreserve:P", "unreserve:A"] and "prebind:A" not in log
    assert [e["note"] for e in h.kube.events] == ["0/1 nodes are available: 1 not now."]
    qpi = h.queue.get("default", "a")
    assert qpi is not None and qpi.unschedulable_plugins == frozenset({"P"})
    assert h.queue.where("default", "a") == UNSCHEDULABLE_Q
    assert h.cache.pod_count() == 0


async def test_gang_waits_until_the_last_member_is_reserved_then_all_bind() -> None:
    gang = GangPermit(min_member=3, timeout=30)
    h = Harness(_fw(gang, DefaultBinder()))
    h.node("n1")
    for name in ("g1", "g2", "g3"):
        p = h.pod(name)
        p["metadata"]["labels"] = {GANG_LABEL: "job"}
    for _ in range(2):
        qpi = h.queue.pop_nowait()
        assert qpi is not None
        h.loop.schedule_one(qpi)
    await asyncio.sleep(0)
    assert len(h.fw.waiting_pods) == 2 and not any(c[0] == "bind" for c in h.kube.calls)
    # Waiting Pods were nominated (WaitOnPermit will run) and still hold their room in the cache.
    assert {k for k, _ in h.kube.status_patches} == {"default/g1", "default/g2"}
    assert h.cache.pod_count() == 2
    qpi = h.queue.pop_nowait()
    assert qpi is not None
    h.loop.schedule_one(qpi)
    await h.loop.drain()
    assert sorted(c[1][0] for c in h.kube.calls if c[0] == "bind") == ["default/g1", "default/g2", "default/g3"]
    assert len(h.fw.waiting_pods) == 0
    assert m.REGISTRY.get_sample_value("scheduler_permit_wait_duration_seconds_count", {"result": "Success"})


async def test_gang_member_times_out_unreserved_and_unschedulable() -> None:
    gang = GangPermit(min_member=2, timeout=0.05)
    log: list[str] = []
    h = Harness(_fw(Rec("A", log), gang, DefaultBinder()))
    h.node("n1")
    p = h.pod("g1")
    p["metadata"]["labels"] = {GANG_LABEL: "job"}
    await h.cycle()
    assert not any(c[0] == "bind" for c in h.kube.calls)
    assert log[-1] == "unreserve:A"
    notes = [e["note"] for e in h.kube.events if e["reason"] == "FailedScheduling"]
    assert notes == ["0/1 nodes are available: 1 rejected due to timeout after waiting 50ms at plugin GangPermit."]
    qpi = h.queue.get("default", "g1")
    assert qpi is not None and qpi.unschedulable_plugins == frozenset({"GangPermit"})
    # The freed room is offered to others after the Pod's own requeue, which therefore does not
    # count it as an in-flight event: the Pod waits for an event its rejector cares about.
    assert h.queue.where("default", "g1") == UNSCHEDULABLE_Q
    assert h.cache.pod_count() == 0


async def test_deleting_a_waiting_pod_rejects_it_and_its_cycle_cleans_up() -> None:
    gang = GangPermit(min_member=2, timeout=60)
    log: list[str] = []
    h = Harness(_fw(Rec("A", log), gang, DefaultBinder()))
    h.node("n1")
    p = h.pod("g1")
    p["metadata"]["labels"] = {GANG_LABEL: "job"}
    qpi = h.queue.pop_nowait()
    assert qpi is not None
    h.loop.schedule_one(qpi)
    await asyncio.sleep(0)
    assert len(h.fw.waiting_pods) == 1
    handlers = EventHandlers(h.cache, h.queue, {"py-scheduler": h.fw})
    del h.pods["default/g1"]
    handlers._pod_delete(p)
    await asyncio.wait_for(h.loop.drain(), 2)
    assert len(h.fw.waiting_pods) == 0
    assert log[-1] == "unreserve:A" and h.cache.pod_count() == 0
    assert not any(c[0] == "bind" for c in h.kube.calls)


class PreemptsWaiting:
    """Rejects Pod ``high`` everywhere; its PostFilter nominates n1 with the (waiting) Pod ``g1`` as
    the victim, as DefaultPreemption would pick an assumed lower-priority Pod."""

    name = "PreemptsWaiting"

    def __init__(self) -> None:
        self.h: Harness | None = None

    def filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status:
        return Status(Code.UNSCHEDULABLE, ["Insufficient cpu"]) if pod.name == "high" else Status.success()

    def post_filter(self, state: CycleState, pod: PodInfo, statuses: dict[str, Status]) -> tuple[Any, Status]:
        from py_scheduler.framework.interfaces import PostFilterResult

        assert self.h is not None
        victim = self.h.cache.get_pod(self.h.pods["default/g1"])
        assert victim is not None
        return PostFilterResult("n1", [victim]), Status.success()


async def test_a_waiting_victim_is_preempted_in_memory_not_deleted() -> None:
    gang = GangPermit(min_member=2, timeout=60)
    log: list[str] = []
    pre = PreemptsWaiting()
    h = Harness(_fw(Rec("A", log), gang, pre, DefaultBinder()))
    pre.h = h
    h.node("n1")
    p = h.pod("g1")
    p["metadata"]["labels"] = {GANG_LABEL: "job"}
    qpi = h.queue.pop_nowait()
    assert qpi is not None
    h.loop.schedule_one(qpi)
    await asyncio.sleep(0)
    assert h.fw.waiting_pods.get("uid-g1") is not None
    h.pod("high")
    await h.cycle()
    assert h.kube.deleted == []  # preempted in memory: no API delete
    preempted = [e["note"] for e in h.kube.events if e["reason"] == "Preempted"]
    assert preempted == ["Preempted by pod uid-high on node n1 (in kube-scheduler memory)."]
    assert h.fw.waiting_pods.get("uid-g1") is None and h.cache.pod_count() == 0
    assert log[-1] == "unreserve:A"
    fs = [e["note"] for e in h.kube.events if e["reason"] == "FailedScheduling"
          and e["regarding"]["name"] == "g1"]
    assert fs == ["waiting on permit for pod: preempted"]
    assert h.queue.where("default", "g1") == BACKOFF_Q


async def test_a_pod_with_nothing_to_wait_for_or_pre_bind_costs_no_extra_write() -> None:
    """No Permit wait, every PreBindPreFlight Skip: no nominatedNodeName write, the Binding (with the
    annotations) is the only Pod write."""
    log: list[str] = []
    h = _harness(Rec("A", log, pre_flight=Status.skip()))
    h.pod("a")
    await h.cycle()
    assert "prebind:A" not in log and h.kube.status_patches == []
    assert [c[0] for c in h.kube.calls if c[0] not in ("event", "event-series")] == ["bind"]
