"""The live pod group scheduling cycle (feature gate ``GenericWorkload``): a gang scheduled as one entity.

Upstream (kube-scheduler v1.37.2): ``pkg/scheduler/schedule_one_podgroup.go`` -- ``scheduleOnePodGroup``
(snapshot, then the group cycle), ``assumeAndReserveWithRevert`` / ``unreserveAndForget`` (in a group
cycle the member is assumed in the snapshot too, and a revert gives back its nomination),
``submitPodGroupAlgorithmResult`` (Success: every placed member goes to Permit and its binding cycle;
Unschedulable: every member back to the queue with the FailedScheduling message -- its own FitError,
or the group's PlacementFeasible message for a member that fit -- and ``clearNominatedNode``; Error:
SchedulerError for all) and ``updatePodGroupCondition`` (``PodGroupInitiallyScheduled``: True /
``Scheduled``, False / ``Unschedulable`` with the group's message, False / ``SchedulerError``).

When the loop pops a Pod whose ``spec.schedulingGroup`` names an existing PodGroup and the profile
has GangScheduling (the gate is on), :func:`schedule_one_pod_group` pops the group's other queued,
non-gated members (:meth:`~py_scheduler.queue.scheduling_queue.PriorityQueue.pop_members`) and runs
:func:`~py_scheduler.framework.podgroup.schedule_pod_group` over all of them on one snapshot. The
per-member steps are the loop's own (Reserve, ``assume_pod``, Permit, the binding cycle,
``_failure``, ``_record``): nothing of the single-Pod cycle is forked.

Requeueing together: every member of a group that could not be placed gets the same rejector plugins
(the union of the members' own rejectors, plus GangScheduling), so the cluster event that can make
the misfit fit (a Node with a GPU added, a Pod deleted) moves all of them, and the first popped pulls
the others into the next group cycle. Upstream requeues the group entity itself
(``AddAttemptedPodGroupIfNeeded``); py-scheduler keeps per-Pod queue entries.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from py_scheduler.app import metrics as m
from py_scheduler.app.binder import POD_REASON_SCHEDULER_ERROR, POD_REASON_UNSCHEDULABLE
from py_scheduler.app.logging import v as klog_v
from py_scheduler.cache.cache import CacheError
from py_scheduler.framework import binding_cycle as bc
from py_scheduler.framework.interfaces import PodGroupInfo
from py_scheduler.framework.podgroup import (
    MSG_POD_GROUP_UNSCHEDULABLE,
    POD_GROUP_CYCLE_KEY,
    MemberResult,
    schedule_pod_group,
)
from py_scheduler.framework.runtime import Diagnosis, Framework, fit_error_message
from py_scheduler.framework.types import Code, CycleState, PodInfo, Status
from py_scheduler.plugins.gang_scheduling import NAME as GANG
from py_scheduler.plugins.gang_scheduling import GangScheduling, pod_group_name
from py_scheduler.queue.scheduling_queue import QueuedPodInfo

if TYPE_CHECKING:
    from py_scheduler.app.loop import SchedulingLoop

Obj = dict[str, Any]

log = logging.getLogger("py_scheduler.app.podgroup_cycle")


def pod_group_of(fw: Framework, pi: PodInfo) -> tuple[GangScheduling, Obj] | None:
    """(the profile's GangScheduling, the Pod's PodGroup object) when the Pod is scheduled by the
    group cycle: the profile has GangScheduling (``GenericWorkload`` on) and the PodGroup exists."""
    gang = fw.plugins.get(GANG)
    name = pod_group_name(pi.pod)
    if not isinstance(gang, GangScheduling) or name is None:
        return None
    pg = gang.pod_group(pi.namespace, name)
    return (gang, pg) if pg is not None else None


def schedule_one_pod_group(loop: SchedulingLoop, fw: Framework, qpi: QueuedPodInfo, gang: GangScheduling,
                           pod_group: Obj) -> None:
    """``scheduleOnePodGroup`` for the group of the popped ``qpi``."""
    from py_scheduler.app.loop import RESULT_ERROR, RESULT_SCHEDULED, RESULT_UNSCHEDULABLE

    start = time.perf_counter()
    pi = qpi.pod_info
    ns, name = pi.namespace, pod_group_name(pi.pod) or ""

    def member(q: QueuedPodInfo) -> bool:
        p = q.pod_info
        return (p.namespace == ns and pod_group_name(p.pod) == name and p.scheduler_name == pi.scheduler_name
                and q.parse_error is None and not (p.pod.get("metadata") or {}).get("deletionTimestamp")
                and not loop.cache.is_assumed_pod(p))

    queued = [qpi, *loop.queue.pop_members(member)]
    by_uid = {q.uid: q for q in queued}
    for q in queued:
        q.unschedulable_plugins = frozenset()
        q.pending_plugins = frozenset()
    log.debug("Attempting to schedule pod group podGroup=%s/%s pods=%d", ns, name, len(queued))
    try:
        loop.cache.update_snapshot(loop.snapshot)
    except CacheError as exc:
        for q in queued:
            loop._record(fw, q, RESULT_ERROR, start, message=str(exc))
            loop._failure(fw, q, POD_REASON_SCHEDULER_ERROR, str(exc), start, RESULT_ERROR, nominated="")
        gang.write_condition(ns, name, "False", "SchedulerError", str(exc))
        _observe(fw, RESULT_ERROR, start)
        return

    assumed: dict[str, PodInfo] = {}
    undo: dict[str, Callable[[], None]] = {}  # uid -> revert, for the members assumed at this moment

    def assume(p: PodInfo, node: str, state: CycleState) -> tuple[Status, Any]:
        """``assumeAndReserveWithRevert`` with the loop's Reserve-then-assume order. A cache that
        fails (assume, or the snapshot update after it) is this member's Error, with its Reserve and
        assumption undone."""
        st = loop._reserve(fw, state, p, node)
        if not st.is_success():
            return st, None
        try:
            nominated = loop.queue.nominated_node_of(p.uid)
            a = loop._assumed_pod_info(p, node, state.pod_annotations)
            loop.cache.assume_pod(a)
        except Exception as exc:
            loop._unreserve(fw, state, p, node)
            if isinstance(exc, CacheError):
                return Status.error(str(exc)), None
            raise
        assumed[p.uid] = a

        def revert() -> None:
            assumed.pop(p.uid, None)
            undo.pop(p.uid, None)
            loop._unreserve_and_forget(fw, state, a, node)
            if nominated:
                loop.queue.add_nominated_pod(p, nominated)
            loop.cache.update_snapshot(loop.snapshot)

        undo[p.uid] = revert
        loop.queue.delete_nominated_pod_if_exists(a.pod)
        try:
            loop.cache.update_snapshot(loop.snapshot)  # the next member sees this one
        except CacheError as exc:
            with contextlib.suppress(CacheError):  # the snapshot is rebuilt at the next update
                revert()
            return Status.error(str(exc)), None
        return Status.success(), revert

    group = PodGroupInfo(pod_group, [q.pod_info for q in queued])
    try:
        result, _reverts = schedule_pod_group(fw, loop.algorithm, loop.snapshot, group, assume,
                                              nominator=loop.queue.nominator, cycle=loop.queue.scheduling_cycle)
    except Exception as exc:  # a bug: no member may stay assumed nor out of the queue
        log.exception("Error scheduling pod group podGroup=%s/%s", ns, name)
        for fn in reversed(list(undo.values())):
            try:
                fn()
            except Exception:
                log.exception("reverting a pod group member's assumption failed")
        message = f"{type(exc).__name__}: {exc}"
        for q in queued:
            loop._record(fw, q, RESULT_ERROR, start, message=message)
            loop._failure(fw, q, POD_REASON_SCHEDULER_ERROR, message, start, RESULT_ERROR, nominated="")
        gang.write_condition(ns, name, "False", "SchedulerError", message)
        _observe(fw, RESULT_ERROR, start)
        return
    finally:
        m.PODGROUP_SCHEDULING_ALGORITHM_DURATION.observe(time.perf_counter() - start)

    if result.status.is_success():
        for mr in result.members:
            q = by_uid[mr.pod.uid]
            if mr.status.is_success():
                a = assumed[mr.pod.uid]
                _settle(loop, fw, q, start, partial(_to_binding, loop, fw, q, mr, a, start, RESULT_SCHEDULED), mr, a)
            else:
                _settle(loop, fw, q, start,
                        partial(_member_failed, loop, fw, q, mr, start, None, RESULT_UNSCHEDULABLE, RESULT_ERROR))
        if klog_v(2):
            log.info("Successfully scheduled a pod group podGroup=%s/%s scheduledPods=%d", ns, name,
                     sum(1 for mr in result.members if mr.status.is_success()))
        gang.write_condition(ns, name, "True", "Scheduled", result.status.message())
        _observe(fw, RESULT_SCHEDULED, start)
        return
    if result.status.is_rejected():
        rejectors = {GANG}
        if result.status.plugin:  # e.g. the PlacementGenerate plugin that found no placement
            rejectors.add(result.status.plugin)
        for mr in result.members:
            rejectors |= _own_rejectors(mr)
        message = result.status.message()
        for mr in result.members:
            q = by_uid[mr.pod.uid]
            if mr.evaluated and not mr.status.is_success():
                _settle(loop, fw, q, start, partial(_member_failed, loop, fw, q, mr, start, frozenset(rejectors),
                                                    RESULT_UNSCHEDULABLE, RESULT_ERROR))
                continue
            # The member fit (and was reverted): the group's message after errPodGroupUnschedulable; not
            # tried: the group's status as is (completePodGroupAlgorithmResult). Nomination cleared.
            msg = f"{MSG_POD_GROUP_UNSCHEDULABLE}, {message}" if mr.evaluated else message
            q.unschedulable_plugins = frozenset(rejectors)
            _settle(loop, fw, q, start, partial(_unschedulable, loop, fw, q, mr, msg, start, RESULT_UNSCHEDULABLE))
        if klog_v(2):
            log.info("Unable to schedule a pod group podGroup=%s/%s unschedulablePods=%d err=%s", ns, name,
                     len(result.members), message)
        gang.write_condition(ns, name, "False", "Unschedulable", message)
        _observe(fw, RESULT_UNSCHEDULABLE, start)
        return
    message = result.status.message()
    log.error("Error scheduling pod group podGroup=%s/%s errorPods=%d err=%s", ns, name, len(queued), message)
    for mr in result.members:
        q = by_uid[mr.pod.uid]
        msg = mr.status.message() if mr.status.code == Code.ERROR else message
        _settle(loop, fw, q, start, partial(_errored, loop, fw, q, mr, msg, start, RESULT_ERROR))
    gang.write_condition(ns, name, "False", "SchedulerError", message)
    _observe(fw, RESULT_ERROR, start)


def _unschedulable(loop: SchedulingLoop, fw: Framework, q: QueuedPodInfo, mr: MemberResult, msg: str,
                   start: float, result: str) -> None:
    """A member of a rejected group that fit (reverted) or was not tried: record, then requeue."""
    loop._record(fw, q, result, start, mr.result, msg, state=mr.state)
    loop._failure(fw, q, POD_REASON_UNSCHEDULABLE, msg, start, result, nominated="")


def _errored(loop: SchedulingLoop, fw: Framework, q: QueuedPodInfo, mr: MemberResult, msg: str,
             start: float, result: str) -> None:
    """A member of a group whose cycle ended in an Error: record, then requeue (error backoff)."""
    loop._record(fw, q, result, start, mr.result, msg, state=mr.state)
    loop._failure(fw, q, POD_REASON_SCHEDULER_ERROR, msg, start, result, nominated="")


def _settle(loop: SchedulingLoop, fw: Framework, q: QueuedPodInfo, start: float, submit: Callable[[], None],
            mr: MemberResult | None = None, assumed: PodInfo | None = None) -> None:
    """Submit one popped member's result (``submit``: its binding cycle, or its failure); a bug
    raised there must not lose it nor the members after it. An assumed member not yet handed to its
    binding cycle (still assumed in the cache; spawning its binding cycle is ``_to_binding``'s last
    step) is taken out of the waiting Pods, unreserved and forgotten; then the member is requeued
    with the error as after an internal error (``SchedulingLoop._failure``, else
    ``_requeue_after_bug`` when that raises too). Never raises."""
    from py_scheduler.app.loop import RESULT_ERROR

    try:
        submit()
        return
    except Exception as exc:
        log.exception("submitting the result of pod group member %s failed", q.key)
        message = f"{type(exc).__name__}: {exc}"
    if assumed is not None and mr is not None and loop.cache.is_assumed_pod(assumed):  # not handed on
        try:
            if fw.waiting_pods.get(assumed.uid) is not None:
                fw.waiting_pods.remove(assumed.uid)
            state = mr.state if mr.state is not None else CycleState(loop.snapshot)
            loop._unreserve_and_forget(fw, state, assumed, mr.node)
        except Exception:
            log.exception("undoing the assumption of pod group member %s failed", q.key)
    try:
        q.unschedulable_plugins = frozenset()
        q.pending_plugins = frozenset()
        loop._failure(fw, q, POD_REASON_SCHEDULER_ERROR, message, start, RESULT_ERROR, nominated="")
    except Exception:
        log.exception("requeueing pod group member %s failed", q.key)
        loop._requeue_after_bug(q)


def _observe(fw: Framework, result: str, start: float) -> None:
    """``PodGroupScheduled`` / ``PodGroupUnschedulable`` / ``PodGroupScheduleError``."""
    m.PODGROUP_SCHEDULE_ATTEMPTS.labels(result, fw.profile_name).inc()
    m.PODGROUP_SCHEDULING_ATTEMPT_DURATION.labels(result, fw.profile_name).observe(time.perf_counter() - start)


def _own_rejectors(mr: MemberResult) -> set[str]:
    """The plugins that rejected this member (FitError diagnosis, or the Reserve plugin)."""
    if mr.status.is_success() or not mr.evaluated:
        return set()
    if mr.result is not None and mr.result.selected is None and mr.result.diagnosis is not None:
        d = mr.result.diagnosis
        return set(d.unschedulable_plugins) | set(d.pending_plugins)
    return {mr.status.plugin} if mr.status.plugin else set()


def _member_failed(loop: SchedulingLoop, fw: Framework, q: QueuedPodInfo, mr: MemberResult, start: float,
                   rejectors: frozenset[str] | None, unschedulable: str, error: str) -> None:
    """A member that was not placed for a reason of its own: its FitError (or the Reserve rejection
    on its node, or its error), as the single-Pod cycle reports it."""
    st = mr.status
    if st.code == Code.ERROR:
        loop._record(fw, q, error, start, mr.result, st.message(), state=mr.state)
        loop._failure(fw, q, POD_REASON_SCHEDULER_ERROR, st.message(), start, error, nominated="")
        return
    own = _own_rejectors(mr)
    q.unschedulable_plugins = rejectors if rejectors is not None else frozenset(own)
    if mr.result is not None and mr.result.selected is None:
        d = mr.result.diagnosis
        if d is not None:
            q.pending_plugins = frozenset(d.pending_plugins)
        message = st.message()
        nominated = None
    else:  # a Reserve rejection: a FitError on the one node tried
        d = Diagnosis(node_to_status={mr.result.selected if mr.result and mr.result.selected else "": st})
        d.add_plugin_status(st)
        message = fit_error_message(1, d)
        nominated = ""
    loop._record(fw, q, unschedulable, start, mr.result, message, state=mr.state)
    loop._failure(fw, q, POD_REASON_UNSCHEDULABLE, message, start, unschedulable, nominated=nominated)


def _to_binding(loop: SchedulingLoop, fw: Framework, q: QueuedPodInfo, mr: MemberResult, assumed: PodInfo,
                start: float, scheduled: str) -> None:
    """A placed member of a feasible group: Permit (the group's quorum is assumed, so GangScheduling
    allows it), then its binding cycle, as the single-Pod cycle does."""
    state = mr.state if mr.state is not None else CycleState(loop.snapshot)
    state.data.pop(POD_GROUP_CYCLE_KEY, None)  # SetPodGroupSchedulingCycle(nil) before binding
    node = mr.node
    st, waits = bc.run_permit(fw, state, assumed, node)
    if st.code == Code.WAIT:
        bc.add_waiting_pod(fw, assumed, waits)
    elif not st.is_success():
        loop._unreserve_and_forget(fw, state, assumed, node)
        loop._cycle_failure(fw, q, st, node, start, mr.result, state)
        return
    res = mr.result
    loop._record(fw, q, scheduled, start, res, None, state.pod_annotations, state)
    loop._spawn(loop._binding_cycle(fw, q, assumed, node, state, start, res.nodes_evaluated if res else 0,
                                    len(res.feasible) if res else 0))
