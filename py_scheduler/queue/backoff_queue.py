"""backoffQ: Pods waiting out their backoff before they may be retried (upstream:
``pkg/scheduler/backend/queue/backoff_queue.go``).

Per-Pod exponential backoff ``initial * 2^(n-1)`` capped at max (seconds), ``n`` the Pod's
consecutive internal errors, else its rejections by plugins. Two heaps ordered by backoff expiry:
Pods rejected by plugins (``podBackoffQ``) and Pods that hit an error (``podErrorBackoffQ``). With
``SchedulerPopFromBackoffQ`` (on by default since 1.33) expiries are truncated to 1 s ordering
windows and ties go by QueueSort, so the scheduler may pop the head of backoffQ when activeQ is empty.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

from py_scheduler.queue.heap import Heap, Less
from py_scheduler.queue.queued_pod_info import QueuedPodInfo

DEFAULT_POD_INITIAL_BACKOFF_SECONDS = 1.0
"""``DefaultPodInitialBackoffDuration``."""
DEFAULT_POD_MAX_BACKOFF_SECONDS = 10.0
"""``DefaultPodMaxBackoffDuration``."""
BACKOFF_ORDERING_WINDOW = 1.0
"""``backoffQOrderingWindowDuration``: backoff expirations are truncated to whole seconds."""


class BackoffQueue:
    """``backoffQueue``.

    Args:
        now: the queue's clock (seconds).
        less: activeQ's QueueSort, the tie break within one ordering window.
        pod_initial_backoff / pod_max_backoff: seconds; a max of 0 disables backoff.
        pop_from_backoff_q: ``SchedulerPopFromBackoffQ`` (windows and QueueSort ties when on).
    """

    def __init__(self, now: Callable[[], float], less: Less, *,
                 pod_initial_backoff: float = DEFAULT_POD_INITIAL_BACKOFF_SECONDS,
                 pod_max_backoff: float = DEFAULT_POD_MAX_BACKOFF_SECONDS,
                 pop_from_backoff_q: bool = True) -> None:
        self._now = now
        self._less = less
        self.pod_initial_backoff = pod_initial_backoff
        self.pod_max_backoff = pod_max_backoff
        self.pop_from_backoff_q = pop_from_backoff_q
        self.backoff = Heap(self._less_backoff_with_priority if pop_from_backoff_q else self._less_backoff)
        """``podBackoffQ``: Pods rejected by plugins."""
        self.error_backoff = Heap(self._less_backoff)
        """``podErrorBackoffQ``: Pods whose attempt ended in an internal error."""
        self.heaps = (self.backoff, self.error_backoff)

    def _align(self, t: float) -> float:
        if not self.pop_from_backoff_q:
            return t
        return math.floor(t / BACKOFF_ORDERING_WINDOW) * BACKOFF_ORDERING_WINDOW

    def calculate_backoff_duration(self, count: int) -> float:
        """``calculateBackoffDuration``: ``initial * 2^(count-1)``, at most ``max`` (seconds)."""
        if count <= 0:
            return 0.0
        shift = min(count - 1, 62)
        if self.pod_initial_backoff > self.pod_max_backoff / (2**shift):
            return self.pod_max_backoff
        return float(self.pod_initial_backoff * (2**shift))

    def backoff_time(self, qpi: QueuedPodInfo) -> float | None:
        """``getBackoffTime``: when ``qpi``'s backoff ends (None: no backoff), cached on the Pod."""
        if self.pod_max_backoff == 0:
            return None
        count = qpi.consecutive_errors_count if qpi.consecutive_errors_count > 0 else qpi.unschedulable_count
        if count == 0:
            return None
        if qpi.backoff_expiration is None:
            qpi.backoff_expiration = self._align(qpi.timestamp + self.calculate_backoff_duration(count))
        return qpi.backoff_expiration

    def is_backing_off(self, qpi: QueuedPodInfo) -> bool:
        """``isEntityBackingoff``: the backoff expiration is not before the current window."""
        bt = self.backoff_time(qpi)
        if bt is None:
            return False
        return not bt < self._align(self._now())

    def _less_backoff(self, a: QueuedPodInfo, b: QueuedPodInfo) -> bool:
        return (self.backoff_time(a) or 0.0) < (self.backoff_time(b) or 0.0)

    def _less_backoff_with_priority(self, a: QueuedPodInfo, b: QueuedPodInfo) -> bool:
        ba, bb = self.backoff_time(a) or 0.0, self.backoff_time(b) or 0.0
        if ba != bb:
            return ba < bb
        return self._less(a, b)

    def add(self, qpi: QueuedPodInfo) -> None:
        """``add``: into podBackoffQ when plugins rejected the Pod, else podErrorBackoffQ."""
        if qpi.rejector_plugins():
            self.error_backoff.delete(qpi.key)
            self.backoff.add_or_update(qpi)
        else:
            self.backoff.delete(qpi.key)
            self.error_backoff.add_or_update(qpi)

    def get(self, key: str) -> QueuedPodInfo | None:
        return self.backoff.get(key) or self.error_backoff.get(key)

    def delete(self, key: str) -> QueuedPodInfo | None:
        return self.backoff.delete(key) or self.error_backoff.delete(key)

    def __contains__(self, key: str) -> bool:
        return key in self.backoff or key in self.error_backoff

    def __len__(self) -> int:
        return len(self.backoff) + len(self.error_backoff)

    def list(self) -> list[QueuedPodInfo]:
        return self.backoff.list() + self.error_backoff.list()

    def pop_all_backoff_completed(self) -> Iterator[QueuedPodInfo]:
        """``popAllBackoffCompleted``: the Pods whose backoff ended, each queue in expiry order
        (lazily: each is removed as it is yielded)."""
        for heap in self.heaps:
            while True:
                head = heap.peek()
                if head is None or self.is_backing_off(head):
                    break
                heap.pop()
                yield head
