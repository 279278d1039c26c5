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
many times slower than cel-go): every evaluation may spend at most ``RUNTIME_COST_LIMIT`` (2 000
units, ~10 ms of CPU) and fails past it with cel-go's ``operation cancelled: actual cost limit
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

Modules: this one compiles and evaluates; :mod:`~py_scheduler.plugins.helpers.cel_library` holds the
quantity and semver libraries, :mod:`~py_scheduler.plugins.helpers.cel_ext` equality, ordering and
the strings extension, :mod:`~py_scheduler.plugins.helpers.cel_cost` the cost budget and estimate.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import InvalidOperation
from typing import Any, cast

import celpy
import celpy.celtypes as ct
import celpy.evaluation
import lark
import re2
from celpy.evaluation import CELEvalError

from py_scheduler.framework import quantity as qty
from py_scheduler.framework.memo import CEL_SELECTORS
from py_scheduler.plugins.helpers import cel_cost, cel_ext, cel_library, cel_types
from py_scheduler.plugins.helpers.cel_library import FunctionError, Quantity, Semver, no_overload

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


class _DefaultMap(ct.MapType):
    """``mapper`` of compile.go: a map whose lookups of unknown keys yield an empty map (so
    ``device.attributes["other.domain"].x`` is "no such key: x", ``has()`` is false)."""

    def __getitem__(self, key: Any) -> Any:
        try:
            return super().__getitem__(key)
        except KeyError:
            return ct.MapType({})


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


class _RegexpError(FunctionError):
    """A ``matches`` pattern RE2 cannot parse."""


def _matches(text: Any, pattern: Any) -> ct.BoolType:
    """``matches`` (cel-go ``types.String.Match``): whether RE2 finds ``pattern`` anywhere in ``text``."""
    if not isinstance(text, str) or not isinstance(pattern, str):
        raise no_overload("matches", text, pattern)
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
    **cel_library.FUNCTIONS,
    **cel_ext.FUNCTIONS,
    **cel_types.FUNCTIONS,
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

    def last_cost(self) -> int:
        """Cost units the last evaluation of :attr:`program` spent (0 when it did not compile)."""
        return int(self.program.last_cost) if self.program is not None else 0


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
            ast = cel_cost.expand_filtered_map(_ENV.compile(expression))
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
    except FunctionError as exc:
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
            q = Quantity.of(raw) if isinstance(raw, str) else Quantity(qty.parse(raw))
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
    if len(exc.args) == 3 and isinstance(exc.args[1], type) and issubclass(exc.args[1], FunctionError) and exc.args[2]:
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
