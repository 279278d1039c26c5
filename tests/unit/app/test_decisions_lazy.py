"""The decision record's hot path keeps raw counts and references and renders when read
(``py_scheduler.app.scheduling.decisions``: :func:`filter_counts`, :func:`top_nodes`, ``Decision.filters``).
Property: for any cycle result, the lazy record serves exactly the JSON and HTML that the eager form
(the histogram split and sorted, the top K chosen by a plain keyed sort, at record time) served."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from py_scheduler.app.scheduling.decisions import Decision, DecisionLog, render_histogram
from py_scheduler.app.serving.decisions_http import render_decision
from py_scheduler.framework.algorithm import Diagnosis, ScheduleResult
from py_scheduler.framework.types import Code, PodInfo, Status

REASONS = ["Insufficient cpu", "Insufficient memory", "node(s) had untolerated taint", "", "GPU model A100"]
PLUGINS = ["NodeResourcesFit", "TaintToleration", "GPUScore"]


class EagerDecision(Decision):
    """A record whose histogram was rendered at record time (the form before the hot path went lazy)."""

    filters = ()  # type: ignore[assignment]  # a plain attribute instead of the lazy property


def _eager_histogram(res: ScheduleResult) -> tuple[tuple[str, int], ...]:
    """``FitError.Error()``'s histogram, counted status by status (no joined keys, no shortcuts)."""
    d = res.diagnosis
    assert d is not None
    hist: dict[str, int] = {}
    for status in d.node_to_status.values():
        for r in status.reasons or [""]:
            hist[r or "rejected"] = hist.get(r or "rejected", 0) + 1
    absent = len(res.filtered) - len(d.node_to_status)
    if d.absent_nodes_status is not None and absent > 0:
        for r in d.absent_nodes_status.reasons or [""]:
            hist[r or "rejected"] = hist.get(r or "rejected", 0) + absent
    return tuple(sorted(hist.items(), key=lambda x: (-x[1], x[0])))


def _eager_top(res: ScheduleResult, k: int) -> tuple[tuple[str, ...], tuple[int, ...], tuple[int, ...]]:
    """Best ``k`` by total, ties in evaluation order (a keyed sort), then the selected node."""
    totals = res.total_values
    idx = sorted(range(len(totals)), key=lambda i: (-totals[i], i))[:k]
    if res.selected is not None and res.selected in res.score_names and \
            all(res.score_names[i] != res.selected for i in idx):
        idx.append(res.score_names.index(res.selected))
    rows = tuple(col[i] for i in idx for _, col in res.score_columns)
    return tuple(res.score_names[i] for i in idx), tuple(totals[i] for i in idx), rows


@st.composite
def results(draw: st.DrawFn) -> tuple[ScheduleResult, int]:
    n = draw(st.integers(0, 40))
    names = [f"node-{i}" for i in range(n)]
    plugins = draw(st.lists(st.sampled_from(PLUGINS), unique=True, max_size=3))
    score = st.sampled_from([0, 100]) if draw(st.booleans()) else st.integers(0, 100)  # many ties, or few
    cols = [(p, bytes(draw(st.lists(score, min_size=n, max_size=n)))) for p in plugins]
    weights = {p: draw(st.integers(1, 5)) for p in plugins}
    res = ScheduleResult(pod="ns/p", profile="py-scheduler", feasible=list(names), weights=weights)
    res.score_names, res.score_columns = names, cols
    res.total_values = [sum(c[i] * weights[p] for p, c in cols) for i in range(n)]
    if n and draw(st.booleans()):  # as selectHost: one of the highest totals, its position known
        top = max(res.total_values)
        res.selected_index = draw(st.sampled_from([i for i, t in enumerate(res.total_values) if t == top]))
        res.selected = names[res.selected_index]
    elif n and draw(st.booleans()):  # any node, position unknown (the record searches for it)
        res.selected = draw(st.sampled_from(names))
    rejected = draw(st.integers(0, 60))
    statuses = {f"bad-{i}": Status(Code.UNSCHEDULABLE,
                                   draw(st.lists(st.sampled_from(REASONS), min_size=1, max_size=2, unique=True)),
                                   draw(st.sampled_from(PLUGINS)))
                for i in range(rejected)}
    many = draw(st.booleans())  # beyond the few-keys shortcut: every node its own reason
    if many:
        statuses.update({f"odd-{i}": Status(Code.UNSCHEDULABLE, [f"reason {i}"], "X") for i in range(12)})
    absent = draw(st.integers(0, 5))
    d = Diagnosis(node_to_status=statuses,
                  absent_nodes_status=Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [draw(st.sampled_from(REASONS))])
                  if absent or draw(st.booleans()) else None)
    res.diagnosis = d
    # as the runtime builds it (framework/algorithm.py, Algorithm.schedule): every rejected node's
    # reasons, then the absent nodes' reasons
    gone = list(d.absent_nodes_status.reasons) if d.absent_nodes_status is not None else []
    res.filtered = {**{k: list(s.reasons) for k, s in statuses.items()},
                    **{f"gone-{i}": list(gone) for i in range(absent)}}
    res.nodes_evaluated = n + len(statuses)
    return res, draw(st.integers(0, 7))


@settings(max_examples=300, deadline=None)
@given(results())
def test_lazy_record_renders_what_the_eager_record_rendered(case: tuple[ScheduleResult, int]) -> None:
    res, k = case
    log = DecisionLog(10, k, clock=lambda: 1_700_000_000.0)
    pod = PodInfo({"metadata": {"name": "p", "namespace": "ns", "uid": "u1"}, "spec": {}})
    lazy = log.record(pod, "py-scheduler", 1, "scheduled" if res.selected else "unschedulable", res=res,
                      nodes_total=len(res.filtered) + len(res.score_names))
    eager = EagerDecision()
    for slot in Decision.__slots__:
        setattr(eager, slot, getattr(lazy, slot))
    eager.filters = _eager_histogram(res)
    eager.nodes, eager.totals, rows = _eager_top(res, k)
    eager.rows = bytes(rows)
    assert lazy.filters == eager.filters
    assert (lazy.nodes, lazy.totals, tuple(lazy.rows)) == (eager.nodes, eager.totals, rows)
    want: dict[str, Any] = eager.to_json()
    assert lazy.to_json() == want
    assert render_decision(lazy) == render_decision(eager)


def test_render_histogram_splits_joined_reasons_and_names_empty_ones() -> None:
    assert render_histogram([("a\x00b", 2), ("b", 1), ("", 4)]) == (("rejected", 4), ("b", 3), ("a", 2))
