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
``<pod>.<hex nanoseconds>``; event_broadcaster.go's series: see :meth:`Binder.event`).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import random
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from py_scheduler.app.client.kube import Kube
from py_scheduler.app.client.leader import micro_time
from py_scheduler.app.client.wire import Conflict, KubeError, NotFound
from py_scheduler.framework.objects import Obj
from py_scheduler.framework.preemption import disruption_target_condition, preempted_event_message
from py_scheduler.framework.types import PodInfo

log = logging.getLogger("py_scheduler.binder")


NOTE_LENGTH_LIMIT = 1024
"""``validation.NoteLengthLimit``."""
EVENT_SERIES_MAX = 4096
"""Events kept for aggregation at most (:meth:`Binder._evict`: single Events first; client-go's
cache is emptied only by its timers)."""
EVENT_SERIES_FINISH = 6 * 60.0
"""client-go events' ``finishTime`` (seconds): a series not seen for this long gets its final count
written and is forgotten; so is a single Event this old."""
EVENT_SERIES_REFRESH = 30 * 60.0
"""client-go events' ``refreshTime`` (seconds): every series still open is written again."""
EVENT_MAX_TRIES = 12
"""client-go events' ``maxTriesPerEvent``: an Event write that got no answer is tried this many times."""
EVENT_RETRY_SLEEP = 10.0
"""client-go events' ``defaultSleepDuration`` (seconds) between those tries, jittered by up to 25 %."""
POD_REASON_UNSCHEDULABLE = "Unschedulable"
POD_REASON_SCHEDULER_ERROR = "SchedulerError"


def truncate_message(message: str) -> str:
    """``truncateMessage``: at most 1024 bytes, ending in `` ...`` when cut."""
    if len(message) <= NOTE_LENGTH_LIMIT:
        return message
    suffix = " ..."
    return message[:NOTE_LENGTH_LIMIT - len(suffix)] + suffix


