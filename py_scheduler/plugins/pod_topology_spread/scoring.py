"""PodTopologySpread's PreScore / Score / NormalizeScore (upstream
``pkg/scheduler/framework/plugins/podtopologyspread/scoring.go``, ``log(size+2)`` topology weights)."""

from __future__ import annotations

from dataclasses import dataclass, field

from py_scheduler.framework.errors import PodParseError
from py_scheduler.framework.gomath import go_div, go_log, go_round
from py_scheduler.framework.types import MAX_NODE_SCORE, CycleState, NodeInfo, PodInfo, Status
from py_scheduler.plugins.helpers.node_selector import LabelSelector
from py_scheduler.plugins.pod_topology_spread.common import (
    _INVALID_SCORE,
    LABEL_HOSTNAME,
    NAME,
    PRE_SCORE_STATE_KEY,
    SCHEDULE_ANYWAY,
    SpreadBase,
    TopologySpreadConstraint,
    _InclusionContext,
    _objects,
    _pod_constraints,
    count_pods_match_selector,
    node_labels_match_spread_constraints,
)
from py_scheduler.plugins.pod_topology_spread.count_memo import CountMemos, _CountMemo


@dataclass(slots=True)
class PreScoreState:
    """``preScoreState``: the ScheduleAnyway constraints, nodes lacking a topology key
    (``ignored_nodes``), matching-Pod counts per topology value (hostname counts are computed in
    Score) and the per-constraint weight ``log(domains + 2)``."""

    constraints: list[TopologySpreadConstraint] = field(default_factory=list)
    ignored_nodes: set[str] = field(default_factory=set)
    topology_value_to_pod_counts: list[dict[str, int]] = field(default_factory=list)
    topology_normalizing_weight: list[float] = field(default_factory=list)
    value_memos: list[_CountMemo | None] | None = field(default=None, compare=False, repr=False)
    """No upstream counterpart, not compared: per constraint the count memo PreScore read (None:
    none, e.g. hostname); Score's column form reads a node's topology value there, at the position
    of the node's generation (a value is a function of the generation), instead of its labels."""

    def clone(self) -> PreScoreState:
        return self


def topology_normalizing_weight(size: int) -> float:
    """``topologyNormalizingWeight``: ``log(size + 2)`` with Go's ``math.Log``."""
    return go_log(float(size + 2))


def score_for_count(cnt: int, max_skew: int, tp_weight: float) -> float:
    """``scoreForCount``: ``cnt * weight + (maxSkew - 1)`` as float64."""
    return float(cnt) * tp_weight + float(max_skew - 1)


