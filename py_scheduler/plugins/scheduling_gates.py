"""SchedulingGates: Pods with ``spec.schedulingGates`` wait outside activeQ.

Upstream: ``pkg/scheduler/framework/plugins/schedulinggates/scheduling_gates.go`` (PreEnqueue:
UnschedulableAndUnresolvable ``waiting for scheduling gates: [a b]``; EventsToRegister: only the Pod's
own update that removes its gates, ``TargetPod/UpdatePodSchedulingGatesEliminated``, whose hint always
queues). Without that registration the queue would fall back to every event for this plugin and offer
every Node add, bound Pod... to every gated Pod, rerunning PreEnqueue each time (issue 21).
"""

from __future__ import annotations

from typing import Any

from py_scheduler.framework.events import ActionType, ClusterEvent, ClusterEventWithHint, QueueingHint, Resource
from py_scheduler.framework.handle import Handle
from py_scheduler.framework.types import Code, PodInfo, Status

NAME = "SchedulingGates"


class SchedulingGates:
    """PreEnqueue plugin: gated Pods never reach a scheduling cycle."""

    name = NAME

    @classmethod
    def create(cls, args: dict[str, Any], handle: Handle) -> SchedulingGates:
        return cls()

    def pre_enqueue(self, pod: PodInfo) -> Status:
        gates = pod.spec.get("schedulingGates") or []
        if not gates:
            return Status.success()
        names = [str(g.get("name", "")) if isinstance(g, dict) else str(g) for g in gates]
        return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [f"waiting for scheduling gates: [{' '.join(names)}]"],
                      NAME)

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """``EventsToRegister``: a gated Pod can become schedulable only when its own update removes
        its scheduling gates."""
        ev = ClusterEvent(Resource.TARGET_POD, ActionType.UPDATE_POD_SCHEDULING_GATES_ELIMINATED)
        return [ClusterEventWithHint(ev, _schedulable_after_gates_eliminated)]


def _schedulable_after_gates_eliminated(pod: Any, old: Any, new: Any) -> QueueingHint:
    """``isSchedulableAfterUpdateTargetPodSchedulingGatesEliminated``: always Queue."""
    return QueueingHint.QUEUE