def _condition_key(pod: Obj) -> str:
    meta = pod.get("metadata") or {}
    return str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")


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
    """One Event as client-go's broadcaster caches it: ``count`` occurrences so far (1: not a series
    yet), ``written`` the count the server has, ``first`` / ``last`` monotonic seconds of the first
    and latest occurrence (``last_time`` the latter as a MicroTime)."""

    body: Obj
    count: int
    written: int
    first: float
    last: float
    last_time: str


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
        self._series: OrderedDict[tuple[str, ...], _Series] = OrderedDict()
        self._retrying: dict[int, asyncio.Task[None]] = {}
        self._conditions_wanted: dict[str, tuple[Obj, str, str, str | None]] = {}
        self._condition_writers: dict[str, asyncio.Task[None]] = {}
        self._low_writes: set[str] = set()
        self.retry_sleep = EVENT_RETRY_SLEEP

    async def event(self, pod: Obj, type_: str, reason: str, action: str, note: str, controller: str) -> None:
        """Record an events.k8s.io/v1 Event about ``pod``; failures are logged, never raised.

        As client-go's events broadcaster (``recordToSink``): Events are the same when their type,
        action, reason, reporting controller and instance and ``regarding`` (the Pod's UID and
        resourceVersion included; not the note) are. The first is created; the second becomes a
        series of count 2 (one PATCH); later ones are only counted here, and the count is written by
        :meth:`run_series` (``finishSeries`` after 6 minutes unseen, ``refreshExistingEventSeries``
        every 30). So a Pod retried many times unchanged costs two writes, not one per attempt.
        """
        meta = pod.get("metadata") or {}
        ns = str(meta.get("namespace") or "default")
        name = str(meta.get("name") or "")
        uid = str(meta.get("uid") or "")
        rv = str(meta.get("resourceVersion") or "")
        key = (type_, action, reason, controller, ns, name, uid, rv)
        now = self._now()
        t = micro_time()
        cached = self._series.get(key)
        if cached is not None:
            cached.count += 1
            cached.last, cached.last_time = now, t
            self._series.move_to_end(key)
            if cached.count == 2:
                await self._write(cached)
            return
        body: Obj = {
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": f"{name}.{time.time_ns():x}", "namespace": ns},
            "eventTime": t, "reportingController": controller, "reportingInstance": self.identity,
            "action": action, "reason": reason, "type": type_, "note": truncate_message(note),
            "regarding": {"apiVersion": "v1", "kind": "Pod", "namespace": ns, "name": name, "uid": uid,
                          "resourceVersion": rv},
        }
        entry = self._series[key] = _Series(body, 1, 0, now, now, t)  # before the write: a repeat meanwhile counts
        if len(self._series) > EVENT_SERIES_MAX:
            await self._evict()
        await self._write(entry)

    async def _evict(self) -> None:
        """Drop the least recently seen single Event but the newest, or, when every other Event kept
        is a series, the least recently seen series after writing its count (client-go keeps them all until its
        timers; this bound keeps the memory flat)."""
        newest = next(reversed(self._series))
        for key, ev in self._series.items():
            if ev.count == 1 and key != newest:
                del self._series[key]
                return
        _, ev = self._series.popitem(last=False)
        if ev.count > ev.written:
            await self._write(ev)

    async def _write(self, ev: _Series, retry: bool = True) -> bool:
        """Write ``ev`` (``recordEvent``): create it, or PATCH its series, creating it again if it
        expired (a create that meets the Event, made by a racing first write, is patched again).
        False when no answer came (logged; with ``retry``, :meth:`_attempt` tries again in the
        background, as ``attemptRecording`` does); an Event the server refused is given up, as
        ``recordEvent`` gives up on a status error."""
        body = ev.body
        meta = body["metadata"]
        count = ev.count
        try:
            if count >= 2:
                patch = {"series": {"count": count, "lastObservedTime": ev.last_time}}
                for attempt in range(2):
                    try:
                        await self.kube.patch_event(meta["namespace"], meta["name"], patch)
                        break
                    except NotFound:
                        try:
                            await self.kube.create_event(meta["namespace"], {**body, **patch})
                            break
                        except Conflict:  # created meanwhile by the first write: patch it
                            if attempt:
                                raise
            else:
                await self.kube.create_event(meta["namespace"], body)
        except KubeError as exc:
            log.warning("could not record event %s for pod %s/%s: %s", body["reason"], meta["namespace"],
                        body["regarding"]["name"], exc)
            if exc.status == 0:  # no answer: tried again
                key = id(ev)  # the task holds ev: the id stays its own while the task runs
                if retry and key not in self._retrying:
                    task = self._retrying[key] = asyncio.create_task(self._attempt(ev), name="event retry")
                    task.add_done_callback(lambda _t: self._retrying.pop(key, None))
                return False
            # the server refused it: abandoned, as recordEvent abandons an event on a StatusError
        ev.written = max(ev.written, count)
        return True

    async def _attempt(self, ev: _Series) -> None:
        """``attemptRecording``'s later tries of a write that got no answer: up to
        :data:`EVENT_MAX_TRIES` in all, :attr:`retry_sleep` seconds apart (jittered by up to 25 %),
        until one is answered or a later write of the same Event has caught up."""
        for _ in range(EVENT_MAX_TRIES - 1):
            await asyncio.sleep(self.retry_sleep * (1 + 0.25 * random.random()))
            if ev.written >= ev.count or await self._write(ev, retry=False):
                return
        log.error("unable to write event %s for pod %s (retry limit exceeded)", ev.body["reason"],
                  ev.body["regarding"]["name"])

    async def flush_series(self, *, refresh: bool = False) -> None:
        """``finishSeries``: write the final count of each series not seen for
        :data:`EVENT_SERIES_FINISH` seconds and forget it (once written), and forget single Events
        that old; with ``refresh`` (``refreshExistingEventSeries``), write every other series too."""
        now = self._now()
        for key, ev in list(self._series.items()):
            if ev.count >= 2:
                if now - ev.last >= EVENT_SERIES_FINISH:
                    # kept if seen again while its count was written (upstream holds a lock there)
                    if (ev.count == ev.written or await self._write(ev)) and self._series.get(key) is ev \
                            and ev.count == ev.written:
                        del self._series[key]
                elif refresh:
                    await self._write(ev)
            elif now - ev.first >= EVENT_SERIES_FINISH:
                self._series.pop(key, None)

    async def run_series(self, stop: asyncio.Event) -> None:
        """:meth:`flush_series` every :data:`EVENT_SERIES_FINISH` seconds, with ``refresh`` every
        :data:`EVENT_SERIES_REFRESH`, until ``stop`` is set (client-go's two timers); then the
        writes still being tried again are given up (the broadcaster's ``Shutdown``)."""
        refreshed = self._now()
        try:
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=EVENT_SERIES_FINISH)
                if stop.is_set():
                    return
                refresh = self._now() - refreshed >= EVENT_SERIES_REFRESH
                if refresh:
                    refreshed = self._now()
                try:
                    await self.flush_series(refresh=refresh)
                except Exception:  # a bug here must not end the scheduler's tasks
                    log.exception("event series flush failed")
        finally:
            for task in list(self._retrying.values()):
                task.cancel()

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
        None) unless already so; failures are logged, never raised. Returns once the write is done
        or dropped (:meth:`drop_condition`), or at once when another call's write is pending.

        One write per Pod at a time, the latest wanted: while a Pod's write waits or is in flight, a
        newer one replaces any still unsent (the writer sends it next). The writes go at low priority
        (:meth:`RateLimiter.acquire <py_scheduler.app.client.ratelimit.RateLimiter.acquire>`):
        upstream writes the condition inside the scheduling cycle, so at most one stands before a
        Binding; here a storm of failing retries (hundreds of Pods requeued by each Node event) would
        otherwise queue thousands of stale writes in front of every Binding (minutes). Because such a
        write may wait, the loop drops it when the Pod is tried again (upstream's write is done by
        then): sent after that attempt's Binding it would mark a bound Pod unschedulable."""
        key = _condition_key(pod)
        self._conditions_wanted[key] = (pod, reason, message, nominated_node)
        task = self._condition_writers.get(key)
        if task is not None and not task.done():  # (a dropped writer may not have left the map yet)
            return  # the writer sends this one next
        task = self._condition_writers[key] = asyncio.create_task(self._send_conditions(key), name="pod condition")
        task.add_done_callback(lambda _t: self._condition_writers.pop(key, None)
                               if self._condition_writers.get(key) is _t else None)
        await asyncio.wait({task})

    def drop_condition(self, pod: Obj) -> None:
        """Drop the Pod's PodScheduled write not yet done (a new attempt begins: its outcome writes
        anew). One still waiting for a token is never sent; one already sent went out before this
        attempt began, so before any Binding it makes. A write that nominates a node (preemption) is
        kept: it is sent in turn, not at low priority, so before a later Binding of the Pod."""
        key = _condition_key(pod)
        want = self._conditions_wanted.get(key)
        if want is not None and want[3] is None:
            del self._conditions_wanted[key]
        task = self._condition_writers.get(key)
        if task is not None and key in self._low_writes:
            task.cancel()

    async def _send_conditions(self, key: str) -> None:
        while (want := self._conditions_wanted.pop(key, None)) is not None:
            await self._write_condition(key, *want)

    async def _write_condition(self, key: str, pod: Obj, reason: str, message: str,
                               nominated_node: str | None) -> None:
        patch = pod_condition_patch(pod, {"type": "PodScheduled", "status": "False", "reason": reason,
                                          "message": message}, nominated_node)
        if patch is None:
            return
        meta = pod.get("metadata") or {}
        low = nominated_node is None
        if low:
            self._low_writes.add(key)
        try:
            await self.kube.patch_pod_status(str(meta.get("namespace") or "default"), str(meta.get("name")), patch,
                                             low_priority=low)
        except KubeError as exc:
            log.warning("Error updating pod %s/%s: %s", meta.get("namespace"), meta.get("name"), exc)
        finally:
            self._low_writes.discard(key)

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

    async def clear_nominated_node(self, pod: Obj) -> None:
        """``clearNominatedNodeName`` without the API cacher (``SchedulerAsyncAPICalls`` off, upstream's
        default): ``status.nominatedNodeName`` removed where the Pod has one; its update event then
        moves it to activeQ. Failures are logged, never raised (upstream goes on evicting)."""
        if not (pod.get("status") or {}).get("nominatedNodeName"):
            return
        meta = pod.get("metadata") or {}
        try:
            await self.kube.patch_pod_status(str(meta.get("namespace") or "default"), str(meta.get("name")),
                                             {"status": {"nominatedNodeName": None}})
        except KubeError as exc:
            log.error("Cannot clear 'NominatedNodeName' field from lower priority pods on the same target node "
                      "pod=%s/%s: %s", meta.get("namespace"), meta.get("name"), exc)

    async def delete_victims(self, victims: list[PodInfo], preemptor: Obj, controller: str, node: str = "",
                             preemptor_kind: str = "pod") -> int:
        """``PreemptPod`` for each victim (``framework/preemption/executor.go``): the ``DisruptionTarget``
        condition (True, ``PreemptionByScheduler``, ``<schedulerName>: preempting to accommodate a
        higher priority pod``) is patched on its status, then it is deleted (UID-preconditioned) and gets a
        ``Preempted`` event ``Preempted by pod <uid> on node <node>`` (``node``: the candidate the
        preemptor was nominated to; ``preemptor_kind`` ``podgroup`` for a pod group's). The condition is
        what tells the preemptor's next attempt, while the victim terminates, that its preemption is under
        way (``PodTerminatingByPreemption``), and what a Job's ``podFailurePolicy`` matches. A victim
        already gone is skipped; any other failure is logged and that victim is left. Returns how many
        victims failed so (upstream's errors; 0 when every victim is deleted or was gone)."""
        meta = preemptor.get("metadata") or {}
        scheduler_name = str((preemptor.get("spec") or {}).get("schedulerName") or controller)
        condition = disruption_target_condition(scheduler_name, preemptor_kind)
        failed = 0
        for v in victims:
            try:
                patch = pod_condition_patch(v.pod, condition, None)
                if patch is not None:
                    try:
                        await self.kube.patch_pod_status(v.namespace, v.name, patch)
                    except NotFound:
                        log.info("Victim Pod is already deleted preemptor=%s victim=%s", meta.get("name"), v.key)
                        continue
                await self.kube.delete_pod(v.namespace, v.name, uid=v.uid or None)
                await self.event(v.pod, "Normal", "Preempted", "Preempting",
                                 preempted_event_message(str(meta.get("uid")), node or v.node_name or "",
                                                         preemptor_kind), controller)
            except KubeError as exc:
                log.warning("Error preempting pod %s: %s", v.key, exc)
                failed += 1
        return failed
