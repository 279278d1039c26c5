"""CEL cost: a runtime cost budget for cel-python evaluation and a compile-time cost estimate.

The one module that relies on cel-python (``celpy``) internals; ``tests/unit/plugins/test_cel_cost.py``
fails loudly when celpy changes what it relies on (exact cost counts of fixed expressions, the hooks
below). Upstream: cel-go enforces ``cel.CostLimit`` while it evaluates (``interpreter/runtimecost.go``:
``operation cancelled: actual cost limit exceeded``) and estimates the worst case when an expression is
compiled (``checker/cost.go``, with ``k8s.io/dynamic-resource-allocation/cel`` ``sizeEstimator``
giving the largest list / map / string a ``device`` field can hold). celpy has neither; this module
adds both, in its own units.

Cost unit: one node of celpy's syntax tree (``celpy.Environment.compile``'s lark Tree) evaluated, plus
one per element a comprehension macro (``all``, ``exists``, ``exists_one``, ``map``, ``filter``) visits.
A literal ``1`` is ~10 units (the grammar's precedence chain), ``a == b`` ~25. celpy evaluates ~200 000
units per CPU second (~5 us each, on the 2-core development machine), ~50 times fewer than cel-go's
cost units per second (10 000 000), which is why py-scheduler's limits are its own
(:data:`RUNTIME_COST_LIMIT`, :data:`ESTIMATED_COST_LIMIT`) and not upstream's
``resourceapi.CELSelectorExpressionMaxCost`` (1 000 000, "roughly 0.1 second" in cel-go).

Hooks used (the test names each): ``celpy.Environment(runner_class=...)`` (public),
``celpy.InterpretedRunner.new_activation`` and ``.ast`` (public), and of ``celpy.evaluation.Evaluator``
(a ``lark.visitors.Interpreter``): ``visit`` / ``visit_children`` (every node evaluation goes through one
of them) and ``sub_evaluator`` (the evaluator each comprehension macro builds for its body); and the names
``celpy.celtypes.logical_and`` / ``logical_or`` that the ``all`` / ``exists`` macros fold with
(:func:`fold_macros_with`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import celpy
import lark
from celpy.evaluation import Evaluator

Tree = lark.Tree[Any]

__all__ = [
    "ESTIMATED_COST_LIMIT",
    "PARSE_TOKEN_LIMIT",
    "RUNTIME_COST_LIMIT",
    "UPSTREAM_RUNTIME_COST_LIMIT",
    "BudgetRunner",
    "CostLimitExceeded",
    "celpy_extension",
    "count_tokens",
    "estimate_cost",
    "expand_filtered_map",
    "fold_macros_with",
    "tree_depth",
]

RUNTIME_COST_LIMIT = 2_000
"""Cost units one evaluation may spend (cel-go's ``CostLimit``): ~10 ms of CPU in celpy. A normal
selector spends 20-100 (``device.attributes["d"].model == "a100"``: 37); a comprehension over a
48-value list attribute with a one-comparison body ~1300."""

UPSTREAM_RUNTIME_COST_LIMIT = 1_000_000
"""``resourceapi.CELSelectorExpressionMaxCost`` (k8s.io/api resource/v1 types.go) in cel-go's units,
for the functions whose cost is the size of what they build (a ``replace`` result)."""

ESTIMATED_COST_LIMIT = 20_000
"""Largest worst-case estimate (:func:`estimate_cost`) accepted when an expression is compiled
(the API server's ``too complex, exceeds cost limit`` check, sized for Python). Ten times the runtime
limit: the estimate assumes every list attribute at the API's maximum (48 values), every string at 64
characters, every map at 32 entries, which real devices rarely reach; an expression between the two
limits is evaluated and fails at run time only where a device really makes it that expensive."""

PARSE_TOKEN_LIMIT = 600
"""Tokens an expression may have (counted by :func:`count_tokens` before parsing): celpy's lark parser
builds ~10 tree nodes per token, ~0.3-1 ms each, so the API server's 10 Ki characters
(``CELSelectorExpressionMaxLength``) could take seconds to parse. A selector has 5-100."""

TREE_DEPTH_LIMIT = 120
"""Deepest parse tree (:func:`tree_depth`) accepted when compiling. celpy evaluates recursively, ~6
Python frames per tree level, so a tree of depth d needs ~6 d + 20 frames under the caller's: at 120
that is ~740 of the interpreter's 1000, leaving the live loop's stack its room. One level of parentheses,
brackets or a call adds ~10 levels: ``((((1)))) > 0`` has depth 52; the selectors of NVIDIA's DRA driver
23-34; three nested ``&&``/``||`` groups 54. cel-go's parser allows 250 nested levels of each rule
(``expression recursion limit exceeded``, cel-go parser/parser.go); past 120 py-scheduler refuses the
expression when compiling rather than fail every evaluation with a RecursionError."""

_SQ, _DQ = "'", '"'
_TOKEN = re.compile(
    "[rRbB]*(?:"
    + _DQ * 3 + r"(?:\\.|[^\\])*?" + _DQ * 3 + "|"
    + _SQ * 3 + r"(?:\\.|[^\\])*?" + _SQ * 3 + "|"
    + _DQ + r"(?:\\.|[^\\\n" + _DQ + "])*" + _DQ + "|"
    + _SQ + r"(?:\\.|[^\\\n" + _SQ + "])*" + _SQ + ")"
    + r"|[A-Za-z_][A-Za-z0-9_]*|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|&&|\|\||[<>=!]=|\S")


def count_tokens(text: str) -> int:
    """How many lexical tokens ``text`` has (close to celpy's lexer; a string literal is one). A text
    of at most :data:`PARSE_TOKEN_LIMIT` characters is not scanned (it cannot have more tokens), one
    of over 16 times that is not either (counted as its length: too long, whatever its tokens)."""
    if len(text) <= PARSE_TOKEN_LIMIT or len(text) > 16 * PARSE_TOKEN_LIMIT:
        return len(text)
    return sum(1 for _ in _TOKEN.finditer(text))


MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})
"""Comprehension macros whose body is evaluated once per element (celpy also has ``reduce`` and ``min``,
which cel-go does not: :mod:`py_scheduler.plugins.helpers.cel` rejects them when compiling)."""

ACTUAL_COST_LIMIT_MESSAGE = "operation cancelled: actual cost limit exceeded"
"""cel-go's wording (``interpreter/runtimecost.go``)."""


class CostLimitExceeded(Exception):
    """The evaluation spent more than its budget; ``str()`` is cel-go's message. Deliberately not a
    ``CELEvalError`` / ``TypeError`` / ``ValueError``: celpy catches those inside ``||``, ``&&`` and the
    macros, and this must end the whole evaluation."""

    def __init__(self) -> None:
        super().__init__(ACTUAL_COST_LIMIT_MESSAGE)


class _Meter:
    __slots__ = ("left",)

    def __init__(self, limit: int) -> None:
        self.left = limit


class _MeteredEvaluator(Evaluator):
    """celpy's tree-walking Evaluator charging one unit per node evaluated to a shared meter."""

    def __init__(self, ast: Tree, activation: Any, meter: _Meter) -> None:
        super().__init__(ast, activation)
        self.meter = meter

    def _charge(self, units: int) -> None:
        m = self.meter
        m.left -= units
        if m.left < 0:
            raise CostLimitExceeded

    def sub_evaluator(self, ast: Tree) -> Evaluator:
        return _MeteredEvaluator(ast, self.activation, self.meter)

    def evaluate(self, context: Any = None) -> Any:
        self._charge(1)  # the whole expression once; a macro body once per element
        return super().evaluate(context)

    def visit(self, tree: Tree) -> Any:
        self._charge(1)
        return super().visit(tree)

    def visit_children(self, tree: Tree) -> list[Any]:
        self._charge(sum(1 for c in tree.children if isinstance(c, lark.Tree)))
        return super().visit_children(tree)


def fold_macros_with(and_: Any, or_: Any) -> None:
    """Make celpy's ``all`` and ``exists`` macros fold their elements' results with ``and_`` /
    ``or_`` (cel-go's semantics: the first error is kept) instead of celpy's ``logical_and`` /
    ``logical_or``, which fail on two errors and turn them into "no such overload". The macros look
    ``celpy.celtypes.logical_and`` / ``logical_or`` up by name each time they run
    (``Evaluator.member_dot_arg``); ``&&`` and ``||`` themselves are registered functions."""
    celpy.celtypes.logical_and = and_
    celpy.celtypes.logical_or = or_


class BudgetRunner(celpy.InterpretedRunner):
    """``celpy.InterpretedRunner`` whose every :meth:`evaluate` may spend at most ``cost_limit`` units
    (:data:`RUNTIME_COST_LIMIT` unless set on the instance); ``last_cost`` is what the last one spent.

    Raises (from :meth:`evaluate`):
        CostLimitExceeded: the budget ran out (the evaluation stops there).
    """

    cost_limit: int = RUNTIME_COST_LIMIT
    last_cost: int = 0

    def evaluate(self, context: Any) -> Any:
        meter = _Meter(self.cost_limit)
        try:
            return _MeteredEvaluator(self.ast, self.new_activation(), meter).evaluate(context)
        finally:
            self.last_cost = self.cost_limit - meter.left


# -- compile-time estimate -------------------------------------------------------------------------
_DEVICE_EXTENT = 64
"""Largest list, map or string reachable from ``device`` (DeviceAttributeMaxValueLength 64 characters,
ResourceSliceMaxAttributeValuesPerDevice 48 values, ResourceSliceMaxAttributesAndCapacitiesPerDevice 32)."""
_UNKNOWN_EXTENT = 64


def _trees(node: Tree) -> Iterator[Tree]:
    return (c for c in node.children if isinstance(c, lark.Tree))


def tree_depth(ast: Tree) -> int:
    """Nodes on the longest root-to-leaf path of ``ast`` (a lark Tree; tokens not counted), walked
    without recursion so that any tree the parser built can be measured."""
    deepest, stack = 0, [(ast, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in _trees(node))
    return deepest


def expand_filtered_map(ast: Tree) -> Tree:
    """Rewrite every three-argument ``l.map(x, p, e)`` (CEL's map with a filter, which celpy lacks)
    into ``l.filter(x, p).map(x, e)``, its definition in the CEL spec; in place, ``ast`` returned."""
    for node in list(ast.find_data("member_dot_arg")):
        if len(node.children) != 3:
            continue
        target, method, args = node.children
        if not (isinstance(method, lark.Token) and method.value == "map" and isinstance(args, lark.Tree)
                and len(args.children) == 3):
            continue
        var, pred, expr = args.children
        filtered = lark.Tree("member_dot_arg", [target, lark.Token(method.type, "filter"),
                                                lark.Tree("exprlist", [var, pred])])
        node.children = [lark.Tree("member", [filtered]), method, lark.Tree("exprlist", [var, expr])]
    return ast


def celpy_extension(ast: Tree) -> str | None:
    """The name of a celpy-only macro (``reduce``, ``min``) the expression calls, else None."""
    for node in ast.find_data("member_dot_arg"):
        method = node.children[1] if len(node.children) > 1 else None
        if isinstance(method, lark.Token) and method.value in ("reduce", "min"):
            return str(method.value)
    return None


def estimate_cost(ast: Tree) -> int:
    """Worst-case cost units of evaluating ``ast`` (from ``celpy.Environment.compile``): the exact
    count for an expression over literals, an upper bound where sizes come from ``device`` (its lists,
    maps and strings at their API maxima, :data:`_DEVICE_EXTENT`). Upstream: cel-go
    ``checker.Cost`` with DRA's ``sizeEstimator``. Recursive: call it on trees of at most
    :data:`TREE_DEPTH_LIMIT` levels.
    """
    return 1 + _estimate(ast, {})[0]


def _estimate(node: Tree, bound: dict[str, int]) -> tuple[int, int]:
    """(cost, extent): ``extent`` bounds the length of the node's value and of every list, map or
    string inside it (what a macro over it, or over its elements, may iterate)."""
    kind = node.data
    if kind == "member_dot_arg" and len(node.children) == 3:
        method = node.children[1]
        args = node.children[2]
        if isinstance(method, lark.Token) and method.value in MACROS and isinstance(args, lark.Tree) \
                and len(args.children) == 2 and isinstance(node.children[0], lark.Tree):
            var_tree, body = args.children
            range_cost, extent = _estimate(node.children[0], bound)
            names = [t.children[0] for t in var_tree.find_data("ident")] if isinstance(var_tree, lark.Tree) else []
            inner = dict(bound)
            if names and isinstance(names[0], lark.Token):
                inner[names[0].value] = extent
            body_cost, body_extent = _estimate(body, inner) if isinstance(body, lark.Tree) else (0, 0)
            out = extent if method.value == "filter" else max(extent, body_extent) if method.value == "map" else 1
            return 1 + range_cost + extent * (body_cost + 1), out
    cost, extents = 1, []
    for child in _trees(node):
        c, e = _estimate(child, bound)
        cost += c
        extents.append(e)
    if kind == "literal":
        tok = node.children[0] if node.children else None
        return cost, len(tok.value) if isinstance(tok, lark.Token) else 1
    if kind == "ident":
        tok = node.children[0] if node.children else None
        name = tok.value if isinstance(tok, lark.Token) else ""
        return cost, bound.get(name, _DEVICE_EXTENT if name == "device" else _UNKNOWN_EXTENT)
    if kind in ("list_lit", "map_lit"):
        entries = sum(1 for _ in _trees(node.children[0])) if node.children and isinstance(
            node.children[0], lark.Tree) else 0
        return cost, max([entries, *extents])
    if kind == "addition":
        return cost, sum(extents)
    if kind == "member_dot_arg" and len(node.children) == 3 and isinstance(node.children[1], lark.Token) \
            and node.children[1].value in ("split", "join"):  # a split of n characters: n + 1 parts
        return cost, (sum(extents) + 1) * max(1, max(extents, default=1))
    return cost, max(extents, default=1)
