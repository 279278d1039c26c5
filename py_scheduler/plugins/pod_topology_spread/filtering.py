"""PodTopologySpread's PreFilter / Filter and PreFilterExtensions (upstream
``pkg/scheduler/framework/plugins/podtopologyspread/filtering.go``: critical paths, ``minDomains``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from py_scheduler.framework.errors import PodParseError
from py_scheduler.framework.objects import Obj
from py_scheduler.framework.types import Code, CycleState, NodeInfo, PodInfo, Status
from py_scheduler.plugins.pod_topology_spread.common import (
    _SUCCESS,
    DO_NOT_SCHEDULE,
    ERR_REASON_CONSTRAINTS_NOT_MATCH,
    ERR_REASON_NODE_LABEL_NOT_MATCH,
    MAX_INT32,
    NAME,
    PRE_FILTER_STATE_KEY,
    SpreadBase,
    TopologySpreadConstraint,
    _InclusionContext,
    _objects,
    _pod_constraints,
    node_labels_match_spread_constraints,
)
from py_scheduler.plugins.pod_topology_spread.count_memo import _GENERATION, CountMemos, _CountMemo

# -- PreFilter state ------------------------------------------------------------------------------


class CriticalPaths:
    """``criticalPaths``: the two topology values with the fewest matching Pods seen so far
    (``paths[0]`` always holds the minimum; ``paths[1]`` is >= it, not necessarily the second
    minimum after updates), as [value, count] pairs."""

    __slots__ = ("paths",)

    def __init__(self) -> None:
        self.paths: list[list[Any]] = [["", MAX_INT32], ["", MAX_INT32]]

    def clone(self) -> CriticalPaths:
        c = CriticalPaths()
        c.paths = [list(self.paths[0]), list(self.paths[1])]
        return c

    def update(self, tp_val: str, num: int) -> None:
        """``criticalPaths.update``."""
        p = self.paths
        i = 0 if tp_val == p[0][0] else 1 if tp_val == p[1][0] else -1
        if i >= 0:
            p[i][1] = num
            if p[0][1] > p[1][1]:
                p[0], p[1] = p[1], p[0]
        elif num < p[0][1]:
            p[1] = p[0]
            p[0] = [tp_val, num]
        elif num < p[1][1]:
            p[1] = [tp_val, num]

    @property
    def min_match_num(self) -> int:
        return int(self.paths[0][1])


@dataclass(slots=True)
class PreFilterState:
    """``preFilterState``: the DoNotSchedule constraints, per constraint the matching-Pod count per
    topology value (``tp_value_to_match_num``) and its critical paths.

    ``value_memos`` (no upstream counterpart, not compared): per constraint the PreFilter count memo
    holding the nodes' topology values, when every constraint had one; Filter's batch form reads a
    chunk's values from them (checked against the nodes' generations) instead of each node's labels.
    """

    constraints: list[TopologySpreadConstraint] = field(default_factory=list)
    critical_paths: list[CriticalPaths] = field(default_factory=list)
    tp_value_to_match_num: list[dict[str, int]] = field(default_factory=list)
    value_memos: list[_CountMemo] | None = field(default=None, compare=False, repr=False)

    def clone(self) -> PreFilterState:
        return PreFilterState(self.constraints, [p.clone() for p in self.critical_paths],
                              [dict(m) for m in self.tp_value_to_match_num], self.value_memos)

    def min_match_num(self, i: int, min_domains: int) -> int:
        """``minMatchNum``: the global minimum, 0 when fewer than ``min_domains`` domains exist."""
        if len(self.tp_value_to_match_num[i]) < min_domains:
            return 0
        return self.critical_paths[i].min_match_num


class Filtering(SpreadBase, CountMemos):
    """PreFilter / Filter / AddPod / RemovePod of
    :class:`~py_scheduler.plugins.pod_topology_spread.PodTopologySpread`."""

    def pre_filter(self, state: CycleState, pod: PodInfo,
                   nodes: list[NodeInfo]) -> tuple[set[str] | None, Status]:
        """``PreFilter``: count matching Pods per topology value over all ``nodes`` for each
        DoNotSchedule constraint. Skip when the Pod has none."""
        try:
            constraints = self.get_constraints(pod, DO_NOT_SCHEDULE, _objects(state))
            _pod_constraints(pod)  # a malformed ScheduleAnyway constraint rejects the Pod here too
            if not constraints:
                return None, Status.skip()
            ctx = _InclusionContext(pod, constraints, self.comparison_operators)
        except PodParseError as exc:
            return None, Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [str(exc)], NAME)
        s = PreFilterState(constraints, [], [{} for _ in constraints])
        keys = tuple(c.topology_key for c in constraints)
        ns = pod.namespace
        # Per constraint needing the node inclusion policies: its key, its counts, its selector (None:
        # selects everything, counts 0). The others come from the per-node count memo.
        plan = []
        memos: list[_CountMemo] = []
        counted = self._memos_pay(nodes, keys)  # else every count stays empty, as upstream's loop
        for i, c in enumerate(constraints):
            selector = None if c.selector.is_everything else c.selector
            if ctx.needs_match(c):
                plan.append((c, c.topology_key, s.tp_value_to_match_num[i], selector))
            elif counted:
                memo, s.tp_value_to_match_num[i] = self._memo_counts(nodes, keys, c.topology_key, selector, ns)
                memos.append(memo)
        if not plan and counted:
            s.value_memos = memos
        if plan:
            for ni in nodes:
                node = ni.node
                if node is None:
                    continue
                labels = (node.get("metadata") or {}).get("labels") or {}
                if not all(k in labels for k in keys):
                    continue
                for c, key, counts, selector in plan:
                    if not ctx.match(c, node):
                        continue
                    n = 0
                    if selector is not None:
                        for p in ni.pods:
                            if p.namespace == ns and selector.matches(p.labels) and (
                                    p.pod.get("metadata") or {}).get("deletionTimestamp") is None:
                                n += 1
                    value = labels[key]
                    counts[value] = counts.get(value, 0) + n
        for i in range(len(constraints)):
            paths = CriticalPaths()
            for value, num in s.tp_value_to_match_num[i].items():
                paths.update(value, num)
            s.critical_paths.append(paths)
        state.write(PRE_FILTER_STATE_KEY, s)
        return None, Status.success()

    def add_pod(self, state: CycleState, pod: PodInfo, to_add: PodInfo, node_info: NodeInfo) -> Status:
        """``AddPod``: count ``to_add`` on ``node_info`` in the PreFilter state."""
        s = state.data.get(PRE_FILTER_STATE_KEY)
        if not isinstance(s, PreFilterState):
            return Status.error(f'reading "{PRE_FILTER_STATE_KEY}" from cycleState: not found', NAME)
        self._update_with_pod(s, to_add, pod, node_info.node, 1)
        return Status.success()

    def remove_pod(self, state: CycleState, pod: PodInfo, to_remove: PodInfo, node_info: NodeInfo) -> Status:
        """``RemovePod``: uncount ``to_remove`` on ``node_info`` in the PreFilter state."""
        s = state.data.get(PRE_FILTER_STATE_KEY)
        if not isinstance(s, PreFilterState):
            return Status.error(f'reading "{PRE_FILTER_STATE_KEY}" from cycleState: not found', NAME)
        self._update_with_pod(s, to_remove, pod, node_info.node, -1)
        return Status.success()

    def _update_with_pod(self, s: PreFilterState, updated: PodInfo, preemptor: PodInfo, node: Obj | None,
                         delta: int) -> None:
        """``updateWithPod``."""
        if updated.namespace != preemptor.namespace or node is None:
            return
        labels: Mapping[str, str] = (node.get("metadata") or {}).get("labels") or {}
        if not node_labels_match_spread_constraints(labels, s.constraints):
            return
        try:
            ctx = _InclusionContext(preemptor, s.constraints, self.comparison_operators)
        except PodParseError:
            return
        for i, c in enumerate(s.constraints):
            if not c.selector.matches(updated.labels):
                continue
            if not ctx.match(c, node):
                continue
            v = labels[c.topology_key]
            counts = s.tp_value_to_match_num[i]
            counts[v] = counts.get(v, 0) + delta
            s.critical_paths[i].update(v, counts[v])

    def filter_nodes(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> list[Status] | None:
        """:meth:`filter` for each of ``nodes`` in order (the runtime's batch form; None: all pass),
        with each constraint's global minimum and the Pod's self-match computed once."""
        s = state.data.get(PRE_FILTER_STATE_KEY)
        if not isinstance(s, PreFilterState):
            return [self.filter(state, pod, ni) for ni in nodes]
        if not s.constraints:
            return None
        plan = [(c.topology_key, s.tp_value_to_match_num[i], c.max_skew, s.min_match_num(i, c.min_domains),
                 1 if c.selector.matches(pod.labels) else 0) for i, c in enumerate(s.constraints)]
        if s.value_memos is not None and nodes:
            gens = list(map(_GENERATION, nodes))
            cols = [m.values_for(nodes, gens) for m in s.value_memos]
            if all(col is not None for col in cols):
                return self._filter_values(state, pod, nodes, [col for col in cols if col is not None], plan)
        out: list[Status] | None = None
        for j, ni in enumerate(nodes):
            labels = ni.labels
            for key, counts, max_skew, min_match, self_match in plan:
                tp_val = labels.get(key)
                if tp_val is None:
                    st = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [ERR_REASON_NODE_LABEL_NOT_MATCH], NAME)
                    break
                if counts.get(tp_val, 0) + self_match - min_match > max_skew:
                    st = Status(Code.UNSCHEDULABLE, [ERR_REASON_CONSTRAINTS_NOT_MATCH], NAME)
                    break
            else:
                continue
            if out is None:
                out = [_SUCCESS] * len(nodes)
            out[j] = st
        return out

    def _filter_values(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo], cols: list[list[str | None]],
                       plan: list[tuple[str, dict[str, int], int, int, int]]) -> list[Status] | None:
        """:meth:`filter_nodes` from the nodes' memoized topology values ``cols`` (one list per
        constraint, aligned with ``nodes``; None: the node lacks some key or its Node, decided by
        :meth:`filter`). A node fails a constraint when ``count + self_match - min_match > maxSkew``,
        i.e. when its value's count exceeds ``maxSkew + min_match - self_match``."""
        out: list[Status] | None = None
        limits = [(counts, max_skew + min_match - self_match) for _, counts, max_skew, min_match, self_match in plan]
        if len(cols) == 1 and limits[0][1] >= 0:
            # One constraint, no value absent from the counts failing: only the values over the limit
            # fail (None: decided by filter).
            counts, limit = limits[0]
            col = cols[0]
            failing: set[str | None] = {v for v, c in counts.items() if c > limit}
            failing.add(None)
            for j in [j for j, v in enumerate(col) if v in failing]:
                if col[j] is None:
                    st = self.filter(state, pod, nodes[j])
                    if not st.code:
                        continue
                else:
                    st = Status(Code.UNSCHEDULABLE, [ERR_REASON_CONSTRAINTS_NOT_MATCH], NAME)
                if out is None:
                    out = [_SUCCESS] * len(nodes)
                out[j] = st
            return out
        for j in range(len(nodes)):
            found: Status | None = None
            for c_col, (counts, limit) in zip(cols, limits, strict=True):
                v = c_col[j]
                if v is None:
                    found = self.filter(state, pod, nodes[j])
                    break
                if counts.get(v, 0) > limit:
                    found = Status(Code.UNSCHEDULABLE, [ERR_REASON_CONSTRAINTS_NOT_MATCH], NAME)
                    break
            if found is None or not found.code:
                continue
            if out is None:
                out = [_SUCCESS] * len(nodes)
            out[j] = found
        return out

    def filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status:
        """``Filter``: for each DoNotSchedule constraint, the node must have the topology key
        (else UnschedulableAndUnresolvable, "missing required label") and
        ``matching Pods in its domain + (1 if the Pod matches itself) - global minimum <= maxSkew``
        (else Unschedulable). The global minimum is 0 while fewer than ``minDomains`` domains
        exist."""
        s = state.data.get(PRE_FILTER_STATE_KEY)
        if not isinstance(s, PreFilterState):
            return Status.error(f'reading "{PRE_FILTER_STATE_KEY}" from cycleState: not found', NAME)
        if not s.constraints:
            return Status.success()
        labels = node_info.labels
        for i, c in enumerate(s.constraints):
            tp_val = labels.get(c.topology_key)
            if tp_val is None:
                return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [ERR_REASON_NODE_LABEL_NOT_MATCH], NAME)
            min_match = s.min_match_num(i, c.min_domains)
            self_match = 1 if c.selector.matches(pod.labels) else 0
            match_num = s.tp_value_to_match_num[i].get(tp_val, 0)
            if match_num + self_match - min_match > c.max_skew:
                return Status(Code.UNSCHEDULABLE, [ERR_REASON_CONSTRAINTS_NOT_MATCH], NAME)
        return Status.success()
