"""The batch-form contract, checked generically for every registered plugin that has one (issue 14).

:class:`~py_scheduler.framework.interfaces.BatchFilterPlugin` / ``BatchScorePlugin`` state the rule the
runtime relies on: ``filter_nodes(state, pod, nodes)`` is ``None`` only when ``filter`` passes every
node and otherwise equals ``filter`` node by node (code and reasons, same order); ``score_nodes`` equals
``score`` node by node, or fails when some node's ``score`` fails. Hypothesis draws the cluster (the
parity generator's random scenarios: taints, affinity, spreading, images, volumes, DRA, GPUs), the
incoming Pod and the nodes handed over: the whole list, a run starting anywhere (wrapping around, as
the rotating Filter start does), any subset in any order, or clones of the snapshot's NodeInfos.
The plugin list comes from the registry, so a new plugin with a batch form is checked without
touching this test; each runs with its default args and, where a batch form has an args-dependent
path, with non-default ones too (:data:`NON_DEFAULT_ARGS`).
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from py_scheduler.cache.snapshot import Snapshot
from py_scheduler.framework.errors import PodParseError
from py_scheduler.framework.handle import Handle
from py_scheduler.framework.interfaces import (
    BatchFilterPlugin,
    BatchNormalizeScorePlugin,
    BatchScorePlugin,
    PreFilterPlugin,
    PreScorePlugin,
)
from py_scheduler.framework.types import CycleState, NodeInfo, PodInfo, Status
from py_scheduler.plugins import registry

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

from bench.parity_lib.generator import scenario  # noqa: E402

Obj = dict[str, Any]


def _batch_plugins() -> list[str]:
    out = []
    for name in registry.available():
        pl = registry.get(name)({}, Handle.detached())
        if isinstance(pl, BatchFilterPlugin | BatchScorePlugin):
            out.append(name)
    return out


BATCH_PLUGINS = _batch_plugins()
COLUMN_NORMALIZERS = [name for name in registry.available()
                      if isinstance(registry.get(name)({}, Handle.detached()), BatchNormalizeScorePlugin)]

_RESOURCES = [{"name": "cpu", "weight": 2}, {"name": "memory", "weight": 1}, {"name": "nvidia.com/gpu", "weight": 3}]
_TERM = {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-a", "zone-b"]}]}
NON_DEFAULT_ARGS: list[tuple[str, Obj]] = [
    ("NodeResourcesFit", {"scoringStrategy": {"type": "MostAllocated", "resources": _RESOURCES}}),
    ("NodeResourcesFit", {"scoringStrategy": {
        "type": "RequestedToCapacityRatio", "resources": _RESOURCES,
        "requestedToCapacityRatio": {"shape": [{"utilization": 0, "score": 10}, {"utilization": 30, "score": 2},
                                               {"utilization": 70, "score": 7}, {"utilization": 100, "score": 0}]}}}),
    ("NodeResourcesBalancedAllocation", {"resources": [{**r, "weight": 1} for r in _RESOURCES]}),
    ("NodeAffinity", {"addedAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            _TERM, {"matchExpressions": [{"key": "disk", "operator": "Exists"}]}]},
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 5, "preference": {"matchExpressions": [{"key": "pool", "operator": "NotIn",
                                                               "values": ["general"]}]}},
            {"weight": 2, "preference": _TERM}]}}),
    ("InterPodAffinity", {"hardPodAffinityWeight": 7, "ignorePreferredTermsOfExistingPods": True}),
]
"""Args that take a batch form down another path: MostAllocated / RequestedToCapacityRatio (with a
non-monotonic shape) and extended resources in NodeResourcesFit's score columns, the extra resources
of BalancedAllocation, NodeAffinity's addedAffinity (required and preferred, applied to every Pod),
InterPodAffinity's weights."""
CASES = [(name, {}) for name in BATCH_PLUGINS] + [c for c in NON_DEFAULT_ARGS if c[0] in BATCH_PLUGINS]


def test_every_non_default_case_names_a_batch_plugin() -> None:
    assert {name for name, _ in NON_DEFAULT_ARGS} <= set(BATCH_PLUGINS)


def test_the_batch_plugins_are_found_through_the_protocols() -> None:
    # the plugins that had a batch form when this test was written; more may come
    assert {"NodeResourcesFit", "NodeResourcesBalancedAllocation", "TaintToleration", "NodeAffinity",
            "InterPodAffinity", "PodTopologySpread", "ImageLocality", "GPUFilter", "GPUScore"} <= set(BATCH_PLUGINS)


def test_the_column_normalizers_are_found_through_the_protocol() -> None:
    assert {"TaintToleration", "NodeAffinity", "InterPodAffinity", "DynamicResources"} <= set(COLUMN_NORMALIZERS)


def _key(s: Status) -> tuple[int, tuple[str, ...]]:
    return int(s.code), tuple(s.reasons)


