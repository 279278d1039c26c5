"""The PodTopologySpread plugin (upstream ``pkg/scheduler/framework/plugins/podtopologyspread/plugin.go``:
args, system default constraints, ``EventsToRegister``, ``SignPod``; ``apis/config/validation/
validation_pluginargs.go`` ``ValidatePodTopologySpreadArgs``); Filter in :mod:`.filtering`, Score in
:mod:`.scoring`."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from py_scheduler.framework import signers
from py_scheduler.framework.errors import ConfigError, PodParseError
from py_scheduler.framework.events import ActionType, ClusterEvent, ClusterEventWithHint
from py_scheduler.framework.events import Resource as EventResource
from py_scheduler.framework.handle import Handle
from py_scheduler.framework.lister import SnapshotLister
from py_scheduler.framework.objects import Obj
from py_scheduler.framework.types import PodInfo, Status
from py_scheduler.plugins.helpers.node_selector import Requirement
from py_scheduler.plugins.helpers.queueing_hints import (
    spread_after_assigned_pod_change,
    spread_after_node_change,
    spread_after_target_pod_change,
)
from py_scheduler.plugins.helpers.spread import InformerObjects
from py_scheduler.plugins.pod_topology_spread.common import (
    DO_NOT_SCHEDULE,
    LIST_DEFAULTING,
    NAME,
    SCHEDULE_ANYWAY,
    SYSTEM_DEFAULT_CONSTRAINTS,
    SYSTEM_DEFAULTING,
    TopologySpreadConstraint,
    _pod_constraints,
    filter_topology_spread_constraints,
)
from py_scheduler.plugins.pod_topology_spread.count_memo import SelectorKey, _CountMemo
from py_scheduler.plugins.pod_topology_spread.filtering import Filtering
from py_scheduler.plugins.pod_topology_spread.scoring import Scoring

# -- args -----------------------------------------------------------------------------------------


def _validate_label_name(value: str, path: str) -> list[str]:
    """``metav1validation.ValidateLabelName`` (qualified-name syntax)."""
    _, errs = Requirement.new(value, "Exists", [], path)
    return [e.replace(f"{path}.key", path) for e in errs]


def validate_args(args: Mapping[str, Any]) -> tuple[list[Obj], str]:
    """``ValidatePodTopologySpreadArgs`` after v1 defaulting (``defaultingType`` defaults to
    ``System``). Returns (default constraints, defaulting type).

    Raises:
        ConfigError: unknown field, ``defaultingType`` not System / List, System with
        ``defaultConstraints``, a default constraint with ``maxSkew <= 0``, an empty or invalid
        ``topologyKey``, a ``whenUnsatisfiable`` other than DoNotSchedule / ScheduleAnyway, a
        ``labelSelector`` (forbidden), or a repeated {topologyKey, whenUnsatisfiable} pair. All
        errors are joined, each naming its field.
    """
    if not isinstance(args, Mapping):
        raise ConfigError(f"args: Invalid value: {args!r}: expected an object")
    errs: list[str] = []
    for k in args:
        if k not in ("defaultConstraints", "defaultingType", "apiVersion", "kind"):
            errs.append(f"{k}: unknown field")
    dt = args.get("defaultingType")
    dt = SYSTEM_DEFAULTING if dt in (None, "") else dt
    raw = args.get("defaultConstraints")
    if raw is None:
        raw = []
    if not isinstance(raw, list):
        raise ConfigError(f"defaultConstraints: Invalid value: {raw!r}: expected a list")
    if dt not in (SYSTEM_DEFAULTING, LIST_DEFAULTING):
        errs.append(f'defaultingType: Unsupported value: "{dt}": supported values: "System", "List"')
    elif dt == SYSTEM_DEFAULTING and raw:
        errs.append('defaultingType: Invalid value: "System": when .defaultConstraints are not empty')
    seen: list[tuple[object, object]] = []
    for i, c in enumerate(raw):
        p = f"defaultConstraints[{i}]"
        if not isinstance(c, Mapping):
            errs.append(f"{p}: Invalid value: {c!r}: expected a TopologySpreadConstraint object")
            continue
        skew = c.get("maxSkew", 0)
        if not isinstance(skew, int) or isinstance(skew, bool) or skew <= 0:
            errs.append(f"{p}.maxSkew: Invalid value: {skew!r}: not in valid range (0, inf)")
        key = c.get("topologyKey") or ""
        if not isinstance(key, str):
            errs.append(f"{p}.topologyKey: Invalid value: {key!r}: expected a string")
        elif not key:
            errs.append(f"{p}.topologyKey: Required value: can not be empty")
        else:
            errs.extend(_validate_label_name(key, f"{p}.topologyKey"))
        wu = c.get("whenUnsatisfiable") or ""
        if not wu:
            errs.append(f"{p}.whenUnsatisfiable: Required value: can not be empty")
        elif wu not in (DO_NOT_SCHEDULE, SCHEDULE_ANYWAY):
            errs.append(f'{p}.whenUnsatisfiable: Unsupported value: "{wu}": supported values: '
                        '"DoNotSchedule", "ScheduleAnyway"')
        if c.get("labelSelector") is not None:
            errs.append(f"{p}.labelSelector: Forbidden: constraint must not define a selector, as they deduced "
                        "for each pod")
        if (key, wu) in seen:
            errs.append(f'{p}: Duplicate value: "{{{key}, {wu}}}"')
        seen.append((key, wu))
    if errs:
        raise ConfigError(errs[0] if len(errs) == 1 else "[" + ", ".join(errs) + "]")
    if dt == SYSTEM_DEFAULTING:
        return [dict(c) for c in SYSTEM_DEFAULT_CONSTRAINTS], dt
    return [dict(c) for c in raw], str(dt)


# -- the plugin -----------------------------------------------------------------------------------


class PodTopologySpread(Filtering, Scoring):
    """PreFilter / Filter (DoNotSchedule) and PreScore / Score / NormalizeScore (ScheduleAnyway),
    plus PreFilterExtensions (add_pod / remove_pod).

    Args (``pluginConfig.args``): ``defaultingType`` (``System``, the default, or ``List``) and
    ``defaultConstraints`` (List only): constraints applied to Pods that have none, with the
    selector deduced from the Services / ReplicaSets / StatefulSets / ReplicationControllers that
    select the Pod (``snapshot.objects``).
    """

    name = NAME

    def sign_pod(self, pod: PodInfo, snapshot: SnapshotLister | None) -> signers.SignResult:
        """``SignPod`` (upstream ``pkg/scheduler/framework/plugins/podtopologyspread/plugin.go``): no fragment;
        refuses Pods with topologySpreadConstraints and every Pod when the profile has default constraints
        (``defaultingType: System``, the default, has them: batching is then off). ``snapshot`` is unused by
        most plugins."""
        if pod.spec.get("topologySpreadConstraints"):
            return signers.cannot_sign("pods with topology constraints are not signable")
        if self.default_constraints:
            return signers.cannot_sign("pods with default topology constraints are not signable")
        return [], Status.success()


    def __init__(self, default_constraints: list[Obj] | None = None,
                 defaulting_type: str = SYSTEM_DEFAULTING, comparison_operators: bool = False,
                 handle: Handle | None = None) -> None:
        """Prefer :meth:`create`, which validates. ``default_constraints`` are
        TopologySpreadConstraint dicts without a labelSelector; ``comparison_operators`` is the
        TaintTolerationComparisonOperators gate (``fts.EnableTaintTolerationComparisonOperators``);
        ``handle``'s informer objects give the queueing hints the default constraints' selector."""
        self.handle = handle
        self.comparison_operators = comparison_operators
        self.system_defaulted = defaulting_type == SYSTEM_DEFAULTING
        raw = SYSTEM_DEFAULT_CONSTRAINTS if self.system_defaulted else (default_constraints or [])
        self.default_constraints: list[Obj] = [dict(c) for c in raw]
        where = "pluginConfig.args.defaultConstraints"
        self._default_hard = filter_topology_spread_constraints(self.default_constraints, {}, DO_NOT_SCHEDULE,
                                                                where)
        self._default_soft = filter_topology_spread_constraints(self.default_constraints, {}, SCHEDULE_ANYWAY,
                                                                where)
        self._count_memos: OrderedDict[tuple[tuple[str, ...], str, SelectorKey | None, str], _CountMemo] = (
            OrderedDict())

    @classmethod
    def create(cls, args: dict[str, Any], handle: Handle) -> PodTopologySpread:
        """Build from ``pluginConfig.args``.

        Raises:
            ConfigError: see :func:`validate_args`.
        """
        constraints, dt = validate_args(args or {})
        try:
            return cls(constraints, dt, handle.feature_gates.taint_toleration_comparison_operators, handle)
        except PodParseError as exc:
            raise ConfigError(str(exc)) from exc

    # -- EnqueueExtensions (self-contained; hints in helpers/queueing_hints.py) ---------------------
    def events_to_register(self) -> list[ClusterEventWithHint]:
        """``EventsToRegister`` (``podtopologyspread/plugin.go``, QueueingHints on): an assigned Pod
        added, relabelled or deleted; the rejected Pod's labels or tolerations updated; a Node
        added, deleted, relabelled or retainted; each with upstream's hint
        (:mod:`py_scheduler.plugins.helpers.queueing_hints`)."""
        cons = self._hint_constraints
        return [
            ClusterEventWithHint(ClusterEvent(EventResource.ASSIGNED_POD,
                                              ActionType.ADD | ActionType.UPDATE_POD_LABEL | ActionType.DELETE),
                                 partial(spread_after_assigned_pod_change, cons)),
            ClusterEventWithHint(ClusterEvent(EventResource.TARGET_POD,
                                              ActionType.UPDATE_POD_TOLERATION | ActionType.UPDATE_POD_LABEL),
                                 partial(spread_after_target_pod_change, cons)),
            ClusterEventWithHint(ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.DELETE
                                              | ActionType.UPDATE_NODE_LABEL | ActionType.UPDATE_NODE_TAINT),
                                 partial(spread_after_node_change, cons)),
        ]

    def _hint_constraints(self, pod: PodInfo) -> Sequence[TopologySpreadConstraint] | None:
        """The Pod's DoNotSchedule constraints for the queueing hints (upstream ``getConstraints``):
        its own when it has any; none when the profile has no DoNotSchedule default constraint;
        otherwise the default ones with the selector of the Services / ReplicaSets... selecting the
        Pod now (the informers' objects, ``buildDefaultConstraints``). None (the hints Queue, a
        superset) when those objects cannot be read (no Handle).

        Raises:
            PodParseError: the Pod's constraints are malformed.
        """
        pc = _pod_constraints(pod)
        if pc.explicit:
            return pc.hard
        if not self._default_hard:
            return ()
        if self.handle is None:
            return None
        try:
            return self._build_default_constraints(pod, DO_NOT_SCHEDULE, InformerObjects(self.handle.objects))
        except Exception:  # the informers not connected (a test), an object that does not parse: a superset
            return None
