"""Kubernetes resource quantities as exact integers.

kubernetes_asyncio ships no quantity parser (only the synchronous ``kubernetes`` client does, and
pulling a second client in for one function is not worth it), so the grammar is implemented here,
following apimachinery's ``ParseQuantity``: a signed decimal number followed by one suffix, either a
binary SI suffix (``Ki``..``Ei``), a decimal SI suffix (``n u m "" k M G T P E``) or a decimal
exponent (``e3``, ``E-2``). Values are exact ``Decimal``s. The two roundings the scheduler uses are
apimachinery's: ``MilliValue()`` and ``Value()`` round *up* (ceiling) to the next integer.

Upstream: ``k8s.io/apimachinery/pkg/api/resource/quantity.go`` (``Value``, ``MilliValue``).
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

_NUMBER = re.compile(r"^([+-]?)([0-9]*(?:\.[0-9]*)?)(.*)\Z")
"""Sign, digits with an optional fraction, suffix. Either part of the number may be empty, as in
``parseQuantityString``: ``"."``, ``"-"``, ``"m"`` and ``"Ki"`` are quantities of 0 upstream."""
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_EXPONENT = re.compile(r"^[eE]([+-]?[0-9]+)\Z")

__all__ = ["QuantityError", "binary_exponent", "decimal_exponent", "format_quantity", "milli_value", "parse", "value"]


class QuantityError(ValueError):
    """A quantity string that Kubernetes would not accept (e.g. ``"abc"``, ``"1.5.3Gi"``)."""


def parse(raw: object) -> Decimal:
    """Parse a Kubernetes quantity (``"100m"``, ``"2Gi"``, ``"1e3"``, ``4``) into an exact ``Decimal``.

    Raises:
        QuantityError: the value is not a valid quantity (the message quotes it).
    """
    if isinstance(raw, bool):
        raise QuantityError(f"invalid quantity {raw!r}")
    if isinstance(raw, int | float | Decimal):
        d = Decimal(str(raw))
        if not d.is_finite():  # a YAML .inf / .nan in a snapshot
            raise QuantityError(f"invalid quantity {raw!r}")
        return d
    if not isinstance(raw, str) or not raw.strip():
        raise QuantityError(f"invalid quantity {raw!r}")
    m = _NUMBER.match(raw)
    if m is None:
        raise QuantityError(f"invalid quantity {raw!r}")
    sign, number, suffix = m.groups()
    try:
        base = Decimal(sign + (number if number.strip(".") else "0"))
    except InvalidOperation as exc:  # pragma: no cover - the regex admits only decimals
        raise QuantityError(f"invalid quantity {raw!r}") from exc
    if suffix in _BINARY:
        return base * _BINARY[suffix]
    if suffix in _DECIMAL:
        return base.scaleb(_DECIMAL[suffix])
    exp = _exponent(suffix)
    if exp is not None:
        # Upstream reads the exponent as an int64 (``strconv.ParseInt``), so the API server stores
        # e.g. cpu "1e400" (as "10e399"); a Pod or Node holding it must not be called invalid. A
        # magnitude beyond 10**+-EXPONENT_CLAMP stands in as 10**+-EXPONENT_CLAMP: value() and
        # milli_value() give the same saturated (or rounded-up) result, and Decimal / int
        # arithmetic stays small.
        if base.is_zero():
            return base
        magnitude = base.adjusted() + exp
        if abs(magnitude) > EXPONENT_CLAMP:
            return Decimal(1 if base > 0 else -1).scaleb(EXPONENT_CLAMP if magnitude > 0 else -EXPONENT_CLAMP)
        return base.scaleb(exp)
    raise QuantityError(f"invalid quantity {raw!r}")


def binary_exponent(suffix: str) -> int | None:
    """The power of two of a binary SI suffix (``"Ki"`` 10 .. ``"Ei"`` 60), None for any other."""
    factor = _BINARY.get(suffix)
    return None if factor is None else factor.bit_length() - 1


def decimal_exponent(suffix: str) -> int | None:
    """The power of ten of a decimal SI suffix (``"m"`` -3, ``""`` 0) or an exponent (``"e3"``), None
    for a binary suffix or none upstream knows."""
    if suffix in _DECIMAL:
        return _DECIMAL[suffix]
    return _exponent(suffix)


def _exponent(suffix: str) -> int | None:
    """The int64 of an exponent suffix (``e-3``, ``E+400``), None when ``suffix`` is none or its value
    is beyond int64 (upstream's ``strconv.ParseInt`` fails). Leading zeros are dropped before
    ``int()``, whose 4300-digit limit would raise a plain ValueError."""
    e = _EXPONENT.match(suffix)
    if e is None:
        return None
    text = e.group(1)
    digits = text.lstrip("+-").lstrip("0") or "0"
    if len(digits) > 19:
        return None
    exp = -int(digits) if text.startswith("-") else int(digits)
    return exp if MIN_INT64 <= exp <= MAX_INT64 else None


MAX_INT64 = 2**63 - 1
MIN_INT64 = -(2**63)
EXPONENT_CLAMP = 1000
"""Largest decimal magnitude (``Decimal.adjusted()``) a parsed quantity keeps exactly; anything
bigger is far beyond int64, anything smaller far below the 1e-9 that rounding up can tell apart."""


def _int64(v: int) -> int:
    # Upstream returns an int64, which silently wraps for quantities beyond its range (the API accepts
    # e.g. a Node allocatable cpu of "1e308"); saturating keeps a huge value huge, and every later
    # float conversion (scoring) finite instead of raising OverflowError for every Pod.
    return MAX_INT64 if v > MAX_INT64 else MIN_INT64 if v < MIN_INT64 else v


def value(q: Decimal) -> int:
    """``Quantity.Value()``: the quantity rounded up to an integer (bytes, counts), saturated to int64."""
    return _int64(math.ceil(q))


def milli_value(q: Decimal) -> int:
    """``Quantity.MilliValue()``: the quantity in thousandths, rounded up (milli-CPU), saturated to int64."""
    return _int64(math.ceil(q * 1000))


def format_quantity(v: Decimal) -> str:
    """A quantity string for an amount (``consumedCapacity`` in an AllocationResult, defaulted
    resources in ``explain`` / ``simulate``): whole multiples of a binary unit with its suffix
    (``10Gi``), other whole numbers plainly, fractions in thousandths (``1500m``) when exact, else the
    decimal itself."""
    if v == v.to_integral_value():
        n = int(v)
        for suffix, unit in reversed(_BINARY.items()):
            if n != 0 and n % unit == 0:
                return f"{n // unit}{suffix}"
        return str(n)
    m = v * 1000
    if m == m.to_integral_value():
        return f"{int(m)}m"
    return format(v, "f")