@st.composite
def _case(draw: st.DrawFn) -> tuple[Snapshot, PodInfo, list[NodeInfo]]:
    seed = draw(st.integers(0, 3))
    index = draw(st.integers(0, 400))
    objects = scenario(seed, index)
    try:
        snap = Snapshot.from_object_list(objects)
    except PodParseError:
        snap = None
    pending = [o for o in objects if o["kind"] == "Pod" and not o["spec"].get("nodeName")]
    if snap is None or not pending or not snap.node_info_list:
        return draw(st.nothing())
    raw = draw(st.sampled_from(pending))
    try:
        pod = PodInfo(raw)
    except PodParseError:
        return draw(st.nothing())
    all_nodes = snap.node_info_list
    n = len(all_nodes)
    how = draw(st.sampled_from(["all", "run", "subset", "clones"]))
    if how == "all":
        nodes = list(all_nodes)
    elif how == "run":
        start, length = draw(st.integers(0, n - 1)), draw(st.integers(1, n))
        nodes = [all_nodes[(start + i) % n] for i in range(length)]
    elif how == "subset":
        nodes = draw(st.permutations(all_nodes).map(lambda p: p[: max(1, len(p) // 2)]))
    else:
        nodes = [ni.clone() for ni in all_nodes]
    return snap, pod, nodes


def _check_filter(name: str, pl: Any, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> None:
    one = [_key(pl.filter(state, pod, ni)) for ni in nodes]
    got = pl.filter_nodes(state, pod, nodes)
    if got is None:
        assert all(k[0] == 0 for k in one), (name, one)
    else:
        assert len(got) == len(nodes)
        assert [_key(s) for s in got] == one, name


def _check_score(name: str, pl: Any, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> None:
    per_node = [pl.score(state, pod, ni) for ni in nodes]
    values, s = pl.score_nodes(state, pod, nodes)
    if all(ps.is_success() for _, ps in per_node):
        assert s.is_success(), (name, s.reasons)
        assert list(values) == [v for v, _ in per_node], name
    else:
        assert not s.is_success(), name


@pytest.mark.parametrize(("name", "args"), CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.filter_too_much,
                                                                   HealthCheck.too_slow])
@given(case=_case())
def test_batch_form_equals_per_node_form(name: str, args: Obj,
                                         case: tuple[Snapshot, PodInfo, list[NodeInfo]]) -> None:
    """The drawn chunk, then every node of the snapshot as a chunk of one (a batch form that
    mishandles one position or one kind of node is caught wherever that node sits)."""
    snap, pod, nodes = case
    pl = registry.get(name)(copy.deepcopy(args), Handle.detached())
    singles = [[ni] for ni in snap.node_info_list]
    if isinstance(pl, BatchFilterPlugin):
        state = CycleState(snap)
        run = True
        if isinstance(pl, PreFilterPlugin):
            _, s = pl.pre_filter(state, pod, list(snap.node_info_list))
            run = s.is_success()
        if run:
            for chunk in (nodes, *singles):
                _check_filter(name, pl, state, pod, chunk)
    if isinstance(pl, BatchScorePlugin):
        state = CycleState(snap)
        if isinstance(pl, PreFilterPlugin):
            pl.pre_filter(state, pod, list(snap.node_info_list))
        if isinstance(pl, PreScorePlugin) and not pl.pre_score(state, pod, nodes).is_success():
            return
        _check_score(name, pl, state, pod, nodes)
        if not isinstance(pl, PreScorePlugin):
            for chunk in singles:
                _check_score(name, pl, state, pod, chunk)


@pytest.mark.parametrize("name", COLUMN_NORMALIZERS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.filter_too_much,
                                                                   HealthCheck.too_slow])
@given(case=_case(), drawn=st.lists(st.integers(0, 300), max_size=12), equal=st.booleans(),
       pre_score=st.booleans())
def test_normalize_column_equals_normalize_score(name: str, case: tuple[Snapshot, PodInfo, list[NodeInfo]],
                                                 drawn: list[int], equal: bool, pre_score: bool) -> None:
    """``normalize_column`` gives what ``normalize_score`` leaves in the dict by node name, on the
    plugin's own scores of the drawn nodes and on drawn values (all equal, zeros, any), with and
    without PreScore having run (the error Status must match too)."""
    snap, pod, nodes = case
    pl = registry.get(name)({}, Handle.detached())
    state = CycleState(snap)
    if isinstance(pl, PreFilterPlugin):
        pl.pre_filter(state, pod, list(snap.node_info_list))
    if pre_score and isinstance(pl, PreScorePlugin):
        pl.pre_score(state, pod, nodes)
    columns = [drawn[:1] * len(drawn) if equal else drawn]
    if isinstance(pl, BatchScorePlugin):
        values, s = pl.score_nodes(state, pod, nodes)
        if s.is_success():
            columns.append(list(values))
    for values in columns:
        scores = {f"n{i}": v for i, v in enumerate(values)}
        want_status = pl.normalize_score(state, pod, scores)
        got, got_status = pl.normalize_column(state, pod, list(values))
        assert _key(got_status) == _key(want_status), name
        if want_status.is_success():
            assert got == list(scores.values()), (name, values)
