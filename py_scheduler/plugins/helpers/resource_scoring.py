"""Resource-allocation scoring shared by NodeResourcesFit and NodeResourcesBalancedAllocation.

Upstream (kube-scheduler v1.37.2, ``pkg/scheduler/framework/plugins/``):

* ``noderesources/resource_allocation.go``: ``resourceAllocationScorer`` (which node quantities a
  score reads, the pod's request per resource, ``useRequested`` versus the non-zero 100m / 200Mi
  defaults, skipping extended resources the pod does not request) and the DRA extended-resource
  capacity count;
* ``noderesources/least_allocated.go``, ``most_allocated.go``, ``requested_to_capacity_ratio.go``:
  the three ``scoringStrategy`` scorers;
* ``noderesources/balanced_allocation.go``: ``balancedResourceScorer`` (v1.36+: scores the *change*
  in balance the pod causes);
* ``helper/shape_score.go``: ``BuildBrokenLinearFunction``;
* ``dynamic-resource-allocation/deviceclass/extendedresourcecache``: which DeviceClass backs an
  extended resource name (``DRAExtendedResource``, GA and locked on in v1.37).

All arithmetic is Go's: integer division truncates toward zero (:func:`go_div`), ``math.Round``
rounds halves away from zero (:func:`go_round`), float computations use IEEE doubles in the same
order as upstream. Quantities: milli-CPU for ``cpu``, bytes for ``memory`` / ``ephemeral-storage``,
``Quantity.Value()`` integers for everything else.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal

import numpy as np

from py_scheduler.framework import quantity, signers
from py_scheduler.framework.errors import ConfigError, PodParseError
from py_scheduler.framework.gomath import go_div, go_round
from py_scheduler.framework.lister import SnapshotLister, objects_of
from py_scheduler.framework.memo import SCORER_REQUESTS, PodInput, PodMemo
from py_scheduler.framework.objects import Obj
from py_scheduler.framework.pod_resources import (
    DEFAULT_MEMORY_REQUEST,
    DEFAULT_MILLI_CPU_REQUEST,
    pod_requests,
    requests_key,
)
from py_scheduler.framework.types import MAX_NODE_SCORE, Code, NodeInfo, PodInfo, Status, is_scalar_resource_name
from py_scheduler.plugins.helpers.columns import (
    ALLOC_CPU,
    ALLOC_MEM,
    NZ_CPU,
    NZ_MEM,
    REQ_CPU,
    REQ_MEM,
    SCORE_LIMIT,
    Int64Array,
    NodeColumns,
)
from py_scheduler.plugins.helpers.extended_resources import (
    DeviceClassResolver,
    DRAPreScoreState,
    dra_totals,
    is_dra_extended_resource_name,
    should_delegate_resource_to_dra,
)

__all__ = [
    "DEFAULT_RESOURCES",
    "MAX_CUSTOM_PRIORITY_SCORE",
    "MAX_UTILIZATION",
    "FieldErrors",
    "ResourceAllocationScorer",
    "ResourceSpec",
    "Scorer",
    "UtilizationShapePoint",
    "balanced_resource_score",
    "balanced_resource_scorer",
    "build_broken_linear_function",
    "decode_resources",
    "decode_shape",
    "dra_pre_score_state",
    "least_requested_score",
    "least_resource_scorer",
    "most_requested_score",
    "most_resource_scorer",
    "node_columns_of",
    "requested_to_capacity_ratio_scorer",
]

log = logging.getLogger("py_scheduler.plugins.resource_scoring")


MAX_CUSTOM_PRIORITY_SCORE = 10
"""``config.MaxCustomPriorityScore``: shape scores lie in [0, 10] and are scaled ×10 to [0, 100]."""
MAX_UTILIZATION = 100
"""``maxUtilization`` of requested_to_capacity_ratio.go (percent)."""
Scorer = Callable[[Sequence[int], Sequence[int], Sequence[int]], int]
"""``func(requested, allocated, allocatable []int64) int64``: one node's score from per-resource lists
in the order of the configured resources."""


_REQUEST_MEMOS: dict[tuple[bool, bool], PodMemo[dict[str, Decimal]]] = {
    (use_requested, pod_level_and_status): PodMemo(
        f"resource_scoring:{int(use_requested)}{int(pod_level_and_status)}", PodInput.SPEC | PodInput.STATUS)
    for use_requested in (False, True) for pod_level_and_status in (False, True)}
"""A scorer's view of the Pod's requests, per (useRequested, pod-level resources + resize status)."""


# -- args ------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ResourceSpec:
    """``config.ResourceSpec``: a resource name (``cpu``, ``memory``, ``nvidia.com/gpu``) and its
    weight in the weighted mean (1..100 for NodeResourcesFit, always 1 for BalancedAllocation)."""

    name: str
    weight: int = 1


@dataclass(frozen=True, slots=True)
class UtilizationShapePoint:
    """One point of the RequestedToCapacityRatio shape: ``utilization`` in percent (0..100) and
    ``score`` as configured (0..10, before the ×10 scaling)."""

    utilization: int
    score: int


DEFAULT_RESOURCES: tuple[ResourceSpec, ...] = (ResourceSpec("cpu", 1), ResourceSpec("memory", 1))
"""``defaultResourceSpec`` of apis/config/v1/defaults.go: cpu and memory, weight 1 each."""


class FieldErrors:
    """Collects argument errors worded like apimachinery's ``field.Error`` and raises them together
    (``field.ErrorList.ToAggregate``: one error as is, several as ``[e1, e2]``)."""

    __slots__ = ("errors",)

    def __init__(self) -> None:
        self.errors: list[str] = []

    @staticmethod
    def _value(v: object) -> str:
        if isinstance(v, str):
            return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
        if isinstance(v, bool):
            return "true" if v else "false"
        return str(v)

    def invalid(self, path: str, value: object, detail: str) -> None:
        self.errors.append(f"{path}: Invalid value: {self._value(value)}: {detail}")

    def required(self, path: str, detail: str) -> None:
        self.errors.append(f"{path}: Required value: {detail}")

    def forbidden(self, path: str, detail: str) -> None:
        self.errors.append(f"{path}: Forbidden: {detail}")

    def duplicate(self, path: str, value: object) -> None:
        self.errors.append(f"{path}: Duplicate value: {self._value(value)}")

    def not_supported(self, path: str, value: object, supported: Iterable[str]) -> None:
        opts = ", ".join(self._value(s) for s in supported)
        self.errors.append(f"{path}: Unsupported value: {self._value(value)}: supported values: {opts}")

    def unknown_fields(self, path: str, raw: Mapping[str, object], known: Iterable[str]) -> None:
        """Strict decoding: a key the args type does not have is an error, as kube-scheduler's."""
        allowed = set(known)
        for k in raw:
            if k not in allowed:
                where = f"{path}." if path else ""
                self.errors.append(f'{where}{k}: unknown field "{k}"')

    def raise_if_any(self) -> None:
        """Raises:
            ConfigError: one or more errors were collected.
        """
        if not self.errors:
            return
        if len(self.errors) == 1:
            raise ConfigError(self.errors[0])
        raise ConfigError("[" + ", ".join(self.errors) + "]")


