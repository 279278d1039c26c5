"""One pod group cycle (feature gate ``GenericWorkload``): a gang scheduled as one entity, for every caller.

Upstream (kube-scheduler v1.37.2): ``pkg/scheduler/schedule_one_podgroup.go`` -- ``scheduleOnePodGroup``
(snapshot, then the group algorithm, :func:`~py_scheduler.framework.podgroup.schedule_pod_group`, with
:func:`~py_scheduler.core.cycle.reserve_and_assume` as its ``assumeAndReserveWithRevert``) and
``submitPodGroupAlgorithmResult``'s verdict per member: Success -- every placed member goes on to
Permit and its binding cycle (the caller's); Unschedulable -- every member back to the queue with its
own FitError, or the group's message (led by ``pod group is unschedulable`` for a member that fit and
was reverted) and its nomination cleared; Error -- SchedulerError for all.

Requeueing together: every member of a group that could not be placed gets the same rejector plugins
(the union of the members' own rejectors, plus GangScheduling). Upstream requeues the group entity itself
(``AddAttemptedPodGroupIfNeeded``: after its backoff, or at once when the group was placed, whatever the
events); py-scheduler keeps per-Pod queue entries and requeues each member so
(``PriorityQueue.add_attempted_group_member``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from py_scheduler.cache.cache import CacheError
from py_scheduler.cache.snapshot import Snapshot
from py_scheduler.core.cycle import ERROR, SCHEDULED, UNSCHEDULABLE, PodCycle, bug, rejection, reserve_and_assume
from py_scheduler.core.ports import ClusterState, Nominations, PodGroupSource, SnapshotState
from py_scheduler.framework.algorithm import Algorithm
from py_scheduler.framework.interfaces import PodGroupInfo, ProposedAssignment
from py_scheduler.framework.objects import Obj
from py_scheduler.framework.podgroup import (
    MSG_POD_GROUP_UNSCHEDULABLE,
    POD_GROUP_CYCLE_KEY,
    MemberResult,
    PodGroupResult,
    pod_group_priority,
    schedule_pod_group,
)
from py_scheduler.framework.podgroup import pod_group_name as pod_group_name
from py_scheduler.framework.runtime import Framework
from py_scheduler.framework.types import Code, CycleState, PodInfo, Status

log = logging.getLogger("py_scheduler.core")


def pod_group_of(fw: Framework, pod: Obj) -> tuple[PodGroupSource, Obj] | None:
    """(the profile's GangScheduling, the Pod's PodGroup object) when ``pod`` is scheduled by the pod
    group cycle: the profile has GangScheduling (``GenericWorkload`` on) and the PodGroup exists."""
    name = pod_group_name(pod)
    gang = None if name is None else next((p for p in fw.plugins.values() if isinstance(p, PodGroupSource)), None)
    if name is None or gang is None:
        return None
    pg = gang.pod_group(str((pod.get("metadata") or {}).get("namespace") or "default"), name)
    return (gang, pg) if pg is not None else None


def validate_pod_group(gang: PodGroupSource, pod_group: Obj, members: list[PodInfo]) -> str | None:
    """``validatePodGroup`` (``PodGroupPreemptionPolicy`` off, its default in v1.37): the error text
    when the queued members, then the group's scheduled ones, do not all share the first member's
    scheduler name and preemption policy and the PodGroup's priority (``spec.priority``, 0 when
    unset: ``util.PodGroupPriority``); None when they do. The whole group then fails with it
    (``handlePodGroupFailureBeforeScheduling``: SchedulerError for each member and the group)."""
    group_priority = pod_group_priority(pod_group)
    scheduler_name = members[0].scheduler_name if members else ""
    policy = ""

    def check(pod: Obj) -> str | None:
        nonlocal policy
        spec = pod.get("spec") or {}
        name = str(spec.get("schedulerName") or "default-scheduler")  # the API server's default
        if name != scheduler_name:
            # %q of DNS-1123 subdomains (the API server's validation of the field): plain double quotes
            return (f"all pods in a single pod group should have the same .spec.schedulerName set, got: "
                    f'"{name}" and "{scheduler_name}"')
        prio = spec.get("priority")
        prio = prio if isinstance(prio, int) and not isinstance(prio, bool) else 0
        if prio != group_priority:
            return (f"all pods in a single pod group should have the same priority as the pod group's priority, "
                    f"got {prio} and {group_priority}")
        own = str(spec.get("preemptionPolicy") or "PreemptLowerPriority")
        if not policy:
            policy = own
        elif own != policy:
            return f"all pods in a single pod group should have the same preemption policy, got {own} and {policy}"
        return None

    meta = pod_group.get("metadata") or {}
    scheduled = gang.scheduled_pods(str(meta.get("namespace") or "default"), str(meta.get("name") or ""))
    for pod in [m.pod for m in members] + scheduled:
        err = check(pod)
        if err is not None:
            return err
    return None


@dataclass(slots=True)
class GroupCycle:
    """A pod group cycle's verdict: the group's outcome and message (``PodGroupInitiallyScheduled``),
    one :class:`PodCycle` per member, in member order, and the victims its preemption evicts."""

    outcome: str
    message: str
    members: list[PodCycle] = field(default_factory=list)
    algorithm_seconds: float = 0.0
    victims: list[PodInfo] = field(default_factory=list)
    """Pods to evict for the group (PodGroupPostFilter's preemption); the members wait on it."""
    num_pdb_violations: int = 0
    num_pod_group_disruptions: int = 0
    """For the preemption metrics: the budgets ``victims`` violate, the victims that are PodGroups."""


def schedule_group(fw: Framework, algorithm: Algorithm, cluster: ClusterState, pod_group: Obj,
                   members: list[PodInfo], *, nominations: Nominations | None = None,
                   cycle: int | None = None, explain: bool = False) -> GroupCycle:
    """``scheduleOnePodGroup`` for ``members`` (the queued members, in order). Placed members stay
    assumed (``PodCycle.assumed``, their CycleState out of the group cycle); nothing else stays
    reserved nor assumed. Never raises: a bug is the whole group's Error."""
    try:
        cluster.refresh()
    except CacheError as exc:
        return GroupCycle(ERROR, str(exc), [PodCycle(ERROR, message=str(exc)) for _ in members])
    gang = next((p for p in fw.plugins.values() if isinstance(p, PodGroupSource)), None)
    invalid = None if gang is None else validate_pod_group(gang, pod_group, members)
    if invalid is not None:
        return GroupCycle(ERROR, invalid, [PodCycle(ERROR, message=invalid, nominated="") for _ in members])
    assumed: dict[str, PodInfo] = {}
    undo: dict[str, Callable[[], None]] = {}  # uid -> revert, for the members assumed at this moment

    def assume(p: PodInfo, node: str, state: CycleState) -> tuple[Status, Callable[[], None] | None]:
        a = reserve_and_assume(fw, state, p, node, cluster, nominations, refresh=True)
        if a.pod is None or a.revert is None:
            return a.status, None
        assumed[p.uid] = a.pod
        inner = a.revert

        def revert() -> None:
            assumed.pop(p.uid, None)
            undo.pop(p.uid, None)
            inner()

        undo[p.uid] = revert
        return a.status, revert

    start = time.perf_counter()
    try:
        result, _reverts = schedule_pod_group(fw, algorithm, cluster.snapshot, PodGroupInfo(pod_group, members),
                                              assume, cycle=cycle, explain=explain)
    except Exception as exc:  # a bug: no member may stay assumed
        log.exception("Error scheduling pod group podGroup=%s/%s", (pod_group.get("metadata") or {}).get("namespace"),
                      (pod_group.get("metadata") or {}).get("name"))
        for fn in reversed(list(undo.values())):
            try:
                fn()
            except Exception:
                log.exception("reverting a pod group member's assumption failed")
        msg = bug(exc)
        return GroupCycle(ERROR, msg, [PodCycle(ERROR, message=msg) for _ in members], time.perf_counter() - start)
    seconds = time.perf_counter() - start
    message = result.status.message()
    if result.status.is_success():
        out = []
        for mr in result.members:
            if not mr.status.is_success():
                out.append(_member_failed(mr, None))
                continue
            state = mr.state if mr.state is not None else CycleState(cluster.snapshot)
            state.data.pop(POD_GROUP_CYCLE_KEY, None)  # SetPodGroupSchedulingCycle(nil) before Permit
            out.append(PodCycle(SCHEDULED, mr.result, state=state, node=mr.node, assumed=assumed[mr.pod.uid]))
        return GroupCycle(SCHEDULED, message, out, seconds)
    if result.status.is_rejected():
        return _rejected(fw, algorithm, cluster, pod_group, members, result, nominations, cycle, seconds)
    log.error("Error scheduling pod group podGroup=%s/%s errorPods=%d err=%s",
              (pod_group.get("metadata") or {}).get("namespace"), (pod_group.get("metadata") or {}).get("name"),
              len(members), message)
    return GroupCycle(ERROR, message, [PodCycle(ERROR, mr.result, mr.status.message() if mr.status.code == Code.ERROR
                                                else message, mr.state) for mr in result.members], seconds)


def _rejected(fw: Framework, algorithm: Algorithm, cluster: ClusterState, pod_group: Obj, members: list[PodInfo],
              result: PodGroupResult, nominations: Nominations | None, cycle: int | None,
              seconds: float) -> GroupCycle:
    """``podGroupCycle`` after a rejection: PodGroupPostFilter (Unschedulable only) on a
    :class:`GroupDryRun`, ``applyPodGroupPostFilterResult`` (its outcome appended to the group's
    status; a Success nominates the members and leaves them waiting on preemption) and
    ``submitPodGroupAlgorithmResult``'s verdict for each member. Every member of the group gets the
    same rejector plugins (the union of the members' own, plus GangScheduling)."""
    message = result.status.message()
    rejectors = {p.name for p in fw.plugins.values() if isinstance(p, PodGroupSource)}  # GangScheduling
    if result.status.plugin:  # e.g. the PlacementGenerate plugin that found no placement
        rejectors.add(result.status.plugin)
    for mr in result.members:
        rejectors |= _own_rejectors(mr)
    group = PodGroupInfo(pod_group, members)
    post = None
    if result.status.code == Code.UNSCHEDULABLE:
        try:
            post = fw.run_pod_group_post_filter(CycleState(cluster.snapshot), group,
                                                GroupDryRun(fw, algorithm, cluster.snapshot, group, nominations, cycle))
        except Exception as exc:  # a bug: the group's Error, as a plugin's failure would be
            log.exception("PodGroupPostFilter failed podGroup=%s/%s", group.namespace, group.name)
            post = None, Status(Code.ERROR, [f"running PodGroupPostFilter: {bug(exc)}"])
    res, st = post if post is not None else (None, None)
    if st is not None and st.code == Code.ERROR:
        return GroupCycle(ERROR, st.message(), [PodCycle(ERROR, mr.result, st.message(), mr.state, nominated="")
                                                for mr in result.members], seconds)
    waiting = st is not None and st.is_success()
    whole = message if st is None else f"{message}, {st.message()}"  # AppendReason(status.String())
    noms = res.nominations if waiting and res is not None else {}
    out = []
    for mr in result.members:
        nominated = noms.get(mr.pod.key)
        c: PodCycle
        if mr.evaluated and not mr.status.is_success():
            c = _member_failed(mr, frozenset(rejectors))
            if nominated is not None:
                c.nominated = nominated
        elif mr.evaluated:
            # The member fit (and was reverted). Waiting on preemption: the group's status as is and the
            # nomination; otherwise the group's status after errPodGroupUnschedulable, nomination cleared.
            msg = whole if waiting else f"{MSG_POD_GROUP_UNSCHEDULABLE}, {whole}"
            c = PodCycle(UNSCHEDULABLE, mr.result, msg, mr.state, rejectors=frozenset(rejectors),
                         nominated=nominated if waiting else "")
        else:
            # Not tried: the group's status as cloned before PodGroupPostFilter
            # (completePodGroupAlgorithmResult), the nomination kept unless the preemption gives one.
            c = PodCycle(UNSCHEDULABLE, mr.result, message, mr.state, rejectors=frozenset(rejectors),
                         nominated=nominated)
        out.append(c)
    if not waiting or res is None:
        return GroupCycle(UNSCHEDULABLE, whole, out, seconds)
    return GroupCycle(UNSCHEDULABLE, whole, out, seconds, res.victims, res.num_pdb_violations,
                      res.num_pod_group_disruptions)


class GroupDryRun:
    """:class:`~py_scheduler.framework.interfaces.PodGroupDryRun` on a copy of the cycle's Snapshot
    (made on first use): Pods leave and come back on the copy; :meth:`schedule` reruns the pod group
    algorithm there, each member Reserved and assumed in the copy, all reverted before it returns
    (``runRootSchedulingAlgorithm``'s deferred revert). The live cache is never touched."""

    def __init__(self, fw: Framework, algorithm: Algorithm, base: Snapshot, group: PodGroupInfo,
                 nominations: Nominations | None, cycle: int | None) -> None:
        self._fw, self._algorithm, self._base, self._group = fw, algorithm, base, group
        self._nominations, self._cycle = nominations, cycle
        self._copy: Snapshot | None = None

    @property
    def snapshot(self) -> Snapshot:
        """The copy (``MutableSnapshotSharedLister`` after ``StartMutations``)."""
        if self._copy is None:
            self._copy = self._base.mutable_copy()
        return self._copy

    def remove_pod(self, pod: PodInfo) -> None:
        """``RemovePod`` from the copy."""
        self.snapshot.forget(pod)

    def add_pod(self, pod: PodInfo) -> None:
        """``AddPod`` on the copy (the Pod's own node)."""
        self.snapshot.assume(pod, pod.node_name or "")

    def schedule(self) -> tuple[list[ProposedAssignment], Status]:
        """``PodGroupSchedulingFunc``: the group algorithm on the copy; every member it assumed is
        reverted before returning (Unreserve, forgotten, its nomination given back)."""
        state = SnapshotState(self.snapshot)
        fw = self._fw
        undo: dict[str, Callable[[], None]] = {}

        def assume(p: PodInfo, node: str, st: CycleState) -> tuple[Status, Callable[[], None] | None]:
            a = reserve_and_assume(fw, st, p, node, state, self._nominations, refresh=True)
            if a.revert is None:
                return a.status, None
            inner = a.revert

            def revert() -> None:
                if undo.pop(p.uid, None) is not None:
                    inner()

            undo[p.uid] = inner
            return a.status, revert

        try:
            result, _ = schedule_pod_group(fw, self._algorithm, state.snapshot, self._group, assume, cycle=self._cycle)
        finally:
            for fn in reversed(list(undo.values())):
                fn()
            undo.clear()
        placed = [ProposedAssignment(mr.pod, mr.node, mr.state) for mr in result.members
                  if mr.status.is_success() and mr.node and mr.state is not None]
        return placed, result.status

    def assume(self, assignment: ProposedAssignment) -> Callable[[], None]:
        """``AddPod`` + Reserve (its status not read) of a placed member; the undo is Unreserve +
        ``RemovePod``."""
        snap = self.snapshot
        snap.assume(assignment.pod, assignment.node_name)
        bound = next(p for p in snap.node_info_map[assignment.node_name].pods if p.uid == assignment.pod.uid)
        try:
            self._fw.run_reserve(assignment.state, assignment.pod, assignment.node_name)
        except Exception:  # its status is not read either: the undo's Unreserve cleans up after it
            log.exception("Reserve raised in a preemption dry run pod=%s", assignment.pod.key)

        def undo() -> None:
            try:
                self._fw.run_unreserve(assignment.state, assignment.pod, assignment.node_name)
            finally:
                snap.forget(bound)

        return undo


def _own_rejectors(mr: MemberResult) -> set[str]:
    """The plugins that rejected this member (FitError diagnosis, or the Reserve plugin)."""
    if mr.status.is_success() or not mr.evaluated:
        return set()
    if mr.result is not None and mr.result.selected is None and mr.result.diagnosis is not None:
        d = mr.result.diagnosis
        return set(d.unschedulable_plugins) | set(d.pending_plugins)
    return {mr.status.plugin} if mr.status.plugin else set()


def _member_failed(mr: MemberResult, rejectors: frozenset[str] | None) -> PodCycle:
    """A member not placed for a reason of its own: its FitError (or the Reserve rejection on its
    node, a FitError on that one node, or its error), as the single-Pod cycle reports it."""
    st = mr.status
    if st.code == Code.ERROR:
        return PodCycle(ERROR, mr.result, st.message(), mr.state)
    own = frozenset(_own_rejectors(mr))
    out = PodCycle(UNSCHEDULABLE, mr.result, st.message(), mr.state, rejectors=own if rejectors is None else rejectors)
    if mr.result is not None and mr.result.selected is None:
        d = mr.result.diagnosis
        out.pending = frozenset(d.pending_plugins) if d is not None else frozenset()
        out.nominated = None
        return out
    node = mr.result.selected if mr.result is not None and mr.result.selected else ""
    rej = rejection(st, node, PodCycle(UNSCHEDULABLE))
    out.message = rej.message
    return out
