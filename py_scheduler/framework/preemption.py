"""The generic preemption evaluator (what DefaultPreemption's PostFilter runs).

Upstream (kube-scheduler v1.37.2):

* ``pkg/scheduler/framework/preemption/preemption.go``: ``Evaluator.Preempt`` / ``evaluate``
  (eligibility, candidates, the FitError that ends "Preemption is not helpful for scheduling"),
  ``findCandidates`` (only nodes whose Filter status is ``Unschedulable``), ``DryRunPreemption``
  (from a random offset, cloned CycleState and NodeInfo per node, stop once enough candidates are
  found, PDB-respecting candidates first), ``SelectCandidate`` and ``pickOneNodeForPreemption``
  (fewest PDB violations, lowest highest-victim priority, smallest priority sum, fewest victims,
  latest start time of the highest-priority victims, then the first);
* ``framework/preemption/types.go`` (``candidateList``: a capped list) and ``util.go``
  (``MoreImportantVictim``, ``FilterVictimsWithPDBViolation``, ``PodTerminatingByPreemption``);
* ``pkg/scheduler/util/utils.go`` (``GetPodStartTime``: a Pod without ``status.startTime`` counts
  as started *now*; ``GetEarliestPodStartTime``);
* ``framework/preemption/executor.go`` (what actuation does; here only described, see
  :func:`disruption_target_condition`: the live loop patches it on the victims and deletes them
  through the API).

Differences, on purpose: the dry run is sequential (upstream runs it on 16 goroutines; with at most
``numCandidates`` nodes to check -- every cluster below 100 potential nodes by default -- the result
is the same); ties that upstream breaks by Go map order are broken by candidate order (nodes in
node-tree order from the offset); extenders are not supported. With GenericWorkload on, the plugin
groups a node's Pods into victims (DefaultPreemption: a PodGroup with ``disruptionMode: All`` is one
victim spanning nodes) and hands the evaluator their Pods.

Speed-ups that keep every result (issue 21): a node's dry-run result may come from a
:class:`VictimsMemo` when the plugin's :meth:`PreemptionInterface.victims_memo_context` says what it
depends on (the nodes visited, their order and the offset are unchanged), and
:func:`sort_by_importance` sorts up to 12 Pods by key (Go's sort is then a stable insertion sort).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Protocol, TypeVar

from py_scheduler.framework.algorithm import Diagnosis, fit_error_message
from py_scheduler.framework.gosort import sort_slice
from py_scheduler.framework.interfaces import PostFilterResult
from py_scheduler.framework.labels import LabelSelector, parse_label_selector
from py_scheduler.framework.memo import PodInput, PodMemo
from py_scheduler.framework.objects import Obj
from py_scheduler.framework.types import Code, CycleState, NodeInfo, PodInfo, Status

__all__ = [
    "ERR_NO_CANDIDATE",
    "ERR_PREEMPTION_NOT_HELPFUL",
    "MAX_INT32",
    "PDB",
    "Candidate",
    "Evaluator",
    "PreemptionInterface",
    "ScoreFunc",
    "VictimKey",
    "Victims",
    "VictimsMemo",
    "VictimsMemoContext",
    "aggregate_errors",
    "compile_pdbs",
    "disruption_target_condition",
    "earliest_pod_start_time",
    "filter_pods_with_pdb_violation",
    "filter_victims_with_pdb_violation",
    "more_important_pod",
    "pick_one_node_for_preemption",
    "pod_has_start_time",
    "pod_start_time_ns",
    "pod_terminating_by_preemption",
    "preempted_event_message",
]


MAX_INT32 = 2**31 - 1
MIN_INT64 = -(2**63)
ERR_PREEMPTION_NOT_HELPFUL = "Preemption is not helpful for scheduling"
"""Reason given to every node that was not a dry-run candidate (``evaluate``)."""
ERR_NO_CANDIDATE = "no candidate node for preemption"

DISRUPTION_TARGET = "DisruptionTarget"
REASON_PREEMPTION_BY_SCHEDULER = "PreemptionByScheduler"

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

ScoreFunc = Callable[[str], int]
"""A candidate ranking function: node name -> score, higher is better (``OrderedScoreFuncs``)."""


@dataclass(slots=True)
class Victims:
    """``extenderv1.Victims``: the Pods to evict on one node, most important first, and how many
    PodDisruptionBudget violations evicting them costs."""

    pods: list[PodInfo]
    num_pdb_violations: int = 0


@dataclass(slots=True)
class Candidate:
    """``preemption.Candidate``: a node the preemptor would fit on once ``victims`` are gone."""

    name: str
    victims: Victims


@dataclass(slots=True)
class PDB:
    """A PodDisruptionBudget as preemption reads it.

    ``selector`` is None when the PDB can never match (nil / empty / invalid selector: upstream
    skips those); ``disruptions_allowed`` is ``status.disruptionsAllowed`` (0 when absent);
    ``disrupted_pods`` the names in ``status.disruptedPods`` (already being evicted: not counted).
    """

    namespace: str
    selector: LabelSelector | None
    disruptions_allowed: int = 0
    disrupted_pods: frozenset[str] = field(default_factory=frozenset)


def compile_pdbs(objs: Sequence[Obj]) -> list[PDB]:
    """Compile ``PodDisruptionBudget`` objects (policy/v1 JSON) once per preemption attempt.

    Malformed fields never raise: an unparsable selector matches nothing (as upstream's
    ``LabelSelectorAsSelector`` error path), a non-integer ``disruptionsAllowed`` counts as 0.
    """
    out: list[PDB] = []
    for o in objs:
        if not isinstance(o, dict):
            continue
        meta, spec, status = (_obj(o.get(k)) for k in ("metadata", "spec", "status"))
        selector: LabelSelector | None
        try:
            selector = parse_label_selector(spec.get("selector"))
        except (ValueError, TypeError, AttributeError):
            selector = None
        if selector is not None and (selector.nothing or selector.is_everything):
            selector = None  # a nil or empty selector matches nothing here
        allowed = status.get("disruptionsAllowed")
        if isinstance(allowed, bool) or not isinstance(allowed, int):
            allowed = 0
        disrupted = status.get("disruptedPods")
        names = frozenset(str(k) for k in disrupted) if isinstance(disrupted, dict) else frozenset()
        out.append(PDB(str(meta.get("namespace") or "default"), selector, allowed, names))
    return out


def _obj(v: object) -> Obj:
    return v if isinstance(v, dict) else {}


def filter_pods_with_pdb_violation(
        pods: Sequence[PodInfo], pdbs: Sequence[PDB]) -> tuple[list[tuple[PodInfo, int]], list[PodInfo]]:
    """``FilterVictimsWithPDBViolation`` for single-Pod victims: (violating victims with their
    violation count, non-violating victims), each in the input order.

    Budgets are consumed in input order: a Pod matching a PDB (same namespace, selector matches,
    not in ``disruptedPods``) decrements its remaining allowance; the Pod violates when some
    allowance drops below zero. A Pod without labels never violates.
    """
    return filter_victims_with_pdb_violation(pods, pdbs, _single)


def _single(pi: PodInfo) -> tuple[PodInfo]:
    return (pi,)


_V = TypeVar("_V")


def filter_victims_with_pdb_violation(
        victims: Sequence[_V], pdbs: Sequence[PDB],
        pods_of: Callable[[_V], Sequence[PodInfo]]) -> tuple[list[tuple[_V, int]], list[_V]]:
    """``FilterVictimsWithPDBViolation`` (``framework/preemption/util.go``) for victims of one or more
    Pods (``pods_of``: a victim's Pods, e.g. every scheduled member of a PodGroup with
    ``disruptionMode: All``): (violating victims with how many of their Pods violate, the others),
    each in the input order. A victim is atomic: one violating Pod makes it violating. Budgets are
    consumed Pod by Pod in input order, as :func:`filter_pods_with_pdb_violation` describes."""
    allowed = [p.disruptions_allowed for p in pdbs]

    def violating(pi: PodInfo) -> bool:
        if not pi.labels:
            return False
        for i, pdb in enumerate(pdbs):
            if pdb.namespace != pi.namespace or pdb.selector is None or not pdb.selector.matches(pi.labels):
                continue
            if pi.name in pdb.disrupted_pods:
                continue
            allowed[i] -= 1
            if allowed[i] < 0:
                return True
        return False

    bad: list[tuple[_V, int]] = []
    good: list[_V] = []
    for v in victims:
        n = sum(1 for pi in pods_of(v) if violating(pi))  # every Pod consumes its budgets
        if n:
            bad.append((v, n))
        else:
            good.append(v)
    return bad, good


def _parse_time_ns(raw: object) -> int | None:
    if not isinstance(raw, str) or not raw:
        return None
    try:
        dt = datetime.fromisoformat(raw)
    except ValueError:
        return None
    if dt.tzinfo is None:
        return None
    return (dt - _EPOCH) // timedelta(microseconds=1) * 1000


def pod_start_time_ns(pod: PodInfo, now_ns: int) -> int:
    """``GetPodStartTime`` in Unix nanoseconds: ``status.startTime``, or ``now_ns`` for a Pod that
    has not started (or whose start time cannot be read)."""
    t = _START_TIME.get(pod, _start_time_ns)
    return now_ns if t is None else t


def _start_time_ns(pod: PodInfo) -> int | None:
    status = pod.pod.get("status")
    return _parse_time_ns(status.get("startTime")) if isinstance(status, dict) else None


_START_TIME: PodMemo[int | None] = PodMemo("preemption/startTime", PodInput.START_TIME)


def pod_has_start_time(pod: PodInfo) -> bool:
    """Whether ``status.startTime`` is set and readable (else :func:`pod_start_time_ns` is *now*)."""
    return _START_TIME.get(pod, _start_time_ns) is not None


VictimKey = Callable[[PodInfo], int]
"""A victim's priority or rank (``Victim.Priority``, ``victimRank``) from its Pod."""


