"""A profile's plugin set and the scheduling algorithm of one cycle.

Upstream: ``pkg/scheduler/framework/runtime/framework.go`` (RunPreFilterPlugins, RunFilterPlugins,
RunPreScorePlugins, RunScorePlugins, normalizeScores: the order, the Skip rules, the score range
check, weights) and ``pkg/scheduler/schedule_one.go`` (``schedulePod``, ``findNodesThatFitPod``,
``findNodesThatPassFilters``, ``numFeasibleNodesToFind``, ``prioritizeNodes``, rotating
``nextStartNodeIndex``, a single feasible node is not scored, ties broken at random,
``evaluateNominatedNode``: a Pod's ``status.nominatedNodeName`` is tried alone first), plus
``pkg/scheduler/framework/types.go`` (``FitError.Error``: the FailedScheduling message).

Nominated pods (``framework.go``: ``RunFilterPluginsWithNominatedPods``, ``addGENominatedPods``,
``RunPreFilterExtensionAddPod`` / ``RemovePod``): when a :data:`Nominator` is given, Filter runs on a
node twice if Pods of equal or higher priority are nominated there -- once with them added (to a
cloned CycleState through PreFilterExtensions and to a cloned NodeInfo) and, if that passes, once
without; both must pass. With no nominator the Filter pass is exactly ``RunFilterPlugins``.

Batch forms (performance only, bench/RESULTS.md): a Filter plugin may also be a
:class:`~py_scheduler.framework.interfaces.BatchFilterPlugin` (``filter_nodes(state, pod, nodes) ->
list[Status] | None``) and a Score plugin a :class:`~py_scheduler.framework.interfaces.BatchScorePlugin`
(``score_nodes(state, pod, nodes) -> (list[int], Status)``); each must return exactly what ``filter`` /
``score`` return node by node (``None``: every node passes; the rule is in those Protocols'
docstrings). Filter then runs plugin by plugin over chunks of nodes no longer than the feasible nodes
still missing, so the nodes evaluated, their statuses and the rotating start index are those of the node-by-node search
(tests/unit/plugins/test_batch_contract.py checks every plugin's forms).

Which extension points a plugin takes part in is decided once, when the profile is assembled, by
``isinstance`` against the runtime-checkable Protocols of :mod:`py_scheduler.framework.interfaces`.

Nothing here touches the API: the same code runs live, in ``explain`` / ``simulate`` and in tests.
"""

from __future__ import annotations

import logging
import operator
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import compress, repeat
from typing import Any, cast

import numpy as np

from py_scheduler.framework.batch import (
    OpportunisticBatch,
    PodSignature,
    SignFragment,
    SortedScoredNodes,
    canonical_signature,
)
from py_scheduler.framework.binding_cycle import WaitingPods
from py_scheduler.framework.errors import SchedulingError as SchedulingError
from py_scheduler.framework.handle import Handle
from py_scheduler.framework.interfaces import (
    BatchFilterPlugin,
    BatchScorePlugin,
    BindPlugin,
    FilterPlugin,
    NormalizeScorePlugin,
    PermitPlugin,
    PostBindPlugin,
    PostFilterPlugin,
    PostFilterResult,
    PreBindPlugin,
    PreFilterExtensions,
    PreFilterPlugin,
    PreFilterResult,
    PreScorePlugin,
    QueuedPodInfo,
    QueueSortPlugin,
    ReservePlugin,
    ScorePlugin,
    SignPlugin,
)
from py_scheduler.framework.lister import SnapshotLister
from py_scheduler.framework.memo import PodInput, PodMemo
from py_scheduler.framework.types import MAX_NODE_SCORE, Code, CycleState, NodeInfo, PodInfo, Status

log = logging.getLogger("py_scheduler.framework")

MIN_FEASIBLE_NODES_TO_FIND = 100
PLUGIN_METRICS_SAMPLE_PERCENT = 10
"""``pluginMetricsSamplePercent`` (schedule_one.go): per-plugin execution durations are recorded in
this share of scheduling cycles only (extension-point durations in every cycle)."""
_metrics_sampler = random.Random()  # not the tie-break RNG: seeded simulate/parity runs stay as they were
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5
NO_NODE_AVAILABLE_MSG = "0/{} nodes are available"
OPPORTUNISTIC_BATCHING_DEFAULT = True
"""Feature gate ``OpportunisticBatching`` (beta, on by default in v1.37): a new :class:`Framework`
gets an :class:`~py_scheduler.framework.batch.OpportunisticBatch` unless told otherwise
(``Framework.set_opportunistic_batching(False)``; ``py-scheduler run --feature-gates
OpportunisticBatching=false``)."""
PLACEMENT_STATE_KEY = "PodGroupPlacement"
"""CycleState key: the node names of the pod group placement this Pod is evaluated in (a frozenset),
set by :meth:`Algorithm.schedule` when given a ``placement``."""
_SIGNATURE_MEMO: PodMemo[tuple[Framework, PodSignature | None]] = PodMemo(
    "OpportunisticBatching/signature", PodInput.ALL)
"""The Pod's signature in a profile: every plugin's SignPod may read any part of the Pod."""
_VALID_SCORE_BYTES = bytes(range(MAX_NODE_SCORE + 1))
"""The bytes 0..MAX_NODE_SCORE: deleting them from a packed score column leaves nothing iff every score is in range."""

# Observer hooks (metrics): called with (extension_point, plugin or "", status code name, seconds).
Observer = Callable[[str, str, str, float], None]

Nominator = Mapping[str, Sequence[PodInfo]]
"""``PodNominator.NominatedPodsForNode`` as a mapping: node name -> PodInfos of the pending Pods
nominated to that node (``status.nominatedNodeName``), in nomination order. Only ``.get`` is used,
so a dict kept up to date by the queue works. The Pod being scheduled may be in it (skipped by UID)."""


@dataclass(slots=True)
class Diagnosis:
    """Why nodes were rejected (``framework.Diagnosis``)."""

    node_to_status: dict[str, Status] = field(default_factory=dict)
    absent_nodes_status: Status | None = None
    unschedulable_plugins: set[str] = field(default_factory=set)
    pending_plugins: set[str] = field(default_factory=set)
    pre_filter_msg: str = ""
    post_filter_msg: str = ""

    def add_plugin_status(self, s: Status) -> None:
        if not s.plugin:
            return
        if s.code in (Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE):
            self.unschedulable_plugins.add(s.plugin)
        elif s.code == Code.PENDING:
            self.pending_plugins.add(s.plugin)


