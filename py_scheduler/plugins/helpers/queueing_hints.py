"""Queueing hints of NodeAffinity, PodTopologySpread and InterPodAffinity, kept apart from their
Filter / Score code.

Each function is ``(pod, old, new) -> QueueingHint`` (``fwk.QueueingHintFn``): ``pod`` is the rejected
Pod (Kubernetes JSON), ``old`` / ``new`` the changed object before and after (``old`` is None for an
add, ``new`` is None for a delete). Upstream returns ``Queue`` with an error for objects it cannot
read; these return ``Queue`` for anything malformed, which never strands a Pod.
"""

from __future__ import annotations

from typing import Any

from py_scheduler.framework.events import QueueingHint
from py_scheduler.framework.types import PodInfo
from py_scheduler.plugins.helpers.node_selector import NodeSelector, RequiredNodeAffinity, required_node_affinity

__all__ = ["node_affinity_after_node_change"]

_QUEUE = QueueingHint.QUEUE
_SKIP = QueueingHint.QUEUE_SKIP


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
        required = required_node_affinity(PodInfo(pod))
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