def _own_priority(p: PodInfo) -> int:
    return p.priority


def _pod_rank(_p: PodInfo) -> int:
    return 1


def more_important_pod(a: PodInfo, b: PodInfo, now_ns: int, priority: VictimKey = _own_priority,
                       rank: VictimKey = _pod_rank) -> bool:
    """``MoreImportantVictim`` for two single-Pod victims: higher ``priority`` first, then higher
    ``rank`` (``victimRank``: a Pod of a pod group 2, a plain Pod 1), then the one that started
    earlier (strictly). The defaults are the Pod's own priority and rank 1 (GenericWorkload off)."""
    pa, pb = priority(a), priority(b)
    if pa != pb:
        return pa > pb
    ra, rb = rank(a), rank(b)
    if ra != rb:
        return ra > rb
    return pod_start_time_ns(a, now_ns) < pod_start_time_ns(b, now_ns)


GO_INSERTION_SORT_MAX = 12
"""Go's ``pdqsort_func`` sorts ranges of at most this many elements with an insertion sort, which is
stable (``src/sort/zsortfunc.go``: ``maxInsertion``)."""


def sort_by_importance(pods: list[PodInfo], now_ns: int, priority: VictimKey = _own_priority,
                       rank: VictimKey = _pod_rank) -> None:
    """Sort in place, most important first, exactly as upstream's ``sort.Slice`` with
    ``MoreImportantVictim`` (:func:`~py_scheduler.framework.gosort.sort_slice`): equally important Pods
    (same priority, rank and start time) end up in Go's order, which decides the victims reprieved.

    Up to :data:`GO_INSERTION_SORT_MAX` Pods (a node's usual count of victims) Go's sort is an
    insertion sort, stable, so Python's stable sort on the key ``(-priority, -rank, start time)`` (the
    same strict weak order as :func:`more_important_pod`) gives the same list, with each start time
    read once instead of once per comparison. ``tests/unit/framework/test_preemption_fast.py``
    checks both forms against each other."""
    if len(pods) <= GO_INSERTION_SORT_MAX:
        pods.sort(key=lambda p: (-priority(p), -rank(p), pod_start_time_ns(p, now_ns)))
        return
    sort_slice(pods, lambda a, b: more_important_pod(a, b, now_ns, priority, rank))


