"""TaintToleration: a Pod must tolerate a node's NoSchedule / NoExecute taints, and prefers nodes with
fewer PreferNoSchedule taints it does not tolerate.

Upstream: ``pkg/scheduler/framework/plugins/tainttoleration/taint_toleration.go`` (v1.37.2), with
``component-helpers/scheduling/corev1/helpers.go`` (``FindMatchingUntoleratedTaint``,
``TolerationsTolerateTaint``) and ``plugins/helper/normalize_score.go``.

* PreFilter: nothing to compute (upstream Skips only for a resize-deferred Pod when the Alpha
  ``InPlacePodVerticalScalingSchedulerPreemption`` gate is on; it is off by default in 1.37).
* Filter: the first NoSchedule / NoExecute taint (node order) that no toleration tolerates rejects
  the node, UnschedulableAndUnresolvable ``node(s) had untolerated taint(s)``.
* PreScore: keeps the tolerations whose effect is empty or PreferNoSchedule (never Skips).
* Score: the number of the node's PreferNoSchedule taints those tolerations do not tolerate.
* NormalizeScore: ``DefaultNormalizeScore(100, reverse=True)``: ``100 - 100 * count / max`` (Go
  integer division); every node scores 100 when no node has such a taint.

``Lt`` / ``Gt`` tolerations follow the ``TaintTolerationComparisonOperators`` gate (Alpha, off in 1.37).
A Pod whose ``spec.tolerations`` is malformed (not a list of objects of strings) is rejected by Filter
with UnschedulableAndUnresolvable naming the field and value.

EventsToRegister (upstream ``EventsToRegister`` with QueueingHints on): a Node added or its taints
updated (hint ``isSchedulableAfterNodeChange``: Queue only when the old node, or none for an add,
had a NoSchedule / NoExecute taint the Pod does not tolerate and the new node has none), and the
rejected Pod's tolerations updated (always Queue). A malformed Pod or Node: Queue (upstream's error
path).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from py_scheduler.framework import signers
from py_scheduler.framework.errors import PodParseError
from py_scheduler.framework.events import ActionType, ClusterEvent, ClusterEventWithHint, QueueingHint
from py_scheduler.framework.events import Resource as EventResource
from py_scheduler.framework.handle import Handle
from py_scheduler.framework.interfaces import PreFilterResult
from py_scheduler.framework.lister import SnapshotLister
from py_scheduler.framework.types import MAX_NODE_SCORE, Code, CycleState, NodeInfo, PodInfo, Status
from py_scheduler.plugins.helpers import check_no_args
from py_scheduler.plugins.helpers.normalize import default_normalize_column, default_normalize_score
from py_scheduler.plugins.helpers.queueing_hints import hint_pod_info
from py_scheduler.plugins.helpers.tolerations import (
    EFFECT_NO_EXECUTE,
    EFFECT_NO_SCHEDULE,
    EFFECT_PREFER_NO_SCHEDULE,
    find_untolerated_taint,
    parse_tolerations,
    tolerates_taint,
    toleration_index,
)

NAME = "TaintToleration"
PRE_SCORE_STATE_KEY = "PreScore" + NAME
ERR_REASON_NOT_MATCH = "node(s) had taints that the pod didn't tolerate"
"""``ErrReasonNotMatch`` (exported upstream, used by other components; Filter uses the text below)."""
ERR_REASON_UNTOLERATED = "node(s) had untolerated taint(s)"
"""The Filter reason of v1.37."""

_DO_NOT_SCHEDULE = frozenset({EFFECT_NO_SCHEDULE, EFFECT_NO_EXECUTE})
_SUCCESS = Status.success()
_HAS_TAINTS = attrgetter("has_taints")


@dataclass(slots=True)
class _PreScoreState:
    tolerations_prefer_no_schedule: list[dict[str, Any]]


class TaintToleration:
    """PreFilter / Filter / PreScore / Score / NormalizeScore on node taints (see module docstring).

    ``enable_comparison_operators`` mirrors the ``TaintTolerationComparisonOperators`` feature gate.
    """

    name = NAME

    def sign_pod(self, pod: PodInfo, snapshot: SnapshotLister | None) -> signers.SignResult:
        """``SignPod`` (upstream ``pkg/scheduler/framework/plugins/tainttoleration/taint_toleration.go``): the
        Pod's tolerations. ``snapshot`` is unused by most plugins."""
        return signers.tolerations_fragment(pod)


    def __init__(self, enable_comparison_operators: bool = False) -> None:
        self.enable_comparison_operators = enable_comparison_operators

    @classmethod
    def create(cls, args: dict[str, Any], handle: Handle) -> TaintToleration:
        """Factory; TaintToleration has no args. ``Lt`` / ``Gt`` tolerations follow the process's
        ``TaintTolerationComparisonOperators`` gate (``handle.feature_gates``), as
        upstream's ``New`` takes ``fts.EnableTaintTolerationComparisonOperators``.

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
                                 self.schedulable_after_node_change),
            ClusterEventWithHint(ClusterEvent(EventResource.TARGET_POD, ActionType.UPDATE_POD_TOLERATION),
                                 _queue),
        ]

    def schedulable_after_node_change(self, pod: dict[str, Any], old: Any, new: Any) -> QueueingHint:
        """``isSchedulableAfterNodeChange``: Queue when the node (``old``: None for an add) had an
        untolerated NoSchedule / NoExecute taint and ``new`` has none; Skip otherwise. Queue when
        the Pod's tolerations or a node's taints are malformed."""
        if not isinstance(new, dict) or (old is not None and not isinstance(old, dict)):
            return QueueingHint.QUEUE
        try:
            tolerations = toleration_index(hint_pod_info(pod))
            was_untolerated = True
            if old is not None:
                was_untolerated = find_untolerated_taint(
                    _node_taints(old), tolerations, _DO_NOT_SCHEDULE, self.enable_comparison_operators) is not None
            is_untolerated = find_untolerated_taint(
                _node_taints(new), tolerations, _DO_NOT_SCHEDULE, self.enable_comparison_operators) is not None
        except Exception:  # malformed Pod or Node: upstream's error path requeues
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE if was_untolerated and not is_untolerated else QueueingHint.QUEUE_SKIP

    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> tuple[PreFilterResult, Status]:
        """No-op (upstream only Skips for resize-deferred Pods behind an Alpha gate)."""
        return None, Status.success()

    def filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status:
        """UnschedulableAndUnresolvable ``node(s) had untolerated taint(s)`` when a NoSchedule /
        NoExecute taint is not tolerated; also UnschedulableAndUnresolvable (naming the field) when
        the Pod's tolerations are malformed."""
        try:
            tolerations = toleration_index(pod)
        except PodParseError as exc:
            return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [str(exc)], NAME)
        taint = find_untolerated_taint(node_info.taints, tolerations, _DO_NOT_SCHEDULE,
                                       self.enable_comparison_operators)
        if taint is None:
            return Status.success()
        return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [ERR_REASON_UNTOLERATED], NAME)

    def filter_nodes(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> list[Status] | None:
        """:meth:`filter` for each of ``nodes`` in order (batch form; None: all pass). Nodes
        without taints pass at once."""
        if not any(map(_HAS_TAINTS, nodes)):
            return None
        out: list[Status] | None = None
        for j, ni in enumerate(nodes):
            node = ni.node
            if node is None or not (node.get("spec") or {}).get("taints"):
                continue
            st = self.filter(state, pod, ni)
            if st.code:
                if out is None:
                    out = [_SUCCESS] * len(nodes)
                out[j] = st
        return out

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> Status:
        """Store the tolerations with an empty or PreferNoSchedule effect (never Skips).

        Returns Error (naming the field) for malformed tolerations, as upstream would for any
        PreScore failure.
        """
        try:
            tolerations = parse_tolerations(pod)
        except PodParseError as exc:
            return Status.error(str(exc), NAME)
        prefer = [t for t in tolerations if not t["effect"] or t["effect"] == EFFECT_PREFER_NO_SCHEDULE]
        state.write(PRE_SCORE_STATE_KEY, _PreScoreState(prefer))
        return Status.success()

    def score(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> tuple[int, Status]:
        """Count of the node's PreferNoSchedule taints not tolerated (raw, before normalization).

        Error when PreScore did not run (upstream ``failed to read "PreScoreTaintToleration"``).
        """
        try:
            s: _PreScoreState = state.read(PRE_SCORE_STATE_KEY)
        except KeyError:
            return 0, Status.error(f'failed to read "{PRE_SCORE_STATE_KEY}" from cycleState: not found', NAME)
        count = 0
        for taint in node_info.taints:
            if not isinstance(taint, dict) or taint.get("effect") != EFFECT_PREFER_NO_SCHEDULE:
                continue
            if not tolerates_taint(s.tolerations_prefer_no_schedule, taint, self.enable_comparison_operators):
                count += 1
        return count, Status.success()

    def score_nodes(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> tuple[list[int], Status]:
        """:meth:`score` for each of ``nodes`` in order (batch form); untainted nodes count 0."""
        if PRE_SCORE_STATE_KEY not in state.data:
            return [], Status.error(f'failed to read "{PRE_SCORE_STATE_KEY}" from cycleState: not found', NAME)
        out = [0] * len(nodes)
        if not any(map(_HAS_TAINTS, nodes)):
            return out, Status.success()
        for j, ni in enumerate(nodes):
            node = ni.node
            if node is None or not (node.get("spec") or {}).get("taints"):
                continue
            sc, st = self.score(state, pod, ni)
            if st.code:
                return out[:j], st
            out[j] = sc
        return out, Status.success()

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: dict[str, int]) -> Status:
        """``DefaultNormalizeScore(MaxNodeScore, reverse=True)``."""
        default_normalize_score(MAX_NODE_SCORE, True, scores)
        return Status.success()

    def normalize_column(self, state: CycleState, pod: PodInfo, values: Sequence[int]) -> tuple[list[int], Status]:
        """:meth:`normalize_score` on a column (``BatchNormalizeScorePlugin``)."""
        return default_normalize_column(MAX_NODE_SCORE, True, values), Status.success()


def _queue(pod: dict[str, Any], old: Any, new: Any) -> QueueingHint:
    """``isSchedulableAfterTargetPodTolerationChange``: a toleration added to the rejected Pod may
    make it schedulable (always Queue)."""
    return QueueingHint.QUEUE


def _node_taints(node: dict[str, Any]) -> list[Any]:
    """``node.spec.taints`` (``[]`` when absent).

    Raises:
        TypeError: ``spec`` is not an object or ``taints`` is not a list.
    """
    spec = node.get("spec") or {}
    if not isinstance(spec, dict):
        raise TypeError("node spec is not an object")
    taints = spec.get("taints") or []
    if not isinstance(taints, list):
        raise TypeError("node spec.taints is not a list")
    return taints
