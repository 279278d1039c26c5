"""``PriorityQueue.pop_members``: a pod group's queued members popped with the Pod :meth:`pop` returned,
so the group is scheduled in one cycle (upstream pops a ``QueuedPodGroupInfo`` as one entity)."""

from __future__ import annotations

from typing import Any

from py_scheduler.queue.queued_pod_info import QueuedPodInfo
from py_scheduler.queue.scheduling_queue import UNSCHEDULABLE_Q
from tests.unit.queue.test_scheduling_queue import Clock, fail, make_queue, pod


def _member(name: str, group: str, priority: int = 0, **spec: Any) -> dict[str, Any]:
    return pod(name, priority, schedulingGroup={"podGroupName": group}, **spec)


def _in(group: str) -> Any:
    return lambda q: (q.pod.get("spec") or {}).get("schedulingGroup", {}).get("podGroupName") == group


def test_members_come_from_every_sub_queue_but_not_gated_ones() -> None:
    clock = Clock()
    q = make_queue(clock)
    for name in ("a", "b", "c", "d"):
        q.add(_member(name, "g"))
        clock.step(1)
    q.add(_member("gated", "g", schedulingGates=[{"name": "x"}]))
    q.add(_member("other", "h"))
    first = q.pop_nowait()
    assert first is not None and first.pod_info.name == "a"
    b = q.pop_nowait()
    c = q.pop_nowait()
    assert b is not None and c is not None and (b.pod_info.name, c.pod_info.name) == ("b", "c")
    assert fail(q, b, "NodeOnly") == UNSCHEDULABLE_Q
    q.add_unschedulable_if_not_present(c)  # no rejector: error backoff
    cycle = q.scheduling_cycle
    got = q.pop_members(lambda m: m.uid != first.uid and _in("g")(m))
    assert sorted(m.pod_info.name for m in got) == ["b", "c", "d"]
    assert q.scheduling_cycle == cycle  # the group is one cycle
    assert sorted(q.in_flight_uids()) == ["uid-a", "uid-b", "uid-c", "uid-d"]
    assert q.where("default", "gated") is not None and q.where("default", "other") is not None
    assert [q.where("default", n) for n in ("b", "c", "d")] == ["in-flight"] * 3
    assert {m.pod_info.name: m.attempts for m in got} == {"b": 2, "c": 2, "d": 1}
    # Back from a failed group attempt: each ends its in-flight state.
    for m in [first, *got]:
        fail(q, m, "NodeOnly")
    assert q.in_flight_uids() == []
    assert [q.where("default", n) for n in "abcd"] == [UNSCHEDULABLE_Q] * 4


def test_in_flight_members_are_not_popped_twice() -> None:
    q = make_queue(Clock())
    q.add(_member("a", "g"))
    q.add(_member("b", "g"))
    a = q.pop_nowait()
    assert a is not None
    assert [m.pod_info.name for m in q.pop_members(_in("g"))] == ["b"]
    assert q.pop_members(_in("g")) == []


def test_priority_orders_the_members() -> None:
    clock = Clock()
    q = make_queue(clock)
    q.add(_member("low", "g", 1))
    clock.step(1)
    q.add(_member("high", "g", 10))
    clock.step(1)
    q.add(_member("mid", "g", 5))
    got: list[QueuedPodInfo] = q.pop_members(_in("g"))
    assert [m.pod_info.name for m in got] == ["high", "mid", "low"]