def _int_field(raw: object, path: str, errs: FieldErrors, default: int = 0) -> int | None:
    if raw is None:
        return default
    if isinstance(raw, bool) or not isinstance(raw, int):
        errs.invalid(path, raw, "must be an integer")
        return None
    return raw


def decode_resources(raw: object, path: str, errs: FieldErrors) -> list[ResourceSpec]:
    """Decode a ``resources`` list (``[{"name": "cpu", "weight": 1}]``) with upstream's defaulting:
    an empty or missing list means cpu + memory, a missing or 0 weight means 1. Range checks are
    the caller's (they differ between NodeResourcesFit and BalancedAllocation). Problems are added
    to ``errs``."""
    if raw is None or raw == []:
        return list(DEFAULT_RESOURCES)
    if not isinstance(raw, list):
        errs.invalid(path, raw, "must be a list of {name, weight}")
        return []
    out: list[ResourceSpec] = []
    for i, item in enumerate(raw):
        p = f"{path}[{i}]"
        if not isinstance(item, dict):
            errs.invalid(p, item, "must be an object with name and weight")
            continue
        errs.unknown_fields(p, item, ("name", "weight"))
        name = item.get("name")
        if not isinstance(name, str):
            errs.invalid(f"{p}.name", name, "must be a string")
            continue
        weight = _int_field(item.get("weight"), f"{p}.weight", errs)
        if weight is None:
            continue
        out.append(ResourceSpec(name, weight or 1))
    return out


