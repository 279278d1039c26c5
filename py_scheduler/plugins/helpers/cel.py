"""CEL evaluation of DRA device selectors (DeviceClass ``spec.selectors`` and request selectors).

Upstream: ``k8s.io/dynamic-resource-allocation/cel/compile.go`` (the ``device`` variable,
``DeviceMatches``, ``parseQualifiedName``, the attribute / capacity maps that answer an unknown
domain with an empty map), ``cel/errors.go`` (``EnhanceRuntimeError``) and
``k8s.io/apiserver/pkg/cel/library/quantity.go`` / ``semverlib.go`` (the ``quantity`` and
``semver`` functions). Expressions are parsed and evaluated by ``cel-python`` (``celpy``, a
maintained pure-Python CEL implementation); the Kubernetes environment is mapped here.

Supported environment (what a selector may use):

* ``device.driver`` (string), ``device.allowMultipleAllocations`` (bool, DRAConsumableCapacity is
  on by default in v1.37);
* ``device.attributes[domain].name``: typed values: ``int`` -> int, ``bool`` -> bool, ``string``
  -> string, ``version`` -> semver (list types ``ints`` / ``bools`` / ``strings`` / ``versions``
  -> lists). An attribute name without a domain belongs to the driver's domain, so
  ``device.attributes["gpu.example.com"].model`` reads attribute ``model`` of driver
  ``gpu.example.com``. An unknown domain is an empty map (``has()`` / ``in`` are false);
  an unknown name inside a domain is a runtime error ``no such key: <name>`` as upstream;
* ``device.capacity[domain].name``: quantities, with ``quantity("40Gi")``, ``isQuantity(s)`` and
  the member functions ``compareTo``, ``isGreaterThan``, ``isLessThan``, ``add``, ``sub`` (quantity
  or int), ``sign``, ``isInteger``, ``asInteger``, ``asApproximateFloat``; ``==`` / ``!=`` compare
  values (``quantity("1Gi") == quantity("1024Mi")``);
* semver: ``semver(s)``, ``isSemver(s)``, ``major()``, ``minor()``, ``patch()``, ``compareTo``,
  ``isGreaterThan``, ``isLessThan``, ``==``;
* standard CEL (operators, ``has``, ``in``, ``size``, ``all`` / ``exists`` / ``exists_one`` /
  ``map`` / ``filter`` macros, ``startsWith``, ``endsWith``, ``contains``, ``matches``) plus cel-go's
  strings extension at the version Kubernetes' base environment has (2: ``charAt``, ``indexOf``,
  ``lastIndexOf``, ``lowerAscii``, ``upperAscii`` (ASCII letters only), ``replace``, ``split``,
  ``substring``, ``trim``, ``join``); ``==`` between different types is false (cel-go's heterogeneous
  equality; lists and maps element by element), and ints, uints and doubles compare by value, with
  ``==`` and with ``<`` / ``<=`` / ``>`` / ``>=`` (``cel.CrossTypeNumericComparisons``,
  apiserver ``pkg/cel/environment/base.go``). A function's error is reported in its own words
  (``index out of range: 4``, blang/semver's ``Invalid character(s) found in major number "v1"``).

Not supported (an expression using them fails with a compile error naming the construct, so the
Pod gets an Error and is retried, never a wrong placement): optional syntax (``.?``,
``orValue``), ``cel.bind``, the ``ip`` / ``cidr`` / ``url`` / ``format`` libraries, celpy's own
``reduce`` / ``min`` macros (not CEL). Unlike cel-go there is no static type check: type errors
surface at evaluation.

Cost (:mod:`py_scheduler.plugins.helpers.cel_cost`, in its own units sized for cel-python, which is
~1000 times slower than cel-go): every evaluation may spend at most ``RUNTIME_COST_LIMIT`` (2 000
units, ~20-50 ms of CPU) and fails past it with cel-go's ``operation cancelled: actual cost limit
exceeded`` (upstream's runtime limit is ``resourceapi.CELSelectorExpressionMaxCost``, enforced by
kube-scheduler's ``cel.CostLimit``); an expression whose worst-case estimate exceeds
``ESTIMATED_COST_LIMIT`` (20 000) does not compile (``too complex, exceeds cost limit``, the API
server's validation wording), nor does one of more than ``PARSE_TOKEN_LIMIT`` (600) tokens.
``compile_selector(..., cost_limit=, disable_cost_estimation=)`` are upstream's
``Options.CostLimit`` / ``DisableCostEstimation``.

``matches`` uses RE2 (``google-re2``; Go's ``regexp`` is RE2's syntax; what Go refuses beyond it, ``\\C``
and capture groups nested 1000 deep, is checked first) and reports a bad pattern in Go's words
(``error parsing regexp: missing closing ): `(```), without RE2's log line on stderr. Literals fail
where cel-go fails them (:func:`_check_patterns`): ``s.matches("(")`` when compiling (``invalid
matches argument``, Kubernetes' ``ValidateRegexLiterals``), ``matches(s, "(")`` at program
instantiation; a pattern computed from the device fails at evaluation. A pattern whose RE2 program
outgrows RE2's default 8 MiB is refused (``expression too large``), which Go may accept.
"""

