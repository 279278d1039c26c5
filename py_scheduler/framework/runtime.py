"""A profile's plugin set and the runners of its extension points (:class:`Framework`); the cycle that
drives them is :mod:`.algorithm`.

Upstream: ``pkg/scheduler/framework/runtime/framework.go`` (RunPreFilterPlugins, RunFilterPlugins,
RunPreScorePlugins, RunScorePlugins, normalizeScores: the order, the Skip rules, the score range
check, weights).

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
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from itertools import repeat
from typing import Any, cast

import numpy as np

from py_scheduler.framework import binding_cycle as bc
from py_scheduler.framework.batch import (
    OpportunisticBatch,
    PodSignature,
    SignFragment,
    canonical_signature,
)
from py_scheduler.framework.binding_cycle import WaitingPods
from py_scheduler.framework.errors import SchedulingError as SchedulingError
from py_scheduler.framework.handle import Handle
from py_scheduler.framework.interfaces import (
    AllocationReporter,
    AsyncPreemptionPlugin,
    BatchFilterPlugin,
    BatchNormalizeScorePlugin,
    BatchScorePlugin,
    BindPlugin,
    FilterPlugin,
    NodeShards,
    NormalizeScorePlugin,
    PermitPlugin,
    PodGroupDryRun,
    PodGroupInfo,
    PodGroupPostFilterPlugin,
    PodGroupPostFilterResult,
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
        self.pod_group_post_filter_plugins: list[PodGroupPostFilterPlugin] = point(PodGroupPostFilterPlugin,
                                                                                   "postFilter")
        self.pre_score_plugins: list[PreScorePlugin] = point(PreScorePlugin, "preScore")
        self.score_plugins: list[ScorePlugin] = point(ScorePlugin, "score")
        self.reserve_plugins: list[ReservePlugin] = point(ReservePlugin, "reserve")
        # The binding cycle's points (run by py_scheduler.framework.binding_cycle).
        self.permit_plugins: list[PermitPlugin] = point(PermitPlugin, "permit")
        self.pre_bind_plugins: list[PreBindPlugin] = point(PreBindPlugin, "preBind")
        self.bind_plugins: list[BindPlugin] = point(BindPlugin, "bind")
        self.post_bind_plugins: list[PostBindPlugin] = point(PostBindPlugin, "postBind")
        self.waiting_pods = WaitingPods()
        """Pods a Permit plugin holds (``waitingPodsMap``); plugins reach it through the Handle."""
        self.score_weights = {p.name: self.weights.get(p.name) or 1 for p in self.score_plugins}
        self.evaluations: dict[str, Counter[str]] = {
            point: Counter(dict.fromkeys((p.name for p in pls), 0)) for point, pls in (
                ("PreFilter", self.pre_filter_plugins), ("Filter", self.filter_plugins),
                ("PreScore", self.pre_score_plugins), ("Score", self.score_plugins))}
        """extension point -> plugin -> calls (``scheduler_plugin_evaluation_total``, framework.go's
        instrumented plugins): PreFilter and PreScore once per cycle, Filter and Score once per node
        (node by node or a batch form's nodes; a node a worker filtered is counted from its verdict)."""
        self.record_plugin_metrics = True
        """Whether this cycle reports per-plugin durations to the observer; ``Algorithm.schedule``
        draws it per cycle with probability :data:`.algorithm.PLUGIN_METRICS_SAMPLE_PERCENT` as upstream."""
        self._normalizers: dict[str, NormalizeScorePlugin] = {
            p.name: p for p in self.score_plugins if isinstance(p, NormalizeScorePlugin)}
        self._column_normalizers: dict[str, BatchNormalizeScorePlugin] = {
            p.name: p for p in self.score_plugins if isinstance(p, BatchNormalizeScorePlugin)}
        self.pre_filter_extensions: list[PreFilterExtensions] = [
            p for p in self.pre_filter_plugins if isinstance(p, PreFilterExtensions)]
        self.allocation_reporters: list[AllocationReporter] = [
            p for p, _ in plugins if isinstance(p, AllocationReporter)]
        """Decided once, as every extension point: a Protocol ``isinstance`` costs tens of microseconds."""
        self.preemption_observer: Callable[[str, str, float], None] | None = None
        """Called ``(preemptor "pod" or "podgroup", status code name, seconds)`` after each dry run of
        a preemption plugin (:class:`AsyncPreemptionPlugin`) at PostFilter or PodGroupPostFilter:
        ``scheduler_preemption_evaluation_duration_seconds``, ``scheduler_workload_preemption_attempts_total``."""
        self._preemption_plugins = frozenset(p.name for p in (*self.post_filter_plugins,
                                                              *self.pod_group_post_filter_plugins)
                                             if isinstance(p, AsyncPreemptionPlugin))
        self.nominator: Nominator | None = nominator
        """The pods nominated per node (upstream's ``WithPodNominator``): given here or connected once
        (:meth:`connect_nominator`), never swapped per cycle."""
        self.shards: NodeShards | None = None
        """Filter and Score on more cores (upstream's ``parallelism``), connected once
        (:meth:`connect_shards`); None: every node is filtered and scored on the cycle's own thread."""
        self.handle: Handle = handle if handle is not None else Handle.detached()
        """The profile's Handle, the one its plugins got at ``create`` (a detached one when None); its
        ``profile`` is this framework (upstream's frameworkImpl is the Handle), bound here once."""
        self.handle.bind_profile(self)
        self._batch_filter: dict[str, Callable[[CycleState, PodInfo, list[NodeInfo]], list[Status] | None]] = {
            p.name: p.filter_nodes for p in self.filter_plugins if isinstance(p, BatchFilterPlugin)}
        self._batch_score: dict[str, Callable[[CycleState, PodInfo, list[NodeInfo]],
                                              tuple[Sequence[int], Status]]] = {
            p.name: p.score_nodes for p in self.score_plugins if isinstance(p, BatchScorePlugin)}
        self.batchable_plugins: list[SignPlugin] = []
        self.enable_signatures = False
        self.batch: OpportunisticBatch | None = None
        self._compute_batchable_plugins()
        self.set_opportunistic_batching(self.handle.feature_gates.opportunistic_batching)

    # -- OpportunisticBatching ------------------------------------------------------------------------
    def connect_nominator(self, nominator: Nominator) -> None:
        """Give the profile the queue's nominator, once (``WithPodNominator``: upstream makes the queue
        first; here the queue is made from the profiles). Connecting a different one raises
        RuntimeError: every cycle of a profile reads the same nominator."""
        if self.nominator is not None and self.nominator is not nominator:
            raise RuntimeError(f"profile {self.profile_name!r} already has a nominator")
        self.nominator = nominator

    def connect_shards(self, shards: NodeShards) -> None:
        """Give the profile its node shards (``parallelism`` > 1), once; connecting a different one
        raises RuntimeError."""
        if self.shards is not None and self.shards is not shards:
            raise RuntimeError(f"profile {self.profile_name!r} already has node shards")
        self.shards = shards

    def filter_chunk_sharded(self, active: Sequence[Any], state: CycleState, pod: PodInfo,
                             nodes: list[NodeInfo]) -> list[Status | None] | None:
        """:meth:`filter_chunk`, through the connected shards when there are some (same result)."""
        if self.shards is None:
            return self.filter_chunk(active, state, pod, nodes)
        return self.shards.filter_chunk(self, active, state, pod, nodes)

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
        column = self._column_normalizers.get(plugin)
        if column is not None:
            out, s = column.normalize_column(state, pod, values)
            if not s.is_success():
                raise SchedulingError(
                    f'running Normalize on Score plugins: plugin "{plugin}" failed with: {s.message()}')
            return out
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
            code = "Success" if status is None else bc.code_name(status.code)
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
        calls = self.evaluations["PreFilter"]
        for pl in self.pre_filter_plugins:
            calls[pl.name] += 1
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
        calls = self.evaluations["Filter"]
        for pl in self.filter_plugins if plugins is None else plugins:
            if pl.name in state.skip_filter:
                continue
            calls[pl.name] += 1
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
        calls = self.evaluations["Filter"]
        for pl in active:
            if not todo:
                break
            calls[pl.name] += len(todo)
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

    def count_filtered(self, active: Sequence[Any], verdicts: Sequence[Status | None]) -> None:
        """Count in :attr:`evaluations` the Filter calls another process made on ``len(verdicts)``
        nodes with the plugins ``active``, in order (a shard's part of :meth:`filter_chunk`): a plugin
        ran on every node that no plugin before it rejected (``verdicts``: None or the rejecting
        plugin's status, per node)."""
        rejected: dict[str, int] = {}
        for v in verdicts:
            if v is not None:
                rejected[v.plugin] = rejected.get(v.plugin, 0) + 1
        calls, left = self.evaluations["Filter"], len(verdicts)
        for pl in active:
            if left <= 0:
                break
            calls[pl.name] += left
            left -= rejected.get(pl.name, 0)

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
        calls = self.evaluations["PreScore"]
        for pl in self.pre_score_plugins:
            calls[pl.name] += 1
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
        order) and the weighted sum. With shards connected the raw scores may be computed on more
        cores first (:meth:`NodeShards.score_raw`: the same columns, or None and they are computed
        here, so the error raised is the one-core path's).

        Raises:
            SchedulingError: a Score / NormalizeScore error or a score outside [0, 100].
            ValueError: a plugin's ``score_nodes`` returned a list whose length differs from ``nodes``.
        """
        n = len(nodes)
        record = self.observer is not None and self.record_plugin_metrics
        cols: list[tuple[str, Sequence[int]]] = []
        active = [pl for pl in self.score_plugins if pl.name not in state.skip_score]
        # With shards (``parallelism``), the raw scores of every plugin may come from several cores
        # at once (None: compute them here, plugin by plugin, as without).
        sharded = None
        if self.shards is not None and active:
            sharded = self.shards.score_raw(self, active, state, pod, nodes, names)
        calls = self.evaluations["Score"]
        for k, pl in enumerate(active):
            calls[pl.name] += n
            t0 = time.perf_counter() if record else 0.0  # sharded: the plugin's NormalizeScore only
            values = sharded[k] if sharded is not None else self._raw_scores(pl, state, pod, nodes)
            if raw_out is not None:
                raw_out[pl.name] = list(values)
            values = self._normalized(state, pod, pl.name, names, values)
            if record:
                self._observe("Score", pl.name, None, t0)
            cols.append((pl.name, values))
        return self._weighted_totals(cols, n)

    def raw_score_columns(self, active: Sequence[Any], state: CycleState, pod: PodInfo,
                          nodes: list[NodeInfo]) -> list[Sequence[int]]:
        """The raw scores (before NormalizeScore) of ``nodes`` by each Score plugin of ``active`` (those
        not in ``state.skip_score``, in order): one column per plugin, aligned with ``nodes``. What
        :meth:`score_columns` computes before normalizing; a shard's part.

        Raises:
            SchedulingError: a Score plugin failed (upstream's message).
            ValueError: a plugin's ``score_nodes`` returned a list whose length differs from ``nodes``.
        """
        return [self._raw_scores(pl, state, pod, nodes) for pl in active]

    def _raw_scores(self, pl: Any, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> Sequence[int]:
        """Plugin ``pl``'s raw scores of ``nodes``, in order: its optional batch form ``score_nodes``
        (the scores ``score`` would give, same Status) or ``score`` node by node."""
        batch = self._batch_score.get(pl.name)
        if batch is not None:
            values, s = batch(state, pod, nodes)
            if not s.is_success():
                raise SchedulingError(f'running Score plugins: plugin "{pl.name}" failed with: {s.message()}')
            if len(values) != len(nodes):
                raise ValueError(f"Score plugin {pl.name} returned {len(values)} scores for {len(nodes)} nodes")
            return values
        one_by_one: list[int] = []
        f = pl.score
        for ni in nodes:
            sc, st = f(state, pod, ni)
            if st.code:
                raise SchedulingError(f'running Score plugins: plugin "{pl.name}" failed with: {st.message()}')
            one_by_one.append(sc)
        return one_by_one

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
            if self.preemption_observer is not None and pl.name in self._preemption_plugins:
                self.preemption_observer("pod", bc.code_name(s.code), time.perf_counter() - t0)
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

    def run_pod_group_post_filter(self, state: CycleState, pod_group: PodGroupInfo, dry_run: PodGroupDryRun
                                  ) -> tuple[PodGroupPostFilterResult | None, Status] | None:
        """``RunPodGroupPostFilterPlugins``: the first Success or UnschedulableAndUnresolvable wins (with
        its result and plugin), Unschedulable reasons are joined in plugin order, anything else is an
        Error ``error in "<plugin>" PodGroupPostFilter plugins: <message>``. None as soon as a plugin
        cannot decide its outcome here (:class:`~py_scheduler.framework.interfaces.PodGroupPostFilterPlugin`)."""
        reasons: list[str] = []
        plugin = ""
        for pl in self.pod_group_post_filter_plugins:
            t0 = time.perf_counter()
            out = pl.pod_group_post_filter(state, pod_group, dry_run)
            if out is None:
                return None
            res, s = out
            if self.preemption_observer is not None and pl.name in self._preemption_plugins:
                self.preemption_observer("podgroup", bc.code_name(s.code), time.perf_counter() - t0)
            if s.is_success():
                return res, s
            if s.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                return res, Status(s.code, s.reasons, pl.name)
            if not s.is_rejected():
                return None, Status(Code.ERROR, [f'error in "{pl.name}" PodGroupPostFilter plugins: {s.message()}'],
                                    pl.name)
            reasons.extend(s.reasons)
            plugin = plugin or pl.name
        return None, Status(Code.UNSCHEDULABLE, reasons, plugin)

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

    # The binding-point runners (:mod:`py_scheduler.framework.binding_cycle`: timed, a plugin that raises
    # is that point's Error), as methods like the scheduling-cycle points.
    def run_unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        bc.run_unreserve(self, state, pod, node_name)

    def run_permit(self, state: CycleState, pod: PodInfo, node_name: str) -> tuple[Status, dict[str, float]]:
        return bc.run_permit(self, state, pod, node_name)

    def run_pre_bind_pre_flights(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        return bc.run_pre_bind_pre_flights(self, state, pod, node_name)

    async def run_pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        return await bc.run_pre_bind(self, state, pod, node_name)

    async def run_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        return await bc.run_bind(self, state, pod, node_name)

    def run_post_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        bc.run_post_bind(self, state, pod, node_name)

    def claim_allocations(self, state: CycleState, pod: PodInfo) -> list[dict[str, Any]]:
        """What the profile's :class:`AllocationReporter` plugins (DynamicResources) allocated to ``pod``
        (their shape), for the decision records, ``explain`` and ``simulate``."""
        return [a for p in self.allocation_reporters for a in p.claim_allocations(state, pod)]
