"""DefaultPreemption: the PostFilter that makes room for a Pod by evicting lower-priority Pods.

Upstream: ``pkg/scheduler/framework/plugins/defaultpreemption/default_preemption.go``
(``PostFilter``: the evaluator's message prefixed with ``preemption: ``; ``calculateNumCandidates``,
``GetOffsetAndNumCandidates``, ``SelectVictimsOnNode``, ``PodEligibleToPreemptOthers``, async
``PreEnqueue`` / ``EventsToRegister``), the evaluator in ``framework/preemption/`` (here
:mod:`py_scheduler.framework.preemption`), and ``apis/config/v1/defaults.go`` /
``apis/config/validation/validation_pluginargs.go`` (``DefaultPreemptionArgs``:
``minCandidateNodesPercentage`` 10, ``minCandidateNodesAbsolute`` 100).

How one PostFilter call goes (all in memory; the live loop performs the evictions):

1. Not eligible when ``spec.preemptionPolicy`` is ``Never`` (``not eligible due to
   preemptionPolicy=Never.``) or when the Pod already has a nominated node holding a lower-priority
   Pod that is terminating because of preemption (``not eligible due to a terminating pod on the
   nominated node.``) -- unless Filter found that node UnschedulableAndUnresolvable.
2. Candidate nodes are those Filter rejected as Unschedulable. For each, from a random offset
   (``offset_rand``, injectable) and on a clone of the CycleState and NodeInfo: every Pod of lower
   priority is removed (PreFilterExtensions RemovePod), Filter is run with nominated Pods; if the
   Pod fits, victims are reprieved one by one, most important first (PDB-violating ones before the
   others), and a victim stays evicted only when adding it back makes Filter fail. The reprieve
   checks leave out the Filter plugins that never read the node's Pods
   (:data:`NODE_PODS_INDEPENDENT_FILTERS`), and for a Pod whose Filter runs only
   :data:`MEMO_SAFE_FILTERS` a node's result is reused from an earlier Pod of the same spec while
   the node is unchanged (:meth:`DefaultPreemption.victims_memo_context`).
3. The best candidate is picked (fewest PDB violations, lowest highest-victim priority, smallest
   sum of priorities, fewest victims, latest start time, first) and returned as
   ``PostFilterResult(node, victims)`` with ``preemption: found a potential placement for pod on
   node <node>, preempting <n> victims``.
4. No candidate: ``PostFilterResult("", [])`` (clear the nomination) and ``preemption: 0/N nodes
   are available: <histogram>.`` whose reasons are ``No preemption victims found for incoming
   pod`` (no lower-priority Pod on the node), the Filter reason that still fails with every victim
   gone (``Insufficient cpu``), or ``Preemption is not helpful for scheduling`` (every other node).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from py_scheduler.framework.errors import SchedulingError
from py_scheduler.framework.events import (
    EVENT_ASSIGNED_POD_DELETE,
    ClusterEventWithHint,
    QueueingHint,
)
from py_scheduler.framework.gosort import sort_slice
from py_scheduler.framework.group_preemption import (
    ERR_POLICY_NEVER,
    DomainVictim,
    GroupPods,
    PodGroupEvaluator,
    cross_nodes_victims,
    more_important_victim,
    pod_priority,
    pods_of,
)
from py_scheduler.framework.handle import Handle, ProfileHandle
from py_scheduler.framework.interfaces import (
    FilterPlugin,
    PodGroupDryRun,
    PodGroupInfo,
    PodGroupPostFilterResult,
    PostFilterResult,
)
from py_scheduler.framework.objects import Obj
from py_scheduler.framework.podgroup import pod_group_name
from py_scheduler.framework.preemption import (
    PDB,
    Evaluator,
    ScoreFunc,
    Victims,
    VictimsMemo,
    VictimsMemoContext,
    compile_pdbs,
    filter_pods_with_pdb_violation,
    filter_victims_with_pdb_violation,
    pod_has_start_time,
    pod_terminating_by_preemption,
    sort_by_importance,
)
from py_scheduler.framework.types import Code, CycleState, NodeInfo, PodInfo, Status
from py_scheduler.plugins.helpers.resource_scoring import FieldErrors

__all__ = [
    "ERR_NO_VICTIMS",
    "ERR_POLICY_NEVER",
    "ERR_TERMINATING_VICTIM",
    "ERR_WAITING_FOR_PREEMPTION",
    "NAME",
    "DefaultPreemption",
    "DefaultPreemptionArgs",
]

NAME = "DefaultPreemption"
ERR_NO_VICTIMS = "No preemption victims found for incoming pod"
ERR_TERMINATING_VICTIM = "not eligible due to a terminating pod on the nominated node."
ERR_WAITING_FOR_PREEMPTION = "waiting for the preemption for this pod to be finished"
MESSAGE_PREFIX = "preemption: "
POD_GROUP_MESSAGE_PREFIX = "pod group preemption: "
"""What ``PodGroupPostFilter`` puts before the evaluator's message."""

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1

