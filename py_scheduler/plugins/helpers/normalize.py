"""Score normalization shared by Score plugins.

Upstream: ``pkg/scheduler/framework/plugins/helper/normalize_score.go`` (``DefaultNormalizeScore``).
"""

from __future__ import annotations

from collections.abc import Sequence

from py_scheduler.framework.gomath import go_div

__all__ = ["default_normalize_column", "default_normalize_score"]


def default_normalize_score(max_priority: int, reverse: bool, scores: dict[str, int]) -> None:
    """Scale ``scores`` (node name -> raw score, assumed >= 0) from ``[0, max(scores)]`` to
    ``[0, max_priority]`` in place, with Go's truncating integer division
    (``max_priority * score / max``); ``reverse`` then maps each score to ``max_priority - score``.

    When every score is 0 the scores stay 0, or all become ``max_priority`` when ``reverse``.
    Upstream: ``helper.DefaultNormalizeScore``.
    """
    scores.update(zip(scores, default_normalize_column(max_priority, reverse, list(scores.values())), strict=True))


def default_normalize_column(max_priority: int, reverse: bool, values: Sequence[int]) -> list[int]:
    """:func:`default_normalize_score` on a column: the scores it leaves, in the order of
    ``values`` (each distinct score computed once)."""
    max_count = max(values, default=0)
    if max_count <= 0:
        return [max_priority] * len(values) if reverse else list(values)
    if reverse:
        done = {s: max_priority - go_div(max_priority * s, max_count) for s in set(values)}
    else:
        done = {s: go_div(max_priority * s, max_count) for s in set(values)}
    return list(map(done.__getitem__, values))
