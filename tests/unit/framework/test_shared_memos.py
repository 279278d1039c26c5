"""Every process-wide memo of ``py_scheduler/framework/memo.py`` (:data:`memo.SHARED`) is invisible: on
random inputs, the memoized computation (memo empty, then full of hits, then bounded to 2 entries so
it evicts) returns what the plain computation (memo disabled: ``size`` 0) returns. A memo added to
``SHARED`` without a case here fails :func:`test_every_shared_memo_has_a_case`.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from py_scheduler.framework import memo
from py_scheduler.framework.errors import PodParseError
from py_scheduler.framework.types import PodInfo
from py_scheduler.plugins.dynamic_resources import capacity
from py_scheduler.plugins.helpers import cel, queueing_hints, storage
from py_scheduler.plugins.helpers.resource_scoring import (
    DEFAULT_RESOURCES,
    ResourceAllocationScorer,
    least_resource_scorer,
)

Obj = dict[str, Any]
QTY = st.sampled_from(["1", "100m", "1Gi", "1.5", "abc", "-1", "", "1e3", "0.0001", 1, 1.0, True, None])


@st.composite
def pods(draw: st.DrawFn) -> Obj:
    containers = [{"name": f"c{i}", "resources": {"requests": {"cpu": draw(QTY), "memory": draw(QTY)}}}
                  for i in range(draw(st.integers(1, 2)))]
    spec: Obj = {"containers": containers}
    if draw(st.booleans()):
        spec["overhead"] = {"cpu": draw(QTY)}
    return {"metadata": {"name": draw(st.sampled_from(["a", "b"])), "uid": "u",
                         "labels": {"app": draw(st.sampled_from(["x", "y"]))}}, "spec": spec}


def _pod_info(make: Callable[[Obj], PodInfo]) -> Callable[[Obj], Any]:
    def run(pod: Obj) -> Any:
        try:
            pi = make(pod)
        except PodParseError as exc:
            return ("error", exc.field, str(exc))
        return (pi.key, pi.labels, pi.requests, pi.non0_cpu, pi.non0_mem)
    return run


ZONES = [{"zone": "z1"}, {"zone": "z2"}, {}]
PVS = st.builds(lambda vals, op, shape: {"spec": {"nodeAffinity": {
    "ok": {"required": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": op,
                                                                      "values": vals}]}]}},
    "none": {}, "bad": "not a map", "badop": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "zone", "operator": "Near", "values": vals}]}]}}}[shape]}},
    st.lists(st.sampled_from(["z1", "z2"]), max_size=2), st.sampled_from(["In", "NotIn", "Exists"]),
    st.sampled_from(["ok", "none", "bad", "badop"]))
EXPRESSIONS = st.sampled_from(['device.driver == "a"', 'device.attributes["x"].y > 1', "device.driver ==",
                               "true", 'device.capacity["a"].memory.compareTo(quantity("1Gi")) >= 0'])


def _selector(expr: str) -> Any:
    res = cel.compile_selector(expr)
    if res.error is not None:
        return ("error", str(res.error))
    try:
        return ("ok", cel.device_matches(res, cel.device_variable("a", {"name": "d"})))
    except Exception as exc:
        return ("eval error", str(exc))


@dataclass(frozen=True)
class Case:
    memo: memo.SharedMemo[Any, Any]
    inputs: st.SearchStrategy[Any]
    fn: Callable[[Any], Any]
    copies: bool = True
    """Feed deep copies too (value-keyed memos: equal inputs, distinct objects)."""


@st.composite
def pods_with_pod_level(draw: st.DrawFn) -> Obj:
    """:func:`pods`, some with pod-level requests (which two of the scorer settings skip)."""
    pod = draw(pods())
    if draw(st.booleans()):
        pod["spec"]["resources"] = {"requests": {"cpu": draw(QTY)}}
    return pod


def _scorer_requests(pod: Obj) -> list[Any]:
    """What each of the four resource scorer settings reads as the Pod's requests (or its error)."""
    out: list[Any] = []
    for use_requested, pod_level in ((False, False), (False, True), (True, False), (True, True)):
        scorer = ResourceAllocationScorer("LeastAllocated", least_resource_scorer(DEFAULT_RESOURCES), DEFAULT_RESOURCES,
                                          use_requested=use_requested, pod_level_and_status=pod_level)
        try:
            out.append(scorer._compute_pod_request_decimals(cast(PodInfo, SimpleNamespace(pod=pod))))
        except PodParseError as exc:
            out.append(("error", exc.field, str(exc)))
    return out


CASES = [
    Case(memo.REQUESTS, pods(), _pod_info(PodInfo)),
    Case(memo.SCORER_REQUESTS, pods_with_pod_level(), _scorer_requests),
    Case(memo.HINT_POD_INFOS, pods(), _pod_info(queueing_hints.hint_pod_info)),
    Case(memo.PV_NODE_AFFINITY, PVS,
         lambda pv: [storage.affinity_matches(storage.compiled_node_affinity(pv), z) for z in ZONES]),
    Case(memo.CEL_SELECTORS, EXPRESSIONS, _selector, copies=False),
    Case(memo.QUANTITIES, QTY, capacity._q, copies=False),
]


@contextlib.contextmanager
def _sized(m: memo.SharedMemo[Any, Any], size: int) -> Iterator[None]:
    saved = m.size
    m.clear()
    m.size = size
    try:
        yield
    finally:
        m.size = saved
        m.clear()


def test_every_shared_memo_has_a_case() -> None:
    assert [c.memo.name for c in CASES] == [m.name for m in memo.SHARED]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.memo.name)
def test_memo_returns_the_plain_computation(case: Case) -> None:
    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(case.inputs, min_size=1, max_size=5))
    def run(xs: list[Any]) -> None:
        xs = xs + xs + ([copy.deepcopy(x) for x in xs] if case.copies else [])
        with _sized(case.memo, 0):
            plain = [case.fn(x) for x in xs]
            assert not case.memo
        for size in (case.memo.size, 2):
            with _sized(case.memo, size):
                assert [case.fn(x) for x in xs] == plain
                assert [case.fn(x) for x in xs] == plain  # hits
                assert len(case.memo) <= size

    run()


def test_lru_keeps_what_is_used() -> None:
    m = memo.SharedMemo[str, int]("t", size=2, evict=memo.Evict.LRU, depends="")
    m.store("a", 1)
    m.store("b", 2)
    assert m.lookup("a") == 1
    m.store("c", 3)
    assert dict(m) == {"a": 1, "c": 3}


def test_identity_memo_never_answers_for_an_equal_object() -> None:
    m = memo.IdentityMemo[int]()
    a, b = {"x": 1}, {"x": 1}
    m.put(a, 1)
    assert m.find(a) == 1 and m.find(b) is None
