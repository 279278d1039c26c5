"""PrioritySort: the default QueueSort plugin.

Upstream: ``pkg/scheduler/framework/plugins/queuesort/priority_sort.go``: higher ``spec.priority``
first; equal priorities by the time the Pod entered the queue (earlier first).
"""

from __future__ import annotations

from typing import Any

from py_scheduler.framework.handle import Handle
from py_scheduler.framework.interfaces import QueuedPodInfo

NAME = "PrioritySort"


class PrioritySort:
    """QueueSort by (priority desc, queue timestamp asc)."""

    name = NAME

    @classmethod
    def create(cls, args: dict[str, Any], handle: Handle) -> PrioritySort:
        return cls()

    def less(self, a: QueuedPodInfo, b: QueuedPodInfo) -> bool:
        p1, p2 = a.pod_info.priority, b.pod_info.priority
        return p1 > p2 or (p1 == p2 and a.timestamp < b.timestamp)