def _any_victim(_ni: NodeInfo, _victim: PodInfo, _pod: PodInfo) -> bool:
    """The default :attr:`DefaultPreemption.is_eligible_pod`: every lower-priority Pod may be a victim."""
    return True



_GROUP_PODS_KEY = "DefaultPreemption/groupPods"
"""CycleState key of the :class:`~py_scheduler.framework.group_preemption.GroupPods` of one PostFilter
call (GenericWorkload on); every dry run's clone of the state shares it."""

NODE_PODS_INDEPENDENT_FILTERS = frozenset({"NodeUnschedulable", "NodeName", "TaintToleration", "NodeAffinity"})
"""Filter plugins whose verdict for a Pod on a node reads only the Pod, the Node object and their
own PreFilter state, never the node's Pods (``node_info.pods``, the resource sums, ports, volume
counts) nor state that PreFilterExtensions AddPod / RemovePod change (none of them implements
those): the reprieve checks of :meth:`DefaultPreemption.select_victims_on_node` leave them out.
What it depends on: those four plugins' ``filter`` (py_scheduler/plugins/node_unschedulable.py,
node_name.py, taint_toleration.py, node_affinity.py); a plugin that starts reading the node's Pods
must leave this set. ``tests/unit/plugins/test_default_preemption_fast.py`` checks that their verdict
does not change with the node's Pods and that the dry run gives the same victims with and without
the shortcut."""

MEMO_SAFE_FILTERS = NODE_PODS_INDEPENDENT_FILTERS | {"NodePorts", "NodeResourcesFit"}
"""Filter plugins whose verdict reads only the Pod, the node (object and Pods) and a PreFilter state
computed from the Pod alone (NodeResourcesFit: for a Pod without scalar requests): when the Pod's
Filter runs no other plugin, a dry run may be memoized across cycles
(:meth:`DefaultPreemption.victims_memo_context`)."""


