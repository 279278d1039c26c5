"""Label selectors, node selectors and a Pod's required / preferred node affinity, compiled once.

Upstream:
    ``staging/src/k8s.io/component-helpers/scheduling/corev1/nodeaffinity/nodeaffinity.go``
    (``LazyErrorNodeSelector``, ``nodeSelectorRequirementsAsSelector``,
    ``nodeSelectorRequirementsAsFieldSelector``, ``PreferredSchedulingTerms``,
    ``GetRequiredNodeAffinity`` / ``RequiredNodeAffinity.Match``),
    ``staging/src/k8s.io/apimachinery/pkg/labels/selector.go`` (``NewRequirement`` validation,
    ``Requirement.Matches``, ``SelectorFromSet``),
    ``staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/helpers.go`` (``LabelSelectorAsSelector``) and
    ``staging/src/k8s.io/apimachinery/pkg/api/validate/content/kube.go`` (label key / value syntax).

Semantics kept exactly:
    * node selector terms are ORed, the requirements of a term ANDed; a term with neither
      ``matchExpressions`` nor ``matchFields`` matches nothing; a term with an invalid requirement
      (unknown operator, bad key, ``In`` without values, ``Gt`` with a non-integer...) matches
      nothing while the other terms still count;
    * ``matchFields`` supports only ``metadata.name`` with ``In`` / ``NotIn`` and exactly one value,
      and is ignored for a node without a name;
    * ``Gt`` / ``Lt`` compare the node label, parsed as a decimal int64, with the single value;
    * metav1 LabelSelector: ``None`` selects nothing, ``{}`` selects everything, an unknown
      operator or invalid requirement is an error (``ValueError``).

Objects are plain Kubernetes JSON dicts. Shapes of malformed JSON the API server would never
return (a term that is not an object, values that are not strings) make that term invalid (it
matches nothing); a malformed top level (``spec.nodeSelector`` not a map of strings,
``nodeSelectorTerms`` not a list) raises :class:`~py_scheduler.framework.types.PodParseError`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from py_scheduler.framework.types import PodInfo, PodParseError

__all__ = [
    "LabelSelector",
    "NodeSelector",
    "PreferredSchedulingTerms",
    "RequiredNodeAffinity",
    "Requirement",
    "match_label_selector",
    "match_node_selector_terms",
    "node_fields",
    "node_labels",
    "parse_label_selector",
    "preferred_node_affinity",
    "required_node_affinity",
]

OBJECT_NAME_FIELD = "metadata.name"
"""``metav1.ObjectNameField``: the only field ``matchFields`` can name on a Node."""

_NODE_SELECTOR_OPS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
_FIELD_SELECTOR_OPS = ("In", "NotIn")
_LABEL_SELECTOR_OPS = ("In", "NotIn", "Exists", "DoesNotExist")

_LABEL_NAME_RE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_DNS1123_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_GO_INT_RE = re.compile(r"^[+-]?[0-9]+$")
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1

_REQUIRED_MEMO = "helpers.required_node_affinity"
_PREFERRED_MEMO = "helpers.preferred_node_affinity"


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

def node_labels(node: Mapping[str, Any] | None) -> Mapping[str, str]:
    """``node.metadata.labels`` (``{}`` when absent or malformed)."""
    if not node:
        return {}
    labels = (node.get("metadata") or {}).get("labels")
    return labels if isinstance(labels, Mapping) else {}


def node_fields(node: Mapping[str, Any] | None) -> dict[str, str]:
    """``extractNodeFields``: ``{"metadata.name": name}``, or ``{}`` for a node without a name."""
    if not node:
        return {}
    name = (node.get("metadata") or {}).get("name")
    return {OBJECT_NAME_FIELD: str(name)} if name else {}


class _Term:
    """One parsed, non-empty ``NodeSelectorTerm`` (``nodeSelectorTerm``).

    ``labels`` is None without matchExpressions; ``fields`` is None without matchFields, else a
    list of (field, equal, value) ANDed; ``errors`` non-empty makes the term match nothing.
    """

    __slots__ = ("errors", "fields", "labels")

    def __init__(self, labels: LabelSelector | None, fields: list[tuple[str, bool, str]] | None,
                 errors: list[str]) -> None:
        self.labels = labels
        self.fields = fields
        self.errors = errors

    def match(self, labels: Mapping[str, str], fields: Mapping[str, str]) -> bool:
        if self.errors:
            return False
        if self.labels is not None and not self.labels.matches(labels):
            return False
        if self.fields is not None and fields:
            for key, equal, value in self.fields:
                if (fields.get(key, "") == value) != equal:
                    return False
        return True


def _is_empty_term(term: Mapping[str, Any]) -> bool:
    return not term.get("matchExpressions") and not term.get("matchFields")


def _compile_term(term: object, path: str) -> _Term | None:
    """``newNodeSelectorTerm``; None for an empty term (it selects nothing and is dropped)."""
    if not isinstance(term, Mapping):
        return _Term(None, None, [_invalid(path, term, "must be a NodeSelectorTerm object")])
    if _is_empty_term(term):
        return None
    errs: list[str] = []
    labels: LabelSelector | None = None
    fields: list[tuple[str, bool, str]] | None = None
    exprs = term.get("matchExpressions")
    if exprs:
        p = f"{path}.matchExpressions"
        if not isinstance(exprs, list):
            errs.append(_invalid(p, exprs, "must be a list"))
        else:
            reqs: list[Requirement] = []
            for i, e in enumerate(exprs):
                ep = f"{p}[{i}]"
                if not isinstance(e, Mapping):
                    errs.append(_invalid(ep, e, "must be a NodeSelectorRequirement object"))
                    continue
                op = e.get("operator")
                if op not in _NODE_SELECTOR_OPS:
                    errs.append(_not_supported(f"{ep}.operator", op if op is not None else "", _NODE_SELECTOR_OPS))
                    continue
                r, rerrs = Requirement.new(e.get("key"), str(op), e.get("values"), ep)
                if r is None:
                    errs.extend(rerrs)
                else:
                    reqs.append(r)
            labels = LabelSelector(reqs)
    mfields = term.get("matchFields")
    if mfields:
        p = f"{path}.matchFields"
        if not isinstance(mfields, list):
            errs.append(_invalid(p, mfields, "must be a list"))
        else:
            fields = []
            for i, e in enumerate(mfields):
                ep = f"{p}[{i}]"
                if not isinstance(e, Mapping):
                    errs.append(_invalid(ep, e, "must be a NodeSelectorRequirement object"))
                    continue
                op = e.get("operator")
                if op not in _FIELD_SELECTOR_OPS:
                    errs.append(_not_supported(f"{ep}.operator", op if op is not None else "", _FIELD_SELECTOR_OPS))
                    continue
                vals = e.get("values") or []
                key = e.get("key")
                if not isinstance(vals, list) or len(vals) != 1 or not isinstance(vals[0], str):
                    errs.append(_invalid(f"{ep}.values", vals, "must have one element"))
                    continue
                fields.append((str(key) if key is not None else "", op == "In", vals[0]))
    return _Term(labels, fields, errs)


class NodeSelector:
    """A compiled ``v1.NodeSelector`` (``nodeaffinity.LazyErrorNodeSelector``): terms ORed.

    Empty terms are dropped (they select nothing); terms with parse errors stay and match nothing,
    their errors are in ``errors``.
    """

    __slots__ = ("errors", "terms")

    def __init__(self, terms: Sequence[object], path: str = "nodeSelectorTerms") -> None:
        self.terms: list[_Term] = []
        self.errors: list[str] = []
        for i, t in enumerate(terms):
            ct = _compile_term(t, f"{path}[{i}]")
            if ct is not None:
                self.terms.append(ct)
                self.errors.extend(ct.errors)

    @classmethod
    def from_node_selector(cls, ns: Mapping[str, Any] | None, path: str = "") -> NodeSelector:
        """Compile a ``v1.NodeSelector`` dict (``{"nodeSelectorTerms": [...]}``).

        Raises:
            ValueError: ``ns`` is not an object or ``nodeSelectorTerms`` is not a list.
        """
        p = f"{path}.nodeSelectorTerms" if path else "nodeSelectorTerms"
        if ns is None:
            return cls([], p)
        if not isinstance(ns, Mapping):
            raise ValueError(_invalid(path or "nodeSelector", ns, "must be a NodeSelector object"))
        terms = ns.get("nodeSelectorTerms")
        if terms is None:
            terms = []
        if not isinstance(terms, list):
            raise ValueError(_invalid(p, terms, "must be a list"))
        return cls(terms, p)

    def match(self, node: Mapping[str, Any] | None) -> bool:
        """True when any term matches the node's labels and fields (``None`` node: False)."""
        if node is None:
            return False
        labels = node_labels(node)
        fields = node_fields(node)
        return any(t.match(labels, fields) for t in self.terms)


