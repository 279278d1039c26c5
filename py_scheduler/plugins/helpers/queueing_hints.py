"""Queueing hints of NodeAffinity, PodTopologySpread and InterPodAffinity, kept apart from their
Filter / Score code.

Each function is ``(pod, old, new) -> QueueingHint`` (``fwk.QueueingHintFn``): ``pod`` is the rejected
Pod (Kubernetes JSON), ``old`` / ``new`` the changed object before and after (``old`` is None for an
add, ``new`` is None for a delete). Upstream returns ``Queue`` with an error for objects it cannot
read; these return ``Queue`` for anything malformed, which never strands a Pod.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, cast

from py_scheduler.framework import objects as ob
from py_scheduler.framework.events import QueueingHint
from py_scheduler.framework.memo import HINT_POD_INFOS
from py_scheduler.framework.types import PodInfo
from py_scheduler.plugins.helpers.node_selector import (
    LabelSelector,
    NodeSelector,
    RequiredNodeAffinity,
    required_node_affinity,
)

__all__ = [
    "AffinityTermLike",
    "SpreadConstraintLike",
    "hint_pod_info",
    "inter_pod_affinity_after_assigned_pod_change",
    "inter_pod_affinity_after_node_change",
    "node_affinity_after_node_change",
    "spread_after_assigned_pod_change",
    "spread_after_node_change",
    "spread_after_target_pod_change",
]

_QUEUE = QueueingHint.QUEUE
_SKIP = QueueingHint.QUEUE_SKIP


def hint_pod_info(pod: dict[str, Any]) -> PodInfo:
    """A :class:`PodInfo` of the Pod object ``pod``, kept per object (identity, not equality: a new
    version of the Pod is a new object) so that one event offered to N rejected Pods parses the
    changed Pod once and each rejected Pod once, not N times (the terms and selectors parsed from it
    are memoized on the PodInfo). The memo: :data:`~py_scheduler.framework.memo.HINT_POD_INFOS`.

    Raises:
        PodParseError: a resource field of the Pod is malformed.
    """
    hit = HINT_POD_INFOS.find(pod)  # a queued Pod's own PodInfo, pinned by the queue, first
    if hit is not None:
        return cast(PodInfo, hit)
    return cast(PodInfo, HINT_POD_INFOS.put(pod, PodInfo(pod)))


def _affinity_match(required: RequiredNodeAffinity, node: dict[str, Any]) -> bool | None:
    """``RequiredNodeAffinity.Match``: True / False, or None where upstream returns an error (no
    term matched and one of the Pod's required terms has a parse error)."""
    if required.match(node):
        return True
    if required.node_selector is not None and required.node_selector.errors:
        return None
    return False


def node_affinity_after_node_change(added_node_selector: NodeSelector | None, pod: dict[str, Any],
                                    old: Any, new: Any) -> QueueingHint:
    """NodeAffinity ``isSchedulableAfterNodeChange`` (``pkg/scheduler/framework/plugins/nodeaffinity/
    node_affinity.go``) for a Node added (``old`` None) or its labels updated.

    Skip when ``new`` fails the scheduler-enforced ``added_node_selector`` or the Pod's required
    node affinity / nodeSelector, or (an update) ``old`` already matched the Pod's; Queue otherwise.
    Queue for a malformed Pod or Node, or a required term with a parse error (upstream's error).
    """
    if not isinstance(new, dict) or (old is not None and not isinstance(old, dict)):
        return _QUEUE
    try:
        if added_node_selector is not None and not added_node_selector.match(new):
            return _SKIP
        required = required_node_affinity(hint_pod_info(pod))
        matched = _affinity_match(required, new)
        if matched is None:
            return _QUEUE
        if not matched:
            return _SKIP
        if old is None:
            return _QUEUE
        was = _affinity_match(required, old)
    except Exception:  # malformed Pod or Node: upstream's error path requeues
        return _QUEUE
    return _SKIP if was else _QUEUE


# -- PodTopologySpread (pkg/scheduler/framework/plugins/podtopologyspread/plugin.go) ----------------
class SpreadConstraintLike(Protocol):
    """What the spread hints read of a parsed ``topologySpreadConstraint``."""

    @property
    def topology_key(self) -> str: ...
    @property
    def selector(self) -> LabelSelector: ...
    @property
    def node_taints_policy(self) -> str: ...


SpreadConstraints = Callable[[PodInfo], Sequence[SpreadConstraintLike] | None]
"""The rejected Pod's DoNotSchedule constraints (upstream ``getConstraints``); None when they cannot
be known here (default constraints need the Services / ReplicaSets selecting the Pod): the hints
then Queue. Raising (a malformed Pod) also Queues."""



def _placed(pod: Mapping[str, Any]) -> bool:
    """The Pod has ``spec.nodeName`` or ``status.nominatedNodeName``."""
    spec, status = pod.get("spec"), pod.get("status")
    return bool((isinstance(spec, Mapping) and spec.get("nodeName"))
                or (isinstance(status, Mapping) and status.get("nominatedNodeName")))



def _spread_label_change(old: Mapping[str, Any], new: Mapping[str, Any],
                         constraints: Sequence[SpreadConstraintLike]) -> QueueingHint:
    """``isSchedulableAfterPodLabelChange``: Queue when the labels changed so that some
    constraint's selector matches one version and not the other."""
    ol, nl = ob.labels_of(old), ob.labels_of(new)
    if ol == nl:
        return _SKIP
    if any(c.selector.matches(ol) != c.selector.matches(nl) for c in constraints):
        return _QUEUE
    return _SKIP


def spread_after_assigned_pod_change(constraints_of: SpreadConstraints, pod: dict[str, Any],
                                     old: Any, new: Any) -> QueueingHint:
    """``isSchedulableAfterAssignedPodChange`` for an assigned Pod added, deleted or relabelled.

    Skip when the changed Pod is neither placed nor nominated or lives in another namespace
    (``involvedInTopologySpreading``); an update Queues when the label change flips a constraint's
    selector; an add or a delete Queues when the Pod's labels match a constraint's selector.
    """
    if (new is not None and not isinstance(new, dict)) or (old is not None and not isinstance(old, dict)) \
            or (old is None and new is None):
        return _QUEUE
    ns = ob.namespace(pod, "default")
    for p in (new, old):
        if p is not None and (not _placed(p) or ob.namespace(p, "default") != ns):
            return _SKIP
    try:
        constraints = constraints_of(hint_pod_info(pod))
    except Exception:  # malformed Pod: upstream's error path requeues
        return _QUEUE
    if constraints is None:
        return _QUEUE
    if old is not None and new is not None:
        return _spread_label_change(old, new, constraints)
    changed: dict[str, Any] = new if new is not None else (old or {})
    return _QUEUE if any(c.selector.matches(ob.labels_of(changed)) for c in constraints) else _SKIP


def spread_after_target_pod_change(constraints_of: SpreadConstraints, pod: dict[str, Any],
                                   old: Any, new: Any) -> QueueingHint:
    """``isSchedulableAfterTargetPodChange``: the rejected Pod itself got new tolerations (Queue
    when a constraint has ``nodeTaintsPolicy: Honor``) or new labels (as for an assigned Pod)."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return _QUEUE
    try:
        constraints = constraints_of(hint_pod_info(pod))
    except Exception:  # malformed Pod: upstream's error path requeues
        return _QUEUE
    if constraints is None:
        return _QUEUE
    old_tol = (old.get("spec") or {}).get("tolerations") or []
    new_tol = (new.get("spec") or {}).get("tolerations") or []
    if old_tol != new_tol and any(c.node_taints_policy == "Honor" for c in constraints):
        return _QUEUE
    return _spread_label_change(old, new, constraints)


def spread_after_node_change(constraints_of: SpreadConstraints, pod: dict[str, Any],
                             old: Any, new: Any) -> QueueingHint:
    """``isSchedulableAfterNodeChange`` for a Node added, deleted, relabelled or retainted.

    A node "matches" when it has every constraint's topology key. Add: Queue when ``new``
    matches; delete: Queue when ``old`` matched; update: Queue when matching flipped, or when
    ``new`` matches and a topology key's value or the taints changed; Skip otherwise.
    """
    if (new is not None and not isinstance(new, dict)) or (old is not None and not isinstance(old, dict)) \
            or (old is None and new is None):
        return _QUEUE
    try:
        constraints = constraints_of(hint_pod_info(pod))
    except Exception:  # malformed Pod: upstream's error path requeues
        return _QUEUE
    if constraints is None:
        return _QUEUE

    def matching(node: Mapping[str, Any] | None) -> bool:
        return node is not None and all(c.topology_key in ob.labels_of(node) for c in constraints)

    was, now = matching(old), matching(new)
    if old is not None and new is not None:
        if was != now:
            return _QUEUE
        if now:
            ol, nl = ob.labels_of(old), ob.labels_of(new)
            if any(ol.get(c.topology_key) != nl.get(c.topology_key) for c in constraints):
                return _QUEUE
            if ((old.get("spec") or {}).get("taints") or []) != ((new.get("spec") or {}).get("taints") or []):
                return _QUEUE
        return _SKIP
    if new is not None:
        return _QUEUE if now else _SKIP
    return _QUEUE if was else _SKIP


# -- InterPodAffinity (pkg/scheduler/framework/plugins/interpodaffinity/plugin.go) -----------------
class AffinityTermLike(Protocol):
    """What the inter-pod affinity hints read of a parsed ``fwk.AffinityTerm``."""

    @property
    def topology_key(self) -> str: ...

    def matches(self, pod: PodInfo, ns_labels: Mapping[str, str] | None) -> bool: ...


AffinityTermsOf = Callable[[PodInfo], tuple[Sequence[AffinityTermLike], Sequence[AffinityTermLike]] | None]
"""A Pod's required (affinity, anti-affinity) terms; None when they cannot be parsed (the hints
then Queue, upstream's error path)."""


def _matches_all(terms: Sequence[AffinityTermLike], pod: PodInfo) -> bool:
    """``podMatchesAllAffinityTerms``: False for no terms."""
    return bool(terms) and all(t.matches(pod, None) for t in terms)


def _matches_any(terms: Sequence[AffinityTermLike], pod: PodInfo) -> bool:
    return any(t.matches(pod, None) for t in terms)


def inter_pod_affinity_after_assigned_pod_change(terms_of: AffinityTermsOf, pod: dict[str, Any],
                                                 old: Any, new: Any) -> QueueingHint:
    """``isSchedulableAfterAssignedPodChange`` for an assigned Pod added, deleted or relabelled.

    Skip when the changed Pod is neither placed nor nominated. Update: Queue when it now matches
    all the rejected Pod's affinity terms and did not, or no longer matches one of its anti-affinity
    terms. Add: Queue when it matches all affinity terms. Delete: Queue when it matched an
    anti-affinity term of the rejected Pod, or the rejected Pod matches one of its anti-affinity terms.
    """
    if (new is not None and not isinstance(new, dict)) or (old is not None and not isinstance(old, dict)) \
            or (old is None and new is None):
        return _QUEUE
    if (new is not None and not _placed(new)) or (old is not None and not _placed(old)):
        return _SKIP
    try:
        pi = hint_pod_info(pod)
        parsed = terms_of(pi)
        if parsed is None:
            return _QUEUE
        terms, anti = parsed
        if old is not None and new is not None:
            opi, npi = hint_pod_info(old), hint_pod_info(new)
            if not _matches_all(terms, opi) and _matches_all(terms, npi):
                return _QUEUE
            if _matches_any(anti, opi) and not _matches_any(anti, npi):
                return _QUEUE
            return _SKIP
        if new is not None:
            return _QUEUE if _matches_all(terms, hint_pod_info(new)) else _SKIP
        deleted: dict[str, Any] = old or {}
        opi = hint_pod_info(deleted)
        if _matches_any(anti, opi):
            return _QUEUE
        old_parsed = terms_of(opi)
        if old_parsed is None:
            return _QUEUE
        return _QUEUE if _matches_any(old_parsed[1], pi) else _SKIP
    except Exception:  # malformed Pod: upstream's error path requeues
        return _QUEUE


def inter_pod_affinity_after_node_change(terms_of: AffinityTermsOf, pod: dict[str, Any],
                                         old: Any, new: Any) -> QueueingHint:
    """``isSchedulableAfterNodeChange`` for a Node added or relabelled.

    Affinity terms: Queue when an added node has a term's topology key, or an update adds the key
    or changes its value. Anti-affinity terms: Queue for any added node, or when an update removes
    a term's topology key or changes its value. Skip otherwise.
    """
    if not isinstance(new, dict) or (old is not None and not isinstance(old, dict)):
        return _QUEUE
    try:
        parsed = terms_of(hint_pod_info(pod))
    except Exception:  # malformed Pod: upstream's error path requeues
        return _QUEUE
    if parsed is None:
        return _QUEUE
    terms, anti = parsed
    nl = ob.labels_of(new)
    ol = ob.labels_of(old) if old is not None else None
    for t in terms:
        key = t.topology_key
        if ol is None:
            if key in nl:
                return _QUEUE
            continue
        if key in nl and (key not in ol or ol[key] != nl[key]):
            return _QUEUE
    for t in anti:
        if ol is None:
            return _QUEUE
        key = t.topology_key
        if key in ol and (key not in nl or ol[key] != nl[key]):
            return _QUEUE
    return _SKIP
