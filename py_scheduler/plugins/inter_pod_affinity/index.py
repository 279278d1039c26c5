"""InterPodAffinity's cross-cycle :class:`AffinityIndex` (py-scheduler's own, issue 9: no upstream
counterpart; it gives exactly the counts of ``filtering.go`` / ``scoring.go``'s node-by-node walk)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from py_scheduler.framework.lister import SnapshotLister
from py_scheduler.framework.memo import PodInput, PodMemo
from py_scheduler.framework.types import NodeInfo, PodInfo
from py_scheduler.plugins.helpers.node_selector import LabelSelector
from py_scheduler.plugins.inter_pod_affinity.common import NAME, AffinityTerm, pod_affinity_terms

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

    __slots__ = ("counts", "key", "owner", "pairs", "refs", "rep")

    def __init__(self, owner: _Groups, key: Any, rep: Any, pairs: Iterable[LabelPair] | None) -> None:
        self.owner = owner
        self.key = key
        self.rep = rep
        self.pairs = pairs
        self.refs = 0
        self.counts: dict[Any, int] = {}


LabelPair = tuple[str, str]


def _anchor(sel: LabelSelector) -> tuple[LabelPair, ...] | None:
    """Label pairs one of which every label set ``sel`` matches holds: (key, value) for each value
    of its first ``In`` requirement (``=`` and matchLabels are ``In``); () when it matches nothing;
    None when it has no ``In`` requirement (it can match label sets that hold none of a few pairs)."""
    if sel.nothing:
        return ()
    r = sel.first_in()
    return None if r is None else tuple((r.key, v) for v in r.values)


def _term_pairs(key: Any, rep: AffinityTerm) -> tuple[LabelPair, ...] | None:
    return _anchor(rep.selector)


def _class_pairs(key: tuple[str, frozenset[LabelPair]], rep: PodInfo) -> frozenset[LabelPair]:
    return key[1]


class _Groups(dict[Any, _Group]):
    """:class:`_Group` objects by key (insertion order), plus an inverted index from label pairs
    to the groups that need or hold them (``pairs_of(key, rep)``), so a cycle visits the groups
    that can match instead of all of them:

    * term groups (``anti``, ``score``): a term's :func:`_anchor` pairs; ``unanchored`` holds the
      terms without one (always visited). :meth:`for_labels` gives the terms that may match a
      label set -- each at most once, as a label set holds one value per key;
    * label-class groups (``classes``): all the class's labels. :meth:`for_selectors` gives the
      classes that may match selectors.

    What it depends on: a group's ``rep`` (its term or Pod labels) never changes (groups are keyed
    by it). Cost: one entry per anchor value of each term group and per label of each class. The
    property test tests/unit/plugins/test_inter_pod_affinity_index.py compares the counts with the
    node-by-node walk."""

    __slots__ = ("by_pair", "pairs_of", "unanchored")

    def __init__(self, pairs_of: Callable[[Any, Any], Iterable[LabelPair] | None]) -> None:
        super().__init__()
        self.pairs_of = pairs_of
        self.by_pair: dict[LabelPair, dict[_Group, None]] = {}
        self.unanchored: dict[_Group, None] = {}

    def add(self, key: Any, rep: Any) -> _Group:
        g = self[key] = _Group(self, key, rep, self.pairs_of(key, rep))
        if g.pairs is None:
            self.unanchored[g] = None
        else:
            for p in g.pairs:
                self.by_pair.setdefault(p, {})[g] = None
        return g

    def drop(self, g: _Group) -> None:
        del self[g.key]
        if g.pairs is None:
            del self.unanchored[g]
            return
        for p in g.pairs:
            members = self.by_pair[p]
            del members[g]
            if not members:
                del self.by_pair[p]

    def for_labels(self, labels: Mapping[str, str]) -> Iterator[_Group]:
        """The term groups whose anchor ``labels`` holds, then the unanchored ones."""
        by_pair = self.by_pair
        for pair in labels.items():
            members = by_pair.get(pair)
            if members:
                yield from members
        yield from self.unanchored

    def for_selectors(self, sels: Iterable[LabelSelector]) -> Iterable[_Group]:
        """The label-class groups that may match every selector of ``sels``: those holding one of
        the first anchored selector's :func:`_anchor` pairs (all groups when none is anchored)."""
        for sel in sels:
            pairs = _anchor(sel)
            if pairs is not None:
                by_pair = self.by_pair
                return [g for p in pairs for g in by_pair.get(p, ())]
        return self.values()


Entry = tuple[_Group, Any]


def _enter(owner: _Groups, key: Any, rep: Any, count_key: Any, entries: list[Entry]) -> None:
    g = owner.get(key)
    if g is None:
        g = owner.add(key, rep)
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
            g.owner.drop(g)


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
        self.anti = _Groups(_term_pairs)
        self.score = _Groups(_term_pairs)
        self.classes = _Groups(_class_pairs)
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


class AffinityIndexes:
    """The plugin's :class:`AffinityIndex` per Snapshot node list (the last :data:`_MAX_INDEXES`)."""

    _indexes: list[AffinityIndex]

    def _index_for(self, snap: SnapshotLister | None, nodes: list[NodeInfo]) -> AffinityIndex | None:
        """The :class:`AffinityIndex` when ``nodes`` is the Snapshot's whole node list; None: PreFilter /
        PreScore walk every node's Pods as upstream does (the tests' reference overrides this)."""
        return self.affinity_index(nodes) if snap is not None and nodes is snap.node_info_list else None

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