def decode_shape(raw: object, path: str, errs: FieldErrors) -> list[UtilizationShapePoint]:
    """Decode and validate a RequestedToCapacityRatio ``shape`` (``validateFunctionShape``): at least
    one point, utilization strictly increasing within [0, 100], score within [0, 10]."""
    if raw is None or raw == []:
        errs.required(path, "at least one point must be specified")
        return []
    if not isinstance(raw, list):
        errs.invalid(path, raw, "must be a list of {utilization, score}")
        return []
    pts: list[UtilizationShapePoint] = []
    for i, item in enumerate(raw):
        p = f"{path}[{i}]"
        if not isinstance(item, dict):
            errs.invalid(p, item, "must be an object with utilization and score")
            return []
        errs.unknown_fields(p, item, ("utilization", "score"))
        u = _int_field(item.get("utilization"), f"{p}.utilization", errs)
        sc = _int_field(item.get("score"), f"{p}.score", errs)
        if u is None or sc is None:
            return []
        pts.append(UtilizationShapePoint(u, sc))
    for i in range(1, len(pts)):
        if pts[i - 1].utilization >= pts[i].utilization:
            errs.invalid(f"{path}[{i}].utilization", pts[i].utilization, "values must be sorted in increasing order")
            break
    for i, pt in enumerate(pts):
        if not 0 <= pt.utilization <= MAX_UTILIZATION:
            errs.invalid(f"{path}[{i}].utilization", pt.utilization, f"not in valid range [0, {MAX_UTILIZATION}]")
        if not 0 <= pt.score <= MAX_CUSTOM_PRIORITY_SCORE:
            errs.invalid(f"{path}[{i}].score", pt.score, f"not in valid range [0, {MAX_CUSTOM_PRIORITY_SCORE}]")
    return pts


# -- scorers ---------------------------------------------------------------------------------------
def least_requested_score(requested: int, capacity: int) -> int:
    """``leastRequestedScore``: ``(capacity - requested) * 100 / capacity``; 0 when the node has no
    capacity or the request exceeds it."""
    if capacity == 0 or requested > capacity:
        return 0
    return go_div((capacity - requested) * MAX_NODE_SCORE, capacity)


def most_requested_score(requested: int, capacity: int) -> int:
    """``mostRequestedScore``: ``requested * 100 / capacity`` with ``requested`` clamped to the
    capacity (non-zero defaults can push it above)."""
    if capacity == 0:
        return 0
    requested = min(requested, capacity)
    return go_div(requested * MAX_NODE_SCORE, capacity)


def _weighted_mean_scorer(resources: Sequence[ResourceSpec], per_resource: Callable[[int, int], int]) -> Scorer:
    weights = [r.weight for r in resources]

    def score(requested: Sequence[int], _allocated: Sequence[int], allocatable: Sequence[int]) -> int:
        node_score = weight_sum = 0
        for i, req in enumerate(requested):
            if allocatable[i] == 0:
                continue
            node_score += per_resource(req, allocatable[i]) * weights[i]
            weight_sum += weights[i]
        if weight_sum == 0:
            return 0
        return go_div(node_score, weight_sum)

    return score


def least_resource_scorer(resources: Sequence[ResourceSpec]) -> Scorer:
    """``leastResourceScorer`` (LeastAllocated): weighted mean (truncated) of each resource's free
    fraction ×100, over resources the node has."""
    return _weighted_mean_scorer(resources, least_requested_score)


def most_resource_scorer(resources: Sequence[ResourceSpec]) -> Scorer:
    """``mostResourceScorer`` (MostAllocated): weighted mean (truncated) of each resource's used
    fraction ×100, over resources the node has."""
    return _weighted_mean_scorer(resources, most_requested_score)


def build_broken_linear_function(shape: Sequence[UtilizationShapePoint]) -> Callable[[int], int]:
    """``helper.BuildBrokenLinearFunction``: piecewise-linear interpolation through ``shape`` (points
    sorted by utilization) with Go's truncating integer division; flat before the first and after
    the last point. ``shape`` scores here are already scaled to [0, 100]."""
    pts = [(int(p.utilization), int(p.score)) for p in shape]

    def f(p: int) -> int:
        for i, (u, s) in enumerate(pts):
            if p <= u:
                if i == 0:
                    return s
                pu, ps = pts[i - 1]
                return ps + go_div((s - ps) * (p - pu), u - pu)
        return pts[-1][1]

    return f


