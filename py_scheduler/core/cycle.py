"""One Pod's scheduling cycle and the Reserve -> assume -> revert step, for every caller.

Upstream (kube-scheduler v1.37.2): ``pkg/scheduler/schedule_one.go`` -- ``schedulingCycle``
(``UpdateSnapshot``, ``SchedulePod``, a FitError with PostFilter's nomination, Reserve, ``assume``; a
Reserve failure runs Unreserve and is a FitError on the one node tried) -- and
``schedule_one_podgroup.go``'s ``assumeAndReserveWithRevert`` / ``unreserveAndForget`` (the revert
gives the member's nomination back). Permit and the binding cycle are the caller's: the live loop
writes, the offline engine runs PreBind in memory.

By design of this build Reserve runs *before* the Pod is assumed, so the annotations Reserve plugins
ask for (``CycleState.pod_annotations``, e.g. GPU indices) are on the assumed Pod the cache accounts.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from py_scheduler.cache.cache import CacheError
from py_scheduler.core.ports import ClusterState, Nominations
from py_scheduler.framework.algorithm import Algorithm, Diagnosis, ScheduleResult, fit_error_message
from py_scheduler.framework.errors import PodParseError
from py_scheduler.framework.runtime import Framework, SchedulingError
from py_scheduler.framework.types import CycleState, PodInfo, Status

log = logging.getLogger("py_scheduler.core")

SCHEDULED = "scheduled"
UNSCHEDULABLE = "unschedulable"
ERROR = "error"
"""A cycle's outcome (``schedule_attempts_total{result}``)."""


@dataclass(slots=True)
class PodCycle:
    """What one scheduling cycle (or one member's part of a pod group cycle) decided.

    Attributes:
        outcome: :data:`SCHEDULED` (``assumed`` on ``node``; Permit and binding are the caller's),
            :data:`UNSCHEDULABLE` or :data:`ERROR`.
        result: the algorithm's result (None when it did not run or raised).
        message: the FailedScheduling message ("" when scheduled).
        state: the CycleState, when the algorithm ran.
        rejectors, pending: the plugins the queue's hints consult (``UnschedulablePlugins``,
            ``PendingPlugins``).
        nominated: the NominatingInfo -- None keeps the Pod's nomination, "" clears it, a name sets it.
        algorithm_seconds: time spent in ``SchedulePod`` (``scheduling_algorithm_duration_seconds``).
    """

    outcome: str
    result: ScheduleResult | None = None
    message: str = ""
    state: CycleState | None = None
    node: str = ""
    assumed: PodInfo | None = None
    rejectors: frozenset[str] = frozenset()
    pending: frozenset[str] = frozenset()
    nominated: str | None = ""
    algorithm_seconds: float = 0.0


def bug(exc: BaseException) -> str:
    """An unexpected exception as a one-line message: ``<Type>: <message>``."""
    return " ".join(f"{type(exc).__name__}: {exc}".split())


def rejection(st: Status, node: str, cycle: PodCycle) -> PodCycle:
    """A Reserve or Permit failure on ``node``: a rejection is a FitError on the one node tried
    (``0/1 nodes are available: <reason>.``, its plugin the rejector), anything else an Error."""
    cycle.node, cycle.assumed = "", None
    if not st.is_rejected():
        cycle.outcome, cycle.message, cycle.rejectors, cycle.pending = ERROR, st.message(), frozenset(), frozenset()
        return cycle
    d = Diagnosis(node_to_status={node: st})
    d.add_plugin_status(st)
    cycle.outcome, cycle.message = UNSCHEDULABLE, fit_error_message(1, d)
    cycle.rejectors, cycle.pending = frozenset(d.unschedulable_plugins), frozenset(d.pending_plugins)
    return cycle


def assumed_pod(pi: PodInfo, node: str, annotations: Mapping[str, str]) -> PodInfo:
    """``pi`` bound to ``node`` with the Reserve ``annotations`` (not parsed again)."""
    pod = copy.copy(pi.pod)
    pod["spec"] = {**(pi.pod.get("spec") or {}), "nodeName": node}
    if annotations:
        meta = dict(pi.pod.get("metadata") or {})
        meta["annotations"] = {**(meta.get("annotations") or {}), **annotations}
        pod["metadata"] = meta
    return pi.derive(pod)


def reserve(fw: Framework, state: CycleState, pi: PodInfo, node: str) -> Status:
    """Reserve ``pi`` on ``node``; a plugin that raises is an Error status. On any failure the Pod's
    reservations are undone (Unreserve, every plugin, in reverse order) before returning."""
    try:
        st = fw.run_reserve(state, pi, node)
    except PodParseError as exc:
        st = Status.error(str(exc))
    except Exception as exc:
        log.exception("Reserve failed for pod %s", pi.key)
        st = Status.error(bug(exc))
    if not st.is_success():
        fw.run_unreserve(state, pi, node)
    return st


