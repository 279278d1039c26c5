"""With Filter shards, ``Algorithm._find_nodes_that_pass_filters`` filters chunks ahead of the nodes
still needed and keeps the statuses up to the ``to_find``-th feasible node only (issue 32 item 3).

Property against the search node by node (kept here): for random feasibility patterns, start
indexes and an Error on one random node, the feasible nodes, the rejected nodes, the next start
index and whether the error is raised are those of upstream's search, which stops at the
``to_find``-th feasible node and never reaches an Error past it.
"""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from py_scheduler.framework.algorithm import Algorithm, Diagnosis, num_feasible_nodes_to_find
from py_scheduler.framework.runtime import SchedulingError
from py_scheduler.framework.types import Code, Status

REJECT = Status(Code.UNSCHEDULABLE, ["no"], "Fake")


class _Fw:
    """What the search reads of a Framework; Filter by a fixed verdict per node name."""

    def __init__(self, verdicts: dict[str, str], shards: bool) -> None:
        self.verdicts = verdicts
        self.percentage_of_nodes_to_score = None
        self.score_plugins = ["Score"]
        self.filter_plugins: list[Any] = []
        self.nominator = None
        self.shards = object() if shards else None
        self.calls: list[int] = []

    def filter_chunk_sharded(self, active: Any, state: Any, pod: Any, chunk: list[Any]) -> list[Status | None] | None:
        self.calls.append(len(chunk))
        out: list[Status | None] = []
        for ni in chunk:
            v = self.verdicts[ni.name]
            if v == "error":
                raise SchedulingError(f"error on {ni.name}")
            out.append(None if v == "ok" else REJECT)
        return None if all(s is None for s in out) else out

    def _observe(self, *args: Any) -> None:
        pass


def _search(fw: _Fw, nodes: list[Any], start: int) -> tuple[Any, ...]:
    alg = Algorithm(rng=random.Random(0))
    alg.next_start_node_index = start
    d = Diagnosis()
    state = SimpleNamespace(skip_filter=set())
    try:
        got = alg._find_nodes_that_pass_filters(fw, state, None, nodes, d, len(nodes))  # type: ignore[arg-type]
    except SchedulingError as exc:
        return ("raised", str(exc))
    return [n.name for n in got], sorted(d.node_to_status), alg.next_start_node_index


def _node_by_node(verdicts: list[str], start: int) -> tuple[Any, ...]:
    n = len(verdicts)
    to_find = num_feasible_nodes_to_find(None, 0, n)
    feasible: list[str] = []
    rejected: list[str] = []
    for i in range(n):
        k = (start + i) % n
        if verdicts[k] == "error":
            return ("raised", f"error on n{k:04d}")
        (feasible if verdicts[k] == "ok" else rejected).append(f"n{k:04d}")
        if len(feasible) == to_find:
            break
    return feasible, sorted(rejected), (start + len(feasible) + len(rejected)) % n


@settings(max_examples=150, deadline=None)
@given(n=st.integers(100, 700), rate=st.floats(0.01, 1.0), start=st.integers(0, 10_000),
       error_at=st.one_of(st.none(), st.integers(0, 699)), seed=st.integers(0, 2**32 - 1))
def test_searching_ahead_keeps_exactly_what_the_node_by_node_search_finds(
        n: int, rate: float, start: int, error_at: int | None, seed: int) -> None:
    rng = random.Random(seed)
    verdicts = ["ok" if rng.random() < rate else "no" for _ in range(n)]
    if error_at is not None and error_at < n:
        verdicts[error_at] = "error"
    nodes = [SimpleNamespace(name=f"n{i:04d}") for i in range(n)]
    by_name = {f"n{i:04d}": v for i, v in enumerate(verdicts)}
    want = _node_by_node(verdicts, start % n)
    ahead = _Fw(by_name, shards=True)
    assert _search(ahead, nodes, start) == want
    assert _search(_Fw(by_name, shards=False), nodes, start) == want


def test_the_search_runs_ahead_only_with_shards() -> None:
    n = 1000
    verdicts = {f"n{i:04d}": ("ok" if i % 10 == 0 else "no") for i in range(n)}  # 10 % feasible
    nodes = [SimpleNamespace(name=f"n{i:04d}") for i in range(n)]
    plain, ahead = _Fw(verdicts, shards=False), _Fw(verdicts, shards=True)
    assert _search(plain, nodes, 0) == _search(ahead, nodes, 0)
    assert len(ahead.calls) < len(plain.calls)  # bigger chunks, fewer of them
    assert max(ahead.calls) > max(plain.calls)


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__])


def test_an_error_past_the_last_node_needed_is_not_raised() -> None:
    # 700 nodes: 315 to find. The first chunk (315 nodes) is 10 % feasible (32 nodes), so the next runs
    # ahead over the remaining 385 nodes, all feasible: the search needs 283 of them and stops at node 597. An
    # Error on node 650, which node-by-node never reaches, must not fail the cycle.
    n = 700
    assert num_feasible_nodes_to_find(None, 0, n) == 315
    verdicts = {f"n{i:04d}": ("ok" if i >= 315 or i % 10 == 0 else "no") for i in range(n)}
    verdicts["n0650"] = "error"
    nodes = [SimpleNamespace(name=f"n{i:04d}") for i in range(n)]
    ahead = _Fw(verdicts, shards=True)
    got = _search(ahead, nodes, 0)
    assert got == _node_by_node([verdicts[f"n{i:04d}"] for i in range(n)], 0)
    assert got[0][-1] == "n0597"
    assert max(ahead.calls) > 315  # it did run ahead, into the error, and searched again exactly
