"""Victims that are whole pod groups, and preemption for a pod group (feature gate ``GenericWorkload``).

Upstream (kube-scheduler v1.37.2), ``pkg/scheduler/framework/preemption/``:

* ``types.go``: ``DomainVictim`` / ``NewVictim`` / ``NewPodVictim`` (a victim is one Pod, or every
  scheduled member of a PodGroup with ``disruptionMode: {all: {}}``; its priority is the PodGroup's
  for a member of one, ``GetPodPriority``), ``getCrossNodesVictims`` / ``searchCrossNodesVictimPods``;
* ``util.go``: ``MoreImportantVictim`` (priority, then ``victimRank``: 2 for a PodGroup's, 1 for a
  plain Pod; then more Pods; then the earlier start) and ``FilterVictimsWithPDBViolation``;
* ``podgrouppreemption.go``: ``PodGroupEvaluator.Preempt`` -- the preemptor is the whole group and
  the domain the whole cluster: every lower-priority victim leaves a copy of the snapshot, the group
  algorithm is rerun on it (``PodGroupSchedulingFunc``), and victims are reprieved one by one, most
  important first (PDB-violating ones before the others), while every placed member still passes
  Filter on its node with the members before it assumed.

Not reproduced: composite pod groups (``CompositePodGroup``) and ``PodGroupPreemptionPolicy`` (alpha,
off): the group's preemption policy is Never when a member's is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from py_scheduler.framework.errors import SchedulingError
from py_scheduler.framework.gosort import sort_slice
from py_scheduler.framework.handle import ProfileHandle
from py_scheduler.framework.interfaces import (
    PodGroupDryRun,
    PodGroupInfo,
    PodGroupPostFilterResult,
    ProposedAssignment,
)
from py_scheduler.framework.lister import SnapshotLister
from py_scheduler.framework.objects import Obj
from py_scheduler.framework.podgroup import pod_group_name, pod_group_priority
from py_scheduler.framework.preemption import (
    PDB,
    filter_victims_with_pdb_violation,
    pod_start_time_ns,
    pod_terminating_by_preemption,
)
from py_scheduler.framework.types import Code, NodeInfo, PodInfo, Status

__all__ = [
    "ERR_NO_GROUP_VICTIMS",
    "ERR_POLICY_NEVER",
    "MSG_ONGOING",
    "DomainVictim",
    "GroupPods",
    "PodGroupEvaluator",
    "cross_nodes_victims",
    "disrupts_all",
    "more_important_victim",
    "pod_priority",
]

ERR_NO_GROUP_VICTIMS = "No preemption victims found for incoming preemptor"
"""``selectVictimsOnDomain``'s words when no victim has a lower priority than the group."""
MSG_ONGOING = "ongoing preemption on nominated nodes"
"""``Preempt``'s Success while an earlier preemption for the group is still evicting."""
ERR_POLICY_NEVER = "not eligible due to preemptionPolicy=Never."
"""``PodEligibleToPreemptOthers`` / ``preemptorEligibleToPreemptOthers`` when the policy is Never."""

PodGroupLookup = Callable[[str, str], Obj | None]
"""(namespace, name) -> the PodGroup object, or None."""


def pod_priority(p: PodInfo, lookup: PodGroupLookup) -> int:
    """``GetPodPriority``: a member of an existing PodGroup has the group's priority (``spec.priority``,
    0 when unset), any other Pod its own."""
    name = pod_group_name(p.pod)
    pg = None if name is None else lookup(p.namespace, name)
    return p.priority if pg is None else pod_group_priority(pg)


def disrupts_all(pod_group: Obj) -> bool:
    """``spec.disruptionMode.all`` is set: the group is evicted whole (``getHighestAllAncestor``)."""
    spec = pod_group.get("spec")
    mode = spec.get("disruptionMode") if isinstance(spec, dict) else None
    return isinstance(mode, dict) and mode.get("all") is not None


@dataclass(slots=True)
class DomainVictim:
    """``DomainVictim``: the Pods evicted together, their priority, rank (``victimRank``: 2 for a
    PodGroup member or group, 1 for a plain Pod) and earliest start time (Unix ns)."""

    pods: list[PodInfo]
    priority: int
    rank: int
    earliest_ns: int


