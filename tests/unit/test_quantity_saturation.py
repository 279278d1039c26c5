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


def test_large_exponents_the_api_server_stores_are_quantities() -> None:
    """The API server stores a Pod requesting cpu "1e400" (as "10e399": upstream parses the exponent as
    an int64); py-scheduler called it "not a valid quantity". Such magnitudes saturate like 400 nines,
    tiny ones round up like "1e-9"; an exponent beyond int64 stays invalid, as upstream."""
    import pytest

    for raw in ("1e400", "10e399", "1e308", "123e99999999"):
        assert quantity.milli_value(quantity.parse(raw)) == quantity.MAX_INT64, raw
    assert quantity.value(quantity.parse("-1e400")) == quantity.MIN_INT64
    assert quantity.milli_value(quantity.parse("1e-400")) == 1
    assert quantity.milli_value(quantity.parse("-1e-400")) == 0
    assert quantity.value(quantity.parse("0e99999999")) == 0
    assert quantity.milli_value(quantity.parse("1" * 2000 + "e-1998")) == 11_112  # 11.11...: not clamped
    assert quantity.milli_value(quantity.parse("12e-1")) == 1200
    with pytest.raises(quantity.QuantityError):
        quantity.parse("1e" + "9" * 20)
    with pytest.raises(quantity.QuantityError):  # not int()'s digit limit (a plain ValueError)
        quantity.parse("1e" + "9" * 5000)
    assert quantity.milli_value(quantity.parse("1e" + "0" * 5000 + "3")) == 1_000_000  # leading zeros: 1e3
    pod = {"metadata": {"name": "p", "namespace": "default", "uid": "u"},
           "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "10e399"}}}]}}
    assert PodInfo(pod).requests.milli_cpu == quantity.MAX_INT64


def test_a_final_newline_is_not_part_of_a_quantity() -> None:
    """Python's ``$`` also matches before a final newline, so "5\\n" and "1Gi\\n" were read as 5 and 1Gi;
    Go's resource.ParseQuantity refuses both."""
    import pytest

    for raw in ("5\n", "1Gi\n", "1e3\n"):
        with pytest.raises(ValueError):
            quantity.parse(raw)
    assert quantity.parse("1Gi") == 2**30
