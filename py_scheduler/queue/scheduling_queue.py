"""The scheduling queue: activeQ, backoffQ and the unschedulable Pods, with event-driven requeueing.

Upstream: ``pkg/scheduler/backend/queue/scheduling_queue.go`` (``PriorityQueue``: ``Add``,
``AddUnschedulablePodIfNotPresent``, ``Update``, ``Delete``, ``MoveAllToActiveOrBackoffQueue``,
``isPodWorthRequeuing``, ``requeueEntityWithQueueingStrategy``, ``flushBackoffQCompleted``,
``flushUnschedulableEntitiesLeftover``, PreEnqueue gating, ``NominatedPodsForNode``). Its parts
follow upstream's files: activeQ and the in-flight Pods in ``queue/active_queue.py``, backoffQ in
``queue/backoff_queue.py``, the nominator in ``queue/nominator.py`` (embedded, as upstream embeds
``*nominator``), the heap in ``queue/heap.py``, the unschedulable Pods in ``queue/unschedulable_pool.py``.

Single-threaded: every method runs on the asyncio event loop of the live process (or a test), so
there are no locks; :meth:`PriorityQueue.pop` awaits the next Pod. Time comes from an injectable
``now()`` (seconds, wall clock by default: the backoff windows are aligned to whole seconds as
upstream's ``time.Truncate``), so tests drive a fake clock.

Pods are keyed by ``namespace/name`` as upstream; in-flight Pods by UID.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from enum import IntEnum
from typing import Any, Protocol

from py_scheduler.framework.errors import PodParseError
from py_scheduler.framework.events import (
    BACKOFF_COMPLETE,
    EVENT_FORCE_ACTIVATE,
    EVENT_UNSCHEDULABLE_TIMEOUT,
    EVENT_UNSCHEDULED_POD_ADD,
    FORCE_ACTIVATE,
    POP_FROM_BACKOFF_Q,
    SCHEDULE_ATTEMPT_FAILURE,
    ClusterEvent,
    QueueingHint,
    is_wildcard,
    match_any_cluster_event,
    match_cluster_events,
    pod_scheduling_properties_change,
)
from py_scheduler.framework.interfaces import (
    PreEnqueuePlugin,
)
from py_scheduler.framework.memo import HINT_POD_INFOS
from py_scheduler.framework.objects import Obj
from py_scheduler.framework.types import Code, PodInfo, Status
from py_scheduler.queue.active_queue import ActiveQueue
from py_scheduler.queue.backoff_queue import (
    BACKOFF_ORDERING_WINDOW,
    DEFAULT_POD_INITIAL_BACKOFF_SECONDS,
    DEFAULT_POD_MAX_BACKOFF_SECONDS,
    BackoffQueue,
)
from py_scheduler.queue.hint_map import HintFunction, build_hint_map, matching_hints
from py_scheduler.queue.nominator import Nominator, PodLister
from py_scheduler.queue.queued_pod_info import QueuedPodInfo, parse_pod
from py_scheduler.queue.unschedulable_pool import GroupKey, UnschedulablePool

log = logging.getLogger("py_scheduler.queue")


DEFAULT_POD_MAX_IN_UNSCHEDULABLE_PODS_DURATION = 300.0
"""``DefaultPodMaxInUnschedulablePodsDuration`` (5 minutes)."""
UNSCHEDULABLE_FLUSH_PERIOD = 30.0
"""How often Pods stuck longer than the max duration are flushed (``wait.Until(..., 30s)``)."""

ACTIVE_Q = "active"
BACKOFF_Q = "backoff"
UNSCHEDULABLE_Q = "unschedulable"
GATED = "gated"

PARSE_ERROR_PLUGIN = "PodSpecParse"
"""Pseudo rejector recorded for a Pod whose fields cannot be parsed: it waits in the unschedulable
Pods until the Pod itself is updated (or the 5-minute flush), instead of retrying every backoff."""


class QueueingStrategy(IntEnum):
    """``queueingStrategy``: where an event sends an unschedulable Pod."""

    SKIP = 0
    AFTER_BACKOFF = 1
    IMMEDIATELY = 2


class QueueMetrics(Protocol):
    """Metrics sink of the queue (``scheduler_queue_incoming_pods_total``, ``scheduler_pending_pods``,
    ``scheduler_unschedulable_pods``); the live process adapts ``py_scheduler.app.telemetry.metrics``."""

    def incoming(self, queue: str, event: str) -> None: ...

    def pending(self, active: int, backoff: int, unschedulable: int, gated: int) -> None: ...

    def unschedulable_reason(self, plugin: str, profile: str, delta: int) -> None: ...


_MEMO_MAX = 4096
"""Entries each fan-out memo holds at most (groups x events, a few dozen in practice); full, it is cleared."""


class PriorityQueue(Nominator):
    """``PriorityQueue`` for all profiles of the process.

    Args:
        frameworks: schedulerName -> Framework (``py_scheduler.framework.runtime.Framework``); the first
            one's QueueSort orders activeQ (upstream requires the same QueueSort in every profile).
        pod_initial_backoff / pod_max_backoff: seconds (``podInitialBackoffSeconds`` 1,
            ``podMaxBackoffSeconds`` 10); a max of 0 disables backoff.
        pod_max_in_unschedulable_pods_duration: seconds before an unschedulable Pod is retried even
            without a matching event (5 minutes).
        now: clock in seconds (default ``time.time``).
        metrics: optional :class:`QueueMetrics`.
        pop_from_backoff_q: ``SchedulerPopFromBackoffQ`` (default on, as in v1.37).
        pod_lister: the informer's Pods (:data:`PodLister`); the nominator asks it before nominating
            a Pod (a Pod gone or already bound is not nominated). None: no check (tests, offline).
            May be set later through the ``pod_lister`` attribute.
    """

    def __init__(self, frameworks: Mapping[str, Any], *,
                 pod_initial_backoff: float = DEFAULT_POD_INITIAL_BACKOFF_SECONDS,
                 pod_max_backoff: float = DEFAULT_POD_MAX_BACKOFF_SECONDS,
                 pod_max_in_unschedulable_pods_duration: float = DEFAULT_POD_MAX_IN_UNSCHEDULABLE_PODS_DURATION,
                 now: Callable[[], float] = time.time,
                 metrics: QueueMetrics | None = None,
                 pop_from_backoff_q: bool = True,
                 pod_lister: PodLister | None = None) -> None:
        super().__init__(pod_lister)
        self._now = now
        self.pod_max_in_unschedulable_pods_duration = pod_max_in_unschedulable_pods_duration
        self.pop_from_backoff_q = pop_from_backoff_q
        self._metrics = metrics
        fws = list(frameworks.values())
        self._less: Callable[[QueuedPodInfo, QueuedPodInfo], bool] = (
            fws[0].less if fws else (lambda a, b: a.timestamp < b.timestamp))
        self._active = ActiveQueue(self._less)
        self._backoff_q = BackoffQueue(now, self._less, pod_initial_backoff=pod_initial_backoff,
                                       pod_max_backoff=pod_max_backoff, pop_from_backoff_q=pop_from_backoff_q)
        self._unschedulable: UnschedulablePool[QueuedPodInfo] = UnschedulablePool()
        self._closed = False
        self._wakeup = asyncio.Event()
        self._hint_maps: dict[str, dict[ClusterEvent, list[HintFunction]]] = {}
        # Memos of the fan-out (fixed hint maps, so never stale; cleared when large): event -> of
        # interest to any plugin; (group, event) -> the hint functions isPodWorthRequeuing would
        # call for a Pod of that group, in its order, or None when every Pod of the group would be
        # skipped without calling one (see queue/unschedulable_pool.py).
        self._interest_memo: dict[ClusterEvent, bool] = {}
        self._group_memo: dict[tuple[GroupKey, ClusterEvent], list[HintFunction] | None] = {}
        self._plugin_events: dict[str, dict[str, list[ClusterEvent]]] = {}
        self._pre_enqueue: dict[str, list[PreEnqueuePlugin]] = {}
        for name, fw in frameworks.items():
            self._hint_maps[name], self._plugin_events[name] = build_hint_map(fw)
            self._pre_enqueue[name] = [p for p in fw.plugins.values() if isinstance(p, PreEnqueuePlugin)]

    def now(self) -> float:
        return self._now()

    # -- metrics ---------------------------------------------------------------------------------
    def _incoming(self, queue: str, event: str) -> None:
        if self._metrics is not None:
            self._metrics.incoming(queue, event)

    def _reason(self, qpi: QueuedPodInfo, delta: int, plugins: Iterable[str] | None = None) -> None:
        if self._metrics is None:
            return
        for plugin in plugins if plugins is not None else qpi.rejector_plugins():
            self._metrics.unschedulable_reason(plugin, qpi.pod_info.scheduler_name, delta)

    def _unschedulable_pop(self, key: str) -> QueuedPodInfo | None:
        return self._unschedulable.pop(key)

    def _update_pending(self) -> None:
        if self._metrics is not None:
            # A running set, not a scan of the unschedulable Pods on every queue event (O(1) per event
            # with thousands of unschedulable Pods).
            gated = len(self._unschedulable.gated_keys)
            self._metrics.pending(len(self._active), len(self._backoff_q),
                                  len(self._unschedulable) - gated, gated)

    # -- PreEnqueue --------------------------------------------------------------------------------
    def _run_pre_enqueue(self, qpi: QueuedPodInfo) -> None:
        plugins = self._pre_enqueue.get(qpi.pod_info.scheduler_name, [])
        ordered = sorted(plugins, key=lambda p: p.name != qpi.gating_plugin) if qpi.gating_plugin else plugins
        for pl in ordered:
            try:
                s: Status = pl.pre_enqueue(qpi.pod_info)
            except Exception as exc:  # a plugin bug must not take the queue down
                log.exception("PreEnqueue plugin %s failed for pod %s", pl.name, qpi.key)
                s = Status(Code.ERROR, [str(exc)], pl.name)
            if s.is_success():
                continue
            if pl.name not in qpi.rejector_plugins():
                self._reason(qpi, 1, [pl.name])
            qpi.unschedulable_plugins = qpi.unschedulable_plugins | {pl.name}
            qpi.gating_plugin = pl.name
            qpi.gating_plugin_events = self._plugin_events.get(qpi.pod_info.scheduler_name, {}).get(pl.name, [])
            log.debug("Status after running PreEnqueue plugin pod=%s plugin=%s status=%s",
                      qpi.key, pl.name, s.message())
            return
        qpi.gating_plugin = ""
        qpi.gating_plugin_events = []

    # -- moves -------------------------------------------------------------------------------------
    def _to_unschedulable(self, qpi: QueuedPodInfo, event: str) -> None:
        known = self._unschedulable.get(qpi.key) is not None  # addOrUpdate counts arrivals, not updates
        self._unschedulable.put(qpi)
        if not known:
            self._incoming(GATED if qpi.gated else UNSCHEDULABLE_Q, event)

    def _move_to_active(self, qpi: QueuedPodInfo, event: str, moves_from_backoff: bool) -> bool:
        """``moveToActiveQ``: PreEnqueue, then activeQ (or the unschedulable Pods when gated)."""
        if not (self.pop_from_backoff_q and moves_from_backoff):
            self._run_pre_enqueue(qpi)
        if qpi.gated:
            qpi.was_flushed_from_unschedulable = False
            self._to_unschedulable(qpi, event)
            return False
        if not qpi.initial_attempt_set:
            qpi.initial_attempt_timestamp = self._now()
            qpi.initial_attempt_set = True
        self._unschedulable_pop(qpi.key)
        self._active.add_or_update(qpi)
        self._incoming(ACTIVE_Q, event)
        return True

    def _move_to_backoff(self, qpi: QueuedPodInfo, event: str) -> bool:
        """``moveToBackoffQ`` (PreEnqueue runs here when popping from backoffQ is enabled)."""
        if self.pop_from_backoff_q:
            self._run_pre_enqueue(qpi)
            if qpi.gated:
                qpi.was_flushed_from_unschedulable = False
                self._to_unschedulable(qpi, event)
                return False
        self._unschedulable_pop(qpi.key)
        self._backoff_q.add(qpi)
        self._incoming(BACKOFF_Q, event)
        return True

    def _requeue(self, qpi: QueuedPodInfo, strategy: QueueingStrategy, event: str) -> str:
        """``requeueEntityWithQueueingStrategy``: returns the queue the Pod went to."""
        if strategy == QueueingStrategy.SKIP:
            self._to_unschedulable(qpi, event)
            return UNSCHEDULABLE_Q
        if strategy == QueueingStrategy.AFTER_BACKOFF and self._backoff_q.is_backing_off(qpi):
            return BACKOFF_Q if self._move_to_backoff(qpi, event) else UNSCHEDULABLE_Q
        return ACTIVE_Q if self._move_to_active(qpi, event, False) else UNSCHEDULABLE_Q

    def _wake(self) -> None:
        self._wakeup.set()

    # -- public API ------------------------------------------------------------------------------
    def new_queued_pod_info(self, pod: Obj) -> QueuedPodInfo:
        """A fresh QueuedPodInfo for ``pod`` stamped with the current time."""
        pi, err = parse_pod(pod)
        qpi = QueuedPodInfo(pi, timestamp=self._now())
        qpi.parse_error = err
        return qpi

    def add(self, pod: Obj) -> None:
        """``Add``: a new unscheduled Pod goes to activeQ (or waits gated); one already queued is updated."""
        key = f"{(pod.get('metadata') or {}).get('namespace') or 'default'}/{(pod.get('metadata') or {}).get('name')}"
        existing = self._get(key)
        if existing is not None:
            self.update(existing.pod, pod)
            return
        qpi = self.new_queued_pod_info(pod)
        # Before activeQ (as upstream), so the nomination is recorded even for a gated Pod.
        self.add_nominated_pod(qpi.pod_info)
        if self._move_to_active(qpi, EVENT_UNSCHEDULED_POD_ADD.label(), False):
            self._wake()
        self._update_pending()

    def _get(self, key: str) -> QueuedPodInfo | None:
        return self._active.get(key) or self._backoff_q.get(key) or \
            self._unschedulable.get(key)

    def get(self, namespace: str, name: str) -> QueuedPodInfo | None:
        """The queued entry of a Pod (any sub-queue), or None."""
        return self._get(f"{namespace}/{name}")

    def where(self, namespace: str, name: str) -> str | None:
        """The sub-queue holding the Pod: ``active``, ``backoff``, ``unschedulable``, ``gated``, ``in-flight``, None."""
        key = f"{namespace}/{name}"
        if key in self._active:
            return ACTIVE_Q
        if key in self._backoff_q:
            return BACKOFF_Q
        q = self._unschedulable.get(key)
        if q is not None:
            return GATED if q.gated else UNSCHEDULABLE_Q
        if self._active.in_flight_key(key):
            return "in-flight"
        return None

    def _replace_pod(self, qpi: QueuedPodInfo, pod: Obj) -> None:
        if qpi.parse_error is None:
            # Reuses the parse when the update leaves its inputs alone (e.g. our own status write,
            # PodScheduled=False / nominatedNodeName, coming back through the watch).
            try:
                qpi.pod_info = qpi.pod_info.reparse(pod)
                return
            except PodParseError:
                pass
        pi, err = parse_pod(pod)
        qpi.pod_info = pi
        qpi.parse_error = err

    def update(self, old_pod: Obj, new_pod: Obj) -> None:
        """``Update``: replace a queued Pod; an unschedulable one is requeued when its own hints say so
        (one that did not parse: at once). A Pod in no sub-queue (and not in flight) is added."""
        events = pod_scheduling_properties_change(new_pod, old_pod, True)
        meta = new_pod.get("metadata") or {}
        key = f"{meta.get('namespace') or 'default'}/{meta.get('name')}"
        uid = str(meta.get("uid") or "")
        try:
            if uid in self._active.in_flight:
                for ev in events:
                    self._active.in_flight_events.append([ev, old_pod, new_pod])
                return
            for heap in (self._active, *self._backoff_q.heaps):
                qpi = heap.get(key)
                if qpi is not None:
                    self._replace_pod(qpi, new_pod)
                    self.update_nominated_pod(old_pod, qpi.pod_info)
                    heap.add_or_update(qpi)
                    return
            qpi = self._unschedulable.get(key)
            if qpi is not None:
                had_parse_error = qpi.parse_error is not None
                self._replace_pod(qpi, new_pod)
                self.update_nominated_pod(old_pod, qpi.pod_info)
                if had_parse_error:
                    self._reason(qpi, -1)
                    qpi.unschedulable_plugins = qpi.unschedulable_plugins - {PARSE_ERROR_PLUGIN}
                    if self._requeue(qpi, QueueingStrategy.IMMEDIATELY, events[0].label()) == ACTIVE_Q:
                        self._wake()
                    return
                for ev in events:
                    hint = self._worth_requeuing(qpi, ev, old_pod, new_pod)
                    queue = self._requeue(qpi, hint, ev.label())
                    if queue == ACTIVE_Q or (self.pop_from_backoff_q and queue == BACKOFF_Q):
                        self._wake()
                        break
                return
            self.add(new_pod)
        finally:
            self._update_pending()

    def delete(self, pod: Obj) -> None:
        """``Delete``: drop the Pod from whichever sub-queue holds it, and its nomination."""
        self.delete_nominated_pod_if_exists(pod)
        meta = pod.get("metadata") or {}
        key = f"{meta.get('namespace') or 'default'}/{meta.get('name')}"
        for heap in (self._active, *self._backoff_q.heaps):
            qpi = heap.delete(key)
            if qpi is not None:
                self._reason(qpi, -1)
                break
        else:
            qpi = self._unschedulable_pop(key)
            if qpi is not None:
                self._reason(qpi, -1)
        self._update_pending()

    # -- pop / done ----------------------------------------------------------------------------------
    def pop_nowait(self) -> QueuedPodInfo | None:
        """Pop the head of activeQ (else of backoffQ) without waiting; in flight until :meth:`done`."""
        while True:
            qpi = self._active.pop()
            if qpi is None and self.pop_from_backoff_q:
                qpi = self._backoff_q.backoff.pop()
                if qpi is not None:
                    self._incoming(ACTIVE_Q, POP_FROM_BACKOFF_Q)
            if qpi is None:
                return None
            if qpi.uid in self._active.in_flight:
                qpi.attempts += 1
                log.error("the same pod is tracked in multiple places in the scheduler: %s", qpi.key)
                continue
            self._active.mark_in_flight(qpi)
            self._active.sched_cycle += 1
            self._reason(qpi, -1)
            self._update_pending()
            return qpi

    def pop_members(self, member: Callable[[QueuedPodInfo], bool]) -> list[QueuedPodInfo]:
        """The other queued members of a pod group popped with the one :meth:`pop` returned, so the group
        is scheduled as one entity (upstream pops a ``QueuedPodGroupInfo`` holding every pending member,
        ``backend/queue/scheduling_queue.go`` ``pendingPodGroupPods``).

        Takes every Pod in activeQ, backoffQ (both) and the unschedulable Pods for which ``member`` is
        true, except Pods held by a PreEnqueue plugin (gated). Each becomes in flight (its attempt
        counted) until :meth:`done` / :meth:`add_unschedulable_if_not_present`; the scheduling cycle
        is not advanced (the group is one cycle). Returned in activeQ order (QueueSort).
        """
        out: list[QueuedPodInfo] = []
        for heap in (self._active, *self._backoff_q.heaps):
            for q in heap.list():
                if q.uid not in self._active.in_flight and member(q):
                    heap.delete(q.key)
                    out.append(q)
        for q in list(self._unschedulable.values()):
            if not q.gated and q.uid not in self._active.in_flight and member(q):
                self._unschedulable_pop(q.key)
                out.append(q)
        for q in out:
            self._active.mark_in_flight(q)
            self._reason(q, -1)
        if out:
            self._update_pending()
        out.sort(key=functools.cmp_to_key(lambda a, b: -1 if self._less(a, b) else (1 if self._less(b, a) else 0)))
        return out

    def recheck_gated(self, member: Callable[[QueuedPodInfo], bool]) -> None:
        """PreEnqueue again for the gated Pods for which ``member`` is true (a popped Pod's group mates):
        those let through join the group (:meth:`pop_members`), as upstream's group entity runs
        PreEnqueue for all its Pods whenever it moves (``runPreEnqueuePlugins``)."""
        changed = False
        for key in list(self._unschedulable.gated_keys):
            q = self._unschedulable.get(key)
            if q is None or not member(q):
                continue
            self._run_pre_enqueue(q)
            if not q.gated:
                self._unschedulable.put(q)
                changed = True
        if changed:
            self._update_pending()

    def gating_plugins(self, member: Callable[[QueuedPodInfo], bool]) -> frozenset[str]:
        """The PreEnqueue plugins holding back a queued Pod for which ``member`` is true (empty when
        none is gated): upstream gates a pod group entity whole while any of its Pods is gated
        (``runPreEnqueuePlugins``: "If any pod is gated, the whole entity is gated")."""
        gated = (self._unschedulable.get(k) for k in self._unschedulable.gated_keys)
        return frozenset(q.gating_plugin for q in gated if q is not None and member(q))

    async def pop(self) -> QueuedPodInfo | None:
        """``Pop``: await the next Pod; None once the queue is closed."""
        while True:
            if self._closed:
                return None
            qpi = self.pop_nowait()
            if qpi is not None:
                return qpi
            self._wakeup.clear()
            await self._wakeup.wait()

    def done(self, uid: str) -> None:
        """``Done``: the Pod's attempt is over; forget the events recorded while it was in flight."""
        self._active.done(uid)

    def undo_pop(self, qpi: QueuedPodInfo) -> None:
        """Put back a popped Pod that was never attempted (e.g. leadership lost before its cycle)."""
        qpi.attempts = max(qpi.attempts - 1, 0)
        self._active.sched_cycle -= 1
        self.done(qpi.uid)
        self._reason(qpi, 1)
        self._active.add_or_update(qpi)
        self._wake()
        self._update_pending()

    @property
    def scheduling_cycle(self) -> int:
        """``SchedulingCycle``: pops so far."""
        return self._active.sched_cycle

    def in_flight_uids(self) -> list[str]:
        return list(self._active.in_flight)

    def in_flight_event_counts(self) -> dict[str, int]:
        """``scheduler_inflight_events``: the events recorded for in-flight Pods by label, and ``PodPopped``."""
        return self._active.event_counts()

    # -- failures ----------------------------------------------------------------------------------
    def add_unschedulable_if_not_present(self, qpi: QueuedPodInfo, pod: Obj | None = None) -> str | None:
        """``AddUnschedulablePodIfNotPresent``: a Pod back from a failed attempt.

        ``qpi.unschedulable_plugins`` / ``pending_plugins`` are the rejectors (empty: an internal
        error, counted in ``consecutive_errors_count``). ``pod`` is the latest version of the Pod
        (from the informer) to requeue instead of the attempted one. Events seen while the Pod was
        in flight may send it straight to backoffQ/activeQ. Returns the queue it went to (None if it
        was already queued). Always ends the in-flight state (:meth:`done`).
        """
        try:
            if self._get(qpi.key) is not None:
                log.error("Pod %s is already present in the scheduling queue", qpi.key)
                return None
            if pod is not None:
                self._replace_pod(qpi, pod)
            if not qpi.rejector_plugins():
                qpi.consecutive_errors_count += 1
            else:
                qpi.unschedulable_count += 1
                qpi.consecutive_errors_count = 0
            qpi.timestamp = self._now()
            qpi.backoff_expiration = None
            qpi.was_flushed_from_unschedulable = False
            qpi.flush_timestamp = None
            self._reason(qpi, 1)
            hint = self._hint_for_in_flight(qpi)
            queue = self._requeue(qpi, hint, SCHEDULE_ATTEMPT_FAILURE)
            log.debug("Pod moved to an internal scheduling queue pod=%s event=%s queue=%s hint=%s "
                      "unschedulable plugins=%s", qpi.key, SCHEDULE_ATTEMPT_FAILURE, queue, hint.name,
                      sorted(qpi.rejector_plugins()))
            if queue == ACTIVE_Q or (self.pop_from_backoff_q and queue == BACKOFF_Q):
                self._wake()
            return queue
        finally:
            self.done(qpi.uid)
            self._update_pending()

    def add_attempted_group_member(self, qpi: QueuedPodInfo, pod: Obj | None, group_outcome: str) -> str | None:
        """``AddAttemptedPodGroupIfNeeded`` for one unbound member of a group just attempted, without
        the queueing hints: ``group_outcome`` ``scheduled``: counts reset, activeQ at once, timestamp
        kept; ``unschedulable`` / an error: one more such attempt, backoffQ while backing off, else
        activeQ (PreEnqueue may hold it). Returns the queue (None if already queued); ends in-flight."""
        try:
            if self._get(qpi.key) is not None:
                log.error("Pod %s is already present in the scheduling queue", qpi.key)
                return None
            if pod is not None:
                self._replace_pod(qpi, pod)
            placed = group_outcome == "scheduled"
            if placed:
                qpi.unschedulable_count = qpi.consecutive_errors_count = 0
            elif group_outcome == "unschedulable":
                qpi.unschedulable_count, qpi.consecutive_errors_count = qpi.unschedulable_count + 1, 0
            else:
                qpi.consecutive_errors_count += 1
            if not placed:
                qpi.backoff_expiration, qpi.timestamp = None, self._now()
            qpi.was_flushed_from_unschedulable, qpi.flush_timestamp = False, None
            self._reason(qpi, 1)
            strategy = QueueingStrategy.IMMEDIATELY if placed else QueueingStrategy.AFTER_BACKOFF
            queue = self._requeue(qpi, strategy, SCHEDULE_ATTEMPT_FAILURE)
            log.debug("Pod group member moved to an internal scheduling queue pod=%s event=%s queue=%s group=%s",
                      qpi.key, SCHEDULE_ATTEMPT_FAILURE, queue, group_outcome)
            if queue == ACTIVE_Q or (self.pop_from_backoff_q and queue == BACKOFF_Q):
                self._wake()
            return queue
        finally:
            self.done(qpi.uid)
            self._update_pending()

    def _hint_for_in_flight(self, qpi: QueuedPodInfo) -> QueueingStrategy:
        """``determineSchedulingHintForInFlightPod``."""
        if not qpi.rejector_plugins():
            return QueueingStrategy.AFTER_BACKOFF
        try:
            events = self._active.cluster_events_for_pod(qpi.uid)
        except KeyError:
            log.error("in flight pod %s isn't found in the scheduling queue", qpi.key)
            return QueueingStrategy.AFTER_BACKOFF
        strategy = QueueingStrategy.SKIP
        for ev, old, new in events:
            s = self._worth_requeuing(qpi, ev, old, new)
            if s == QueueingStrategy.IMMEDIATELY:
                return s
            if s == QueueingStrategy.AFTER_BACKOFF:
                strategy = s
                if not qpi.pending_plugins:
                    return s
        return strategy

    def _worth_requeuing(self, qpi: QueuedPodInfo, ev: ClusterEvent, old: Any, new: Any,
                         fns: list[HintFunction] | None = None) -> QueueingStrategy:
        """``isPodWorthRequeuing``: ask the QueueingHints of the plugins that rejected the Pod. ``fns``:
        the hint functions of the Pod's rejectors whose registered event matches ``ev``, in the hint
        map's order (:meth:`matching_hints`), memoised for the Pod's group by the caller; None computes them."""
        rejectors = qpi.rejector_plugins()
        if not rejectors:
            return QueueingStrategy.AFTER_BACKOFF
        if is_wildcard(ev):
            if isinstance(new, dict) and str(((new.get("metadata") or {}).get("uid")) or "") != qpi.uid:
                return QueueingStrategy.SKIP
            return QueueingStrategy.AFTER_BACKOFF
        hint_map = self._hint_maps.get(qpi.pod_info.scheduler_name)
        if hint_map is None:
            return QueueingStrategy.AFTER_BACKOFF
        if fns is None:
            fns = matching_hints(hint_map, rejectors, ev)
        strategy = QueueingStrategy.SKIP
        HINT_POD_INFOS.pin(qpi.pod, qpi.pod_info)  # the hints parse the Pod from its own PodInfo
        for hf in fns:
            hint = QueueingHint.QUEUE
            if hf.fn is not None:
                try:
                    hint = hf.fn(qpi.pod, old, new)
                except Exception:
                    log.exception("QueueingHintFn returns error event=%s plugin=%s pod=%s",
                                  ev.label(), hf.plugin, qpi.key)
                    hint = QueueingHint.QUEUE
            if hint == QueueingHint.QUEUE_SKIP:
                continue
            if hf.plugin in qpi.pending_plugins:
                return QueueingStrategy.IMMEDIATELY
            if not qpi.pending_plugins:
                return QueueingStrategy.AFTER_BACKOFF
            strategy = QueueingStrategy.AFTER_BACKOFF
        return strategy

    def _is_event_of_interest(self, ev: ClusterEvent) -> bool:
        """``isEventOfInterest`` (memoised per event: the hint maps are fixed)."""
        if is_wildcard(ev):
            return True
        hit = self._interest_memo.get(ev)
        if hit is None:
            hit = any(match_cluster_events(registered, ev)
                      for hint_map in self._hint_maps.values() for registered in hint_map)
            if len(self._interest_memo) >= _MEMO_MAX:
                self._interest_memo.clear()
            self._interest_memo[ev] = hit
        return hit

    def _group_hints(self, gk: GroupKey, ev: ClusterEvent) -> list[HintFunction] | None:
        """For a non-wildcard ``ev`` and the Pods of group ``gk``: None when the event can move none
        of them without a hint function being called (a gated group whose gating plugin did not
        register ``ev``; rejectors none of which registered it), else the hint functions
        :meth:`_worth_requeuing` calls for each of them (empty when it needs none). Memoised per
        (group, event)."""
        memo_key = (gk, ev)
        try:
            return self._group_memo[memo_key]
        except KeyError:
            pass
        scheduler_name, rejectors, gating_plugin = gk
        out: list[HintFunction] | None
        hint_map = self._hint_maps.get(scheduler_name)
        if gating_plugin and not match_any_cluster_event(
                ev, self._plugin_events.get(scheduler_name, {}).get(gating_plugin, [])):
            out = None
        elif not rejectors or hint_map is None:
            out = []
        else:
            out = matching_hints(hint_map, rejectors, ev) or None
        if len(self._group_memo) >= _MEMO_MAX:
            self._group_memo.clear()
        self._group_memo[memo_key] = out
        return out

    def move_all_to_active_or_backoff(self, ev: ClusterEvent, old: Any = None, new: Any = None,
                                      pre_check: Callable[[Obj], bool] | None = None) -> None:
        """``MoveAllToActiveOrBackoffQueue``: offer a cluster event to every unschedulable Pod
        (``pre_check`` narrows them); Pods in flight see it when they come back.

        A non-wildcard event is offered group by group (queue/unschedulable_pool.py): the Pods of
        a group it cannot move are skipped at once, the others get upstream's per-Pod check (gated
        shortcut, QueueingHints) in the pool's order, as the plain loop over every Pod
        (``tests/unit/queue/test_fan_out_index.py``) would. ``pre_check`` is a pure predicate of the Pod, asked
        only for the Pods offered.
        """
        if not self._is_event_of_interest(ev):
            return
        if is_wildcard(ev):
            pods = [q for q in self._unschedulable.values() if pre_check is None or pre_check(q.pod)]
            self._move_entities(pods, ev, old, new)
            return
        offers: list[tuple[QueuedPodInfo, list[HintFunction]]] = []
        for gk, members in self._unschedulable.groups():
            fns = self._group_hints(gk, ev)
            if fns is not None:
                offers.extend((q, fns) for q in members.values() if pre_check is None or pre_check(q.pod))
        # The pool's order across groups, and within one (a Pod refiled in place keeps its place).
        offers.sort(key=self._unschedulable.order_of_offer)
        self._offer(offers, ev, old, new)

    def _move_entities(self, pods: list[QueuedPodInfo], ev: ClusterEvent, old: Any, new: Any) -> None:
        """``moveEntitiesToActiveOrBackoffQueue`` over ``pods``, one by one (the plain form)."""
        if not self._is_event_of_interest(ev):
            return
        self._offer(((qpi, None) for qpi in pods if not qpi.gated or is_wildcard(ev)
                     or match_any_cluster_event(ev, qpi.gating_plugin_events)), ev, old, new)

    def _offer(self, offers: Iterable[tuple[QueuedPodInfo, list[HintFunction] | None]], ev: ClusterEvent,
               old: Any, new: Any) -> None:
        """Requeue, in order, each offered Pod whose hints (``fns``; None: computed) do not Skip, then
        record the event for the Pods in flight; wake the poppers when one reached activeQ (or backoffQ,
        with ``pop_from_backoff_q``)."""
        activated = False
        for qpi, fns in offers:
            hint = self._worth_requeuing(qpi, ev, old, new, fns)
            if hint == QueueingStrategy.SKIP:
                continue
            self._unschedulable_pop(qpi.key)
            queue = self._requeue(qpi, hint, ev.label())
            if queue == ACTIVE_Q or (self.pop_from_backoff_q and queue == BACKOFF_Q):
                activated = True
        self._active.add_event_if_any_in_flight(ev, old, new)
        if activated:
            self._wake()
        self._update_pending()

    def activate(self, pods: Iterable[Obj]) -> None:
        """``Activate``: move these Pods from the unschedulable Pods or backoffQ to activeQ now
        (PreEnqueue still applies); a Pod in flight gets a ``ForceActivate`` event recorded so it
        is requeued at once when it comes back."""
        activated = False
        for pod in pods:
            meta = pod.get("metadata") or {}
            key = f"{meta.get('namespace') or 'default'}/{meta.get('name')}"
            qpi = self._unschedulable.get(key)
            from_backoff = False
            if qpi is None:
                qpi = self._backoff_q.delete(key)
                from_backoff = qpi is not None
            if qpi is not None:
                if self._move_to_active(qpi, FORCE_ACTIVATE, from_backoff):
                    activated = True
                continue
            if str(meta.get("uid") or "") in self._active.in_flight:
                self._active.in_flight_events.append([EVENT_FORCE_ACTIVATE, None, pod])
        if activated:
            self._wake()
        self._update_pending()

    # -- periodic flushes --------------------------------------------------------------------------
    def flush_backoff_q_completed(self) -> int:
        """``flushBackoffQCompleted``: Pods whose backoff ended go to activeQ; returns how many."""
        moved = 0
        for qpi in self._backoff_q.pop_all_backoff_completed():
            if self._move_to_active(qpi, BACKOFF_COMPLETE, True):
                moved += 1
        if moved:
            self._wake()
        self._update_pending()
        return moved

    def flush_unschedulable_pods_leftover(self) -> None:
        """``flushUnschedulableEntitiesLeftover``: Pods unschedulable for longer than the max
        duration are retried (event ``UnschedulableTimeout``)."""
        now = self._now()
        to_move: list[QueuedPodInfo] = []
        for qpi in self._unschedulable.values():
            last = qpi.timestamp
            if qpi.flush_timestamp is not None and qpi.flush_timestamp > last:
                last = qpi.flush_timestamp
            if now - last > self.pod_max_in_unschedulable_pods_duration:
                qpi.was_flushed_from_unschedulable = True
                qpi.flush_timestamp = now
                to_move.append(qpi)
        if to_move:
            self._move_entities(to_move, EVENT_UNSCHEDULABLE_TIMEOUT, None, None)

    async def run(self) -> None:
        """Background flushes until cancelled: backoffQ every second, leftover unschedulable Pods every 30 s."""
        last_leftover = self._now()
        try:
            while not self._closed:
                t = time.time()
                await asyncio.sleep(BACKOFF_ORDERING_WINDOW - (t % BACKOFF_ORDERING_WINDOW) + 0.001)
                self.flush_backoff_q_completed()
                if self._now() - last_leftover >= UNSCHEDULABLE_FLUSH_PERIOD:
                    last_leftover = self._now()
                    self.flush_unschedulable_pods_leftover()
        except asyncio.CancelledError:
            raise

    def close(self) -> None:
        """Wake :meth:`pop` so it returns None."""
        self._closed = True
        self._wake()

    def nominated_pods_for_node(self, node_name: str) -> list[PodInfo]:
        """``NominatedPodsForNode``: the PodInfos nominated to ``node_name``, in nomination order.

        Each resolves to the Pod's queued PodInfo (activeQ, backoffQ or the unschedulable Pods, by
        ``namespace/name``); a Pod in none of them (in flight) is a bare Pod with only its name,
        namespace and UID, as upstream's ``nominatedPodToInfo``.
        """
        refs = self._nominated_pods.get(node_name)
        if not refs:
            return []
        out: list[PodInfo] = []
        for ns, name, uid in refs:
            qpi = self._get(f"{ns}/{name}")
            if qpi is not None:
                out.append(qpi.pod_info)
            else:
                out.append(PodInfo({"metadata": {"name": name, "namespace": ns, "uid": uid}, "spec": {}}))
        return out

    # -- introspection -----------------------------------------------------------------------------
    def pending_pods(self) -> tuple[list[Obj], str]:
        """``PendingPods``: every queued Pod and ``activeQ:N; backoffQ:N; unschedulableEntities:N``."""
        pods = [q.pod for q in self._active.list()] + [q.pod for q in self._backoff_q.list()] + \
            [q.pod for q in self._unschedulable.values()]
        summary = (f"activeQ:{len(self._active)}; backoffQ:{len(self._backoff_q)}; "
                   f"unschedulableEntities:{len(self._unschedulable)}")
        return pods, summary

    def lengths(self) -> dict[str, int]:
        """Pods per sub-queue (``active``, ``backoff``, ``unschedulable``, ``gated``, ``in_flight``)."""
        gated = len(self._unschedulable.gated_keys)
        return {ACTIVE_Q: len(self._active), BACKOFF_Q: len(self._backoff_q),
                UNSCHEDULABLE_Q: len(self._unschedulable) - gated, GATED: gated,
                "in_flight": len(self._active.in_flight)}