def pods_of(v: DomainVictim) -> list[PodInfo]:
    """A victim's Pods (for :func:`~py_scheduler.framework.preemption.filter_victims_with_pdb_violation`)."""
    return v.pods


def more_important_victim(a: DomainVictim, b: DomainVictim) -> bool:
    """``MoreImportantVictim``: higher priority, then higher rank, then more Pods, then the earlier
    start (strictly)."""
    if a.priority != b.priority:
        return a.priority > b.priority
    if a.rank != b.rank:
        return a.rank > b.rank
    if len(a.pods) != len(b.pods):
        return len(a.pods) > len(b.pods)
    return a.earliest_ns < b.earliest_ns


class GroupPods:
    """The scheduled (assumed or bound) Pods of each PodGroup over ``nodes`` (``PodGroupState.
    ScheduledPods``), indexed on first use: (namespace, group name) -> PodInfos in node order.
    Depends on the nodes' Pods not changing while it is used (one PostFilter call: the dry runs
    change clones)."""

    def __init__(self, nodes: Sequence[NodeInfo]) -> None:
        self._nodes = nodes
        self._index: dict[tuple[str, str], list[PodInfo]] | None = None

    def members(self, namespace: str, name: str) -> list[PodInfo]:
        """The group's scheduled members ([] for none)."""
        if self._index is None:
            index: dict[tuple[str, str], list[PodInfo]] = {}
            for ni in self._nodes:
                for p in ni.pods:
                    g = pod_group_name(p.pod)
                    if g is not None:
                        index.setdefault((p.namespace, g), []).append(p)
            self._index = index
        return self._index.get((namespace, name), [])


def cross_nodes_victims(nodes: Iterable[NodeInfo], groups: GroupPods, lookup: PodGroupLookup,
                        now_ns: int) -> list[DomainVictim]:
    """``getCrossNodesVictims`` over ``nodes``, in their Pods' order: each Pod is a victim of its own
    (its PodGroup's priority when it names an existing one, its own otherwise; rank 2 when it names a
    group), except the members of a PodGroup with ``disruptionMode: All``, which make one victim of
    every scheduled member of the group, on these nodes or any other (the group's priority, rank 2)."""
    out: list[DomainVictim] = []
    seen: set[tuple[str, str]] = set()
    for ni in nodes:
        for p in ni.pods:
            name = pod_group_name(p.pod)
            pg = None if name is None else lookup(p.namespace, name)
            if pg is None or name is None or not disrupts_all(pg):
                prio = p.priority if pg is None else pod_group_priority(pg)
                out.append(DomainVictim([p], prio, 1 if name is None else 2, pod_start_time_ns(p, now_ns)))
                continue
            if (p.namespace, name) in seen:
                continue
            seen.add((p.namespace, name))
            members = groups.members(p.namespace, name) or [p]
            out.append(DomainVictim(members, pod_group_priority(pg), 2,
                                    min(pod_start_time_ns(m, now_ns) for m in members)))
    return out