@dataclass(frozen=True, slots=True)
class DefaultPreemptionArgs:
    """``DefaultPreemptionArgs`` after defaulting.

    ``min_candidate_nodes_percentage`` (0-100, default 10) and ``min_candidate_nodes_absolute``
    (>= 0, default 100): the dry run stops after ``max(N * pct / 100, abs)`` candidates (at most N,
    the number of potential nodes), once one of them violates no PodDisruptionBudget.
    """

    min_candidate_nodes_percentage: int = 10
    min_candidate_nodes_absolute: int = 100

    @classmethod
    def from_dict(cls, args: dict[str, Any] | None) -> DefaultPreemptionArgs:
        """Decode, default and validate ``pluginConfig[DefaultPreemption].args``.

        Raises:
            ConfigError: ``minCandidateNodesPercentage: Invalid value: 120: not in valid range [0,
                100]``, ``minCandidateNodesAbsolute: Invalid value: -1: not in valid range [0, inf)``,
                both zero (``cannot be zero at the same time as ...``), a non-integer value or an
                unknown field (all problems together).
        """
        errs = FieldErrors()
        if args is None:
            args = {}
        if not isinstance(args, dict):
            errs.invalid("args", args, "must be an object")
            errs.raise_if_any()
            raise AssertionError("unreachable")
        errs.unknown_fields("", args, ("kind", "apiVersion", "minCandidateNodesPercentage",
                                       "minCandidateNodesAbsolute"))

        def int32(key: str, default: int) -> int | None:
            raw = args.get(key)
            if raw is None:
                return default
            if isinstance(raw, bool) or not isinstance(raw, int):
                errs.invalid(key, raw, "must be an integer")
                return None
            if not _INT32_MIN <= raw <= _INT32_MAX:
                errs.invalid(key, raw, "must be a 32-bit integer")
                return None
            return raw

        pct = int32("minCandidateNodesPercentage", 10)
        absolute = int32("minCandidateNodesAbsolute", 100)
        if pct is not None and not 0 <= pct <= 100:
            errs.invalid("minCandidateNodesPercentage", pct, "not in valid range [0, 100]")
        if absolute is not None and absolute < 0:
            errs.invalid("minCandidateNodesAbsolute", absolute, "not in valid range [0, inf)")
        if pct == 0 and absolute == 0:
            errs.invalid("minCandidateNodesPercentage", pct,
                         "cannot be zero at the same time as minCandidateNodesAbsolute")
            errs.invalid("minCandidateNodesAbsolute", absolute,
                         "cannot be zero at the same time as minCandidateNodesPercentage")
        errs.raise_if_any()
        assert pct is not None and absolute is not None
        return cls(pct, absolute)