def fit_error_message(num_all_nodes: int, d: Diagnosis) -> str:
    """``FitError.Error()``: ``0/N nodes are available: <sorted reason histogram>.`` plus the
    PreFilter message (instead of the histogram) and the PostFilter (preemption) tail."""
    msg = NO_NODE_AVAILABLE_MSG.format(num_all_nodes) + ":"
    if d.pre_filter_msg:
        msg += f" {d.pre_filter_msg}."
    else:
        reasons: dict[str, int] = {}
        for st in d.node_to_status.values():
            for r in st.reasons:
                reasons[r] = reasons.get(r, 0) + 1
        if len(d.node_to_status) < num_all_nodes and d.absent_nodes_status is not None:
            for r in d.absent_nodes_status.reasons:
                reasons[r] = reasons.get(r, 0) + num_all_nodes - len(d.node_to_status)
        hist = sorted(f"{v} {k}" for k, v in reasons.items())
        if hist:
            msg += " " + ", ".join(hist) + "."
    if d.post_filter_msg:
        msg += f" {d.post_filter_msg}"
    return msg


@dataclass(slots=True)
class ScheduleResult:
    """Outcome of one cycle for one Pod (what ``explain`` prints).

    Attributes:
        selected: the chosen node, or None when nothing fits (then ``message`` holds the
            FailedScheduling text and ``diagnosis`` the per-node statuses).
        nodes_evaluated: feasible + rejected nodes looked at (percentageOfNodesToScore may stop
            the search early on large clusters).
        feasible: nodes that passed every Filter, in evaluation order.
        filtered: node -> reasons of the Filter (or PreFilter) that rejected it.
        scores: plugin -> node -> normalized score (0-100) before the weight (a property: built
            from the score columns on first read, so the live loop, which never reads it, does not
            pay for the dicts).
        weights: plugin -> weight.
        skipped: Score plugins whose PreScore returned Skip.
        totals: node -> weighted sum (a property built on first read, as ``scores``).
        nominated_node: set by PostFilter (preemption) when it found room; ``victims`` to delete.
    """

    pod: str
    profile: str
    selected: str | None = None
    nodes_evaluated: int = 0
    feasible: list[str] = field(default_factory=list)
    filtered: dict[str, list[str]] = field(default_factory=dict)
    weights: dict[str, int] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    message: str | None = None
    diagnosis: Diagnosis | None = None
    unresolvable: bool = False
    post_filter: PostFilterResult | None = None
    state: CycleState | None = None
    score_names: list[str] = field(default_factory=list, repr=False)
    """The scored nodes (``feasible`` when Score ran), aligned with ``score_columns`` and ``total_values``."""
    score_columns: list[tuple[str, Sequence[int]]] = field(default_factory=list, repr=False)
    """(plugin, normalized scores aligned with ``score_names``) per Score plugin run, in profile order."""
    total_values: list[int] = field(default_factory=list, repr=False)
    """Weighted totals aligned with ``score_names``."""
    selected_index: int = field(default=-1, repr=False)
    """Position of ``selected`` in ``score_names`` when selectHost chose it (its total is then the
    highest), else -1; the decision record (``app/decisions.py``) uses it instead of searching."""
    _scores: dict[str, dict[str, int]] | None = field(default=None, init=False, repr=False, compare=False)
    _totals: dict[str, int] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def scores(self) -> dict[str, dict[str, int]]:
        """plugin -> node -> normalized score, built from ``score_columns`` once."""
        if self._scores is None:
            names = self.score_names
            self._scores = {plugin: dict(zip(names, col, strict=True)) for plugin, col in self.score_columns}
        return self._scores

    @scores.setter
    def scores(self, value: dict[str, dict[str, int]]) -> None:
        self._scores = value

    @property
    def totals(self) -> dict[str, int]:
        """node -> weighted total, built from ``total_values`` once."""
        if self._totals is None:
            self._totals = dict(zip(self.score_names, self.total_values, strict=True))
        return self._totals

    @totals.setter
    def totals(self, value: dict[str, int]) -> None:
        self._totals = value

    def to_json(self) -> dict[str, Any]:
        """The JSON Lines object of ``py-scheduler explain -o json`` (exact key set)."""
        return {
            "pod": self.pod, "profile": self.profile, "nodes_evaluated": self.nodes_evaluated,
            "filtered": self.filtered, "feasible": self.feasible, "scores": self.scores,
            "weights": self.weights, "skipped": self.skipped, "totals": self.totals,
            "selected": self.selected, "message": self.message,
        }


