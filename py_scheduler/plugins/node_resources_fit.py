"""NodeResourcesFit: does the node have room for the Pod's requests, and how full would it be.

Upstream: ``pkg/scheduler/framework/plugins/noderesources/fit.go`` (PreFilter, Filter, ``fitsRequest``,
``Fits``, PreScore, Score, ``shouldDelegateResourceToDRA``), ``resource_allocation.go`` and the
strategy files (see :mod:`py_scheduler.plugins.helpers.resource_scoring`), args defaulting in
``pkg/scheduler/apis/config/v1/defaults.go`` (``SetDefaults_NodeResourcesFitArgs``) and validation in
``apis/config/validation/validation_pluginargs.go`` (``ValidateNodeResourcesFitArgs``).

Filter (per node, with the Pod's effective request from PreFilter, ``PodInfo.requests``: containers
summed, sidecars added, init containers max-ed, pod-level requests, overhead):

* ``Too many pods`` when the node already runs ``status.allocatable.pods`` Pods;
* nothing else when the Pod requests nothing;
* ``Insufficient cpu`` / ``Insufficient memory`` / ``Insufficient ephemeral-storage`` /
  ``Insufficient <name>`` (extended, hugepages) when request > allocatable - requested. Extended
  resources named in ``ignoredResources`` or whose prefix is in ``ignoredResourceGroups`` are not
  checked; an extended resource the node does not advertise but a DeviceClass backs is left to
  DynamicResources (``DRAExtendedResource``, GA in v1.37).

All reasons are kept. The status is UnschedulableAndUnresolvable when some request exceeds the
node's whole allocatable (preemption cannot help), Unschedulable otherwise.

Score: ``scoringStrategy`` LeastAllocated (default; cpu and memory, weight 1), MostAllocated or
RequestedToCapacityRatio over the configured resources, using the 100m / 200Mi non-zero defaults for
cpu and memory on both the Pod and the node. As upstream, the Score side reads the Pod's container
requests and overhead only (its scorer does not enable pod-level resources). No NormalizeScore.

EventsToRegister (``fit.go`` ``EventsToRegister`` with v1.37's default gates: DRAExtendedResource and
InPlacePodVerticalScaling on, InPlacePodVerticalScalingSchedulerPreemption off), each with upstream's
hint: an assigned Pod deleted (Skip when it had neither a node nor a nomination); a Node added or its
allocatable changed (Skip when the node alone, without Pods, lacks something the Pod asks, as
``isFit``, an extended resource only when no DeviceClass backs it there, or when an update grew none
of the resources the Pod asks, as ``haveAnyRequestedResourcesIncreased``); a DeviceClass added or
updated (Queue only when it backs a resource the Pod asks, ``isSchedulableAfterDeviceClassEvent``); an
assigned Pod scaled down (Queue only when it now counts less of a resource the Pod asks,
``haveEnoughRelevantResourcesDecreased``); the Pod itself scaled down (Queue). A rejected Pod is not
requeued by other events, e.g. a Pod bound elsewhere (issue 21's Unschedulable workload).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from py_scheduler.framework import signers
from py_scheduler.framework.errors import PodParseError
from py_scheduler.framework.events import ActionType, ClusterEvent, ClusterEventWithHint, QueueingHint
from py_scheduler.framework.events import Resource as EventResource
from py_scheduler.framework.handle import Handle
from py_scheduler.framework.interfaces import PreFilterResult
from py_scheduler.framework.lister import SnapshotLister
from py_scheduler.framework.pod_resources import pod_requests
from py_scheduler.framework.types import Code, CycleState, NodeInfo, PodInfo, Resource, Status
from py_scheduler.plugins.helpers.columns import (
    ALLOC_CPU,
    ALLOC_EPH,
    ALLOC_MEM,
    FILTER_LIMIT,
    FREE_CPU,
    FREE_EPH,
    FREE_MEM,
    FREE_PODS,
    BoolArray,
    GatheredColumns,
)
from py_scheduler.plugins.helpers.extended_resources import (
    DEVICE_CLASS_PREFIX,
    DeviceClassResolver,
    DRAPreScoreState,
    is_extended_resource_name,
    is_qualified_name,
    should_delegate_resource_to_dra,
)
from py_scheduler.plugins.helpers.queueing_hints import hint_pod_info
from py_scheduler.plugins.helpers.resource_scoring import (
    DEFAULT_RESOURCES,
    FieldErrors,
    ResourceAllocationScorer,
    ResourceSpec,
    Scorer,
    UtilizationShapePoint,
    decode_resources,
    decode_shape,
    dra_pre_score_state,
    least_resource_scorer,
    most_resource_scorer,
    node_columns_of,
    requested_to_capacity_ratio_scorer,
    resources_sign_pod,
)

__all__ = [
    "LEAST_ALLOCATED",
    "MOST_ALLOCATED",
    "NAME",
    "PRE_FILTER_STATE_KEY",
    "PRE_SCORE_STATE_KEY",
    "REQUESTED_TO_CAPACITY_RATIO",
    "InsufficientResource",
    "NodeResourcesFit",
    "NodeResourcesFitArgs",
    "fits_request",
]

NAME = "NodeResourcesFit"
PRE_FILTER_STATE_KEY = "PreFilter" + NAME
PRE_SCORE_STATE_KEY = "PreScore" + NAME

LEAST_ALLOCATED = "LeastAllocated"
MOST_ALLOCATED = "MostAllocated"
REQUESTED_TO_CAPACITY_RATIO = "RequestedToCapacityRatio"
SUPPORTED_STRATEGIES = (LEAST_ALLOCATED, MOST_ALLOCATED, REQUESTED_TO_CAPACITY_RATIO)
_QUALIFIED_NAME_MSG = ("a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start "
                       "and end with an alphanumeric character, with an optional DNS subdomain prefix and '/' "
                       "(e.g. 'example.com/MyName')")


@dataclass(frozen=True, slots=True)
class NodeResourcesFitArgs:
    """``NodeResourcesFitArgs`` after defaulting.

    Attributes:
        ignored_resources: extended resource names Filter does not check.
        ignored_resource_groups: extended resource prefixes (``example.com``) Filter does not check.
        strategy: LeastAllocated, MostAllocated or RequestedToCapacityRatio.
        resources: scored resources with weights 1..100.
        shape: RequestedToCapacityRatio points (utilization %, score 0..10), else empty.
    """

    ignored_resources: frozenset[str] = frozenset()
    ignored_resource_groups: frozenset[str] = frozenset()
    strategy: str = LEAST_ALLOCATED
    resources: tuple[ResourceSpec, ...] = DEFAULT_RESOURCES
    shape: tuple[UtilizationShapePoint, ...] = ()

    @classmethod
    def from_dict(cls, args: dict[str, Any] | None) -> NodeResourcesFitArgs:
        """Decode, default and validate ``pluginConfig[NodeResourcesFit].args`` (camelCase keys).

        Raises:
            ConfigError: every problem found, each naming its field (``scoringStrategy.type``,
                ``scoringStrategy.resources[0].weight``,
                ``scoringStrategy.requestedToCapacityRatio.shape[1].utilization``, ...).
        """
        args = args or {}
        errs = FieldErrors()
        if not isinstance(args, dict):
            errs.invalid("args", args, "must be an object")
            errs.raise_if_any()
        errs.unknown_fields("", args, ("kind", "apiVersion", "ignoredResources", "ignoredResourceGroups",
                                       "scoringStrategy"))
        ignored = _string_list(args.get("ignoredResources"), "ignoredResources", errs)
        for i, name in enumerate(ignored):
            if not is_qualified_name(name):
                errs.invalid(f"ignoredResources[{i}]", name, _QUALIFIED_NAME_MSG)
        groups = _string_list(args.get("ignoredResourceGroups"), "ignoredResourceGroups", errs)
        for i, group in enumerate(groups):
            if "/" in group:
                errs.invalid(f"ignoredResourceGroups[{i}]", group, "resource group name can't contain '/'")
            elif not is_qualified_name(group):
                errs.invalid(f"ignoredResourceGroups[{i}]", group, _QUALIFIED_NAME_MSG)

        raw_ss = args.get("scoringStrategy")
        strategy: str = LEAST_ALLOCATED
        resources: list[ResourceSpec] = list(DEFAULT_RESOURCES)
        shape: list[UtilizationShapePoint] = []
        if raw_ss is not None:
            if not isinstance(raw_ss, dict):
                errs.invalid("scoringStrategy", raw_ss, "must be an object")
            else:
                errs.unknown_fields("scoringStrategy", raw_ss, ("type", "resources", "requestedToCapacityRatio"))
                raw_type = raw_ss.get("type")
                strategy = raw_type if isinstance(raw_type, str) else ""
                if strategy not in SUPPORTED_STRATEGIES:
                    errs.not_supported("scoringStrategy.type", raw_ss.get("type", ""), SUPPORTED_STRATEGIES)
                resources = decode_resources(raw_ss.get("resources"), "scoringStrategy.resources", errs)
                for i, r in enumerate(resources):
                    if not 0 < r.weight <= 100:
                        errs.invalid(f"scoringStrategy.resources[{i}].weight", r.weight,
                                     f"resource weight of {r.name} not in valid range (0, 100]")
                rtcr = raw_ss.get("requestedToCapacityRatio")
                rtcr_path = "scoringStrategy.requestedToCapacityRatio"
                if strategy == REQUESTED_TO_CAPACITY_RATIO:
                    if rtcr is None:
                        errs.required(rtcr_path, "must be specified when type is RequestedToCapacityRatio")
                    elif not isinstance(rtcr, dict):
                        errs.invalid(rtcr_path, rtcr, "must be an object")
                    else:
                        errs.unknown_fields(rtcr_path, rtcr, ("shape",))
                        shape = decode_shape(rtcr.get("shape"), f"{rtcr_path}.shape", errs)
                elif rtcr is not None:
                    errs.forbidden(rtcr_path, "must be nil when type is not RequestedToCapacityRatio")
        errs.raise_if_any()
        return cls(frozenset(ignored), frozenset(groups), strategy, tuple(resources), tuple(shape))

    def scorer(self) -> Scorer:
        """The strategy's scorer function (``nodeResourceStrategyTypeMap``)."""
        if self.strategy == MOST_ALLOCATED:
            return most_resource_scorer(self.resources)
        if self.strategy == REQUESTED_TO_CAPACITY_RATIO:
            return requested_to_capacity_ratio_scorer(self.resources, self.shape)
        return least_resource_scorer(self.resources)


