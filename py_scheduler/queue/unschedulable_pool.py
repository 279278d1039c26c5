"""The unschedulable Pods of the scheduling queue, indexed by what can requeue them.

Upstream: ``pkg/scheduler/backend/queue/unschedulable_entities.go`` (``unschedulableEntities``: a map
of the Pods rejected by a plugin or held by a PreEnqueue plugin) and the loop of
``scheduling_queue.go`` ``moveEntitiesToActiveOrBackoffQueue``, which offers a cluster event to
every one of them. Upstream's loop is cheap in Go; here it cost about 10 us per Pod and event, so
the initial sync of 5000 Nodes against 1000 gated Pods took seconds (issue 21).

The pool keeps, beside the map, each Pod's **group**: the :data:`GroupKey` ``(schedulerName,
rejector plugins, gating plugin)``. Whether an event can requeue a Pod depends on nothing else
before a QueueingHint function runs (``isPodWorthRequeuing`` returns Skip without calling any hint
when no rejector registered a matching event; the gated-Pod shortcut reads only the gating
plugin's events), so :class:`~py_scheduler.queue.scheduling_queue.PriorityQueue` decides that once
per (group, event) and offers the event only to the Pods of interested groups, in the pool's
order. The cost of an event then grows with the number of groups, not Pods.

What the index depends on (and when it is refreshed): a Pod's group is computed by :meth:`put`
from ``qpi.pod_info.scheduler_name``, ``qpi.rejector_plugins()`` and ``qpi.gating_plugin``. The
queue mutates these only on Pods it then re-puts or pops (PreEnqueue, a parse error cleared), and
the scheduling loop only on Pods in flight, which are not in the pool; a change made in place on a
pooled Pod without :meth:`put` would leave it in its old group. The pool's order is the insertion
order of the map (a re-put of a present key keeps its place, as a Python dict and as the plain
loop over it); :meth:`order_of_offer` restores it across groups with a per-key sequence number.
"""

from __future__ import annotations

from collections.abc import ItemsView, ValuesView
from typing import Any, Generic, Protocol, TypeVar

from py_scheduler.framework.types import PodInfo


class Pooled(Protocol):
    """What the pool reads of a queued Pod (``scheduling_queue.QueuedPodInfo``)."""

    @property
    def key(self) -> str: ...

    @property
    def pod_info(self) -> PodInfo: ...

    @property
    def gating_plugin(self) -> str: ...

    def rejector_plugins(self) -> frozenset[str]: ...


Q = TypeVar("Q", bound=Pooled)

GroupKey = tuple[str, frozenset[str], str]
"""``(schedulerName, rejector plugins, gating plugin or "")`` of an unschedulable Pod."""


def group_key(qpi: Pooled) -> GroupKey:
    """The group of ``qpi`` (see the module docstring)."""
    return (qpi.pod_info.scheduler_name, qpi.rejector_plugins(), qpi.gating_plugin)


class UnschedulablePool(Generic[Q]):
    """``unschedulableEntities``: key (``namespace/name``) -> queued Pod, plus the gated keys (for
    the pending gauges, O(1) per event) and the groups of :func:`group_key`.

    Single-threaded (the queue's event loop). Every operation is O(1) but the iterations.
    """

    __slots__ = ("_groups", "_key_group", "_next_seq", "_pods", "_seq", "gated_keys")

    def __init__(self) -> None:
        self._pods: dict[str, Q] = {}
        self._seq: dict[str, int] = {}
        self._next_seq = 0
        self._groups: dict[GroupKey, dict[str, Q]] = {}
        self._key_group: dict[str, GroupKey] = {}
        self.gated_keys: set[str] = set()

    # -- map ---------------------------------------------------------------------------------------
    def put(self, qpi: Q) -> None:
        """Add or replace the Pod under ``qpi.key`` and (re)file it under its current group."""
        key = qpi.key
        if key not in self._pods:
            self._seq[key] = self._next_seq
            self._next_seq += 1
        self._pods[key] = qpi
        if qpi.gating_plugin:
            self.gated_keys.add(key)
        else:
            self.gated_keys.discard(key)
        gk = group_key(qpi)
        old = self._key_group.get(key)
        if old is not None and old != gk:
            self._leave(key, old)
        self._key_group[key] = gk
        self._groups.setdefault(gk, {})[key] = qpi

    def pop(self, key: str) -> Q | None:
        """Remove and return the Pod under ``key`` (None when absent)."""
        self.gated_keys.discard(key)
        qpi = self._pods.pop(key, None)
        if qpi is None:
            return None
        del self._seq[key]
        gk = self._key_group.pop(key, None)
        if gk is not None:
            self._leave(key, gk)
        return qpi

    def _leave(self, key: str, gk: GroupKey) -> None:
        members = self._groups.get(gk)
        if members is None:
            return
        members.pop(key, None)
        if not members:
            del self._groups[gk]

    def get(self, key: str) -> Q | None:
        return self._pods.get(key)

    def values(self) -> ValuesView[Q]:
        """Every Pod, in the pool's order."""
        return self._pods.values()

    def __contains__(self, key: object) -> bool:
        return key in self._pods

    def __len__(self) -> int:
        return len(self._pods)

    # -- index -------------------------------------------------------------------------------------
    def groups(self) -> ItemsView[GroupKey, dict[str, Q]]:
        """``(group key, key -> Pod)`` of every non-empty group, each group's Pods in the order
        they joined it (not necessarily the pool's order: see :meth:`order_of_offer`). A live
        view: do not change the pool while iterating."""
        return self._groups.items()

    def order_of_offer(self, offer: tuple[Q, Any]) -> int:
        """Sort key of ``(pooled Pod, anything)`` pairs that restores the pool's order."""
        return self._seq[offer[0].key]