def match_node_selector_terms(terms: Sequence[Mapping[str, Any]] | None, node: Mapping[str, Any] | None) -> bool:
    """``MatchNodeSelectorTerms``: do the ORed ``nodeSelectorTerms`` select ``node``?

    An empty term or a term with an invalid requirement matches nothing; ``None`` / ``[]`` terms
    match nothing. Compiles on every call; build a :class:`NodeSelector` once in hot paths.
    """
    if node is None or not terms:
        return False
    return NodeSelector(terms).match(node)


class PreferredSchedulingTerms:
    """Compiled ``[]v1.PreferredSchedulingTerm`` (``nodeaffinity.PreferredSchedulingTerms``).

    Terms with weight 0 or no requirements are dropped. ``score(node)`` is the sum of the weights
    of matching terms (an int; weights are 1-100 each).

    Raises (constructor):
        ValueError: any kept term has a parse error (all errors joined), or a term / weight is
        malformed.
    """

    __slots__ = ("terms",)

    def __init__(self, terms: Sequence[object], path: str = "") -> None:
        self.terms: list[tuple[_Term, int]] = []
        errs: list[str] = []
        for i, t in enumerate(terms):
            p = f"{path}[{i}]"
            if not isinstance(t, Mapping):
                errs.append(_invalid(p, t, "must be a PreferredSchedulingTerm object"))
                continue
            weight = t.get("weight") or 0
            if not isinstance(weight, int) or isinstance(weight, bool):
                errs.append(_invalid(f"{p}.weight", weight, "must be an integer"))
                continue
            pref = t.get("preference") or {}
            if not isinstance(pref, Mapping):
                errs.append(_invalid(f"{p}.preference", pref, "must be a NodeSelectorTerm object"))
                continue
            if weight == 0 or _is_empty_term(pref):
                continue
            ct = _compile_term(pref, p)
            if ct is None:
                continue
            if ct.errors:
                errs.extend(ct.errors)
            else:
                self.terms.append((ct, weight))
        if errs:
            raise ValueError("[" + ", ".join(errs) + "]" if len(errs) > 1 else errs[0])

    def score(self, node: Mapping[str, Any] | None) -> int:
        """Sum of the weights of the terms matching ``node``."""
        if node is None:
            return 0
        labels = node_labels(node)
        fields = node_fields(node)
        return sum(w for t, w in self.terms if t.match(labels, fields))