class Scoring(SpreadBase, CountMemos):
    """PreScore / Score / NormalizeScore of :class:`~py_scheduler.plugins.pod_topology_spread.PodTopologySpread`."""

    system_defaulted: bool

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> Status:
        """``PreScore``: ``nodes`` are the feasible nodes; Pods are counted on every node of the
        snapshot. Skip when the snapshot is empty or the Pod has no ScheduleAnyway constraint.

        Nodes lacking a topology key are ignored (score 0) unless only the system default
        constraints apply (then a node without a zone label still gets hostname spreading).

        The count over every node of the snapshot comes from the per-node count memo
        (:class:`_CountMemo`, shared with PreFilter) for each constraint whose node inclusion
        policies let every node in (``_InclusionContext.needs_match`` False): a memo for (every
        constraint key, the key, selector, namespace) counts exactly the nodes upstream's loop
        counts when all keys are required; when they are not (system defaulting), a memo for the
        key alone does, unless some feasible node's value is ``""`` (a node without the key counts
        under ``""`` upstream): that constraint, and every constraint needing the policies, takes
        upstream's loop over all nodes.
        """
        snap = state.snapshot
        all_nodes: list[NodeInfo] = list(snap.node_info_list) if snap is not None else list(nodes)
        if not all_nodes:
            return Status.skip()
        try:
            pc = _pod_constraints(pod)
            constraints = self.get_constraints(pod, SCHEDULE_ANYWAY, _objects(state))
            if not constraints:
                return Status.skip()
            ctx = _InclusionContext(pod, constraints, self.comparison_operators)
        except PodParseError as exc:
            return Status.error(str(exc), NAME)
        require_all = pc.explicit or not self.system_defaulted
        s = PreScoreState(constraints, set(), [{} for _ in constraints], [])
        if require_all and not any(map(ctx.needs_match, constraints)) and any(
                c.topology_key != LABEL_HOSTNAME for c in constraints) and self._memos_pay(
                all_nodes, [c.topology_key for c in constraints]):
            self._pre_score_from_memos(s, pod, nodes, all_nodes)
            state.write(PRE_SCORE_STATE_KEY, s)
            return Status.success()
        topo_size = [0] * len(constraints)
        for ni in nodes:
            labels = ni.labels
            if require_all and not node_labels_match_spread_constraints(labels, constraints):
                s.ignored_nodes.add(ni.name)
                continue
            for i, c in enumerate(constraints):
                if c.topology_key == LABEL_HOSTNAME:
                    continue
                value = labels.get(c.topology_key, "")
                if value not in s.topology_value_to_pod_counts[i]:
                    s.topology_value_to_pod_counts[i][value] = 0
                    topo_size[i] += 1
        for i, c in enumerate(constraints):
            sz = topo_size[i]
            if c.topology_key == LABEL_HOSTNAME:
                sz = len(nodes) - len(s.ignored_nodes)
            s.topology_normalizing_weight.append(topology_normalizing_weight(sz))
        keys = tuple(c.topology_key for c in constraints)
        slow: list[tuple[int, TopologySpreadConstraint]] = []
        for i, c in enumerate(constraints):
            counts = s.topology_value_to_pod_counts[i]
            if not counts:  # hostname (counted in Score), or no feasible node has the key
                continue
            if ctx.needs_match(c) or (not require_all and "" in counts):
                slow.append((i, c))
                continue
            selector = None if c.selector.is_everything else c.selector
            _, totals = self._memo_counts(all_nodes, keys if require_all else (c.topology_key,),
                                          c.topology_key, selector, pod.namespace)
            for value in counts:
                counts[value] = totals.get(value, 0)
        if slow:
            self._pre_score_counts(s, pod, ctx, all_nodes, require_all, slow)
        state.write(PRE_SCORE_STATE_KEY, s)
        return Status.success()

    def _pre_score_from_memos(self, s: PreScoreState, pod: PodInfo, nodes: list[NodeInfo],
                              all_nodes: list[NodeInfo]) -> None:
        """PreScore's state when every node must have every key and no constraint needs the node
        inclusion policies: each non-hostname constraint's count memo (keys: every constraint key)
        is brought up to date with ``all_nodes`` and gives both the counts and the feasible nodes'
        topology values (a memoized value None: the node lacks some key, it is ignored), read at the
        node's position found by its generation (a node not found there is read from its labels)."""
        cs = s.constraints
        keys = tuple(c.topology_key for c in cs)
        ns = pod.namespace
        soft = [i for i, c in enumerate(cs) if c.topology_key != LABEL_HOSTNAME]
        memos: list[tuple[dict[str, int], dict[str, int], list[str | None]]] = []
        value_memos: list[_CountMemo | None] = [None] * len(cs)
        s.value_memos = value_memos
        pos_of = None
        for i in soft:
            c = cs[i]
            memo, totals = self._memo_counts(all_nodes, keys, c.topology_key,
                                             None if c.selector.is_everything else c.selector, ns)
            memos.append((s.topology_value_to_pod_counts[i], totals, memo.values))
            value_memos[i] = memo
            if pos_of is None:  # every memo was just synced with all_nodes: the same positions
                pos_of = memo.pos_by_gen.get
        assert pos_of is not None
        ignored = s.ignored_nodes
        for ni in nodes:
            pos = pos_of(ni.generation)
            if pos is None:
                labels = ni.labels
                if not node_labels_match_spread_constraints(labels, cs):
                    ignored.add(ni.name)
                    continue
                for i, (counts, _, _) in zip(soft, memos, strict=True):
                    counts[labels[cs[i].topology_key]] = 0
                continue
            if memos[0][2][pos] is None:
                ignored.add(ni.name)
                continue
            for counts, _, values in memos:
                v = values[pos]
                if v is not None:  # always: the memos require the same keys
                    counts[v] = 0
        for counts, totals, _ in memos:
            for value in counts:
                counts[value] = totals.get(value, 0)
        n_scored = len(nodes) - len(ignored)
        for i, c in enumerate(cs):
            sz = n_scored if c.topology_key == LABEL_HOSTNAME else len(s.topology_value_to_pod_counts[i])
            s.topology_normalizing_weight.append(topology_normalizing_weight(sz))

    @staticmethod
    def _pre_score_counts(s: PreScoreState, pod: PodInfo, ctx: _InclusionContext, all_nodes: list[NodeInfo],
                          require_all: bool, which: list[tuple[int, TopologySpreadConstraint]]) -> None:
        """Upstream's ``processAllNode`` loop over ``all_nodes`` for the constraints ``which``
        (index, constraint): add each node's matching Pods to its topology value's count when that
        value is one of a feasible node's."""
        constraints = s.constraints
        for ni in all_nodes:
            if ni.node is None:
                continue
            labels = ni.labels
            if require_all and not node_labels_match_spread_constraints(labels, constraints):
                continue
            for i, c in which:
                if not ctx.match(c, ni.node):
                    continue
                value = labels.get(c.topology_key, "")
                counts = s.topology_value_to_pod_counts[i]
                if value not in counts:
                    continue
                counts[value] += count_pods_match_selector(ni.pods, c.selector, pod.namespace)

    def score(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> tuple[int, Status]:
        """``Score``: the sum over constraints whose key the node has of
        ``count * log(domains + 2) + (maxSkew - 1)`` (count of matching Pods in the node's domain;
        on the node itself for ``kubernetes.io/hostname``), rounded half away from zero. Lower is
        better; NormalizeScore inverts it."""
        s = state.data.get(PRE_SCORE_STATE_KEY)
        if not isinstance(s, PreScoreState):
            return 0, Status.error(f'error reading "{PRE_SCORE_STATE_KEY}" from cycleState: not found', NAME)
        if node_info.name in s.ignored_nodes:
            return 0, Status.success()
        labels = node_info.labels
        score = 0.0
        for i, c in enumerate(s.constraints):
            tp_val = labels.get(c.topology_key)
            if tp_val is None:
                continue
            if c.topology_key == LABEL_HOSTNAME:
                cnt = count_pods_match_selector(node_info.pods, c.selector, pod.namespace)
            else:
                cnt = s.topology_value_to_pod_counts[i].get(tp_val, 0)
            score += score_for_count(cnt, c.max_skew, s.topology_normalizing_weight[i])
        return int(go_round(score)), Status.success()

    def score_nodes(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> tuple[list[int], Status]:
        """:meth:`score` for each of ``nodes`` in order (the runtime's column form).

        Same float64 arithmetic, in the same order, as :meth:`score`: a node's score is
        ``0.0 + term(constraint 0) + term(constraint 1) ...`` over the constraints whose key it has,
        then Go's ``math.Round``. What is shared instead of recomputed: a topology value's term
        (``score_for_count`` of its PreScore count) once per value, and with a single
        non-hostname constraint the rounded score once per value. A ``kubernetes.io/hostname``
        constraint counts the node's own matching Pods, node by node, as :meth:`score` does."""
        s = state.data.get(PRE_SCORE_STATE_KEY)
        if not isinstance(s, PreScoreState):
            st = Status.error(f'error reading "{PRE_SCORE_STATE_KEY}" from cycleState: not found', NAME)
            return [0] * len(nodes), st
        if not nodes:
            return [], Status.success()
        ignored = s.ignored_nodes
        ns = pod.namespace
        cs = s.constraints
        if len(cs) == 1 and cs[0].topology_key != LABEL_HOSTNAME:
            c = cs[0]
            key = c.topology_key
            counts = s.topology_value_to_pod_counts[0]
            w = s.topology_normalizing_weight[0]
            by_value: dict[str, int] = {}
            out1: list[int] = []
            memo = s.value_memos[0] if s.value_memos else None
            pos_by_gen: dict[int, int] = memo.pos_by_gen if memo is not None else {}
            values: list[str | None] = memo.values if memo is not None else []
            pos_of = pos_by_gen.get
            for ni in nodes:
                if ni.name in ignored:
                    out1.append(0)
                    continue
                pos = pos_of(ni.generation)
                v = None if pos is None else values[pos]
                if v is None:  # not memoized, or lacking some key: read the node's own label
                    v = ni.labels.get(key)
                    if v is None:
                        out1.append(0)
                        continue
                sc = by_value.get(v)
                if sc is None:
                    sc = by_value[v] = int(go_round(0.0 + score_for_count(counts.get(v, 0), c.max_skew, w)))
                out1.append(sc)
            return out1, Status.success()
        plan: list[tuple[str, bool, LabelSelector, int, dict[str, int], float, dict[str, float]]] = [
            (c.topology_key, c.topology_key == LABEL_HOSTNAME, c.selector, c.max_skew,
             s.topology_value_to_pod_counts[i], s.topology_normalizing_weight[i], {})
            for i, c in enumerate(cs)]
        out: list[int] = []
        for ni in nodes:
            if ni.name in ignored:
                out.append(0)
                continue
            labels = ni.labels
            score = 0.0
            for key, host, selector, max_skew, counts, w, terms in plan:
                v = labels.get(key)
                if v is None:
                    continue
                if host:
                    score += score_for_count(count_pods_match_selector(ni.pods, selector, ns), max_skew, w)
                    continue
                term = terms.get(v)
                if term is None:
                    term = terms[v] = score_for_count(counts.get(v, 0), max_skew, w)
                score += term
            out.append(int(go_round(score)))
        return out, Status.success()

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: dict[str, int]) -> Status:
        """``NormalizeScore``: ignored nodes (and, as upstream, a raw score of -1) get 0; otherwise
        ``100 * (max + min - score) / max`` (Go's truncating integer division; 100 for all when max
        is 0), with min (from ``MaxInt64``) / max (from 0) over the non-ignored nodes. Each distinct
        raw score is normalized once."""
        s = state.data.get(PRE_SCORE_STATE_KEY)
        if not isinstance(s, PreScoreState):
            return Status.error(f'error reading "{PRE_SCORE_STATE_KEY}" from cycleState: not found', NAME)
        ignored = s.ignored_nodes
        if ignored:
            for name in ignored.intersection(scores):
                scores[name] = _INVALID_SCORE
            valid = [sc for name, sc in scores.items() if name not in ignored]
        else:
            valid = list(scores.values())
        min_score = min(valid, default=2**63 - 1)
        max_score = max(max(valid, default=0), 0)
        done: dict[int, int] = {_INVALID_SCORE: 0}
        for name, sc in scores.items():
            v = done.get(sc)
            if v is None:
                if max_score == 0:
                    v = MAX_NODE_SCORE
                else:
                    v = go_div(MAX_NODE_SCORE * (max_score + min_score - sc), max_score)
                done[sc] = v
            scores[name] = v
        return Status.success()
