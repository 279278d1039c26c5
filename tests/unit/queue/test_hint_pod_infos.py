"""The queueing hints parse a queued Pod from its own PodInfo (``HINT_POD_INFOS.pin`` in
``queue/scheduling_queue.py`` ``_worth_requeuing``), however many Pods wait.

An adversarial run: past 4096 unschedulable Pods (the hint memo's size, emptied when full) every
cluster event re-parsed every waiting Pod's affinity or tolerations, 3-6 s per Node event with 5 000
to 8 000 Pods of 100 requirements each; below it, the first event after a batch became unschedulable
parsed them all at once (6-7 s at 4 000 Pods), although the scheduling cycle had parsed each already.
"""

from __future__ import annotations

from typing import Any

from py_scheduler.framework.events import ActionType, ClusterEvent, ClusterEventWithHint, QueueingHint, Resource
from py_scheduler.framework.memo import HINT_POD_INFOS
from py_scheduler.framework.runtime import Framework
from py_scheduler.framework.types import CycleState, NodeInfo, PodInfo, Status
from py_scheduler.plugins.helpers.queueing_hints import hint_pod_info
from py_scheduler.plugins.queue_sort import PrioritySort
from py_scheduler.queue.queued_pod_info import QueuedPodInfo
from py_scheduler.queue.scheduling_queue import PriorityQueue
from tests.unit.queue.test_scheduling_queue import Clock, fail, node, pod


class ParsingHint:
    """A Filter plugin whose Node/Add hint reads the rejected Pod through ``hint_pod_info``, as the
    real hints do, and records what it got."""

    name = "ParsingHint"

    def __init__(self) -> None:
        self.seen: list[tuple[dict[str, Any], PodInfo]] = []

    def filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status:
        return Status.success()

    def events_to_register(self) -> list[ClusterEventWithHint]:
        def hint(p: dict[str, Any], old: Any, new: Any) -> QueueingHint:
            self.seen.append((p, hint_pod_info(p)))
            return QueueingHint.QUEUE_SKIP

        return [ClusterEventWithHint(ClusterEvent(Resource.NODE, ActionType.ADD), hint)]


def test_a_pool_larger_than_the_hint_memo_is_not_parsed_again_at_each_event() -> None:
    n = HINT_POD_INFOS.size + 904  # 5000
    plugin = ParsingHint()
    q = PriorityQueue({"py-scheduler": Framework("py-scheduler", [(PrioritySort(), 0), (plugin, 0)])}, now=Clock())
    for i in range(n):
        q.add(pod(f"p{i}"))
    queued: dict[str, QueuedPodInfo] = {}
    while (qpi := q.pop_nowait()) is not None:
        queued[qpi.uid] = qpi
        fail(q, qpi, "ParsingHint")
    assert len(queued) == n
    for event in range(2):
        plugin.seen.clear()
        q.move_all_to_active_or_backoff(ClusterEvent(Resource.NODE, ActionType.ADD), None, node(f"n{event}"))
        assert len(plugin.seen) == n
        for p, pi in plugin.seen:  # the queue's own PodInfo: nothing parsed again
            assert pi is queued[p["metadata"]["uid"]].pod_info
