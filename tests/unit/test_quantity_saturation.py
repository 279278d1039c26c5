"""Quantities beyond int64 saturate instead of growing without bound.

Found by the fault suite (tests/e2e/faults/test_bad_input.py): the API accepts a Node allocatable
cpu of 400 nines (and a snapshot may hold the YAML float ``1e308``); its milli-value made
NodeResourcesBalancedAllocation raise ``OverflowError: int too large to convert to float`` for every
Pod, so nothing could be scheduled anywhere. Upstream's ``MilliValue()`` returns an int64 (which
wraps); saturating keeps the value huge and finite.
"""

from __future__ import annotations

from py_scheduler.framework import quantity
from py_scheduler.framework.types import NodeInfo, PodInfo


def test_value_and_milli_value_saturate_to_int64() -> None:
    assert quantity.milli_value(quantity.parse(1e308)) == quantity.MAX_INT64
    assert quantity.value(quantity.parse("9" * 400)) == quantity.MAX_INT64
    assert quantity.value(quantity.parse("-1e30")) == quantity.MIN_INT64
    assert quantity.milli_value(quantity.parse("100m")) == 100
    assert quantity.value(quantity.parse("7Ei")) == 7 * 2**60  # in range: exact
    assert quantity.value(quantity.parse("8Ei")) == quantity.MAX_INT64  # 2**63: one past int64


def test_non_finite_numbers_are_not_quantities() -> None:
    import math

    import pytest

    for raw in (math.inf, -math.inf, math.nan):
        with pytest.raises(quantity.QuantityError):
            quantity.parse(raw)


def test_huge_allocatable_scores_without_overflow() -> None:
    ni = NodeInfo()
    ni.set_node({"metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "9" * 400, "memory": "8Gi",
                                                                       "pods": "110"}}})
    assert ni.allocatable.milli_cpu == quantity.MAX_INT64
    pod = PodInfo({"metadata": {"name": "p", "namespace": "d"},
                   "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}})
    assert float(pod.requests.milli_cpu + 500) / float(ni.allocatable.milli_cpu) < 1e-10
