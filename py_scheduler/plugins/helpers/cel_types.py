"""cel-go's arithmetic, conversions and indexing where cel-python answers otherwise, for DRA selectors.

Upstream: cel-go ``common/types`` as Kubernetes v1.37.2 vendors it: ``int.go`` / ``uint.go``
(checked int64 / uint64 arithmetic: ``integer overflow``, ``unsigned integer overflow``,
``division by zero``, ``modulus by zero``; Go's truncated ``/`` and ``%``), ``double.go`` (IEEE
float64: ``x / 0.0`` is an infinity or NaN, results stay doubles), ``string.go`` / ``bool.go``
(``int()``, ``uint()``, ``double()``, ``bool()`` of a string with Go's ``strconv`` parsers,
``string()`` of a bool or double in Go's words: ``true``, ``1e+06``, ``+Inf``), ``list.go`` and
``map.go`` (``index out of bounds: N``, ``no such key: K``). celpy differed in each: a double
``+`` gave a plain float that equality took for no number, ``1.0 / 0.0`` was always ``+inf``,
``[1, 2][-1]`` was 2, ``string(true)`` was ``True``, ``int(" 1")`` was 1, and an error operand
turned into "no such overload".

A function here returns an error as a ``CELEvalError`` value (:func:`error`) rather than raising,
so ``false && [1][5] == 1`` stays false as in cel-go; an error operand is passed through.
:mod:`py_scheduler.plugins.helpers.cel` registers :data:`FUNCTIONS`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import celpy.celtypes as ct
import celpy.evaluation
from celpy.evaluation import CELEvalError

from py_scheduler.plugins.helpers.cel_library import FunctionError, no_overload

__all__ = ["CONVERSION_TYPES", "FUNCTIONS", "error", "go_double", "go_string"]

MAX_INT64 = 2**63 - 1
MIN_INT64 = -(2**63)
MAX_UINT64 = 2**64 - 1
NO_SUCH_KEY_HINT = (". consider using CEL optional chaining (.? followed by orValue()) or guarding the check "
                    "with has() for optional fields")
"""What k8s.io/dynamic-resource-allocation/cel's ``EnhanceRuntimeError`` appends to ``no such key``."""


def error(message: str) -> CELEvalError:
    """A CEL error value whose text :func:`py_scheduler.plugins.helpers.cel._runtime_message` reports
    as is (``types.NewErr(message)``)."""
    return CELEvalError(message, FunctionError, (message,))


def _is_bool(v: Any) -> bool:
    return isinstance(v, bool | ct.BoolType)


def _kind(v: Any) -> str | None:
    """``int``, ``uint``, ``double`` or None for any other value (a bool is not a number)."""
    if _is_bool(v):
        return None
    if isinstance(v, ct.UintType):
        return "uint"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "double"
    return None


def _int(v: int, overflow: str = "integer overflow") -> Any:
    return ct.IntType(v) if MIN_INT64 <= v <= MAX_INT64 else error(overflow)


def _uint(v: int) -> Any:
    return ct.UintType(v) if 0 <= v <= MAX_UINT64 else error("unsigned integer overflow")


def _go_div(a: int, b: int) -> int:
    """Go's integer ``/``: the quotient truncated toward zero (Python's ``//`` floors)."""
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def _double_div(a: float, b: float) -> float:
    if b != 0:
        return a / b
    if a == 0 or math.isnan(a):
        return math.nan
    return math.copysign(math.inf, a) * math.copysign(1.0, b)


_DOUBLE_OPS: dict[str, Callable[[float, float], float]] = {
    "_+_": lambda a, b: a + b, "_-_": lambda a, b: a - b, "_*_": lambda a, b: a * b, "_/_": _double_div,
}


def _integer_op(name: str, kind: str, a: int, b: int) -> Any:
    make = _int if kind == "int" else _uint
    if name == "_+_":
        return make(a + b)
    if name == "_-_":
        return make(a - b)
    if name == "_*_":
        return make(a * b)
    if b == 0:
        return error("division by zero" if name == "_/_" else "modulus by zero")
    q = _go_div(a, b)
    if kind == "int" and q > MAX_INT64:  # MinInt64 / -1 and MinInt64 % -1
        return error("integer overflow")
    return make(q) if name == "_/_" else make(a - b * q)