def requested_to_capacity_ratio_scorer(resources: Sequence[ResourceSpec],
                                       shape: Sequence[UtilizationShapePoint]) -> Scorer:
    """``requestedToCapacityRatioScorer``: each resource's utilization ``requested * 100 / capacity``
    (100 when over capacity) goes through the shape (scores scaled ×10); resources scoring 0 are
    left out of the weighted mean, which is rounded with ``math.Round`` (halves away from zero)."""
    scaled = [UtilizationShapePoint(p.utilization, p.score * (MAX_NODE_SCORE // MAX_CUSTOM_PRIORITY_SCORE))
              for p in shape]
    raw = build_broken_linear_function(scaled)
    weights = [r.weight for r in resources]

    def resource_score(requested: int, capacity: int) -> int:
        if capacity == 0 or requested > capacity:
            return raw(MAX_UTILIZATION)
        return raw(go_div(requested * MAX_UTILIZATION, capacity))

    def score(requested: Sequence[int], _allocated: Sequence[int], allocatable: Sequence[int]) -> int:
        node_score = weight_sum = 0
        for i, req in enumerate(requested):
            if allocatable[i] == 0:
                continue
            rs = resource_score(req, allocatable[i])
            if rs > 0:
                node_score += rs * weights[i]
                weight_sum += weights[i]
        if weight_sum == 0:
            return 0
        return int(go_round(float(node_score) / float(weight_sum)))

    return score


def balanced_resource_score(requested: Sequence[int], allocatable: Sequence[int]) -> int:
    """``balancedResourceScore``: ``int((1 - std) * 100)`` of the used fractions (each capped at 1)
    of the resources the node has; for two resources ``std = |f0 - f1| / 2``, for more the
    population standard deviation, for fewer 0."""
    fractions: list[float] = []
    total = 0.0
    for i, req in enumerate(requested):
        if allocatable[i] == 0:
            continue
        fraction = float(req) / float(allocatable[i])
        if fraction > 1:
            fraction = 1.0
        total += fraction
        fractions.append(fraction)
    std = 0.0
    if len(fractions) == 2:
        std = abs((fractions[0] - fractions[1]) / 2)
    elif len(fractions) > 2:
        mean = total / float(len(fractions))
        acc = 0.0
        for f in fractions:
            acc = acc + (f - mean) * (f - mean)
        std = math.sqrt(acc / float(len(fractions)))
    return int((1 - std) * float(MAX_NODE_SCORE))


def _balanced_two(ac: int, am: int, uc: int, um: int, pc: int, pm: int) -> int:
    """:func:`balanced_resource_scorer` for cpu (``ac`` allocatable, ``uc`` requested, ``pc`` the
    Pod's, milli-CPU) and memory (bytes), all non-negative: the same float operations in the same
    order."""
    if ac and am:
        f0 = float(uc + pc) / float(ac)
        f1 = float(um + pm) / float(am)
        with_pod = int((1 - abs(((f0 if f0 <= 1 else 1.0) - (f1 if f1 <= 1 else 1.0)) / 2)) * float(MAX_NODE_SCORE))
        g0 = float(uc) / float(ac)
        g1 = float(um) / float(am)
        without_pod = int((1 - abs(((g0 if g0 <= 1 else 1.0) - (g1 if g1 <= 1 else 1.0)) / 2)) * float(MAX_NODE_SCORE))
    else:
        with_pod = without_pod = int((1 - 0.0) * float(MAX_NODE_SCORE))
    half = MAX_NODE_SCORE // 2
    return half + go_div(half + with_pod - without_pod, 2)


_NUMPY_MIN_NODES = 32
"""Below this many nodes the plain loop of :meth:`ResourceAllocationScorer.score_nodes` is faster."""
_NUMPY_MAX_QUANTITY = 1 << 52
"""Larger quantities (or their sums, times 100) could overflow int64 or lose float precision
differently: such batches take the plain loop."""


def node_columns_of(snapshot: SnapshotLister | None, n_nodes: int) -> NodeColumns | None:
    """The snapshot's :class:`~py_scheduler.plugins.helpers.columns.NodeColumns` (registered with it
    through ``derived``) when a batch of ``n_nodes`` nodes is large enough for the numpy paths; None
    below that or without a snapshot."""
    if n_nodes < _NUMPY_MIN_NODES or snapshot is None:
        return None
    return snapshot.derived(NodeColumns)


def _score_columns(kind: str, nodes: Sequence[NodeInfo], use_requested: bool, pc: int, pm: int, wc: int,
                   wm: int, columns: NodeColumns | None = None) -> list[int] | None:
    """The cpu + memory fast path of :meth:`ResourceAllocationScorer.score_nodes` over numpy columns
    (one int64 / float64 array per quantity): the same integer arithmetic, and for the balance score
    the same IEEE double operations in the same order (each numpy ufunc rounds like the Python
    operator it replaces). The columns come from the snapshot's :class:`NodeColumns` when
    ``columns`` holds every node of ``nodes``, else from the NodeInfos. None when a quantity is
    negative or too large (the caller loops)."""
    n = len(nodes)
    got = columns.gather(nodes) if columns is not None else None
    if got is not None:
        if got.score_ok is not None and not got.score_ok.all():
            return None
        if not (0 <= pc < SCORE_LIMIT and 0 <= pm < SCORE_LIMIT):
            return None
        v = got.values
        a2 = v[ALLOC_CPU:ALLOC_MEM + 1]
        u2 = v[REQ_CPU:REQ_MEM + 1] if use_requested else v[NZ_CPU:NZ_MEM + 1]
        if n and int(a2.min()) > 0:
            return _score_blocks(kind, a2, u2, pc, pm, wc, wm)
        ac, am, uc, um = a2[0], a2[1], u2[0], u2[1]
    else:
        try:
            ac = np.fromiter([ni.allocatable.milli_cpu for ni in nodes], np.int64, n)
            am = np.fromiter([ni.allocatable.memory for ni in nodes], np.int64, n)
            if use_requested:
                uc = np.fromiter([ni.requested.milli_cpu for ni in nodes], np.int64, n)
                um = np.fromiter([ni.requested.memory for ni in nodes], np.int64, n)
            else:
                uc = np.fromiter([ni.non_zero_requested.milli_cpu for ni in nodes], np.int64, n)
                um = np.fromiter([ni.non_zero_requested.memory for ni in nodes], np.int64, n)
        except OverflowError:
            return None
        lo = min(int(ac.min()), int(am.min()), int(uc.min()), int(um.min()))
        hi = max(int(ac.max()), int(am.max()), int(uc.max()) + pc, int(um.max()) + pm)
        if lo < 0 or hi >= _NUMPY_MAX_QUANTITY:
            return None
    return _score_arrays(kind, ac, am, uc, um, pc, pm, wc, wm)


def _score_blocks(kind: str, a2: Int64Array, u2: Int64Array, pc: int, pm: int, wc: int, wm: int) -> list[int]:
    """:func:`_score_arrays` when every node has cpu and memory: ``a2`` / ``u2`` are (2, m) blocks
    (row 0 milli-CPU, row 1 bytes; allocatable > 0 and in-use >= 0, below 2**51) and both resources
    are computed at once. Same integer operations and, for the balance score, the same IEEE double
    operations in the same order as :func:`_balanced_two` (int64 / int64 converts both to double
    first, as ``float(a) / float(b)``; the final ``50 + (50 + withPod - withoutPod) / 2`` only
    involves integers below 2**8, exact in doubles)."""
    r2 = u2 + np.array([[pc], [pm]], np.int64)
    if kind == "balanced":
        f = np.minimum(r2 / a2, 1.0)
        g = np.minimum(u2 / a2, 1.0)
        full = float(MAX_NODE_SCORE)
        with_pod = np.trunc((1 - np.abs((f[0] - f[1]) / 2)) * full)
        without_pod = np.trunc((1 - np.abs((g[0] - g[1]) / 2)) * full)
        half = MAX_NODE_SCORE // 2
        balanced: list[int] = (half + np.trunc((half + with_pod - without_pod) / 2)).astype(np.int64).tolist()
        return balanced
    if kind == "least":
        per = a2 - r2
        np.maximum(per, 0, out=per)
    else:
        per = np.minimum(r2, a2)
    per *= MAX_NODE_SCORE
    per //= a2
    node_score = per[0] + per[1] if wc == 1 and wm == 1 else per[0] * wc + per[1] * wm
    out: list[int] = (node_score // (wc + wm)).tolist()
    return out


def _score_arrays(kind: str, ac: Int64Array, am: Int64Array, uc: Int64Array, um: Int64Array, pc: int, pm: int,
                  wc: int, wm: int) -> list[int]:
    """:func:`_score_columns` on int64 arrays (allocatable ``ac`` / ``am``, already requested ``uc`` /
    ``um``; milli-CPU and bytes, each in [0, 2**52) with the Pod's ``pc`` / ``pm`` added)."""
    rc, rm = uc + pc, um + pm
    has_c, has_m = ac != 0, am != 0
    with np.errstate(divide="ignore", invalid="ignore"):
        if kind == "balanced":
            acf, amf = ac.astype(np.float64), am.astype(np.float64)
            f0, f1 = np.minimum(rc / acf, 1.0), np.minimum(rm / amf, 1.0)
            with_pod = np.trunc((1 - np.abs((f0 - f1) / 2)) * float(MAX_NODE_SCORE))
            g0, g1 = np.minimum(uc / acf, 1.0), np.minimum(um / amf, 1.0)
            without_pod = np.trunc((1 - np.abs((g0 - g1) / 2)) * float(MAX_NODE_SCORE))
            both = has_c & has_m
            full = float(MAX_NODE_SCORE)
            x = (np.where(both, with_pod, full) - np.where(both, without_pod, full)).astype(np.int64)
            half = MAX_NODE_SCORE // 2
            x += half
            out = half + np.where(x >= 0, x // 2, -((-x) // 2))
            result: list[int] = out.tolist()
            return result
        sc_c = np.where(has_c, ac, 1)
        sc_m = np.where(has_m, am, 1)
        if kind == "least":
            score_c = np.where(rc > ac, 0, (ac - rc) * MAX_NODE_SCORE // sc_c)
            score_m = np.where(rm > am, 0, (am - rm) * MAX_NODE_SCORE // sc_m)
        else:
            score_c = np.minimum(rc, ac) * MAX_NODE_SCORE // sc_c
            score_m = np.minimum(rm, am) * MAX_NODE_SCORE // sc_m
    node_score = np.where(has_c, score_c * wc, 0) + np.where(has_m, score_m * wm, 0)
    weight_sum = np.where(has_c, wc, 0) + np.where(has_m, wm, 0)
    final = np.where(weight_sum > 0, node_score // np.maximum(weight_sum, 1), 0)
    values: list[int] = final.tolist()
    return values


def balanced_resource_scorer(requested: Sequence[int], allocated: Sequence[int], allocatable: Sequence[int]) -> int:
    """``balancedResourceScorer`` (v1.36+): ``50 + (50 + withPod - withoutPod) / 2`` where
    ``withPod`` / ``withoutPod`` are :func:`balanced_resource_score` with and without the pod's
    requests; 75 means "no change", towards 100 the pod improves the balance, towards 50 it worsens it."""
    with_pod = balanced_resource_score(requested, allocatable)
    without_pod = balanced_resource_score(allocated, allocatable)
    half = MAX_NODE_SCORE // 2
    return half + go_div(half + with_pod - without_pod, 2)


# -- DRA extended resources (resource_allocation.go getDRAPreScoredParams) -------------------------
def dra_pre_score_state(snapshot: SnapshotLister | None, resources: Sequence[ResourceSpec],
                        resolver: DeviceClassResolver | None = None) -> DRAPreScoreState | None:
    """``getDRAPreScoredParams``: None unless one of ``resources`` is an extended resource backed by a
    DeviceClass; otherwise the allocated devices (from ResourceClaim ``status.allocation``) and the
    ResourceSlices of the snapshot."""
    if resolver is None:
        resolver = DeviceClassResolver.from_snapshot(snapshot)
    if not resolver:
        return None
    if not any(is_dra_extended_resource_name(r.name) and resolver.get(r.name) is not None for r in resources):
        return None
    objects = objects_of(snapshot)
    allocated: set[tuple[str, str, str]] = set()
    for claim in objects.list("ResourceClaim"):
        results = ((((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results")
                   or [])
        for r in results:
            if isinstance(r, dict):
                allocated.add((str(r.get("driver") or ""), str(r.get("pool") or ""), str(r.get("device") or "")))
    slices = [s for s in objects.list("ResourceSlice") if isinstance(s, dict)]
    return DRAPreScoreState(resolver, allocated, slices)


# -- the scorer ------------------------------------------------------------------------------------
_NON_MISSING: dict[str, Decimal] = {
    "cpu": Decimal(DEFAULT_MILLI_CPU_REQUEST) / 1000,
    "memory": Decimal(DEFAULT_MEMORY_REQUEST),
}


class ResourceAllocationScorer:
    """``resourceAllocationScorer``: turns a pod and a node into the per-resource lists a
    :data:`Scorer` reads.

    Args:
        name: the strategy (``LeastAllocated`` ...) or plugin name, for logs.
        scorer: the :data:`Scorer`.
        resources: the configured resources, in order.
        use_requested: True (BalancedAllocation): actual requests; False (NodeResourcesFit): cpu /
            memory use the non-zero defaults (100m / 200Mi per container lacking a request) on both
            the pod and the node (``NodeInfo.non_zero_requested``).
        pod_level_and_status: whether the pod's own request honours pod-level resources and container
            status (in-place resize). v1.37 sets these on BalancedAllocation's scorer only;
            NodeResourcesFit's embedded scorer leaves them off, so its score reads container
            requests (+ overhead) only.
    """

    __slots__ = ("_fast_kind", "_memo", "name", "pod_level_and_status", "resources", "scorer", "use_requested")

    def __init__(self, name: str, scorer: Scorer, resources: Sequence[ResourceSpec], *, use_requested: bool,
                 pod_level_and_status: bool) -> None:
        self.name = name
        self.scorer = scorer
        self.resources: tuple[ResourceSpec, ...] = tuple(resources)
        self.use_requested = use_requested
        self.pod_level_and_status = pod_level_and_status
        self._memo = _REQUEST_MEMOS[use_requested, pod_level_and_status]
        two = [r.name for r in self.resources] == ["cpu", "memory"]
        self._fast_kind = ""
        if two and scorer is balanced_resource_scorer:
            self._fast_kind = "balanced"
        elif two and name in ("LeastAllocated", "MostAllocated"):
            self._fast_kind = "least" if name == "LeastAllocated" else "most"

    # pod side ----------------------------------------------------------------------------------
    def _pod_request_decimals(self, pod: PodInfo) -> dict[str, Decimal]:
        return self._memo.get(pod, self._compute_pod_request_decimals)

    def _compute_pod_request_decimals(self, pod: PodInfo) -> dict[str, Decimal]:
        obj: Obj = pod.pod
        whole = obj.get("spec") or {}
        key = requests_key(whole, obj.get("status")) if type(whole) is dict else None
        if key is not None:  # the Pods of a workload share their resources (memo.SCORER_REQUESTS)
            hit: dict[str, Decimal] | None = SCORER_REQUESTS.get((self.use_requested, self.pod_level_and_status, key))
            if hit is not None:
                return hit
        if not self.pod_level_and_status:
            spec = {k: v for k, v in whole.items() if k != "resources"}
            obj = {"metadata": obj.get("metadata") or {}, "spec": spec}
        reqs = pod_requests(obj, None if self.use_requested else _NON_MISSING)
        if key is not None:
            SCORER_REQUESTS.store((self.use_requested, self.pod_level_and_status, key), reqs)
        return reqs

    def pod_request_list(self, pod: PodInfo) -> list[int]:
        """``calculatePodResourceRequestList``: the pod's request for each configured resource
        (milli-CPU for cpu, ``Value()`` otherwise), including overhead.

        Raises:
            PodParseError: a malformed quantity (PodInfo parsing normally catches it first).
        """
        reqs = self._pod_request_decimals(pod)
        out: list[int] = []
        for r in self.resources:
            q = reqs.get(r.name, Decimal(0))
            out.append(quantity.milli_value(q) if r.name == "cpu" else quantity.value(q))
        return out

    @staticmethod
    def is_best_effort(pod_requests_list: Sequence[int]) -> bool:
        """``isBestEffortPod``: every configured resource request is 0."""
        return all(r == 0 for r in pod_requests_list)

    # node side ---------------------------------------------------------------------------------
    def resource_allocatable_request(self, node_info: NodeInfo, resource: str,
                                     dra: DRAPreScoreState | None = None) -> tuple[int, int]:
        """``calculateResourceAllocatableRequest``: (allocatable, already requested) of one resource.

        cpu / memory read ``non_zero_requested`` unless ``use_requested``; ephemeral-storage and
        scalar resources read ``requested``; a scalar the node does not list is (0, 0) unless a
        DeviceClass backs it (then the DRA device count of the node).
        """
        requested = node_info.requested if self.use_requested else node_info.non_zero_requested
        alloc = node_info.allocatable
        if resource == "cpu":
            return alloc.milli_cpu, requested.milli_cpu
        if resource == "memory":
            return alloc.memory, requested.memory
        if resource == "ephemeral-storage":
            return alloc.ephemeral_storage, node_info.requested.ephemeral_storage
        exists = resource in alloc.scalar
        allocatable = alloc.scalar.get(resource, 0)
        if allocatable == 0 and dra is not None and node_info.node is not None:
            dc = dra.resolver.get(resource)
            if dc is not None:
                try:
                    cap, used = dra_totals(node_info.node, dc, dra)
                except PodParseError as exc:
                    log.warning("DRA capacity of %s on node %s not computed: %s", resource, node_info.name, exc)
                    cap, used = 0, 0
                if cap > 0:
                    return cap, used
        if exists:
            return allocatable, node_info.requested.scalar.get(resource, 0)
        return 0, 0

    def node_allocatable_request(self, node_info: NodeInfo, pod_requests_list: Sequence[int],
                                 dra: DRAPreScoreState | None = None) -> tuple[list[int], list[int], list[int]]:
        """``calculateNodeAllocatableRequest``: (requested incl. the pod, allocated without it,
        allocatable) per configured resource. A scalar resource the pod does not request, or one
        the node has none of, stays 0 everywhere so the scorers skip it."""
        n = len(self.resources)
        requested, allocated, allocatable = [0] * n, [0] * n, [0] * n
        for i, r in enumerate(self.resources):
            if pod_requests_list[i] == 0 and is_scalar_resource_name(r.name):
                continue
            node_alloc, node_used = self.resource_allocatable_request(node_info, r.name, dra)
            if node_alloc == 0:
                continue
            allocatable[i] = node_alloc
            allocated[i] = node_used
            requested[i] = node_used + pod_requests_list[i]
        return requested, allocated, allocatable

    def score_nodes(self, nodes: Sequence[NodeInfo], pod_requests_list: Sequence[int],
                    dra: DRAPreScoreState | None = None,
                    columns: NodeColumns | None = None) -> tuple[list[int], Status]:
        """:meth:`score` of every node of ``nodes``, in order (the plugins' ``score_nodes``).

        The common configuration (resources exactly cpu then memory, any weights; LeastAllocated,
        MostAllocated or the balance scorer; no DRA-backed resource) runs with the same integer and
        float operations as :meth:`score`, over numpy columns for 32 nodes or more (``columns``: the
        snapshot's :class:`NodeColumns`, read instead of the NodeInfos when they hold ``nodes``);
        anything else, and any node with a negative quantity, goes through :meth:`score` node by node.
        """
        if not self.resources:
            return [], Status(Code.ERROR, ["resources not found"])
        kind = self._fast_kind
        if kind == "" or dra is not None or any(r < 0 for r in pod_requests_list):
            out: list[int] = []
            for ni in nodes:
                sc, st = self.score(ni, pod_requests_list, dra)
                if st.code:
                    return out, st
                out.append(sc)
            return out, Status.success()
        pc, pm = pod_requests_list[0], pod_requests_list[1]
        wc, wm = self.resources[0].weight, self.resources[1].weight
        use_requested = self.use_requested
        if len(nodes) >= _NUMPY_MIN_NODES:
            vectorized = _score_columns(kind, nodes, use_requested, pc, pm, wc, wm, columns)
            if vectorized is not None:
                return vectorized, Status.success()
        scores: list[int] = []
        append = scores.append
        for ni in nodes:
            a = ni.allocatable
            u = ni.requested if use_requested else ni.non_zero_requested
            ac, am, uc, um = a.milli_cpu, a.memory, u.milli_cpu, u.memory
            if ac < 0 or am < 0 or uc < 0 or um < 0:
                append(self.score(ni, pod_requests_list, dra)[0])
                continue
            if kind == "balanced":
                append(_balanced_two(ac, am, uc, um, pc, pm))
                continue
            node_score = weight_sum = 0
            if ac:
                rc = uc + pc
                if kind == "least":
                    node_score += (0 if rc > ac else (ac - rc) * MAX_NODE_SCORE // ac) * wc
                else:
                    node_score += (min(rc, ac) * MAX_NODE_SCORE // ac) * wc
                weight_sum += wc
            if am:
                rm = um + pm
                if kind == "least":
                    node_score += (0 if rm > am else (am - rm) * MAX_NODE_SCORE // am) * wm
                else:
                    node_score += (min(rm, am) * MAX_NODE_SCORE // am) * wm
                weight_sum += wm
            append(node_score // weight_sum if weight_sum else 0)
        return scores, Status.success()

    def score(self, node_info: NodeInfo, pod_requests_list: Sequence[int],
              dra: DRAPreScoreState | None = None) -> tuple[int, Status]:
        """``resourceAllocationScorer.score``: the scorer on this node's lists; Error when no
        resources are configured."""
        if not self.resources:
            return 0, Status(Code.ERROR, ["resources not found"])
        requested, allocated, allocatable = self.node_allocatable_request(node_info, pod_requests_list, dra)
        return self.scorer(requested, allocated, allocatable), Status.success()


# -- SignPod of the resource plugins ------------------------------------------------------------------

DRA_EXTENDED_RESOURCE_REFUSAL = "signature disabled when dra extended resources are used in the cluster"


def resources_sign_pod(pod: PodInfo, snapshot: SnapshotLister | None) -> signers.SignResult:
    """NodeResourcesFit's and NodeResourcesBalancedAllocation's ``SignPod`` (``noderesources/fit.go``,
    ``balanced_allocation.go``; DRAExtendedResource is GA): the Pod's effective request, refused when
    it asks for a non-zero extended resource that a DeviceClass of ``snapshot`` maps
    (``shouldDelegateResourceToDRA`` without a node)."""
    scalar = pod.requests.scalar
    if any(q != 0 for q in scalar.values()):
        resolver = DeviceClassResolver.from_snapshot(snapshot)
        for name, q in scalar.items():
            if q != 0 and should_delegate_resource_to_dra(name, None, resolver):
                return signers.cannot_sign(DRA_EXTENDED_RESOURCE_REFUSAL)
    return [(signers.RESOURCES_SIGNER_NAME, signers.resources_signer(pod))], Status.success()
