"""Node selectors and a Pod's required / preferred node affinity, compiled once (label selectors:
:mod:`py_scheduler.framework.labels`, re-exported here).

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
``nodeSelectorTerms`` not a list) raises :class:`~py_scheduler.framework.errors.PodParseError`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from py_scheduler.framework.errors import PodParseError
from py_scheduler.framework.labels import (
    _FIELD_SELECTOR_OPS,
    _NODE_SELECTOR_OPS,
    OBJECT_NAME_FIELD,
    LabelSelector,
    Requirement,
    _invalid,
    _not_supported,
    match_label_selector,
    parse_label_selector,
)
from py_scheduler.framework.memo import PodInput, PodMemo
from py_scheduler.framework.types import PodInfo

__all__ = [
    "OBJECT_NAME_FIELD",
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

_REQUIRED_MEMO: PodMemo[RequiredNodeAffinity] = PodMemo(
    "helpers.required_node_affinity", PodInput.SPEC, (PodParseError,))
_PREFERRED_MEMO: PodMemo[PreferredSchedulingTerms | None] = PodMemo(
    "helpers.preferred_node_affinity", PodInput.SPEC, (PodParseError,))


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

    def size(self) -> int:
        """Requirements one :meth:`score` may check: per term one plus its requirements."""
        return sum(1 + (len(t.labels.requirements) if t.labels is not None else 0) + len(t.fields or ())
                   for t, _ in self.terms)

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

    def size(self) -> int:
        """Requirements one :meth:`match` may check: the nodeSelector's labels, and per term one
        plus its requirements (the work of matching one node, in those units)."""
        n = len(self.label_selector.requirements) if self.label_selector is not None else 0
        for t in self.node_selector.terms if self.node_selector is not None else ():
            n += 1 + (len(t.labels.requirements) if t.labels is not None else 0) + len(t.fields or ())
        return n

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


def required_node_affinity(pod_info: PodInfo) -> RequiredNodeAffinity:
    """The Pod's :class:`RequiredNodeAffinity`, compiled once and memoized in ``pod_info.parsed``.

    Raises:
        PodParseError: malformed nodeSelector / affinity structure (memoized: raised again on
        every call for that Pod).
    """
    return _REQUIRED_MEMO.get(pod_info, RequiredNodeAffinity.from_pod)


def preferred_node_affinity(pod_info: PodInfo) -> PreferredSchedulingTerms | None:
    """The Pod's compiled ``preferredDuringSchedulingIgnoredDuringExecution`` node-affinity terms
    (``getPodPreferredNodeAffinity``), memoized in ``pod_info.parsed``; None when the field is
    absent (an empty list gives an empty, non-None result, as upstream).

    Raises:
        PodParseError: a term has a parse error (upstream returns an error here) or the affinity
        structure is malformed; the field is
        ``spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution``.
    """
    return _PREFERRED_MEMO.get(pod_info, _preferred_node_affinity)


def _preferred_node_affinity(pod_info: PodInfo) -> PreferredSchedulingTerms | None:
    """:func:`preferred_node_affinity` without the memo. Raises PodParseError (memoized by the caller)."""
    path = "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution"
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
    return pst
