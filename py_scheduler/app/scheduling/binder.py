"""API writes of a scheduling attempt besides the Binding: Events, the PodScheduled condition, the
nominated node, preemption. (The Binding is the DefaultBinder plugin's, through the Handle's client.)

Upstream: ``pkg/scheduler/schedule_one.go`` (``finishBinding``: Normal ``Scheduled`` / ``Binding`` /
``Successfully assigned NS/NAME to NODE``; ``handleSchedulingFailure``: Warning ``FailedScheduling``
/ ``Scheduling`` with the FitError text truncated to 1024 bytes (``truncateMessage``), and the
``PodScheduled=False`` condition with reason ``Unschedulable`` (rejections) or ``SchedulerError``
(internal errors) via ``updatePod``/``util.PatchPodStatus``),
``staging/src/k8s.io/component-helpers/.../podutil`` ``UpdatePodCondition`` (no write when the
condition is unchanged; ``lastTransitionTime`` moves only when the status flips) and
``staging/src/k8s.io/client-go/tools/events`` (events.k8s.io/v1 Events named
``<pod>.<hex nanoseconds>``; an identical event within 6 minutes becomes a ``series`` update).
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from py_scheduler.app.client.kube import Kube
from py_scheduler.app.client.leader import micro_time
from py_scheduler.app.client.wire import KubeError, NotFound
from py_scheduler.framework.objects import Obj
from py_scheduler.framework.types import PodInfo

log = logging.getLogger("py_scheduler.binder")


NOTE_LENGTH_LIMIT = 1024
EVENT_SERIES_MAX = 4096
"""Event series (events.k8s.io ``series``) kept for aggregation at most, least recently used dropped."""
"""``validation.NoteLengthLimit``."""
EVENT_SERIES_WINDOW = 6 * 60.0
"""client-go events: identical events within 6 minutes are counted in one Event's series."""
POD_REASON_UNSCHEDULABLE = "Unschedulable"
POD_REASON_SCHEDULER_ERROR = "SchedulerError"


def truncate_message(message: str) -> str:
    """``truncateMessage``: at most 1024 bytes, ending in `` ...`` when cut."""
    if len(message) <= NOTE_LENGTH_LIMIT:
        return message
    suffix = " ..."
    return message[:NOTE_LENGTH_LIMIT - len(suffix)] + suffix


def _now_rfc3339() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod_condition_patch(pod: Obj, condition: Obj, nominated_node: str | None) -> Obj | None:
    """The ``pods/status`` strategic merge patch that sets ``condition`` (and ``nominatedNodeName``
    when ``nominated_node`` is not None), or None when nothing would change (``UpdatePodCondition``).

    ``condition`` has ``type``, ``status``, ``reason``, ``message``; ``lastTransitionTime`` is kept
    unless the status changes, ``lastProbeTime`` is null as upstream.
    """
    status = pod.get("status") or {}
    old = next((c for c in status.get("conditions") or [] if isinstance(c, dict)
                and c.get("type") == condition.get("type")), None)
    cond = {**condition, "lastProbeTime": None}
    generation = (pod.get("metadata") or {}).get("generation")
    if isinstance(generation, int) and "observedGeneration" not in cond:
        cond["observedGeneration"] = generation
    changed = True
    if old is not None:
        if old.get("status") == cond.get("status"):
            cond["lastTransitionTime"] = old.get("lastTransitionTime") or _now_rfc3339()
        else:
            cond["lastTransitionTime"] = _now_rfc3339()
        changed = any(old.get(k) != cond.get(k) for k in ("status", "reason", "message", "observedGeneration"))
    else:
        cond["lastTransitionTime"] = _now_rfc3339()
    nnn_changed = nominated_node is not None and str(status.get("nominatedNodeName") or "") != nominated_node
    if not changed and not nnn_changed:
        return None
    out: Obj = {}
    if changed:
        out["conditions"] = [cond]
    if nnn_changed:
        out["nominatedNodeName"] = nominated_node or None
    return {"status": out}


@dataclass(slots=True)
class _Series:
    namespace: str
    name: str
    count: int
    first: float


