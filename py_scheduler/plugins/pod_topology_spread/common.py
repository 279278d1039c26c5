"""PodTopologySpread's constraints (upstream ``pkg/scheduler/framework/plugins/podtopologyspread/
common.go``: constraint parsing, ``matchLabelKeys`` merge, node inclusion policies,
``countPodsMatchSelector``, ``getConstraints`` / ``buildDefaultConstraints``) and names."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from py_scheduler.framework.errors import PodParseError
from py_scheduler.framework.lister import ClusterObjectsLister, objects_of
from py_scheduler.framework.memo import PodInput, PodMemo
from py_scheduler.framework.objects import Obj
from py_scheduler.framework.types import CycleState, PodInfo, Status
from py_scheduler.plugins.helpers.node_selector import (
    LabelSelector,
    RequiredNodeAffinity,
    parse_label_selector,
    required_node_affinity,
)
from py_scheduler.plugins.helpers.spread import SelectingObjects, default_selector
from py_scheduler.plugins.helpers.tolerations import (
    EFFECT_NO_EXECUTE,
    EFFECT_NO_SCHEDULE,
    find_untolerated_taint,
    parse_tolerations,
)

NAME = "PodTopologySpread"
ERR_REASON_CONSTRAINTS_NOT_MATCH = "node(s) didn't match pod topology spread constraints"
"""``ErrReasonConstraintsNotMatch`` (Filter, Unschedulable)."""
ERR_REASON_NODE_LABEL_NOT_MATCH = ERR_REASON_CONSTRAINTS_NOT_MATCH + " (missing required label)"
"""``ErrReasonNodeLabelNotMatch`` (Filter, UnschedulableAndUnresolvable)."""
PRE_FILTER_STATE_KEY = "PreFilter" + NAME
PRE_SCORE_STATE_KEY = "PreScore" + NAME

LABEL_HOSTNAME = "kubernetes.io/hostname"
LABEL_TOPOLOGY_ZONE = "topology.kubernetes.io/zone"
DO_NOT_SCHEDULE = "DoNotSchedule"
SCHEDULE_ANYWAY = "ScheduleAnyway"
POLICY_HONOR = "Honor"
POLICY_IGNORE = "Ignore"
SYSTEM_DEFAULTING = "System"
LIST_DEFAULTING = "List"
MAX_INT32 = 2**31 - 1
_INVALID_SCORE = -1
_DO_NOT_SCHEDULE_EFFECTS = frozenset({EFFECT_NO_SCHEDULE, EFFECT_NO_EXECUTE})
_SUCCESS = Status.success()

SYSTEM_DEFAULT_CONSTRAINTS: list[Obj] = [
    {"topologyKey": LABEL_HOSTNAME, "whenUnsatisfiable": SCHEDULE_ANYWAY, "maxSkew": 3},
    {"topologyKey": LABEL_TOPOLOGY_ZONE, "whenUnsatisfiable": SCHEDULE_ANYWAY, "maxSkew": 5},
]
"""``systemDefaultConstraints``: used when ``defaultingType`` is ``System`` (the default)."""


# -- constraints ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TopologySpreadConstraint:
    """``topologySpreadConstraint``: one parsed constraint.

    ``max_skew`` and ``min_domains`` are counts of Pods / domains; ``selector`` already has the
    ``matchLabelKeys`` values of the incoming Pod merged in; the policies are ``Honor`` or
    ``Ignore`` (any other string acts as ``Ignore``, as upstream).
    """

    max_skew: int
    topology_key: str
    selector: LabelSelector
    min_domains: int = 1
    node_affinity_policy: str = POLICY_HONOR
    node_taints_policy: str = POLICY_IGNORE

    def with_selector(self, selector: LabelSelector) -> TopologySpreadConstraint:
        return TopologySpreadConstraint(self.max_skew, self.topology_key, selector, self.min_domains,
                                        self.node_affinity_policy, self.node_taints_policy)


def _int_field(c: Mapping[str, Any], key: str, where: str, default: int | None = None) -> int:
    v = c.get(key)
    if v is None and default is not None:
        return default
    if not isinstance(v, int) or isinstance(v, bool):
        raise PodParseError(f"{where}.{key}", v, "expected an integer")
    return v


def _str_field(c: Mapping[str, Any], key: str, where: str) -> str:
    v = c.get(key)
    if v is None:
        return ""
    if not isinstance(v, str):
        raise PodParseError(f"{where}.{key}", v, "expected a string")
    return v


def filter_topology_spread_constraints(raw: Sequence[object], pod_labels: Mapping[str, str], action: str,
                                       where: str = "spec.topologySpreadConstraints",
                                       ) -> list[TopologySpreadConstraint]:
    """``filterTopologySpreadConstraints``: the constraints of ``raw`` whose ``whenUnsatisfiable``
    equals ``action``, parsed.

    ``matchLabelKeys`` present in ``pod_labels`` are ANDed into the selector as equality
    requirements (a ``None`` labelSelector stays "select nothing"); ``minDomains`` defaults to 1,
    ``nodeAffinityPolicy`` to ``Honor``, ``nodeTaintsPolicy`` to ``Ignore``.

    Raises:
        PodParseError: a constraint is not an object, ``maxSkew`` / ``minDomains`` is not an
        integer, a string field is not a string, or the label selector is invalid (field named
        like ``spec.topologySpreadConstraints[1].labelSelector``).
    """
    out: list[TopologySpreadConstraint] = []
    for i, c in enumerate(raw):
        w = f"{where}[{i}]"
        if not isinstance(c, Mapping):
            raise PodParseError(w, c, "expected a TopologySpreadConstraint object")
        if _str_field(c, "whenUnsatisfiable", w) != action:
            continue
        sel_raw = c.get("labelSelector")
        try:
            selector = parse_label_selector(sel_raw)
        except ValueError as exc:
            raise PodParseError(f"{w}.labelSelector", sel_raw, str(exc)) from exc
        keys = c.get("matchLabelKeys") or []
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise PodParseError(f"{w}.matchLabelKeys", keys, "expected a list of label keys")
        if keys:
            match_labels = {k: pod_labels[k] for k in keys if k in pod_labels}
            if match_labels and not selector.nothing:
                selector = LabelSelector(LabelSelector.from_set(match_labels).requirements + selector.requirements)
        out.append(TopologySpreadConstraint(
            max_skew=_int_field(c, "maxSkew", w),
            topology_key=_str_field(c, "topologyKey", w),
            selector=selector,
            min_domains=_int_field(c, "minDomains", w, default=1),
            node_affinity_policy=_str_field(c, "nodeAffinityPolicy", w) or POLICY_HONOR,
            node_taints_policy=_str_field(c, "nodeTaintsPolicy", w) or POLICY_IGNORE,
        ))
    return out


@dataclass(frozen=True, slots=True)
class _PodConstraints:
    """A Pod's own constraints, parsed once (memoized on the PodInfo)."""

    explicit: bool
    hard: tuple[TopologySpreadConstraint, ...]
    soft: tuple[TopologySpreadConstraint, ...]