class Framework:
    """One profile (``frameworkImpl``): its plugins per extension point, weights and
    percentageOfNodesToScore.

    ``plugins`` is the ordered list of (plugin instance, weight) after multiPoint expansion; a plugin
    takes part in every extension point it implements unless ``disabled_points`` says otherwise
    (``{"score": {"ImageLocality"}}``). Weights apply to Score plugins only.
    """

    def __init__(self, profile_name: str, plugins: list[tuple[Any, int]],
                 percentage_of_nodes_to_score: int | None = None,
                 enabled_points: dict[str, list[str]] | None = None,
                 observer: Observer | None = None, nominator: Nominator | None = None,
                 handle: Handle | None = None) -> None:
        self.profile_name = profile_name
        self.percentage_of_nodes_to_score = percentage_of_nodes_to_score
        self.plugins: dict[str, Any] = {p.name: p for p, _ in plugins}
        self.weights: dict[str, int] = {p.name: w for p, w in plugins}
        self.observer = observer

        def point(proto: type, key: str) -> list[Any]:
            if enabled_points is not None and key in enabled_points:
                # Only plugins implementing this extension point: a profile may disable one plugin
                # at "score" while the rest of its list comes from multiPoint.
                return [self.plugins[n] for n in enabled_points[key]
                        if n in self.plugins and isinstance(self.plugins[n], proto)]
            return [p for p, _ in plugins if isinstance(p, proto)]

        self.queue_sort: list[QueueSortPlugin] = point(QueueSortPlugin, "queueSort")
        self.pre_filter_plugins: list[PreFilterPlugin] = point(PreFilterPlugin, "preFilter")
        self.filter_plugins: list[FilterPlugin] = point(FilterPlugin, "filter")
        self.post_filter_plugins: list[PostFilterPlugin] = point(PostFilterPlugin, "postFilter")
        self.pre_score_plugins: list[PreScorePlugin] = point(PreScorePlugin, "preScore")
        self.score_plugins: list[ScorePlugin] = point(ScorePlugin, "score")
        self.reserve_plugins: list[ReservePlugin] = point(ReservePlugin, "reserve")
        # The binding cycle's points (run by py_scheduler.framework.binding_cycle).
        self.permit_plugins: list[PermitPlugin] = point(PermitPlugin, "permit")
        self.pre_bind_plugins: list[PreBindPlugin] = point(PreBindPlugin, "preBind")
        self.bind_plugins: list[BindPlugin] = point(BindPlugin, "bind")
        self.post_bind_plugins: list[PostBindPlugin] = point(PostBindPlugin, "postBind")
        self.waiting_pods = WaitingPods()
        self.activate: Callable[[list[dict[str, Any]]], None] | None = None
        """``Handle.Activate``: move these unscheduled Pods to activeQ (the live loop sets it to the
        queue's ``activate``; None offline). GangScheduling's Permit wakes its group's members with it."""
        """Pods a Permit plugin holds (``waitingPodsMap``); plugins reach it through the framework."""
        self.score_weights = {p.name: self.weights.get(p.name) or 1 for p in self.score_plugins}
        self.record_plugin_metrics = True
        """Whether this cycle reports per-plugin durations to the observer; ``Algorithm.schedule``
        draws it per cycle with probability :data:`PLUGIN_METRICS_SAMPLE_PERCENT` as upstream."""
        self._normalizers: dict[str, NormalizeScorePlugin] = {
            p.name: p for p in self.score_plugins if isinstance(p, NormalizeScorePlugin)}
        self.pre_filter_extensions: list[PreFilterExtensions] = [
            p for p in self.pre_filter_plugins if isinstance(p, PreFilterExtensions)]
        self.nominator: Nominator | None = nominator
        """The pods nominated per node (upstream's ``WithPodNominator``); ``Algorithm.schedule(...,
        nominator=)`` overrides it for one cycle."""
        self.handle: Handle | None = handle
        """The profile's Handle, the one its plugins got at ``create``; its ``profile`` is this
        framework (upstream's frameworkImpl is the Handle) and its ``snapshot`` the cycle's."""
        if handle is not None:
            handle.profile = self
        self._batch_filter: dict[str, Callable[[CycleState, PodInfo, list[NodeInfo]], list[Status] | None]] = {
            p.name: p.filter_nodes for p in self.filter_plugins if isinstance(p, BatchFilterPlugin)}
        self._batch_score: dict[str, Callable[[CycleState, PodInfo, list[NodeInfo]],
                                              tuple[Sequence[int], Status]]] = {
            p.name: p.score_nodes for p in self.score_plugins if isinstance(p, BatchScorePlugin)}
        self.batchable_plugins: list[SignPlugin] = []
        self.enable_signatures = False
        self.batch: OpportunisticBatch | None = None
        self._compute_batchable_plugins()
        self.set_opportunistic_batching(OPPORTUNISTIC_BATCHING_DEFAULT)

    # -- OpportunisticBatching ------------------------------------------------------------------------
    def set_opportunistic_batching(self, enabled: bool) -> None:
        """Turn the ``OpportunisticBatching`` gate on or off for this profile (a new, empty batch
        state when on)."""
        self.batch = OpportunisticBatch(self) if enabled else None

    def _compute_batchable_plugins(self) -> None:
        """``computeBatchablePlugins``: the PreFilter, Filter, PreScore and Score plugins, each once,
        must all be :class:`~py_scheduler.framework.interfaces.SignPlugin`; otherwise signatures are
        off for the profile (py-scheduler has no extenders, which would turn them off too)."""
        seen: set[str] = set()
        unsupported: list[str] = []
        self.enable_signatures = True
        candidates: list[Any] = [*self.pre_filter_plugins, *self.filter_plugins, *self.pre_score_plugins,
                                 *self.score_plugins]
        for pl in candidates:
            if pl.name in seen:
                continue
            seen.add(pl.name)
            if isinstance(pl, SignPlugin):
                self.batchable_plugins.append(pl)
            else:
                unsupported.append(pl.name)
                self.enable_signatures = False
        if unsupported:
            log.info("Disabling signatures for profile because plugins do not support it profile=%s plugins=%s",
                     self.profile_name, unsupported)

    def sign_pod(self, pod: PodInfo, snapshot: SnapshotLister | None = None) -> PodSignature | None:
        """``SignPod``: the Pod's signature in this profile, or None when signatures are off or some
        plugin cannot sign it. Two Pods with equal signatures get the same Filter and Score results
        on the same nodes. Memoized on the PodInfo (a :class:`~py_scheduler.framework.memo.PodMemo`;
        computed at the Pod's first attempt, not when
        it is queued as upstream does). A plugin's ``sign_pod(pod, snapshot) -> (fragments, Status)``
        that fails or raises makes the signature None (logged, never raised)."""
        if not self.enable_signatures:
            return None
        memo = _SIGNATURE_MEMO.peek(pod)
        if memo is not None and memo[0] is self:
            return memo[1]
        sig = self._sign_pod(pod, snapshot)
        _SIGNATURE_MEMO.put(pod, (self, sig))
        return sig

    def _sign_pod(self, pod: PodInfo, snapshot: SnapshotLister | None) -> PodSignature | None:
        fragments: list[SignFragment] = []
        for pl in self.batchable_plugins:
            try:
                frags, s = pl.sign_pod(pod, snapshot)
            except Exception as exc:  # a plugin must never crash the cycle over a signature
                log.error("SignPod failed for plugin plugin=%s pod=%s err=%s", pl.name, pod.key, exc)
                return None
            if not s.is_success():
                if s.code == Code.ERROR:
                    log.error("SignPod failed for plugin plugin=%s pod=%s err=%s", pl.name, pod.key, s.message())
                log.debug("SignPod can't sign pod due to plugin plugin=%s pod=%s status=%s",
                          pl.name, pod.key, s.message())
                return None
            if frags:
                fragments.extend(frags)
        try:
            return canonical_signature(pod.scheduler_name, fragments)
        except (TypeError, ValueError) as exc:
            log.error("SignPod failed to marshal signature object pod=%s err=%s", pod.key, exc)
            return None

    def run_raw_score(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> dict[str, int]:
        """``RunRawScorePlugins``: plugin -> raw (not normalized) score of ``node_info`` for the Score
        plugins not skipped in ``state``.

        Raises:
            SchedulingError: a Score plugin failed.
        """
        out: dict[str, int] = {}
        for pl in self.score_plugins:
            if pl.name in state.skip_score:
                continue
            sc, s = pl.score(state, pod, node_info)
            if not s.is_success():
                raise SchedulingError(f'plugin "{pl.name}" failed with: {s.message()}')
            out[pl.name] = sc
        return out

    def normalize_scores(self, state: CycleState, pod: PodInfo, names: list[str],
                         raw: dict[str, list[int]]) -> list[int]:
        """``NormalizeScores``: the weighted totals of ``names`` (aligned lists) from their raw
        scores (``raw[plugin][i]``; a plugin missing there counts 0), normalized over these nodes,
        for the Score plugins not skipped in ``state``. ``raw`` is not modified.

        Raises:
            SchedulingError: a NormalizeScore failed or a normalized score is outside [0, 100].
        """
        cols: list[tuple[str, Sequence[int]]] = []
        for pl in self.score_plugins:
            if pl.name in state.skip_score:
                continue
            col = raw.get(pl.name)
            values = list(col) if col is not None else [0] * len(names)
            cols.append((pl.name, self._normalized(state, pod, pl.name, names, values)))
        return self._weighted_totals(cols, len(names))[1]

    def _normalized(self, state: CycleState, pod: PodInfo, plugin: str, names: list[str],
                    values: Sequence[int]) -> Sequence[int]:
        """``values`` (plugin ``plugin``'s raw scores of ``names``, aligned) after its NormalizeScore,
        or ``values`` itself when it has none.

        Raises:
            SchedulingError: the NormalizeScore failed (upstream's message).
        """
        normalizer = self._normalizers.get(plugin)
        if normalizer is None:
            return values
        scores = dict(zip(names, values, strict=True))
        s = normalizer.normalize_score(state, pod, scores)
        if not s.is_success():
            raise SchedulingError(
                f'running Normalize on Score plugins: plugin "{plugin}" failed with: {s.message()}')
        return list(map(scores.__getitem__, names))

    # -- helpers ----------------------------------------------------------------------------------
    def _observe(self, point: str, plugin: str, status: Status | None, t0: float) -> None:
        # Per-plugin durations only in sampled cycles (upstream's ShouldRecordPluginMetrics);
        # extension-point durations always.
        if self.observer is not None and (not plugin or self.record_plugin_metrics):
            code = "Success" if status is None else _code_name(status.code)
            self.observer(point, plugin, code, time.perf_counter() - t0)

    def less(self, a: QueuedPodInfo, b: QueuedPodInfo) -> bool:
        """QueueSort: the first QueueSort plugin decides (PrioritySort in the default profile)."""
        if self.queue_sort:
            return self.queue_sort[0].less(a, b)
        return a.timestamp < b.timestamp

    # -- extension points -----------------------------------------------------------------------
    def run_pre_filter(self, state: CycleState, pod: PodInfo,
                       nodes: list[NodeInfo]) -> tuple[PreFilterResult, Status, set[str]]:
        """``RunPreFilterPlugins``: returns (merged node-name set or None, status, plugins that
        narrowed the node set). Skip puts the plugin in ``state.skip_filter``."""
        result: PreFilterResult = None
        plugins_with_nodes: set[str] = set()
        return_status = Status.success()
        for pl in self.pre_filter_plugins:
            t0 = time.perf_counter()
            r, s = pl.pre_filter(state, pod, nodes)
            self._observe("PreFilter", pl.name, s, t0)
            if s.is_skip():
                state.skip_filter.add(pl.name)
                continue
            if not s.is_success():
                s.plugin = pl.name
                if s.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                    return None, s, set()
                if s.code == Code.UNSCHEDULABLE:
                    return_status = s
                    continue
                raise SchedulingError(f'running PreFilter plugin "{pl.name}": {s.message()}')
            if r is not None:
                plugins_with_nodes.add(pl.name)
                result = set(r) if result is None else result & r
                if not result:
                    names = sorted(plugins_with_nodes)
                    msg = (f"node(s) didn't satisfy plugin {names[0]}" if len(names) == 1 else
                           f"node(s) didn't satisfy plugin(s) [{' '.join(names)}] simultaneously")
                    return result, Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [msg]), plugins_with_nodes
        return result, return_status, plugins_with_nodes

    def run_filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo,
                   plugins: Sequence[FilterPlugin] | None = None) -> Status:
        """``RunFilterPlugins``: the first non-success status, tagged with its plugin.

        ``plugins``: a subsequence of ``filter_plugins`` to run instead of all of them (a caller
        that knows the others pass, e.g. preemption's reprieve checks); None for all."""
        for pl in self.filter_plugins if plugins is None else plugins:
            if pl.name in state.skip_filter:
                continue
            s = pl.filter(state, pod, node_info)
            if not s.is_success():
                if not s.is_rejected():
                    raise SchedulingError(f'running "{pl.name}" filter plugin: {s.message()}')
                if s.plugin != pl.name:
                    s = Status(s.code, list(s.reasons), pl.name)
                return s
        return Status.success()

    def filter_chunk(self, active: Sequence[Any], state: CycleState, pod: PodInfo,
                     nodes: list[NodeInfo]) -> list[Status | None] | None:
        """:meth:`run_filter` over ``nodes`` with the plugins ``active`` in this cycle (those not in
        ``state.skip_filter``, in order), evaluated plugin by plugin on the nodes still passing.

        A plugin may offer ``filter_nodes(state, pod, nodes) -> list[Status] | None`` (None: every
        node passes), returning for each node what its ``filter`` would; others are called node by
        node. Returns, per node, None when it passed every plugin or the status of the first plugin
        that rejected it (tagged with that plugin, as :meth:`run_filter`); None when all passed.

        Raises:
            SchedulingError: a plugin returned Error for some node; the chunk is then re-run node by
                node so the error raised is the one :meth:`run_filter` raises first.
        """
        out: list[Status | None] | None = None
        todo = nodes
        idx: list[int] | None = None  # positions in ``nodes`` of ``todo`` (None: all, in order)
        for pl in active:
            if not todo:
                break
            batch = self._batch_filter.get(pl.name)
            if batch is not None:
                got: list[Status] | None = batch(state, pod, todo)
                if got is None:
                    continue
            else:
                f = pl.filter
                got = [f(state, pod, ni) for ni in todo]
            keep: list[int] = []
            last: Status | None = None  # a plugin may return one Status object for many nodes:
            tagged: Status | None = None  # it is checked and tagged once
            for j, s in enumerate(got):
                if not s.code:
                    keep.append(j)
                    continue
                if s is not last:
                    if not s.is_rejected():
                        for ni in nodes:  # re-run node by node: raise the error run_filter raises first
                            self.run_filter(state, pod, ni)
                        raise SchedulingError(f'running "{pl.name}" filter plugin: {s.message()}')
                    last = s
                    tagged = s if s.plugin == pl.name else Status(s.code, list(s.reasons), pl.name)
                if out is None:
                    out = [None] * len(nodes)
                out[j if idx is None else idx[j]] = tagged
            if len(keep) != len(todo):
                todo = [todo[j] for j in keep]
                idx = keep if idx is None else [idx[j] for j in keep]
        return out

    def nominated_pods_for_node(self, node_name: str) -> Sequence[PodInfo]:
        """``NominatedPodsForNode``: PodInfos nominated to ``node_name`` (empty without a nominator)."""
        if self.nominator is None:
            return ()
        return self.nominator.get(node_name) or ()

    def run_pre_filter_extension_add_pod(self, state: CycleState, pod: PodInfo, to_add: PodInfo,
                                         node_info: NodeInfo) -> Status:
        """``RunPreFilterExtensionAddPod``: every PreFilterExtensions plugin not skipped in this cycle
        accounts for ``to_add`` on ``node_info``; the first failure becomes an Error status
        ``running AddPod on PreFilter plugin "<name>": <message>``."""
        for pl in self.pre_filter_extensions:
            if pl.name in state.skip_filter:
                continue
            s = pl.add_pod(state, pod, to_add, node_info)
            if not s.is_success():
                return Status(Code.ERROR, [f'running AddPod on PreFilter plugin "{pl.name}": {s.message()}'],
                              pl.name)
        return Status.success()

    def run_pre_filter_extension_remove_pod(self, state: CycleState, pod: PodInfo, to_remove: PodInfo,
                                            node_info: NodeInfo) -> Status:
        """``RunPreFilterExtensionRemovePod``: as :meth:`run_pre_filter_extension_add_pod` for a Pod
        leaving ``node_info`` (``running RemovePod on PreFilter plugin "<name>": <message>``)."""
        for pl in self.pre_filter_extensions:
            if pl.name in state.skip_filter:
                continue
            s = pl.remove_pod(state, pod, to_remove, node_info)
            if not s.is_success():
                return Status(Code.ERROR, [f'running RemovePod on PreFilter plugin "{pl.name}": {s.message()}'],
                              pl.name)
        return Status.success()

    def run_filter_with_nominated_pods(self, state: CycleState, pod: PodInfo, node_info: NodeInfo,
                                       plugins: Sequence[FilterPlugin] | None = None) -> Status:
        """``RunFilterPluginsWithNominatedPods``: Filter with the equal-or-higher-priority Pods
        nominated to the node added (cloned state and NodeInfo), then, if that passed and some Pod
        was added, again without them. Returns the last status run. ``plugins``: as
        :meth:`run_filter`.

        Raises:
            SchedulingError: a Filter plugin or a PreFilterExtensions AddPod failed with an error.
        """
        status = Status.success()
        pods_added = False
        for i in range(2):
            state_to_use, info_to_use = state, node_info
            if i == 0:
                pods_added, state_to_use, info_to_use = self._add_ge_nominated_pods(state, pod, node_info)
            elif not pods_added or not status.is_success():
                break
            status = self.run_filter(state_to_use, pod, info_to_use, plugins)
        return status

    def _add_ge_nominated_pods(self, state: CycleState, pod: PodInfo,
                               node_info: NodeInfo) -> tuple[bool, CycleState, NodeInfo]:
        """``addGENominatedPods``: (any added, state, NodeInfo) with the nominated Pods of priority
        >= the Pod's (other than the Pod itself) added to clones.

        Raises:
            SchedulingError: a PreFilterExtensions AddPod failed.
        """
        nominated = self.nominated_pods_for_node(node_info.name)
        if not nominated:
            return False, state, node_info
        info_out = node_info.clone()
        state_out = state.clone()
        added = False
        for pi in nominated:
            if pi.priority >= pod.priority and pi.uid != pod.uid:
                info_out.add_pod(pi)
                s = self.run_pre_filter_extension_add_pod(state_out, pod, pi, info_out)
                if not s.is_success():
                    raise SchedulingError(s.message())
                added = True
        return added, state_out, info_out

    def run_pre_score(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> None:
        """``RunPreScorePlugins``: Skip puts the plugin in ``state.skip_score``.

        Raises:
            SchedulingError: a PreScore plugin returned Error.
        """
        for pl in self.pre_score_plugins:
            t0 = time.perf_counter()
            s = pl.pre_score(state, pod, nodes)
            self._observe("PreScore", pl.name, s, t0)
            if s.is_skip():
                state.skip_score.add(pl.name)
                continue
            if not s.is_success():
                raise SchedulingError(f'running PreScore plugin "{pl.name}": {s.message()}')

    def run_score(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo],
                  raw_out: dict[str, list[int]] | None = None) -> tuple[dict[str, dict[str, int]], dict[str, int]]:
        """``RunScorePlugins`` + ``normalizeScores``: (plugin -> node -> normalized score, node ->
        weighted total). Plugins whose PreScore returned Skip are left out. With ``raw_out`` each
        plugin's raw scores (before NormalizeScore, in ``nodes`` order) are stored there too
        (``NodePluginScores.RawScores``, which OpportunisticBatching re-normalizes). The dict form of
        :meth:`score_columns`.

        Raises:
            SchedulingError: a Score / NormalizeScore error or a score outside [0, 100].
        """
        names = [ni.name for ni in nodes]
        cols, totals = self.score_columns(state, pod, nodes, names, raw_out)
        return ({plugin: dict(zip(names, col, strict=True)) for plugin, col in cols},
                dict(zip(names, totals, strict=True)))

    def score_columns(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo], names: list[str],
                      raw_out: dict[str, list[int]] | None = None) -> tuple[list[tuple[str, Sequence[int]]], list[int]]:
        """:meth:`run_score` as columns: ([(plugin, normalized scores aligned with ``nodes``)], weighted
        totals aligned with ``nodes``); ``names`` are the nodes' names. The live cycle's form: no
        per-plugin dicts except the one a NormalizeScore plugin is handed (its interface edits a
        node -> score dict in place). A column may be a ``bytes`` copy of the plugin's scores.

        As upstream (``RunScorePlugins``): every Score plugin runs, then every NormalizeScore, then
        the range check plugin by plugin in profile order (the first plugin with a score outside
        [0, ``MAX_NODE_SCORE``] fails the cycle, naming that plugin and its first bad score in node
        order) and the weighted sum.

        Raises:
            SchedulingError: a Score / NormalizeScore error or a score outside [0, 100].
            ValueError: a plugin's ``score_nodes`` returned a list whose length differs from ``nodes``.
        """
        n = len(nodes)
        record = self.observer is not None and self.record_plugin_metrics
        cols: list[tuple[str, Sequence[int]]] = []
        for pl in self.score_plugins:
            if pl.name in state.skip_score:
                continue
            t0 = time.perf_counter() if record else 0.0
            batch = self._batch_score.get(pl.name)
            values: Sequence[int]
            if batch is not None:
                # Optional batch form: the scores ``score`` would give, in node order (same Status).
                values, s = batch(state, pod, nodes)
                if not s.is_success():
                    raise SchedulingError(f'running Score plugins: plugin "{pl.name}" failed with: {s.message()}')
                if len(values) != n:
                    raise ValueError(f"Score plugin {pl.name} returned {len(values)} scores for {n} nodes")
            else:
                one_by_one: list[int] = []
                f = pl.score
                for ni in nodes:
                    sc, s = f(state, pod, ni)
                    if s.code:
                        raise SchedulingError(f'running Score plugins: plugin "{pl.name}" failed with: {s.message()}')
                    one_by_one.append(sc)
                values = one_by_one
            if raw_out is not None:
                raw_out[pl.name] = list(values)
            values = self._normalized(state, pod, pl.name, names, values)
            if record:
                self._observe("Score", pl.name, None, t0)
            cols.append((pl.name, values))
        return self._weighted_totals(cols, n)

    def _weighted_totals(self, cols: list[tuple[str, Sequence[int]]],
                         n: int) -> tuple[list[tuple[str, Sequence[int]]], list[int]]:
        """Range check (plugin by plugin, in order) and weighted sum of normalized columns of length
        ``n``. Returns (the columns, each as an immutable copy, the totals).

        Fast path: a column of ints in [0, 100] packs into ``bytes`` (``bytes()`` rejects anything
        outside [0, 255] or not an integer; ``translate`` deleting the bytes 0-100 leaves nothing
        iff every score is in range) and the totals are one numpy product of the weights and the
        packed columns. A column that does not pack gets the plain check (and, when it passes, e.g.
        float scores, every total is summed in Python as before).

        Raises:
            SchedulingError: a score outside [0, ``MAX_NODE_SCORE``] (upstream's message).
        """
        out: list[tuple[str, Sequence[int]]] = []
        packed = True
        for name, values in cols:
            col: Sequence[int] | None
            if type(values) is not list:  # bytes() of a buffer (a numpy array) would copy its memory
                values = list(values)
            try:
                col = bytes(values)
            except (TypeError, ValueError):
                col = None
            if col is None or col.translate(None, _VALID_SCORE_BYTES):
                bad = next((v for v in values if v > MAX_NODE_SCORE or v < 0), None)
                if bad is not None:
                    raise SchedulingError(
                        f'applying score defaultWeights on Score plugins: plugin "{name}" returns an invalid score '
                        f"{bad}, it should in the range of [0, {MAX_NODE_SCORE}] after normalizing")
                col = list(values)
                packed = False
            out.append((name, col))
        if not out:
            return out, [0] * n
        weights = self.score_weights
        if packed:
            matrix = np.frombuffer(b"".join(cast(bytes, c) for _, c in out), dtype=np.uint8).reshape(len(out), n)
            w = np.fromiter((weights[name] for name, _ in out), dtype=np.int64, count=len(out))
            totals: list[int] = (w @ matrix.astype(np.int64)).tolist()
            return out, totals
        acc = [0] * n
        for name, col in out:
            wt = weights[name]
            acc = list(map(operator.add, acc, col if wt == 1 else map(operator.mul, col, repeat(wt))))
        return out, acc

    def run_post_filter(self, state: CycleState, pod: PodInfo,
                        node_statuses: dict[str, Status]) -> tuple[PostFilterResult | None, Status]:
        """``RunPostFilterPlugins``: the first plugin that succeeds wins; otherwise the messages of
        the rejecting plugins are joined (they form the FailedScheduling tail)."""
        reasons: list[str] = []
        result: PostFilterResult | None = None  # the last rejecting plugin's result (clears a nomination)
        for pl in self.post_filter_plugins:
            t0 = time.perf_counter()
            r, s = pl.post_filter(state, pod, node_statuses)
            self._observe("PostFilter", pl.name, s, t0)
            if s.is_success():
                return r, s
            if s.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                return r, Status(s.code, s.reasons, pl.name)
            if not s.is_rejected():
                return None, Status(Code.ERROR, s.reasons, pl.name)
            if r is not None:
                result = r
            reasons.extend(s.reasons)
        return result, Status(Code.UNSCHEDULABLE, reasons)

    def run_reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        """``RunReservePluginsReserve``; on failure the caller runs :meth:`run_unreserve`. A rejection
        comes back as the plugin returned it; any other failure as an Error ``running Reserve plugin
        "<name>": <message>``."""
        for pl in self.reserve_plugins:
            s = pl.reserve(state, pod, node_name)
            if not s.is_success():
                if not s.is_rejected():
                    return Status(Code.ERROR, [f'running Reserve plugin "{pl.name}": {s.message()}'], pl.name)
                return Status(s.code, s.reasons, pl.name)
        return Status.success()

    def run_unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        """``RunReservePluginsUnreserve``: in reverse order."""
        for pl in reversed(self.reserve_plugins):
            pl.unreserve(state, pod, node_name)


