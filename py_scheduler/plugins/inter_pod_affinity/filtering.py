"""InterPodAffinity's PreFilter / Filter and PreFilterExtensions (upstream
``pkg/scheduler/framework/plugins/interpodaffinity/filtering.go``: the topology-pair counters, the
self-affinity special case)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from py_scheduler.framework.lister import SnapshotLister
from py_scheduler.framework.objects import Obj
from py_scheduler.framework.types import Code, CycleState, NodeInfo, PodInfo, Status
from py_scheduler.plugins.inter_pod_affinity.common import (
    _INDEX_KEY,
    ERR_REASON_AFFINITY_RULES_NOT_MATCH,
    ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH,
    ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH,
    NAME,
    PRE_FILTER_STATE_KEY,
    AffinityTerm,
    TopologyPair,
    _merge_namespaces,
    _namespace_labels,
    _objects,
    pod_affinity_terms,
    pod_matches_all_affinity_terms,
)
from py_scheduler.plugins.inter_pod_affinity.index import AffinityIndex, AffinityIndexes


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


class Filtering(AffinityIndexes):
    """PreFilter / Filter / AddPod / RemovePod of :class:`~py_scheduler.plugins.inter_pod_affinity.InterPodAffinity`."""

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
        index = self._index_for(snap, nodes)
        if index is not None:
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
        one ``matches`` per distinct existing anti-affinity term anchored on one of the Pod's labels
        and per label class holding a pair a term needs (the counts :meth:`_pre_filter_counts_scan`
        gives)."""
        counts = s.existing_anti_affinity_counts
        ns_labels = s.namespace_labels
        for g in index.anti.for_labels(pod.labels):
            if g.counts and g.rep.matches(pod, ns_labels):
                for pair, n in g.counts.items():
                    counts[pair] = counts.get(pair, 0) + n
        aff, anti = s.affinity_terms, s.anti_affinity_terms
        nodes = index.nodes
        classes = index.classes
        # A term adds its Pods at (its topology key, the node's value): terms are taken together by
        # key, with their number, so the work is per distinct key, not per term (an adversarial Pod
        # of 10 000 identical terms cost 4 s per cycle at 500 nodes when each was walked).
        if aff:
            aff_counts = s.affinity_counts
            aff_keys = _by_key(aff)
            for g in classes.for_selectors(t.selector for t in aff):
                if pod_matches_all_affinity_terms(aff, g.rep):
                    _add_pairs(aff_counts, g.counts, nodes, aff_keys)
        anti_counts = s.anti_affinity_counts
        matched: dict[int, tuple[Any, list[AffinityTerm]]] = {}  # label class -> the terms matching it
        for t in anti:
            for g in classes.for_selectors((t.selector,)):
                if t.matches(g.rep, None):
                    matched.setdefault(id(g), (g, []))[1].append(t)
        for g, terms in matched.values():
            _add_pairs(anti_counts, g.counts, nodes, _by_key(terms))

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
        aff = list(dict.fromkeys(t.topology_key for t in s.affinity_terms))  # by distinct key: same verdicts
        aff_counts = s.affinity_counts
        # With no matching Pod anywhere, a node passes the affinity check iff it has every key and the
        # Pod matches its own terms (the first Pod of a self-affine group).
        self_affine = bool(aff) and not aff_counts and pod_matches_all_affinity_terms(s.affinity_terms, s.pod)
        anti: list[tuple[str, set[Any]]] = []
        if s.anti_affinity_counts:
            blocked: dict[str, set[Any]] = {}
            for (k, v), n in s.anti_affinity_counts.items():
                if n > 0:
                    blocked.setdefault(k, set()).add(v)
            anti = [(key, blocked[key]) for key in dict.fromkeys(t.topology_key for t in s.anti_affinity_terms)
                    if key in blocked]
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


def _by_key(terms: Iterable[AffinityTerm]) -> list[tuple[str, int]]:
    """Each distinct topology key of ``terms`` with how many terms have it (first-seen order)."""
    keys: dict[str, int] = {}
    for t in terms:
        keys[t.topology_key] = keys.get(t.topology_key, 0) + 1
    return list(keys.items())


def _add_pairs(counts: dict[tuple[str, str], int], at: Mapping[int, int], nodes: Sequence[NodeInfo],
               keys: list[tuple[str, int]]) -> None:
    """Add, for each node position of ``at`` holding ``n`` Pods of a class, ``n`` times each key's
    number of terms at the pair (key, the node's value), where the node has the key."""
    for pos, n in at.items():
        labels = nodes[pos].labels
        for key, m in keys:
            tv = labels.get(key)
            if tv is not None:
                pair = (key, tv)
                counts[pair] = counts.get(pair, 0) + n * m