def _pod_constraints(pod: PodInfo) -> _PodConstraints:
    """Parse ``spec.topologySpreadConstraints`` once (both actions) and memoize it.

    Raises:
        PodParseError: see :func:`filter_topology_spread_constraints` (memoized too).
    """
    return _CONSTRAINTS_MEMO.get(pod, _parse_pod_constraints)


def _parse_pod_constraints(pod: PodInfo) -> _PodConstraints:
    raw = pod.spec.get("topologySpreadConstraints")
    if raw is not None and not isinstance(raw, list):
        raise PodParseError("spec.topologySpreadConstraints", raw, "expected a list")
    if not raw:
        return _PodConstraints(False, (), ())
    return _PodConstraints(
        True,
        tuple(filter_topology_spread_constraints(raw, pod.labels, DO_NOT_SCHEDULE)),
        tuple(filter_topology_spread_constraints(raw, pod.labels, SCHEDULE_ANYWAY)))


_CONSTRAINTS_MEMO: PodMemo[_PodConstraints] = PodMemo(
    NAME, PodInput.SPEC | PodInput.LABELS, (PodParseError,))
"""``spec.topologySpreadConstraints`` (matchLabelKeys read the Pod's labels)."""


def node_labels_match_spread_constraints(labels: Mapping[str, str],
                                         constraints: Iterable[TopologySpreadConstraint]) -> bool:
    """``nodeLabelsMatchSpreadConstraints``: the node has every constraint's topology key."""
    return all(c.topology_key in labels for c in constraints)


