"""InterPodAffinity's PreScore / Score / NormalizeScore (upstream
``pkg/scheduler/framework/plugins/interpodaffinity/scoring.go``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from py_scheduler.framework.types import MAX_NODE_SCORE, CycleState, NodeInfo, PodInfo, Status
from py_scheduler.plugins.inter_pod_affinity.common import (
    _INDEX_KEY,
    NAME,
    PRE_SCORE_STATE_KEY,
    AffinityTerm,
    WeightedAffinityTerm,
    _merge_namespaces,
    _namespace_labels,
    _objects,
    _raw_preferred_count,
    pod_affinity_terms,
)
from py_scheduler.plugins.inter_pod_affinity.index import (
    _KIND_HARD,
    _KIND_PREFERRED,
    AffinityIndex,
    AffinityIndexes,
    _node_labels,
    term_key,
)


@dataclass(slots=True)
class PreScoreState:
    """``preScoreState``: topology key -> topology value -> summed weight (positive for affinity,
    negative for anti-affinity)."""

    topology_score: dict[str, dict[str, int]] = field(default_factory=dict)

    def clone(self) -> PreScoreState:
        return self


class Scoring(AffinityIndexes):
    """PreScore / Score / NormalizeScore of :class:`~py_scheduler.plugins.inter_pod_affinity.InterPodAffinity`."""

    hard_pod_affinity_weight: int
    ignore_preferred_terms_of_existing_pods: bool

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
        index = state.data.get(_INDEX_KEY)
        if snap is not None and not (isinstance(index, AffinityIndex) and index.fresh_for(snap.node_info_list)):
            index = self._index_for(snap, snap.node_info_list)  # PreFilter skipped or ran on another list
        if snap is not None and isinstance(index, AffinityIndex):
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
        (signed) preferred terms ``own`` once per label class of Pods holding a pair the term needs,
        existing Pods' terms once per distinct (kind, term, weight) anchored on the Pod's labels. A
        (key, value) entry exists iff some term matched at a node with that key, as in
        :meth:`_pre_score_scan`."""
        topo: dict[str, dict[str, int]] = {}
        if own:
            nodes = index.nodes
            classes = index.classes
            for term, weight in own:
                memo = index.match_memo(index.own_matches, term_key(term), len(classes))
                key = term.topology_key
                for g in classes.for_selectors((term.selector,)):
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
        for g in index.score.for_labels(pod.labels):
            if not g.counts:
                continue
            kind, _, w = g.key
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
        out, st = self.normalize_column(state, pod, list(scores.values()))
        if st.is_success():
            scores.update(zip(scores, out, strict=True))
        return st

    def normalize_column(self, state: CycleState, pod: PodInfo, values: Sequence[int]) -> tuple[list[int], Status]:
        """:meth:`normalize_score` on a column (``BatchNormalizeScorePlugin``)."""
        s = state.data.get(PRE_SCORE_STATE_KEY)
        if not isinstance(s, PreScoreState):
            return [], Status.error(f'failed to read "{PRE_SCORE_STATE_KEY}" from cycleState: not found', NAME)
        if not s.topology_score or not len(values):
            return list(values), Status.success()
        min_count = min(values)
        diff = max(values) - min_count
        if diff <= 0:
            return [0] * len(values), Status.success()
        top, fdiff = float(MAX_NODE_SCORE), float(diff)
        done = {sc: int(top * (float(sc - min_count) / fdiff)) for sc in set(values)}
        return list(map(done.__getitem__, values)), Status.success()