def _arith(name: str) -> Callable[[Any, Any], Any]:
    fallback = celpy.evaluation.base_functions[name]

    def f(a: Any, b: Any) -> Any:
        for v in (a, b):
            if isinstance(v, CELEvalError):
                return v
        ka, kb = _kind(a), _kind(b)
        if ka is None and kb is None:
            return fallback(a, b)  # strings, lists, bytes, durations: celpy's own
        if ka != kb:
            raise no_overload(name, a, b)
        if ka == "double":
            if name == "_%_":
                raise no_overload(name, a, b)
            return ct.DoubleType(_DOUBLE_OPS[name](float(a), float(b)))
        return _integer_op(name, str(ka), int(a), int(b))
    return f


def _negate(a: Any) -> Any:
    if isinstance(a, CELEvalError):
        return a
    kind = _kind(a)
    if kind == "int":
        return _int(-int(a))
    if kind == "double":
        return ct.DoubleType(-float(a))
    raise no_overload("-_", a)


def _index(container: Any, index: Any) -> Any:
    """``_[_]`` as cel-go's lists and maps: a list takes an int, a uint or an integral double within
    bounds; a map's missing key is ``no such key``."""
    for v in (container, index):
        if isinstance(v, CELEvalError):
            return v
    if isinstance(container, list):
        kind = _kind(index)
        if kind is None or (kind == "double" and not float(index).is_integer()):
            return error(f"unsupported index type '{_type_name(index)}' in list")
        i = int(index)
        if not 0 <= i < len(container):
            return error(f"index out of bounds: {i}")
        return container[i]
    if isinstance(container, dict):
        try:
            return container[index]
        except KeyError:
            return error(f"no such key: {go_string(index)}{NO_SUCH_KEY_HINT}")
        except TypeError:  # an unhashable key
            raise no_overload("_[_]", container, index) from None
    raise no_overload("_[_]", container, index)


def _type_name(v: Any) -> str:
    return _kind(v) or ("bool" if _is_bool(v) else "string" if isinstance(v, str) else type(v).__name__)


# -- conversions -----------------------------------------------------------------------------------
_GO_INT = re.compile(r"[+-]?[0-9]+\Z")
_GO_UINT = re.compile(r"\+?[0-9]+\Z")
_GO_DECIMAL_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z")
_GO_HEX_FLOAT = re.compile(r"[+-]?0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?[0-9]+\Z")
_GO_SPECIAL_FLOAT = {"inf": math.inf, "+inf": math.inf, "-inf": -math.inf, "infinity": math.inf,
                     "+infinity": math.inf, "-infinity": -math.inf, "nan": math.nan}
_GO_BOOL = {"1": True, "t": True, "T": True, "TRUE": True, "true": True, "True": True,
            "0": False, "f": False, "F": False, "FALSE": False, "false": False, "False": False}


def _conversion_error(target: str) -> CELEvalError:
    return error(f"type conversion error from 'string' to '{target}'")


def _parse_float(s: str) -> float | None:
    """Go's ``strconv.ParseFloat(s, 64)``: decimal or hexadecimal (``0x1p-2``) forms, ``inf`` /
    ``infinity`` / ``nan`` in any case; None where it fails, a value beyond float64 included."""
    special = _GO_SPECIAL_FLOAT.get(s.lower())
    if special is not None:
        return special
    if _GO_DECIMAL_FLOAT.match(s):
        value = float(s)
    elif _GO_HEX_FLOAT.match(s):
        value = float.fromhex(s)
    else:
        return None
    return None if math.isinf(value) else value