def earliest_pod_start_time(victims: Victims, now_ns: int) -> int | None:
    """``GetEarliestPodStartTime``: the earliest start time among the highest-priority victims
    (Unix ns), None for no victims."""
    if not victims.pods:
        return None
    earliest = pod_start_time_ns(victims.pods[0], now_ns)
    max_prio = victims.pods[0].priority
    for p in victims.pods:
        if p.priority == max_prio:
            t = pod_start_time_ns(p, now_ns)
            if t < earliest:
                earliest = t
        elif p.priority > max_prio:
            max_prio = p.priority
            earliest = pod_start_time_ns(p, now_ns)
    return earliest


def pod_terminating_by_preemption(pod: Obj) -> bool:
    """``PodTerminatingByPreemption``: being deleted, and the first ``DisruptionTarget`` condition
    is True with reason ``PreemptionByScheduler``."""
    meta = pod.get("metadata")
    if not isinstance(meta, dict) or not meta.get("deletionTimestamp"):
        return False
    status = pod.get("status")
    conds = status.get("conditions") if isinstance(status, dict) else None
    for c in conds if isinstance(conds, list) else []:
        if isinstance(c, dict) and c.get("type") == DISRUPTION_TARGET:
            return c.get("status") == "True" and c.get("reason") == REASON_PREEMPTION_BY_SCHEDULER
    return False


