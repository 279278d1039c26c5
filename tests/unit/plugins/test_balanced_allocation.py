"""NodeResourcesBalancedAllocation: v1.37's change-in-balance score, the best-effort Skip, args.

Numbers worked by hand from balanced_allocation.go:
``score = 50 + (50 + b(with pod) - b(without pod)) / 2`` with ``b = int((1 - std) * 100)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from py_scheduler.cache.snapshot import Snapshot
from py_scheduler.framework.errors import ConfigError
from py_scheduler.framework.types import Code, CycleState, PodInfo
from py_scheduler.plugins import registry
from py_scheduler.plugins.balanced_allocation import NodeResourcesBalancedAllocation
from py_scheduler.plugins.helpers.resource_scoring import balanced_resource_score, balanced_resource_scorer
from tests.unit.plugins.plain_handle import plain_handle


def node(name: str, cpu: str, memory: str, **extra: str) -> dict[str, Any]:
    alloc = {"cpu": cpu, "memory": memory, "pods": "110", **extra}
    return {"metadata": {"name": name}, "status": {"allocatable": alloc}}


def pod(name: str = "p", node_name: str = "", pod_level: dict[str, str] | None = None,
        **requests: str) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "c", "image": "busybox"}
    if requests:
        c["resources"] = {"requests": requests}
    spec: dict[str, Any] = {"containers": [c]}
    if node_name:
        spec["nodeName"] = node_name
    if pod_level:
        spec["resources"] = {"requests": pod_level}
    return {"metadata": {"name": name, "uid": name}, "spec": spec}


def run(incoming: dict[str, Any], nodes: list[dict[str, Any]], existing: Sequence[dict[str, Any]] = (),
        args: dict[str, Any] | None = None) -> dict[str, int] | None:
    """Scores per node, or None when PreScore skipped."""
    snap = Snapshot.from_objects(nodes, list(existing))
    pl = NodeResourcesBalancedAllocation.create(args or {}, plain_handle())
    state = CycleState(snap)
    pi = PodInfo(incoming)
    s = pl.pre_score(state, pi, snap.node_info_list)
    if s.is_skip():
        return None
    assert s.is_success()
    out = {}
    for ni in snap.node_info_list:
        sc, st = pl.score(state, pi, ni)
        assert st.is_success()
        out[ni.name] = sc
    return out


def test_best_effort_pod_skips() -> None:
    assert run(pod(), [node("n", "4", "4Gi")]) is None


def test_explicit_zero_requests_skip_too() -> None:
    assert run(pod(cpu="0", memory="0"), [node("n", "4", "4Gi")]) is None


def test_score_without_prescore_is_zero_for_best_effort() -> None:
    snap = Snapshot.from_objects([node("n", "4", "4Gi")])
    pl = NodeResourcesBalancedAllocation.create({}, plain_handle())
    sc, st = pl.score(CycleState(snap), PodInfo(pod()), snap.get("n"))
    assert (sc, st.code) == (0, Code.SUCCESS)
    sc, st = pl.score(CycleState(snap), PodInfo(pod(cpu="3", memory="5000")), snap.get("n"))
    # Without PreScore the request is computed on the fly: with 0.75, ~0.0000012 -> 62; without 100 -> 56.
    assert (sc, st.code) == (56, Code.SUCCESS)


def test_empty_node_unbalancing_pod() -> None:
    # with: 0.75, 0.5 -> std 0.125 -> 87; without: 100 -> 50 + (50 + 87 - 100) / 2 = 68.
    assert run(pod(cpu="3", memory="5000"), [node("n", "4", "10000")]) == {"n": 68}


def test_pod_that_restores_balance_scores_high() -> None:
    existing = [pod("e", node_name="n", cpu="3")]
    # without: 0.75, 0 -> std 0.375 -> 62; with: 0.75, 0.75 -> 100 -> 50 + (50 + 100 - 62) / 2 = 94.
    assert run(pod(cpu="0", memory="3000"), [node("n", "4", "4000")], existing) == {"n": 94}


def test_missing_request_counts_as_zero_not_default() -> None:
    # Only memory requested: cpu stays 0 (no 100m default). with: 0, 0.5 -> 75; without 100 -> 62.
    assert run(pod(memory="500"), [node("n", "4", "1000")]) == {"n": 62}


def test_existing_pods_without_requests_do_not_count() -> None:
    existing = [pod("e", node_name="n")]
    assert run(pod(memory="500"), [node("n", "4", "1000")], existing) == {"n": 62}


def test_three_resources_use_population_std() -> None:
    args = {"resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1},
                          {"name": "nvidia.com/gpu", "weight": 1}]}
    # with: 0.5, 0.5, 0.25 -> std 0.11785 -> 88; without 100 -> 50 + 38 / 2 = 69.
    got = run(pod(cpu="500m", memory="500", **{"nvidia.com/gpu": "1"}),
              [node("n", "1", "1000", **{"nvidia.com/gpu": "4"})], args=args)
    assert got == {"n": 69}


def test_unrequested_scalar_resource_is_left_out() -> None:
    args = {"resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1},
                          {"name": "nvidia.com/gpu", "weight": 1}]}
    nodes = [node("n", "4", "10000", **{"nvidia.com/gpu": "4"})]
    assert run(pod(cpu="3", memory="5000"), nodes, args=args) == {"n": 68}


def test_pod_level_requests_are_honoured() -> None:
    # pod-level cpu 3 overrides the container's 1: with 0.75, 0.25 -> 75; without 100 -> 62.
    assert run(pod(pod_level={"cpu": "3"}, cpu="1", memory="1Gi"), [node("n", "4", "4Gi")]) == {"n": 62}


def test_fraction_capped_at_one() -> None:
    assert balanced_resource_score([5000, 500], [4000, 1000]) == 75
    assert balanced_resource_scorer([5000, 500], [0, 0], [4000, 1000]) == 62


def test_zero_allocatable_resources_are_skipped() -> None:
    assert balanced_resource_score([100, 500], [0, 1000]) == 100


@pytest.mark.parametrize(("args", "field"), [
    ({"resources": [{"name": "cpu", "weight": 2}]}, "resources[0].weight: Invalid value: 2: must be 1"),
    ({"resources": [{"name": "cpu", "weight": 1}, {"name": "cpu", "weight": 1}]},
     'resources[1].name: Duplicate value: "cpu"'),
    ({"foo": []}, 'unknown field "foo"'),
])
def test_invalid_args(args: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as ei:
        registry.get("NodeResourcesBalancedAllocation")(args, plain_handle())
    assert field in str(ei.value)


def test_args_defaults() -> None:
    pl = NodeResourcesBalancedAllocation.create({"resources": [{"name": "cpu"}, {"name": "memory", "weight": 0}]},
                                                plain_handle())
    assert [(r.name, r.weight) for r in pl.args.resources] == [("cpu", 1), ("memory", 1)]
    assert [(r.name, r.weight) for r in NodeResourcesBalancedAllocation.create({}, plain_handle()).args.resources] == [
        ("cpu", 1), ("memory", 1)]
