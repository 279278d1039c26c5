"""Where cel-python answers otherwise than cel-go as Kubernetes configures it, for DRA selectors:
equality and ordering of values (``common/types``: heterogeneous equality, ``compare.go`` with
``cel.CrossTypeNumericComparisons`` from apiserver's ``pkg/cel/environment/base.go``) and the strings
extension at the version Kubernetes' base environment has (``ext/strings.go``, version 2).
:mod:`py_scheduler.plugins.helpers.cel` registers :data:`FUNCTIONS`.
"""

from __future__ import annotations

import math
import string
from collections.abc import Callable
from typing import Any

import celpy.celtypes as ct
import celpy.evaluation
from celpy.evaluation import CELEvalError

from py_scheduler.plugins.helpers import cel_cost
from py_scheduler.plugins.helpers.cel_library import FunctionError, Quantity, Semver, no_overload
from py_scheduler.plugins.helpers.cel_types import CONVERSION_TYPES, error

__all__ = ["FUNCTIONS"]


def _str_fn(name: str, op: Callable[..., Any]) -> Callable[..., Any]:
    def f(s: Any, *args: Any) -> Any:
        if not isinstance(s, str):
            raise no_overload(name, s, *args)
        return op(str(s), *args)
    return f


def _numeric(v: Any) -> bool:
    return isinstance(v, ct.IntType | ct.UintType | ct.DoubleType) and not isinstance(v, ct.BoolType)


def _eq(a: Any, b: Any) -> Any:
    """Heterogeneous equality as cel-go: different types are unequal, numbers compare by value;
    an error operand stays an error."""
    if isinstance(a, CELEvalError):
        return a
    if isinstance(b, CELEvalError):
        return b
    if callable(a) or callable(b):  # a type name: celpy gives the conversion function
        a, b = CONVERSION_TYPES.get(a, a), CONVERSION_TYPES.get(b, b)
    if _numeric(a) and _numeric(b):
        return ct.BoolType(float(a) == float(b) if isinstance(a, ct.DoubleType) or isinstance(
            b, ct.DoubleType) else int(a) == int(b))
    if isinstance(a, ct.BoolType) != isinstance(b, ct.BoolType):
        return ct.BoolType(False)
    if isinstance(a, Quantity | Semver):  # Quantity.Equal / Semver.Equal assert the other's type
        if type(a) is not type(b) or (isinstance(b, Quantity) and b.pointer):
            return error("no such overload")
        return ct.BoolType(a == b)
    if isinstance(b, Quantity | Semver):
        return ct.BoolType(False)
    if isinstance(a, list) or isinstance(b, list):  # celpy's ``+`` of two lists is a plain list
        if not (isinstance(a, list) and isinstance(b, list)) or len(a) != len(b):
            return ct.BoolType(False)
        for x, y in zip(a, b, strict=True):
            r = _eq(x, y)
            if isinstance(r, CELEvalError) or not r:
                return r
        return ct.BoolType(True)
    if isinstance(a, dict) or isinstance(b, dict):
        if not (isinstance(a, dict) and isinstance(b, dict)) or len(a) != len(b):
            return ct.BoolType(False)
        for k, x in a.items():
            if k not in b:
                return ct.BoolType(False)
            r = _eq(x, b[k])
            if isinstance(r, CELEvalError) or not r:
                return r
        return ct.BoolType(True)
    if type(a) is not type(b) and not (isinstance(a, str) and isinstance(b, str)):
        return ct.BoolType(a is None and b is None)
    try:
        return ct.BoolType(bool(a == b))
    except TypeError:
        return ct.BoolType(False)


def _compare_with_double(d: float, n: Any) -> int:
    """cel-go's ``compareDoubleInt`` / ``compareDoubleUint`` (common/types/compare.go): beyond the
    int's range by the bound, within it as doubles (the int rounded to one)."""
    if isinstance(n, ct.UintType):
        if d < 0:
            return -1
        if d > float(2**64 - 1):
            return 1
    else:
        if d < float(-2**63):
            return -1
        if d > float(2**63 - 1):
            return 1
    x = float(int(n))
    return (d > x) - (d < x)


def _compare_numbers(a: Any, b: Any) -> int:
    """-1 / 0 / 1 as cel-go's ``Compare`` of two numbers (int, uint, double, any mix).

    Raises:
        FunctionError: ``NaN values cannot be ordered``.
    """
    ad, bd = isinstance(a, ct.DoubleType), isinstance(b, ct.DoubleType)
    if (ad and math.isnan(a)) or (bd and math.isnan(b)):
        raise FunctionError("NaN values cannot be ordered")
    if ad and not bd:
        return _compare_with_double(float(a), b)
    if bd and not ad:
        return -_compare_with_double(float(b), a)
    x, y = (float(a), float(b)) if ad else (int(a), int(b))
    return (x > y) - (x < y)


