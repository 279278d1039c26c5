"""NodeUnschedulable: a cordoned node (``spec.unschedulable: true``) takes only Pods that tolerate
the ``node.kubernetes.io/unschedulable:NoSchedule`` taint.

Upstream: ``pkg/scheduler/framework/plugins/nodeunschedulable/node_unschedulable.go`` (v1.37.2).
Filter reason ``node(s) were unschedulable`` (UnschedulableAndUnresolvable). PreFilter is a no-op (it
Skips upstream only for resize-deferred Pods behind the Alpha, default-off
``InPlacePodVerticalScalingSchedulerPreemption`` gate). Malformed ``spec.tolerations`` on a cordoned
node's candidate Pod give UnschedulableAndUnresolvable naming the field.

EventsToRegister (upstream ``EventsToRegister`` with QueueingHints on): a Node added or its taints
updated (a cordon / uncordon updates the ``node.kubernetes.io/unschedulable`` taint too; hint
``isSchedulableAfterNodeChange``: Queue when a schedulable node is added or an unschedulable node
becomes schedulable), and the rejected Pod's tolerations updated (hint
``isSchedulableAfterTargetPodTolerationChange``: Queue when the new Pod tolerates the unschedulable
taint). A malformed Pod or Node: Queue (upstream's error path).
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any

from py_scheduler.framework import signers
from py_scheduler.framework.errors import PodParseError
from py_scheduler.framework.events import ActionType, ClusterEvent, ClusterEventWithHint, QueueingHint
from py_scheduler.framework.events import Resource as EventResource
from py_scheduler.framework.handle import Handle
from py_scheduler.framework.interfaces import PreFilterResult
from py_scheduler.framework.lister import SnapshotLister
from py_scheduler.framework.types import Code, CycleState, NodeInfo, PodInfo, Status
from py_scheduler.plugins.helpers import check_no_args
from py_scheduler.plugins.helpers.queueing_hints import hint_pod_info
from py_scheduler.plugins.helpers.tolerations import (
    EFFECT_NO_SCHEDULE,
    parse_tolerations,
    tolerates_taint,
)

NAME = "NodeUnschedulable"
ERR_REASON_UNKNOWN_CONDITION = "node(s) had unknown conditions"
ERR_REASON_UNSCHEDULABLE = "node(s) were unschedulable"
TAINT_NODE_UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
_UNSCHEDULABLE_TAINT = {"key": TAINT_NODE_UNSCHEDULABLE, "effect": EFFECT_NO_SCHEDULE}
_UNSCHEDULABLE = attrgetter("unschedulable")


class NodeUnschedulable:
    """PreFilter (no-op) and Filter on ``node.spec.unschedulable``."""

    name = NAME

    def sign_pod(self, pod: PodInfo, snapshot: SnapshotLister | None) -> signers.SignResult:
        """``SignPod`` (upstream ``pkg/scheduler/framework/plugins/nodeunschedulable/node_unschedulable.go``): the
        Pod's tolerations. ``snapshot`` is unused by most plugins."""
        return signers.tolerations_fragment(pod)


    def __init__(self, enable_comparison_operators: bool = False) -> None:
        self.enable_comparison_operators = enable_comparison_operators

    @classmethod
    def create(cls, args: dict[str, Any], handle: Handle) -> NodeUnschedulable:
        """Factory; NodeUnschedulable has no args.

        Raises:
            ConfigError: args other than ``apiVersion`` / ``kind``.
        """
        check_no_args(NAME, args)
        return cls(handle.feature_gates.taint_toleration_comparison_operators)

    # -- EnqueueExtensions --------------------------------------------------------------------------
    def events_to_register(self) -> list[ClusterEventWithHint]:
        """``EventsToRegister`` (see the module docstring)."""
        return [
            ClusterEventWithHint(ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_TAINT),
                                 _schedulable_after_node_change),
            ClusterEventWithHint(ClusterEvent(EventResource.TARGET_POD, ActionType.UPDATE_POD_TOLERATION),
                                 self.schedulable_after_toleration_change),
        ]

    def schedulable_after_toleration_change(self, pod: dict[str, Any], old: Any, new: Any) -> QueueingHint:
        """``isSchedulableAfterTargetPodTolerationChange``: Queue when the updated Pod ``new``
        tolerates ``node.kubernetes.io/unschedulable:NoSchedule``, Skip otherwise; Queue when it is
        not a Pod or its tolerations are malformed."""
        if not isinstance(new, dict):
            return QueueingHint.QUEUE
        try:
            tolerations = parse_tolerations(hint_pod_info(new))
        except Exception:  # malformed Pod: upstream's error path requeues
            return QueueingHint.QUEUE
        if tolerates_taint(tolerations, _UNSCHEDULABLE_TAINT, self.enable_comparison_operators):
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP

    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> tuple[PreFilterResult, Status]:
        """No-op."""
        return None, Status.success()

    def filter_nodes(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> list[Status] | None:
        """:meth:`filter` for each of ``nodes`` in order (batch form; None: all pass)."""
        if not any(map(_UNSCHEDULABLE, nodes)):
            return None
        out: list[Status] | None = None
        for j, ni in enumerate(nodes):
            node = ni.node
            if node is None or not (node.get("spec") or {}).get("unschedulable"):
                continue
            st = self.filter(state, pod, ni)
            if st.code:
                if out is None:
                    out = [Status.success()] * len(nodes)
                out[j] = st
        return out

    def filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status:
        """Success unless the node is unschedulable and the Pod does not tolerate
        ``node.kubernetes.io/unschedulable:NoSchedule``."""
        node = node_info.node or {}
        if not (node.get("spec") or {}).get("unschedulable"):
            return Status.success()
        try:
            tolerations = parse_tolerations(pod)
        except PodParseError as exc:
            return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [str(exc)], NAME)
        if tolerates_taint(tolerations, _UNSCHEDULABLE_TAINT, self.enable_comparison_operators):
            return Status.success()
        return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [ERR_REASON_UNSCHEDULABLE], NAME)


def _unschedulable(node: dict[str, Any]) -> bool:
    spec = node.get("spec")
    return bool(spec.get("unschedulable")) if isinstance(spec, dict) else False


def _schedulable_after_node_change(pod: dict[str, Any], old: Any, new: Any) -> QueueingHint:
    """``isSchedulableAfterNodeChange``: Queue when ``new`` is schedulable and ``old`` was
    unschedulable or absent (an add); Skip otherwise; Queue when an object is not a Node."""
    if not isinstance(new, dict) or (old is not None and not isinstance(old, dict)):
        return QueueingHint.QUEUE
    if not _unschedulable(new) and (old is None or _unschedulable(old)):
        return QueueingHint.QUEUE
    return QueueingHint.QUEUE_SKIP