class RequiredNodeAffinity:
    """A Pod's ``spec.nodeSelector`` plus required node affinity (``nodeaffinity.RequiredNodeAffinity``).

    ``label_selector`` is the nodeSelector (None when empty); ``node_selector`` the compiled
    ``requiredDuringSchedulingIgnoredDuringExecution`` (None when absent). ``match(node)`` needs both
    to pass; parse errors inside terms only make those terms fail (upstream ignores them in Filter).

    Raises (constructor):
        PodParseError: ``spec.nodeSelector`` is not a map of strings, or the affinity structure
        above the terms is malformed (naming the field).
    """

    __slots__ = ("label_selector", "node_selector")

    def __init__(self, node_selector: object, affinity: object) -> None:
        self.label_selector: LabelSelector | None = None
        self.node_selector: NodeSelector | None = None
        if node_selector is not None:
            if not isinstance(node_selector, Mapping):
                raise PodParseError("spec.nodeSelector", node_selector, "expected a map of label to value")
            for k, v in node_selector.items():
                if not isinstance(v, str):
                    raise PodParseError(f"spec.nodeSelector.{k}", v, "expected a string")
            if node_selector:
                self.label_selector = LabelSelector.from_set(node_selector)
        required = _required_field(affinity)
        if required is not None:
            path = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
            try:
                self.node_selector = NodeSelector.from_node_selector(required, path)
            except ValueError as exc:
                raise PodParseError(path, required, str(exc)) from exc

    @classmethod
    def from_pod(cls, pod_info: PodInfo) -> RequiredNodeAffinity:
        """``GetRequiredNodeAffinity``.

        Raises:
            PodParseError: see the class docstring.
        """
        spec = pod_info.spec
        return cls(spec.get("nodeSelector"), spec.get("affinity"))

    def match(self, node: Mapping[str, Any] | None) -> bool:
        """True when the node carries every nodeSelector label and matches a required term."""
        if node is None:
            return False
        if self.label_selector is not None and not self.label_selector.matches(node_labels(node)):
            return False
        if self.node_selector is not None:
            return self.node_selector.match(node)
        return True