def disruption_target_condition(scheduler_name: str, preemptor_kind: str = "pod") -> Obj:
    """The Pod condition the executor patches on each victim before deleting it (``executor.go``
    ``PreemptPod``: type DisruptionTarget, status True, reason PreemptionByScheduler;
    ``preemptor_kind`` is the preemptor's ``Type()``: ``pod`` or ``podgroup``)."""
    return {"type": DISRUPTION_TARGET, "status": "True", "reason": REASON_PREEMPTION_BY_SCHEDULER,
            "message": f"{scheduler_name}: preempting to accommodate a higher priority {preemptor_kind}"}


def preempted_event_message(preemptor_uid: str, node_name: str, preemptor_kind: str = "pod") -> str:
    """The ``Preempted`` event note recorded on each victim (``executor.go``): ``node_name`` is the
    candidate's name (the nominated node; ``cluster`` for a pod group's preemption)."""
    return f"Preempted by {preemptor_kind} {preemptor_uid} on node {node_name}"


def aggregate_errors(errs: Sequence[str]) -> str:
    """``utilerrors.NewAggregate(errs).Error()``: one message as is, several (deduplicated) as
    ``[e1, e2]``."""
    seen: list[str] = []
    for e in errs:
        if e not in seen:
            seen.append(e)
    if len(seen) == 1:
        return seen[0]
    return "[" + ", ".join(seen) + "]"


def pick_one_node_for_preemption(nodes_to_victims: Mapping[str, Victims], score_funcs: Sequence[ScoreFunc] | None,
                                 now_ns: int) -> str:
    """``pickOneNodeForPreemption``: apply ranking functions in turn, keeping the best-scoring
    nodes, until one node is left; "" for no nodes.

    Default functions (victims must be ordered most important first): fewest PDB violations;
    lowest priority of the most important victim; smallest sum of ``priority + 2^31`` over the
    victims; fewest victims; latest earliest-start-time among the highest-priority victims. Then
    the first remaining node (in ``nodes_to_victims`` order).
    """
    if not nodes_to_victims:
        return ""
    candidates = list(nodes_to_victims)
    if not score_funcs:
        def min_pdb(node: str) -> int:
            return -nodes_to_victims[node].num_pdb_violations

        def min_highest_priority(node: str) -> int:
            return -nodes_to_victims[node].pods[0].priority

        def min_sum_priorities(node: str) -> int:
            return -sum(p.priority + MAX_INT32 + 1 for p in nodes_to_victims[node].pods)

        def min_num_pods(node: str) -> int:
            return -len(nodes_to_victims[node].pods)

        def latest_start_time(node: str) -> int:
            t = earliest_pod_start_time(nodes_to_victims[node], now_ns)
            return MIN_INT64 if t is None else t

        score_funcs = [min_pdb, min_highest_priority, min_sum_priorities, min_num_pods, latest_start_time]
    for f in score_funcs:
        best: list[str] = []
        max_score = MIN_INT64
        for node in candidates:
            sc = f(node)
            if sc > max_score:
                max_score = sc
                best = []
            if sc == max_score:
                best.append(node)
        if len(best) == 1:
            return best[0]
        candidates = best
    return candidates[0]


