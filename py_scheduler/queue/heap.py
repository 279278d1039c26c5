"""A keyed binary heap of queued Pods (upstream: ``pkg/scheduler/backend/heap/heap.go``), the store
behind activeQ and both backoff queues.

Keys are ``namespace/name`` (:attr:`QueuedPodInfo.key`); ``less(a, b)`` orders the heap (QueueSort
for activeQ, backoff expiry for the backoff queues). Updates and deletes mark the old entry dead
(lazy deletion) and compact when dead entries dominate, so each operation is O(log n).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

from py_scheduler.queue.queued_pod_info import QueuedPodInfo

Less = Callable[[QueuedPodInfo, QueuedPodInfo], bool]


class _Entry:
    __slots__ = ("alive", "less", "qpi")

    def __init__(self, qpi: QueuedPodInfo, less: Less) -> None:
        self.qpi = qpi
        self.less = less
        self.alive = True

    def __lt__(self, other: _Entry) -> bool:
        return self.less(self.qpi, other.qpi)


class Heap:
    """``heap.Heap``: AddOrUpdate, Peek, Pop, Get, Delete, Has, Len, List."""

    def __init__(self, less: Less) -> None:
        self._less = less
        self._heap: list[_Entry] = []
        self._items: dict[str, _Entry] = {}
    def add_or_update(self, qpi: QueuedPodInfo) -> None:
        old = self._items.get(qpi.key)
        if old is not None:
            old.alive = False
        e = _Entry(qpi, self._less)
        self._items[qpi.key] = e
        heapq.heappush(self._heap, e)
        if len(self._heap) > 64 and len(self._heap) > 2 * len(self._items):
            self._heap = [x for x in self._heap if x.alive]
            heapq.heapify(self._heap)

    def _prune(self) -> None:
        while self._heap and not self._heap[0].alive:
            heapq.heappop(self._heap)

    def peek(self) -> QueuedPodInfo | None:
        self._prune()
        return self._heap[0].qpi if self._heap else None

    def pop(self) -> QueuedPodInfo | None:
        self._prune()
        if not self._heap:
            return None
        e = heapq.heappop(self._heap)
        del self._items[e.qpi.key]
        return e.qpi

    def get(self, key: str) -> QueuedPodInfo | None:
        e = self._items.get(key)
        return e.qpi if e is not None else None

    def delete(self, key: str) -> QueuedPodInfo | None:
        e = self._items.pop(key, None)
        if e is None:
            return None
        e.alive = False
        return e.qpi

    def __contains__(self, key: str) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)

    def list(self) -> list[QueuedPodInfo]:
        return [e.qpi for e in self._items.values()]