def _required_field(affinity: object) -> Mapping[str, Any] | None:
    if affinity is None:
        return None
    if not isinstance(affinity, Mapping):
        raise PodParseError("spec.affinity", affinity, "expected an object")
    na = affinity.get("nodeAffinity")
    if na is None:
        return None
    if not isinstance(na, Mapping):
        raise PodParseError("spec.affinity.nodeAffinity", na, "expected an object")
    req = na.get("requiredDuringSchedulingIgnoredDuringExecution")
    if req is None:
        return None
    if not isinstance(req, Mapping):
        raise PodParseError("spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution", req,
                            "expected a NodeSelector object")
    return req


def _memo(pod_info: PodInfo, key: str) -> tuple[bool, Any]:
    if key in pod_info.parsed:
        v = pod_info.parsed[key]
        if isinstance(v, PodParseError):
            raise v
        return True, v
    return False, None


def required_node_affinity(pod_info: PodInfo) -> RequiredNodeAffinity:
    """The Pod's :class:`RequiredNodeAffinity`, compiled once and memoized in ``pod_info.parsed``.

    Raises:
        PodParseError: malformed nodeSelector / affinity structure (memoized: raised again on
        every call for that Pod).
    """
    hit, v = _memo(pod_info, _REQUIRED_MEMO)
    if hit:
        result: RequiredNodeAffinity = v
        return result
    try:
        rna = RequiredNodeAffinity.from_pod(pod_info)
    except PodParseError as exc:
        pod_info.parsed[_REQUIRED_MEMO] = exc
        raise
    pod_info.parsed[_REQUIRED_MEMO] = rna
    return rna


def preferred_node_affinity(pod_info: PodInfo) -> PreferredSchedulingTerms | None:
    """The Pod's compiled ``preferredDuringSchedulingIgnoredDuringExecution`` node-affinity terms
    (``getPodPreferredNodeAffinity``), memoized in ``pod_info.parsed``; None when the field is
    absent (an empty list gives an empty, non-None result, as upstream).

    Raises:
        PodParseError: a term has a parse error (upstream returns an error here) or the affinity
        structure is malformed; the field is
        ``spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution``.
    """
    hit, v = _memo(pod_info, _PREFERRED_MEMO)
    if hit:
        result: PreferredSchedulingTerms | None = v
        return result
    path = "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution"
    try:
        aff = pod_info.spec.get("affinity")
        terms: object = None
        if aff is not None:
            if not isinstance(aff, Mapping):
                raise PodParseError("spec.affinity", aff, "expected an object")
            na = aff.get("nodeAffinity")
            if na is not None:
                if not isinstance(na, Mapping):
                    raise PodParseError("spec.affinity.nodeAffinity", na, "expected an object")
                terms = na.get("preferredDuringSchedulingIgnoredDuringExecution")
        pst: PreferredSchedulingTerms | None = None
        if terms is not None:
            if not isinstance(terms, list):
                raise PodParseError(path, terms, "expected a list of PreferredSchedulingTerms")
            try:
                pst = PreferredSchedulingTerms(terms, path)
            except ValueError as exc:
                raise PodParseError(path, terms, str(exc)) from exc
    except PodParseError as exc:
        pod_info.parsed[_PREFERRED_MEMO] = exc
        raise
    pod_info.parsed[_PREFERRED_MEMO] = pst
    return pst
