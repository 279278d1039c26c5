"""Kubernetes' CEL libraries for DRA selectors: the ``quantity`` and ``semver`` values and
functions, in cel-python terms (:mod:`py_scheduler.plugins.helpers.cel` registers them).

Upstream: ``k8s.io/apiserver/pkg/cel/library/quantity.go`` and ``semverlib.go`` (with their value
types in ``pkg/cel/quantity.go`` / ``semver.go``), blang/semver v4's ``Parse`` (semver.go) and
apimachinery's ``resource.ParseQuantity`` errors (``pkg/api/resource/quantity.go``). A function's
failure is a :class:`FunctionError` carrying upstream's words.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

import celpy.celtypes as ct

from py_scheduler.framework import quantity as qty

__all__ = ["FUNCTIONS", "FunctionError", "Quantity", "Semver", "no_overload", "normalize_semver", "parse_semver"]


class FunctionError(ValueError):
    """A function's error in cel-go's words (``types.WrapErr``); celpy wraps it in a CELEvalError
    whose args are ("return error for overflow", the class, (message,)), and
    :func:`py_scheduler.plugins.helpers.cel._runtime_message` unwraps it."""


class Quantity:
    """``apiservercel.Quantity``: a resource quantity as an exact Decimal (``value`` in base units).
    ``pointer``: made by ``add`` / ``sub``, which return a ``*Quantity`` upstream; equality with one
    on the right fails as ``Quantity.Equal``'s type assertion fails (``no such overload``).
    ``amount``: apimachinery's ``int64Amount`` (value, decimal scale) when the quantity is held as
    one, None when it is held as an ``inf.Dec`` -- what ``isInteger`` / ``asInteger`` (``AsInt64``)
    and ``add`` / ``sub`` (``int64Amount.Add``) depend on."""

    __slots__ = ("amount", "pointer", "value")

    def __init__(self, value: Decimal, pointer: bool = False, amount: tuple[int, int] | None = None) -> None:
        self.value = value
        self.pointer = pointer
        self.amount = amount

    @classmethod
    def of(cls, text: str) -> Quantity:
        """``resource.ParseQuantity(text)``. Raises :class:`~py_scheduler.framework.quantity.QuantityError`."""
        return cls(qty.parse(text), amount=int64_amount(text))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Quantity) and self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return f"Quantity({self.value})"


class Semver:
    """``apiservercel.Semver`` (blang/semver v4, strict parsing: no leading zeros, no ``v``)."""

    __slots__ = ("major", "minor", "patch", "pre")

    def __init__(self, text: str) -> None:
        self.major, self.minor, self.patch, self.pre = parse_semver(text)

    def compare(self, other: Semver) -> int:
        """-1 / 0 / 1 as ``Version.Compare`` (pre-release lower than release, build ignored)."""
        a = (self.major, self.minor, self.patch)
        b = (other.major, other.minor, other.patch)
        if a != b:
            return -1 if a < b else 1
        if not self.pre or not other.pre:
            return (len(other.pre) > 0) - (len(self.pre) > 0)
        for x, y in zip(self.pre, other.pre, strict=False):
            if x == y:
                continue
            xn, yn = x.isdigit(), y.isdigit()
            if xn and yn:
                return -1 if int(x) < int(y) else 1
            if xn != yn:
                return -1 if xn else 1
            return -1 if x < y else 1
        return (len(self.pre) > len(other.pre)) - (len(self.pre) < len(other.pre))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Semver) and self.compare(other) == 0

    def __hash__(self) -> int:
        return hash((self.major, self.minor, self.patch, self.pre))


def no_overload(name: str, *args: Any) -> TypeError:
    types = ", ".join(type(a).__name__ for a in args)
    return TypeError(f"no such overload: {name}({types})")


_QUANTITY_FORMAT = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
"""``resource.ErrFormatWrong``, what ``quantity(s)`` fails with (apiserver cel/library/quantity.go)."""


_QUANTITY_SUFFIX = "unable to parse quantity's suffix"
"""``resource.ErrSuffix``: the text has a quantity's shape but no suffix upstream knows (``1KK``)."""


