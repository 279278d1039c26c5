"""Consumable capacity (DRAConsumableCapacity, with DRAFractionalCapacityRange): how much of a
device's capacity a request consumes, and whether it still fits.

Upstream: ``k8s.io/dynamic-resource-allocation@v0.37.2/structured/internal/incubating/consumable_capacity.go``
(``CmpRequestOverCapacity``, ``calculateConsumedCapacity``, ``fillEmptyRequest``, ``roundUpRange``,
``roundUpValidValues``, ``GetConsumedCapacityFromRequest``, ``violatesPolicy``, ``useMilli``,
``safeMilliValue``).

Shapes: a device's ``capacity`` is the resource.k8s.io/v1 map ``name -> {"value": Quantity,
"requestPolicy": {"default", "validValues": [...], "validRange": {"min", "max", "step"}}}``; a
request's ``capacity`` is ``{"requests": {name: Quantity}}``. Amounts are exact ``Decimal`` values of
the quantities (bytes for memory, plain numbers otherwise); consumed-capacity maps are ``name ->
Decimal``.

One deliberate approximation: upstream compares a consumed amount with the policy's default using
Go struct equality of two ``resource.Quantity`` values (same internal representation); this module
compares values. The two differ only for a request that spells the default's value differently and
that the policy would otherwise reject, which API validation of the policy makes moot.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, cast

from py_scheduler.framework import quantity as qty
from py_scheduler.framework.memo import QUANTITIES
from py_scheduler.framework.quantity import format_quantity as format_quantity

__all__ = ["CapacityError", "consumed_from_request", "fits_capacity", "format_quantity", "request_amounts"]

MAX_INT64 = 2**63 - 1


class CapacityError(ValueError):
    """A capacity request that cannot be represented (upstream's ``errCapacityRequestNotRepresentable``
    / ``errNegativeCapacity``); ``str()`` is upstream's message after ``capacity "NAME": ``."""


def _q(raw: object) -> Decimal | None:
    """``raw`` as a quantity, None when it is absent or invalid.

    Quantity strings are memoized (:data:`~py_scheduler.framework.memo.QUANTITIES`: a device's
    capacities and request policies are read for every device of every node in every allocation:
    ~2/3 of ``fits_capacity``'s time went to parsing the same few strings)."""
    if raw is None:
        return None
    if type(raw) is str and raw in QUANTITIES:
        return cast("Decimal | None", QUANTITIES[raw])
    try:
        v: Decimal | None = qty.parse(raw)
    except qty.QuantityError:
        v = None
    return QUANTITIES.store(raw, v) if type(raw) is str else v


def request_amounts(capacity_requirements: object) -> dict[str, Decimal] | None:
    """A request's ``capacity.requests`` as name -> amount; None when the request names none."""
    if not isinstance(capacity_requirements, Mapping):
        return None
    reqs = capacity_requirements.get("requests")
    if not isinstance(reqs, Mapping):
        return None
    out: dict[str, Decimal] = {}
    for name, raw in reqs.items():
        v = _q(raw)
        out[str(name)] = v if v is not None else Decimal(0)
    return out


def _value(q: Decimal) -> int:
    """``Quantity.Value()``: rounded up."""
    return math.ceil(q)


def _milli(q: Decimal) -> int:
    """``Quantity.MilliValue()``: thousandths, rounded up."""
    return math.ceil(q * 1000)


def _safe_milli(q: Decimal) -> int | None:
    """``safeMilliValue``: the milli value when ``q`` is exactly representable in thousandths."""
    m = _milli(q)
    return m if Decimal(m) / 1000 == q else None


def _use_milli(vrange: Mapping[str, Any], fractional: bool) -> bool:
    """``useMilli``: range arithmetic in thousandths when the gate is on and min, max and step are
    representable so (and the step is at least 1m)."""
    if not fractional:
        return False
    for key in ("min", "max", "step"):
        q = _q(vrange.get(key))
        if q is None:
            continue
        m = _safe_milli(q)
        if m is None:
            return False
        if key == "step" and m < 1:
            return False
    return True


def _round_up_range(requested: Decimal, vrange: Mapping[str, Any], fractional: bool) -> Decimal:
    """``roundUpRange``: at least ``min``, then up to ``min + k * step``.

    Raises:
        CapacityError: the rounded value leaves the int64 (milli) range.
    """
    vmin = _q(vrange.get("min")) or Decimal(0)
    if requested < vmin:
        return vmin
    step = _q(vrange.get("step"))
    if step is None:
        return requested
    not_repr = "capacity request cannot be represented in the device's range arithmetic"
    if _use_milli(vrange, fractional):
        req_m = _safe_milli(requested)
        if req_m is None:
            raise CapacityError(f"{not_repr}: request {requested} is not a representable milli value")
        step_m, min_m = _milli(step), _milli(vmin)
        added = req_m - min_m
        n = added // step_m + (1 if added % step_m else 0)
        if n > (MAX_INT64 - min_m) // step_m:
            raise CapacityError(f"{not_repr}: rounding request {requested} up to the next step passes the "
                                f"milli-value range")
        return Decimal(min_m + step_m * n) / 1000
    if requested > MAX_INT64:
        raise CapacityError(f"{not_repr}: request {requested} exceeds MaxInt64")
    req_i, step_i, min_i = _value(requested), _value(step), _value(vmin)
    added = req_i - min_i
    # Go's integer division truncates toward zero; ``added`` is never negative here.
    n = added // step_i + (1 if added % step_i else 0)
    if min_i >= 0 and n > (MAX_INT64 - min_i) // step_i:
        raise CapacityError(f"{not_repr}: rounding request {requested} up to the next step passes MaxInt64")
    return Decimal(min_i + step_i * n)