def _ordering(name: str, same: Callable[[Any, Any], Any], holds: Callable[[int], bool]) -> Callable[[Any, Any], Any]:
    """``<``, ``<=``, ``>``, ``>=``: numbers of any two of int, uint and double as cel-go compares
    them, as Kubernetes' CEL environment has it (``cel.CrossTypeNumericComparisons``, apiserver
    cel/environment/base.go); other operands with celpy's own."""
    def f(a: Any, b: Any) -> Any:
        if _numeric(a) and _numeric(b):
            return ct.BoolType(holds(_compare_numbers(a, b)))
        return same(a, b)
    f.__name__ = name
    return f


def _int_arg(name: str, *args: Any) -> None:
    for a in args:
        if not isinstance(a, ct.IntType) or isinstance(a, ct.BoolType):
            raise no_overload(name, *args)


def _char_at(s: str, i: Any) -> ct.StringType:
    _int_arg("charAt", i)
    if i < 0 or i > len(s):
        raise FunctionError(f"index out of range: {i}")
    return ct.StringType(s[i:i + 1])


_ZERO = ct.IntType(0)


def _index_of(s: str, sub: Any, offset: Any = _ZERO) -> ct.IntType:
    _int_arg("indexOf", offset)
    if not isinstance(sub, str):
        raise no_overload("indexOf", s, sub, offset)
    if offset < 0:
        raise FunctionError(f"index out of range: {offset}")
    if not sub:
        return ct.IntType(min(int(offset), len(s)))
    return ct.IntType(s.find(str(sub), int(offset)) if offset < len(s) else -1)


def _last_index_of(s: str, sub: Any, *offset: Any) -> ct.IntType:
    _int_arg("lastIndexOf", *offset)
    if not isinstance(sub, str):
        raise no_overload("lastIndexOf", s, sub, *offset)
    if not offset:
        if not sub:
            return ct.IntType(len(s))
        if len(s.encode()) < len(sub.encode()):
            return ct.IntType(-1)
        off = len(s) - 1
    else:
        off = int(offset[0])
        if off < 0:
            raise FunctionError(f"index out of range: {off}")
        if not sub:
            return ct.IntType(min(off, len(s)))
        if off >= len(s):
            return ct.IntType(-1)
    return ct.IntType(s.rfind(str(sub), 0, min(off, len(s) - len(sub)) + len(sub)))


def _substring(s: str, start: Any, *end: Any) -> ct.StringType:
    _int_arg("substring", start, *end)
    stop = int(end[0]) if end else len(s)
    if end and start > stop:
        raise FunctionError(f"invalid substring range. start: {start}, end: {stop}")
    for i in (start, *end):
        if i < 0 or i > len(s):
            raise FunctionError(f"index out of range: {i}")
    return ct.StringType(s[int(start):stop])


_REPLACE_MAX = cel_cost.UPSTREAM_RUNTIME_COST_LIMIT
"""Longest ``replace`` result (characters): cel-go charges one unit per character of it
(``trackStringReplaceCost``), so a longer one alone exceeds upstream's runtime cost limit."""


def _replace(s: str, old: Any, new: Any, *n: Any) -> ct.StringType:
    _int_arg("replace", *n)
    if not isinstance(old, str) or not isinstance(new, str):
        raise no_overload("replace", s, old, new, *n)
    limit = int(n[0]) if n and n[0] >= 0 else -1
    found = s.count(old) if old else len(s) + 1
    if 0 <= limit < found:
        found = limit
    if len(s) + found * (len(new) - len(old)) > _REPLACE_MAX:  # checked before the text is built
        raise cel_cost.CostLimitExceeded
    return ct.StringType(s.replace(str(old), str(new), limit))


def _split(s: str, sep: Any, *n: Any) -> ct.ListType:
    """Go's ``strings.Split`` / ``SplitN``: an empty separator splits into characters; ``n`` 0 gives
    an empty list, a negative ``n`` every part."""
    _int_arg("split", *n)
    if not isinstance(sep, str):
        raise no_overload("split", s, sep, *n)
    limit = int(n[0]) if n else -1
    if limit == 0:
        return ct.ListType([])
    if sep:
        parts = s.split(str(sep), limit - 1 if limit > 0 else -1)
    else:
        parts = list(s) if limit < 0 or limit >= len(s) else [*s[:limit - 1], s[limit - 1:]]
    return ct.ListType([ct.StringType(x) for x in parts])