@dataclass(slots=True)
class _MemoEntry:
    generation: int
    context: Hashable
    victims: tuple[PodInfo, ...]
    num_pdb_violations: int
    code: Code
    reasons: tuple[str, ...]
    plugin: str


class VictimsMemo:
    """The last dry-run result (``SelectVictimsOnNode``) of each node, kept across cycles.

    An entry is the result for one node at one ``NodeInfo.generation`` (every change of the node
    object or of its Pods bumps it) under one *context*: a hashable the preemption plugin builds
    from everything else the result reads (the preemptor's spec and requests, the Filter plugins
    run, the PodDisruptionBudgets; see ``DefaultPreemption.victims_memo_context``). A lookup hits
    only when both are equal. At most one entry per node name; ``max_entries`` bounds the names
    kept (all are dropped when it is reached: deleted nodes do not accumulate).

    Why: a high-priority Pod's dry run visits ``numCandidates`` nodes (500 at 5000 nodes), and the
    next Pod of the same template visits mostly the same, unchanged nodes (only the nodes whose
    victims were evicted, or where Pods were bound, changed).
    """

    __slots__ = ("_entries", "hits", "max_entries", "misses")

    def __init__(self, max_entries: int = 65536) -> None:
        self._entries: dict[str, _MemoEntry] = {}
        self.max_entries = max_entries
        self.hits = 0
        self.misses = 0

    def get(self, context: Hashable, ni: NodeInfo) -> tuple[list[PodInfo], int, Status] | None:
        """The stored (victims, PDB violations, status) of ``ni`` under ``context``, or None."""
        e = self._entries.get(ni.name)
        if e is None or e.generation != ni.generation or e.context != context:
            self.misses += 1
            return None
        self.hits += 1
        status = Status(e.code, list(e.reasons), e.plugin) if e.code != Code.SUCCESS else Status.success()
        return list(e.victims), e.num_pdb_violations, status

    def put(self, context: Hashable, ni: NodeInfo, victims: Sequence[PodInfo], num_pdb_violations: int,
            status: Status) -> None:
        """Store ``ni``'s result under ``context`` (replacing the node's previous entry)."""
        if len(self._entries) >= self.max_entries and ni.name not in self._entries:
            self._entries.clear()
        self._entries[ni.name] = _MemoEntry(ni.generation, context, tuple(victims), num_pdb_violations,
                                            status.code, tuple(status.reasons), status.plugin)

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


@dataclass(slots=True)
class VictimsMemoContext:
    """What :meth:`Evaluator.dry_run_preemption` needs to use a :class:`VictimsMemo` for one Pod:
    the memo, the context key, ``usable(node_info)``: whether this node's result may be read from
    or stored in the memo now (False, e.g., for a node with nominated Pods), and
    ``storable(node_info)``: whether its result, just computed, may be stored (a function of the
    node's generation and the context only, so an entry read back needs no second check)."""

    memo: VictimsMemo
    context: Hashable
    usable: Callable[[NodeInfo], bool]
    storable: Callable[[NodeInfo], bool]