def unreserve_and_forget(fw: Framework, state: CycleState, assumed: PodInfo, cluster: ClusterState) -> bool:
    """``unreserveAndForget``: Unreserve, then drop the assumed Pod (False: the state refused)."""
    fw.run_unreserve(state, assumed, assumed.node_name or "")
    return cluster.forget(assumed)


@dataclass(slots=True)
class Assumption:
    """:func:`reserve_and_assume`'s result: on success the assumed Pod and its revert."""

    status: Status
    pod: PodInfo | None = None
    revert: Callable[[], None] | None = None


def reserve_and_assume(fw: Framework, state: CycleState, pi: PodInfo, node: str, cluster: ClusterState,
                       nominations: Nominations | None = None, *, refresh: bool = False) -> Assumption:
    """Reserve, then assume ``pi`` on ``node`` (the one copy of this step). A failure of either leaves
    nothing reserved nor assumed; an assumed Pod leaves the nominator (``DeleteNominatedPodIfExists``).
    ``refresh``: bring the snapshot up to date at once (a pod group's next member must see this one).
    The revert (``unreserveAndForget``, the nomination given back, the snapshot refreshed) is for a
    pod group cycle; a single Pod's failure after this step calls :func:`unreserve_and_forget`."""
    st = reserve(fw, state, pi, node)
    if not st.is_success():
        return Assumption(st)
    a = assumed_pod(pi, node, state.pod_annotations)
    nominated = nominations.nominated_node_of(pi.uid) if nominations is not None else None
    try:
        cluster.assume(a)
    except Exception as exc:
        if not isinstance(exc, CacheError):
            log.exception("assuming pod %s failed", pi.key)
            cluster.forget(a)  # a partial assumption
        fw.run_unreserve(state, pi, node)
        return Assumption(Status.error(str(exc) if isinstance(exc, CacheError) else f"assuming the Pod: {bug(exc)}"))

    def revert() -> None:
        unreserve_and_forget(fw, state, a, cluster)
        if nominated and nominations is not None:
            nominations.add_nominated_pod(pi, nominated)
        cluster.refresh()

    try:
        if nominations is not None:
            nominations.delete_nominated_pod_if_exists(a.pod)
        if refresh:
            cluster.refresh()
    except Exception as exc:  # nothing of this Pod may stay assumed; a bug goes on up
        with contextlib.suppress(CacheError):  # the snapshot is rebuilt at the next update
            revert()
        if isinstance(exc, CacheError):
            return Assumption(Status.error(str(exc)))
        raise
    return Assumption(Status.success(), a, revert)


def schedule_pod(fw: Framework, algorithm: Algorithm, cluster: ClusterState, pi: PodInfo, *,
                 nominations: Nominations | None = None, cycle: int | None = None,
                 explain: bool = False, assume: bool = True) -> PodCycle:
    """``schedulingCycle`` up to (not including) Permit: snapshot, algorithm (PostFilter on a
    FitError), then :func:`reserve_and_assume` on the selected node (unless ``assume`` is False).
    Never raises for a failing plugin: a bug is this Pod's Error, ``<Type>: <message>``."""
    try:
        cluster.refresh()
    except CacheError as exc:
        return PodCycle(ERROR, message=str(exc))
    start = time.perf_counter()
    try:
        result = algorithm.schedule(fw, cluster.snapshot, pi, cycle=cycle, explain=explain)
    except (SchedulingError, PodParseError) as exc:
        log.error("Error selecting node for pod pod=%s err=%s", pi.key, exc)
        return PodCycle(ERROR, message=str(exc), algorithm_seconds=time.perf_counter() - start)
    except Exception as exc:
        log.exception("Error selecting node for pod pod=%s", pi.key)
        return PodCycle(ERROR, message=bug(exc), algorithm_seconds=time.perf_counter() - start)
    seconds = time.perf_counter() - start
    node = result.selected
    if node is None:
        d = result.diagnosis or Diagnosis()
        pf = result.post_filter
        # PostFilter's NominatingInfo ("" clears an earlier nomination, a name sets it); no PostFilter: cleared.
        nominated = pf.nominated_node_name if pf is not None else ("" if not fw.post_filter_plugins else None)
        return PodCycle(UNSCHEDULABLE, result, result.message or "0/0 nodes are available", None,
                        rejectors=frozenset(d.unschedulable_plugins), pending=frozenset(d.pending_plugins),
                        nominated=nominated, algorithm_seconds=seconds)
    state = result.state if result.state is not None else CycleState(cluster.snapshot)
    out = PodCycle(SCHEDULED, result, state=state, node=node, algorithm_seconds=seconds)
    if not assume:
        return out
    a = reserve_and_assume(fw, state, pi, node, cluster, nominations)
    if not a.status.is_success():
        return rejection(a.status, node, out)
    out.assumed = a.pod
    return out
