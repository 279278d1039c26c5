"""Score normalization shared by Score plugins.

Upstream: ``pkg/scheduler/framework/plugins/helper/normalize_score.go`` (``DefaultNormalizeScore``).
"""

from __future__ import annotations

from py_scheduler.framework.gomath import go_div

__all__ = ["default_normalize_score"]


def default_normalize_score(max_priority: int, reverse: bool, scores: dict[str, int]) -> None:
    """Scale ``scores`` (node name -> raw score, assumed >= 0) from ``[0, max(scores)]`` to
    ``[0, max_priority]`` in place, with Go's truncating integer division
    (``max_priority * score / max``); ``reverse`` then maps each score to ``max_priority - score``.

    When every score is 0 the scores stay 0, or all become ``max_priority`` when ``reverse``.
    Upstream: ``helper.DefaultNormalizeScore``.
    """
    max_count = 0
    for s in scores.values():
        if s > max_count:
            max_count = s
    if max_count == 0:
        if reverse:
            for k in scores:
                scores[k] = max_priority
        return
    for k, s in scores.items():
        v = go_div(max_priority * s, max_count)
        scores[k] = max_priority - v if reverse else v