def _consumed(requested: Decimal | None, cap: Mapping[str, Any], fractional: bool) -> Decimal:
    """``calculateConsumedCapacity``: the policy's default (or the whole capacity) for no request,
    the request rounded up to the policy's range or valid values otherwise."""
    policy = cap.get("requestPolicy")
    if requested is None:
        if isinstance(policy, Mapping) and _q(policy.get("default")) is not None:
            return _q(policy.get("default")) or Decimal(0)
        return _q(cap.get("value")) or Decimal(0)
    if not isinstance(policy, Mapping):
        return requested
    vrange = policy.get("validRange")
    if isinstance(vrange, Mapping) and vrange.get("min") is not None:
        return _round_up_range(requested, vrange, fractional)
    values = policy.get("validValues")
    if isinstance(values, list):
        for raw in values:
            v = _q(raw)
            if v is not None and requested <= v:
                return v
    return requested


def _violates(consumed: Decimal, policy: object, fractional: bool) -> bool:
    """``violatesPolicy``: above ``max``, off the step grid, or not one of the valid values (the
    default always passes)."""
    if not isinstance(policy, Mapping):
        return False
    default = _q(policy.get("default"))
    if default is not None and consumed == default:
        return False
    vrange = policy.get("validRange")
    values = policy.get("validValues")
    if isinstance(vrange, Mapping):
        vmax = _q(vrange.get("max"))
        if vmax is not None and consumed > vmax:
            return True
        step = _q(vrange.get("step"))
        if step is not None:
            vmin = _q(vrange.get("min")) or Decimal(0)
            if _use_milli(vrange, fractional):
                req = _safe_milli(consumed)
                if req is None:
                    return True
                s, m = _milli(step), _milli(vmin)
            else:
                req, s, m = _value(consumed), _value(step), _value(vmin)
            # Go's % keeps the dividend's sign, Python's the divisor's; only "is it zero" matters.
            return (req - m) % s != 0
        return False
    if isinstance(values, list) and values:
        return not any(_q(v) == consumed for v in values)
    return False


def fits_capacity(current: Mapping[str, Decimal] | None, requests: Mapping[str, Decimal] | None,
                  capacity: object, allocating: Mapping[str, Decimal] | None, fractional: bool = True) -> bool:
    """``CmpRequestOverCapacity``: whether a request fits what is left of the device's capacity after
    ``current`` (allocated claims) and ``allocating`` (this allocation run) consumed theirs.

    A request naming a capacity the device lacks never fits; a consumed amount that violates the
    capacity's request policy never fits.

    Raises:
        CapacityError: ``capacity "NAME": ...`` (unrepresentable or negative amounts).
    """
    caps = capacity if isinstance(capacity, Mapping) else {}
    if requests and any(name not in caps for name in requests):
        return False
    if not requests and not current and not allocating and not any(
            isinstance(cap, Mapping) and cap.get("requestPolicy") is not None for cap in caps.values()):
        # Nothing requested, nothing consumed yet, no policy (every device of a claim without
        # capacity requests): each capacity consumes its whole value, which fits unless negative.
        # The general path below gives the same answer; tests/unit/plugins/test_dra_selector_memo.py
        # compares the two.
        for name, cap in caps.items():
            v = _q(cap.get("value")) if isinstance(cap, Mapping) else None
            if v is not None and v < 0:
                raise CapacityError(f'capacity "{name}": capacity value is negative')
        return True
    return _fits_capacity(current, requests, caps, allocating, fractional)


def _fits_capacity(current: Mapping[str, Decimal] | None, requests: Mapping[str, Decimal] | None,
                   caps: Mapping[str, Any], allocating: Mapping[str, Decimal] | None, fractional: bool) -> bool:
    """:func:`fits_capacity`'s general path (``caps``: the device's capacity map)."""
    consumed: dict[str, Decimal] = {}
    for name, cap in caps.items():
        cap_m = cap if isinstance(cap, Mapping) else {}
        try:
            c = _consumed(requests.get(name) if requests else None, cap_m, fractional)
        except CapacityError as exc:
            raise CapacityError(f'capacity "{name}": {exc}') from exc
        if c < 0:
            raise CapacityError(f'capacity "{name}": capacity value is negative')
        consumed[name] = c
    for name, cap in caps.items():
        cap_m = cap if isinstance(cap, Mapping) else {}
        c = consumed[name]
        if _violates(c, cap_m.get("requestPolicy"), fractional):
            return False
        total = (current or {}).get(name, Decimal(0)) + c + (allocating or {}).get(name, Decimal(0))
        if total > (_q(cap_m.get("value")) or Decimal(0)):
            return False
    return True


def consumed_from_request(requests: Mapping[str, Decimal] | None, capacity: object,
                          fractional: bool = True) -> dict[str, Decimal]:
    """``GetConsumedCapacityFromRequest``: name -> amount the request takes of every capacity.

    Raises:
        CapacityError: as :func:`fits_capacity`.
    """
    caps = capacity if isinstance(capacity, Mapping) else {}
    out: dict[str, Decimal] = {}
    for name, cap in caps.items():
        try:
            out[str(name)] = _consumed(requests.get(name) if requests else None,
                                       cap if isinstance(cap, Mapping) else {}, fractional)
        except CapacityError as exc:
            raise CapacityError(f'capacity "{name}": {exc}') from exc
    return out