class DefaultPreemption:
    """PostFilter (and PreEnqueue while an asynchronous preemption is in flight).

    Attributes:
        args: the validated :class:`DefaultPreemptionArgs`.
        handle: the profile's :class:`~py_scheduler.framework.handle.Handle` given at ``create``; its
            ``profile`` (the profile's framework, filled in once the profile is assembled) runs
            Filter with nominated Pods and PreFilterExtensions for the dry runs.
        offset_rand: ``n -> offset in [0, n)`` where the dry run starts (upstream
            ``rand.Int31n``); tests inject a fixed one.
        now_ns: clock in Unix nanoseconds (start time of Pods that have not started).
        is_eligible_pod: extra victim filter ``(node_info, victim, preemptor) -> bool`` beyond
            "lower priority" (upstream ``IsEligiblePod``; default: always).
        evaluator: the generic :class:`~py_scheduler.framework.preemption.Evaluator`.
    """

    name = NAME

    def __init__(self, args: DefaultPreemptionArgs | None = None, handle: Handle | None = None, *,
                 offset_rand: Callable[[int], int] | None = None,
                 now_ns: Callable[[], int] | None = None) -> None:
        self.args = args or DefaultPreemptionArgs()
        self.handle: Handle = handle if handle is not None else Handle.detached()
        self.offset_rand: Callable[[int], int] = offset_rand or random.Random().randrange
        self.now_ns: Callable[[], int] = now_ns or time.time_ns
        self.is_eligible_pod: Callable[[NodeInfo, PodInfo, PodInfo], bool] = _any_victim
        self._victims_memo = VictimsMemo()
        self.evaluator = Evaluator(NAME, self, lambda: self.now_ns())
        self._preempting: set[str] = set()
        self._last_victims: dict[str, Callable[[], bool]] = {}
        self._reprieve_memo: tuple[Sequence[FilterPlugin], list[FilterPlugin]] | None = None

    @classmethod
    def create(cls, args: dict[str, Any], handle: Handle) -> DefaultPreemption:
        """Factory for the registry.

        Raises:
            ConfigError: invalid args (see :meth:`DefaultPreemptionArgs.from_dict`).
        """
        return cls(DefaultPreemptionArgs.from_dict(args), handle)

    # -- PostFilter -----------------------------------------------------------------------------
    def post_filter(self, state: CycleState, pod: PodInfo,
                    node_statuses: dict[str, Status]) -> tuple[PostFilterResult | None, Status]:
        """``PostFilter``: :meth:`Evaluator.preempt`, its message prefixed with ``preemption: ``.

        ``node_statuses``: node name -> this cycle's Filter status (missing nodes count as
        UnschedulableAndUnresolvable). Never raises for bad Pod input: an internal failure in every
        dry run is an Error status.
        """
        if self.handle.feature_gates.generic_workload and state.snapshot is not None:
            state.data[_GROUP_PODS_KEY] = GroupPods(state.snapshot.node_info_list)  # shared by the clones
        result, status = self.evaluator.preempt(state, pod, node_statuses)
        msg = status.message()
        if msg:
            return result, Status(status.code, [MESSAGE_PREFIX + msg], status.plugin)
        return result, status

    def calculate_num_candidates(self, num_nodes: int) -> int:
        """``calculateNumCandidates``: ``max(num_nodes * pct / 100, abs)`` capped at ``num_nodes``."""
        n = num_nodes * self.args.min_candidate_nodes_percentage // 100
        n = max(n, self.args.min_candidate_nodes_absolute)
        return min(n, num_nodes)

    def get_offset_and_num_candidates(self, num_nodes: int) -> tuple[int, int]:
        """``GetOffsetAndNumCandidates``: (random offset in ``[0, num_nodes)``, candidates to find)."""
        return self.offset_rand(num_nodes), self.calculate_num_candidates(num_nodes)

    def pod_eligible_to_preempt_others(self, state: CycleState, pod: PodInfo,
                                       nominated_node_status: Status) -> tuple[bool, str]:
        """``PodEligibleToPreemptOthers``: (eligible, reason when not)."""
        if pod.spec.get("preemptionPolicy") == "Never":
            return False, ERR_POLICY_NEVER
        status = pod.pod.get("status")
        nnn = status.get("nominatedNodeName") if isinstance(status, dict) else None
        if isinstance(nnn, str) and nnn:
            if nominated_node_status.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                return True, ""
            snapshot = state.snapshot
            ni = snapshot.node_info_map.get(nnn) if snapshot is not None else None
            if ni is not None:
                for p in ni.pods:
                    if self._preemption_allowed(ni, p, pod) and pod_terminating_by_preemption(p.pod):
                        return False, ERR_TERMINATING_VICTIM
        return True, ""

    def _preemption_allowed(self, node_info: NodeInfo, victim: PodInfo, preemptor: PodInfo) -> bool:
        """``isPreemptionAllowed``: lower priority (:meth:`victim_priority`) and :attr:`is_eligible_pod`."""
        return self.victim_priority(victim) < preemptor.priority and self.is_eligible_pod(node_info, victim,
                                                                                           preemptor)

    def victim_priority(self, victim: PodInfo) -> int:
        """``Victim.Priority`` of a single-Pod victim (``NewPodVictim`` -> ``GetPodPriority``): with
        GenericWorkload on, a member of an existing PodGroup has the group's priority
        (``spec.priority``, 0 when unset), whatever its own; otherwise its own."""
        if not self.handle.feature_gates.generic_workload:
            return victim.priority
        return pod_priority(victim, self._pod_group)

    def _pod_group(self, namespace: str, name: str) -> Obj | None:
        """The PodGroup object (the Handle's lister), or None."""
        return self.handle.objects.get("PodGroup", namespace, name)

    def pod_group_post_filter(self, state: CycleState, pod_group: PodGroupInfo, dry_run: PodGroupDryRun
                              ) -> tuple[PodGroupPostFilterResult | None, Status]:
        """``PodGroupPostFilter``: :class:`~py_scheduler.framework.group_preemption.PodGroupEvaluator`'s
        ``Preempt`` on the dry run, its message prefixed with ``pod group preemption: ``. Never raises
        for bad input: a failure inside is an Error status."""
        fh = self.handle.profile
        if fh is None:
            return None, Status(Code.ERROR, ["DefaultPreemption's Handle has no profile framework"])
        snap = state.snapshot
        if snap is None:
            return None, Status(Code.ERROR, ["PodGroupPostFilter has no snapshot"])
        pdbs = compile_pdbs(snap.objects.list("PodDisruptionBudget"))
        res, st = PodGroupEvaluator(self._pod_group, self.now_ns).preempt(fh, pod_group, dry_run, pdbs, snap)
        msg = st.message()
        if msg:
            return res, Status(st.code, [POD_GROUP_MESSAGE_PREFIX + msg], st.plugin)
        return res, st

    def victim_rank(self, victim: PodInfo) -> int:
        """``victimRank`` of a single-Pod victim: 2 for a Pod naming a pod group (``NewPodVictim`` gives
        it the PodGroup key type) with GenericWorkload on, else 1."""
        return 2 if self.handle.feature_gates.generic_workload and pod_group_name(victim.pod) is not None else 1

    def ordered_score_funcs(self, nodes_to_victims: Mapping[str, Victims]) -> list[ScoreFunc] | None:
        """``OrderedScoreFuncs``: None (the default criteria)."""
        return None

    def victims_memo_context(self, state: CycleState, pod: PodInfo,
                             pdbs: Sequence[PDB]) -> VictimsMemoContext | None:
        """The :class:`~py_scheduler.framework.preemption.VictimsMemo` context of this Pod's dry run,
        or None when a node's result may read more than the context and the node hold.

        The memo is used only when every Filter plugin run for the Pod is one of
        :data:`MEMO_SAFE_FILTERS` (no PreFilterExtensions, whose state reads the whole cluster, and no
        DRA, volume, spreading, affinity or GPU plugin), the Pod asks for no non-zero scalar resource
        (NodeResourcesFit then reads no DeviceClass) and :attr:`is_eligible_pod` is the default. The
        result of ``SelectVictimsOnNode`` is then a function of: the Pod's spec and effective requests
        (what those plugins' PreFilter states and ``filter`` read; the priority), the plugins run,
        the PDBs, and the node (its Node object and Pods: ``NodeInfo.generation``) -- the context is
        the first three. Per node, the memo is not used for a node with nominated Pods (Filter
        adds them) nor where the lower-priority Pods mix Pods with and without ``status.startTime``
        (a Pod without one counts as started *now*: their order would depend on the clock).
        ``tests/unit/plugins/test_default_preemption_fast.py`` checks dry runs with the memo against
        dry runs without it over sequences of preemptions, bindings and node changes.
        """
        fh = self.handle.profile
        if fh is None or self.is_eligible_pod is not _any_victim or self.handle.feature_gates.generic_workload:
            return None  # with workloads a victim's priority is its PodGroup's, which the memo does not key
        skip = state.skip_filter
        if any(pl.name not in skip for pl in fh.pre_filter_extensions):
            return None
        run = tuple(pl.name for pl in fh.filter_plugins if pl.name not in skip)
        if not MEMO_SAFE_FILTERS.issuperset(run):
            return None
        req = pod.requests
        if any(v != 0 for v in req.scalar.values()):
            return None
        context = (repr(pod.spec), repr(req), run, tuple(
            (b.namespace, repr(b.selector), b.disruptions_allowed, tuple(sorted(b.disrupted_pods))) for b in pdbs))
        prio = pod.priority
        nominated = fh.nominated_pods_for_node

        def usable(ni: NodeInfo) -> bool:
            return not nominated(ni.name)

        def storable(ni: NodeInfo) -> bool:
            started = None
            for p in ni.pods:
                if p.priority < prio:
                    has = pod_has_start_time(p)
                    if started is None:
                        started = has
                    elif has != started:
                        return False
            return True

        return VictimsMemoContext(self._victims_memo, context, usable, storable)

    def select_victims_on_node(self, state: CycleState, pod: PodInfo, node_info: NodeInfo,
                               pdbs: Sequence[PDB]) -> tuple[list[PodInfo], int, Status]:
        """``SelectVictimsOnNode`` on a cloned ``state`` and ``node_info`` (both are modified).

        Returns (victims most important first, number of PDB violations, status): status
        UnschedulableAndUnresolvable ``No preemption victims found for incoming pod`` when no Pod
        has lower priority, the Filter status when the Pod does not fit even with all of them
        gone, Error when a PreFilterExtensions or Filter plugin fails.

        The reprieve checks (one Filter run per victim added back) skip the plugins of
        :data:`NODE_PODS_INDEPENDENT_FILTERS`: they passed on this node in the first check, with
        every victim gone, and their verdict does not depend on the node's Pods, so they would pass
        again (see :meth:`_reprieve_filters`).
        """
        fh = self.handle.profile
        if fh is None:
            return [], 0, Status(Code.ERROR, ["DefaultPreemption's Handle has no profile framework"])
        groups = state.data.get(_GROUP_PODS_KEY)
        if isinstance(groups, GroupPods):
            return self._select_victim_units_on_node(fh, state, pod, node_info, pdbs, groups)
        now = self.now_ns()
        potential = [p for p in node_info.pods if self._preemption_allowed(node_info, p, pod)]
        if not potential:
            return [], 0, Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [ERR_NO_VICTIMS])
        run_filter = fh.run_filter_with_nominated_pods
        remove_ext = fh.run_pre_filter_extension_remove_pod

        def remove(p: PodInfo) -> Status:
            if not p.uid:
                return Status(Code.ERROR, ["cannot get cache key for pod with empty UID"])
            if node_info.remove_pod(p.uid) is None:
                return Status(Code.ERROR, [f"no corresponding pod {p.name} in pods of node {node_info.name}"])
            return remove_ext(state, pod, p, node_info)

        for p in potential:
            s = remove(p)
            if not s.is_success():
                return [], 0, Status(Code.ERROR, s.reasons)
        try:
            s = run_filter(state, pod, node_info)
        except SchedulingError as exc:
            s = Status(Code.ERROR, [str(exc)])
        if not s.is_success():
            return [], 0, s

        sort_by_importance(potential, now, self.victim_priority, self.victim_rank)
        violating, non_violating = filter_pods_with_pdb_violation(potential, pdbs)
        victims: list[PodInfo] = []
        plugins = self._reprieve_filters(fh.filter_plugins)
        add_ext = fh.run_pre_filter_extension_add_pod

        def reprieve(p: PodInfo) -> tuple[bool, Status]:
            node_info.add_pod(p)
            s = add_ext(state, pod, p, node_info)
            if not s.is_success():
                return False, Status(Code.ERROR, s.reasons)
            try:
                fits = run_filter(state, pod, node_info, plugins).is_success()
            except SchedulingError:
                fits = False  # an Error counts as "does not fit", as upstream
            if fits:
                return True, s
            s = remove(p)
            if not s.is_success():
                return False, Status(Code.ERROR, s.reasons)
            victims.append(p)
            return False, s

        num_violating = 0
        for p, count in violating:
            ok, st = reprieve(p)
            if st.code == Code.ERROR:
                return [], 0, st
            if not ok:
                num_violating += count
        for p in non_violating:
            _, st = reprieve(p)
            if st.code == Code.ERROR:
                return [], 0, st
        if violating and non_violating:
            sort_by_importance(victims, now, self.victim_priority, self.victim_rank)
        return victims, num_violating, Status.success()

    def _select_victim_units_on_node(self, fh: ProfileHandle, state: CycleState, pod: PodInfo,
                                     node_info: NodeInfo, pdbs: Sequence[PDB],
                                     groups: GroupPods) -> tuple[list[PodInfo], int, Status]:
        """:meth:`select_victims_on_node` with GenericWorkload on, victim by victim as upstream's
        ``SelectVictimsOnNode`` (``DomainVictim``): a victim is allowed when its priority is below
        the Pod's and :attr:`is_eligible_pod` accepts each of its Pods; its Pods on this node leave
        ``node_info``, those on other nodes (a ``disruptionMode: All`` group) only go through
        PreFilterExtensions RemovePod / AddPod with their own node's NodeInfo, which is not changed;
        victims are sorted by ``MoreImportantVictim`` (priority, rank, size, earliest start) and
        reprieved whole. Returns every Pod of the victims not reprieved, victim by victim."""
        now = self.now_ns()
        snapshot = state.snapshot
        others = snapshot.node_info_map if snapshot is not None else {}
        main = node_info.name

        def node_of(p: PodInfo) -> NodeInfo | None:
            name = (p.pod.get("spec") or {}).get("nodeName")
            return node_info if name == main else others.get(str(name))

        potential: list[DomainVictim] = []
        for v in cross_nodes_victims([node_info], groups, self._pod_group, now):
            nodes = [node_of(p) for p in v.pods]
            for p, n in zip(v.pods, nodes, strict=True):
                if n is None:  # newDomainVictim's error: the whole preemption attempt fails
                    name = (p.pod.get("spec") or {}).get("nodeName")
                    return [], 0, Status(Code.ERROR, [f'failed to get node info for node "{name}" from snapshot'])
            if v.priority < pod.priority and all(self.is_eligible_pod(n, p, pod)
                                                 for p, n in zip(v.pods, nodes, strict=True) if n is not None):
                potential.append(v)
        if not potential:
            return [], 0, Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [ERR_NO_VICTIMS])
        run_filter = fh.run_filter_with_nominated_pods
        remove_ext, add_ext = fh.run_pre_filter_extension_remove_pod, fh.run_pre_filter_extension_add_pod

        def remove(v: DomainVictim) -> Status:
            for p in v.pods:
                ni = node_of(p)
                assert ni is not None
                if ni is node_info and node_info.remove_pod(p.uid) is None:
                    return Status(Code.ERROR, [f"no corresponding pod {p.name} in pods of node {main}"])
                s = remove_ext(state, pod, p, ni)
                if not s.is_success():
                    return Status(Code.ERROR, s.reasons)
            return Status.success()

        def add(v: DomainVictim) -> Status:
            for p in v.pods:
                ni = node_of(p)
                assert ni is not None
                if ni is node_info:
                    node_info.add_pod(p)
                s = add_ext(state, pod, p, ni)
                if not s.is_success():
                    return Status(Code.ERROR, s.reasons)
            return Status.success()

        for v in potential:
            s = remove(v)
            if not s.is_success():
                return [], 0, s
        try:
            s = run_filter(state, pod, node_info)
        except SchedulingError as exc:
            s = Status(Code.ERROR, [str(exc)])
        if not s.is_success():
            return [], 0, s
        sort_slice(potential, more_important_victim)
        violating, non_violating = filter_victims_with_pdb_violation(potential, pdbs, pods_of)
        plugins = self._reprieve_filters(fh.filter_plugins)
        evicted: list[DomainVictim] = []

        def reprieve(v: DomainVictim) -> tuple[bool, Status]:
            s = add(v)
            if not s.is_success():
                return False, s
            try:
                fits = run_filter(state, pod, node_info, plugins).is_success()
            except SchedulingError:
                fits = False  # an Error counts as "does not fit", as upstream
            if fits:
                return True, s
            s = remove(v)
            if s.is_success():
                evicted.append(v)
            return False, s

        num_violating = 0
        for v, count in violating:
            ok, st = reprieve(v)
            if st.code == Code.ERROR:
                return [], 0, st
            if not ok:
                num_violating += count
        for v in non_violating:
            _, st = reprieve(v)
            if st.code == Code.ERROR:
                return [], 0, st
        if violating and non_violating:
            sort_slice(evicted, more_important_victim)
        return [p for v in evicted for p in v.pods], num_violating, Status.success()

    def _reprieve_filters(self, filter_plugins: Sequence[FilterPlugin]) -> list[FilterPlugin]:
        """The Filter plugins a reprieve check runs: ``filter_plugins`` without those of
        :data:`NODE_PODS_INDEPENDENT_FILTERS`, in order; memoized for the list object given (a
        profile's list is built once)."""
        memo = self._reprieve_memo
        if memo is not None and memo[0] is filter_plugins:
            return memo[1]
        out = [pl for pl in filter_plugins if pl.name not in NODE_PODS_INDEPENDENT_FILTERS]
        self._reprieve_memo = (filter_plugins, out)
        return out

    # -- asynchronous preemption bookkeeping (PreEnqueue) -----------------------------------------
    def mark_preempting(self, pod_uid: str) -> None:
        """The live loop calls this before it starts evicting the victims of ``pod_uid``'s
        preemption (a Pod's UID, or a PodGroup's); until :meth:`preemption_finished` the Pod (or the
        group's members) is held out of activeQ, unless the last victim is already going."""
        self._preempting.add(pod_uid)

    def last_victim(self, pod_uid: str, gone: Callable[[], bool]) -> None:
        """``lastVictimsPendingPreemption``: the live loop is about to evict the last victim of
        ``pod_uid``'s preemption; ``gone()`` says whether the informer shows it deleted or being
        deleted. From then on PreEnqueue lets the Pod in as soon as it is, so the victim's deletion
        event, which may arrive before :meth:`preemption_finished`, is not lost."""
        if pod_uid in self._preempting:
            self._last_victims[pod_uid] = gone

    def preemption_finished(self, pod_uid: str) -> None:
        """The evictions for ``pod_uid`` are done (or failed): let the Pod back in."""
        self._preempting.discard(pod_uid)
        self._last_victims.pop(pod_uid, None)

    def is_pod_running_preemption(self, pod_uid: str) -> bool:
        """``Executor.IsPodRunningPreemption`` / ``IsPodGroupRunningPreemption``: marked, and its last
        victim (once registered) not yet deleted nor being deleted."""
        if pod_uid not in self._preempting:
            return False
        gone = self._last_victims.get(pod_uid)
        return gone is None or not gone()

    def pre_enqueue(self, pod: PodInfo) -> Status:
        """``PreEnqueue`` (SchedulerAsyncPreemption, on by default): UnschedulableAndUnresolvable
        ``waiting for the preemption for this pod to be finished`` while its evictions run, or those
        of its PodGroup (marked by the PodGroup's UID, ``IsPodGroupRunningPreemption``)."""
        if not self._preempting:
            return Status.success()
        if self.is_pod_running_preemption(pod.uid):
            return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [ERR_WAITING_FOR_PREEMPTION], NAME)
        if self.handle.feature_gates.generic_workload:
            name = pod_group_name(pod.pod)
            pg = None if name is None else self._pod_group(pod.namespace, name)
            if pg is not None and self.is_pod_running_preemption(str((pg.get("metadata") or {}).get("uid") or "")):
                return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [ERR_WAITING_FOR_PREEMPTION], NAME)
        return Status.success()

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """``EventsToRegister``: assigned-Pod deletion with a hint that always Skips (the plugins
        whose rejection preemption resolves decide when to requeue)."""
        return [ClusterEventWithHint(EVENT_ASSIGNED_POD_DELETE, lambda _pod, _old, _new: QueueingHint.QUEUE_SKIP)]