def count_pods_match_selector(pods: Iterable[PodInfo], selector: LabelSelector, namespace: str) -> int:
    """``countPodsMatchSelector``: Pods in ``namespace``, not terminating (no
    ``metadata.deletionTimestamp``), whose labels match; 0 for a select-everything selector."""
    if selector.is_everything:
        return 0
    n = 0
    for p in pods:
        if p.namespace != namespace or (p.pod.get("metadata") or {}).get("deletionTimestamp") is not None:
            continue
        if selector.matches(p.labels):
            n += 1
    return n


class _InclusionContext:
    """The incoming Pod's required node affinity and tolerations, for ``matchNodeInclusionPolicies``
    (tolerations are parsed only when a constraint honors taints)."""

    __slots__ = ("affinity", "comparison_operators", "pod", "tolerations")

    def __init__(self, pod: PodInfo, constraints: Iterable[TopologySpreadConstraint],
                 comparison_operators: bool = False) -> None:
        """``comparison_operators``: the TaintTolerationComparisonOperators gate.
        Raises PodParseError: malformed node selector / affinity / tolerations."""
        self.pod = pod
        self.comparison_operators = comparison_operators
        self.affinity: RequiredNodeAffinity = required_node_affinity(pod)
        self.tolerations: list[Obj] = []
        if any(c.node_taints_policy == POLICY_HONOR for c in constraints):
            self.tolerations = parse_tolerations(pod)

    def needs_match(self, c: TopologySpreadConstraint) -> bool:
        """False when :meth:`match` is True for every node: affinity not honored (or the Pod has
        neither nodeSelector nor required node affinity) and taints not honored."""
        honors_affinity = c.node_affinity_policy == POLICY_HONOR and (
            self.affinity.label_selector is not None or self.affinity.node_selector is not None)
        return honors_affinity or c.node_taints_policy == POLICY_HONOR

    def match(self, c: TopologySpreadConstraint, node: Obj | None) -> bool:
        """``matchNodeInclusionPolicies``."""
        if c.node_affinity_policy == POLICY_HONOR and not self.affinity.match(node):
            return False
        if c.node_taints_policy == POLICY_HONOR:
            taints = ((node or {}).get("spec") or {}).get("taints") or []
            if find_untolerated_taint(taints, self.tolerations, _DO_NOT_SCHEDULE_EFFECTS,
                                      self.comparison_operators) is not None:
                return False
        return True


def _objects(state: CycleState) -> ClusterObjectsLister:
    return objects_of(state.snapshot)


class SpreadBase:
    """The constraints of a Pod: its own or the profile's defaults (``common.go``)."""

    _default_hard: list[TopologySpreadConstraint]
    _default_soft: list[TopologySpreadConstraint]
    comparison_operators: bool

    def _build_default_constraints(self, pod: PodInfo, action: str,
                                   objects: SelectingObjects) -> list[TopologySpreadConstraint]:
        """``buildDefaultConstraints``: the default constraints of ``action`` with the Pod's
        default selector; none when nothing selects the Pod."""
        base = self._default_hard if action == DO_NOT_SCHEDULE else self._default_soft
        if not base:
            return []
        selector = default_selector(pod, objects)
        if selector.is_everything:
            return []
        return [c.with_selector(selector) for c in base]

    def get_constraints(self, pod: PodInfo, action: str,
                        objects: ClusterObjectsLister) -> list[TopologySpreadConstraint]:
        """The Pod's constraints of ``action`` (``DoNotSchedule`` / ``ScheduleAnyway``): its own if
        it has any, else the default ones (``getConstraints`` / ``initPreScoreState``).

        Raises:
            PodParseError: the Pod's constraints are malformed.
        """
        pc = _pod_constraints(pod)
        if pc.explicit:
            return list(pc.hard if action == DO_NOT_SCHEDULE else pc.soft)
        return self._build_default_constraints(pod, action, objects)