def _string_list(raw: object, path: str, errs: FieldErrors) -> list[str]:
    if raw is None:
        return []
    if not isinstance(raw, list) or not all(isinstance(x, str) for x in raw):
        errs.invalid(path, raw, "must be a list of strings")
        return []
    return list(raw)


@dataclass(frozen=True, slots=True)
class InsufficientResource:
    """``InsufficientResource``: one resource the node lacks for the Pod.

    ``requested`` / ``used`` / ``capacity`` in the resource's unit (milli-CPU, bytes, count);
    ``unresolvable`` when the request exceeds the node's whole allocatable.
    """

    resource_name: str
    reason: str
    requested: int
    used: int
    capacity: int
    unresolvable: bool = False


@dataclass(slots=True)
class _PreFilterState:
    """``preFilterState``: the Pod's effective request, plus the DeviceClass resolver of the cycle
    when the Pod asks for scalar resources."""

    request: Resource
    resolver: DeviceClassResolver = field(default_factory=DeviceClassResolver)

    def clone(self) -> _PreFilterState:
        return self


@dataclass(slots=True)
class _PreScoreState:
    """``preScoreState``: the Pod's request per scored resource (non-zero defaults applied)."""

    pod_requests: list[int]
    dra: DRAPreScoreState | None = None

    def clone(self) -> _PreScoreState:
        return self