_CODE_NAMES = {Code.SUCCESS: "Success", Code.ERROR: "Error", Code.UNSCHEDULABLE: "Unschedulable",
               Code.UNSCHEDULABLE_AND_UNRESOLVABLE: "UnschedulableAndUnresolvable", Code.WAIT: "Wait",
               Code.SKIP: "Skip", Code.PENDING: "Pending"}


def _code_name(c: Code) -> str:
    return _CODE_NAMES[c]


def num_feasible_nodes_to_find(percentage: int | None, global_percentage: int, num_all_nodes: int) -> int:
    """``numFeasibleNodesToFind``: all nodes below 100; otherwise ``N * p / 100`` (integer
    division) with the adaptive ``p = 50 - N/125`` (min 5) when the percentage is 0, never fewer
    than 100."""
    if num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND:
        return num_all_nodes
    p = percentage if percentage is not None else global_percentage
    if p == 0:
        p = max(50 - num_all_nodes // 125, MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND)
    n = num_all_nodes * p // 100
    return max(n, MIN_FEASIBLE_NODES_TO_FIND)


class Algorithm:
    """The generic scheduler of one process: rotating start index and tie-break randomness.

    ``global_percentage_of_nodes_to_score`` is the KubeSchedulerConfiguration top-level value (0:
    adaptive). ``rng`` breaks score ties (seed it for reproducible ``simulate`` runs).
    """

    def __init__(self, global_percentage_of_nodes_to_score: int = 0, rng: random.Random | None = None) -> None:
        self.global_percentage = global_percentage_of_nodes_to_score
        self.next_start_node_index = 0
        self.rng = rng or random.Random()

    def schedule(self, fw: Framework, snapshot: SnapshotLister, pod: PodInfo, *,
                 explain: bool = False, run_post_filter: bool = True,
                 nominator: Nominator | None = None, cycle: int | None = None,
                 placement: list[NodeInfo] | None = None) -> ScheduleResult:
        """Run one scheduling cycle for ``pod`` on ``snapshot`` (``schedulePod``).

        With ``explain`` every feasible node is scored even when only one is feasible. On no
        feasible node the result carries the FitError message (and PostFilter's verdict: the
        message tail, and ``post_filter`` -- a nominated node with victims, or
        ``nominated_node_name == ""`` meaning "clear the Pod's nomination").

        ``nominator`` (node -> nominated PodInfos) is used for this cycle instead of
        ``fw.nominator``; with neither, Filter sees no nominated Pods. A Pod whose
        ``status.nominatedNodeName`` names a node of the snapshot is tried on that node alone first
        (``evaluateNominatedNode``).

        ``placement`` (a pod group cycle's placement: NodeInfos of ``snapshot``) limits the nodes tried
        to those (``ListNodesInPlacement`` / ``GetNodeInPlacement``: a nominated or hinted node outside
        it is ignored; "0/N nodes" counts the placement); plugins still see the whole ``snapshot``. The
        Pod's CycleState then carries :data:`PLACEMENT_STATE_KEY`.

        ``cycle`` is the queue's scheduling cycle (``SchedulingQueue.SchedulingCycle``, one per Pod
        popped). With it and the profile's OpportunisticBatching on (``fw.batch``), the Pod may be
        placed on a node hint from the previous cycle's ranking (``GetNodeHint`` after PreFilter,
        tried like a nominated node) and this cycle's ranking is stored for the next Pod
        (``StoreScheduleResults``). None (explain, tests) never batches.

        Raises:
            SchedulingError: a plugin failed with an internal error (not a rejection).
        """
        if nominator is None:
            return self._schedule(fw, snapshot, pod, explain, run_post_filter, cycle, placement)
        saved = fw.nominator
        fw.nominator = nominator
        try:
            return self._schedule(fw, snapshot, pod, explain, run_post_filter, cycle, placement)
        finally:
            fw.nominator = saved

    def _schedule(self, fw: Framework, snapshot: SnapshotLister, pod: PodInfo, explain: bool,
                  run_post_filter: bool, cycle: int | None = None,
                  placement: list[NodeInfo] | None = None) -> ScheduleResult:
        res = ScheduleResult(pod=pod.key, profile=fw.profile_name)
        fw.record_plugin_metrics = _metrics_sampler.randrange(100) < PLUGIN_METRICS_SAMPLE_PERCENT
        res.weights = dict(fw.score_weights)
        state = CycleState(snapshot)
        if fw.handle is not None:
            fw.handle.snapshot = snapshot
        res.state = state
        all_nodes = snapshot.node_info_list if placement is None else placement
        if placement is not None:
            state.data[PLACEMENT_STATE_KEY] = frozenset(ni.name for ni in placement)
        n_all = len(all_nodes)
        d = Diagnosis()
        if n_all == 0:
            res.message = "no nodes available to schedule pods"
            res.diagnosis = d
            return res

        batch = fw.batch if cycle is not None else None
        signature: PodSignature | None = None
        hint = ""
        t0 = time.perf_counter()
        pre_res, s, narrowing = fw.run_pre_filter(state, pod, all_nodes)
        fw._observe("PreFilter", "", s, t0)
        feasible: list[NodeInfo] = []
        if not s.is_success():
            d.absent_nodes_status = s
            d.pre_filter_msg = s.message()
            d.add_plugin_status(s)
        else:
            if batch is not None and cycle is not None:
                signature = fw.sign_pod(pod, snapshot)
                hint = batch.get_node_hint(pod, signature, state, cycle, snapshot, self.rng)
            feasible = self._evaluate_nominated_node(fw, snapshot, state, pod, d, n_all, hint)
        if s.is_success() and not feasible:
            nodes = all_nodes
            if pre_res is not None:
                nodes = [ni for ni in all_nodes if ni.name in pre_res]
                d.absent_nodes_status = Status(
                    Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
                    [f"node(s) didn't satisfy plugin(s) [{' '.join(sorted(narrowing))}]"])
            feasible = self._find_nodes_that_pass_filters(fw, state, pod, nodes, d, n_all)
        res.nodes_evaluated = len(feasible) + len(d.node_to_status)
        res.feasible = [n.name for n in feasible]
        res.filtered = {n: list(st.reasons) for n, st in d.node_to_status.items()}
        res.diagnosis = d  # also when a node fits: explain names the plugin that rejected each other node
        if pre_res is not None or not s.is_success():
            absent = d.absent_nodes_status
            if absent is not None:
                feasible_names = set(res.feasible)  # a set: the list made this O(nodes x feasible)
                for ni in all_nodes:
                    if ni.name not in d.node_to_status and ni.name not in feasible_names:
                        res.filtered[ni.name] = list(absent.reasons)

        if not feasible:
            if run_post_filter and fw.post_filter_plugins:
                statuses = dict(d.node_to_status)
                if d.absent_nodes_status is not None:
                    for ni in all_nodes:
                        statuses.setdefault(ni.name, d.absent_nodes_status)
                pf, pfs = fw.run_post_filter(state, pod, statuses)
                # As schedule_one.go: the message is kept whatever the code (a successful preemption
                # reads "preemption: found a potential placement for pod on node X, preempting N victims").
                d.post_filter_msg = pfs.message()
                res.post_filter = pf
            res.message = fit_error_message(n_all, d)
            res.diagnosis = d
            res.unresolvable = all(st.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
                                   for st in d.node_to_status.values()) and (
                d.absent_nodes_status is None or d.absent_nodes_status.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE)
            return res

        if len(feasible) == 1 and not explain:
            res.selected = feasible[0].name
            if batch is not None and cycle is not None:
                batch.store_schedule_results(signature, hint, res.selected, None, cycle)
            return res

        t0 = time.perf_counter()
        fw.run_pre_score(state, pod, feasible)
        fw._observe("PreScore", "", None, t0)
        res.skipped = [p.name for p in fw.score_plugins if p.name in state.skip_score]
        t0 = time.perf_counter()
        raw: dict[str, list[int]] | None = {} if batch is not None and signature is not None else None
        names = res.feasible
        res.score_names = names
        res.score_columns, res.total_values = fw.score_columns(state, pod, feasible, names, raw)
        fw._observe("Score", "", None, t0)
        if explain:
            _ = res.scores, res.totals  # explain reads them: built now, from this cycle's columns
        if log.isEnabledFor(logging.DEBUG):
            for plugin, scores in res.scores.items():
                w = fw.score_weights[plugin]
                for node, sc in scores.items():
                    log.debug("Plugin scored node for pod pod=%s plugin=%s node=%s score=%d",
                              pod.key, plugin, node, sc * w)
            for node, total in res.totals.items():
                log.debug("Calculated node's final score for pod pod=%s node=%s score=%d",
                          pod.key, node, total)
        res.selected_index = self._select_host(names, res.total_values)
        res.selected = names[res.selected_index]
        if batch is not None and cycle is not None:
            batch.store_schedule_results(signature, hint, res.selected,
                                         self._other_nodes(names, res.selected, res.total_values, raw), cycle)
        return res

    def _other_nodes(self, names: list[str], selected: str, totals: list[int],
                     raw: dict[str, list[int]] | None) -> SortedScoredNodes:
        """The ranking stored for OpportunisticBatching: every feasible node but ``selected`` (what
        upstream's heap holds after popping the best), with its raw scores (only kept when the Pod
        has a signature; ``raw`` None: an unusable ranking that only reports its length). ``names``
        and ``totals`` are aligned (the feasible nodes in evaluation order)."""
        k = names.index(selected)
        others = names[:k] + names[k + 1:]
        cols: dict[str, list[int]] = {}
        if raw is not None:
            for plugin, col in raw.items():
                c = list(col)
                del c[k]
                cols[plugin] = c
        return SortedScoredNodes(others, totals[:k] + totals[k + 1:], cols, self.rng)

    def _evaluate_nominated_node(self, fw: Framework, snapshot: SnapshotLister, state: CycleState, pod: PodInfo,
                                 d: Diagnosis, n_all: int, hint: str = "") -> list[NodeInfo]:
        """``evaluateNominatedNode``: the Pod's ``status.nominatedNodeName`` (else the batch ``hint``)
        alone through Filter (PreFilterResult not applied, start index not advanced). [node] when it
        fits, else [] (a rejection stays in the Diagnosis, as upstream). A missing node or malformed
        value is ignored."""
        status = pod.pod.get("status")
        nnn = status.get("nominatedNodeName") if isinstance(status, dict) else None
        if not isinstance(nnn, str) or not nnn:
            nnn = hint
        if not nnn:
            return []
        ni = snapshot.node_info_map.get(nnn)
        in_placement = state.data.get(PLACEMENT_STATE_KEY)
        if ni is None or (isinstance(in_placement, frozenset) and nnn not in in_placement):
            return []  # GetNodeInPlacement: not in the snapshot, or outside the pod group's placement
        return self._find_nodes_that_pass_filters(fw, state, pod, [ni], d, n_all, advance=False)

    def _find_nodes_that_pass_filters(self, fw: Framework, state: CycleState, pod: PodInfo,
                                      nodes: list[NodeInfo], d: Diagnosis, n_all: int,
                                      advance: bool = True) -> list[NodeInfo]:
        """``findNodesThatPassFilters``: nodes from the rotating start index until enough feasible
        nodes are found (Filter with nominated Pods); updates ``next_start_node_index`` by the
        number of nodes processed unless ``advance`` is False."""
        num = len(nodes)
        if num == 0:
            return []
        to_find = num_feasible_nodes_to_find(fw.percentage_of_nodes_to_score, self.global_percentage, num)
        if not fw.score_plugins:
            to_find = 1
        feasible: list[NodeInfo] = []
        start = self.next_start_node_index % num
        t0 = time.perf_counter()
        if fw.nominator:
            for i in range(num):
                ni = nodes[(start + i) % num]
                st = fw.run_filter_with_nominated_pods(state, pod, ni)
                if st.is_success():
                    feasible.append(ni)
                    if len(feasible) >= to_find:
                        break
                else:
                    d.node_to_status[ni.name] = st
                    d.add_plugin_status(st)
        else:
            # No nominated Pods: Filter runs plugin by plugin over chunks of nodes. A chunk holds as
            # many nodes as feasible ones are still missing, so the node-by-node search would have
            # evaluated every node of it too: the evaluated nodes, their statuses and order are the same.
            active = [pl for pl in fw.filter_plugins if pl.name not in state.skip_filter]
            ordered = nodes[start:] + nodes[:start] if start else nodes
            pos = 0
            while pos < num and len(feasible) < to_find:
                chunk = ordered[pos:pos + (to_find - len(feasible))]
                pos += len(chunk)
                statuses = fw.filter_chunk(active, state, pod, chunk)
                if statuses is None:
                    feasible.extend(chunk)
                    continue
                added: Status | None = None
                for ni, fst in zip(chunk, statuses, strict=True):
                    if fst is None:
                        feasible.append(ni)
                    else:
                        d.node_to_status[ni.name] = fst
                        if fst is not added:  # a Status shared by many nodes counts its plugin once
                            d.add_plugin_status(fst)
                            added = fst
        fw._observe("Filter", "", None, t0)
        if advance:
            processed = len(feasible) + len(d.node_to_status)
            self.next_start_node_index = (self.next_start_node_index + processed) % max(n_all, 1)
        return feasible

    def _select_host(self, names: list[str], totals: list[int]) -> int:
        """The position of the highest total; ties are broken uniformly at random (``selectHost``).
        ``names`` and ``totals`` are aligned, in evaluation order (the order ties are drawn from). The
        draw is made over the tied names, so any ``rng`` (e.g. the parity runner's, which picks the
        smallest name as the oracle does) chooses the same node whether or not its position is kept."""
        best = max(totals)
        if totals.count(best) == 1:
            return totals.index(best)
        tied = list(compress(range(len(totals)), map(operator.eq, totals, repeat(best))))
        tied_names = [names[i] for i in tied]
        return tied[tied_names.index(self.rng.choice(tied_names))]