_GO_SPACE = ("\t\n\v\f\r \x85\xa0\u1680" + "".join(chr(c) for c in range(0x2000, 0x200B))
             + "\u2028\u2029\u202f\u205f\u3000")
"""What Go's ``strings.TrimSpace`` trims (``unicode.IsSpace``: the ASCII white space, U+0085, U+00A0
and Unicode's Z categories); Python's ``str.strip()`` also trims the ASCII separators U+001C-U+001F."""
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
_ASCII_UPPER = str.maketrans(string.ascii_lowercase, string.ascii_uppercase)


def _ne(a: Any, b: Any) -> Any:
    """cel-go's ``evalNe``: an error operand is the result; an Equal that fails is "not equal"."""
    for v in (a, b):
        if isinstance(v, CELEvalError):
            return v
    r = _eq(a, b)
    return ct.BoolType(isinstance(r, CELEvalError) or not r)


def _in(item: Any, container: Any) -> Any:
    """``in`` as cel-go's list ``Contains``: ``item.Equal(element)`` true for some element, a
    failed comparison counting as unequal; maps keep celpy's key test."""
    for v in (item, container):
        if isinstance(v, CELEvalError):
            return v
    if isinstance(container, list):
        return ct.BoolType(any(r is not None and not isinstance(r, CELEvalError) and bool(r)
                               for r in (_eq(item, el) for el in container)))
    return celpy.evaluation.operator_in(item, container)


def _join(lst: Any, *sep: Any) -> Any:
    """ext/strings.go ``join``: a list of strings only."""
    if not isinstance(lst, list) or not all(isinstance(x, str) for x in lst) or \
            not all(isinstance(x, str) for x in sep):
        return error("no such overload: join(list" + ", string" * len(sep) + ")")
    return ct.StringType((str(sep[0]) if sep else "").join(str(x) for x in lst))


def _logical(stop: bool) -> Callable[[Any, Any], Any]:
    """``&&`` (``stop`` False) or ``||`` (True) as cel-go's ``evalAnd`` / ``evalOr`` (interpreter/
    interpretable.go): a side equal to ``stop`` decides; otherwise the first error wins, so
    ``err1 && err2`` is err1 (celpy raised a TypeError and reported "no such overload")."""
    def f(a: Any, b: Any) -> Any:
        for v in (a, b):
            if isinstance(v, ct.BoolType) and bool(v) is stop:
                return v
        for v in (a, b):
            if isinstance(v, CELEvalError):
                return v
            if not isinstance(v, ct.BoolType):
                raise no_overload("_||_" if stop else "_&&_", a, b)
        return ct.BoolType(not stop)
    return f


def _conditional(e: Any, x: Any, y: Any) -> Any:
    """``e ? x : y`` (cel-go's ``evalConditional``): an error condition is the result."""
    if isinstance(e, CELEvalError):
        return e
    if not isinstance(e, ct.BoolType):
        raise no_overload("_?_:_", e, x, y)
    return x if e else y


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "_?_:_": _conditional,
    "_&&_": _logical(False),
    "_||_": _logical(True),
    "_==_": _eq,
    "_!=_": _ne,
    "_in_": _in,
    "_<_": _ordering("_<_", celpy.evaluation.base_functions["_<_"], lambda c: c < 0),
    "_<=_": _ordering("_<=_", celpy.evaluation.base_functions["_<=_"], lambda c: c <= 0),
    "_>_": _ordering("_>_", celpy.evaluation.base_functions["_>_"], lambda c: c > 0),
    "_>=_": _ordering("_>=_", celpy.evaluation.base_functions["_>=_"], lambda c: c >= 0),
    "lowerAscii": _str_fn("lowerAscii", lambda s: ct.StringType(s.translate(_ASCII_LOWER))),
    "upperAscii": _str_fn("upperAscii", lambda s: ct.StringType(s.translate(_ASCII_UPPER))),
    "trim": _str_fn("trim", lambda s: ct.StringType(s.strip(_GO_SPACE))),
    "charAt": _str_fn("charAt", _char_at),
    "indexOf": _str_fn("indexOf", _index_of),
    "lastIndexOf": _str_fn("lastIndexOf", _last_index_of),
    "substring": _str_fn("substring", _substring),
    "replace": _str_fn("replace", _replace),
    "split": _str_fn("split", _split),
    "join": _join,
}
"""Equality, ordering and the strings extension by CEL name."""

cel_cost.fold_macros_with(FUNCTIONS["_&&_"], FUNCTIONS["_||_"])
