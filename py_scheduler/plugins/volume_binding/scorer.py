"""StorageCapacityScoring: a node's VolumeBinding score from the requested / capacity bytes per class.

Upstream: ``pkg/scheduler/framework/plugins/volumebinding/scorer.go`` (``buildScorerFunction``) and
``helper/shape_score.go`` (``BuildBrokenLinearFunction``).

For each storage class the Pod's volumes use on the node, ``utilization = requested * 100 /
capacity`` (Go integer division; 100 when the capacity is 0 or smaller than the request) is mapped
through the piecewise-linear ``shape`` (scores already scaled ×10 to 0..100). The node score is the
mean over classes rounded half away from zero (``math.Round``); 0 when the Pod has nothing to score
on the node. With the v1.37 default shape ``[(0, 10), (100, 0)]`` a class scores ``100 -
utilization``: the node whose volume leaves the most room wins.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from py_scheduler.framework.gomath import go_round
from py_scheduler.plugins.helpers.resource_scoring import (
    MAX_CUSTOM_PRIORITY_SCORE,
    UtilizationShapePoint,
    build_broken_linear_function,
)
from py_scheduler.plugins.volume_binding.binder import StorageResource

__all__ = ["DEFAULT_SHAPE", "MAX_UTILIZATION", "VolumeCapacityScorer", "build_scorer_function"]

MAX_UTILIZATION = 100
"""``maxUtilization`` (percent)."""

DEFAULT_SHAPE: tuple[UtilizationShapePoint, ...] = (
    UtilizationShapePoint(0, MAX_CUSTOM_PRIORITY_SCORE), UtilizationShapePoint(100, 0))
"""``SetDefaults_VolumeBindingArgs`` with StorageCapacityScoring on (Beta, default on in v1.37):
utilization 0 scores 10, utilization 100 scores 0 (before the ×10 scaling)."""

VolumeCapacityScorer = Callable[[Mapping[str, StorageResource]], int]
"""``volumeCapacityScorer``: storage class -> StorageResource (bytes) to a 0..100 node score."""


def build_scorer_function(shape: Sequence[UtilizationShapePoint]) -> VolumeCapacityScorer:
    """``buildScorerFunction`` over a configured shape (scores 0..10; scaled ×10 here as ``New`` does)."""
    raw = build_broken_linear_function(
        [UtilizationShapePoint(p.utilization, p.score * (100 // MAX_CUSTOM_PRIORITY_SCORE)) for p in shape])

    def class_score(requested: int, capacity: int) -> int:
        if capacity == 0 or requested > capacity:
            return raw(MAX_UTILIZATION)
        return raw(requested * MAX_UTILIZATION // capacity)

    def score(class_resources: Mapping[str, StorageResource]) -> int:
        if not class_resources:
            return 0
        total = sum(class_score(r.requested, r.capacity) for r in class_resources.values())
        return int(go_round(float(total) / float(len(class_resources))))

    return score
