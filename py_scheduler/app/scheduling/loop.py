"""The scheduling loop: one cycle per Pod, binding in the background.

Upstream: ``pkg/scheduler/schedule_one.go``: ``ScheduleOne`` (pop; skip a Pod being deleted or
already assumed), ``schedulingCycle`` (``UpdateSnapshot``, ``SchedulePod``, PostFilter on a
FitError, Reserve, assume), ``runBindingCycle`` in a goroutine (here an asyncio task) so the next
cycle starts at once, ``handleBindingCycleError`` (Unreserve, ForgetPod, the freed room offered to
other Pods as an ``AssignedPodDelete`` event, the Pod back to the queue) and
``handleSchedulingFailure`` (requeue with the informer's latest Pod unless it is gone or bound,
FailedScheduling event, PodScheduled condition, nominated node). Metrics as
``pkg/scheduler/metrics``: ``schedule_attempts_total{result}``, attempt / algorithm durations,
``pod_scheduling_sli_duration_seconds{attempts}``, ``pod_scheduling_attempts``.

Nominated Pods: Filter sees the queue's nominator (connected to every profile once, at
construction: ``Framework.connect_nominator``; upstream's ``RunFilterPluginsWithNominatedPods``), so a
Pod of lower priority cannot take the room a preemption freed for a nominated one; an assumed Pod leaves the nominator
(``DeleteNominatedPodIfExists`` in ``assume``) and ``handleSchedulingFailure`` records the
nomination PostFilter chose (``AddNominatedPod``).

The binding cycle (``runBindingCycle`` / ``bindingCycle``, in an asyncio task): Permit runs at the
end of the scheduling cycle (a Wait puts the Pod in the framework's waiting-Pods map); the task
runs PreBindPreFlight (a Pod that will wait on Permit or run PreBind first gets
``status.nominatedNodeName``, ``NominatedNodeNameForExpectation``), WaitOnPermit, PreBind, the Bind
plugins (DefaultBinder: the Binding through the Handle's client), the ``Scheduled`` event and
PostBind; any failure goes through ``handleBindingCycleError``. The extension points themselves are
``py_scheduler.framework.binding_cycle``. Metrics: ``scheduler_permit_wait_duration_seconds{result}``,
``scheduler_goroutines{operation="binding"}`` and, through the profile's observer, the binding
extension points' durations.

Differences from upstream, by design of this build: Reserve plugins run before the Pod is assumed,
so annotations they ask for (``CycleState.pod_annotations``, e.g. GPU indices) are part of the
assumed Pod the cache accounts; they travel in the Binding's metadata (never in a separate write).
Every API write of PreBind / Bind plugins is fenced by ``leader.is_leader_valid()`` (the client's
fence); a binding cycle that fails while this replica's leadership is no longer valid keeps the Pod
and its nomination for the next leader and reports nothing. PreBind plugins run one at a time
(upstream may run ``AllowParallel`` ones together), and a Pod in PreBind is not cancelled by
preemption.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from py_scheduler.app.scheduling.binder import POD_REASON_SCHEDULER_ERROR, POD_REASON_UNSCHEDULABLE, Binder
from py_scheduler.app.scheduling.decisions import DecisionLog
from py_scheduler.app.telemetry import metrics as m
from py_scheduler.app.telemetry.klog import v as klog_v
from py_scheduler.cache.cache import Cache, CacheError
from py_scheduler.cache.snapshot import Snapshot
from py_scheduler.core.cycle import PodCycle, rejection, schedule_pod, unreserve_and_forget
from py_scheduler.core.group_cycle import pod_group_name, pod_group_of, schedule_group
from py_scheduler.core.ports import CacheState, PodGroupSource
from py_scheduler.framework import binding_cycle as bc
from py_scheduler.framework.algorithm import Algorithm, Diagnosis, ScheduleResult, fit_error_message
from py_scheduler.framework.events import EVENT_ASSIGNED_POD_DELETE
from py_scheduler.framework.interfaces import AsyncPreemptionPlugin, GPUInventoryReporter
from py_scheduler.framework.objects import Obj
from py_scheduler.framework.preemption import preempted_event_message
from py_scheduler.framework.runtime import Framework
from py_scheduler.framework.types import Code, CycleState, PodInfo, Status
from py_scheduler.queue.queued_pod_info import QueuedPodInfo
from py_scheduler.queue.scheduling_queue import PARSE_ERROR_PLUGIN, PriorityQueue

log = logging.getLogger("py_scheduler.loop")


RESULT_SCHEDULED = "scheduled"
RESULT_UNSCHEDULABLE = "unschedulable"
RESULT_ERROR = "error"


class Leader(Protocol):
    """What the loop needs of leader election (``LeaderElector`` or ``AlwaysLeader``)."""

    identity: str
    leading: asyncio.Event

    def is_leader(self) -> bool: ...

    def is_leader_valid(self) -> bool: ...


_SCHEDULE_ATTEMPTS = m.Children(m.SCHEDULE_ATTEMPTS)
_SCHEDULING_ATTEMPT_DURATION = m.Children(m.SCHEDULING_ATTEMPT_DURATION)
_POD_SCHEDULING_SLI_DURATION = m.Children(m.POD_SCHEDULING_SLI_DURATION)


def _observe_permit_wait(result: str, seconds: float) -> None:
    m.PERMIT_WAIT_DURATION.labels(result).observe(seconds)


def _attempts_label(attempts: int) -> str:
    return "15+" if attempts >= 15 else str(attempts)


class SchedulingLoop:
    """Pops Pods and schedules them, one cycle at a time.

    Args:
        frameworks: schedulerName -> Framework (one per profile).
        algorithm: the process's :class:`Algorithm` (rotating start index, tie-break RNG).
        cache, queue: the live cache and queue.
        binder: API writes.
        leader: leader election (fence).
        pod_lister: ``(namespace, name) -> Pod | None`` from the informers; also given to the
            queue's nominator when the queue has no ``pod_lister`` yet.
        decisions: where every scheduling attempt's decision record goes (``/debug/decisions``);
            None records nothing.
    """

    def __init__(self, *, frameworks: Mapping[str, Framework], algorithm: Algorithm, cache: Cache,
                 queue: PriorityQueue, binder: Binder, leader: Leader,
                 pod_lister: Callable[[str, str], Obj | None],
                 cache_consistent: asyncio.Event | None = None, decisions: DecisionLog | None = None) -> None:
        self.frameworks = dict(frameworks)
        self.decisions = decisions
        self.cache_consistent = cache_consistent
        self.algorithm = algorithm
        self.cache = cache
        self.queue = queue
        self.binder = binder
        self.leader = leader
        self.pod_lister = pod_lister
        if queue.pod_lister is None:
            queue.pod_lister = pod_lister
        for fw in self.frameworks.values():
            fw.connect_nominator(queue.nominator)
        self.snapshot = Snapshot(cache.objects)
        self.state = CacheState(cache, self.snapshot)
        self._tasks: set[asyncio.Task[None]] = set()
        self.cycles = 0

    # -- the loop ------------------------------------------------------------------------------------
    def _paused(self) -> bool:
        """The cache is being re-synchronised after a watch gap (``Informers.consistent`` cleared)."""
        return self.cache_consistent is not None and not self.cache_consistent.is_set()

    async def run(self, stop: asyncio.Event) -> None:
        """Schedule until ``stop`` is set; only while leading (standbys keep the queue warm) and while
        the cache is consistent (``cache_consistent``: no re-list after a watch gap in progress)."""
        while not stop.is_set():
            if not self.leader.is_leader_valid() or self._paused():
                event = self.cache_consistent if self._paused() and self.cache_consistent else self.leader.leading
                waiter = asyncio.ensure_future(event.wait())
                stopper = asyncio.ensure_future(stop.wait())
                try:
                    await asyncio.wait({waiter, stopper}, timeout=0.2, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    waiter.cancel()
                    stopper.cancel()
                continue
            qpi = await self.queue.pop()
            if qpi is None:
                return
            if not self.leader.is_leader_valid() or stop.is_set() or self._paused():
                self.queue.undo_pop(qpi)
                continue
            try:
                self.schedule_one(qpi)
            except Exception:  # a bug in a cycle must not stop scheduling
                log.exception("scheduling cycle for pod %s failed", qpi.key)
                self._requeue_after_bug(qpi)
            self.cycles += 1
            await asyncio.sleep(0)  # let watch events and bindings run between cycles

    async def drain(self, timeout: float = 5.0) -> None:
        """Wait (at most ``timeout`` seconds) for background bindings and API writes, those they start
        meanwhile included (a failed binding's report)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self._tasks and (left := deadline - loop.time()) > 0:
            await asyncio.wait(set(self._tasks), timeout=left)

    def _spawn(self, coro: Any) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _requeue_after_bug(self, qpi: QueuedPodInfo) -> None:
        """After :meth:`schedule_one` raised (a bug): the Pod goes back to the queue as after an
        internal error (error backoff, the informer's latest version), so a bug costs an attempt, not
        the Pod; marking it done alone left it out of the queue until its next update. Only done when
        the cache holds it assumed (its binding cycle owns it) or the informer no longer has it
        unbound with the same UID (:meth:`_requeue`). Never raises."""
        try:
            if self.cache.is_assumed_pod(qpi.pod_info):
                self.queue.done(qpi.uid)
                return
            qpi.unschedulable_plugins = frozenset()  # an internal error: no rejector
            qpi.pending_plugins = frozenset()
            self._requeue(qpi)
        except Exception:
            log.exception("requeueing pod %s after its failed cycle failed", qpi.key)
            self.queue.done(qpi.uid)

    # -- one cycle -----------------------------------------------------------------------------------
    def schedule_one(self, qpi: QueuedPodInfo) -> None:
        """``scheduleOnePod``: the synchronous scheduling cycle of one popped Pod
        (:func:`py_scheduler.core.cycle.schedule_pod`), then Permit and the binding cycle's task."""
        pi = qpi.pod_info
        fw = self.frameworks.get(pi.scheduler_name)
        if fw is None:
            log.error("profile not found for scheduler name %q, pod %s", pi.scheduler_name, pi.key)
            self.queue.done(pi.uid)
            return
        meta = pi.pod.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            log.debug("Skip schedule deleting pod pod=%s", pi.key)
            self._spawn(self.binder.failed_scheduling(pi.pod, f"skip schedule deleting pod: {pi.key}",
                                                      fw.profile_name))
            self.queue.done(pi.uid)
            return
        if self.cache.is_assumed_pod(pi):
            self.queue.done(pi.uid)
            return
        log.debug("Attempting to schedule pod pod=%s", pi.key)
        self.binder.drop_condition(pi.pod)  # the last attempt's write, if still waiting: this one decides
        start = time.perf_counter()
        # ClearRejectorPlugins: this attempt's failure decides them (none for an internal error).
        qpi.unschedulable_plugins = frozenset()
        qpi.pending_plugins = frozenset()
        if qpi.parse_error is not None:
            qpi.unschedulable_plugins = frozenset({PARSE_ERROR_PLUGIN})
            self._record(fw, qpi, RESULT_UNSCHEDULABLE, start, message=str(qpi.parse_error))
            self._failure(fw, qpi, POD_REASON_UNSCHEDULABLE, str(qpi.parse_error), start, RESULT_UNSCHEDULABLE)
            return
        group = pod_group_of(fw, pi.pod)
        if group is not None:  # GenericWorkload: the whole group in one cycle (schedule_one_podgroup.go)
            self._schedule_one_pod_group(fw, qpi, *group)
            return
        c = schedule_pod(fw, self.algorithm, self.state, pi, nominations=self.queue,
                         cycle=self.queue.scheduling_cycle)
        if c.algorithm_seconds:
            m.SCHEDULING_ALGORITHM_DURATION.observe(c.algorithm_seconds)
        victims: list[PodInfo] = []
        res = c.result
        if c.outcome == RESULT_UNSCHEDULABLE and res is not None and res.selected is None:
            if fw.post_filter_plugins and res.nodes_evaluated > 0:
                m.PREEMPTION_ATTEMPTS.inc()
            pf = res.post_filter
            if pf is not None and pf.nominated_node_name:
                m.PREEMPTION_VICTIMS.observe(len(pf.victims))
                if pf.num_pdb_violations:
                    m.PREEMPTION_PDB_VIOLATIONS.labels("pod").inc(pf.num_pdb_violations)
                # Victims already terminating need no second API call (prepareCandidateAsync).
                victims = [v for v in pf.victims if not (v.pod.get("metadata") or {}).get("deletionTimestamp")]
                if victims:
                    self._mark_preempting(fw, pi.uid, True)
            if klog_v(2):
                log.info("Unable to schedule pod; no fit; waiting pod=%s err=%s", pi.key, c.message)
        self._submit(fw, qpi, c, start, victims)

    def _submit(self, fw: Framework, qpi: QueuedPodInfo, c: PodCycle, start: float,
                victims: list[PodInfo] | None = None, group: str | None = None) -> None:
        """The end of a Pod's scheduling cycle (its own, or its part of a pod group cycle, whose
        outcome is ``group``): a failure is recorded and goes through ``handleSchedulingFailure``; an
        assumed Pod runs Permit (``prepareForBindingCycle``: Wait puts it in the waiting-Pods map, a
        rejection or an error ends the attempt here) and its binding cycle starts in a task."""
        assumed = c.assumed
        if assumed is not None:
            node, state, res = c.node, c.state or CycleState(self.snapshot), c.result
            st, waits = fw.run_permit(state, assumed, node)
            if st.code == Code.WAIT:
                bc.add_waiting_pod(fw, assumed, waits)
            elif not st.is_success():
                unreserve_and_forget(fw, state, assumed, self.state)
                c = rejection(st, node, c)
            if c.outcome == RESULT_SCHEDULED:
                self._record(fw, qpi, RESULT_SCHEDULED, start, res, None, state.pod_annotations, state)
                self._spawn(self._binding_cycle(fw, qpi, assumed, node, state, start,
                                                res.nodes_evaluated if res else 0, len(res.feasible) if res else 0))
                return
        qpi.unschedulable_plugins, qpi.pending_plugins = c.rejectors, c.pending
        reason = POD_REASON_UNSCHEDULABLE if c.outcome == RESULT_UNSCHEDULABLE else POD_REASON_SCHEDULER_ERROR
        self._record(fw, qpi, c.outcome, start, c.result, c.message, state=c.state)
        self._failure(fw, qpi, reason, c.message, start, c.outcome, nominated=c.nominated, victims=victims,
                      group=group)

    def _schedule_one_pod_group(self, fw: Framework, qpi: QueuedPodInfo, gang: PodGroupSource,
                                pod_group: Obj) -> None:
        """``scheduleOnePodGroup`` for the group of the popped ``qpi``: its other queued, non-gated
        members are popped (:meth:`PriorityQueue.pop_members`), the core's pod group cycle
        (:func:`py_scheduler.core.group_cycle.schedule_group`) runs over all of them on one snapshot,
        each member's verdict is submitted as a single Pod's (:meth:`_submit`), and the group's
        ``PodGroupInitiallyScheduled`` condition is written (``updatePodGroupCondition``)."""
        start = time.perf_counter()
        pi = qpi.pod_info
        ns, name = pi.namespace, pod_group_name(pi.pod) or ""

        def member(q: QueuedPodInfo) -> bool:
            p = q.pod_info
            return (p.namespace == ns and pod_group_name(p.pod) == name and p.scheduler_name == pi.scheduler_name
                    and q.parse_error is None and not (p.pod.get("metadata") or {}).get("deletionTimestamp")
                    and not self.cache.is_assumed_pod(p))

        self.queue.recheck_gated(member)
        queued = [qpi, *self.queue.pop_members(member)]
        for q in queued:
            q.unschedulable_plugins = frozenset()
            q.pending_plugins = frozenset()
            self.binder.drop_condition(q.pod_info.pod)
        gating = self.queue.gating_plugins(member)
        if gating:
            # A member held by a PreEnqueue plugin gates the whole group upstream (the entity is not
            # popped: no attempt, no event, no condition). Here the others wait as unschedulable with
            # the gating plugins (and GangScheduling) as rejectors; the gated member, once let in, is
            # popped and gathers them (pop_members).
            log.debug("Pod group gated podGroup=%s/%s by=%s pods=%d", ns, name, sorted(gating), len(queued))
            for q in queued:
                q.unschedulable_plugins = gating | {gang.name}
                self.queue.add_unschedulable_if_not_present(q)
            return
        log.debug("Attempting to schedule pod group podGroup=%s/%s pods=%d", ns, name, len(queued))
        g = schedule_group(fw, self.algorithm, self.state, pod_group, [q.pod_info for q in queued],
                           nominations=self.queue, cycle=self.queue.scheduling_cycle)
        m.PODGROUP_SCHEDULING_ALGORITHM_DURATION.observe(g.algorithm_seconds)
        # Group preemption (actuatePodGroupPreemption): the members are held out of activeQ (PreEnqueue,
        # by the PodGroup's UID) before they are requeued, until the evictions are done.
        if g.victims:  # observeVictims
            m.WORKLOAD_PREEMPTION_VICTIMS.observe(len(g.victims))
            if g.num_pod_group_disruptions:
                m.PREEMPTION_WORKLOAD_DISRUPTIONS.labels("podgroup").observe(g.num_pod_group_disruptions)
            if g.num_pdb_violations:
                m.PREEMPTION_PDB_VIOLATIONS.labels("podgroup").inc(g.num_pdb_violations)
        victims = [v for v in g.victims if not (v.pod.get("metadata") or {}).get("deletionTimestamp")]
        if victims:
            self._mark_preempting(fw, str((pod_group.get("metadata") or {}).get("uid") or ""), True)
        for q, c in zip(queued, g.members, strict=True):
            try:  # a bug submitting one member must not lose it nor the members after it
                self._submit(fw, q, c, start, group=g.outcome)
            except Exception as exc:
                log.exception("submitting the result of pod group member %s failed", q.key)
                self._settle_after_bug(fw, q, c, start, exc)
        if victims:
            self._spawn(self._preempt(fw, pod_group, victims, "cluster", "podgroup", [q.pod_info.pod for q in queued]))
        if klog_v(2) and g.outcome != RESULT_ERROR:
            log.info("Pod group scheduling attempt podGroup=%s/%s result=%s pods=%d err=%s", ns, name, g.outcome,
                     len(queued), g.message)
        cond = {RESULT_SCHEDULED: ("True", "Scheduled"), RESULT_UNSCHEDULABLE: ("False", "Unschedulable")}
        gang.write_condition(ns, name, *cond.get(g.outcome, ("False", "SchedulerError")), g.message)
        m.PODGROUP_SCHEDULE_ATTEMPTS.labels(g.outcome, fw.profile_name).inc()
        m.PODGROUP_SCHEDULING_ATTEMPT_DURATION.labels(g.outcome, fw.profile_name).observe(time.perf_counter() - start)

    def _settle_after_bug(self, fw: Framework, q: QueuedPodInfo, c: PodCycle, start: float, exc: Exception) -> None:
        """A member whose submission raised: if still assumed (not handed to its binding cycle) it leaves
        the waiting Pods and is unreserved and forgotten; then it is requeued as after an internal error.
        Never raises."""
        if c.assumed is not None and self.cache.is_assumed_pod(c.assumed):
            try:
                if fw.waiting_pods.get(c.assumed.uid) is not None:
                    fw.waiting_pods.remove(c.assumed.uid)
                unreserve_and_forget(fw, c.state or CycleState(self.snapshot), c.assumed, self.state)
            except Exception:
                log.exception("undoing the assumption of pod group member %s failed", q.key)
        try:
            q.unschedulable_plugins = frozenset()
            q.pending_plugins = frozenset()
            self._failure(fw, q, POD_REASON_SCHEDULER_ERROR, f"{type(exc).__name__}: {exc}", start, RESULT_ERROR,
                          nominated="")
        except Exception:
            log.exception("requeueing pod group member %s failed", q.key)
            self._requeue_after_bug(q)

    def _record(self, fw: Framework, qpi: QueuedPodInfo, outcome: str, start: float,
                res: ScheduleResult | None = None, message: str | None = None,
                annotations: Mapping[str, str] | None = None, state: CycleState | None = None) -> None:
        """Keep this attempt's decision record (:mod:`py_scheduler.app.scheduling.decisions`) at the end of the
        scheduling cycle: small tuples and references, no API call. A failure to record is logged and
        never fails the cycle."""
        decisions = self.decisions
        if decisions is None:
            return
        try:
            decisions.record(qpi.pod_info, fw.profile_name, qpi.attempts, outcome,
                             duration=time.perf_counter() - start, res=res,
                             nodes_total=len(self.snapshot.node_info_list), message=message,
                             annotations=annotations or None,
                             dra={a["claim"]: a["allocation"] for a in fw.claim_allocations(state, qpi.pod_info)}
                             if state is not None and outcome == RESULT_SCHEDULED else None)
        except Exception:
            log.exception("recording the scheduling decision of pod %s failed", qpi.pod_info.key)

    # -- binding cycle -------------------------------------------------------------------------------
    async def _binding_cycle(self, fw: Framework, qpi: QueuedPodInfo, assumed: PodInfo, node: str,
                             state: CycleState, start: float, evaluated: int, feasible: int) -> None:
        """``runBindingCycle``: :meth:`_bind_steps`, and ``handleBindingCycleError`` on any failure."""
        goroutines = m.GOROUTINES.labels("binding")
        goroutines.inc()
        try:
            try:
                st = await self._bind_steps(fw, qpi, assumed, node, state, start, evaluated, feasible)
            except Exception as exc:  # a bug must not leave the Pod assumed, waiting, or out of the queue
                log.exception("binding cycle for pod %s failed", assumed.key)
                self._permit_reject_pending(fw, assumed)
                st = Status.error(f"{type(exc).__name__}: {exc}")
            if not st.is_success():
                self._binding_cycle_error(fw, qpi, assumed, node, state, start, st)
        finally:
            goroutines.dec()

    async def _bind_steps(self, fw: Framework, qpi: QueuedPodInfo, assumed: PodInfo, node: str,
                          state: CycleState, start: float, evaluated: int, feasible: int) -> Status:
        """``bindingCycle``: PreBindPreFlight (a Pod that will wait on Permit or run PreBind gets
        ``status.nominatedNodeName`` first, ``NominatedNodeNameForExpectation``), WaitOnPermit, PreBind,
        Bind, then the ``Scheduled`` event, the metrics and PostBind. Returns the first failure."""
        pi = qpi.pod_info
        pre_flight = fw.run_pre_bind_pre_flights(state, assumed, node)
        if pre_flight.code == Code.ERROR:
            self._permit_reject_pending(fw, assumed)
            return pre_flight
        if pre_flight.is_success() or bc.will_wait_on_permit(fw, assumed):
            await self.binder.set_nominated_node(pi.pod, node)

        st = await bc.wait_on_permit(fw, assumed, on_waited=_observe_permit_wait)
        if not st.is_success():
            if st.is_rejected():
                # A FitError on the one node: its plugin is the rejector the queue's hints consult.
                d = Diagnosis(node_to_status={node: st}, unschedulable_plugins={st.plugin} if st.plugin else set())
                qpi.unschedulable_plugins = frozenset(d.unschedulable_plugins)
                return Status(st.code, [fit_error_message(1, d)], st.plugin)
            return st
        # Past Permit nothing makes the Pod unschedulable: in-flight events are no longer needed.
        self.queue.done(pi.uid)

        st = await fw.run_pre_bind(state, assumed, node)
        if not st.is_success():
            return st
        st = await fw.run_bind(state, assumed, node)
        if st.is_skip():
            st = Status.error("no Bind plugin bound the pod")
        if not st.is_success():
            return st
        self.cache.finish_binding(assumed)
        if klog_v(2):
            log.info("Successfully bound pod to node pod=%s node=%s evaluatedNodes=%d feasibleNodes=%d",
                     pi.key, node, evaluated, feasible)
        elapsed = time.perf_counter() - start
        _SCHEDULE_ATTEMPTS(RESULT_SCHEDULED, fw.profile_name).inc()
        _SCHEDULING_ATTEMPT_DURATION(RESULT_SCHEDULED, fw.profile_name).observe(elapsed)
        m.POD_SCHEDULING_ATTEMPTS.observe(qpi.attempts)
        if qpi.was_flushed_from_unschedulable:
            m.POD_SCHEDULED_AFTER_FLUSH.inc()
        if qpi.initial_attempt_set:
            _POD_SCHEDULING_SLI_DURATION(_attempts_label(qpi.attempts)).observe(
                max(self.queue.now() - qpi.initial_attempt_timestamp, 0.0))
        fw.run_post_bind(state, assumed, node)
        await self.binder.scheduled(pi.pod, node, fw.profile_name)
        return Status.success()

    @staticmethod
    def _permit_reject_pending(fw: Framework, assumed: PodInfo) -> None:
        """A binding cycle that ends before WaitOnPermit leaves no waiting Pod behind."""
        wp = fw.waiting_pods.get(assumed.uid)
        if wp is not None:
            wp.reject("", "binding cycle failed")
            fw.waiting_pods.remove(assumed.uid)

    def _binding_cycle_error(self, fw: Framework, qpi: QueuedPodInfo, assumed: PodInfo, node: str,
                             state: CycleState, start: float, st: Status) -> None:
        """``handleBindingCycleError``: Unreserve (reverse order) and ForgetPod, the freed room offered to
        the other Pods as an ``AssignedPodDelete``, then ``handleSchedulingFailure``.

        Whatever failed -- 404 (the Pod is gone), 409 (bound elsewhere, or recreated: the Binding's UID
        precondition), a PreBind, any other error -- the Pod is requeued only when it still exists
        unbound with the same UID, with FailedScheduling and ``PodScheduled=False`` (``SchedulerError``
        for errors, ``Unschedulable`` for rejections) unless it was recreated. One exception, by design
        of this build: when this replica's leadership is no longer valid (the client's fence refused
        the write, or the Lease went while it waited), the Pod and its nomination are kept for whoever
        leads next, with no failure reported.
        """
        pi = qpi.pod_info
        log.warning("Failed to bind pod pod=%s node=%s err=%s", pi.key, node, st.message())
        forgotten = unreserve_and_forget(fw, state, assumed, self.state)
        if not self.leader.is_leader_valid():
            qpi.unschedulable_plugins = frozenset()
            qpi.pending_plugins = frozenset()
            if self._requeue(qpi) is not None:
                self.queue.add_nominated_pod(qpi.pod_info)
        elif st.is_rejected():
            # Only a Permit rejection (a FitError) names rejector plugins; a PreBind / Bind rejection
            # leaves none, so the Pod goes to backoff (handleSchedulingFailure).
            self._failure(fw, qpi, POD_REASON_UNSCHEDULABLE, st.message(), start, RESULT_UNSCHEDULABLE,
                          nominated="")
        else:
            self._failure(fw, qpi, POD_REASON_SCHEDULER_ERROR, st.message(), start, RESULT_ERROR, nominated="")
        if forgotten:
            # The freed room, offered after the Pod itself was requeued (upstream defers this move so
            # the Pod's own requeue does not see it as an in-flight event).
            self._assigned_pod_deleted(assumed)

    def _assigned_pod_deleted(self, assumed: PodInfo) -> None:
        """The ``AssignedPodDelete`` event for the room a forgotten assumed Pod freed (not offered
        to that Pod itself)."""
        self.queue.move_all_to_active_or_backoff(EVENT_ASSIGNED_POD_DELETE, assumed.pod, None,
                                                 lambda p: (p.get("metadata") or {}).get("uid") != assumed.uid)

    def _requeue(self, qpi: QueuedPodInfo) -> str | None:
        """Put the Pod back with the informer's latest version, unless it is gone, bound or recreated
        (then only end its in-flight state). Returns the sub-queue or None."""
        pi = qpi.pod_info
        cached = self.pod_lister(pi.namespace, pi.name)
        if cached is None:
            log.info("Pod doesn't exist in informer cache pod=%s", pi.key)
        elif (cached.get("spec") or {}).get("nodeName"):
            log.info("Pod has been assigned to node. Abort adding it back to queue. pod=%s node=%s", pi.key,
                     (cached.get("spec") or {}).get("nodeName"))
        elif str((cached.get("metadata") or {}).get("uid") or "") != pi.uid:
            log.info("Pod was recreated while handling scheduling failure. Skip requeueing pod=%s", pi.key)
        else:
            return self.queue.add_unschedulable_if_not_present(qpi, cached)
        self.queue.done(pi.uid)
        return None

    def _failure(self, fw: Framework, qpi: QueuedPodInfo, reason: str, message: str, start: float, result: str,
                 nominated: str | None = None, victims: list[PodInfo] | None = None, group: str | None = None) -> None:
        """``handleSchedulingFailure``: requeue now; event, condition and preemption writes in the
        background.

        ``nominated`` is the NominatingInfo: None keeps the Pod's own ``nominatedNodeName``
        (``ModeNoop``), "" clears it, a node name sets it (``ModeOverride``). As upstream, the Pod is
        requeued (with the informer's latest version) only when the informer still has it unbound
        with the same UID; a Pod gone or bound meanwhile is not requeued but still gets the
        FailedScheduling event and the condition write; a recreated Pod gets neither. The
        nomination goes to the queue's nominator at once; a requeued Pod also carries it in its
        ``status.nominatedNodeName`` so its next attempt tries that node first, before the status
        write comes back through the watch. A member of a pod group just attempted (``group``: the
        group's outcome) is requeued as upstream requeues the group entity
        (``AddAttemptedPodGroupIfNeeded``: after its backoff, or at once when the group was placed),
        whatever the events.
        """
        _SCHEDULE_ATTEMPTS(result, fw.profile_name).inc()
        _SCHEDULING_ATTEMPT_DURATION(result, fw.profile_name).observe(time.perf_counter() - start)
        pi = qpi.pod_info
        pod = pi.pod
        if victims:
            # Preemption started in PostFilter (prepareCandidateAsync), whatever happens to the Pod.
            self._spawn(self._preempt(fw, pod, victims, nominated or ""))
        cached = self.pod_lister(pi.namespace, pi.name)
        if cached is None:
            log.info("Pod doesn't exist in informer cache pod=%s", pi.key)
            self.queue.done(pi.uid)
            # AddNominatedPod's lister check: a Pod gone is not nominated (any earlier nomination goes).
            self.queue.delete_nominated_pod_if_exists(pi.pod)
        elif (cached.get("spec") or {}).get("nodeName"):
            log.info("Pod has been assigned to node. Abort adding it back to queue. pod=%s node=%s", pi.key,
                     (cached.get("spec") or {}).get("nodeName"))
            self.queue.done(pi.uid)
            self.queue.delete_nominated_pod_if_exists(pi.pod)  # nor is a Pod already bound
        elif str((cached.get("metadata") or {}).get("uid") or "") != pi.uid:
            log.info("Pod was recreated while handling scheduling failure. Skip requeueing and status updates. "
                     "pod=%s oldUID=%s newUID=%s", pi.key, pi.uid, (cached.get("metadata") or {}).get("uid"))
            self.queue.done(pi.uid)
            return
        else:
            requeued = cached
            if nominated:
                requeued = {**cached, "status": {**(cached.get("status") or {}), "nominatedNodeName": nominated}}
            if group is not None:
                self.queue.add_attempted_group_member(qpi, requeued, group)
            else:
                self.queue.add_unschedulable_if_not_present(qpi, requeued)
            self.queue.add_nominated_pod(qpi.pod_info, nominated)
            pod = cached
        self._spawn(self._report_failure(fw, pod, reason, message, nominated))

    async def _report_failure(self, fw: Framework, pod: Obj, reason: str, message: str,
                              nominated: str | None) -> None:
        # side by side: the condition never waits behind the Event client's rate limiter (upstream's
        # recorder only queues the Event, and updatePod goes on)
        await asyncio.gather(self.binder.failed_scheduling(pod, message, fw.profile_name),
                             self.binder.update_pod_condition(pod, reason, message, nominated))

    @staticmethod
    def _mark_preempting(fw: Framework, uid: str, running: bool) -> None:
        """Tell the PostFilter plugin (DefaultPreemption's asynchronous-preemption PreEnqueue) that
        the evictions of ``uid`` run / are over."""
        for pl in fw.post_filter_plugins:
            if isinstance(pl, AsyncPreemptionPlugin):
                if running:
                    pl.mark_preempting(uid)
                else:
                    pl.preemption_finished(uid)

    async def _preempt(self, fw: Framework, preemptor: Obj, victims: list[PodInfo], node: str,
                       kind: str = "pod", members: list[Obj] | None = None) -> None:
        """``prepareCandidateAsync``: clear the nomination of lower-priority Pods nominated to ``node``,
        evict every victim but the last (UID-preconditioned deletes with a ``Preempted`` event each; a
        victim waiting on Permit is only rejected, in memory), then, unless one failed, register the
        last one with the PreEnqueue gate (``lastVictimsPendingPreemption``) and evict it. The
        preemptor comes back through the victims' deletion events, as upstream's; it is activated here
        only when an eviction failed or the last victim was preempted in memory (no deletion event
        follows). A pod group's preemption (``kind`` ``podgroup``, ``preemptor`` the PodGroup, ``node``
        ``cluster``) treats its ``members`` as the preemptor's Pods."""
        meta = preemptor.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        plugin = fw.post_filter_plugins[0].name if fw.post_filter_plugins else ""
        failed = False
        in_memory = False
        started = time.perf_counter()

        async def evict(v: PodInfo) -> bool:
            """One victim; True when it was preempted in memory."""
            nonlocal failed
            wp = fw.waiting_pods.get(v.uid)
            if wp is not None and wp.preempt(plugin, "preempted"):
                log.info("Preemptor preempted a waiting pod preemptor=%s waitingPod=%s node=%s", uid, v.key,
                         v.node_name)
                await self.binder.event(v.pod, "Normal", "Preempted", "Preempting",
                                        preempted_event_message(uid, node or v.node_name or "", kind)
                                        + " (in kube-scheduler memory).", fw.profile_name)
                return True
            if await self.binder.delete_victims([v], preemptor, fw.profile_name, node, kind):
                failed = True
            return False

        try:
            log.info("Start the preemption asynchronously preemptor=%s/%s numVictims=%d",
                     meta.get("namespace"), meta.get("name"), len(victims))
            # Lower-priority Pods nominated to this node may no longer fit on it: their nomination is
            # cleared (getLowerPriorityNominatedPods, clearNominatedNodeName), so they look elsewhere.
            prio = (preemptor.get("spec") or {}).get("priority")
            prio = prio if isinstance(prio, int) and not isinstance(prio, bool) else 0
            for p in self.queue.nominated_pods_for_node(node) if node else ():
                if p.priority < prio:
                    await self.binder.clear_nominated_node(p.pod)
            for v in victims[:-1]:
                await evict(v)
            if victims and not failed:
                last = victims[-1]
                self._last_victim(fw, uid, last)
                in_memory = await evict(last)
        except Exception:
            failed = True
            raise
        finally:
            self._mark_preempting(fw, uid, False)
            if failed or in_memory:
                self.queue.activate(members if members is not None else [preemptor])
            result, seconds = ("error" if failed else "success"), time.perf_counter() - started
            m.PREEMPTION_EXECUTION_DURATION.labels(kind, result).observe(seconds)
            m.PREEMPTION_GOROUTINES_EXECUTION.labels(result).inc()

    def _last_victim(self, fw: Framework, uid: str, victim: PodInfo) -> None:
        """Register ``victim`` as the last of ``uid``'s preemption with the PreEnqueue gate: gone once
        the informer no longer has it (with its UID) or shows it being deleted."""

        def gone() -> bool:
            cur = self.pod_lister(victim.namespace, victim.name)
            meta = (cur or {}).get("metadata") or {}
            return cur is None or str(meta.get("uid") or "") != victim.uid or bool(meta.get("deletionTimestamp"))

        for pl in fw.post_filter_plugins:
            if isinstance(pl, AsyncPreemptionPlugin):
                pl.last_victim(uid, gone)


class Housekeeping:
    """Once a second: expire assumed Pods past their safety TTL, publish cache sizes and the GPU
    gauges (``py_scheduler_gpu_allocated`` / ``py_scheduler_gpu_free`` per node and model).

    Args:
        cache, queue: the live cache and queue.
        period: seconds between ticks.
        snapshot: the Snapshot the GPU gauges are read from, brought up to date with
            ``cache.update_snapshot`` on each tick (cheap: only NodeInfos changed since are cloned), so
            assumed and bound Pods show at once. Pass the loop's ``snapshot`` to share its NodeInfos
            (every cycle updates it again before use); None: a Snapshot of its own.
        frameworks: the profiles; their GPU plugins (:class:`GPUInventoryReporter`) give the gauges.
    """

    def __init__(self, cache: Cache, queue: PriorityQueue, period: float = 1.0,
                 snapshot: Snapshot | None = None, frameworks: Mapping[str, Framework] | None = None) -> None:
        self.gpu = [p for fw in (frameworks or {}).values() for p in fw.plugins.values()
                    if isinstance(p, GPUInventoryReporter)]
        self.cache = cache
        self.queue = queue
        self.period = period
        self.snapshot = snapshot if snapshot is not None else Snapshot(cache.objects)

    def tick(self) -> None:
        for pi in self.cache.cleanup_assumed_pods():
            self.queue.move_all_to_active_or_backoff(EVENT_ASSIGNED_POD_DELETE, pi.pod, None)
        m.CACHE_SIZE.labels("nodes").set(self.cache.node_count())
        m.CACHE_SIZE.labels("pods").set(self.cache.pod_count())
        m.CACHE_SIZE.labels("assumed_pods").set(self.cache.assumed_count())
        try:
            self.cache.update_snapshot(self.snapshot)
        except CacheError as exc:  # rebuilt by update_snapshot; the gauges wait for the next tick
            log.warning("housekeeping snapshot: %s", exc)
            return
        m.update_gpu_gauges(self.snapshot, self.gpu)

    async def run(self, stop: asyncio.Event, synced: asyncio.Event | None = None) -> None:
        """Tick every :attr:`period` seconds until ``stop`` is set. The first tick waits for ``synced``
        (the informers' initial sync): before it, the snapshot and the gauges would follow a cache
        still being filled, on the thread that fills it, and delay ``/readyz`` (about 0.1 s of a
        5000-node start-up). Nothing is assumed before the sync: the scheduling loop starts after it."""
        if synced is not None and not synced.is_set():
            waiters = [asyncio.ensure_future(e.wait()) for e in (synced, stop)]
            try:
                await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waiters:
                    w.cancel()
        while not stop.is_set():
            try:
                self.tick()
            except Exception:
                log.exception("housekeeping failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self.period)


class QueueMetricsRecorder:
    """:class:`py_scheduler.queue.scheduling_queue.QueueMetrics` on kube-scheduler's metrics (labelled
    children memoized: the queue reports on every Pod event). ``scheduler_pending_pods`` is written
    only for the counts that moved since this recorder's last report, so a process has one recorder
    (its queue's)."""

    def __init__(self) -> None:
        self._incoming = m.Children(m.QUEUE_INCOMING_PODS)
        self._incoming_entities = m.Children(m.QUEUE_INCOMING_ENTITIES)
        self._unschedulable = m.Children(m.UNSCHEDULABLE_PODS)
        queues = ("active", "backoff", "unschedulable", "gated")
        self._pending = [(m.PENDING_PODS.labels(q), m.QUEUED_ENTITIES.labels(q, "pod")) for q in queues]
        self._last_pending: tuple[int, int, int, int] | None = None

    def incoming(self, queue: str, event: str) -> None:
        self._incoming(queue, event).inc()
        self._incoming_entities(queue, event, "pod").inc()

    def pending(self, active: int, backoff: int, unschedulable: int, gated: int) -> None:
        # The queue reports after every change; a gauge whose count did not move is not set again.
        now = (active, backoff, unschedulable, gated)
        last = self._last_pending
        self._last_pending = now
        for i, (pods, entities) in enumerate(self._pending):
            if last is None or last[i] != now[i]:
                pods.set(now[i])
                entities.set(now[i])  # every queued entity is one Pod here (QUEUED_ENTITIES)

    def unschedulable_reason(self, plugin: str, profile: str, delta: int) -> None:
        self._unschedulable(plugin, profile).inc(delta)
