"""PodTopologySpread: spread matching Pods evenly across topology domains.

Upstream (kube-scheduler v1.37.2):
``pkg/scheduler/framework/plugins/podtopologyspread/common.go`` (constraint parsing,
``matchLabelKeys`` merge, node inclusion policies, ``countPodsMatchSelector``),
``filtering.go`` (PreFilter / Filter / AddPod / RemovePod, critical paths, ``minDomains``),
``scoring.go`` (PreScore / Score / NormalizeScore, ``log(size+2)`` topology weights),
``plugin.go`` (args, system default constraints, reason strings),
``helper/spread.go`` (default selector, see :mod:`py_scheduler.plugins.helpers.spread`) and
``apis/config/validation/validation_pluginargs.go`` (``ValidatePodTopologySpreadArgs``).

Feature gates at their v1.37 defaults: ``NodeInclusionPolicyInPodTopologySpread`` (GA, on),
``MatchLabelKeysInPodTopologySpread`` (on), ``TaintTolerationComparisonOperators`` (off),
``InPlacePodVerticalScalingSchedulerPreemption`` (off, so no resize-deferred Skip).

Float arithmetic follows Go exactly: ``math.Log`` is Go's own algorithm (:func:`go_log`, which
differs from C's ``log`` in the last bit for some inputs), ``math.Round`` rounds halves away from
zero (:func:`go_round`), float -> int64 conversions truncate.

Deviation for bad input only: a Pod whose ``topologySpreadConstraints`` cannot be parsed (a
malformed label selector, a non-integer ``maxSkew``...) is rejected at PreFilter as
UnschedulableAndUnresolvable with a message naming the field and value (upstream reports an
internal error; the API server never lets such a Pod through).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from operator import attrgetter
from typing import Any

import numpy as np
import numpy.typing as npt

from py_scheduler.framework import features, signers
from py_scheduler.framework.errors import ConfigError
from py_scheduler.framework.events import ActionType, ClusterEvent, ClusterEventWithHint
from py_scheduler.framework.events import Resource as EventResource
from py_scheduler.framework.gomath import go_div, go_log, go_round
from py_scheduler.framework.handle import Handle
from py_scheduler.framework.lister import ClusterObjectsLister, SnapshotLister, objects_of
from py_scheduler.framework.memo import PodInput, PodMemo
from py_scheduler.framework.types import (
    MAX_NODE_SCORE,
    Code,
    CycleState,
    NodeInfo,
    PodInfo,
    PodParseError,
    Status,
)
from py_scheduler.plugins.helpers.node_selector import (
    LabelSelector,
    RequiredNodeAffinity,
    Requirement,
    parse_label_selector,
    required_node_affinity,
)
from py_scheduler.plugins.helpers.queueing_hints import (
    spread_after_assigned_pod_change,
    spread_after_node_change,
    spread_after_target_pod_change,
)
from py_scheduler.plugins.helpers.spread import default_selector
from py_scheduler.plugins.helpers.tolerations import (
    EFFECT_NO_EXECUTE,
    EFFECT_NO_SCHEDULE,
    find_untolerated_taint,
    parse_tolerations,
)

__all__ = [
    "ERR_REASON_CONSTRAINTS_NOT_MATCH",
    "ERR_REASON_NODE_LABEL_NOT_MATCH",
    "NAME",
    "PRE_FILTER_STATE_KEY",
    "PRE_SCORE_STATE_KEY",
    "SYSTEM_DEFAULT_CONSTRAINTS",
    "PodTopologySpread",
    "PreFilterState",
    "PreScoreState",
    "TopologySpreadConstraint",
]

Obj = dict[str, Any]

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

    __slots__ = ("affinity", "pod", "tolerations")

    def __init__(self, pod: PodInfo, constraints: Iterable[TopologySpreadConstraint]) -> None:
        """Raises PodParseError: malformed node selector / affinity / tolerations."""
        self.pod = pod
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
                                      features.enabled(features.TAINT_TOLERATION_COMPARISON_OPERATORS)) is not None:
                return False
        return True


# -- per-node count memo (no upstream counterpart: issue 9) ----------------------------------------

_GENERATION = attrgetter("generation")
_COUNT_MEMOS = 16
"""Count memos kept per plugin instance (LRU): one per (keys, selector, namespace) in use."""

SelectorKey = tuple[bool, tuple[tuple[str, str, frozenset[str]], ...]]


def selector_key(sel: LabelSelector) -> SelectorKey:
    """A hashable value identifying what ``sel`` matches (two Pods' equal selectors share it)."""
    return sel.nothing, tuple((r.key, r.op, r.values) for r in sel.requirements)


class _CountMemo:
    """PreFilter's per-node contributions for one (constraint keys, topology key, selector,
    namespace), in the order of the node list they were computed for.

    ``gens[i]`` is the ``NodeInfo.generation`` position ``i`` reflects (generations are unique and
    bumped on every NodeInfo change, a snapshot clone keeps its source's), ``values[i]`` the node's
    topology value (None: no Node object or a constraint key missing, the node is not counted),
    ``counts[i]`` its matching Pods; ``totals`` / ``domains`` are the sums per topology value (Pods,
    nodes). Node objects are assumed immutable (the informers replace them), as elsewhere.
    """

    __slots__ = ("counts", "domains", "gen_list", "gens", "pos_by_gen", "totals", "values")

    def __init__(self) -> None:
        self.gens: npt.NDArray[np.int64] = np.zeros(0, np.int64)
        self.gen_list: list[int] = []
        self.pos_by_gen: dict[int, int] = {}
        self.values: list[str | None] = []
        self.counts: list[int] = []
        self.totals: dict[str, int] = {}
        self.domains: dict[str, int] = {}

    def _set(self, i: int, value: str | None, count: int) -> None:
        old = self.values[i]
        if old is not None:
            self.totals[old] -= self.counts[i]
            d = self.domains[old] - 1
            if d:
                self.domains[old] = d
            else:
                del self.domains[old]
                del self.totals[old]
        self.values[i] = value
        self.counts[i] = count
        if value is not None:
            self.totals[value] = self.totals.get(value, 0) + count
            self.domains[value] = self.domains.get(value, 0) + 1

    def update(self, nodes: list[NodeInfo], keys: tuple[str, ...], key: str, selector: LabelSelector | None,
               namespace: str) -> dict[str, int]:
        """Bring the memo up to date with ``nodes`` (only positions whose generation changed are
        re-read; all of them when the node count changed) and return a copy of the totals."""
        n = len(nodes)
        gens = np.fromiter(map(_GENERATION, nodes), np.int64, n)
        full = len(self.gens) != n
        if full:
            self.values = [None] * n
            self.counts = [0] * n
            self.totals = {}
            self.domains = {}
            self.gen_list = gens.tolist()
            self.pos_by_gen = dict(zip(self.gen_list, range(n), strict=True))
            changed: Iterable[int] = range(n)
        else:
            changed = np.flatnonzero(gens != self.gens).tolist()
        gen_list, pos_by_gen = self.gen_list, self.pos_by_gen
        for i in changed:
            ni = nodes[i]
            if not full:
                if pos_by_gen.get(gen_list[i]) == i:
                    del pos_by_gen[gen_list[i]]
                gen_list[i] = ni.generation
                pos_by_gen[ni.generation] = i
            node = ni.node
            value: str | None = None
            cnt = 0
            if node is not None:
                labels = (node.get("metadata") or {}).get("labels") or {}
                if all(k in labels for k in keys):
                    value = labels[key]
                    if selector is not None:
                        for p in ni.pods:
                            if p.namespace == namespace and selector.matches(p.labels) and (
                                    p.pod.get("metadata") or {}).get("deletionTimestamp") is None:
                                cnt += 1
            self._set(i, value, cnt)
        self.gens = gens
        return dict(self.totals)

    def values_for(self, nodes: Sequence[NodeInfo], gens: list[int]) -> list[str | None] | None:
        """The memoized topology values of ``nodes`` (``gens`` their generations) when they are a
        run of the memo's node list, possibly wrapping around its end (as Filter's rotating start
        gives them) and unchanged since; None otherwise."""
        m = len(gens)
        n = len(self.gen_list)
        p0 = self.pos_by_gen.get(gens[0]) if m else None
        if p0 is None or m > n:
            return None
        end = p0 + m
        if end <= n:
            return self.values[p0:end] if self.gen_list[p0:end] == gens else None
        if self.gen_list[p0:] + self.gen_list[:end - n] == gens:
            return self.values[p0:] + self.values[:end - n]
        return None


# -- PreFilter state ------------------------------------------------------------------------------

class CriticalPaths:
    """``criticalPaths``: the two topology values with the fewest matching Pods seen so far
    (``paths[0]`` always holds the minimum; ``paths[1]`` is >= it, not necessarily the second
    minimum after updates), as [value, count] pairs."""

    __slots__ = ("paths",)

    def __init__(self) -> None:
        self.paths: list[list[Any]] = [["", MAX_INT32], ["", MAX_INT32]]

    def clone(self) -> CriticalPaths:
        c = CriticalPaths()
        c.paths = [list(self.paths[0]), list(self.paths[1])]
        return c

    def update(self, tp_val: str, num: int) -> None:
        """``criticalPaths.update``."""
        p = self.paths
        i = 0 if tp_val == p[0][0] else 1 if tp_val == p[1][0] else -1
        if i >= 0:
            p[i][1] = num
            if p[0][1] > p[1][1]:
                p[0], p[1] = p[1], p[0]
        elif num < p[0][1]:
            p[1] = p[0]
            p[0] = [tp_val, num]
        elif num < p[1][1]:
            p[1] = [tp_val, num]

    @property
    def min_match_num(self) -> int:
        return int(self.paths[0][1])


@dataclass(slots=True)
class PreFilterState:
    """``preFilterState``: the DoNotSchedule constraints, per constraint the matching-Pod count per
    topology value (``tp_value_to_match_num``) and its critical paths.

    ``value_memos`` (no upstream counterpart, not compared): per constraint the PreFilter count memo
    holding the nodes' topology values, when every constraint had one; Filter's batch form reads a
    chunk's values from them (checked against the nodes' generations) instead of each node's labels.
    """

    constraints: list[TopologySpreadConstraint] = field(default_factory=list)
    critical_paths: list[CriticalPaths] = field(default_factory=list)
    tp_value_to_match_num: list[dict[str, int]] = field(default_factory=list)
    value_memos: list[_CountMemo] | None = field(default=None, compare=False, repr=False)

    def clone(self) -> PreFilterState:
        return PreFilterState(self.constraints, [p.clone() for p in self.critical_paths],
                              [dict(m) for m in self.tp_value_to_match_num], self.value_memos)

    def min_match_num(self, i: int, min_domains: int) -> int:
        """``minMatchNum``: the global minimum, 0 when fewer than ``min_domains`` domains exist."""
        if len(self.tp_value_to_match_num[i]) < min_domains:
            return 0
        return self.critical_paths[i].min_match_num


@dataclass(slots=True)
class PreScoreState:
    """``preScoreState``: the ScheduleAnyway constraints, nodes lacking a topology key
    (``ignored_nodes``), matching-Pod counts per topology value (hostname counts are computed in
    Score) and the per-constraint weight ``log(domains + 2)``."""

    constraints: list[TopologySpreadConstraint] = field(default_factory=list)
    ignored_nodes: set[str] = field(default_factory=set)
    topology_value_to_pod_counts: list[dict[str, int]] = field(default_factory=list)
    topology_normalizing_weight: list[float] = field(default_factory=list)
    value_memos: list[_CountMemo | None] | None = field(default=None, compare=False, repr=False)
    """No upstream counterpart, not compared: per constraint the count memo PreScore read (None:
    none, e.g. hostname); Score's column form reads a node's topology value there, at the position
    of the node's generation (a value is a function of the generation), instead of its labels."""

    def clone(self) -> PreScoreState:
        return self


def topology_normalizing_weight(size: int) -> float:
    """``topologyNormalizingWeight``: ``log(size + 2)`` with Go's ``math.Log``."""
    return go_log(float(size + 2))


def score_for_count(cnt: int, max_skew: int, tp_weight: float) -> float:
    """``scoreForCount``: ``cnt * weight + (maxSkew - 1)`` as float64."""
    return float(cnt) * tp_weight + float(max_skew - 1)


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

def _objects(state: CycleState) -> ClusterObjectsLister:
    return objects_of(state.snapshot)


class PodTopologySpread:
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
                 defaulting_type: str = SYSTEM_DEFAULTING) -> None:
        """Prefer :meth:`create`, which validates. ``default_constraints`` are
        TopologySpreadConstraint dicts without a labelSelector."""
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
            return cls(constraints, dt)
        except PodParseError as exc:
            raise ConfigError(str(exc)) from exc

    # -- constraints -----------------------------------------------------------------------------
    def _build_default_constraints(self, pod: PodInfo, action: str,
                                   objects: ClusterObjectsLister) -> list[TopologySpreadConstraint]:
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

    # -- PreFilter / Filter ----------------------------------------------------------------------
    def pre_filter(self, state: CycleState, pod: PodInfo,
                   nodes: list[NodeInfo]) -> tuple[set[str] | None, Status]:
        """``PreFilter``: count matching Pods per topology value over all ``nodes`` for each
        DoNotSchedule constraint. Skip when the Pod has none."""
        try:
            constraints = self.get_constraints(pod, DO_NOT_SCHEDULE, _objects(state))
            _pod_constraints(pod)  # a malformed ScheduleAnyway constraint rejects the Pod here too
            if not constraints:
                return None, Status.skip()
            ctx = _InclusionContext(pod, constraints)
        except PodParseError as exc:
            return None, Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [str(exc)], NAME)
        s = PreFilterState(constraints, [], [{} for _ in constraints])
        keys = tuple(c.topology_key for c in constraints)
        ns = pod.namespace
        # Per constraint needing the node inclusion policies: its key, its counts, its selector (None:
        # selects everything, counts 0). The others come from the per-node count memo.
        plan = []
        memos: list[_CountMemo] = []
        for i, c in enumerate(constraints):
            selector = None if c.selector.is_everything else c.selector
            if ctx.needs_match(c):
                plan.append((c, c.topology_key, s.tp_value_to_match_num[i], selector))
            else:
                memo, s.tp_value_to_match_num[i] = self._memo_counts(nodes, keys, c.topology_key, selector, ns)
                memos.append(memo)
        if not plan:
            s.value_memos = memos
        if plan:
            for ni in nodes:
                node = ni.node
                if node is None:
                    continue
                labels = (node.get("metadata") or {}).get("labels") or {}
                if not all(k in labels for k in keys):
                    continue
                for c, key, counts, selector in plan:
                    if not ctx.match(c, node):
                        continue
                    n = 0
                    if selector is not None:
                        for p in ni.pods:
                            if p.namespace == ns and selector.matches(p.labels) and (
                                    p.pod.get("metadata") or {}).get("deletionTimestamp") is None:
                                n += 1
                    value = labels[key]
                    counts[value] = counts.get(value, 0) + n
        for i in range(len(constraints)):
            paths = CriticalPaths()
            for value, num in s.tp_value_to_match_num[i].items():
                paths.update(value, num)
            s.critical_paths.append(paths)
        state.write(PRE_FILTER_STATE_KEY, s)
        return None, Status.success()

    def _memo_counts(self, nodes: list[NodeInfo], keys: tuple[str, ...], key: str, selector: LabelSelector | None,
                     namespace: str) -> tuple[_CountMemo, dict[str, int]]:
        """PreFilter's matching-Pod count per value of topology key ``key`` over ``nodes`` (those
        with a Node object and every key of ``keys``; ``selector`` None counts 0), for a constraint
        whose node inclusion policies let every node in: what upstream's loop over all nodes gives,
        from :class:`_CountMemo` (a stream of Pods with the same constraint re-reads only the nodes
        that changed since the previous cycle). Returns the memo and a new dict the caller may change."""
        mkey = (keys, key, None if selector is None else selector_key(selector), namespace)
        memos = self._count_memos
        memo = memos.get(mkey)
        if memo is None:
            memo = memos[mkey] = _CountMemo()
            while len(memos) > _COUNT_MEMOS:
                memos.popitem(last=False)
        else:
            memos.move_to_end(mkey)
        try:
            return memo, memo.update(nodes, keys, key, selector, namespace)
        except BaseException:
            del memos[mkey]  # half-updated: start over next time
            raise

    def add_pod(self, state: CycleState, pod: PodInfo, to_add: PodInfo, node_info: NodeInfo) -> Status:
        """``AddPod``: count ``to_add`` on ``node_info`` in the PreFilter state."""
        s = state.data.get(PRE_FILTER_STATE_KEY)
        if not isinstance(s, PreFilterState):
            return Status.error(f'reading "{PRE_FILTER_STATE_KEY}" from cycleState: not found', NAME)
        self._update_with_pod(s, to_add, pod, node_info.node, 1)
        return Status.success()

    def remove_pod(self, state: CycleState, pod: PodInfo, to_remove: PodInfo, node_info: NodeInfo) -> Status:
        """``RemovePod``: uncount ``to_remove`` on ``node_info`` in the PreFilter state."""
        s = state.data.get(PRE_FILTER_STATE_KEY)
        if not isinstance(s, PreFilterState):
            return Status.error(f'reading "{PRE_FILTER_STATE_KEY}" from cycleState: not found', NAME)
        self._update_with_pod(s, to_remove, pod, node_info.node, -1)
        return Status.success()

    def _update_with_pod(self, s: PreFilterState, updated: PodInfo, preemptor: PodInfo, node: Obj | None,
                         delta: int) -> None:
        """``updateWithPod``."""
        if updated.namespace != preemptor.namespace or node is None:
            return
        labels: Mapping[str, str] = (node.get("metadata") or {}).get("labels") or {}
        if not node_labels_match_spread_constraints(labels, s.constraints):
            return
        try:
            ctx = _InclusionContext(preemptor, s.constraints)
        except PodParseError:
            return
        for i, c in enumerate(s.constraints):
            if not c.selector.matches(updated.labels):
                continue
            if not ctx.match(c, node):
                continue
            v = labels[c.topology_key]
            counts = s.tp_value_to_match_num[i]
            counts[v] = counts.get(v, 0) + delta
            s.critical_paths[i].update(v, counts[v])

    def filter_nodes(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> list[Status] | None:
        """:meth:`filter` for each of ``nodes`` in order (the runtime's batch form; None: all pass),
        with each constraint's global minimum and the Pod's self-match computed once."""
        s = state.data.get(PRE_FILTER_STATE_KEY)
        if not isinstance(s, PreFilterState):
            return [self.filter(state, pod, ni) for ni in nodes]
        if not s.constraints:
            return None
        plan = [(c.topology_key, s.tp_value_to_match_num[i], c.max_skew, s.min_match_num(i, c.min_domains),
                 1 if c.selector.matches(pod.labels) else 0) for i, c in enumerate(s.constraints)]
        if s.value_memos is not None and nodes:
            gens = list(map(_GENERATION, nodes))
            cols = [m.values_for(nodes, gens) for m in s.value_memos]
            if all(col is not None for col in cols):
                return self._filter_values(state, pod, nodes, [col for col in cols if col is not None], plan)
        out: list[Status] | None = None
        for j, ni in enumerate(nodes):
            labels = ni.labels
            for key, counts, max_skew, min_match, self_match in plan:
                tp_val = labels.get(key)
                if tp_val is None:
                    st = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [ERR_REASON_NODE_LABEL_NOT_MATCH], NAME)
                    break
                if counts.get(tp_val, 0) + self_match - min_match > max_skew:
                    st = Status(Code.UNSCHEDULABLE, [ERR_REASON_CONSTRAINTS_NOT_MATCH], NAME)
                    break
            else:
                continue
            if out is None:
                out = [_SUCCESS] * len(nodes)
            out[j] = st
        return out

    def _filter_values(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo], cols: list[list[str | None]],
                       plan: list[tuple[str, dict[str, int], int, int, int]]) -> list[Status] | None:
        """:meth:`filter_nodes` from the nodes' memoized topology values ``cols`` (one list per
        constraint, aligned with ``nodes``; None: the node lacks some key or its Node, decided by
        :meth:`filter`). A node fails a constraint when ``count + self_match - min_match > maxSkew``,
        i.e. when its value's count exceeds ``maxSkew + min_match - self_match``."""
        out: list[Status] | None = None
        limits = [(counts, max_skew + min_match - self_match) for _, counts, max_skew, min_match, self_match in plan]
        if len(cols) == 1 and limits[0][1] >= 0:
            # One constraint, no value absent from the counts failing: only the values over the limit
            # fail (None: decided by filter).
            counts, limit = limits[0]
            col = cols[0]
            failing: set[str | None] = {v for v, c in counts.items() if c > limit}
            failing.add(None)
            for j in [j for j, v in enumerate(col) if v in failing]:
                if col[j] is None:
                    st = self.filter(state, pod, nodes[j])
                    if not st.code:
                        continue
                else:
                    st = Status(Code.UNSCHEDULABLE, [ERR_REASON_CONSTRAINTS_NOT_MATCH], NAME)
                if out is None:
                    out = [_SUCCESS] * len(nodes)
                out[j] = st
            return out
        for j in range(len(nodes)):
            found: Status | None = None
            for c_col, (counts, limit) in zip(cols, limits, strict=True):
                v = c_col[j]
                if v is None:
                    found = self.filter(state, pod, nodes[j])
                    break
                if counts.get(v, 0) > limit:
                    found = Status(Code.UNSCHEDULABLE, [ERR_REASON_CONSTRAINTS_NOT_MATCH], NAME)
                    break
            if found is None or not found.code:
                continue
            if out is None:
                out = [_SUCCESS] * len(nodes)
            out[j] = found
        return out

    def filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status:
        """``Filter``: for each DoNotSchedule constraint, the node must have the topology key
        (else UnschedulableAndUnresolvable, "missing required label") and
        ``matching Pods in its domain + (1 if the Pod matches itself) - global minimum <= maxSkew``
        (else Unschedulable). The global minimum is 0 while fewer than ``minDomains`` domains
        exist."""
        s = state.data.get(PRE_FILTER_STATE_KEY)
        if not isinstance(s, PreFilterState):
            return Status.error(f'reading "{PRE_FILTER_STATE_KEY}" from cycleState: not found', NAME)
        if not s.constraints:
            return Status.success()
        labels = node_info.labels
        for i, c in enumerate(s.constraints):
            tp_val = labels.get(c.topology_key)
            if tp_val is None:
                return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [ERR_REASON_NODE_LABEL_NOT_MATCH], NAME)
            min_match = s.min_match_num(i, c.min_domains)
            self_match = 1 if c.selector.matches(pod.labels) else 0
            match_num = s.tp_value_to_match_num[i].get(tp_val, 0)
            if match_num + self_match - min_match > c.max_skew:
                return Status(Code.UNSCHEDULABLE, [ERR_REASON_CONSTRAINTS_NOT_MATCH], NAME)
        return Status.success()

    # -- PreScore / Score / NormalizeScore -------------------------------------------------------
    def pre_score(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> Status:
        """``PreScore``: ``nodes`` are the feasible nodes; Pods are counted on every node of the
        snapshot. Skip when the snapshot is empty or the Pod has no ScheduleAnyway constraint.

        Nodes lacking a topology key are ignored (score 0) unless only the system default
        constraints apply (then a node without a zone label still gets hostname spreading).

        The count over every node of the snapshot comes from the per-node count memo
        (:class:`_CountMemo`, shared with PreFilter) for each constraint whose node inclusion
        policies let every node in (``_InclusionContext.needs_match`` False): a memo for (every
        constraint key, the key, selector, namespace) counts exactly the nodes upstream's loop
        counts when all keys are required; when they are not (system defaulting), a memo for the
        key alone does, unless some feasible node's value is ``""`` (a node without the key counts
        under ``""`` upstream): that constraint, and every constraint needing the policies, takes
        upstream's loop over all nodes.
        """
        snap = state.snapshot
        all_nodes: list[NodeInfo] = list(snap.node_info_list) if snap is not None else list(nodes)
        if not all_nodes:
            return Status.skip()
        try:
            pc = _pod_constraints(pod)
            constraints = self.get_constraints(pod, SCHEDULE_ANYWAY, _objects(state))
            if not constraints:
                return Status.skip()
            ctx = _InclusionContext(pod, constraints)
        except PodParseError as exc:
            return Status.error(str(exc), NAME)
        require_all = pc.explicit or not self.system_defaulted
        s = PreScoreState(constraints, set(), [{} for _ in constraints], [])
        if require_all and not any(map(ctx.needs_match, constraints)) and any(
                c.topology_key != LABEL_HOSTNAME for c in constraints):
            self._pre_score_from_memos(s, pod, nodes, all_nodes)
            state.write(PRE_SCORE_STATE_KEY, s)
            return Status.success()
        topo_size = [0] * len(constraints)
        for ni in nodes:
            labels = ni.labels
            if require_all and not node_labels_match_spread_constraints(labels, constraints):
                s.ignored_nodes.add(ni.name)
                continue
            for i, c in enumerate(constraints):
                if c.topology_key == LABEL_HOSTNAME:
                    continue
                value = labels.get(c.topology_key, "")
                if value not in s.topology_value_to_pod_counts[i]:
                    s.topology_value_to_pod_counts[i][value] = 0
                    topo_size[i] += 1
        for i, c in enumerate(constraints):
            sz = topo_size[i]
            if c.topology_key == LABEL_HOSTNAME:
                sz = len(nodes) - len(s.ignored_nodes)
            s.topology_normalizing_weight.append(topology_normalizing_weight(sz))
        keys = tuple(c.topology_key for c in constraints)
        slow: list[tuple[int, TopologySpreadConstraint]] = []
        for i, c in enumerate(constraints):
            counts = s.topology_value_to_pod_counts[i]
            if not counts:  # hostname (counted in Score), or no feasible node has the key
                continue
            if ctx.needs_match(c) or (not require_all and "" in counts):
                slow.append((i, c))
                continue
            selector = None if c.selector.is_everything else c.selector
            _, totals = self._memo_counts(all_nodes, keys if require_all else (c.topology_key,),
                                          c.topology_key, selector, pod.namespace)
            for value in counts:
                counts[value] = totals.get(value, 0)
        if slow:
            self._pre_score_counts(s, pod, ctx, all_nodes, require_all, slow)
        state.write(PRE_SCORE_STATE_KEY, s)
        return Status.success()

    def _pre_score_from_memos(self, s: PreScoreState, pod: PodInfo, nodes: list[NodeInfo],
                              all_nodes: list[NodeInfo]) -> None:
        """PreScore's state when every node must have every key and no constraint needs the node
        inclusion policies: each non-hostname constraint's count memo (keys: every constraint key)
        is brought up to date with ``all_nodes`` and gives both the counts and the feasible nodes'
        topology values (a memoized value None: the node lacks some key, it is ignored), read at the
        node's position found by its generation (a node not found there is read from its labels)."""
        cs = s.constraints
        keys = tuple(c.topology_key for c in cs)
        ns = pod.namespace
        soft = [i for i, c in enumerate(cs) if c.topology_key != LABEL_HOSTNAME]
        memos: list[tuple[dict[str, int], dict[str, int], list[str | None]]] = []
        value_memos: list[_CountMemo | None] = [None] * len(cs)
        s.value_memos = value_memos
        pos_of = None
        for i in soft:
            c = cs[i]
            memo, totals = self._memo_counts(all_nodes, keys, c.topology_key,
                                             None if c.selector.is_everything else c.selector, ns)
            memos.append((s.topology_value_to_pod_counts[i], totals, memo.values))
            value_memos[i] = memo
            if pos_of is None:  # every memo was just synced with all_nodes: the same positions
                pos_of = memo.pos_by_gen.get
        assert pos_of is not None
        ignored = s.ignored_nodes
        for ni in nodes:
            pos = pos_of(ni.generation)
            if pos is None:
                labels = ni.labels
                if not node_labels_match_spread_constraints(labels, cs):
                    ignored.add(ni.name)
                    continue
                for i, (counts, _, _) in zip(soft, memos, strict=True):
                    counts[labels[cs[i].topology_key]] = 0
                continue
            if memos[0][2][pos] is None:
                ignored.add(ni.name)
                continue
            for counts, _, values in memos:
                v = values[pos]
                if v is not None:  # always: the memos require the same keys
                    counts[v] = 0
        for counts, totals, _ in memos:
            for value in counts:
                counts[value] = totals.get(value, 0)
        n_scored = len(nodes) - len(ignored)
        for i, c in enumerate(cs):
            sz = n_scored if c.topology_key == LABEL_HOSTNAME else len(s.topology_value_to_pod_counts[i])
            s.topology_normalizing_weight.append(topology_normalizing_weight(sz))

    @staticmethod
    def _pre_score_counts(s: PreScoreState, pod: PodInfo, ctx: _InclusionContext, all_nodes: list[NodeInfo],
                          require_all: bool, which: list[tuple[int, TopologySpreadConstraint]]) -> None:
        """Upstream's ``processAllNode`` loop over ``all_nodes`` for the constraints ``which``
        (index, constraint): add each node's matching Pods to its topology value's count when that
        value is one of a feasible node's."""
        constraints = s.constraints
        for ni in all_nodes:
            if ni.node is None:
                continue
            labels = ni.labels
            if require_all and not node_labels_match_spread_constraints(labels, constraints):
                continue
            for i, c in which:
                if not ctx.match(c, ni.node):
                    continue
                value = labels.get(c.topology_key, "")
                counts = s.topology_value_to_pod_counts[i]
                if value not in counts:
                    continue
                counts[value] += count_pods_match_selector(ni.pods, c.selector, pod.namespace)

    def score(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> tuple[int, Status]:
        """``Score``: the sum over constraints whose key the node has of
        ``count * log(domains + 2) + (maxSkew - 1)`` (count of matching Pods in the node's domain;
        on the node itself for ``kubernetes.io/hostname``), rounded half away from zero. Lower is
        better; NormalizeScore inverts it."""
        s = state.data.get(PRE_SCORE_STATE_KEY)
        if not isinstance(s, PreScoreState):
            return 0, Status.error(f'error reading "{PRE_SCORE_STATE_KEY}" from cycleState: not found', NAME)
        if node_info.name in s.ignored_nodes:
            return 0, Status.success()
        labels = node_info.labels
        score = 0.0
        for i, c in enumerate(s.constraints):
            tp_val = labels.get(c.topology_key)
            if tp_val is None:
                continue
            if c.topology_key == LABEL_HOSTNAME:
                cnt = count_pods_match_selector(node_info.pods, c.selector, pod.namespace)
            else:
                cnt = s.topology_value_to_pod_counts[i].get(tp_val, 0)
            score += score_for_count(cnt, c.max_skew, s.topology_normalizing_weight[i])
        return int(go_round(score)), Status.success()

    def score_nodes(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> tuple[list[int], Status]:
        """:meth:`score` for each of ``nodes`` in order (the runtime's column form).

        Same float64 arithmetic, in the same order, as :meth:`score`: a node's score is
        ``0.0 + term(constraint 0) + term(constraint 1) ...`` over the constraints whose key it has,
        then Go's ``math.Round``. What is shared instead of recomputed: a topology value's term
        (``score_for_count`` of its PreScore count) once per value, and with a single
        non-hostname constraint the rounded score once per value. A ``kubernetes.io/hostname``
        constraint counts the node's own matching Pods, node by node, as :meth:`score` does."""
        s = state.data.get(PRE_SCORE_STATE_KEY)
        if not isinstance(s, PreScoreState):
            st = Status.error(f'error reading "{PRE_SCORE_STATE_KEY}" from cycleState: not found', NAME)
            return [0] * len(nodes), st
        if not nodes:
            return [], Status.success()
        ignored = s.ignored_nodes
        ns = pod.namespace
        cs = s.constraints
        if len(cs) == 1 and cs[0].topology_key != LABEL_HOSTNAME:
            c = cs[0]
            key = c.topology_key
            counts = s.topology_value_to_pod_counts[0]
            w = s.topology_normalizing_weight[0]
            by_value: dict[str, int] = {}
            out1: list[int] = []
            memo = s.value_memos[0] if s.value_memos else None
            pos_by_gen: dict[int, int] = memo.pos_by_gen if memo is not None else {}
            values: list[str | None] = memo.values if memo is not None else []
            pos_of = pos_by_gen.get
            for ni in nodes:
                if ni.name in ignored:
                    out1.append(0)
                    continue
                pos = pos_of(ni.generation)
                v = None if pos is None else values[pos]
                if v is None:  # not memoized, or lacking some key: read the node's own label
                    v = ni.labels.get(key)
                    if v is None:
                        out1.append(0)
                        continue
                sc = by_value.get(v)
                if sc is None:
                    sc = by_value[v] = int(go_round(0.0 + score_for_count(counts.get(v, 0), c.max_skew, w)))
                out1.append(sc)
            return out1, Status.success()
        plan: list[tuple[str, bool, LabelSelector, int, dict[str, int], float, dict[str, float]]] = [
            (c.topology_key, c.topology_key == LABEL_HOSTNAME, c.selector, c.max_skew,
             s.topology_value_to_pod_counts[i], s.topology_normalizing_weight[i], {})
            for i, c in enumerate(cs)]
        out: list[int] = []
        for ni in nodes:
            if ni.name in ignored:
                out.append(0)
                continue
            labels = ni.labels
            score = 0.0
            for key, host, selector, max_skew, counts, w, terms in plan:
                v = labels.get(key)
                if v is None:
                    continue
                if host:
                    score += score_for_count(count_pods_match_selector(ni.pods, selector, ns), max_skew, w)
                    continue
                term = terms.get(v)
                if term is None:
                    term = terms[v] = score_for_count(counts.get(v, 0), max_skew, w)
                score += term
            out.append(int(go_round(score)))
        return out, Status.success()

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: dict[str, int]) -> Status:
        """``NormalizeScore``: ignored nodes (and, as upstream, a raw score of -1) get 0; otherwise
        ``100 * (max + min - score) / max`` (Go's truncating integer division; 100 for all when max
        is 0), with min (from ``MaxInt64``) / max (from 0) over the non-ignored nodes. Each distinct
        raw score is normalized once."""
        s = state.data.get(PRE_SCORE_STATE_KEY)
        if not isinstance(s, PreScoreState):
            return Status.error(f'error reading "{PRE_SCORE_STATE_KEY}" from cycleState: not found', NAME)
        ignored = s.ignored_nodes
        if ignored:
            for name in ignored.intersection(scores):
                scores[name] = _INVALID_SCORE
            valid = [sc for name, sc in scores.items() if name not in ignored]
        else:
            valid = list(scores.values())
        min_score = min(valid, default=2**63 - 1)
        max_score = max(max(valid, default=0), 0)
        done: dict[int, int] = {_INVALID_SCORE: 0}
        for name, sc in scores.items():
            v = done.get(sc)
            if v is None:
                if max_score == 0:
                    v = MAX_NODE_SCORE
                else:
                    v = go_div(MAX_NODE_SCORE * (max_score + min_score - sc), max_score)
                done[sc] = v
            scores[name] = v
        return Status.success()

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
        None (the hints Queue, a superset) when default ones apply, whose selector needs the
        Services / ReplicaSets selecting the Pod.

        Raises:
            PodParseError: the Pod's constraints are malformed.
        """
        pc = _pod_constraints(pod)
        if pc.explicit:
            return pc.hard
        return None if self._default_hard else ()
