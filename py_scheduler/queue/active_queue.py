"""activeQ: the Pods ready to be scheduled, and the Pods in flight (upstream:
``pkg/scheduler/backend/queue/active_queue.go``).

A :class:`~py_scheduler.queue.heap.Heap` ordered by QueueSort, plus the in-flight bookkeeping:
a popped Pod is in flight until ``Done``; the cluster events seen while any Pod is in flight are
recorded (``inFlightEvents``, one list in arrival order with a marker per in-flight Pod), so a Pod
that comes back unschedulable is checked against the events it missed.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from py_scheduler.framework.events import ClusterEvent
from py_scheduler.queue.heap import Heap, Less
from py_scheduler.queue.queued_pod_info import QueuedPodInfo

_IN_FLIGHT_POD = object()


class ActiveQueue(Heap):
    """``activeQueue``: the heap (``queue``), ``inFlightPods``, ``inFlightEvents``, ``schedCycle``."""

    def __init__(self, less: Less) -> None:
        super().__init__(less)
        self.in_flight: dict[str, list[Any]] = {}
        """uid -> its marker in :attr:`in_flight_events` (``[_IN_FLIGHT_POD, key]``)."""
        self.in_flight_events: deque[list[Any]] = deque()
        """Markers and ``[ClusterEvent, old, new]`` in arrival order."""
        self.sched_cycle = 0

    def mark_in_flight(self, qpi: QueuedPodInfo) -> None:
        """A popped Pod: its attempt counted, in flight until :meth:`done`."""
        qpi.attempts += 1
        marker = [_IN_FLIGHT_POD, qpi.key]
        self.in_flight[qpi.uid] = marker
        self.in_flight_events.append(marker)

    def done(self, uid: str) -> None:
        """``done``: the Pod's attempt is over; forget the events recorded while it was in flight."""
        marker = self.in_flight.pop(uid, None)
        if marker is None:
            return
        marker[0] = None  # tombstone: skipped by scans, trimmed from the front
        while self.in_flight_events:
            head = self.in_flight_events[0]
            if head[0] is _IN_FLIGHT_POD:
                break
            self.in_flight_events.popleft()
        if not self.in_flight:
            self.in_flight_events.clear()

    def in_flight_key(self, key: str) -> bool:
        """Whether the Pod ``namespace/name`` is in flight."""
        return any(e[1] == key for e in self.in_flight.values())

    def cluster_events_for_pod(self, uid: str) -> list[list[Any]]:
        """``clusterEventsForPod``: the events recorded since the Pod was popped (KeyError: not in flight)."""
        marker = self.in_flight.get(uid)
        if marker is None:
            raise KeyError(uid)
        out: list[list[Any]] = []
        seen = False
        for e in self.in_flight_events:
            if e is marker:
                seen = True
                continue
            if seen and isinstance(e[0], ClusterEvent):
                out.append(e)
        return out

    def event_counts(self) -> dict[str, int]:
        """The recorded events by label and the in-flight Pods as ``PodPopped`` (upstream's
        ``InFlightEvents`` gauge, ``metrics.PodPoppedInFlightEvent``)."""
        out = {"PodPopped": len(self.in_flight)} if self.in_flight else {}
        for e in self.in_flight_events:
            if isinstance(e[0], ClusterEvent):
                label = e[0].label()
                out[label] = out.get(label, 0) + 1
        return out

    def add_event_if_any_in_flight(self, ev: ClusterEvent, old: Any, new: Any) -> None:
        """``addEventIfAnyInFlight``."""
        if self.in_flight:
            self.in_flight_events.append([ev, old, new])