from __future__ import annotations

import math
import re
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, cast

import celpy
import celpy.celtypes as ct
import celpy.evaluation
import lark
import re2
from celpy.evaluation import CELEvalError

from py_scheduler.framework import quantity as qty
from py_scheduler.framework.memo import CEL_SELECTORS
from py_scheduler.plugins.helpers import cel_cost

__all__ = [
    "CELCompileError",
    "CELRuntimeError",
    "CompiledSelector",
    "Quantity",
    "Semver",
    "attribute_value",
    "compile_selector",
    "device_matches",
    "device_variable",
]



class CELCompileError(ValueError):
    """An expression that cannot be compiled (upstream ``CEL compile error``); ``str()`` is the
    detail, e.g. ``compilation failed: ERROR: <input>:1:5: Syntax error: ...``."""


class CELRuntimeError(ValueError):
    """An evaluation failure (upstream ``CEL runtime error``), already passed through
    ``EnhanceRuntimeError`` (``no such key: x. consider using CEL optional chaining ...``)."""


# -- Kubernetes value types ------------------------------------------------------------------------
class Quantity:
    """``apiservercel.Quantity``: a resource quantity as an exact Decimal (``value`` in base units)."""

    __slots__ = ("value",)

    def __init__(self, value: Decimal) -> None:
        self.value = value

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


class _DefaultMap(ct.MapType):
    """``mapper`` of compile.go: a map whose lookups of unknown keys yield an empty map (so
    ``device.attributes["other.domain"].x`` is "no such key: x", ``has()`` is false)."""

    def __getitem__(self, key: Any) -> Any:
        try:
            return super().__getitem__(key)
        except KeyError:
            return ct.MapType({})


# -- functions -------------------------------------------------------------------------------------
def _no_overload(name: str, *args: Any) -> TypeError:
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
        raise _no_overload("quantity", s)
    try:
        return Quantity(qty.parse(str(s)))
    except qty.QuantityError as exc:
        raise _Failed(_QUANTITY_FORMAT if _quantity_format_wrong(str(s)) else _QUANTITY_SUFFIX) from exc


def _is_quantity(s: Any) -> ct.BoolType:
    if not isinstance(s, str):
        raise _no_overload("isQuantity", s)
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
        raise _Failed(f"strconv.ParseUint: parsing {_go_quote(text)}: invalid syntax")
    if int(text) >= 1 << 64:
        raise _Failed(f"strconv.ParseUint: parsing {_go_quote(text)}: value out of range")
    return int(text)


def parse_semver(text: str) -> tuple[int, int, int, tuple[str, ...]]:
    """blang/semver v4's ``Parse`` (semver.go): (major, minor, patch, pre-release identifiers).

    Raises:
        _Failed: its error, in its words (``Invalid character(s) found in major number "v1"``).
    """
    if not text:
        raise _Failed("Version string empty")
    parts = text.split(".", 2)
    if len(parts) != 3:
        raise _Failed("No Major.Minor.Patch elements found")
    nums: list[int] = []
    patch, build, pre = parts[2], "", ""
    if "+" in patch:
        patch, build = patch.split("+", 1)
    if "-" in patch:
        patch, pre = patch.split("-", 1)
    for word, part in (("major", parts[0]), ("minor", parts[1]), ("patch", patch)):
        if not _DIGITS.issuperset(part):
            raise _Failed(f"Invalid character(s) found in {word} number {_go_quote(part)}")
        if len(part) > 1 and part[0] == "0":
            raise _Failed(f"{word.capitalize()} number must not contain leading zeroes {_go_quote(part)}")
        nums.append(_uint64(part))
    pres: tuple[str, ...] = tuple(pre.split(".")) if "-" in parts[2].split("+", 1)[0] else ()
    for p in pres:
        if not p:
            raise _Failed("Prerelease is empty")
        if _DIGITS.issuperset(p):
            if len(p) > 1 and p[0] == "0":
                raise _Failed(f"Numeric PreRelease version must not contain leading zeroes {_go_quote(p)}")
            _uint64(p)
        elif not _ALPHANUM.issuperset(p):
            raise _Failed(f"Invalid character(s) found in prerelease {_go_quote(p)}")
    for b in build.split(".") if "+" in parts[2] else ():
        if not b:
            raise _Failed("Build meta data is empty")
        if not _ALPHANUM.issuperset(b):
            raise _Failed(f"Invalid character(s) found in build meta data {_go_quote(b)}")
    return nums[0], nums[1], nums[2], pres


