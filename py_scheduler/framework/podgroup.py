"""The pod group scheduling algorithm: every queued member of a PodGroup placed against one snapshot.

Upstream (kube-scheduler v1.37.2): ``pkg/scheduler/schedule_one_podgroup.go`` --
``podGroupSchedulingDefaultAlgorithm`` (PlacementFeasible before the first member and after each one,
``Wait`` at the end turned into ``Unschedulable``), ``podGroupPodSchedulingAlgorithm`` (one member:
``schedulingAlgorithm`` without PostFilter, then ``assumeAndReserveWithRevert``), ``revertFns`` (undo
in LIFO order) and ``runRootSchedulingAlgorithm`` (a success must have placed at least one member).

This module is the pure part: it runs the profile's filter/score pipeline
(:meth:`~py_scheduler.framework.algorithm.Algorithm.schedule` with ``run_post_filter=False``, as upstream
skips PostFilter for a Pod in a pod group cycle) and the PlacementFeasible plugins. Assuming and
reserving a member (cache writes) is the caller's :data:`AssumeFn`, so the algorithm never touches the
cache nor the API. On any outcome but Success every member this call assumed is already reverted when
it returns (nothing held: node resources, GPU indices, DRA devices); on Success the caller owns the
returned :class:`RevertFns` (to undo them if it cannot go on) and moves the members to Permit.

With the ``TopologyAwareWorkloadScheduling`` gate on (read at each call, as upstream's
``podGroupSchedulingAlgorithm`` does) the group goes through ``podGroupSchedulingPlacementAlgorithm``
(:func:`_schedule_placements`): the first PlacementGenerate plugin splits the snapshot's nodes into
placements (none: one placement of all nodes; an empty list: Unschedulable ``no feasible placements
found``), the default algorithm runs on each placement's nodes alone (``AssumePlacement``: the
members' node list is the placement; plugins still see the whole snapshot) and is reverted at once,
the feasible placements are scored by the PlacementScore plugins (``RunPlacementScorePlugins``:
score, normalize, check [0, 100], weight, sum) unless only one is feasible, the highest total wins
(ties: uniformly at random, upstream's ``Randomizer``; the algorithm's ``rng``), and the winner's
placed members are assumed again (``assumeSubtreeWithRevert``). No feasible placement: Unschedulable
``0/N placements are available, first placement status: ...`` with the first placement's members.

What py-scheduler does not reproduce: composite pod groups (``CompositePodGroup``) and upstream's "revert
all, then assume again in ``submitPodGroupAlgorithmResult``"
(the assumptions of a feasible group are kept; the outcome is the same as nothing happens in between).

Caller: the core's pod group cycle (:mod:`py_scheduler.core.group_cycle`), driven by the live loop and by
``explain`` / ``simulate``; ``explain --pod`` keeps the single-Pod cycle (the parity oracle's unit).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from py_scheduler.framework.algorithm import Algorithm, ScheduleResult
from py_scheduler.framework.interfaces import (
    Placement,
    PlacementFeasiblePlugin,
    PlacementGeneratePlugin,
    PlacementProgress,
    PlacementScore,
    PlacementScoreExtensions,
    PlacementScorePlugin,
    PodGroupAssignments,
    PodGroupInfo,
)
from py_scheduler.framework.lister import SnapshotLister
from py_scheduler.framework.runtime import Framework, SchedulingError
from py_scheduler.framework.types import MAX_NODE_SCORE, Code, CycleState, NodeInfo, PodInfo, Status

log = logging.getLogger("py_scheduler.framework.podgroup")

POD_GROUP_CYCLE_KEY = "PodGroupSchedulingCycle"
"""CycleState key set (to the group's ``namespace/name``) while a member is evaluated in a pod group
cycle (upstream ``CycleState.IsPodGroupSchedulingCycle``); removed before Permit."""

MSG_POD_GROUP_UNSCHEDULABLE = "pod group is unschedulable"
"""``errPodGroupUnschedulable``."""

AssumeFn = Callable[[PodInfo, str, CycleState], tuple[Status, Callable[[], None] | None]]
"""``assumeAndReserveWithRevert``: (member, node, its CycleState) -> (Status, revert or None). On
success the member is accounted on the node (cache and the snapshot the next member sees)."""


class RevertFns:
    """``revertFns``: undo functions run last-in first-out, at most once."""

    def __init__(self) -> None:
        self._fns: list[Callable[[], None]] = []

    def append(self, fn: Callable[[], None]) -> None:
        self._fns.append(fn)

    def __len__(self) -> int:
        return len(self._fns)

    def revert(self) -> None:
        """Run every function (newest first); a failing one is logged and the others still run."""
        fns, self._fns = self._fns, []
        for fn in reversed(fns):
            try:
                fn()
            except Exception:
                log.exception("reverting a pod group member's assumption failed")


@dataclass(slots=True)
class MemberResult:
    """One member's attempt: ``status`` Success (assumed on ``node``), a rejection (``result`` holds the
    FitError diagnosis) or an error; ``state`` its CycleState. Members not evaluated (the loop stopped
    early) have ``evaluated`` False and an Unschedulable status."""

    pod: PodInfo
    status: Status
    node: str = ""
    result: ScheduleResult | None = None
    state: CycleState | None = None
    evaluated: bool = True


@dataclass(slots=True)
class PodGroupResult:
    """``podGroupAlgorithmResult``: the group's status (Success, Unschedulable or Error, with
    PlacementFeasible's message -- led by ``pod group is unschedulable`` when the group was refused
    before any member was tried, as upstream's ``WithError``) and one :class:`MemberResult` per
    member, in member order."""

    status: Status
    members: list[MemberResult] = field(default_factory=list)
    any_scheduled: bool = False


def pod_group_name(pod: dict[str, Any]) -> str | None:
    """``spec.schedulingGroup.podGroupName`` of a Pod object, or None (no group, or malformed)."""
    spec = pod.get("spec")
    sg = spec.get("schedulingGroup") if isinstance(spec, dict) else None
    name = sg.get("podGroupName") if isinstance(sg, dict) else None
    return name if isinstance(name, str) and name else None


def pod_group_priority(pod_group: dict[str, Any]) -> int:
    """``util.PodGroupPriority``: ``spec.priority`` (set by the API server's admission), 0 when unset."""
    raw = (pod_group.get("spec") or {}).get("priority")
    return raw if isinstance(raw, int) and not isinstance(raw, bool) else 0


def scheduled_members(nodes: Iterable[NodeInfo], namespace: str, name: str) -> list[tuple[PodInfo, NodeInfo]]:
    """Members of group ``namespace/name`` on these nodes (assumed or bound: the snapshot has both)."""
    out = []
    for ni in nodes:
        for p in ni.pods:
            if p.namespace == namespace and pod_group_name(p.pod) == name:
                out.append((p, ni))
    return out


def scheduled_members_count(snapshot: SnapshotLister, namespace: str, name: str) -> int:
    """Members of group ``namespace/name`` assumed or bound in ``snapshot`` (``ScheduledPodsCount``)."""
    n = 0
    for pi in snapshot.all_pods():
        if pi.namespace != namespace:
            continue
        sg = (pi.pod.get("spec") or {}).get("schedulingGroup")
        if isinstance(sg, dict) and sg.get("podGroupName") == name:
            n += 1
    return n


def _feasible(plugins: list[PlacementFeasiblePlugin], state: CycleState, group: PodGroupInfo,
              progress: PlacementProgress) -> Status:
    """``RunPlacementFeasiblePlugins``: the first non-Success status (an exception is an Error)."""
    for pl in plugins:
        try:
            st: Status = pl.placement_feasible(state, group, progress)
        except Exception as exc:
            log.exception("PlacementFeasible plugin %s failed", pl.name)
            return Status(Code.ERROR, [f"{type(exc).__name__}: {exc}"], pl.name)
        if not st.is_success():
            return st
    return Status.success()


def schedule_pod_group(fw: Framework, algorithm: Algorithm, snapshot: SnapshotLister, group: PodGroupInfo,
                       assume: AssumeFn, *, cycle: int | None = None,
                       explain: bool = False) -> tuple[PodGroupResult, RevertFns]:
    """``podGroupSchedulingAlgorithm`` over ``group.pods`` (the queued members, in order): the
    placement algorithm with ``TopologyAwareWorkloadScheduling`` on, else the default algorithm.

    ``snapshot`` must be up to date and must show each member :data:`AssumeFn` assumed before the next
    member is evaluated (and no longer once reverted). ``explain`` scores every feasible node (the
    offline tables). Returns the result and, on Success, the revert functions of the members assumed
    (empty otherwise: already reverted). Never raises for a member's failure (an exception in a plugin
    is that member's Error).
    """
    if fw.handle.feature_gates.topology_aware_workload_scheduling:
        return _schedule_placements(fw, algorithm, snapshot, group, assume, cycle, explain)
    return _schedule_default(fw, algorithm, snapshot, group, assume, cycle, explain, None)


def _schedule_default(fw: Framework, algorithm: Algorithm, snapshot: SnapshotLister, group: PodGroupInfo,
                      assume: AssumeFn, cycle: int | None, explain: bool,
                      placement: frozenset[str] | None) -> tuple[PodGroupResult, RevertFns]:
    """``podGroupSchedulingDefaultAlgorithm``; with ``placement`` (node names) each member is tried on
    those nodes of the snapshot alone."""
    plugins = [p for p in fw.plugins.values() if isinstance(p, PlacementFeasiblePlugin)]
    group_state = CycleState(snapshot)
    reverts = RevertFns()
    result = PodGroupResult(Status(Code.UNSCHEDULABLE, [MSG_POD_GROUP_UNSCHEDULABLE]))
    progress = PlacementProgress(scheduled=scheduled_members_count(snapshot, group.namespace, group.name),
                                 remaining=len(group.pods))
    key = f"{group.namespace}/{group.name}"
    st = _feasible(plugins, group_state, group, progress)
    if st.code == Code.ERROR:
        result.status = Status.error(f"failed to evaluate placement feasibility: {st.message()}")
    elif st.code in (Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE):
        # NewStatus(Unschedulable, reasons...).WithError(errPodGroupUnschedulable): the error leads the message
        result.status = Status(Code.UNSCHEDULABLE, [MSG_POD_GROUP_UNSCHEDULABLE, *st.reasons], st.plugin)
    else:
        result.status = st
        for pi in group.pods:
            member = _schedule_member(fw, algorithm, snapshot, pi, key, assume, reverts, cycle, explain,
                                      placement)
            result.members.append(member)
            if not member.status.is_success() and not member.status.is_rejected():
                result.status = Status.error(f"failed to schedule other pod from a pod group: "
                                             f"{member.status.message()}")
                break
            progress.remaining -= 1
            if member.status.is_success():
                progress.scheduled += 1
            st = _feasible(plugins, group_state, group, progress)
            if st.code == Code.ERROR:
                result.status = Status.error(f"failed to evaluate placement feasibility: {st.message()}")
                break
            result.status = st
            if st.is_rejected():
                break
            result.any_scheduled = result.any_scheduled or member.status.is_success()
        if result.status.code == Code.WAIT:
            result.status = Status(Code.UNSCHEDULABLE, [MSG_POD_GROUP_UNSCHEDULABLE, *result.status.reasons],
                                   result.status.plugin)
        if result.status.is_success() and not result.any_scheduled:
            result.status = Status(Code.UNSCHEDULABLE, [MSG_POD_GROUP_UNSCHEDULABLE])
    # completePodGroupAlgorithmResult: one result per member.
    for pi in group.pods[len(result.members):]:
        result.members.append(MemberResult(pi, Status(Code.UNSCHEDULABLE, [result.status.message()]),
                                           evaluated=False))
    if not result.status.is_success():
        reverts.revert()
        result.any_scheduled = False
    return result, reverts


def _schedule_member(fw: Framework, algorithm: Algorithm, snapshot: SnapshotLister, pi: PodInfo, key: str,
                     assume: AssumeFn, reverts: RevertFns, cycle: int | None,
                     explain: bool, placement: frozenset[str] | None = None) -> MemberResult:
    """``podGroupPodSchedulingAlgorithm``: filter/score one member (no PostFilter; on the
    ``placement``'s nodes when given, resolved in the current snapshot so assumed members show), then
    assume and reserve it on the selected node, its revert appended to ``reverts``."""
    nodes = None if placement is None else [ni for ni in snapshot.node_info_list if ni.name in placement]
    try:
        res = algorithm.schedule(fw, snapshot, pi, explain=explain, run_post_filter=False,
                                 cycle=cycle, placement=nodes)
    except SchedulingError as exc:
        return MemberResult(pi, Status.error(str(exc)))
    except Exception as exc:
        log.exception("Error selecting node for pod pod=%s", pi.key)
        return MemberResult(pi, Status.error(f"{type(exc).__name__}: {exc}"))
    state = res.state if res.state is not None else CycleState(snapshot)
    state.data[POD_GROUP_CYCLE_KEY] = key
    if res.selected is None:
        return MemberResult(pi, Status(Code.UNSCHEDULABLE, [res.message or "0/0 nodes are available"]),
                            result=res, state=state)
    st, revert = assume(pi, res.selected, state)
    if revert is not None:
        reverts.append(revert)
    return MemberResult(pi, st, res.selected if st.is_success() else "", res, state)


def _as_error(st: Status) -> str:
    """``Status.AsError().Error()`` of a group result: ``pod group is unschedulable`` alone when the
    status was built ``WithError(errPodGroupUnschedulable)`` (its message leads with it), else the
    message."""
    if st.reasons and st.reasons[0] == MSG_POD_GROUP_UNSCHEDULABLE:
        return MSG_POD_GROUP_UNSCHEDULABLE
    return st.message()


def _refused(group: PodGroupInfo, status: Status) -> PodGroupResult:
    """A group result where no member was evaluated (``completePodGroupAlgorithmResult``)."""
    res = PodGroupResult(status)
    res.members = [MemberResult(pi, Status(Code.UNSCHEDULABLE, [status.message()]), evaluated=False)
                   for pi in group.pods]
    return res


def generate_placements(fw: Framework, state: CycleState, group: PodGroupInfo,
                        nodes: list[NodeInfo]) -> tuple[list[Placement], Status]:
    """``RunPlacementGeneratePlugins``: the first PlacementGenerate plugin of the profile splits the
    placement of ``nodes`` (no plugin: that one placement); an empty result is Unschedulable ``no
    feasible placements found``; a plugin's failure (or exception) is returned with its name."""
    parent = Placement("", list(nodes))
    plugins = [p for p in fw.plugins.values() if isinstance(p, PlacementGeneratePlugin)]
    if not plugins:
        return [parent], Status.success()
    pl = plugins[0]
    try:
        placements, st = pl.generate_placements(state, group, parent)
    except Exception as exc:
        log.exception("PlacementGenerate plugin %s failed", pl.name)
        return [], Status(Code.ERROR, [f"{type(exc).__name__}: {exc}"], pl.name)
    if not st.is_success():
        return [], Status(st.code, list(st.reasons), pl.name)
    if not placements:
        return [], Status(Code.UNSCHEDULABLE, ["no feasible placements found"], pl.name)
    return placements, Status.success()


def score_placements(fw: Framework, state: CycleState, group: PodGroupInfo,
                     assignments: list[PodGroupAssignments]) -> tuple[list[int], Status]:
    """``RunPlacementScorePlugins``: each PlacementScore plugin scores every placement, its
    PlacementScoreExtensions normalizes them, a score outside [0, 100] is an error, and the total is
    the sum of score x the plugin's weight (the profile's, default 1). Returns totals in
    ``assignments`` order (an Error status, totals empty, on any failure)."""
    totals = [0] * len(assignments)
    for pl in (p for p in fw.plugins.values() if isinstance(p, PlacementScorePlugin)):
        scores: list[PlacementScore] = []
        try:
            for a in assignments:
                s, st = pl.score_placement(state, group, a)
                if not st.is_success():
                    return [], Status.error(f'running PlacementScore plugins: plugin "{pl.name}" failed with: '
                                            f"{st.message()}")
                scores.append(PlacementScore(a.placement, int(s)))
            if isinstance(pl, PlacementScoreExtensions):
                st = pl.normalize_placement_score(state, group, scores)
                if not st.is_success():
                    return [], Status.error(f"running NormalizePlacementScore on PlacementScore plugins: plugin "
                                            f'"{pl.name}" failed with: {st.message()}')
        except Exception as exc:
            log.exception("PlacementScore plugin %s failed", pl.name)
            return [], Status.error(f'running PlacementScore plugins: plugin "{pl.name}" failed with: '
                                    f"{type(exc).__name__}: {exc}")
        weight = fw.weights.get(pl.name) or 1
        for i, ps in enumerate(scores):
            if not 0 <= ps.score <= MAX_NODE_SCORE:
                return [], Status.error(f"applying score defaultWeights on PlacementScore plugins: plugin "
                                        f"\"{pl.name}\" returns an invalid score {ps.score}, it should in the range "
                                        f"of [0, {MAX_NODE_SCORE}] after normalizing")
            totals[i] += ps.score * weight
    return totals, Status.success()


def _schedule_placements(fw: Framework, algorithm: Algorithm, snapshot: SnapshotLister, group: PodGroupInfo,
                         assume: AssumeFn, cycle: int | None,
                         explain: bool) -> tuple[PodGroupResult, RevertFns]:
    """``podGroupSchedulingPlacementAlgorithm`` (module docstring). Every trial is reverted before
    the next; only the chosen placement's members are assumed when this returns Success."""
    group_state = CycleState(snapshot)
    placements, st = generate_placements(fw, group_state, group, list(snapshot.node_info_list))
    if not st.is_success():
        return _refused(group, st), RevertFns()
    any_result: PodGroupResult | None = None
    feasible: list[tuple[Placement, PodGroupResult]] = []
    for placement in placements:
        names = frozenset(ni.name for ni in placement.nodes)
        res, reverts = _schedule_default(fw, algorithm, snapshot, group, assume, cycle, explain, names)
        reverts.revert()
        log.debug("pod group %s/%s placement %r: %s", group.namespace, group.name, placement.name,
                  res.status.message() or "feasible")
        if res.status.code == Code.ERROR:
            return res, RevertFns()
        if any_result is None:
            any_result = res
        if res.status.is_success():
            feasible.append((placement, res))
    if not feasible:
        assert any_result is not None  # placements is not empty
        any_result.status = Status(Code.UNSCHEDULABLE, [
            MSG_POD_GROUP_UNSCHEDULABLE,
            f"0/{len(placements)} placements are available, first placement status: {_as_error(any_result.status)}"])
        any_result.any_scheduled = False
        return any_result, RevertFns()
    best = 0
    if len(feasible) > 1:
        assignments = [PodGroupAssignments(p, [(m.pod, m.node) for m in r.members
                                               if m.status.is_success() and m.node]) for p, r in feasible]
        totals, st = score_placements(fw, group_state, group, assignments)
        if not st.is_success():
            return _refused(group, st), RevertFns()
        top = max(totals)
        best = algorithm.rng.choice([i for i, t in enumerate(totals) if t == top])
    placement, chosen = feasible[best]
    log.debug("pod group %s/%s: placement %r chosen of %d feasible", group.namespace, group.name, placement.name,
              len(feasible))
    # assumeSubtreeWithRevert: the chosen members again, on the nodes their trial selected.
    reverts = RevertFns()
    for m in chosen.members:
        if not m.status.is_success() or not m.node:
            continue
        state = m.state if m.state is not None else CycleState(snapshot)
        st, revert = assume(m.pod, m.node, state)
        if revert is not None:
            reverts.append(revert)
        if not st.is_success():
            reverts.revert()
            return _refused(group, Status.error(f"failed to assume the subtree: {st.message()}")), RevertFns()
    return chosen, reverts
