"""Parity bug: scheduling error messages quoted plugin names the Python way.

Found by ``bench/parity --seed 1`` (scenarios 486, 505, 548, 777, 861 of 1000: a DRA claim whose
``All`` request cannot satisfy a ``matchAttribute`` constraint makes the allocator fail with an
Error). Upstream formats plugin names with Go's ``%q`` (``running "DynamicResources" filter
plugin: ...``); py-scheduler used ``!r`` (``'DynamicResources'``). The same wording applies to the
PreFilter, PreScore, Score, NormalizeScore, score-range and Reserve errors, which upstream also
wraps (``running Score plugins: plugin "X" failed with: ...``, ``running Normalize on Score plugins:
...``, ``applying score defaultWeights on Score plugins: ...``, ``running Reserve plugin "X": ...``).

Upstream: ``framework/runtime/framework.go`` (``RunPreFilterPlugins``, ``RunFilterPlugins``,
``RunPreScorePlugins``, ``RunScorePlugins``, ``normalizeScores``, ``RunReservePluginsReserve``).
"""

from __future__ import annotations

from typing import Any

import pytest

from py_scheduler.framework.runtime import Framework, SchedulingError
from py_scheduler.framework.types import Code, CycleState, NodeInfo, PodInfo, Status
from tests.unit.regressions._util import node, pod, run

D = "gpu.example.com"
OBJS = [
    node("n1"),
    {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "n1-gpu"},
     "spec": {"driver": D, "nodeName": "n1", "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
              "devices": [{"name": "gpu-0", "attributes": {"model": {"string": "a100"}}},
                          {"name": "gpu-1", "attributes": {"model": {"string": "l4"}}}]}},
    {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu"},
     "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{D}"'}}]}},
    {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
     "metadata": {"name": "c", "namespace": "default", "uid": "uid-c"},
     "spec": {"devices": {"requests": [
         {"name": "r0", "exactly": {"deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 1}},
         {"name": "r1", "exactly": {"deviceClassName": "gpu", "allocationMode": "All"}}],
         "constraints": [{"matchAttribute": f"{D}/model"}]}}},
    pod("p", resourceClaims=[{"name": "x", "resourceClaimName": "c"}]),
]

# Oracle (kube-scheduler v1.37.2 framework) on OBJS: the cycle fails with this error.
WANT_ERROR = ('running "DynamicResources" filter plugin: claim default/c, request r1: cannot add device '
              'gpu.example.com/n1/gpu-0 because a claim constraint would not be satisfied')


def test_filter_error_matches_upstream() -> None:
    (res,) = run(OBJS)
    assert res["selected"] is None
    assert res["error"] == WANT_ERROR


class _Failing:
    """A Score plugin (with NormalizeScore) failing at the point named by ``where``."""

    name = "Failing"

    def __init__(self, where: str) -> None:
        self.where = where

    def score(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> tuple[int, Status]:
        if self.where == "score":
            return 0, Status.error("boom", self.name)
        return (1000 if self.where == "range" else 1), Status.success()

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: dict[str, int]) -> Status:
        return Status.error("boom", self.name) if self.where == "normalize" else Status.success()

    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        return Status.error("boom", self.name)

    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        return None


@pytest.mark.parametrize(("where", "message"), [
    ("score", 'running Score plugins: plugin "Failing" failed with: boom'),
    ("normalize", 'running Normalize on Score plugins: plugin "Failing" failed with: boom'),
    ("range", 'applying score defaultWeights on Score plugins: plugin "Failing" returns an invalid score 1000, '
              "it should in the range of [0, 100] after normalizing"),
])
def test_score_errors_wrap_as_upstream(where: str, message: str) -> None:
    pl: Any = _Failing(where)
    fw = Framework("p", [(pl, 1)])
    ni = NodeInfo(node("n1"))
    pi = PodInfo(pod("p"))
    with pytest.raises(SchedulingError) as exc:
        fw.run_score(CycleState(None), pi, [ni])
    assert str(exc.value) == message


def test_reserve_error_wraps_as_upstream() -> None:
    pl: Any = _Failing("score")
    fw = Framework("p", [(pl, 1)])
    st = fw.run_reserve(CycleState(None), PodInfo(pod("p")), "n1")
    assert st.code == Code.ERROR
    assert st.message() == 'running Reserve plugin "Failing": boom'