class Binder:
    """Writes through :class:`~py_scheduler.app.client.kube.Kube` on behalf of the scheduling loop.

    Args:
        kube: the API adapter.
        identity: ``reportingInstance`` of the Events (the leader-election identity).
        now: monotonic clock for the event series window.
    """

    def __init__(self, kube: Kube, identity: str, now: Callable[[], float] = time.monotonic) -> None:
        self.kube = kube
        self.identity = identity
        self._now = now
        self._series: OrderedDict[tuple[str, str, str, str, str], _Series] = OrderedDict()

    async def event(self, pod: Obj, type_: str, reason: str, action: str, note: str, controller: str) -> None:
        """Record an events.k8s.io/v1 Event about ``pod``; failures are logged, never raised."""
        meta = pod.get("metadata") or {}
        ns = str(meta.get("namespace") or "default")
        name = str(meta.get("name") or "")
        uid = str(meta.get("uid") or "")
        note = truncate_message(note)
        key = (uid, type_, reason, action, note)
        now = self._now()
        t = micro_time()
        try:
            series = self._series.get(key)
            if series is not None and now - series.first <= EVENT_SERIES_WINDOW:
                series.count += 1
                self._series.move_to_end(key)
                try:
                    await self.kube.patch_event(series.namespace, series.name,
                                                {"series": {"count": series.count, "lastObservedTime": t}})
                    return
                except NotFound:
                    self._series.pop(key, None)
            ev_name = f"{name}.{time.time_ns():x}"
            body: Obj = {
                "apiVersion": "events.k8s.io/v1", "kind": "Event",
                "metadata": {"name": ev_name, "namespace": ns},
                "eventTime": t, "reportingController": controller, "reportingInstance": self.identity,
                "action": action, "reason": reason, "type": type_, "note": note,
                "regarding": {"apiVersion": "v1", "kind": "Pod", "namespace": ns, "name": name, "uid": uid,
                              "resourceVersion": str(meta.get("resourceVersion") or "")},
            }
            await self.kube.create_event(ns, body)
            self._series[key] = _Series(ns, ev_name, 1, now)
            while len(self._series) > EVENT_SERIES_MAX:
                self._series.popitem(last=False)
        except KubeError as exc:
            log.warning("could not record event %s for pod %s/%s: %s", reason, ns, name, exc)

    async def scheduled(self, pod: Obj, node: str, controller: str) -> None:
        """``Scheduled``: ``Successfully assigned NS/NAME to NODE``."""
        meta = pod.get("metadata") or {}
        await self.event(pod, "Normal", "Scheduled", "Binding",
                         f"Successfully assigned {meta.get('namespace')}/{meta.get('name')} to {node}", controller)

    async def failed_scheduling(self, pod: Obj, message: str, controller: str) -> None:
        """``FailedScheduling`` with the (truncated) failure message."""
        await self.event(pod, "Warning", "FailedScheduling", "Scheduling", message, controller)

    async def update_pod_condition(self, pod: Obj, reason: str, message: str,
                                   nominated_node: str | None = None) -> None:
        """Set ``PodScheduled=False`` with ``reason``/``message`` (and ``nominatedNodeName`` when not
        None) unless already so; failures are logged, never raised."""
        patch = pod_condition_patch(pod, {"type": "PodScheduled", "status": "False", "reason": reason,
                                          "message": message}, nominated_node)
        if patch is None:
            return
        meta = pod.get("metadata") or {}
        try:
            await self.kube.patch_pod_status(str(meta.get("namespace") or "default"), str(meta.get("name")), patch)
        except KubeError as exc:
            log.warning("Error updating pod %s/%s: %s", meta.get("namespace"), meta.get("name"), exc)

    async def set_nominated_node(self, pod: Obj, node: str) -> None:
        """``updatePod`` with only a NominatingInfo (the binding cycle, ``NominatedNodeNameForExpectation``):
        ``status.nominatedNodeName = node`` unless already so, telling other components (the cluster
        autoscaler) where a Pod waiting on Permit or PreBind is about to be bound. Failures are
        logged, never raised (upstream goes on binding)."""
        status = pod.get("status") or {}
        if status.get("nominatedNodeName") == node:
            return
        meta = pod.get("metadata") or {}
        try:
            await self.kube.patch_pod_status(str(meta.get("namespace") or "default"), str(meta.get("name")),
                                             {"status": {"nominatedNodeName": node}})
        except KubeError as exc:
            log.error("Failed to update the nominated node name in the binding cycle pod=%s/%s "
                      "nominatedNodeName=%s: %s", meta.get("namespace"), meta.get("name"), node, exc)

    async def delete_victims(self, victims: list[PodInfo], preemptor: Obj, controller: str) -> int:
        """Delete preemption victims (UID-preconditioned); returns how many deletions succeeded.
        Each victim gets a ``Preempted`` event, as upstream's ``PrepareCandidate``."""
        meta = preemptor.get("metadata") or {}
        done = 0
        for v in victims:
            try:
                await self.kube.delete_pod(v.namespace, v.name, uid=v.uid or None)
                done += 1
                await self.event(v.pod, "Normal", "Preempted", "Preempting",
                                 f"Preempted by pod {meta.get('uid')} on node {v.node_name}", controller)
            except KubeError as exc:
                log.warning("Error preempting pod %s: %s", v.key, exc)
        return done