def _quantity_format_wrong(text: str) -> bool:
    """Whether ``parseQuantityString`` (apimachinery resource/quantity.go) refuses the shape of
    ``text``: sign, digits, a fraction, suffix letters, a signed exponent, nothing after."""
    i, end = 0, len(text)
    if not text:
        return True
    if text[0] in "+-":
        i = 1
    while i < end and text[i].isascii() and text[i].isdigit():
        i += 1
    if i < end and text[i] == ".":
        i += 1
        while i < end and text[i].isascii() and text[i].isdigit():
            i += 1
    while i < end and text[i] in "eEinumkKMGTP":
        i += 1
    if i < end and text[i] in "+-":
        i += 1
    while i < end and text[i].isascii() and text[i].isdigit():
        i += 1
    return i < end


def _quantity(s: Any) -> Quantity:
    if not isinstance(s, str):
        raise no_overload("quantity", s)
    try:
        return Quantity.of(str(s))
    except qty.QuantityError as exc:
        raise FunctionError(_QUANTITY_FORMAT if _quantity_format_wrong(str(s)) else _QUANTITY_SUFFIX) from exc


def _is_quantity(s: Any) -> ct.BoolType:
    if not isinstance(s, str):
        raise no_overload("isQuantity", s)
    try:
        qty.parse(str(s))
    except qty.QuantityError:
        return ct.BoolType(False)
    return ct.BoolType(True)


_DIGITS = frozenset("0123456789")
_ALPHANUM = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-0123456789")


def _uint64(text: str) -> int:
    """Go's ``strconv.ParseUint(text, 10, 64)`` for a text of digits (or none)."""
    if not text:
        raise FunctionError(f"strconv.ParseUint: parsing {_go_quote(text)}: invalid syntax")
    if int(text) >= 1 << 64:
        raise FunctionError(f"strconv.ParseUint: parsing {_go_quote(text)}: value out of range")
    return int(text)


def parse_semver(text: str) -> tuple[int, int, int, tuple[str, ...]]:
    """blang/semver v4's ``Parse`` (semver.go): (major, minor, patch, pre-release identifiers).

    Raises:
        FunctionError: its error, in its words (``Invalid character(s) found in major number "v1"``).
    """
    if not text:
        raise FunctionError("Version string empty")
    parts = text.split(".", 2)
    if len(parts) != 3:
        raise FunctionError("No Major.Minor.Patch elements found")
    nums: list[int] = []
    patch, build, pre = parts[2], "", ""
    if "+" in patch:
        patch, build = patch.split("+", 1)
    if "-" in patch:
        patch, pre = patch.split("-", 1)
    for word, part in (("major", parts[0]), ("minor", parts[1]), ("patch", patch)):
        if not _DIGITS.issuperset(part):
            raise FunctionError(f"Invalid character(s) found in {word} number {_go_quote(part)}")
        if len(part) > 1 and part[0] == "0":
            raise FunctionError(f"{word.capitalize()} number must not contain leading zeroes {_go_quote(part)}")
        nums.append(_uint64(part))
    pres: tuple[str, ...] = tuple(pre.split(".")) if "-" in parts[2].split("+", 1)[0] else ()
    for p in pres:
        if not p:
            raise FunctionError("Prerelease is empty")
        if _DIGITS.issuperset(p):
            if len(p) > 1 and p[0] == "0":
                raise FunctionError(f"Numeric PreRelease version must not contain leading zeroes {_go_quote(p)}")
            _uint64(p)
        elif not _ALPHANUM.issuperset(p):
            raise FunctionError(f"Invalid character(s) found in prerelease {_go_quote(p)}")
    for b in build.split(".") if "+" in parts[2] else ():
        if not b:
            raise FunctionError("Build meta data is empty")
        if not _ALPHANUM.issuperset(b):
            raise FunctionError(f"Invalid character(s) found in build meta data {_go_quote(b)}")
    return nums[0], nums[1], nums[2], pres


