"""InterPodAffinity's names and parsed terms: ``AffinityTerm`` / ``GetAffinityTerms`` of
``staging/src/k8s.io/kube-scheduler/framework/types.go`` (default namespaces; ``pkg/scheduler/framework/
types.go`` ``NewPodInfo``: a term list that fails to parse is dropped) and ``plugin.go``'s namespace
handling (``mergeAffinityTermNamespacesIfNotEmpty``, ``GetNamespaceLabelsSnapshot``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from py_scheduler.framework.lister import ClusterObjectsLister, objects_of
from py_scheduler.framework.memo import PodInput, PodMemo
from py_scheduler.framework.types import CycleState, PodInfo
from py_scheduler.plugins.helpers.node_selector import LabelSelector, parse_label_selector

TopologyPair = tuple[str, str]

NAME = "InterPodAffinity"
ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH = "node(s) didn't satisfy existing pods anti-affinity rules"
ERR_REASON_AFFINITY_RULES_NOT_MATCH = "node(s) didn't match pod affinity rules"
ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH = "node(s) didn't match pod anti-affinity rules"
PRE_FILTER_STATE_KEY = "PreFilter" + NAME
PRE_SCORE_STATE_KEY = "PreScore" + NAME
_INDEX_KEY = NAME + "/index"
"""CycleState key of the AffinityIndex PreFilter brought up to date (PreScore reuses it: one sync per cycle)."""
_TERMS_MEMO: PodMemo[PodAffinityTerms] = PodMemo(NAME, PodInput.IDENTITY | PodInput.SPEC)
"""A Pod's parsed affinity terms (``spec.affinity``; default namespace: the Pod's own)."""
_MIN_HARD_WEIGHT = 0
_MAX_HARD_WEIGHT = 100


# -- terms ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AffinityTerm:
    """``fwk.AffinityTerm``: a parsed PodAffinityTerm.

    ``namespaces``: the listed namespaces, or the owning Pod's namespace when neither
    ``namespaces`` nor ``namespaceSelector`` is given. ``namespace_selector``: ``None`` in the spec
    selects nothing, ``{}`` every namespace.
    """

    namespaces: frozenset[str]
    selector: LabelSelector
    topology_key: str
    namespace_selector: LabelSelector

    def matches(self, pod: PodInfo, ns_labels: Mapping[str, str] | None) -> bool:
        """``AffinityTerm.Matches``: the Pod is in one of the namespaces, or its namespace's labels
        (``ns_labels``; ``None`` = no labels) match the namespace selector, and its labels match the
        label selector."""
        if pod.namespace in self.namespaces or self.namespace_selector.matches(ns_labels):
            return self.selector.matches(pod.labels)
        return False


@dataclass(frozen=True, slots=True)
class WeightedAffinityTerm:
    """``fwk.WeightedAffinityTerm``: a preferred term and its weight (1-100)."""

    term: AffinityTerm
    weight: int


@dataclass(frozen=True, slots=True)
class PodAffinityTerms:
    """A Pod's four parsed term lists (``PodInfo.Required*/Preferred*Terms``) and the parse errors
    (a list with an error is empty, as in upstream's ``NewPodInfo``)."""

    required_affinity: tuple[AffinityTerm, ...] = ()
    required_anti_affinity: tuple[AffinityTerm, ...] = ()
    preferred_affinity: tuple[WeightedAffinityTerm, ...] = ()
    preferred_anti_affinity: tuple[WeightedAffinityTerm, ...] = ()
    errors: tuple[str, ...] = ()


_EMPTY_TERMS = PodAffinityTerms()


class _TermError(ValueError):
    pass


def _parse_term(pod_namespace: str, term: object, where: str) -> AffinityTerm:
    """``newAffinityTerm``. Raises _TermError naming the field and value."""
    if not isinstance(term, Mapping):
        raise _TermError(f"{where}: invalid value {term!r}: expected a PodAffinityTerm object")
    try:
        selector = parse_label_selector(term.get("labelSelector"))
    except ValueError as exc:
        raise _TermError(f"{where}.labelSelector: invalid value {term.get('labelSelector')!r}: {exc}") from exc
    ns_sel_raw = term.get("namespaceSelector")
    try:
        ns_selector = parse_label_selector(ns_sel_raw)
    except ValueError as exc:
        raise _TermError(f"{where}.namespaceSelector: invalid value {ns_sel_raw!r}: {exc}") from exc
    namespaces = term.get("namespaces") or []
    if not isinstance(namespaces, list) or not all(isinstance(n, str) for n in namespaces):
        raise _TermError(f"{where}.namespaces: invalid value {namespaces!r}: expected a list of strings")
    topology_key = term.get("topologyKey") or ""
    if not isinstance(topology_key, str):
        raise _TermError(f"{where}.topologyKey: invalid value {topology_key!r}: expected a string")
    ns = frozenset([pod_namespace]) if not namespaces and ns_sel_raw is None else frozenset(namespaces)
    return AffinityTerm(ns, selector, topology_key, ns_selector)


def _term_list(raw: object, where: str) -> list[object]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise _TermError(f"{where}: invalid value {raw!r}: expected a list")
    return raw


def _section(affinity: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    sec = affinity.get(key)
    if sec is None:
        return {}
    if not isinstance(sec, Mapping):
        raise _TermError(f"spec.affinity.{key}: invalid value {sec!r}: expected an object")
    return sec


def _parse_pod_terms(pod: PodInfo) -> PodAffinityTerms:
    affinity = pod.spec.get("affinity")
    if affinity is None:
        return _EMPTY_TERMS
    if not isinstance(affinity, Mapping):
        return PodAffinityTerms(errors=(f"spec.affinity: invalid value {affinity!r}: expected an object",))
    errors: list[str] = []
    lists: dict[str, Any] = {}
    for kind in ("podAffinity", "podAntiAffinity"):
        try:
            sec = _section(affinity, kind)
        except _TermError as exc:
            errors.append(str(exc))
            sec = {}
        base = f"spec.affinity.{kind}"
        req_where = f"{base}.requiredDuringSchedulingIgnoredDuringExecution"
        try:
            lists[f"{kind}.required"] = tuple(
                _parse_term(pod.namespace, t, f"{req_where}[{i}]")
                for i, t in enumerate(_term_list(sec.get("requiredDuringSchedulingIgnoredDuringExecution"),
                                                 req_where)))
        except _TermError as exc:
            errors.append(str(exc))
            lists[f"{kind}.required"] = ()
        pref_where = f"{base}.preferredDuringSchedulingIgnoredDuringExecution"
        try:
            weighted: list[WeightedAffinityTerm] = []
            for i, wt in enumerate(_term_list(sec.get("preferredDuringSchedulingIgnoredDuringExecution"),
                                              pref_where)):
                w = f"{pref_where}[{i}]"
                if not isinstance(wt, Mapping):
                    raise _TermError(f"{w}: invalid value {wt!r}: expected a WeightedPodAffinityTerm object")
                weight = wt.get("weight", 0)
                if not isinstance(weight, int) or isinstance(weight, bool):
                    raise _TermError(f"{w}.weight: invalid value {weight!r}: expected an integer")
                weighted.append(WeightedAffinityTerm(_parse_term(pod.namespace, wt.get("podAffinityTerm") or {},
                                                                 f"{w}.podAffinityTerm"), weight))
            lists[f"{kind}.preferred"] = tuple(weighted)
        except _TermError as exc:
            errors.append(str(exc))
            lists[f"{kind}.preferred"] = ()
    return PodAffinityTerms(lists["podAffinity.required"], lists["podAntiAffinity.required"],
                            lists["podAffinity.preferred"], lists["podAntiAffinity.preferred"], tuple(errors))


def pod_affinity_terms(pod: PodInfo) -> PodAffinityTerms:
    """The Pod's parsed affinity terms, memoized on the PodInfo (never raises: malformed lists are
    empty and described in ``errors``)."""
    return _TERMS_MEMO.get(pod, _parse_pod_terms)


def _namespace_labels(objects: ClusterObjectsLister, namespace: str) -> dict[str, str] | None:
    """``GetNamespaceLabelsSnapshot``: the labels of the Pod's Namespace, None when it is unknown."""
    ns = objects.get("Namespace", namespace)
    if ns is None:
        return None
    labels = (ns.get("metadata") or {}).get("labels") or {}
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {}


def _merge_namespaces(term: AffinityTerm, objects: ClusterObjectsLister) -> AffinityTerm:
    """``mergeAffinityTermNamespacesIfNotEmpty``: unroll a non-empty namespaceSelector into the
    namespace set (Namespaces from ``objects``) and make the selector select nothing."""
    if term.namespace_selector.is_everything:
        return term
    names = set(term.namespaces)
    for ns in objects.list("Namespace"):
        labels = (ns.get("metadata") or {}).get("labels") or {}
        if term.namespace_selector.matches(labels if isinstance(labels, Mapping) else {}):
            names.add(str((ns.get("metadata") or {}).get("name") or ""))
    return AffinityTerm(frozenset(names), term.selector, term.topology_key, LabelSelector.none())


def pod_matches_all_affinity_terms(terms: Iterable[AffinityTerm], pod: PodInfo) -> bool:
    """``podMatchesAllAffinityTerms``: False for no terms."""
    ts = list(terms)
    if not ts:
        return False
    return all(t.matches(pod, None) for t in ts)


def _raw_preferred_count(pod: PodInfo, kind: str) -> int:
    aff = pod.spec.get("affinity")
    if not isinstance(aff, Mapping):
        return 0
    sec = aff.get(kind)
    if not isinstance(sec, Mapping):
        return 0
    pref = sec.get("preferredDuringSchedulingIgnoredDuringExecution")
    return len(pref) if isinstance(pref, list) else 0


def _objects(state: CycleState) -> ClusterObjectsLister:
    return objects_of(state.snapshot)