def normalize_semver(text: str) -> str:
    """apiserver semverlib's ``normalizeAndParse`` before its ``Parse``: no ``v`` prefix, no leading
    zeros, missing minor / patch as 0.

    Raises:
        _Failed: a short version with pre-release or build data.
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
            raise _Failed("short version cannot contain PreRelease/Build meta data")
        parts += ["0"] * (3 - len(parts))
    return ".".join(parts)


def _go_quote(text: str) -> str:
    """Go's ``%q`` for the printable ASCII texts these messages quote."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _semver_text(name: str, s: Any, normalize: tuple[Any, ...]) -> str:
    if not isinstance(s, str) or len(normalize) > 1 or (normalize and not isinstance(normalize[0], ct.BoolType)):
        raise _no_overload(name, s, *normalize)
    return normalize_semver(str(s)) if normalize and normalize[0] else str(s)


def _semver(s: Any, *normalize: Any) -> Semver:
    """``semver(s)`` / ``semver(s, normalize)`` (apiserver cel/library/semverlib.go)."""
    return Semver(_semver_text("semver", s, normalize))


def _is_semver(s: Any, *normalize: Any) -> ct.BoolType:
    try:
        Semver(_semver_text("isSemver", s, normalize))
    except _Failed:
        return ct.BoolType(False)
    return ct.BoolType(True)


def _cmp(name: str, a: Any, b: Any) -> int:
    if isinstance(a, Quantity) and isinstance(b, Quantity):
        return (a.value > b.value) - (a.value < b.value)
    if isinstance(a, Semver) and isinstance(b, Semver):
        return a.compare(b)
    raise _no_overload(name, a, b)


def _compare_to(a: Any, b: Any) -> ct.IntType:
    return ct.IntType(_cmp("compareTo", a, b))


def _is_greater_than(a: Any, b: Any) -> ct.BoolType:
    return ct.BoolType(_cmp("isGreaterThan", a, b) > 0)


def _is_less_than(a: Any, b: Any) -> ct.BoolType:
    return ct.BoolType(_cmp("isLessThan", a, b) < 0)


def _arith(name: str, a: Any, b: Any, sign: int) -> Quantity:
    if not isinstance(a, Quantity):
        raise _no_overload(name, a, b)
    if isinstance(b, Quantity):
        return Quantity(a.value + sign * b.value)
    if isinstance(b, int) and not isinstance(b, bool):
        return Quantity(a.value + sign * Decimal(int(b)))
    raise _no_overload(name, a, b)


def _add(a: Any, b: Any) -> Quantity:
    return _arith("add", a, b, 1)


def _sub(a: Any, b: Any) -> Quantity:
    return _arith("sub", a, b, -1)


def _sign(a: Any) -> ct.IntType:
    if not isinstance(a, Quantity):
        raise _no_overload("sign", a)
    return ct.IntType((a.value > 0) - (a.value < 0))


def _is_integer(a: Any) -> ct.BoolType:
    if not isinstance(a, Quantity):
        raise _no_overload("isInteger", a)
    return ct.BoolType(a.value == a.value.to_integral_value() and abs(a.value) < 2**63)


def _as_integer(a: Any) -> ct.IntType:
    if not isinstance(a, Quantity):
        raise _no_overload("asInteger", a)
    if a.value != a.value.to_integral_value() or abs(a.value) >= 2**63:
        raise ValueError("cannot convert value to integer")
    return ct.IntType(int(a.value))


def _as_float(a: Any) -> ct.DoubleType:
    if not isinstance(a, Quantity):
        raise _no_overload("asApproximateFloat", a)
    return ct.DoubleType(float(a.value))


def _semver_part(name: str, idx: int) -> Callable[[Any], ct.IntType]:
    def f(a: Any) -> ct.IntType:
        if not isinstance(a, Semver):
            raise _no_overload(name, a)
        n = (a.major, a.minor, a.patch)[idx]
        return ct.IntType(n - (1 << 64) if n >= 1 << 63 else n)  # types.Int(v.Major): a uint64 as an int64
    return f