class PodGroupEvaluator:
    """``PodGroupEvaluator`` (podgrouppreemption.go): :meth:`preempt` decides, on a
    :class:`~py_scheduler.framework.interfaces.PodGroupDryRun`, which victims to evict for a pod group
    and where its members go; the caller evicts them (``actuatePodGroupPreemption``)."""

    def __init__(self, lookup: PodGroupLookup, now_ns: Callable[[], int]) -> None:
        self.lookup = lookup
        self.now_ns = now_ns

    def preempt(self, fh: ProfileHandle, group: PodGroupInfo, dry: PodGroupDryRun, pdbs: Sequence[PDB],
                cluster: SnapshotLister) -> tuple[PodGroupPostFilterResult | None, Status]:
        """``Preempt``: not eligible (Unschedulable) when a member says preemptionPolicy Never;
        Success ``ongoing preemption on nominated nodes`` (the members' current nominations) while a
        lower-priority Pod on a node a member is nominated to terminates by preemption; else
        :meth:`select_victims`' outcome, Success ``found a placement for podgroup, preempting N
        victims`` with the members' nominations and the victims. ``cluster`` is the cycle's snapshot,
        read before anything changes (the dry run's copy is made only when victims must leave it)."""
        priority = pod_group_priority(group.pod_group)
        if any(pi.spec.get("preemptionPolicy") == "Never" for pi in group.pods):
            return None, Status(Code.UNSCHEDULABLE, [ERR_POLICY_NEVER])
        nodes = cluster.node_info_map
        nominated = {str((pi.pod.get("status") or {}).get("nominatedNodeName") or "") for pi in group.pods} - {""}
        for name in nominated:
            ni = nodes.get(name)
            if ni is not None and any(pod_priority(p, self.lookup) < priority and pod_terminating_by_preemption(p.pod)
                                      for p in ni.pods):
                noms = {pi.key: str((pi.pod.get("status") or {}).get("nominatedNodeName") or "")
                        for pi in group.pods}
                return PodGroupPostFilterResult(noms, []), Status(Code.SUCCESS, [MSG_ONGOING])
        res, st = self.select_victims(fh, priority, dry, pdbs, cluster)
        if res is None or not st.is_success():
            return None, st
        return res, Status(Code.SUCCESS, [f"found a placement for podgroup, preempting {len(res.victims)} victims"])

    def select_victims(self, fh: ProfileHandle, priority: int, dry: PodGroupDryRun, pdbs: Sequence[PDB],
                       cluster: SnapshotLister) -> tuple[PodGroupPostFilterResult | None, Status]:
        """``selectVictimsOnDomain``: every victim of lower priority than the group leaves the copy;
        the group algorithm runs once (its failure is the outcome); then each victim, PDB-violating
        ones first, most important first, comes back (PreFilterExtensions AddPod for every placed
        member) and stays when every placed member still passes Filter (with nominated Pods) on its
        node, the members before it assumed and Reserved (undone after each check); otherwise it
        leaves again (RemovePod) and is evicted. Victims are returned most important first."""
        listed = cluster.node_info_list
        victims = cross_nodes_victims(listed, GroupPods(listed), self.lookup, self.now_ns())
        potential = [v for v in victims if v.priority < priority]
        if not potential:
            return None, Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [ERR_NO_GROUP_VICTIMS])
        nodes = dry.snapshot.node_info_map  # the copy: its NodeInfos change as victims leave and come back
        for v in potential:
            for p in v.pods:
                dry.remove_pod(p)
        assignments, st = dry.schedule()
        if not st.is_success():
            return None, st
        sort_slice(potential, more_important_victim)
        violating, non_violating = filter_victims_with_pdb_violation(potential, pdbs, pods_of)
        placed = [a for a in assignments if a.node_name]

        def extend(v: DomainVictim, add: bool) -> None:
            run = fh.run_pre_filter_extension_add_pod if add else fh.run_pre_filter_extension_remove_pod
            for p in v.pods:
                if add:
                    dry.add_pod(p)
                else:
                    dry.remove_pod(p)
                ni = nodes[p.node_name or ""]
                for a in placed:
                    s = run(a.state, a.pod, p, ni)
                    if not s.is_success():
                        raise SchedulingError(s.message())

        def fits(a: ProposedAssignment) -> bool:
            try:
                return fh.run_filter_with_nominated_pods(a.state, a.pod, nodes[a.node_name]).is_success()
            except SchedulingError:
                return False

        def reprieve(v: DomainVictim) -> bool:
            extend(v, True)
            undo: list[Callable[[], None]] = []
            try:
                for a in placed:
                    if not fits(a):
                        extend(v, False)
                        return False
                    undo.append(dry.assume(a))
                return True
            finally:
                for fn in reversed(undo):
                    fn()

        evicted: list[DomainVictim] = []
        violations = 0
        try:
            for v, count in violating:
                if not reprieve(v):
                    evicted.append(v)
                    violations += count
            for v in non_violating:
                if not reprieve(v):
                    evicted.append(v)
        except SchedulingError as exc:
            return None, Status(Code.ERROR, [str(exc)])
        sort_slice(evicted, more_important_victim)
        noms = {a.pod.key: a.node_name for a in placed}
        return PodGroupPostFilterResult(noms, [p for v in evicted for p in v.pods], violations,
                                        sum(1 for v in evicted if v.rank == 2)), Status.success()