def normalize_semver(text: str) -> str:
    """apiserver semverlib's ``normalizeAndParse`` before its ``Parse``: no ``v`` prefix, no leading
    zeros, missing minor / patch as 0.

    Raises:
        FunctionError: a short version with pre-release or build data.
    """
    text = text.removeprefix("v")
    parts = text.split(".", 2)
    for i, p in enumerate(parts):
        if len(p) > 1:
            p = p.lstrip("0")
            if not p or p[0] not in _DIGITS:
                p = "0" + p
            parts[i] = p
    if len(parts) < 3:
        if "+" in parts[-1] or "-" in parts[-1]:
            raise FunctionError("short version cannot contain PreRelease/Build meta data")
        parts += ["0"] * (3 - len(parts))
    return ".".join(parts)


def _go_quote(text: str) -> str:
    """Go's ``%q`` for the printable ASCII texts these messages quote."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _semver_text(name: str, s: Any, normalize: tuple[Any, ...]) -> str:
    if not isinstance(s, str) or len(normalize) > 1 or (normalize and not isinstance(normalize[0], ct.BoolType)):
        raise no_overload(name, s, *normalize)
    return normalize_semver(str(s)) if normalize and normalize[0] else str(s)


def _semver(s: Any, *normalize: Any) -> Semver:
    """``semver(s)`` / ``semver(s, normalize)`` (apiserver cel/library/semverlib.go)."""
    return Semver(_semver_text("semver", s, normalize))


def _is_semver(s: Any, *normalize: Any) -> ct.BoolType:
    try:
        Semver(_semver_text("isSemver", s, normalize))
    except FunctionError:
        return ct.BoolType(False)
    return ct.BoolType(True)


def _cmp(name: str, a: Any, b: Any) -> int:
    if isinstance(a, Quantity) and isinstance(b, Quantity):
        return (a.value > b.value) - (a.value < b.value)
    if isinstance(a, Semver) and isinstance(b, Semver):
        return a.compare(b)
    raise no_overload(name, a, b)


def _compare_to(a: Any, b: Any) -> ct.IntType:
    return ct.IntType(_cmp("compareTo", a, b))


def _is_greater_than(a: Any, b: Any) -> ct.BoolType:
    return ct.BoolType(_cmp("isGreaterThan", a, b) > 0)


def _is_less_than(a: Any, b: Any) -> ct.BoolType:
    return ct.BoolType(_cmp("isLessThan", a, b) < 0)


_MAX_INT64 = 2**63 - 1
_MIN_INT64 = -(2**63)


def _fits(v: int) -> bool:
    return _MIN_INT64 <= v <= _MAX_INT64


def int64_amount(text: str) -> tuple[int, int] | None:
    """The ``int64Amount`` (value, scale) ``ParseQuantity``'s fast path holds ``text`` as, or None when
    it takes the ``inf.Dec`` path (more digits than its precision allows, a binary suffix past it or
    with a fraction, a scale below nano, a product past int64). ``text`` must parse."""
    if text == "0":
        return 0, 0
    sign = -1 if text[:1] == "-" else 1
    body = text[1:] if text[:1] in "+-" else text
    i = 0
    while i < len(body) and body[i].isdigit():
        i += 1
    num = body[:i].lstrip("0") or "0"
    denom = ""
    if body[i:i + 1] == ".":
        j = i + 1
        while j < len(body) and body[j].isdigit():
            j += 1
        denom, i = body[i + 1:j], j
    suffix = body[i:]
    exponent = qty.binary_exponent(suffix)
    if exponent is not None:
        if denom:
            return None
        mantissa, scale = 1 << exponent, 0
        precision = 15 - len(num) - (exponent * 3 // 10) - 1
    else:
        power = qty.decimal_exponent(suffix)
        if power is None:
            return None
        mantissa, scale = 1, power
        precision = 18 - (len(num) + len(denom))
    scale -= len(denom)
    if precision < 0 or scale < -9:
        return None
    result = int(num + denom) * mantissa
    return (sign * result, scale) if _fits(result) else None




def _scaled(value: int, scale: int) -> int | None:
    """``positiveScaleInt64``: value * 10**scale, None past int64."""
    if value == 0:
        return 0
    if scale > 19:
        return None
    out = value * 10**scale
    return out if _fits(out) else None


def _add_amounts(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int] | None:
    """``int64Amount.Add``: None where it reports an overflow (the sum then goes to ``inf.Dec``)."""
    (av, asc), (bv, bsc) = a, b
    if bv == 0:
        return a
    if av == 0:
        return b
    if asc > bsc:
        scaled, scale = _scaled(av, asc - bsc), bsc
        total = None if scaled is None else scaled + bv
    else:
        scaled, scale = _scaled(bv, bsc - asc), asc
        total = None if scaled is None else av + scaled
    return (total, scale) if total is not None and _fits(total) else None


def _arith(name: str, a: Any, b: Any, sign: int) -> Quantity:
    """``add`` / ``sub``: ``Quantity.Add`` / ``Sub`` (an int as ``NewQuantity(n, DecimalSI)``). While
    both are ``int64Amount`` the result is what Go computes, a negated MinInt64 wrapping included."""
    if not isinstance(a, Quantity):
        raise no_overload(name, a, b)
    if isinstance(b, Quantity):
        bq = b
    elif isinstance(b, int) and not isinstance(b, bool):
        bq = Quantity(Decimal(int(b)), amount=(int(b), 0))
    else:
        raise no_overload(name, a, b)
    if a.amount is not None and bq.amount is not None:
        bv, bsc = bq.amount
        if sign < 0:
            bv = _MIN_INT64 if bv == _MIN_INT64 else -bv  # Go's -b.value wraps at MinInt64
        amount = _add_amounts(a.amount, (bv, bsc))
        if amount is not None:
            return Quantity(Decimal(amount[0]).scaleb(amount[1]), pointer=True, amount=amount)
    return Quantity(a.value + sign * bq.value, pointer=True)


def _add(a: Any, b: Any) -> Quantity:
    return _arith("add", a, b, 1)


def _sub(a: Any, b: Any) -> Quantity:
    return _arith("sub", a, b, -1)


def _sign(a: Any) -> ct.IntType:
    if not isinstance(a, Quantity):
        raise no_overload("sign", a)
    return ct.IntType((a.value > 0) - (a.value < 0))


def _as_int64(a: Quantity) -> int | None:
    """``Quantity.AsInt64``: only an ``int64Amount`` of scale 0, or a positive scale within int64."""
    if a.amount is None:
        return None
    value, scale = a.amount
    if scale == 0:
        return value
    return None if scale < 0 else _scaled(value, scale)


def _is_integer(a: Any) -> ct.BoolType:
    if not isinstance(a, Quantity):
        raise no_overload("isInteger", a)
    return ct.BoolType(_as_int64(a) is not None)


def _as_integer(a: Any) -> ct.IntType:
    if not isinstance(a, Quantity):
        raise no_overload("asInteger", a)
    n = _as_int64(a)
    if n is None:
        raise FunctionError("cannot convert value to integer")
    return ct.IntType(n)


def _as_float(a: Any) -> ct.DoubleType:
    if not isinstance(a, Quantity):
        raise no_overload("asApproximateFloat", a)
    return ct.DoubleType(float(a.value))


def _semver_part(name: str, idx: int) -> Callable[[Any], ct.IntType]:
    def f(a: Any) -> ct.IntType:
        if not isinstance(a, Semver):
            raise no_overload(name, a)
        n = (a.major, a.minor, a.patch)[idx]
        return ct.IntType(n - (1 << 64) if n >= 1 << 63 else n)  # types.Int(v.Major): a uint64 as an int64
    return f


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "quantity": _quantity,
    "isQuantity": _is_quantity,
    "semver": _semver,
    "isSemver": _is_semver,
    "compareTo": _compare_to,
    "isGreaterThan": _is_greater_than,
    "isLessThan": _is_less_than,
    "add": _add,
    "sub": _sub,
    "sign": _sign,
    "isInteger": _is_integer,
    "asInteger": _as_integer,
    "asApproximateFloat": _as_float,
    "major": _semver_part("major", 0),
    "minor": _semver_part("minor", 1),
    "patch": _semver_part("patch", 2),
}
"""The quantity and semver functions by CEL name."""
