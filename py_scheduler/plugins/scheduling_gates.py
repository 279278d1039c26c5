"""SchedulingGates: Pods with ``spec.schedulingGates`` wait outside activeQ.

Upstream: ``pkg/scheduler/framework/plugins/schedulinggates/scheduling_gates.go`` (PreEnqueue:
UnschedulableAndUnresolvable ``waiting for scheduling gates: [a b]``; the Pod is retried when an
update removes the gates).
"""

from __future__ import annotations

from typing import Any

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
