"""InterPodAffinity: required / preferred pod affinity and anti-affinity, in both directions.

Upstream (kube-scheduler v1.37.2):
``pkg/scheduler/framework/plugins/interpodaffinity/filtering.go`` (PreFilter / Filter / AddPod /
RemovePod, the topology-pair counters, the self-affinity special case),
``scoring.go`` (PreScore / Score / NormalizeScore), ``plugin.go`` (args, namespaceSelector
resolution, namespace labels), ``staging/src/k8s.io/kube-scheduler/framework/types.go``
(``AffinityTerm.Matches``, ``GetAffinityTerms``, default namespaces),
``pkg/scheduler/framework/types.go`` (``NewPodInfo``: a term list that fails to parse is dropped)
and ``apis/config/validation/validation_pluginargs.go`` (``ValidateInterPodAffinityArgs``).

Feature gates at their v1.37 defaults: ``InterPodAffinityHostnameFastPath`` is Alpha and off, so
every term goes through the cluster-wide topology counters (the fast path gives the same
verdicts); ``MatchLabelKeysInPodAffinity`` is applied by the API server (merged into the
labelSelector at Pod creation), not here; ``InPlacePodVerticalScalingSchedulerPreemption`` is off.

Each Pod's terms are parsed once and memoized in ``pod_info.parsed["InterPodAffinity"]`` (existing
Pods too). The incoming Pod's ``namespaceSelector`` is resolved per cycle against the Namespaces in
``snapshot.objects`` (they may change); existing Pods' namespaceSelectors are matched against the
incoming Pod's namespace labels.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from operator import attrgetter
from typing import Any

from py_scheduler.framework import signers
from py_scheduler.framework.errors import ConfigError
from py_scheduler.framework.events import ActionType, ClusterEvent, ClusterEventWithHint
from py_scheduler.framework.events import Resource as EventResource
from py_scheduler.framework.handle import Handle
from py_scheduler.framework.lister import ClusterObjectsLister, SnapshotLister, objects_of
from py_scheduler.framework.memo import PodInput, PodMemo
from py_scheduler.framework.types import (
    MAX_NODE_SCORE,
    Code,
    CycleState,
    NodeInfo,
    PodInfo,
    Status,
)
from py_scheduler.plugins.helpers.node_selector import LabelSelector, parse_label_selector
from py_scheduler.plugins.helpers.queueing_hints import (
    inter_pod_affinity_after_assigned_pod_change,
    inter_pod_affinity_after_node_change,
)

__all__ = [
    "ERR_REASON_AFFINITY_RULES_NOT_MATCH",
    "ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH",
    "ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH",
    "NAME",
    "PRE_FILTER_STATE_KEY",
    "PRE_SCORE_STATE_KEY",
    "AffinityTerm",
    "InterPodAffinity",
    "PodAffinityTerms",
    "PreFilterState",
    "PreScoreState",
    "WeightedAffinityTerm",
    "pod_affinity_terms",
]

Obj = dict[str, Any]
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


# -- PreFilter state ------------------------------------------------------------------------------

def _update(m: dict[TopologyPair, int], labels: Mapping[str, str], key: str, value: int) -> None:
    """``topologyToMatchedTermCount.update``: add ``value`` to (key, node's value); drop zeros."""
    tv = labels.get(key)
    if tv is None:
        return
    pair = (key, tv)
    n = m.get(pair, 0) + value
    if n == 0:
        m.pop(pair, None)
    else:
        m[pair] = n


@dataclass(slots=True)
class PreFilterState:
    """``preFilterState`` (fast path off): topology pair -> count of

    * ``existing_anti_affinity_counts``: existing Pods whose required anti-affinity terms match the
      incoming Pod;
    * ``affinity_counts``: existing Pods matching all of the incoming Pod's required affinity terms;
    * ``anti_affinity_counts``: existing Pods matching one of its required anti-affinity terms;

    plus the incoming Pod's terms (namespaceSelector unrolled) and its namespace labels.
    """

    pod: PodInfo
    affinity_terms: list[AffinityTerm] = field(default_factory=list)
    anti_affinity_terms: list[AffinityTerm] = field(default_factory=list)
    namespace_labels: dict[str, str] | None = None
    existing_anti_affinity_counts: dict[TopologyPair, int] = field(default_factory=dict)
    affinity_counts: dict[TopologyPair, int] = field(default_factory=dict)
    anti_affinity_counts: dict[TopologyPair, int] = field(default_factory=dict)

    def clone(self) -> PreFilterState:
        return PreFilterState(self.pod, self.affinity_terms, self.anti_affinity_terms, self.namespace_labels,
                              dict(self.existing_anti_affinity_counts), dict(self.affinity_counts),
                              dict(self.anti_affinity_counts))

    def update_with_pod(self, p: PodInfo, node: Obj | None, multiplier: int) -> None:
        """``preFilterState.updateWithPod``: account for ``p`` appearing on / leaving ``node``."""
        labels: Mapping[str, str] = ((node or {}).get("metadata") or {}).get("labels") or {}
        for t in pod_affinity_terms(p).required_anti_affinity:
            if t.matches(self.pod, self.namespace_labels):
                _update(self.existing_anti_affinity_counts, labels, t.topology_key, multiplier)
        if pod_matches_all_affinity_terms(self.affinity_terms, p):
            for t in self.affinity_terms:
                _update(self.affinity_counts, labels, t.topology_key, multiplier)
        for t in self.anti_affinity_terms:
            if t.matches(p, None):
                _update(self.anti_affinity_counts, labels, t.topology_key, multiplier)


@dataclass(slots=True)
class PreScoreState:
    """``preScoreState``: topology key -> topology value -> summed weight (positive for affinity,
    negative for anti-affinity)."""

    topology_score: dict[str, dict[str, int]] = field(default_factory=dict)

    def clone(self) -> PreScoreState:
        return self


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


# -- cross-cycle index (issue 9) ------------------------------------------------------------------

_INDEX_MEMO: PodMemo[_PodIndexKeys] = PodMemo(
    NAME + ".index", PodInput.IDENTITY | PodInput.LABELS | PodInput.SPEC)
_GENERATION = attrgetter("generation")
_BLOCK = 64
_MAX_INDEXES = 2
_MATCH_MEMOS = 32
"""Keys kept by each of :class:`AffinityIndex`'s PreScore match memos."""
_KIND_HARD, _KIND_PREFERRED, _KIND_PREFERRED_ANTI = 0, 1, 2

SelectorKey = tuple[bool, frozenset[tuple[str, str, frozenset[str]]]]
TermKey = tuple[frozenset[str], SelectorKey, str, SelectorKey]


def _selector_key(sel: LabelSelector) -> SelectorKey:
    """A value key of a compiled selector: two selectors with the same key match the same label sets
    (requirements are ANDed, so their order and duplicates do not matter)."""
    return sel.nothing, frozenset((r.key, r.op, r.values) for r in sel.requirements)


def term_key(t: AffinityTerm) -> TermKey:
    """A value key of an AffinityTerm: everything ``matches`` reads plus the topology key. Terms of
    different Pods with equal keys match the same Pods and count at the same topology pairs."""
    return t.namespaces, _selector_key(t.selector), t.topology_key, _selector_key(t.namespace_selector)


@dataclass(frozen=True, slots=True)
class _PodIndexKeys:
    """What one existing Pod contributes to :class:`AffinityIndex` (memoized on the PodInfo):
    its label class, its required anti-affinity terms and its scoring terms (kind, weight), keyed."""

    label_class: tuple[str, frozenset[tuple[str, str]]]
    anti: tuple[tuple[TermKey, AffinityTerm], ...]
    score: tuple[tuple[tuple[int, TermKey, int], AffinityTerm], ...]


def _pod_index_keys(p: PodInfo) -> _PodIndexKeys:
    return _INDEX_MEMO.get(p, _compute_pod_index_keys)


def _compute_pod_index_keys(p: PodInfo) -> _PodIndexKeys:
    terms = pod_affinity_terms(p)
    score: list[tuple[tuple[int, TermKey, int], AffinityTerm]] = []
    score.extend(((_KIND_HARD, term_key(t), 0), t) for t in terms.required_affinity)
    score.extend(((_KIND_PREFERRED, term_key(w.term), w.weight), w.term) for w in terms.preferred_affinity)
    score.extend(((_KIND_PREFERRED_ANTI, term_key(w.term), w.weight), w.term) for w in terms.preferred_anti_affinity)
    keys = _PodIndexKeys((p.namespace, frozenset(p.labels.items())),
                         tuple((term_key(t), t) for t in terms.required_anti_affinity), tuple(score))
    return keys


class _Group:
    """Equal terms (or Pods of one label class) across the cluster: ``rep`` is one of them,
    ``counts`` maps a topology pair (terms) or a node position (Pod classes) to how many of them
    are there; ``refs`` counts every member (also those on nodes without the topology key)."""

    __slots__ = ("counts", "key", "owner", "refs", "rep")

    def __init__(self, owner: dict[Any, _Group], key: Any, rep: Any) -> None:
        self.owner = owner
        self.key = key
        self.rep = rep
        self.refs = 0
        self.counts: dict[Any, int] = {}


Entry = tuple[_Group, Any]


def _enter(owner: dict[Any, _Group], key: Any, rep: Any, count_key: Any, entries: list[Entry]) -> None:
    g = owner.get(key)
    if g is None:
        g = owner[key] = _Group(owner, key, rep)
    g.refs += 1
    if count_key is not None:
        g.counts[count_key] = g.counts.get(count_key, 0) + 1
    entries.append((g, count_key))


def _leave(entries: list[Entry]) -> None:
    for g, count_key in entries:
        if count_key is not None:
            n = g.counts[count_key] - 1
            if n:
                g.counts[count_key] = n
            else:
                del g.counts[count_key]
        g.refs -= 1
        if not g.refs:
            del g.owner[g.key]


class AffinityIndex:
    """The Pods of one Snapshot's ``node_info_list`` aggregated for InterPodAffinity's PreFilter and
    PreScore, kept across cycles (no upstream counterpart: kube-scheduler walks every node's Pods in
    each cycle; this gives the same counts from one visit per distinct term / label class).

    * ``anti``: existing Pods' required anti-affinity terms (only Pods in
      ``pods_with_required_anti_affinity``, as upstream's PreFilter), grouped by :func:`term_key`;
      counts per topology pair (key, the node's value) where the node has the key;
    * ``score``: existing Pods' required affinity (kind 0), preferred affinity (1) and preferred
      anti-affinity (2) terms (Pods in ``pods_with_affinity``), grouped by (kind, term key, weight);
      counts per topology pair;
    * ``classes``: every Pod grouped by (namespace, labels) -- all ``AffinityTerm.matches(pod, None)``
      reads; counts per node position in ``node_info_list``.

    :meth:`sync` brings it up to date: a rebuild when the list object or its length changed, else
    the nodes whose ``NodeInfo.generation`` changed (a Pod added / removed, a new Node object) are
    re-entered. A NodeInfo mutated without a generation bump (never done by the cache or
    ``Snapshot.assume``) would go unnoticed.

    PreScore's match memos (issue 21; pure functions of their keys, so never stale):
    ``own_matches`` maps an incoming Pod's preferred term (:func:`term_key`) to {label class group:
    whether the term matches Pods of that class}; ``pod_matches`` maps an incoming Pod's (namespace,
    labels, its Namespace's labels) to {``score`` group: whether that group's term matches the Pod}.
    The inner keys are the :class:`_Group` objects (hashed by identity: the nested key tuples would
    be hashed again at every lookup); a group that is dropped and comes back is a new object,
    evaluated again. A stream of Pods with the same terms / labels evaluates each class / group
    once, not once per cycle. Each memo keeps :data:`_MATCH_MEMOS` keys (least recently used
    dropped) and is cleared when it holds far more entries than groups exist.
    """

    __slots__ = ("anti", "classes", "entries", "gens", "nodes", "own_matches", "pod_matches", "score")

    def __init__(self, nodes: list[NodeInfo]) -> None:
        self.nodes = nodes
        self.gens: list[int] = list(map(_GENERATION, nodes))
        self.anti: dict[Any, _Group] = {}
        self.score: dict[Any, _Group] = {}
        self.classes: dict[Any, _Group] = {}
        self.entries: list[list[Entry]] = [self._enter_node(i, ni) for i, ni in enumerate(nodes)]
        self.own_matches: OrderedDict[TermKey, dict[Any, bool]] = OrderedDict()
        self.pod_matches: OrderedDict[Any, dict[Any, bool]] = OrderedDict()

    @staticmethod
    def match_memo(memos: OrderedDict[Any, dict[Any, bool]], key: Any, groups: int) -> dict[Any, bool]:
        """The memo of ``key`` in ``memos`` (``own_matches`` / ``pod_matches``), made most recently
        used; a new one when absent, or when it holds more than twice ``groups`` (the number of
        classes / groups now) plus 64 entries (groups that came and went)."""
        memo = memos.get(key)
        if memo is None or len(memo) > 2 * groups + 64:
            memo = memos[key] = {}
            while len(memos) > _MATCH_MEMOS:
                memos.popitem(last=False)
        else:
            memos.move_to_end(key)
        return memo

    def fresh_for(self, nodes: list[NodeInfo]) -> bool:
        """Built for this very list object (and length): :meth:`sync` can update it in place."""
        return self.nodes is nodes and len(self.gens) == len(nodes)

    def _enter_node(self, i: int, ni: NodeInfo) -> list[Entry]:
        entries: list[Entry] = []
        if not ni.pods:
            return entries
        labels = ni.labels
        for p in ni.pods:
            _enter(self.classes, _pod_index_keys(p).label_class, p, i, entries)
        for p in ni.pods_with_required_anti_affinity:
            for key, t in _pod_index_keys(p).anti:
                tv = labels.get(t.topology_key)
                _enter(self.anti, key, t, None if tv is None else (t.topology_key, tv), entries)
        for p in ni.pods_with_affinity:
            for skey, t in _pod_index_keys(p).score:
                tv = labels.get(t.topology_key)
                _enter(self.score, skey, t, None if tv is None else (t.topology_key, tv), entries)
        return entries

    def sync(self) -> None:
        """Re-enter the nodes whose generation changed since the last call (the list must be
        :meth:`fresh_for` it)."""
        nodes = self.nodes
        gens = list(map(_GENERATION, nodes))
        old = self.gens
        if gens == old:
            return
        for b in range(0, len(gens), _BLOCK):
            if gens[b:b + _BLOCK] == old[b:b + _BLOCK]:
                continue
            for i in range(b, min(b + _BLOCK, len(gens))):
                if gens[i] != old[i]:
                    # Enter the node's new state before leaving its old one: a group whose only
                    # members are on this node (a Pod re-added as its bound copy) is kept, not
                    # dropped and made again, so PreScore's match memos (keyed by group) stay hit.
                    entries = self._enter_node(i, nodes[i])
                    _leave(self.entries[i])
                    self.entries[i] = entries
        self.gens = gens


def _node_labels(nodes: list[NodeInfo]) -> list[dict[str, str]]:
    """``[ni.labels for ni in nodes]`` without a property call per node: the Nodes'
    ``metadata.labels`` read directly, and the property's answers for all of them when some node
    lacks a Node, metadata or a labels map (``NodeInfo.labels`` gives ``{}`` there)."""
    try:
        out: list[Any] = [ni.node["metadata"]["labels"] for ni in nodes]  # type: ignore[index]
    except (TypeError, KeyError):
        return [ni.labels for ni in nodes]
    if set(map(type, out)) != {dict}:
        return [ni.labels for ni in nodes]
    return out


# -- the plugin -----------------------------------------------------------------------------------

class InterPodAffinity:
    """PreFilter / Filter, PreFilterExtensions and PreScore / Score / NormalizeScore.

    Args (``pluginConfig.args``): ``hardPodAffinityWeight`` (0-100, default 1): the score weight
    of an existing Pod's *required* affinity term the incoming Pod matches;
    ``ignorePreferredTermsOfExistingPods`` (default false): skip scoring when the incoming Pod has
    no preferred terms.
    """

    name = NAME

    def sign_pod(self, pod: PodInfo, snapshot: SnapshotLister | None) -> signers.SignResult:
        """``SignPod`` (upstream ``pkg/scheduler/framework/plugins/interpodaffinity/plugin.go``): refuses Pods with
        podAffinity / podAntiAffinity; otherwise the Pod's labels (none with
        ``ignorePreferredTermsOfExistingPods``). ``snapshot`` is unused by most plugins."""
        aff = pod.spec.get("affinity")
        if isinstance(aff, dict) and (aff.get("podAffinity") is not None or aff.get("podAntiAffinity") is not None):
            return signers.cannot_sign("pods with InterPodAffinity are not signable")
        if self.ignore_preferred_terms_of_existing_pods:
            return [], Status.success()
        return [(signers.LABELS_SIGNER_NAME, (pod.pod.get("metadata") or {}).get("labels"))], Status.success()


    def __init__(self, hard_pod_affinity_weight: int = 1, ignore_preferred_terms_of_existing_pods: bool = False,
                 ) -> None:
        self.hard_pod_affinity_weight = hard_pod_affinity_weight
        self.ignore_preferred_terms_of_existing_pods = ignore_preferred_terms_of_existing_pods
        self._indexes: list[AffinityIndex] = []  # most recently used first, at most _MAX_INDEXES
        self.use_index = True
        """False: PreFilter / PreScore walk every node's Pods as upstream does (the reference the
        :class:`AffinityIndex` is tested against)."""

    def affinity_index(self, nodes: list[NodeInfo]) -> AffinityIndex:
        """The :class:`AffinityIndex` of a Snapshot's ``node_info_list`` (this very list object),
        brought up to date; built on first use (O(Pods)), then O(nodes) generation compares plus the
        changed nodes' Pods per call. The indexes of the last two lists are kept (the live snapshot
        and, say, an explain snapshot do not evict each other)."""
        for i, idx in enumerate(self._indexes):
            if idx.fresh_for(nodes):
                idx.sync()
                if i:
                    self._indexes.insert(0, self._indexes.pop(i))
                return idx
        idx = AffinityIndex(nodes)
        self._indexes = [idx, *self._indexes[:_MAX_INDEXES - 1]]
        return idx

    @classmethod
    def create(cls, args: dict[str, Any], handle: Handle) -> InterPodAffinity:
        """Build from ``pluginConfig.args`` (v1 defaults applied, then ``ValidateInterPodAffinityArgs``).

        Raises:
            ConfigError: unknown field, ``hardPodAffinityWeight`` not an integer in [0, 100],
            ``ignorePreferredTermsOfExistingPods`` not a boolean.
        """
        args = args or {}
        if not isinstance(args, Mapping):
            raise ConfigError(f"args: Invalid value: {args!r}: expected an object")
        for k in args:
            if k not in ("hardPodAffinityWeight", "ignorePreferredTermsOfExistingPods", "apiVersion", "kind"):
                raise ConfigError(f"{k}: unknown field")
        w = args.get("hardPodAffinityWeight")
        if w is None:
            w = 1
        if not isinstance(w, int) or isinstance(w, bool):
            raise ConfigError(f"hardPodAffinityWeight: Invalid value: {w!r}: expected an integer")
        if w < _MIN_HARD_WEIGHT or w > _MAX_HARD_WEIGHT:
            raise ConfigError(f"hardPodAffinityWeight: Invalid value: {w}: not in valid range "
                              f"[{_MIN_HARD_WEIGHT}, {_MAX_HARD_WEIGHT}]")
        ignore = args.get("ignorePreferredTermsOfExistingPods")
        if ignore is None:
            ignore = False
        if not isinstance(ignore, bool):
            raise ConfigError(f"ignorePreferredTermsOfExistingPods: Invalid value: {ignore!r}: expected a boolean")
        return cls(w, ignore)

    # -- PreFilter / Filter ----------------------------------------------------------------------
    def pre_filter(self, state: CycleState, pod: PodInfo,
                   nodes: list[NodeInfo]) -> tuple[set[str] | None, Status]:
        """``PreFilter``: count, per topology pair, existing Pods whose required anti-affinity the
        Pod violates (only nodes in ``have_pods_with_required_anti_affinity_list``) and existing
        Pods on ``nodes`` matching the Pod's required affinity / anti-affinity terms. Skip when
        there is nothing to check."""
        terms = pod_affinity_terms(pod)
        if terms.errors:
            return None, Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ["parsing pod: " + "; ".join(terms.errors)],
                                NAME)
        objects = _objects(state)
        s = PreFilterState(pod)
        s.affinity_terms = [_merge_namespaces(t, objects) for t in terms.required_affinity]
        s.anti_affinity_terms = [_merge_namespaces(t, objects) for t in terms.required_anti_affinity]
        s.namespace_labels = _namespace_labels(objects, pod.namespace)

        snap = state.snapshot
        if (snap is not None and not s.affinity_terms and not s.anti_affinity_terms
                and not snap.have_pods_with_required_anti_affinity_list):
            # Nothing to count (no terms of its own, no existing required anti-affinity): Skip
            # without bringing the index up to date (O(nodes) per cycle at 5000 nodes).
            return None, Status.skip()
        if self.use_index and snap is not None and nodes is snap.node_info_list:
            index = self.affinity_index(nodes)
            state.data[_INDEX_KEY] = index
            self._pre_filter_counts_indexed(s, pod, index)
        else:
            self._pre_filter_counts_scan(s, pod, nodes, snap)
        if not s.existing_anti_affinity_counts and not s.affinity_terms and not s.anti_affinity_terms:
            return None, Status.skip()
        state.write(PRE_FILTER_STATE_KEY, s)
        return None, Status.success()

    @staticmethod
    def _pre_filter_counts_indexed(s: PreFilterState, pod: PodInfo, index: AffinityIndex) -> None:
        """PreFilter's three topology-pair counters from the :class:`AffinityIndex` of all nodes:
        one ``matches`` per distinct existing anti-affinity term and per label class of Pods (the
        counts :meth:`_pre_filter_counts_scan` gives)."""
        counts = s.existing_anti_affinity_counts
        ns_labels = s.namespace_labels
        for g in index.anti.values():
            if g.counts and g.rep.matches(pod, ns_labels):
                for pair, n in g.counts.items():
                    counts[pair] = counts.get(pair, 0) + n
        aff, anti = s.affinity_terms, s.anti_affinity_terms
        if not aff and not anti:
            return
        nodes = index.nodes
        aff_counts, anti_counts = s.affinity_counts, s.anti_affinity_counts
        for g in index.classes.values():
            rep = g.rep
            if aff and pod_matches_all_affinity_terms(aff, rep):
                for pos, n in g.counts.items():
                    labels = nodes[pos].labels
                    for t in aff:
                        tv = labels.get(t.topology_key)
                        if tv is not None:
                            pair = (t.topology_key, tv)
                            aff_counts[pair] = aff_counts.get(pair, 0) + n
            for t in anti:
                if t.matches(rep, None):
                    key = t.topology_key
                    for pos, n in g.counts.items():
                        tv = nodes[pos].labels.get(key)
                        if tv is not None:
                            pair = (key, tv)
                            anti_counts[pair] = anti_counts.get(pair, 0) + n

    @staticmethod
    def _pre_filter_counts_scan(s: PreFilterState, pod: PodInfo, nodes: list[NodeInfo],
                                snap: SnapshotLister | None) -> None:
        """PreFilter's counters node by node, as upstream: existing anti-affinity over the snapshot's
        ``have_pods_with_required_anti_affinity_list`` (``nodes`` with such Pods without a
        snapshot), the Pod's own terms over ``nodes``."""
        anti_nodes: list[NodeInfo] = (list(snap.have_pods_with_required_anti_affinity_list) if snap is not None
                                      else [n for n in nodes if n.pods_with_required_anti_affinity])
        for ni in anti_nodes:
            labels: Mapping[str, str] | None = None  # read only once a term matches (most never do)
            for ep in ni.pods_with_required_anti_affinity:
                for t in pod_affinity_terms(ep).required_anti_affinity:
                    if t.matches(pod, s.namespace_labels):
                        if labels is None:
                            labels = ni.labels
                        tv = labels.get(t.topology_key)
                        if tv is not None:
                            pair = (t.topology_key, tv)
                            s.existing_anti_affinity_counts[pair] = s.existing_anti_affinity_counts.get(pair, 0) + 1

        if s.affinity_terms or s.anti_affinity_terms:
            for ni in nodes:
                if not ni.pods:
                    continue
                labels = None
                for ep in ni.pods:
                    if pod_matches_all_affinity_terms(s.affinity_terms, ep):
                        if labels is None:
                            labels = ni.labels
                        for t in s.affinity_terms:
                            tv = labels.get(t.topology_key)
                            if tv is not None:
                                pair = (t.topology_key, tv)
                                s.affinity_counts[pair] = s.affinity_counts.get(pair, 0) + 1
                    for t in s.anti_affinity_terms:
                        if t.matches(ep, None):
                            if labels is None:
                                labels = ni.labels
                            tv = labels.get(t.topology_key)
                            if tv is not None:
                                pair = (t.topology_key, tv)
                                s.anti_affinity_counts[pair] = s.anti_affinity_counts.get(pair, 0) + 1

    def add_pod(self, state: CycleState, pod: PodInfo, to_add: PodInfo, node_info: NodeInfo) -> Status:
        """``AddPod``: account for ``to_add`` placed on ``node_info``."""
        s = state.data.get(PRE_FILTER_STATE_KEY)
        if not isinstance(s, PreFilterState):
            return Status.error(f'error reading "{PRE_FILTER_STATE_KEY}" from cycleState: not found', NAME)
        s.update_with_pod(to_add, node_info.node, 1)
        return Status.success()

    def remove_pod(self, state: CycleState, pod: PodInfo, to_remove: PodInfo, node_info: NodeInfo) -> Status:
        """``RemovePod``: account for ``to_remove`` leaving ``node_info``."""
        s = state.data.get(PRE_FILTER_STATE_KEY)
        if not isinstance(s, PreFilterState):
            return Status.error(f'error reading "{PRE_FILTER_STATE_KEY}" from cycleState: not found', NAME)
        s.update_with_pod(to_remove, node_info.node, -1)
        return Status.success()

    def filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status:
        """``Filter``:

        1. affinity: the node has every affinity term's topology key and each (key, value) pair
           counts a matching Pod; or no Pod matches anywhere and the Pod matches its own terms
           (the first Pod of a self-affine group) -- else UnschedulableAndUnresolvable
           ``node(s) didn't match pod affinity rules``;
        2. the Pod's anti-affinity: no matching Pod in the node's domain of any term -- else
           Unschedulable ``node(s) didn't match pod anti-affinity rules``;
        3. existing Pods' anti-affinity: none of the node's (label, value) pairs is counted -- else
           Unschedulable ``node(s) didn't satisfy existing pods anti-affinity rules``.
        """
        s = state.data.get(PRE_FILTER_STATE_KEY)
        if not isinstance(s, PreFilterState):
            return Status.error(f'error reading "{PRE_FILTER_STATE_KEY}" from cycleState: not found', NAME)
        labels = node_info.labels
        if s.affinity_terms:
            pods_exist = True
            for t in s.affinity_terms:
                tv = labels.get(t.topology_key)
                if tv is None:
                    return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [ERR_REASON_AFFINITY_RULES_NOT_MATCH], NAME)
                if s.affinity_counts.get((t.topology_key, tv), 0) <= 0:
                    pods_exist = False
            if not pods_exist and not (not s.affinity_counts
                                       and pod_matches_all_affinity_terms(s.affinity_terms, s.pod)):
                return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [ERR_REASON_AFFINITY_RULES_NOT_MATCH], NAME)
        if s.anti_affinity_counts:
            for t in s.anti_affinity_terms:
                tv = labels.get(t.topology_key)
                if tv is not None and s.anti_affinity_counts.get((t.topology_key, tv), 0) > 0:
                    return Status(Code.UNSCHEDULABLE, [ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH], NAME)
        if s.existing_anti_affinity_counts:
            for k, v in labels.items():
                if s.existing_anti_affinity_counts.get((k, v), 0) > 0:
                    return Status(Code.UNSCHEDULABLE, [ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH], NAME)
        return Status.success()

    def filter_nodes(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> list[Status] | None:
        """:meth:`filter` for each of ``nodes`` in order (batch form; None: all pass).

        The three checks are decided once per cycle as lookups on each node's labels: the affinity
        terms' topology keys, the anti-affinity terms' blocked values per key, and the existing
        Pods' blocked values per label key (a node is rejected when one of its (key, value) pairs is
        counted: the same as walking every label of the node, with one lookup per counted key; the
        counters never hold a None value, as a missing label and a null one count nowhere).
        """
        s = state.data.get(PRE_FILTER_STATE_KEY)
        if not isinstance(s, PreFilterState):
            return [self.filter(state, pod, ni) for ni in nodes]
        aff = [t.topology_key for t in s.affinity_terms]
        aff_counts = s.affinity_counts
        # With no matching Pod anywhere, a node passes the affinity check iff it has every key and the
        # Pod matches its own terms (the first Pod of a self-affine group).
        self_affine = bool(aff) and not aff_counts and pod_matches_all_affinity_terms(s.affinity_terms, s.pod)
        anti: list[tuple[str, set[Any]]] = []
        if s.anti_affinity_counts:
            for t in s.anti_affinity_terms:
                vals = {v for (k, v), n in s.anti_affinity_counts.items() if k == t.topology_key and n > 0}
                if vals:
                    anti.append((t.topology_key, vals))
        existing: dict[str, set[Any]] = {}
        for (k, v), n in s.existing_anti_affinity_counts.items():
            if n > 0:
                existing.setdefault(k, set()).add(v)
        if not aff and not anti and not existing:
            return None
        out: list[Status] | None = None
        for j, ni in enumerate(nodes):
            labels = ni.labels
            reason = ""
            code = Code.UNSCHEDULABLE
            if aff:
                pods_exist = True
                for key in aff:
                    tv = labels.get(key)
                    if tv is None:
                        reason = ERR_REASON_AFFINITY_RULES_NOT_MATCH
                        break
                    if pods_exist and aff_counts.get((key, tv), 0) <= 0:
                        pods_exist = False
                else:
                    if not pods_exist and not self_affine:
                        reason = ERR_REASON_AFFINITY_RULES_NOT_MATCH
                if reason:
                    code = Code.UNSCHEDULABLE_AND_UNRESOLVABLE
            if not reason:
                for key, vals in anti:
                    if labels.get(key) in vals:
                        reason = ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH
                        break
            if not reason:
                for key, vals in existing.items():
                    if labels.get(key) in vals:
                        reason = ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH
                        break
            if reason:
                if out is None:
                    out = [Status.success()] * len(nodes)
                out[j] = Status(code, [reason], NAME)
        return out

    # -- PreScore / Score / NormalizeScore -------------------------------------------------------
    def pre_score(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> Status:
        """``PreScore``: sum, per topology (key, value), the weights of

        * the Pod's preferred affinity (+) / anti-affinity (-) terms matched by existing Pods,
        * existing Pods' required affinity terms the Pod matches (+ ``hardPodAffinityWeight``),
        * existing Pods' preferred affinity (+) / anti-affinity (-) terms the Pod matches,

        at the existing Pod's node's value. Without preferred terms of its own only nodes with Pods
        that have affinity are visited (``have_pods_with_affinity_list``). Skip when nothing
        matched, or when ``ignorePreferredTermsOfExistingPods`` and the Pod has no preferred terms.
        """
        has_constraints = (_raw_preferred_count(pod, "podAffinity") > 0
                           or _raw_preferred_count(pod, "podAntiAffinity") > 0)
        if self.ignore_preferred_terms_of_existing_pods and not has_constraints:
            return Status.skip()
        snap = state.snapshot
        terms = pod_affinity_terms(pod)
        if terms.errors:
            return Status.error("failed to parse pod: " + "; ".join(terms.errors), NAME)
        objects = _objects(state)
        pref_aff = [WeightedAffinityTerm(_merge_namespaces(w.term, objects), w.weight)
                    for w in terms.preferred_affinity]
        pref_anti = [WeightedAffinityTerm(_merge_namespaces(w.term, objects), w.weight)
                     for w in terms.preferred_anti_affinity]
        ns_labels = _namespace_labels(objects, pod.namespace)
        own = [(w.term, w.weight) for w in pref_aff] + [(w.term, -w.weight) for w in pref_anti]
        if snap is not None and not own and not snap.have_pods_with_affinity_list:
            return Status.skip()  # nothing can match: no index update (O(nodes)) needed
        if snap is not None and self.use_index:
            index = state.data.get(_INDEX_KEY)
            if not (isinstance(index, AffinityIndex) and index.fresh_for(snap.node_info_list)):
                index = self.affinity_index(snap.node_info_list)  # PreFilter skipped or ran on another list
            topo = self._pre_score_indexed(pod, own, ns_labels, index)
        else:
            if snap is not None:
                all_nodes = list(snap.node_info_list if has_constraints else snap.have_pods_with_affinity_list)
            else:
                all_nodes = list(nodes) if has_constraints else [n for n in nodes if n.pods_with_affinity]
            topo = self._pre_score_scan(pod, own, ns_labels, all_nodes, has_constraints)
        if not topo:
            return Status.skip()
        state.write(PRE_SCORE_STATE_KEY, PreScoreState(topo))
        return Status.success()

    def _pre_score_indexed(self, pod: PodInfo, own: list[tuple[AffinityTerm, int]],
                           ns_labels: Mapping[str, str] | None, index: AffinityIndex) -> dict[str, dict[str, int]]:
        """PreScore's topology scores from the :class:`AffinityIndex` of all nodes: the Pod's own
        (signed) preferred terms ``own`` once per label class of Pods, existing Pods' terms once per
        distinct (kind, term, weight). A (key, value) entry exists iff some term matched at a node
        with that key, as in :meth:`_pre_score_scan`."""
        topo: dict[str, dict[str, int]] = {}
        if own:
            nodes = index.nodes
            classes = index.classes
            for term, weight in own:
                memo = index.match_memo(index.own_matches, term_key(term), len(classes))
                key = term.topology_key
                for g in classes.values():
                    m = memo.get(g)
                    if m is None:
                        m = memo[g] = term.matches(g.rep, None)
                    if m:
                        for pos, n in g.counts.items():
                            tv = nodes[pos].labels.get(key)
                            if tv is not None:
                                scores = topo.setdefault(key, {})
                                scores[tv] = scores.get(tv, 0) + weight * n
        hard = self.hard_pod_affinity_weight
        pkey = (pod.namespace, frozenset(pod.labels.items()),
                None if ns_labels is None else frozenset(ns_labels.items()))
        pmemo = index.match_memo(index.pod_matches, pkey, len(index.score))
        for gkey, g in index.score.items():
            if not g.counts:
                continue
            kind, _, w = gkey
            if kind == _KIND_HARD:
                if hard <= 0:
                    continue
                weight = hard
            else:
                weight = w if kind == _KIND_PREFERRED else -w
            m = pmemo.get(g)
            if m is None:
                m = pmemo[g] = g.rep.matches(pod, ns_labels)
            if m:
                for (key, tv), n in g.counts.items():
                    scores = topo.setdefault(key, {})
                    scores[tv] = scores.get(tv, 0) + weight * n
        return topo

    def _pre_score_scan(self, pod: PodInfo, own: list[tuple[AffinityTerm, int]], ns_labels: Mapping[str, str] | None,
                        all_nodes: list[NodeInfo], has_constraints: bool) -> dict[str, dict[str, int]]:
        """PreScore's topology scores node by node, as upstream: every Pod of ``all_nodes`` when
        ``has_constraints`` (the Pod has preferred terms), else their Pods with affinity."""
        topo: dict[str, dict[str, int]] = {}

        def add(term: AffinityTerm, weight: int, node_labels: Mapping[str, str]) -> None:
            tv = node_labels.get(term.topology_key)
            if tv is not None:
                scores = topo.setdefault(term.topology_key, {})
                scores[tv] = scores.get(tv, 0) + weight

        hard = self.hard_pod_affinity_weight
        for ni in all_nodes:
            pods = ni.pods if has_constraints else ni.pods_with_affinity
            if not pods:
                continue
            # The node's labels are read only once a term matches (most never do); a node without
            # labels scores nothing either way.
            node_labels: Mapping[str, str] | None = None
            for ep in pods:
                for term, weight in own:
                    if term.matches(ep, None):
                        if node_labels is None:
                            node_labels = ni.labels
                        add(term, weight, node_labels)
                ep_terms = pod_affinity_terms(ep)
                if hard > 0:
                    for t in ep_terms.required_affinity:
                        if t.matches(pod, ns_labels):
                            if node_labels is None:
                                node_labels = ni.labels
                            add(t, hard, node_labels)
                for w in ep_terms.preferred_affinity:
                    if w.term.matches(pod, ns_labels):
                        if node_labels is None:
                            node_labels = ni.labels
                        add(w.term, w.weight, node_labels)
                for w in ep_terms.preferred_anti_affinity:
                    if w.term.matches(pod, ns_labels):
                        if node_labels is None:
                            node_labels = ni.labels
                        add(w.term, -w.weight, node_labels)
        return topo

    def score(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> tuple[int, Status]:
        """``Score``: the sum of ``topology_score[key][node's value]`` over the keys the node has
        (may be negative; NormalizeScore maps it into [0, 100])."""
        s = state.data.get(PRE_SCORE_STATE_KEY)
        if not isinstance(s, PreScoreState):
            return 0, Status.error(f'failed to read "{PRE_SCORE_STATE_KEY}" from cycleState: not found', NAME)
        labels = node_info.labels
        total = 0
        for key, values in s.topology_score.items():
            v = labels.get(key)
            if v is not None:
                total += values.get(v, 0)
        return total, Status.success()

    def score_nodes(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> tuple[list[int], Status]:
        """:meth:`score` for each of ``nodes`` in order (batch form): one lookup per node and topology
        key of the state (a missing or null label scores nothing, as no value counted is None).
        Without PreScore state every score is 0 and the Status is Score's error."""
        s = state.data.get(PRE_SCORE_STATE_KEY)
        if not isinstance(s, PreScoreState):
            return [0] * len(nodes), Status.error(f'failed to read "{PRE_SCORE_STATE_KEY}" from cycleState: not found',
                                                  NAME)
        items: list[tuple[str, dict[Any, int]]] = list(s.topology_score.items())
        if not items:
            return [0] * len(nodes), Status.success()
        all_labels = _node_labels(nodes)
        if len(items) == 1:
            key, values = items[0]
            get = values.get
            return [get(labels.get(key), 0) for labels in all_labels], Status.success()
        return [sum(values.get(labels.get(key), 0) for key, values in items) for labels in all_labels], Status.success()

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: dict[str, int]) -> Status:
        """``NormalizeScore``: ``int(100.0 * ((score - min) / (max - min)))`` in float64, truncated;
        every node 0 when max == min."""
        s = state.data.get(PRE_SCORE_STATE_KEY)
        if not isinstance(s, PreScoreState):
            return Status.error(f'failed to read "{PRE_SCORE_STATE_KEY}" from cycleState: not found', NAME)
        if not s.topology_score or not scores:
            return Status.success()
        min_count = min(scores.values())
        max_count = max(scores.values())
        diff = max_count - min_count
        if diff > 0:
            top, fdiff = float(MAX_NODE_SCORE), float(diff)
            scores.update({name: int(top * (float(sc - min_count) / fdiff)) for name, sc in scores.items()})
        else:
            scores.update(dict.fromkeys(scores, 0))
        return Status.success()

    # -- EnqueueExtensions (self-contained; hints in helpers/queueing_hints.py) ---------------------
    def events_to_register(self) -> list[ClusterEventWithHint]:
        """``EventsToRegister`` (``interpodaffinity/plugin.go``, QueueingHints on): an assigned Pod
        added, relabelled or deleted, and a Node added or relabelled, with upstream's hints
        (:mod:`py_scheduler.plugins.helpers.queueing_hints`); the rejected Pod relabelled (always
        Queue)."""
        return [
            ClusterEventWithHint(ClusterEvent(EventResource.ASSIGNED_POD,
                                              ActionType.ADD | ActionType.UPDATE_POD_LABEL | ActionType.DELETE),
                                 partial(inter_pod_affinity_after_assigned_pod_change, _hint_terms)),
            ClusterEventWithHint(ClusterEvent(EventResource.TARGET_POD, ActionType.UPDATE_POD_LABEL)),
            ClusterEventWithHint(ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL),
                                 partial(inter_pod_affinity_after_node_change, _hint_terms)),
        ]


def _hint_terms(pod: PodInfo) -> tuple[tuple[AffinityTerm, ...], tuple[AffinityTerm, ...]] | None:
    """The Pod's required (affinity, anti-affinity) terms for the queueing hints; None (the hints
    Queue) when any of its affinity terms has a parse error (upstream errors only for the required
    ones: a superset)."""
    t = pod_affinity_terms(pod)
    if t.errors:
        return None
    return t.required_affinity, t.required_anti_affinity