def _to_int(v: Any) -> Any:
    if isinstance(v, CELEvalError):
        return v
    kind = _kind(v)
    if kind == "int":
        return ct.IntType(int(v))
    if kind == "uint":
        return _int(int(v))
    if kind == "double":
        d = float(v)
        if math.isnan(d) or d <= MIN_INT64 or d >= MAX_INT64:
            return error("integer overflow")
        return ct.IntType(int(d))
    if isinstance(v, str):
        if not _GO_INT.match(v) or not MIN_INT64 <= int(v) <= MAX_INT64:
            return _conversion_error("int")
        return ct.IntType(int(v))
    return celpy.evaluation.base_functions["int"](v)


def _to_uint(v: Any) -> Any:
    if isinstance(v, CELEvalError):
        return v
    kind = _kind(v)
    if kind in ("int", "uint"):
        return _uint(int(v))
    if kind == "double":
        d = float(v)
        if math.isnan(d) or d < 0 or d >= 2.0**64:
            return error("unsigned integer overflow")
        return ct.UintType(int(d))
    if isinstance(v, str):
        if not _GO_UINT.match(v) or int(v) > MAX_UINT64:
            return _conversion_error("uint")
        return ct.UintType(int(v))
    return celpy.evaluation.base_functions["uint"](v)


def _to_double(v: Any) -> Any:
    if isinstance(v, CELEvalError):
        return v
    if _kind(v) is not None:
        return ct.DoubleType(float(v))
    if isinstance(v, str):
        d = _parse_float(str(v))
        return _conversion_error("double") if d is None else ct.DoubleType(d)
    return celpy.evaluation.base_functions["double"](v)


def _to_bool(v: Any) -> Any:
    if isinstance(v, CELEvalError):
        return v
    if _is_bool(v):
        return ct.BoolType(bool(v))
    if isinstance(v, str):
        b = _GO_BOOL.get(str(v))
        return _conversion_error("bool") if b is None else ct.BoolType(b)
    raise no_overload("bool", v)


def go_double(d: float) -> str:
    """Go's ``strconv.FormatFloat(d, 'g', -1, 64)``: the shortest digits that read back as ``d``,
    in exponent form (``1e+06``, ``1.5e-05``) when the exponent is below -4 or at least 6."""
    if math.isnan(d):
        return "NaN"
    if math.isinf(d):
        return "+Inf" if d > 0 else "-Inf"
    if d == 0:
        return "-0" if math.copysign(1.0, d) < 0 else "0"
    sign, digits_t, exp = Decimal(repr(d)).as_tuple()
    digits = "".join(map(str, digits_t)).rstrip("0") or "0"
    assert isinstance(exp, int)
    point = len(digits_t) + exp  # the decimal point after this many digits
    neg = "-" if sign else ""
    e = point - 1
    if e < -4 or e >= 6:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{neg}{mantissa}e{'-' if e < 0 else '+'}{abs(e):02d}"
    if point <= 0:
        return f"{neg}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return neg + digits + "0" * (point - len(digits))
    return f"{neg}{digits[:point]}.{digits[point:]}"


def go_string(v: Any) -> str:
    """A value as cel-go's ``string()`` writes it (and ``%v`` in its error texts)."""
    if _is_bool(v):
        return "true" if v else "false"
    if _kind(v) == "double":
        return go_double(float(v))
    return str(v)


def _to_string(v: Any) -> Any:
    if isinstance(v, CELEvalError):
        return v
    if _is_bool(v) or _kind(v) is not None:
        return ct.StringType(go_string(v))
    return celpy.evaluation.base_functions["string"](v)


CONVERSION_TYPES: dict[Callable[..., Any], type] = {
    _to_int: ct.IntType, _to_uint: ct.UintType, _to_double: ct.DoubleType, _to_bool: ct.BoolType,
    _to_string: ct.StringType,
}
"""The type each conversion here stands for where its name is a value (``type(1.0) == double``):
celpy resolves the identifier to the function registered under it."""


FUNCTIONS: dict[str, Callable[..., Any]] = {
    **{op: _arith(op) for op in ("_+_", "_-_", "_*_", "_/_", "_%_")},
    "-_": _negate,
    "_[_]": _index,
    "int": _to_int,
    "uint": _to_uint,
    "double": _to_double,
    "bool": _to_bool,
    "string": _to_string,
}
"""Arithmetic, indexing and conversions by CEL name."""