def _str_fn(name: str, op: Callable[..., Any]) -> Callable[..., Any]:
    def f(s: Any, *args: Any) -> Any:
        if not isinstance(s, str):
            raise _no_overload(name, s, *args)
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
    if _numeric(a) and _numeric(b):
        return ct.BoolType(float(a) == float(b) if isinstance(a, ct.DoubleType) or isinstance(
            b, ct.DoubleType) else int(a) == int(b))
    if isinstance(a, ct.BoolType) != isinstance(b, ct.BoolType):
        return ct.BoolType(False)
    if isinstance(a, Quantity | Semver) or isinstance(b, Quantity | Semver):
        return ct.BoolType(type(a) is type(b) and a == b)
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
        _Failed: ``NaN values cannot be ordered``.
    """
    ad, bd = isinstance(a, ct.DoubleType), isinstance(b, ct.DoubleType)
    if (ad and math.isnan(a)) or (bd and math.isnan(b)):
        raise _Failed("NaN values cannot be ordered")
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
            raise _no_overload(name, *args)


def _char_at(s: str, i: Any) -> ct.StringType:
    _int_arg("charAt", i)
    if i < 0 or i > len(s):
        raise _Failed(f"index out of range: {i}")
    return ct.StringType(s[i:i + 1])


_ZERO = ct.IntType(0)


def _index_of(s: str, sub: Any, offset: Any = _ZERO) -> ct.IntType:
    _int_arg("indexOf", offset)
    if not isinstance(sub, str):
        raise _no_overload("indexOf", s, sub, offset)
    if offset < 0:
        raise _Failed(f"index out of range: {offset}")
    if not sub:
        return ct.IntType(min(int(offset), len(s)))
    return ct.IntType(s.find(str(sub), int(offset)) if offset < len(s) else -1)


def _last_index_of(s: str, sub: Any, *offset: Any) -> ct.IntType:
    _int_arg("lastIndexOf", *offset)
    if not isinstance(sub, str):
        raise _no_overload("lastIndexOf", s, sub, *offset)
    if not offset:
        if not sub:
            return ct.IntType(len(s))
        if len(s.encode()) < len(sub.encode()):
            return ct.IntType(-1)
        off = len(s) - 1
    else:
        off = int(offset[0])
        if off < 0:
            raise _Failed(f"index out of range: {off}")
        if not sub:
            return ct.IntType(min(off, len(s)))
        if off >= len(s):
            return ct.IntType(-1)
    return ct.IntType(s.rfind(str(sub), 0, min(off, len(s) - len(sub)) + len(sub)))


def _substring(s: str, start: Any, *end: Any) -> ct.StringType:
    _int_arg("substring", start, *end)
    stop = int(end[0]) if end else len(s)
    if end and start > stop:
        raise _Failed(f"invalid substring range. start: {start}, end: {stop}")
    for i in (start, *end):
        if i < 0 or i > len(s):
            raise _Failed(f"index out of range: {i}")
    return ct.StringType(s[int(start):stop])


_REPLACE_MAX = cel_cost.UPSTREAM_RUNTIME_COST_LIMIT
"""Longest ``replace`` result (characters): cel-go charges one unit per character of it
(``trackStringReplaceCost``), so a longer one alone exceeds upstream's runtime cost limit."""


def _replace(s: str, old: Any, new: Any, *n: Any) -> ct.StringType:
    _int_arg("replace", *n)
    if not isinstance(old, str) or not isinstance(new, str):
        raise _no_overload("replace", s, old, new, *n)
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
        raise _no_overload("split", s, sep, *n)
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
    r = _eq(a, b)
    return r if isinstance(r, CELEvalError) else ct.BoolType(not r)


#: RE2 options for ``matches``: no error log on stderr (RE2 logs every pattern it cannot parse)
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False
#: RE2's error texts (re2/regexp.cc) that Go's regexp/syntax words differently (its ErrorCode strings)
_GO_REGEXP_WORDS = {
    "missing ]": "missing closing ]",
    "missing )": "missing closing )",
    "trailing \\": "trailing backslash at end of expression",
    "no argument for repetition operator": "missing argument to repetition operator",
    "invalid repetition size": "invalid repeat count",
    "bad repetition operator": "invalid nested repetition operator",
    "invalid perl operator": "invalid or unsupported Perl syntax",
    "invalid named capture group": "invalid named capture",
}


#: Go's regexp/syntax refuses capture groups nested this deep (its maxHeight, ``expression nests too deeply``)
_GO_MAX_CAPTURE_DEPTH = 1000


def _go_only_refusal(pattern: str) -> str | None:
    """What Go's regexp refuses and RE2 accepts: the ``\\C`` escape (any byte) and capture groups
    nested 1000 deep (Go's parse-tree height limit, counted here on capture groups, which is where it
    bites). Character classes and escapes are skipped so that their parentheses do not count."""
    if "\\C" not in pattern and pattern.count("(") < _GO_MAX_CAPTURE_DEPTH:
        return None  # the common case, without a walk in Python (``matches`` calls this per evaluation)
    depth, deepest, i, in_class = 0, 0, 0, False
    stack: list[bool] = []
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            if pattern.startswith("C", i + 1):
                return "invalid escape sequence: `\\C`"
            i += 1
        elif in_class:
            if c == "]":
                in_class = False
            elif pattern.startswith("[:", i):  # a POSIX class's ] does not end the set
                end = pattern.find(":]", i + 2)
                i = end + 1 if end >= 0 else i
        elif c == "[":
            in_class = True
            i += 1 if pattern.startswith("^", i + 1) else 0
            i += 1 if pattern.startswith("]", i + 1) else 0  # a leading ] is a member
        elif c == "(":
            capturing = not pattern.startswith("?", i + 1) or pattern.startswith(("?P<", "?<"), i + 1)
            stack.append(capturing)
            depth += capturing
            deepest = max(deepest, depth)
        elif c == ")" and stack:
            depth -= stack.pop()
        i += 1
    if deepest >= _GO_MAX_CAPTURE_DEPTH:
        return f"expression nests too deeply: `{pattern}`"
    return None