_SUCCESS = Status.success()
_MAX_VECTORIZED_CHECKS = 60
"""Per-node failure patterns are int64 bit sets: at most this many checked resources."""


def fits_request(request: Resource, node_info: NodeInfo, ignored_resources: frozenset[str] = frozenset(),
                 ignored_groups: frozenset[str] = frozenset(),
                 resolver: DeviceClassResolver | None = None) -> list[InsufficientResource]:
    """``fitsRequest``: every resource ``node_info`` lacks for ``request`` (empty: the Pod fits).

    ``request`` is the Pod's effective request (``PodInfo.requests``); ``resolver`` maps extended
    resources to DeviceClasses (None: no DRA-backed resources).
    """
    out: list[InsufficientResource] = []
    alloc, used = node_info.allocatable, node_info.requested
    n_pods = len(node_info.pods)
    if n_pods + 1 > alloc.allowed_pod_number:
        out.append(InsufficientResource("pods", "Too many pods", 1, n_pods, alloc.allowed_pod_number))
    if request.milli_cpu == 0 and request.memory == 0 and request.ephemeral_storage == 0 and not request.scalar:
        return out
    if request.milli_cpu > 0 and request.milli_cpu > alloc.milli_cpu - used.milli_cpu:
        out.append(InsufficientResource("cpu", "Insufficient cpu", request.milli_cpu, used.milli_cpu,
                                        alloc.milli_cpu, request.milli_cpu > alloc.milli_cpu))
    if request.memory > 0 and request.memory > alloc.memory - used.memory:
        out.append(InsufficientResource("memory", "Insufficient memory", request.memory, used.memory,
                                        alloc.memory, request.memory > alloc.memory))
    if request.ephemeral_storage > 0 and request.ephemeral_storage > alloc.ephemeral_storage - used.ephemeral_storage:
        out.append(InsufficientResource("ephemeral-storage", "Insufficient ephemeral-storage",
                                        request.ephemeral_storage, used.ephemeral_storage, alloc.ephemeral_storage,
                                        request.ephemeral_storage > alloc.ephemeral_storage))
    for name, q in request.scalar.items():
        if q == 0:
            continue
        if is_extended_resource_name(name) and (
                name in ignored_resources or (ignored_groups and name.split("/", 1)[0] in ignored_groups)):
            continue
        if resolver is not None and should_delegate_resource_to_dra(name, node_info, resolver):
            continue
        cap = alloc.scalar.get(name, 0)
        in_use = used.scalar.get(name, 0)
        if q > 0 and q > cap - in_use:
            out.append(InsufficientResource(name, f"Insufficient {name}", q, in_use, cap, q > cap))
    return out