class PreemptionInterface(Protocol):
    """``preemption.Interface``: what a preemption plugin supplies to the :class:`Evaluator`.

    Differences from upstream: ``pod_eligible_to_preempt_others`` also takes the CycleState (the
    cycle's Snapshot lives there), ``select_victims_on_node`` receives the node's Pods itself.
    """

    def get_offset_and_num_candidates(self, num_nodes: int) -> tuple[int, int]:
        """(random offset in ``[0, num_nodes)``, number of candidates to find)."""
        ...

    def pod_eligible_to_preempt_others(self, state: CycleState, pod: PodInfo,
                                       nominated_node_status: Status) -> tuple[bool, str]:
        """(eligible, reason when not)."""
        ...

    def select_victims_on_node(self, state: CycleState, pod: PodInfo, node_info: NodeInfo,
                               pdbs: Sequence[PDB]) -> tuple[list[PodInfo], int, Status]:
        """(victims most important first, PDB violations, status) on a cloned state / NodeInfo."""
        ...

    def ordered_score_funcs(self, nodes_to_victims: Mapping[str, Victims]) -> list[ScoreFunc] | None:
        """Custom candidate ranking, or None for the default criteria."""
        ...

    def victims_memo_context(self, state: CycleState, pod: PodInfo,
                             pdbs: Sequence[PDB]) -> VictimsMemoContext | None:
        """A memo of ``select_victims_on_node`` results for this Pod's dry run, or None (no memo)."""
        ...


