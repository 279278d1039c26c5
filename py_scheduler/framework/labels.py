"""Kubernetes label selectors and requirements (the apimachinery ``labels`` package), compiled once.

Upstream: ``staging/src/k8s.io/apimachinery/pkg/labels/selector.go`` (``NewRequirement`` validation,
``Requirement.Matches``, ``SelectorFromSet``), ``staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/helpers.go``
(``LabelSelectorAsSelector``) and ``staging/src/k8s.io/apimachinery/pkg/api/validate/content/kube.go``
(label key / value syntax).

It lives in the framework layer because the framework itself selects by labels (PodDisruptionBudgets in
the preemption evaluator) and, as in upstream where ``labels`` sits below the scheduler, every layer
may use it. Node selectors and node affinity (plugin helpers) build on it in
:mod:`py_scheduler.plugins.helpers.node_selector`.

metav1 LabelSelector semantics: ``None`` selects nothing, ``{}`` selects everything, an unknown
operator or invalid requirement is an error (``ValueError``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["OBJECT_NAME_FIELD", "LabelSelector", "Requirement", "match_label_selector", "parse_label_selector"]

OBJECT_NAME_FIELD = "metadata.name"
"""``metav1.ObjectNameField``: the only field ``matchFields`` can name on a Node."""

_NODE_SELECTOR_OPS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
_FIELD_SELECTOR_OPS = ("In", "NotIn")
_LABEL_SELECTOR_OPS = ("In", "NotIn", "Exists", "DoesNotExist")

_LABEL_NAME_RE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]\Z")
_LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?\Z")
_DNS1123_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
_GO_INT_RE = re.compile(r"^[+-]?[0-9]+\Z")
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1



# -- validation (apimachinery content / labels) -------------------------------------------------------

def _quote(v: object) -> str:
    try:
        return json.dumps(v)
    except (TypeError, ValueError):
        return repr(v)


def _invalid(path: str, value: object, detail: str) -> str:
    """``field.Invalid(...).Error()``-like text."""
    return f"{path}: Invalid value: {_quote(value)}: {detail}"


def _not_supported(path: str, value: object, supported: Sequence[str]) -> str:
    """``field.NotSupported(...).Error()``-like text."""
    return f"{path}: Unsupported value: {_quote(value)}: supported values: " + ", ".join(
        _quote(s) for s in supported)


def _label_key_errors(key: str) -> list[str]:
    """``content.IsLabelKey``: an optional DNS-1123 subdomain prefix and ``/``, then a name of at
    most 63 alphanumerics, ``-``, ``_``, ``.`` starting and ending alphanumeric."""
    errs: list[str] = []
    parts = key.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            if len(prefix) > 253:
                errs.append("prefix part must be no more than 253 characters")
            if not _DNS1123_SUBDOMAIN_RE.match(prefix):
                errs.append("prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                            "characters, '-' or '.', and must start and end with an alphanumeric character")
    else:
        return ["a valid label key must consist of alphanumeric characters, '-', '_' or '.', and must start "
                "and end with an alphanumeric character with an optional DNS subdomain prefix and '/' "
                "(e.g. 'example.com/MyName')"]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > 63:
        errs.append("name part must be no more than 63 characters")
    if not _LABEL_NAME_RE.match(name):
        errs.append("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and "
                    "end with an alphanumeric character")
    return errs


def _label_value_errors(value: str) -> list[str]:
    """``content.IsLabelValue``: empty, or at most 63 alphanumerics, ``-``, ``_``, ``.`` starting and
    ending alphanumeric."""
    errs: list[str] = []
    if len(value) > 63:
        errs.append("must be no more than 63 characters")
    if not _LABEL_VALUE_RE.match(value):
        errs.append("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' "
                    "or '.', and must start and end with an alphanumeric character")
    return errs


def _parse_go_int64(s: str) -> int | None:
    """``strconv.ParseInt(s, 10, 64)``: optional sign, ASCII digits, within int64; None otherwise."""
    if not _GO_INT_RE.match(s):
        return None
    v = int(s)
    if v < _INT64_MIN or v > _INT64_MAX:
        return None
    return v


# -- labels.Requirement / labels.Selector ---------------------------------------------------------------

class Requirement:
    """One compiled label requirement (``labels.Requirement``).

    ``op`` is one of ``In`` (also used for ``=``), ``NotIn``, ``Exists``, ``DoesNotExist``, ``Gt``,
    ``Lt``; ``values`` the value set; for ``Gt`` / ``Lt`` ``bound`` is the parsed int64.
    """

    __slots__ = ("bound", "key", "op", "values")

    def __init__(self, key: str, op: str, values: Sequence[str] = ()) -> None:
        self.key = key
        self.op = op
        self.values: frozenset[str] = frozenset(values)
        self.bound: int | None = None
        if op in ("Gt", "Lt") and len(values) == 1:
            self.bound = _parse_go_int64(values[0])

    @classmethod
    def new(cls, key: object, op: str, values: object, path: str = "") -> tuple[Requirement | None, list[str]]:
        """``labels.NewRequirement``: (requirement, []) or (None, errors).

        Checks the key syntax, the value count per operator (``In`` / ``NotIn`` at least one,
        ``Exists`` / ``DoesNotExist`` none, ``Gt`` / ``Lt`` exactly one decimal integer) and each
        value's label-value syntax.
        """
        p = f"{path}." if path else ""
        errs: list[str] = []
        if not isinstance(key, str):
            return None, [_invalid(f"{p}key", key, "must be a string")]
        if values is None:
            values = []
        if isinstance(values, list) and None in values:  # a null item decodes as "" (Go's zero string)
            values = ["" if v is None else v for v in values]
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            return None, [_invalid(f"{p}values", values, "must be a list of strings")]
        vals: list[str] = values
        for e in _label_key_errors(key):
            errs.append(_invalid(f"{p}key", key, e))
        if op in ("In", "NotIn"):
            if not vals:
                errs.append(_invalid(f"{p}values", vals, "for 'in', 'notin' operators, values set can't be empty"))
        elif op == "=":
            if len(vals) != 1:
                errs.append(_invalid(f"{p}values", vals, "exact-match compatibility requires one single value"))
        elif op in ("Exists", "DoesNotExist"):
            if vals:
                errs.append(_invalid(f"{p}values", vals, "values set must be empty for exists and does not exist"))
        elif op in ("Gt", "Lt"):
            if len(vals) != 1:
                errs.append(_invalid(f"{p}values", vals, "for 'Gt', 'Lt' operators, exactly one value is required"))
            for i, v in enumerate(vals):
                if _parse_go_int64(v) is None:
                    errs.append(_invalid(f"{p}values[{i}]", v,
                                         "for 'Gt', 'Lt' operators, the value must be an integer"))
        else:
            errs.append(_not_supported(f"{p}operator", op, _NODE_SELECTOR_OPS))
        for v in vals:
            for e in _label_value_errors(v):
                errs.append(_invalid(f"{p}values[{key}]", v, e))
        if errs:
            return None, errs
        return cls(key, "In" if op == "=" else op, vals), []

    def matches(self, labels: Mapping[str, str]) -> bool:
        """``Requirement.Matches`` against a label map."""
        op = self.op
        if op == "In":
            val = labels.get(self.key)
            return val is not None and val in self.values
        if op == "NotIn":
            val = labels.get(self.key)
            return val is None or val not in self.values
        if op == "Exists":
            return self.key in labels
        if op == "DoesNotExist":
            return self.key not in labels
        if op in ("Gt", "Lt"):
            val = labels.get(self.key)
            if not isinstance(val, str) or self.bound is None:
                return False
            n = _parse_go_int64(val)
            if n is None:
                return False
            return n > self.bound if op == "Gt" else n < self.bound
        return False

    def __repr__(self) -> str:
        return f"Requirement({self.key!r} {self.op} {sorted(self.values)})"


class LabelSelector:
    """A compiled label selector (``labels.Selector``): requirements ANDed.

    ``nothing=True`` is ``labels.Nothing()`` (matches no label set); no requirements is
    ``labels.Everything()``.
    """

    __slots__ = ("nothing", "requirements")

    def __init__(self, requirements: Sequence[Requirement] = (), nothing: bool = False) -> None:
        self.requirements: tuple[Requirement, ...] = tuple(requirements)
        self.nothing = nothing

    @classmethod
    def everything(cls) -> LabelSelector:
        return cls()

    @classmethod
    def none(cls) -> LabelSelector:
        """``labels.Nothing()``."""
        return cls(nothing=True)

    @classmethod
    def from_set(cls, labels: Mapping[str, str]) -> LabelSelector:
        """``labels.SelectorFromSet``: equality on every pair, not validated; empty -> everything."""
        return cls([Requirement(k, "In", [v]) for k, v in labels.items()])

    @property
    def is_everything(self) -> bool:
        return not self.nothing and not self.requirements

    def first_in(self) -> Requirement | None:
        """The first ``In`` requirement (``=`` and matchLabels are ``In``): every label set the
        selector matches carries its key with one of its values (a necessary condition indexes
        file objects under). None when there is none."""
        return next((r for r in self.requirements if r.op == "In"), None)

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        """True when every requirement matches ``labels`` (``None`` is treated as no labels)."""
        if self.nothing:
            return False
        lbls = labels if labels is not None else {}
        return all(r.matches(lbls) for r in self.requirements)

    def __repr__(self) -> str:
        if self.nothing:
            return "LabelSelector(<nothing>)"
        return f"LabelSelector({list(self.requirements)})"


def parse_label_selector(selector: Mapping[str, Any] | None) -> LabelSelector:
    """Compile a ``metav1.LabelSelector`` dict (``metav1.LabelSelectorAsSelector``).

    ``None`` selects nothing; ``{}`` (no matchLabels, no matchExpressions) selects everything;
    ``matchLabels`` pairs are equality requirements; ``matchExpressions`` take ``In``, ``NotIn``,
    ``Exists`` and ``DoesNotExist``.

    Raises:
        ValueError: an unknown operator (``"Foo" is not a valid label selector operator``), an
        invalid key or value, a wrong value count, or a malformed selector shape.
    """
    if selector is None:
        return LabelSelector.none()
    if not isinstance(selector, Mapping):
        raise ValueError(f"label selector must be an object, got {_quote(selector)}")
    match_labels = selector.get("matchLabels") or {}
    exprs = selector.get("matchExpressions") or []
    if not isinstance(match_labels, Mapping):
        raise ValueError(f"matchLabels must be a map of strings, got {_quote(match_labels)}")
    if not isinstance(exprs, list):
        raise ValueError(f"matchExpressions must be a list, got {_quote(exprs)}")
    if not match_labels and not exprs:
        return LabelSelector.everything()
    reqs: list[Requirement] = []
    for k, v in match_labels.items():
        v = "" if v is None else v  # a null value decodes as "" (``key:`` with nothing after it in YAML)
        if not isinstance(v, str):
            raise ValueError(_invalid(f"matchLabels[{k}]", v, "must be a string"))
        r, errs = Requirement.new(k, "=", [v])
        if r is None:
            raise ValueError("; ".join(errs))
        reqs.append(r)
    for i, e in enumerate(exprs):
        if not isinstance(e, Mapping):
            raise ValueError(_invalid(f"matchExpressions[{i}]", e, "must be an object"))
        op = e.get("operator")
        if op not in _LABEL_SELECTOR_OPS:
            raise ValueError(f"{_quote(op if op is not None else '')} is not a valid label selector operator")
        r, errs = Requirement.new(e.get("key"), str(op), e.get("values"))
        if r is None:
            raise ValueError("; ".join(errs))
        reqs.append(r)
    return LabelSelector(reqs)


def match_label_selector(selector: Mapping[str, Any] | None, labels: Mapping[str, str] | None) -> bool:
    """Does a ``metav1.LabelSelector`` dict select ``labels``? (``None`` selector: never; ``{}``:
    always). Compiles on every call; compile once with :func:`parse_label_selector` in hot paths.

    Raises:
        ValueError: the selector is invalid (see :func:`parse_label_selector`).
    """
    return parse_label_selector(selector).matches(labels)


# -- node selector terms ------------------------------------------------------------------------------
