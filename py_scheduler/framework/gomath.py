"""Go's arithmetic, bit for bit: the one place py-scheduler reproduces Go numeric semantics.

Upstream scores are computed with Go's ``int64`` division (truncating toward zero), ``math.Round``
(halves away from zero) and ``math.Log`` (Go's own FreeBSD ``e_log.c`` port, which differs from C's
``log`` in the last bit for about 1% of small integers). Python's ``//``, ``round`` and ``math.log``
differ from each of them, so every plugin uses these functions instead (issue 14: ``go_div`` was
defined twice and two ``go_round`` returned different types).
"""

from __future__ import annotations

import math

__all__ = ["go_div", "go_log", "go_round"]


def go_div(a: int, b: int) -> int:
    """Go's integer ``a / b``: truncates toward zero (Python's ``//`` floors): ``go_div(-7, 2) == -3``.

    Raises:
        ZeroDivisionError: ``b == 0`` (Go panics).
    """
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q



_LN2_HI = 6.93147180369123816490e-01
_LN2_LO = 1.90821492927058770002e-10
_L1 = 6.666666666666735130e-01
_L2 = 3.999999999940941908e-01
_L3 = 2.857142874366239149e-01
_L4 = 2.222219843214978396e-01
_L5 = 1.818357216161805012e-01
_L6 = 1.531383769920937332e-01
_L7 = 1.479819860511658591e-01
_HALF_SQRT2 = 7.07106781186547524401e-01


def go_log(x: float) -> float:
    """Go's ``math.Log`` (the FreeBSD ``e_log.c`` algorithm Go uses on amd64 and in pure Go),
    bit-for-bit; C's ``log`` (Python's ``math.log``) differs from it in the last bit for about 1%
    of small integers. ``x <= 0`` gives ``-inf`` / ``nan`` as Go does."""
    if math.isnan(x) or x == math.inf:
        return x
    if x < 0:
        return math.nan
    if x == 0:
        return -math.inf
    f1, ki = math.frexp(x)
    if f1 < _HALF_SQRT2:
        f1 *= 2
        ki -= 1
    f = f1 - 1
    k = float(ki)
    s = f / (2 + f)
    s2 = s * s
    s4 = s2 * s2
    t1 = s2 * (_L1 + s4 * (_L3 + s4 * (_L5 + s4 * _L7)))
    t2 = s4 * (_L2 + s4 * (_L4 + s4 * _L6))
    r = t1 + t2
    hfsq = 0.5 * f * f
    return k * _LN2_HI - ((hfsq - (s * (hfsq + r) + k * _LN2_LO)) - f)


def go_round(x: float) -> float:
    """Go's ``math.Round``: the nearest integer as a float, halves away from zero (``go_round(2.5) ==
    3.0``, ``go_round(-2.5) == -3.0``); NaN and infinities come back unchanged. Python's ``round``
    rounds halves to even instead. Go code converts with ``int64(math.Round(x))``: here
    ``int(go_round(x))``. ``x - trunc(x)`` is exact in binary floating point, so no half is misjudged."""
    if math.isnan(x) or math.isinf(x):
        return x
    t = math.copysign(float(math.trunc(x)), x)
    if abs(x - t) >= 0.5:
        t += math.copysign(1.0, x)
    return t