class NodeResourcesFit:
    """PreFilter / Filter / PreScore / Score plugin (``noderesources.Fit``).

    State keys: ``PreFilterNodeResourcesFit`` (the Pod's request) and ``PreScoreNodeResourcesFit``
    (the Pod's per-resource score request). PreFilter and PreScore never Skip (as upstream).
    """

    name = NAME

    def sign_pod(self, pod: PodInfo, snapshot: SnapshotLister | None) -> signers.SignResult:
        """``SignPod`` (upstream ``pkg/scheduler/framework/plugins/noderesources/fit.go``): the Pod's effective
        request; refuses a Pod asking for an extended resource a DeviceClass maps (DRA extended resources).
        ``snapshot`` is unused by most plugins."""
        return resources_sign_pod(pod, snapshot)


    def __init__(self, args: NodeResourcesFitArgs | None = None, handle: Handle | None = None) -> None:
        self.args = args or NodeResourcesFitArgs()
        self.handle = handle
        self._hint_node: tuple[dict[str, Any], NodeInfo] | None = None
        self._hint_old: tuple[dict[str, Any], Resource] | None = None
        self._hint_classes: tuple[dict[str, Any], DeviceClassResolver] | None = None
        self.scorer = ResourceAllocationScorer(self.args.strategy, self.args.scorer(), self.args.resources,
                                               use_requested=False, pod_level_and_status=False)

    @classmethod
    def create(cls, args: dict[str, Any], handle: Handle) -> NodeResourcesFit:
        """Build from ``pluginConfig`` args (see :meth:`NodeResourcesFitArgs.from_dict`).

        Raises:
            ConfigError: invalid args, naming the field.
        """
        return cls(NodeResourcesFitArgs.from_dict(args), handle)

    # -- EnqueueExtensions --------------------------------------------------------------------------
    def events_to_register(self) -> list[ClusterEventWithHint]:
        """``EventsToRegister`` (see the module docstring)."""
        return [
            ClusterEventWithHint(ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE),
                                 _schedulable_after_assigned_pod_delete),
            ClusterEventWithHint(ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_ALLOCATABLE),
                                 self._schedulable_after_node_change),
            ClusterEventWithHint(ClusterEvent(EventResource.DEVICE_CLASS, ActionType.ADD | ActionType.UPDATE),
                                 _schedulable_after_device_class_event),
            ClusterEventWithHint(ClusterEvent(EventResource.ASSIGNED_POD, ActionType.UPDATE_POD_SCALE_DOWN),
                                 _schedulable_after_assigned_pod_scale_down),
            ClusterEventWithHint(ClusterEvent(EventResource.TARGET_POD, ActionType.UPDATE_POD_SCALE_DOWN)),
        ]

    def _device_classes(self, event_obj: dict[str, Any]) -> DeviceClassResolver:
        """The DeviceClasses the informers hold now (``draManager.DeviceClassResolver()``), for the hints;
        none without a Handle. Kept for the event's object (``event_obj``): one event is offered to
        every rejected Pod, and a DeviceClass change is an event of its own."""
        last = self._hint_classes
        if last is not None and last[0] is event_obj:
            return last[1]
        objects = self.handle.objects if self.handle is not None else None
        resolver = DeviceClassResolver(objects.list("DeviceClass")) if objects is not None else DeviceClassResolver()
        self._hint_classes = (event_obj, resolver)
        return resolver

    def _schedulable_after_node_change(self, pod: dict[str, Any], old: Any, new: Any) -> QueueingHint:
        """``isSchedulableAfterNodeChange``: Skip when the added or updated node, without any Pod, lacks
        something the Pod asks (``isFit``: an extended resource only when no DeviceClass backs it and
        the node advertises none, ``shouldDelegateResourceToDRA``), or when an update grew nothing the
        Pod asks (``haveAnyRequestedResourcesIncreased``); Queue otherwise. A Pod or node that cannot be
        parsed: Queue.

        One event is offered to every Pod rejected by this plugin, so the node's NodeInfo (and the
        DeviceClasses) are kept for the last node object seen and each Pod's PodInfo per Pod object
        (:func:`~py_scheduler.plugins.helpers.queueing_hints.hint_pod_info`)."""
        if not isinstance(new, dict):
            return QueueingHint.QUEUE
        try:
            last = self._hint_node
            if last is not None and last[0] is new:
                node_info = last[1]
            else:
                node_info = NodeInfo(new)
                self._hint_node = (new, node_info)
            request = hint_pod_info(pod).scheduling_requests()  # isFit: the spec alone
            resolver = self._device_classes(new) if any(request.scalar.values()) else None
            lacking = fits_request(request, node_info, resolver=resolver)
        except Exception:  # malformed Pod or Node: upstream's error path requeues
            return QueueingHint.QUEUE
        if lacking:
            return QueueingHint.QUEUE_SKIP
        if isinstance(old, dict):
            try:
                prev = self._hint_old
                if prev is None or prev[0] is not old:  # one event is offered to every rejected Pod
                    prev = self._hint_old = (old, NodeInfo(old).allocatable)
                grew = _requested_resources_increased(request, prev[1], node_info, resolver)
            except Exception:  # a malformed old Node: requeue, as upstream's error path
                return QueueingHint.QUEUE
            if not grew:
                return QueueingHint.QUEUE_SKIP
        return QueueingHint.QUEUE

    # -- PreFilter / Filter -------------------------------------------------------------------------
    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> tuple[PreFilterResult, Status]:
        """Store the Pod's effective request (and, when it asks for scalar resources, the
        DeviceClass resolver) for Filter: the spec's, never a resize status's (``computePodResourceRequest``)."""
        request = pod.scheduling_requests()
        resolver = DeviceClassResolver()
        if any(v != 0 for v in request.scalar.values()):
            resolver = DeviceClassResolver.from_snapshot(state.snapshot)
        state.write(PRE_FILTER_STATE_KEY, _PreFilterState(request, resolver))
        return None, Status.success()

    def filter_nodes(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> list[Status] | None:
        """:meth:`filter` for each of ``nodes`` in order (the runtime's batch form; None: all fit).

        With 32 nodes or more of the snapshot, ``fitsRequest`` runs as array comparisons over the
        snapshot's :class:`~py_scheduler.cache.snapshot.NodeColumns` (pods, cpu, memory,
        ephemeral-storage and each requested scalar resource: lacking where request > allocatable -
        in use, unresolvable where request > allocatable, DRA-delegated where the node has none and a
        DeviceClass maps it) and a Status is built only for failing nodes, with upstream's reasons in
        ``fitsRequest``'s order; nodes whose quantities exceed int64's safe range go through
        :meth:`filter`. Otherwise a node where the Pod clearly fits passes at once (ignored and
        DRA-delegated resources only ever remove failures) and any other node goes through
        :meth:`filter`.
        """
        try:
            s: _PreFilterState = state.read(PRE_FILTER_STATE_KEY)
        except KeyError:
            return [self.filter(state, pod, ni) for ni in nodes]
        cols = node_columns_of(state.snapshot, len(nodes))
        got = cols.gather(nodes) if cols is not None else None
        if got is not None:
            done, statuses = self._filter_columns(state, pod, nodes, s, got)
            if done:
                return statuses
        req = s.request
        rc, rm, re_, scalar = req.milli_cpu, req.memory, req.ephemeral_storage, list(req.scalar.items())
        out: list[Status] | None = None
        for j, ni in enumerate(nodes):
            a, u = ni.allocatable, ni.requested
            if (len(ni.pods) < a.allowed_pod_number
                    and (rc <= 0 or rc <= a.milli_cpu - u.milli_cpu)
                    and (rm <= 0 or rm <= a.memory - u.memory)
                    and (re_ <= 0 or re_ <= a.ephemeral_storage - u.ephemeral_storage)
                    and all(q <= 0 or q <= a.scalar.get(n, 0) - u.scalar.get(n, 0) for n, q in scalar)):
                continue
            st = self.filter(state, pod, ni)
            if st.code:
                if out is None:
                    out = [_SUCCESS] * len(nodes)
                out[j] = st
        return out

    def _filter_columns(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo], s: _PreFilterState,
                        got: GatheredColumns) -> tuple[bool, list[Status] | None]:
        """The array form of :meth:`filter_nodes`: (True, its result), or (False, None) when a request
        is beyond int64's safe range or too many resources are requested (the caller loops)."""
        req = s.request
        v = got.values
        fallback = ~got.filter_ok if got.filter_ok is not None else None
        # (reason, lacking, request > whole allocatable) in fitsRequest's order
        checks: list[tuple[str, BoolArray, BoolArray | None]] = [("Too many pods", v[FREE_PODS] < 1, None)]
        for amount, free_row, alloc_row, reason in ((req.milli_cpu, FREE_CPU, ALLOC_CPU, "Insufficient cpu"),
                                                    (req.memory, FREE_MEM, ALLOC_MEM, "Insufficient memory"),
                                                    (req.ephemeral_storage, FREE_EPH, ALLOC_EPH,
                                                     "Insufficient ephemeral-storage")):
            if amount > 0:
                if amount >= FILTER_LIMIT:
                    return False, None
                checks.append((reason, v[free_row] < amount, v[alloc_row] < amount))
        ignored, groups = self.args.ignored_resources, self.args.ignored_resource_groups
        for name, q in req.scalar.items():
            if q <= 0:  # fitsRequest skips 0 and never finds a negative request lacking
                continue
            if is_extended_resource_name(name) and (
                    name in ignored or (groups and name.split("/", 1)[0] in groups)):
                continue
            if q >= FILTER_LIMIT or len(checks) >= _MAX_VECTORIZED_CHECKS:
                return False, None
            alloc, free, ok = got.scalar(name)
            lacking = free < q
            if s.resolver and s.resolver.get(name) is not None:
                lacking &= alloc > 0  # shouldDelegateResourceToDRA: left to DynamicResources
            checks.append((f"Insufficient {name}", lacking, alloc < q))
            if ok is not None:
                fallback = ~ok if fallback is None else fallback | ~ok
        # one code per node: bit k + 1 = check k lacking, bit 0 = unresolvable, -1 = Python path
        pattern = np.zeros(len(nodes), np.int64)
        unresolvable = np.zeros(len(nodes), np.bool_)
        for k, (_, lacking, unres) in enumerate(checks):
            pattern |= lacking.astype(np.int64) << (k + 1)
            if unres is not None:
                unresolvable |= lacking & unres
        pattern |= unresolvable
        if fallback is not None:
            pattern[fallback] = -1
        failing = np.flatnonzero(pattern)
        if not len(failing):
            return True, None
        out: list[Status] | None = None
        made: dict[int, tuple[Code, list[str]]] = {}
        for j, c in zip(failing.tolist(), pattern[failing].tolist(), strict=True):
            if c == -1:
                st = self.filter(state, pod, nodes[j])
                if not st.code:
                    continue
            else:
                entry = made.get(c)
                if entry is None:
                    code = Code.UNSCHEDULABLE_AND_UNRESOLVABLE if c & 1 else Code.UNSCHEDULABLE
                    entry = made[c] = (code, [r for k, (r, _, _) in enumerate(checks) if c >> (k + 1) & 1])
                st = Status(entry[0], list(entry[1]), NAME)
            if out is None:
                out = [_SUCCESS] * len(nodes)
            out[j] = st
        return True, out

    def filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status:
        """Unschedulable(AndUnresolvable) with one ``Insufficient ...`` / ``Too many pods`` reason per
        lacking resource; Error when PreFilter did not run."""
        try:
            s: _PreFilterState = state.read(PRE_FILTER_STATE_KEY)
        except KeyError:
            return Status.error(f'error reading "{PRE_FILTER_STATE_KEY}" from cycleState: not found', NAME)
        lacking = fits_request(s.request, node_info, self.args.ignored_resources,
                               self.args.ignored_resource_groups, s.resolver if s.resolver else None)
        if not lacking:
            return Status.success()
        code = Code.UNSCHEDULABLE_AND_UNRESOLVABLE if any(r.unresolvable for r in lacking) else Code.UNSCHEDULABLE
        return Status(code, [r.reason for r in lacking], NAME)

    # -- PreScore / Score ---------------------------------------------------------------------------
    def _pre_score_state(self, state: CycleState, pod: PodInfo) -> _PreScoreState:
        reqs = self.scorer.pod_request_list(pod)
        dra = dra_pre_score_state(state.snapshot, self.args.resources) if state.snapshot is not None else None
        return _PreScoreState(reqs, dra)

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> Status:
        """Compute the Pod's request per scored resource once for all nodes."""
        try:
            state.write(PRE_SCORE_STATE_KEY, self._pre_score_state(state, pod))
        except PodParseError as exc:
            return Status.error(str(exc), NAME)
        return Status.success()

    def score_nodes(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> tuple[list[int], Status]:
        """:meth:`score` for each of ``nodes`` in order (the runtime's batch form)."""
        try:
            s: _PreScoreState = state.read(PRE_SCORE_STATE_KEY)
        except KeyError:
            try:
                s = self._pre_score_state(state, pod)
            except PodParseError as exc:
                return [], Status.error(str(exc), NAME)
        return self.scorer.score_nodes(nodes, s.pod_requests, s.dra, node_columns_of(state.snapshot, len(nodes)))

    def score(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> tuple[int, Status]:
        """The strategy's score (0..100) for ``node_info``."""
        try:
            s: _PreScoreState = state.read(PRE_SCORE_STATE_KEY)
        except KeyError:
            try:
                s = self._pre_score_state(state, pod)
            except PodParseError as exc:
                return 0, Status.error(str(exc), NAME)
        return self.scorer.score(node_info, s.pod_requests, s.dra)


def _schedulable_after_assigned_pod_delete(pod: dict[str, Any], old: Any, new: Any) -> QueueingHint:
    """``isSchedulableAfterAssignedPodDelete``: a deleted Pod that had neither a node nor a nominated
    node freed nothing (Skip); any other deletion may (Queue). Not a Pod: Queue (upstream's error)."""
    if not isinstance(old, dict):
        return QueueingHint.QUEUE
    spec, status = old.get("spec"), old.get("status")
    node = spec.get("nodeName") if isinstance(spec, dict) else None
    nominated = status.get("nominatedNodeName") if isinstance(status, dict) else None
    return QueueingHint.QUEUE if node or nominated else QueueingHint.QUEUE_SKIP


def _schedulable_after_device_class_event(pod: dict[str, Any], old: Any, new: Any) -> QueueingHint:
    """``isSchedulableAfterDeviceClassEvent``: Queue when the added class backs a resource the Pod asks
    (``deviceclass.resource.kubernetes.io/<name>``), or when the class's ``extendedResourceName`` (on
    an update: a changed one) is asked by the Pod; Skip otherwise. Anything unparsable: Queue."""
    if not isinstance(new, dict):
        return QueueingHint.QUEUE
    try:
        ern = (new.get("spec") or {}).get("extendedResourceName")
        if isinstance(old, dict) and (old.get("spec") or {}).get("extendedResourceName") == ern:
            return QueueingHint.QUEUE_SKIP
        asked = pod_requests({**pod, "status": {}})
        if not isinstance(old, dict) and DEVICE_CLASS_PREFIX + str((new.get("metadata") or {}).get("name")) in asked:
            return QueueingHint.QUEUE
        if isinstance(ern, str) and ern in asked:
            return QueueingHint.QUEUE
    except Exception:
        return QueueingHint.QUEUE
    return QueueingHint.QUEUE_SKIP


def _schedulable_after_assigned_pod_scale_down(pod: dict[str, Any], old: Any, new: Any) -> QueueingHint:
    """``isSchedulableAfterAssignedPodScaleDown`` (``haveEnoughRelevantResourcesDecreased``): Queue only
    when a Pod on a node now counts less of a resource the rejected Pod asks (cpu, memory,
    ephemeral-storage or a scalar, status-aware requests as upstream's options); Skip otherwise.
    Anything unparsable: Queue."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return QueueingHint.QUEUE
    if not (new.get("spec") or {}).get("nodeName"):
        return QueueingHint.QUEUE_SKIP
    try:
        before, after, asked = hint_pod_info(old).requests, hint_pod_info(new).requests, hint_pod_info(pod).requests
    except Exception:
        return QueueingHint.QUEUE
    if ((asked.milli_cpu and before.milli_cpu > after.milli_cpu)
            or (asked.memory and before.memory > after.memory)
            or (asked.ephemeral_storage and before.ephemeral_storage > after.ephemeral_storage)):
        return QueueingHint.QUEUE
    for name, q in asked.scalar.items():
        if q and before.scalar.get(name, 0) > after.scalar.get(name, 0):
            return QueueingHint.QUEUE
    return QueueingHint.QUEUE_SKIP


def _requested_resources_increased(request: Resource, old: Resource, new_node: NodeInfo,
                                   resolver: DeviceClassResolver | None) -> bool:
    """``haveAnyRequestedResourcesIncreased`` (``noderesources/fit.go``) on the old node's allocatable
    and the new node: more Pod slots, or more of a resource the Pod requests (cpu, memory,
    ephemeral-storage, a scalar), or a requested scalar that DRA serves on the new node
    (``shouldDelegateResourceToDRA``: the node advertises none and a DeviceClass of ``resolver`` backs it)."""
    new = new_node.allocatable
    if new.allowed_pod_number > old.allowed_pod_number:
        return True
    if request.milli_cpu == 0 and request.memory == 0 and request.ephemeral_storage == 0 and not request.scalar:
        return False
    if (request.milli_cpu > 0 and new.milli_cpu > old.milli_cpu) or (
            request.memory > 0 and new.memory > old.memory) or (
            request.ephemeral_storage > 0 and new.ephemeral_storage > old.ephemeral_storage):
        return True
    for name, q in request.scalar.items():
        if q == 0:
            continue
        if new.scalar.get(name, 0) > old.scalar.get(name, 0):
            return True
        if resolver is not None and should_delegate_resource_to_dra(name, new_node, resolver):
            return True
    return False
