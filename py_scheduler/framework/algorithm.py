"""The scheduling algorithm of one cycle over a profile's :class:`~.runtime.Framework`.

Upstream: ``pkg/scheduler/schedule_one.go`` (``schedulePod``, ``findNodesThatFitPod``,
``findNodesThatPassFilters``, ``numFeasibleNodesToFind``, ``prioritizeNodes``, rotating
``nextStartNodeIndex``, a single feasible node is not scored, ties broken at random,
``evaluateNominatedNode``: a Pod's ``status.nominatedNodeName`` is tried alone first) and
``pkg/scheduler/framework/types.go`` (``Diagnosis``, ``FitError.Error``: the FailedScheduling message).
"""

from __future__ import annotations

import logging
import operator
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import compress, repeat
from typing import Any

from py_scheduler.framework.batch import PodSignature, SortedScoredNodes
from py_scheduler.framework.interfaces import FilterPlugin, PostFilterResult
from py_scheduler.framework.lister import SnapshotLister
from py_scheduler.framework.runtime import Framework, SchedulingError
from py_scheduler.framework.types import Code, CycleState, NodeInfo, PodInfo, Status

log = logging.getLogger("py_scheduler.framework")

MIN_FEASIBLE_NODES_TO_FIND = 100
PLUGIN_METRICS_SAMPLE_PERCENT = 10
"""``pluginMetricsSamplePercent`` (schedule_one.go): per-plugin execution durations are recorded in
this share of scheduling cycles only (extension-point durations in every cycle)."""
_metrics_sampler = random.Random()  # not the tie-break RNG: seeded simulate/parity runs stay as they were
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5
NO_NODE_AVAILABLE_MSG = "0/{} nodes are available"
PLACEMENT_STATE_KEY = "PodGroupPlacement"
"""CycleState key: the node names of the pod group placement this Pod is evaluated in (a frozenset),
set by :meth:`Algorithm.schedule` when given a ``placement``."""


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
    highest), else -1; the decision record (``app/scheduling/decisions.py``) uses it instead of searching."""
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
                 cycle: int | None = None,
                 placement: list[NodeInfo] | None = None) -> ScheduleResult:
        """Run one scheduling cycle for ``pod`` on ``snapshot`` (``schedulePod``).

        With ``explain`` every feasible node is scored even when only one is feasible. On no
        feasible node the result carries the FitError message (and PostFilter's verdict: the
        message tail, and ``post_filter`` -- a nominated node with victims, or
        ``nominated_node_name == ""`` meaning "clear the Pod's nomination").

        Filter sees the Pods nominated per node through ``fw.nominator`` (connected once, see
        :meth:`Framework.connect_nominator`; none: no nominated Pods). A Pod whose
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
        return self._schedule(fw, snapshot, pod, explain, run_post_filter, cycle, placement)

    def _schedule(self, fw: Framework, snapshot: SnapshotLister, pod: PodInfo, explain: bool,
                  run_post_filter: bool, cycle: int | None = None,
                  placement: list[NodeInfo] | None = None) -> ScheduleResult:
        res = ScheduleResult(pod=pod.key, profile=fw.profile_name)
        fw.record_plugin_metrics = _metrics_sampler.randrange(100) < PLUGIN_METRICS_SAMPLE_PERCENT
        res.weights = dict(fw.score_weights)
        state = CycleState(snapshot)
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
        # diagnosis.UnschedulablePlugins = the plugins whose PreFilterResult narrowed the nodes: they are
        # the Pod's rejectors for the queue's hints when the nodes they left do not fit (or none is left).
        d.unschedulable_plugins.update(narrowing)
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
        # Filter runs plugin by plugin over chunks of nodes. A chunk holds as many nodes as feasible
        # ones are still missing, so the node-by-node search would have evaluated every node of it too:
        # the evaluated nodes, their statuses and order are the same. Nodes with Pods nominated to them
        # (after a preemption) take upstream's node-by-node path with those Pods added.
        active = [pl for pl in fw.filter_plugins if pl.name not in state.skip_filter]
        ordered = nodes[start:] + nodes[:start] if start else nodes
        nominated = fw.nominator
        # With Filter shards (``parallelism``), a chunk may run ahead of the nodes still needed: the
        # search stops right after the ``to_find``-th feasible node, whatever the chunks, so the
        # statuses are taken node by node up to that node and the rest is dropped (Filter of one node
        # never depends on another's). The chunk is sized by the share of feasible nodes seen so far.
        ahead = fw.shards is not None
        pos = 0
        while pos < num and len(feasible) < to_find:
            need = to_find - len(feasible)
            size = need
            if ahead and pos:
                size = max(need, min(num - pos, -(-need * pos // max(len(feasible), 1))))
            chunk = ordered[pos:pos + size]
            try:
                statuses = (_filter_chunk_with_nominated_pods(fw, active, state, pod, chunk, nominated) if nominated
                            else fw.filter_chunk_sharded(active, state, pod, chunk))
            except SchedulingError:
                if size == need:
                    raise
                ahead = False  # an error past the last node needed is not the search's: search exactly
                continue
            if size > need:  # ran ahead: the search ends at the need-th feasible node of the chunk
                chunk, statuses = _up_to_feasible(chunk, statuses, need)
            pos += len(chunk)
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
        if type(self.rng).choice is _RANDOM_CHOICE:
            # Random.choice(seq) is seq[_randbelow(len(seq))], as randrange(len(seq)): the same draw,
            # without the names of every tied node (500 of them on a uniform cluster)
            return tied[self.rng.randrange(len(tied))]
        tied_names = [names[i] for i in tied]
        return tied[tied_names.index(self.rng.choice(tied_names))]


_RANDOM_CHOICE = random.Random.choice


def _up_to_feasible(chunk: list[NodeInfo], statuses: list[Status | None] | None,
                    need: int) -> tuple[list[NodeInfo], list[Status | None] | None]:
    """``chunk`` and its ``statuses`` (None: all passed) cut right after the ``need``-th node that
    passed Filter (whole when fewer passed): the nodes a search needing ``need`` more stops at."""
    if statuses is None:
        return chunk[:need], None
    found = 0
    for i, st in enumerate(statuses):
        if st is None:
            found += 1
            if found == need:
                return chunk[:i + 1], statuses[:i + 1]
    return chunk, statuses


def _filter_chunk_with_nominated_pods(fw: Framework, active: Sequence[FilterPlugin], state: CycleState,
                                      pod: PodInfo, chunk: list[NodeInfo],
                                      nominated: Mapping[str, Sequence[PodInfo]]) -> list[Status | None] | None:
    """Per node of ``chunk``: None when it passes Filter, else its status, exactly as
    ``RunFilterPluginsWithNominatedPods`` node by node would give (``framework/runtime/framework.go``).
    A node with no Pod nominated to it runs Filter once, unchanged (upstream's ``podsAdded`` false), so
    those nodes go through :meth:`Framework.filter_chunk` together and only the nodes in ``nominated``
    run node by node. Returns None when every node passed.

    Raises:
        SchedulingError: the one the node-by-node search raises first (on an error the chunk is re-run
            node by node, in order).
    """
    plain = [ni for ni in chunk if ni.name not in nominated]
    if len(plain) == len(chunk):  # no Pod nominated to any node of this chunk
        return fw.filter_chunk_sharded(active, state, pod, chunk)
    try:
        got = fw.filter_chunk_sharded(active, state, pod, plain) if plain else None
        plain_statuses = iter(got) if got is not None else None  # aligned with ``plain``, in chunk order
        out: list[Status | None] = []
        for ni in chunk:
            if ni.name in nominated:
                st = fw.run_filter_with_nominated_pods(state, pod, ni)
                out.append(None if st.is_success() else st)
            else:
                out.append(next(plain_statuses) if plain_statuses is not None else None)
    except SchedulingError:
        for ni in chunk:
            fw.run_filter_with_nominated_pods(state, pod, ni)
        raise
    return None if all(st is None for st in out) else out