def regexp_error(pattern: str) -> str | None:
    """None when ``pattern`` compiles, else Go's ``regexp.Compile`` error text for it:
    ``error parsing regexp: <what>: `<where>``` (the ``*syntax.Error`` string). RE2 checks the syntax
    (Go's regexp is RE2's), :func:`_go_only_refusal` what Go refuses beyond it; a pattern whose RE2
    program outgrows RE2's default 8 MiB (``\\pL{1000}``) is refused as ``expression too large``,
    which Go may accept: py-scheduler's bound on what one selector may make it allocate."""
    go_only = _go_only_refusal(pattern)
    if go_only is not None:
        return f"error parsing regexp: {go_only}"
    try:
        re2.compile(_valid_unicode(pattern), _RE2_OPTIONS)
    except re2.error as exc:
        raw = exc.args[0] if exc.args else ""
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
        if text.startswith("pattern too large"):
            return f"error parsing regexp: expression too large: `{pattern}`"
        what, _, where = text.partition(": ")
        return f"error parsing regexp: {_GO_REGEXP_WORDS.get(what, what)}: `{where}`"
    return None


_SURROGATE = re.compile("[\ud800-\udfff]")


def _valid_unicode(text: str) -> str:
    """``text`` with lone surrogates (a JSON ``"\\ud800"``) as U+FFFD, as Go's JSON decoding reads them."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)
    return text


class _Failed(ValueError):
    """A function's error in cel-go's words (``types.WrapErr``); celpy wraps it in a CELEvalError
    whose args are ("return error for overflow", the class, (message,)), and :func:`_runtime_message`
    unwraps it."""


class _RegexpError(_Failed):
    """A ``matches`` pattern RE2 cannot parse."""


def _matches(text: Any, pattern: Any) -> ct.BoolType:
    """``matches`` (cel-go ``types.String.Match``): whether RE2 finds ``pattern`` anywhere in ``text``."""
    if not isinstance(text, str) or not isinstance(pattern, str):
        raise _no_overload("matches", text, pattern)
    error = _go_only_refusal(pattern)
    if error is not None:
        raise _RegexpError(f"error parsing regexp: {error}")
    try:
        found = re2.search(pattern, text, _RE2_OPTIONS)
    except UnicodeEncodeError:  # a lone surrogate: rare, so not checked for on every call
        found = re2.search(_valid_unicode(pattern), _valid_unicode(text), _RE2_OPTIONS)
    except re2.error:
        raise _RegexpError(regexp_error(pattern) or "error parsing regexp") from None
    return ct.BoolType(found is not None)


_Literal = tuple[str, int, int]
"""A string literal of an expression: (value, line, column), 1-based as cel-go reports them."""


def _matches_literals(ast: cel_cost.Tree) -> tuple[list[_Literal], list[_Literal]]:
    """The string literals cel-go checks in ``matches`` calls, each list in source order:

    * the first of each call's arguments as its AST has them (``Args()``, without the receiver):
      ``s.matches(p)``'s p, but ``matches(s, p)``'s s (``ValidateRegexLiterals`` checks these);
    * each call's pattern, p in both forms (the interpreter's ``Args()``, receiver first, index 1:
      what ``MatchesRegexOptimization`` compiles)."""
    first: list[_Literal] = []
    patterns: list[_Literal] = []
    for node in [*ast.find_data("member_dot_arg"), *ast.find_data("ident_arg")]:
        if node.data == "member_dot_arg" and len(node.children) == 3 and node.children[1] == "matches":
            args = _arguments(node.children[2])
            if len(args) == 1:
                lit = _string_literal(args[0])
                first.extend(lit)
                patterns.extend(lit)
        elif node.data == "ident_arg" and len(node.children) == 2 and node.children[0] == "matches":
            args = _arguments(node.children[1])
            if len(args) == 2:
                first.extend(_string_literal(args[0]))
                patterns.extend(_string_literal(args[1]))
    return sorted(first, key=lambda f: f[1:]), sorted(patterns, key=lambda f: f[1:])


def _string_literal(arg: object) -> list[_Literal]:
    """``[(value, line, column)]`` when ``arg`` is a string literal (under single-child wrappers), else []."""
    while isinstance(arg, lark.Tree) and arg.data != "literal" and len(arg.children) == 1:
        arg = arg.children[0]
    if not (isinstance(arg, lark.Tree) and arg.data == "literal" and isinstance(arg.children[0], lark.Token)):
        return []
    try:
        value = _ENV.program(arg).evaluate({})
    except Exception:  # a literal celpy cannot read is left to evaluation to report
        return []
    token = arg.children[0]
    return [(str(value), int(token.line or 1), int(token.column or 1))] if isinstance(value, str) else []


def _arguments(exprlist: object) -> list[object]:
    return list(exprlist.children) if isinstance(exprlist, lark.Tree) else []


def _check_patterns(ast: cel_cost.Tree, expression: str) -> CELCompileError | None:
    """``matches`` literals cel-go refuses before evaluating, in its words and order:

    * ``env.Compile``'s ``cel.ValidateRegexLiterals`` (Kubernetes' base environment sets it,
      ``k8s.io/apiserver/pkg/cel/environment/base.go``; cel-go ``cel/validator.go``) compiles the
      literal *first argument* of each ``matches`` call: the pattern of ``s.matches("...")``, but the
      *text* of ``matches("...", s)``; each bad one is an ``invalid matches argument`` issue at it;
    * then ``env.Program`` with ``OptOptimize`` (``MatchesRegexOptimization``,
      ``interpreter/decorators.go``) compiles the literal pattern of each call, the receiver counted:
      ``program instantiation failed: error parsing regexp: ...`` (reached by ``matches(s, "...")``)."""
    first, patterns = _matches_literals(ast)
    lines = expression.split("\n")
    issues = [f"ERROR: <input>:{line}:{col}: invalid matches argument\n | {lines[line - 1]}\n | {'.' * (col - 1)}^"
              for value, line, col in first if regexp_error(value) is not None]
    if issues:
        return CELCompileError("compilation failed: " + "\n".join(issues))
    for value, _, _ in patterns:
        error = regexp_error(value)
        if error is not None:
            return CELCompileError(f"program instantiation failed: {error}")
    return None


_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "matches": _matches,
    "_==_": _eq,
    "_!=_": _ne,
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
    "_<_": _ordering("_<_", celpy.evaluation.base_functions["_<_"], lambda c: c < 0),
    "_<=_": _ordering("_<=_", celpy.evaluation.base_functions["_<=_"], lambda c: c <= 0),
    "_>_": _ordering("_>_", celpy.evaluation.base_functions["_>_"], lambda c: c > 0),
    "_>=_": _ordering("_>=_", celpy.evaluation.base_functions["_>=_"], lambda c: c >= 0),
    # the strings extension, version 2 (cel-go ext/strings.go), as Kubernetes' base environment has it
    "lowerAscii": _str_fn("lowerAscii", lambda s: ct.StringType(s.translate(_ASCII_LOWER))),
    "upperAscii": _str_fn("upperAscii", lambda s: ct.StringType(s.translate(_ASCII_UPPER))),
    "trim": _str_fn("trim", lambda s: ct.StringType(s.strip(_GO_SPACE))),
    "charAt": _str_fn("charAt", _char_at),
    "indexOf": _str_fn("indexOf", _index_of),
    "lastIndexOf": _str_fn("lastIndexOf", _last_index_of),
    "substring": _str_fn("substring", _substring),
    "replace": _str_fn("replace", _replace),
    "split": _str_fn("split", _split),
    "join": lambda lst, sep="": ct.StringType(str(sep).join(str(x) for x in lst)),
}

_UNSUPPORTED = (
    (re.compile(r"\.\?"), "optional field selection (.?)"),
    (re.compile(r"\borValue\s*\("), "optional values (orValue)"),
    (re.compile(r"\bcel\s*\.\s*bind\s*\("), "cel.bind"),
    (re.compile(r"\b(ip|cidr|url|format)\s*\("), "the ip / cidr / url / format libraries"),
)

_KNOWN_IDENTS = frozenset({"device", "true", "false", "null", "in", "has", "size", "int", "uint", "double",
                           "string", "bool", "bytes", "list", "map", "type", "dyn", "duration", "timestamp"})


@dataclass(slots=True)
class CompiledSelector:
    """One compiled expression (``cel.CompilationResult``): ``program`` or ``error``; ``max_cost``
    is the worst-case estimate in :mod:`~py_scheduler.plugins.helpers.cel_cost` units (``MaxCost``;
    None when not estimated)."""

    expression: str
    program: Any = None
    error: CELCompileError | None = None
    max_cost: int | None = None


_ENV = celpy.Environment(runner_class=cel_cost.BudgetRunner)


def compile_selector(expression: str, *, cost_limit: int | None = None,
                     disable_cost_estimation: bool = False) -> CompiledSelector:
    """Compile (and cache: :data:`~py_scheduler.framework.memo.CEL_SELECTORS`) one selector expression.
    Never raises: a compile failure is returned in ``.error`` (upstream keeps it in
    ``CompilationResult.Error`` the same way), among them an estimated worst case over
    ``cel_cost.ESTIMATED_COST_LIMIT``. ``cost_limit`` overrides the runtime budget
    (``cel_cost.RUNTIME_COST_LIMIT``); with either option the result is not cached."""
    default = cost_limit is None and not disable_cost_estimation
    hit = CEL_SELECTORS.lookup(expression) if default else None
    if hit is not None:
        return cast(CompiledSelector, hit)
    res = CompiledSelector(expression)
    for pattern, what in _UNSUPPORTED:
        if pattern.search(expression):
            res.error = CELCompileError(f"compilation failed: {what} is not supported by py-scheduler's CEL "
                                        f"environment")
            break
    if res.error is None and cel_cost.count_tokens(expression) > cel_cost.PARSE_TOKEN_LIMIT:
        res.error = CELCompileError(f"compilation failed: too complex, more than {cel_cost.PARSE_TOKEN_LIMIT} "
                                    f"tokens (py-scheduler's parser limit)")
    if res.error is None:
        try:
            ast = _ENV.compile(expression)
            res.program = _ENV.program(ast, functions=_FUNCTIONS)
        except Exception as exc:  # celpy raises CELParseError / lark errors for syntax problems
            line, column = getattr(exc, "line", None), getattr(exc, "column", None)
            where = f"<input>:{line}:{column}" if line is not None and column is not None else "<input>"
            pointer = f"\n | {expression}\n | {'.' * (int(column) - 1)}^" if isinstance(column, int) else ""
            res.error = CELCompileError(f"compilation failed: ERROR: {where}: Syntax error{pointer}")
        else:
            res.error = (_check_tree(ast) or _check_patterns(ast, expression)
                         or _check_cost(res, ast, disable_cost_estimation))
            if res.error is None and cost_limit is not None:
                res.program.cost_limit = cost_limit
    return CEL_SELECTORS.store(expression, res) if default else res


def _check_tree(ast: Any) -> CELCompileError | None:
    """celpy-only macros and the tree depth against ``cel_cost.TREE_DEPTH_LIMIT`` (checked even with
    cost estimation disabled: it bounds evaluation's recursion, not its cost)."""
    extension = cel_cost.celpy_extension(ast)
    if extension is not None:
        return CELCompileError(f"compilation failed: ERROR: <input>: undeclared reference to '{extension}'")
    depth = cel_cost.tree_depth(ast)
    if depth > cel_cost.TREE_DEPTH_LIMIT:
        return CELCompileError(f"compilation failed: expression nested too deeply (parse tree depth {depth}, "
                               f"py-scheduler's limit {cel_cost.TREE_DEPTH_LIMIT})")
    return None


def _check_cost(res: CompiledSelector, ast: Any, disabled: bool) -> CELCompileError | None:
    """The worst-case estimate against ``cel_cost.ESTIMATED_COST_LIMIT`` (after the program is built,
    as upstream estimates after ``env.Program``)."""
    if disabled:
        return None
    res.max_cost = cel_cost.estimate_cost(ast)
    if res.max_cost > cel_cost.ESTIMATED_COST_LIMIT:
        return CELCompileError(f"compilation failed: too complex, exceeds cost limit (estimated cost {res.max_cost}, "
                               f"py-scheduler's limit {cel_cost.ESTIMATED_COST_LIMIT})")
    return None


def _parse_qualified_name(name: str, default_domain: str) -> tuple[str, str]:
    """``parseQualifiedName``: ``domain/id``, or the driver's domain for a bare id."""
    domain, sep, ident = name.partition("/")
    if not sep:
        return default_domain, name
    return domain, ident


def _attribute_semver(text: str) -> Semver:
    try:
        return Semver(text)
    except _Failed as exc:
        raise ValueError(f"parse semantic version: {exc}") from None


def attribute_value(name: str, attr: Mapping[str, Any]) -> Any:
    """``getAttributeValue``: the CEL value of one DeviceAttribute (``{"int": 3}`` ...).

    Raises:
        CELRuntimeError: no known value field, or an unparsable version (``attribute X: ...``).
    """
    try:
        if attr.get("ints") is not None:
            return ct.ListType([ct.IntType(int(v)) for v in attr["ints"]])
        if attr.get("bools") is not None:
            return ct.ListType([ct.BoolType(bool(v)) for v in attr["bools"]])
        if attr.get("strings") is not None:
            return ct.ListType([ct.StringType(str(v)) for v in attr["strings"]])
        if attr.get("versions") is not None:
            versions: list[Any] = [_attribute_semver(str(v)) for v in attr["versions"]]
            return ct.ListType(versions)
        if attr.get("int") is not None:
            v = attr["int"]
            if isinstance(v, bool) or not isinstance(v, int):
                raise ValueError(f"int value {v!r} is not an integer")
            return ct.IntType(v)
        if attr.get("bool") is not None:
            if not isinstance(attr["bool"], bool):
                raise ValueError(f"bool value {attr['bool']!r} is not a boolean")
            return ct.BoolType(attr["bool"])
        if attr.get("string") is not None:
            return ct.StringType(str(attr["string"]))
        if attr.get("version") is not None:
            return _attribute_semver(str(attr["version"]))
    except (ValueError, TypeError) as exc:
        raise CELRuntimeError(f"attribute {name}: {exc}") from exc
    raise CELRuntimeError(f"attribute {name}: unsupported attribute value")


def device_variable(driver: str, device: Mapping[str, Any]) -> ct.MapType:
    """The ``device`` variable for one ResourceSlice device (``spec.devices[]`` JSON).

    Raises:
        CELRuntimeError: a malformed attribute or capacity value.
    """
    attributes: dict[str, dict[str, Any]] = {}
    for name, attr in (device.get("attributes") or {}).items():
        if not isinstance(attr, Mapping):
            raise CELRuntimeError(f"attribute {name}: unsupported attribute value")
        domain, ident = _parse_qualified_name(str(name), driver)
        attributes.setdefault(domain, {})[ident] = attribute_value(str(name), attr)
    capacity: dict[str, dict[str, Any]] = {}
    for name, cap in (device.get("capacity") or {}).items():
        raw = cap.get("value") if isinstance(cap, Mapping) else None
        try:
            q = Quantity(qty.parse(raw))
        except (qty.QuantityError, InvalidOperation, TypeError) as exc:
            raise CELRuntimeError(f"capacity {name}: invalid quantity {raw!r}") from exc
        domain, ident = _parse_qualified_name(str(name), driver)
        capacity.setdefault(domain, {})[ident] = q

    def outer(m: dict[str, dict[str, Any]]) -> _DefaultMap:
        return _DefaultMap({ct.StringType(d): ct.MapType({ct.StringType(k): v for k, v in inner.items()})
                            for d, inner in m.items()})

    return ct.MapType({
        ct.StringType("driver"): ct.StringType(driver),
        ct.StringType("allowMultipleAllocations"): ct.BoolType(bool(device.get("allowMultipleAllocations"))),
        ct.StringType("attributes"): outer(attributes),
        ct.StringType("capacity"): outer(capacity),
    })


_NO_MEMBER = re.compile(r"no such member in mapping: '([^']*)'")
_NO_KEY = re.compile(r"no such key: ?'?([^'\"]*)'?")
_UNDECLARED = re.compile(r"undeclared reference to '([^']*)'")


def _runtime_message(exc: BaseException) -> str:
    if len(exc.args) == 3 and isinstance(exc.args[1], type) and issubclass(exc.args[1], _Failed) and exc.args[2]:
        return str(exc.args[2][0])
    text = str(exc.args[0]) if exc.args else str(exc)
    m = _NO_MEMBER.search(text) or _NO_KEY.search(text)
    if m is not None:
        # EnhanceRuntimeError adds the hint to "no such key" errors.
        return (f"no such key: {m.group(1)}. consider using CEL optional chaining (.? followed by orValue()) or "
                f"guarding the check with has() for optional fields")
    if "overload" in text:
        return "no such overload"
    return text


def device_matches(selector: CompiledSelector, device_var: ct.MapType) -> bool:
    """``CompilationResult.DeviceMatches``: evaluate against a ``device`` variable built by
    :func:`device_variable`.

    Raises:
        CELCompileError: the expression did not compile, or references an undeclared identifier
            or function (cel-go rejects those when compiling).
        CELRuntimeError: evaluation failed, spent more than its cost budget (``operation cancelled:
            actual cost limit exceeded``) or did not yield a bool.
    """
    if selector.error is not None:
        raise selector.error
    try:
        result = selector.program.evaluate({"device": device_var})
    except cel_cost.CostLimitExceeded as exc:
        raise CELRuntimeError(str(exc)) from exc
    except CELEvalError as exc:
        text = str(exc.args[0]) if exc.args else str(exc)
        m = _UNDECLARED.search(text)
        if m is not None:
            raise CELCompileError(f"compilation failed: ERROR: <input>: undeclared reference to '{m.group(1)}'"
                                  ) from exc
        raise CELRuntimeError(_runtime_message(exc)) from exc
    except (TypeError, ValueError, KeyError, ArithmeticError, RecursionError) as exc:
        raise CELRuntimeError(_runtime_message(exc)) from exc
    if isinstance(result, CELEvalError):
        raise CELRuntimeError(_runtime_message(result))
    if not isinstance(result, ct.BoolType | bool):
        raise CELRuntimeError(f"CEL result of type {type(result).__name__} could not be converted to bool")
    return bool(result)
