"""Framework.score_columns (the live Score phase without per-plugin dicts) against the dict form.

Upstream: ``pkg/scheduler/framework/runtime/framework.go`` (``RunScorePlugins``: all Score, then all
NormalizeScore, then the range check and weights plugin by plugin) and ``schedule_one.go``
(``selectHost``). The columns, totals, range-check errors and the selected node must be those of
the dict computation the runtime used before.
"""

from __future__ import annotations

import operator
import random
from collections.abc import Sequence
from itertools import repeat
from typing import Any

import numpy as np
import pytest

from py_scheduler.cache.snapshot import Snapshot
from py_scheduler.framework.algorithm import Algorithm
from py_scheduler.framework.runtime import Framework, SchedulingError
from py_scheduler.framework.types import CycleState, NodeInfo, PodInfo, Status


def _node(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}}


POD = {"metadata": {"name": "p", "namespace": "default", "uid": "uid-p"},
       "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}]}}


class _Table:
    """A Score plugin scoring each node from a table (``batch``: through ``score_nodes``)."""

    def __init__(self, name: str, table: dict[str, Any], batch: bool = False, as_array: bool = False) -> None:
        self.name = name
        self.table = table
        self.as_array = as_array
        if batch:
            self.score_nodes = self._score_nodes

    def score(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> tuple[int, Status]:
        return self.table[node_info.name], Status.success()

    def _score_nodes(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> tuple[Any, Status]:
        values = [self.table[ni.name] for ni in nodes]
        return (np.asarray(values, dtype=np.int64) if self.as_array else values), Status.success()


class _Normalized(_Table):
    """A Score plugin whose NormalizeScore scales to [0, 100] by the maximum (edits the dict)."""

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: dict[str, int]) -> Status:
        top = max(scores.values()) or 1
        for k, v in scores.items():
            scores[k] = v * 100 // top
        return Status.success()


def _reference(plugins: list[tuple[Any, int]], names: list[str]) -> tuple[dict[str, dict[str, int]], dict[str, int]]:
    """The dict computation the runtime used before score_columns (per-plugin dicts, max/min check)."""
    per: dict[str, dict[str, int]] = {}
    for pl, _ in plugins:
        scores = {n: pl.table[n] for n in names}
        if hasattr(pl, "normalize_score"):
            pl.normalize_score(CycleState(None), None, scores)
        per[pl.name] = scores
    acc = [0] * len(names)
    for pl, w in plugins:
        values = [per[pl.name][n] for n in names]
        if max(values) > 100 or min(values) < 0:
            bad = next(v for v in values if v > 100 or v < 0)
            raise SchedulingError(f'applying score defaultWeights on Score plugins: plugin "{pl.name}" returns an '
                                  f"invalid score {bad}, it should in the range of [0, 100] after normalizing")
        acc = list(map(operator.add, acc, map(operator.mul, values, repeat(w))))
    return per, dict(zip(names, acc, strict=True))


def _run(plugins: list[tuple[Any, int]], names: list[str]) -> tuple[dict[str, dict[str, int]], dict[str, int],
                                                                    list[tuple[str, Sequence[int]]], list[int]]:
    fw = Framework("p", plugins)
    nodes = [NodeInfo(_node(n)) for n in names]
    pi = PodInfo(POD)
    per, totals = fw.run_score(CycleState(None), pi, nodes)
    cols, tot = fw.score_columns(CycleState(None), pi, nodes, names)
    return per, totals, cols, tot


def test_random_tables_match_the_dict_computation() -> None:
    rng = random.Random(7)
    for _ in range(50):
        names = [f"n{i}" for i in range(rng.randint(1, 40))]
        plugins: list[tuple[Any, int]] = []
        for k in range(rng.randint(0, 6)):
            cls = _Normalized if rng.random() < 0.4 else _Table
            table = {n: rng.randint(0, 100 if cls is _Table else 5000) for n in names}
            plugins.append((cls(f"P{k}", table, batch=rng.random() < 0.5), rng.randint(1, 5)))
        per, totals, cols, tot = _run(plugins, names)
        want_per, want_totals = _reference(plugins, names)
        assert per == want_per and totals == want_totals
        assert [(p, list(c)) for p, c in cols] == [(p, [want_per[p][n] for n in names]) for p in want_per]
        assert tot == [want_totals[n] for n in names] and all(type(t) is int for t in tot)


@pytest.mark.parametrize(("bad", "shown"), [(101, "101"), (-1, "-1"), (300, "300"), (100.5, "100.5")])
def test_out_of_range_score_names_the_first_bad_plugin_and_value(bad: Any, shown: str) -> None:
    names = ["a", "b", "c"]
    ok = _Table("Ok", {"a": 1, "b": 2, "c": 3}, batch=True)
    first = _Table("First", {"a": 5, "b": bad, "c": 1000})
    later = _Table("Later", {"a": 777, "b": 0, "c": 0}, batch=True)
    with pytest.raises(SchedulingError) as exc:
        _run([(ok, 1), (first, 2), (later, 1)], names)
    assert str(exc.value) == (f'applying score defaultWeights on Score plugins: plugin "First" returns an invalid '
                              f"score {shown}, it should in the range of [0, 100] after normalizing")


def test_numpy_and_float_scores_sum_as_before() -> None:
    names = ["a", "b"]
    arr = _Table("Arr", {"a": 7, "b": 100}, batch=True, as_array=True)  # a numpy array from score_nodes
    flt = _Table("Float", {"a": 1.5, "b": 0.0})  # in range but not integers: the plain Python sum
    _, totals, _, tot = _run([(arr, 2), (flt, 1)], names)
    assert totals == {"a": 15.5, "b": 200.0} and tot == [15.5, 200.0]
    _, totals, cols, tot = _run([(arr, 3)], names)
    assert totals == {"a": 21, "b": 300} and [list(c) for _, c in cols] == [[7, 100]]


def test_wrong_length_from_score_nodes_is_an_error() -> None:
    class Short(_Table):
        def _score_nodes(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> tuple[Any, Status]:
            return [1], Status.success()

    with pytest.raises(ValueError, match="Short returned 1 scores for 2 nodes"):
        _run([(Short("Short", {}, batch=True), 1)], ["a", "b"])


def _schedule(explain: bool, seed: int) -> Any:
    names = [f"n{i}" for i in range(12)]
    tie = _Table("Tie", {n: (50 if i % 3 == 0 else 10) for i, n in enumerate(names)}, batch=True)
    norm = _Normalized("Norm", {n: 4 for n in names})
    fw = Framework("p", [(tie, 2), (norm, 1)])
    fw.set_opportunistic_batching(False)
    snap = Snapshot.from_objects([_node(n) for n in names], [], None)
    return Algorithm(rng=random.Random(seed)).schedule(fw, snap, PodInfo(POD), explain=explain)


def test_result_scores_and_totals_built_on_demand_equal_the_explain_ones() -> None:
    for seed in range(20):
        live, explained = _schedule(False, seed), _schedule(True, seed)
        assert live.selected == explained.selected  # same tie-break draw
        # ties broken among the top nodes in evaluation order, uniformly as upstream's selectHost
        best = max(explained.totals.values())
        assert explained.totals[live.selected] == best
        assert live.scores == explained.scores and live.totals == explained.totals
        assert list(live.totals) == live.feasible
        assert live.to_json() == explained.to_json()
    chosen = {_schedule(False, seed).selected for seed in range(40)}
    assert chosen == {"n0", "n3", "n6", "n9"}


@pytest.mark.parametrize("seed", range(5))
def test_select_host_draws_the_node_random_choice_over_the_tied_names_draws(seed: int) -> None:
    """selectHost's shortcut for ``random.Random`` (an index drawn with ``randrange``) picks the node
    that ``rng.choice`` over the tied names picks, draw for draw; an rng with its own ``choice`` (the
    parity runner's) is still asked with the names."""
    draws = random.Random(seed)
    algo = Algorithm(rng=random.Random(seed))
    oracle = random.Random(seed)
    for _ in range(300):
        n = draws.randint(1, 40)
        totals = [draws.randint(0, 3) for _ in range(n)]
        names = [f"n{i}" for i in range(n)]
        best = max(totals)
        tied = [i for i, t in enumerate(totals) if t == best]
        want = tied[0] if len(tied) == 1 else tied[[names[i] for i in tied].index(oracle.choice(
            [names[i] for i in tied]))]
        assert algo._select_host(names, totals) == want

    class Smallest(random.Random):
        def choice(self, seq: Any) -> Any:
            return min(seq)

    picky = Algorithm(rng=Smallest())
    assert picky._select_host(["b", "a", "c"], [5, 5, 1]) == 1