class Evaluator:
    """``preemption.Evaluator``: runs preemption for one Pod with a :class:`PreemptionInterface`.

    ``now_ns`` is the clock (Unix nanoseconds) used as the start time of Pods that have not
    started; tests inject a fixed one.
    """

    def __init__(self, plugin_name: str, interface: PreemptionInterface,
                 now_ns: Callable[[], int] = time.time_ns) -> None:
        self.plugin_name = plugin_name
        self.interface = interface
        self.now_ns = now_ns

    def preempt(self, state: CycleState, pod: PodInfo,
                node_statuses: Mapping[str, Status]) -> tuple[PostFilterResult | None, Status]:
        """``Evaluator.Preempt`` without actuation.

        Returns one of:

        * ``(PostFilterResult(node, victims), Success "found a potential placement for pod on node
          <node>, preempting <n> victims")``: the caller evicts ``victims`` and nominates ``node``;
        * ``(PostFilterResult("", []), Unschedulable "0/N nodes are available: ...")``: preemption
          cannot help, the Pod's nomination (if any) is to be cleared;
        * ``(None, Unschedulable reason)``: not eligible (keep the nomination);
        * ``(None, Error)``: every dry run failed with an internal error.

        ``node_statuses`` maps node name -> the Filter status of this cycle; a node missing from it
        counts as UnschedulableAndUnresolvable (``NewDefaultNodeToStatus``).
        """
        best, fit_result, status = self._evaluate(state, pod, node_statuses)
        if not status.is_success() or best is None:
            return fit_result, status
        msg = (f"found a potential placement for pod on node {best.name}, "
               f"preempting {len(best.victims.pods)} victims")
        return (PostFilterResult(best.name, list(best.victims.pods), best.victims.num_pdb_violations),
                Status(Code.SUCCESS, [msg]))

    def _evaluate(self, state: CycleState, pod: PodInfo, node_statuses: Mapping[str, Status]
                  ) -> tuple[Candidate | None, PostFilterResult | None, Status]:
        absent = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE)
        status_obj = pod.pod.get("status")
        nnn = status_obj.get("nominatedNodeName") if isinstance(status_obj, dict) else None
        nominated_status = node_statuses.get(nnn, absent) if isinstance(nnn, str) and nnn else absent
        ok, msg = self.interface.pod_eligible_to_preempt_others(state, pod, nominated_status)
        if not ok:
            return None, None, Status(Code.UNSCHEDULABLE, [msg] if msg else [])

        snapshot = state.snapshot
        all_nodes: list[NodeInfo] = list(snapshot.node_info_list) if snapshot is not None else []
        if not all_nodes:
            return None, None, Status(Code.ERROR, ["no nodes available"])
        candidates, statuses, errs = self.find_candidates(state, pod, all_nodes, node_statuses)
        if errs and not candidates:
            return None, None, Status(Code.ERROR, [aggregate_errors(errs)])
        if not candidates:
            d = Diagnosis(node_to_status=statuses,
                          absent_nodes_status=Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [ERR_PREEMPTION_NOT_HELPFUL]))
            return None, PostFilterResult("", []), Status(Code.UNSCHEDULABLE, [fit_error_message(len(all_nodes), d)])
        best = self.select_candidate(candidates)
        if best is None or not best.name:
            return None, None, Status(Code.UNSCHEDULABLE, [ERR_NO_CANDIDATE])
        return best, None, Status.success()

    def find_candidates(self, state: CycleState, pod: PodInfo, all_nodes: Sequence[NodeInfo],
                        node_statuses: Mapping[str, Status]) -> tuple[list[Candidate], dict[str, Status], list[str]]:
        """``findCandidates``: dry-run preemption on the nodes whose status is Unschedulable (not
        UnschedulableAndUnresolvable: removing Pods cannot help those). Returns (candidates, dry-run
        status of the nodes that are not candidates, error messages)."""
        absent = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE)
        potential = [ni for ni in all_nodes if node_statuses.get(ni.name, absent).code == Code.UNSCHEDULABLE]
        if not potential:
            return [], {}, []
        snapshot = state.snapshot
        pdbs = compile_pdbs(snapshot.objects.list("PodDisruptionBudget")) if snapshot is not None else []
        offset, num = self.interface.get_offset_and_num_candidates(len(potential))
        return self.dry_run_preemption(state, pod, potential, pdbs, offset, num)

    def dry_run_preemption(self, state: CycleState, pod: PodInfo, potential_nodes: Sequence[NodeInfo],
                           pdbs: Sequence[PDB], offset: int,
                           num_candidates: int) -> tuple[list[Candidate], dict[str, Status], list[str]]:
        """``DryRunPreemption``: from ``potential_nodes[offset]`` on (wrapping), select victims on a
        clone of each node's state until a PDB-respecting candidate exists and ``num_candidates``
        were found. Returns (PDB-respecting candidates then violating ones, each list capped at
        ``num_candidates``; node -> status for nodes without a candidate; error messages).

        When the interface offers a :class:`VictimsMemoContext`, a node's result is read from its
        memo when the node and the context are unchanged since it was computed (and stored after
        computing it otherwise); the nodes visited and their order are the same."""
        non_violating: list[Candidate] = []
        violating: list[Candidate] = []
        statuses: dict[str, Status] = {}
        errs: list[str] = []
        n = len(potential_nodes)
        memo = self.interface.victims_memo_context(state, pod, pdbs)
        for i in range(n):
            ni = potential_nodes[(offset + i) % n]
            use_memo = memo is not None and memo.usable(ni)
            hit = memo.memo.get(memo.context, ni) if memo is not None and use_memo else None
            if hit is not None:
                pods, num_pdb, st = hit
            else:
                pods, num_pdb, st = self.interface.select_victims_on_node(state.clone(), pod, ni.clone(), pdbs)
                if memo is not None and use_memo and st.code != Code.ERROR and memo.storable(ni):  # no Error kept
                    memo.memo.put(memo.context, ni, pods, num_pdb, st)
            if st.is_success() and pods:
                c = Candidate(ni.name, Victims(pods, num_pdb))
                target = non_violating if num_pdb == 0 else violating
                if len(target) < num_candidates:
                    target.append(c)
                if non_violating and len(non_violating) + len(violating) >= num_candidates:
                    break
                continue
            if st.is_success():
                st = Status(Code.ERROR, [f'expected at least one victim pod on node "{ni.name}"'])
            if st.code == Code.ERROR:
                errs.append(st.message())
            statuses[ni.name] = st
        return non_violating + violating, statuses, errs

    def select_candidate(self, candidates: Sequence[Candidate]) -> Candidate | None:
        """``SelectCandidate``: the only candidate, or the one :func:`pick_one_node_for_preemption`
        ranks first (the plugin's ``ordered_score_funcs`` when it returns some)."""
        if not candidates:
            return None
        if len(candidates) == 1:
            return candidates[0]
        victims_map: dict[str, Victims] = {}
        for c in candidates:
            victims_map[c.name] = c.victims
        funcs = self.interface.ordered_score_funcs(victims_map)
        name = pick_one_node_for_preemption(victims_map, funcs, self.now_ns())
        if name in victims_map:
            return Candidate(name, victims_map[name])
        return candidates[0]
