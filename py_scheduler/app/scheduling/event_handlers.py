"""The scheduler's event handlers: each delta of the informers to the cache, the queue and the waiting Pods.

Upstream: ``pkg/scheduler/eventhandlers.go`` (``addAllEventHandlers``: bound Pods to the cache,
unbound Pods that name one of our profiles to the queue, Pods that become bound leave the queue,
Nodes to the cache; every change offered to the queue as a cluster event; assumed Pods deleted
while binding are released).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping

from py_scheduler.cache.cache import Cache
from py_scheduler.cache.kinds import WatchedKind
from py_scheduler.framework import objects as ob
from py_scheduler.framework.events import (
    EVENT_ASSIGNED_POD_ADD,
    EVENT_ASSIGNED_POD_DELETE,
    EVENT_NODE_ADD,
    EVENT_NODE_DELETE,
    EVENT_UNSCHEDULED_POD_ADD,
    ActionType,
    ClusterEvent,
    node_scheduling_properties_change,
    pod_scheduling_properties_change,
)
from py_scheduler.framework.objects import Obj
from py_scheduler.framework.runtime import Framework
from py_scheduler.queue.scheduling_queue import PriorityQueue

log = logging.getLogger("py_scheduler.informers")


TERMINAL_PHASES = ("Succeeded", "Failed")


def _assigned(pod: Obj | None) -> bool:
    return bool(((pod or {}).get("spec") or {}).get("nodeName"))


def _terminal(pod: Obj | None) -> bool:
    return ((pod or {}).get("status") or {}).get("phase") in TERMINAL_PHASES


def _scheduler_name(pod: Obj) -> str:
    return str((pod.get("spec") or {}).get("schedulerName") or "default-scheduler")


def _priority(pod: Obj) -> int:
    p = (pod.get("spec") or {}).get("priority")
    return p if isinstance(p, int) and not isinstance(p, bool) else 0


class EventHandlers:
    """``eventhandlers.go``: route deltas to the cache, the queue and ClusterObjects.

    ``profiles``: the schedulerNames we are responsible for; ``gang``: the GenericWorkload gate;
    ``observe``: called ``(event label, seconds)`` once per cluster event a delta was handled as
    (``scheduler_event_handling_duration_seconds``: ``NodeAdd``, ``UpdateNodeTaint``, ``AssignedPodUpdate``...).
    """

    def __init__(self, cache: Cache, queue: PriorityQueue, profiles: Iterable[str], gang: bool = False,
                 observe: Callable[[str, float], None] | None = None) -> None:
        self.gang = gang
        self.observe = observe
        self._labels: list[str] = []
        self.cache = cache
        self.queue = queue
        self.profiles = set(profiles)
        # schedulerName -> Framework when given one (its waiting-Pods map: a deleted Pod waiting on
        # Permit is rejected there).
        self.frameworks: Mapping[str, Framework] = profiles if isinstance(profiles, Mapping) else {}

    def responsible(self, pod: Obj) -> bool:
        """``responsibleForPod``: the Pod names one of our profiles."""
        return _scheduler_name(pod) in self.profiles

    def on_delta(self, wk: WatchedKind, old: Obj | None, new: Obj | None) -> None:
        """Apply one delta; exceptions are logged (one bad object must not stop the stream).

        A delta whose two sides have different UIDs (an object deleted and recreated under the same
        name, its events seen out of order) is applied as a deletion followed by an addition.
        """
        if old is not None and new is not None and ob.uid(old) and ob.uid(new) and ob.uid(old) != ob.uid(new):
            self.on_delta(wk, old, None)
            self.on_delta(wk, None, new)
            return
        labels = self._labels
        labels.clear()
        t0 = time.perf_counter()
        try:
            if wk.kind == "Pod":
                self._pod(old, new)
            elif wk.kind == "Node":
                self._node(old, new)
            else:
                self._other(wk, old, new)
            if self.observe is not None and labels:
                seconds = time.perf_counter() - t0
                for label in labels:
                    self.observe(label, seconds)
        except Exception:
            obj = new if new is not None else old
            meta = (obj or {}).get("metadata") or {}
            log.exception("handling %s %s/%s failed", wk.kind, meta.get("namespace", ""), meta.get("name"))

    # -- nodes ---------------------------------------------------------------------------------------
    def _node(self, old: Obj | None, new: Obj | None) -> None:
        if new is not None and old is None:
            log.debug("Add event for node node=%s", (new.get("metadata") or {}).get("name"))
            self._labels.append("NodeAdd")
            self.cache.add_node(new)
            self.queue.move_all_to_active_or_backoff(EVENT_NODE_ADD, None, new)
        elif new is not None and old is not None:
            self.cache.update_node(old, new)
            for ev in node_scheduling_properties_change(new, old):
                self._labels.append(ev.label())
                self.queue.move_all_to_active_or_backoff(ev, old, new)
        elif old is not None:
            log.debug("Delete event for node node=%s", (old.get("metadata") or {}).get("name"))
            self._labels.append("NodeDelete")
            self.queue.move_all_to_active_or_backoff(EVENT_NODE_DELETE, old, None)
            self.cache.remove_node(old)

    # -- pods ----------------------------------------------------------------------------------------
    def _pod(self, old: Obj | None, new: Obj | None) -> None:
        if new is not None and _terminal(new):
            # A terminal Pod releases its resources (the field selector turns it into a deletion).
            if old is not None:
                self._pod_delete(old)
            elif _assigned(new):
                self.cache.remove_pod(new)
            return
        if old is None and new is not None:
            self._pod_add(new)
        elif old is not None and new is not None:
            self._pod_update(old, new)
        elif old is not None:
            self._pod_delete(old)

    def _pod_add(self, pod: Obj) -> None:
        if self.responsible(pod) and not _assigned(pod):
            log.debug("Add event for unscheduled pod pod=%s", _pod_ref(pod))
            self._labels.append("UnscheduledPodAdd")
            self.queue.add(pod)
            if self.gang:
                # upstream addPodToSchedulingQueue: a new member may complete a waiting gang.
                self.queue.move_all_to_active_or_backoff(EVENT_UNSCHEDULED_POD_ADD, None, pod)
        if _assigned(pod):
            log.debug("Add event for scheduled pod pod=%s", _pod_ref(pod))
            self._labels.append("AssignedPodAdd")
            self.cache.add_pod(pod)
            self.queue.move_all_to_active_or_backoff(EVENT_ASSIGNED_POD_ADD, None, pod)

    def _pod_update(self, old: Obj, new: Obj) -> None:
        if _assigned(old):
            self._labels.append("AssignedPodUpdate")
            self.cache.update_pod(old, new)
            for ev in pod_scheduling_properties_change(new, old, False):
                self._labels.append(ev.label())
                self.queue.move_all_to_active_or_backoff(ev, old, new)
        elif _assigned(new):
            # The binding: add to the cache (confirms an assumed Pod) and leave the queue.
            self._labels.append("AssignedPodAdd")
            self.cache.add_pod(new)
            self.queue.move_all_to_active_or_backoff(EVENT_ASSIGNED_POD_ADD, None, new)
            if self.responsible(old):
                self._labels.append("UnscheduledPodDelete")
                self.queue.delete(old)
        elif self.responsible(old):
            self._labels.append("UnscheduledPodUpdate")
            self._update_in_queue(old, new)

    def _update_in_queue(self, old: Obj, new: Obj) -> None:
        if (old.get("metadata") or {}).get("resourceVersion") == (new.get("metadata") or {}).get("resourceVersion"):
            return
        if self.cache.is_assumed_pod(new):
            if (new.get("metadata") or {}).get("deletionTimestamp") and \
                    not (old.get("metadata") or {}).get("deletionTimestamp"):
                self._assumed_pod_deleted(new)
            return
        self.queue.update(old, new)
        old_nnn = (old.get("status") or {}).get("nominatedNodeName")
        if old_nnn and old_nnn != (new.get("status") or {}).get("nominatedNodeName"):
            prio = _priority(old)
            self.queue.move_all_to_active_or_backoff(EVENT_ASSIGNED_POD_DELETE, old, None,
                                                     lambda p: _priority(p) <= prio)

    def _pod_delete(self, pod: Obj) -> None:
        if _assigned(pod):
            log.debug("Delete event for scheduled pod pod=%s", _pod_ref(pod))
            self._labels.append("AssignedPodDelete")
            self.cache.remove_pod(pod)
            self.queue.move_all_to_active_or_backoff(EVENT_ASSIGNED_POD_DELETE, pod, None)
            return
        if not self.responsible(pod):
            return
        log.debug("Delete event for unscheduled pod pod=%s", _pod_ref(pod))
        self._labels.append("UnscheduledPodDelete")
        self.queue.delete(pod)
        if self.cache.is_assumed_pod(pod):
            self._assumed_pod_deleted(pod)
        elif (pod.get("status") or {}).get("nominatedNodeName"):
            prio = _priority(pod)
            self.queue.move_all_to_active_or_backoff(EVENT_ASSIGNED_POD_DELETE, pod, None,
                                                     lambda p: _priority(p) <= prio)

    def _assumed_pod_deleted(self, pod: Obj) -> None:
        """``handleAssumedPodDeletion``: a Pod waiting on Permit is rejected (its binding cycle then
        unreserves and forgets it); otherwise the assumed resources are released now and the bind
        will fail."""
        assumed = self.cache.get_pod(pod)
        if assumed is None:
            return
        fw = self.frameworks.get(_scheduler_name(pod))
        if fw is not None and fw.waiting_pods.reject(assumed.uid):
            return
        try:
            self.cache.remove_assumed_pod(assumed)
        except Exception:
            log.exception("Scheduler cache RemoveAssumedPod failed pod=%s", assumed.key)
        self.queue.move_all_to_active_or_backoff(EVENT_ASSIGNED_POD_DELETE, assumed.pod, None)

    # -- other kinds ---------------------------------------------------------------------------------
    def _other(self, wk: WatchedKind, old: Obj | None, new: Obj | None) -> None:
        objects = self.cache.objects
        if new is not None:
            objects.upsert(wk.kind, new)
        elif old is not None:
            objects.delete(wk.kind, old)
        if wk.event_resource is None:
            return
        action = ActionType.ADD if old is None else ActionType.DELETE if new is None else ActionType.UPDATE
        event = ClusterEvent(wk.event_resource, action)
        self._labels.append(event.label())
        self.queue.move_all_to_active_or_backoff(event, old, new)


def _pod_ref(pod: Obj) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"
