"""DynamicResources: Pods that use ResourceClaims (DRA, resource.k8s.io/v1) fit only nodes where
their claims are or can be allocated.

Upstream: ``pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go`` (PreFilter,
Filter, PostFilter, Score / ``computeScore``, NormalizeScore, Reserve, Unreserve, the reason strings),
``claims.go`` (``claimStore``), ``dra_manager.go`` (allocated devices, in-flight allocations),
``extendeddynamicresources.go`` (extended resources backed by DRA) and
``k8s.io/dynamic-resource-allocation/resourceclaim/resourceclaim.go`` (``Name``, ``IsForPod``,
``IsReservedForPod``). The allocator is :mod:`.allocator`, selectors are evaluated by
:mod:`py_scheduler.plugins.helpers.cel`.

Skip rules, as upstream: PreFilter returns Skip for a Pod without claims (and without extended
resources backed by a DeviceClass), so Filter does not run; there is no PreScore, so Score always
runs and gives 0 on every node for such a Pod (the upstream oracle shows
``"DynamicResources": {"A": 0, "B": 0}``); NormalizeScore is ``DefaultNormalizeScore``.

Every rejection from this plugin is ``UnschedulableAndUnresolvable`` (upstream's
``statusUnschedulable``); broken claims / classes / CEL give ``Error`` (the Pod is retried).

The binding cycle is upstream's (:mod:`.binding`): Reserve records the allocation in the
CycleState (``state.data[ALLOCATIONS_KEY]``: claim ``namespace/name`` -> AllocationResult JSON,
``state.data[NEEDS_API_ALLOCATION_KEY]`` when some claim's status must be written) and keeps it in
flight; PreBind writes allocation and reservation through the Handle's API client (offline: into the
in-memory objects, :func:`simulated_pre_bind`), so later Pods see the devices taken and may share
the claim.

PostFilter deallocates a claim allocated where the Pod cannot go (or deletes a stale
extended-resource claim) through the Handle's client, as a background task.

DeviceTaintRules (GA) add their taints to the devices they select before allocation, as the
scheduler's ResourceSlice tracker does; only NoSchedule / NoExecute taints keep a device from a
request that does not tolerate them (the eviction of running Pods is the controller's).

Admin access, consumable capacity (shares of a device, capacity request policies), partitionable
devices (counter sets) and binding conditions are allocated as upstream's incubating allocator does
(:mod:`.allocator`, :mod:`.capacity`); the allocated state counts dedicated devices, shares and the
capacity shares consume (:class:`AllocatedState`).

Extended resources backed by a DeviceClass (``DRAExtendedResource``) are allocated like upstream
(the special ``<extended-resources>`` claim with one request per container) on nodes whose device
plugins do not advertise them.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import re
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from py_scheduler.framework import quantity as qty
from py_scheduler.framework import signers
from py_scheduler.framework.events import ActionType, ClusterEvent, ClusterEventWithHint, QueueingHint, Resource
from py_scheduler.framework.handle import APIClient, APIError, Handle
from py_scheduler.framework.interfaces import PostFilterResult, PreFilterResult
from py_scheduler.framework.lister import ClusterObjectsLister, SnapshotLister
from py_scheduler.framework.memo import PodInput, PodMemo
from py_scheduler.framework.types import Code, CycleState, NodeInfo, PodInfo, PodParseError, Status
from py_scheduler.plugins.dynamic_resources.allocator import (
    AllocationError,
    AllocationTimeout,
    Allocator,
    DeviceID,
    FailedAllocationOnNode,
    SliceIndex,
    apply_taint_rules,
    claim_ref,
)
from py_scheduler.plugins.dynamic_resources.binding import (
    BindingError,
    bind_claim,
    claim_path,
    claim_ready_for_binding,
    claim_timed_out,
    has_binding_conditions,
    record_pending,
    unreserve_patch,
    wait_for_binding_conditions,
)
from py_scheduler.plugins.helpers.node_selector import NodeSelector
from py_scheduler.plugins.helpers.normalize import default_normalize_score
from py_scheduler.plugins.helpers.resource_scoring import DeviceClassResolver, is_dra_extended_resource_name

__all__ = [
    "ALLOCATIONS_KEY",
    "NAME",
    "NEEDS_API_ALLOCATION_KEY",
    "NEEDS_API_DEALLOCATION_KEY",
    "DRAState",
    "DynamicResources",
    "simulated_pre_bind",
]


@dataclass(slots=True)
class AllocatedState:
    """``schedulerapi.AllocatedState``: devices dedicated to claims, devices with allocated shares,
    and the capacity those shares consume (device -> capacity name -> amount)."""

    dedicated: set[DeviceID] = field(default_factory=set)
    shared: set[DeviceID] = field(default_factory=set)
    capacity: dict[DeviceID, dict[str, Decimal]] = field(default_factory=dict)

log = logging.getLogger("py_scheduler.plugins.dynamic_resources")

Obj = dict[str, Any]

NAME = "DynamicResources"
STATE_KEY = NAME
NEEDS_API_ALLOCATION_KEY = "DynamicResources/needs-api-allocation"
"""CycleState key set to True by Reserve when ResourceClaim status must be written (allocation
and/or ``reservedFor``) before the Pod may be bound."""
ALLOCATIONS_KEY = "DynamicResources/allocations"
"""CycleState key: claim ``namespace/name`` -> AllocationResult JSON chosen by Reserve."""
NEEDS_API_DEALLOCATION_KEY = "DynamicResources/needs-api-deallocation"
"""CycleState key: claim ``namespace/name`` PostFilter would deallocate upstream."""

FIRST_AVAILABLE_DEVICE_REQUEST_MAX_SIZE = 8
"""``resourceapi.FirstAvailableDeviceRequestMaxSize``: Score adds ``8 - index`` per subrequest used."""
SPECIAL_CLAIM_NAME = "<extended-resources>"
EXTENDED_RESOURCE_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
DRA_OPTIONAL_NODE_OPERATIONS = "DRAOptionalNodeOperations"

def _unresolvable(reason: str) -> Status:
    """``statusUnschedulable``: every DRA rejection is UnschedulableAndUnresolvable."""
    return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [reason], NAME)


def _meta(obj: Obj) -> Obj:
    m = obj.get("metadata")
    return m if isinstance(m, dict) else {}


def _uid(claim: Obj) -> str:
    return str(_meta(claim).get("uid") or claim_ref(claim))


def _allocation(claim: Obj) -> Obj | None:
    st = claim.get("status")
    if not isinstance(st, dict):
        return None
    a = st.get("allocation")
    return a if isinstance(a, dict) else None


def _results(allocation: Obj | None) -> list[Obj]:
    if not allocation:
        return []
    devices = allocation.get("devices") or {}
    res = devices.get("results") if isinstance(devices, dict) else None
    return [r for r in res or [] if isinstance(r, dict)]


def _requests(claim: Obj) -> list[Obj]:
    devices = ((claim.get("spec") or {}).get("devices") or {})
    reqs = devices.get("requests") if isinstance(devices, dict) else None
    return [r for r in reqs or [] if isinstance(r, dict)]


@dataclass(slots=True)
class _PodClaim:
    name: str
    claim_name: str | None
    template_name: str | None


_CLAIMS_MEMO: PodMemo[list[_PodClaim]] = PodMemo(NAME + "/claims", PodInput.SPEC)
"""A Pod's ``spec.resourceClaims``, parsed."""


@dataclass(slots=True)
class DRAState:
    """``stateData``: the Pod's claims (user claims, then the special extended-resource claim),
    per-claim node selectors of existing allocations, the allocator, per-node Filter results.

    ``node_allocations[node]`` holds the AllocationResults of the claims without allocation, in
    claim order. ``clone()`` returns the same object, as upstream.
    """

    claims: list[Obj] = field(default_factory=list)
    num_user: int = 0
    available_on: list[NodeSelector | None] = field(default_factory=list)
    allocations: list[Obj | None] = field(default_factory=list)
    allocator: Allocator | None = None
    unavailable: set[int] = field(default_factory=set)
    node_allocations: dict[str, list[Obj]] = field(default_factory=dict)
    ext_resources: dict[str, int] = field(default_factory=dict)
    resolver: DeviceClassResolver | None = None
    pod_spec: Obj = field(default_factory=dict)
    reserved: set[int] = field(default_factory=set)
    """Claims whose reservation for the Pod PreBind wrote (Unreserve takes it back)."""
    node_ext: dict[str, tuple[Obj, list[dict[str, str]]]] = field(default_factory=dict)
    """Node -> the special claim with the requests that node needs and the containers' request
    mappings (``nodeAllocation.extendedResourceClaim`` / ``containerResourceRequestMappings``)."""
    created_ext: Obj | None = None
    """The extended-resource claim PreBind created in the API (Unreserve deletes it)."""
    plain: list[Obj] | None = None
    """Set by PreFilter when every claim is a user claim still to allocate (no extended-resource
    claim): the claims to allocate, one list object for every node, so Filter skips the per-claim
    checks that cannot fail for such claims and the allocator recognises the same list."""

    def clone(self) -> DRAState:
        return self

    def to_allocate(self) -> list[tuple[int, Obj]]:
        return [(i, c) for i, c in enumerate(self.claims) if _allocation(c) is None]

    def extended_claim(self) -> Obj | None:
        return self.claims[self.num_user] if len(self.claims) > self.num_user else None



def _state_not_found() -> Status:
    """``getStateData``'s error: PreFilter never wrote the plugin's state (it did not run for this Pod)."""
    return Status.error(f"reading {STATE_KEY!r} from cycleState: not found", NAME)


def _state_data(state: CycleState) -> DRAState | None:
    """``getStateData``: the plugin's cycle state, or None when PreFilter did not write it."""
    try:
        s: DRAState = state.read(STATE_KEY)
    except KeyError:
        return None
    return s

class _Unschedulable(Exception):
    """A reason for ``statusUnschedulable`` found while collecting the Pod's claims."""


_DURATION_RE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(raw: object, path: str) -> float:
    """A Go ``time.Duration`` string (``"10s"``, ``"1m30s"``, ``"-1s"``) in seconds.

    Raises:
        ConfigError: not a duration, naming ``path``.
    """
    from py_scheduler.framework.errors import ConfigError

    if not isinstance(raw, str) or not raw:
        raise ConfigError(f"{path}: invalid duration {raw!r}")
    sign = -1.0 if raw.startswith("-") else 1.0
    body = raw.lstrip("+-")
    if body == "0":
        return 0.0
    pos, total = 0, 0.0
    for m in _DURATION_RE.finditer(body):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if pos != len(body) or pos == 0:
        raise ConfigError(f"{path}: invalid duration {raw!r}")
    return sign * total


class DynamicResources:
    """PreFilter / Filter / PostFilter / Score / NormalizeScore / Reserve / Unreserve / PreBind of DRA.

    Args (``DynamicResourcesArgs``): ``filterTimeout`` (duration, default 10s, 0 disables, must
    not be negative), ``bindingTimeout`` (duration, default 600s, at least 1s: how long PreBind waits
    for device binding conditions).

    The plugin keeps the claims it allocated in Reserve "in flight" (upstream's
    ``SignalClaimPendingAllocation``) until Unreserve or until the claim's status shows an
    allocation: their devices count as taken and another Pod sharing such a claim waits.
    """

    name = NAME

    def sign_pod(self, pod: PodInfo, snapshot: SnapshotLister | None) -> signers.SignResult:
        """``SignPod`` (upstream ``pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go``): no
        fragment; refuses Pods with resource claims. ``snapshot`` is unused by most plugins."""
        if pod.spec.get("resourceClaims"):
            return signers.cannot_sign("pods with dra resource claims are not signable")
        return [], Status.success()


    def __init__(self, filter_timeout: float = 10.0, binding_timeout: float = 600.0,
                 handle: Handle | None = None) -> None:
        self.filter_timeout = filter_timeout
        self.binding_timeout = binding_timeout
        self.handle = handle
        self.binding_poll = 5.0
        """Seconds between two looks at the claims while waiting for binding conditions (upstream: 5)."""
        self._tasks: set[asyncio.Task[None]] = set()
        # claim UID -> [claim with status.allocation, sharers]
        self._in_flight: dict[str, list[Any]] = {}
        self._slices = SliceIndex()
        """The ResourceSlices parsed once per change of the slice objects, kept across cycles."""

    @classmethod
    def create(cls, args: dict[str, Any], handle: Handle) -> DynamicResources:
        """Validate ``DynamicResourcesArgs``.

        Raises:
            ConfigError: an unknown field, an unparsable duration, ``filterTimeout`` < 0 or
                ``bindingTimeout`` < 1s (upstream's messages).
        """
        from py_scheduler.framework.errors import ConfigError

        args = dict(args or {})
        extra = sorted(set(args) - {"apiVersion", "kind", "filterTimeout", "bindingTimeout"})
        if extra:
            raise ConfigError(f"DynamicResourcesArgs: unknown field(s) {extra}")
        ft = 10.0
        if args.get("filterTimeout") is not None:
            ft = parse_duration(args["filterTimeout"], "filterTimeout")
            if ft < 0:
                raise ConfigError(f"filterTimeout: Invalid value: {args['filterTimeout']!r}: must be zero or positive")
        bt = 600.0
        if args.get("bindingTimeout") is not None:
            bt = parse_duration(args["bindingTimeout"], "bindingTimeout")
            if bt < 1:
                raise ConfigError(f"bindingTimeout: Invalid value: {args['bindingTimeout']!r}: must be at least 1 "
                                  f"second")
        return cls(ft, bt, handle)

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """``EventsToRegister`` (upstream ``dynamicresources.go``): a Node added or its labels /
        allocatable changed; a ResourceClaim added, updated or deleted (hint
        :meth:`is_schedulable_after_claim_change`); a generated claim's name added to the Pod's
        own status (hint :meth:`is_schedulable_after_target_pod_update`); a DeviceClass or a
        ResourceSlice added or updated (new devices; DeviceTaintRule changes arrive as slice
        events, :mod:`py_scheduler.cache.kinds`). Node, class and slice events have no hint
        upstream: they always queue the Pod.

        Upstream also narrows claim events with a ``PreQueueingHintFn`` (only Pods that name the
        claim, or every Pod when an allocated claim is deallocated or deleted): an indexing
        shortcut that decides nothing the claim hint would decide otherwise, so it is left out.
        """
        add_update = ActionType.ADD | ActionType.UPDATE
        return [
            ClusterEventWithHint(ClusterEvent(Resource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL
                                              | ActionType.UPDATE_NODE_ALLOCATABLE)),
            ClusterEventWithHint(ClusterEvent(Resource.RESOURCE_CLAIM, add_update | ActionType.DELETE),
                                 self.is_schedulable_after_claim_change),
            ClusterEventWithHint(ClusterEvent(Resource.TARGET_POD, ActionType.UPDATE_POD_GENERATED_RESOURCE_CLAIM),
                                 self.is_schedulable_after_target_pod_update),
            ClusterEventWithHint(ClusterEvent(Resource.DEVICE_CLASS, add_update)),
            ClusterEventWithHint(ClusterEvent(Resource.RESOURCE_SLICE, add_update)),
        ]

    # -- queueing hints (dynamicresources.go isSchedulableAfter*) ---------------------------------
    def _claim_getter(self) -> ClaimGetter | None:
        """Claims as the informers hold them now (the Handle's ``objects``, read at call time: the
        live process fills it in after the queue has collected the hints); None without one."""
        objects = self.handle.objects if self.handle is not None else None
        if objects is None:
            return None
        lister = objects

        def get(namespace: str, name: str) -> Obj | None:
            return lister.get("ResourceClaim", namespace, name)

        return get

    def _pod_claims_now(self, pod: Obj, get: ClaimGetter) -> list[Obj]:
        """``foreachPodResourceClaim`` on a queued Pod's JSON against the latest claims.

        Raises:
            _Unschedulable: a claim is missing, being deleted, not the Pod's or not generated yet.
            PodParseError: malformed ``spec.resourceClaims``.
        """
        return _resolve_claims(pod, _parse_claims_spec(pod.get("spec") or {}), get)

    def is_schedulable_after_claim_change(self, pod: Obj, old: Any, new: Any) -> QueueingHint:
        """``isSchedulableAfterClaimChange``: whether a ResourceClaim add / update / delete may let
        ``pod`` (rejected by this plugin) through. ``old`` / ``new`` are the claim's JSON (None for
        an add / a delete).

        - deleted: Queue only if it was allocated (its devices are free now);
        - any of the Pod's claims missing, being deleted or not the Pod's: QueueSkip (the Pod
          still cannot pass; a later claim or Pod event will queue it);
        - deallocated (allocation removed): Queue, whoever's claim it is (devices freed);
        - not one of the Pod's claims (compared by UID): QueueSkip;
        - one of the Pod's claims created: Queue; updated: Queue only when its ``status`` changed
          (allocation, reservedFor, devices; a new finalizer or label alone is skipped).

        Without an object lister (no Handle) every event queues the Pod.

        Raises:
            TypeError: ``old`` or ``new`` is not a JSON object (the queue counts it as Queue, as
                upstream counts a hint's error).
        """
        for side, obj in (("old", old), ("new", new)):
            if obj is not None and not isinstance(obj, dict):
                raise TypeError(f"unexpected {side} object in isSchedulableAfterClaimChange: {type(obj).__name__}")
        if new is None:
            if old is None:
                raise TypeError("isSchedulableAfterClaimChange: neither an old nor a new claim")
            return QueueingHint.QUEUE if _allocation(old) is not None else QueueingHint.QUEUE_SKIP
        get = self._claim_getter()
        if get is None:
            return QueueingHint.QUEUE
        try:
            claims = self._pod_claims_now(pod, get)
        except (_Unschedulable, PodParseError):
            return QueueingHint.QUEUE_SKIP
        if old is not None and _allocation(old) is not None and _allocation(new) is None:
            return QueueingHint.QUEUE
        uid = _uid(new)
        if not any(_uid(c) == uid for c in claims):
            return QueueingHint.QUEUE_SKIP
        if old is None:
            return QueueingHint.QUEUE
        if (old.get("status") or {}) == (new.get("status") or {}):
            return QueueingHint.QUEUE_SKIP
        return QueueingHint.QUEUE

    def is_schedulable_after_target_pod_update(self, pod: Obj, old: Any, new: Any) -> QueueingHint:
        """``isSchedulableAfterTargetPodUpdate``: the queued Pod's own update that recorded generated
        claims (``status.resourceClaimStatuses``) queues it only once every claim it needs exists
        and is its own (``new`` is the updated Pod's JSON; ``old`` is not read).

        Without an object lister (no Handle) the update queues the Pod.

        Raises:
            TypeError: ``new`` is not a JSON object (counted as Queue by the queue).
        """
        if not isinstance(new, dict):
            raise TypeError(f"unexpected object in isSchedulableAfterTargetPodUpdate: {type(new).__name__}")
        get = self._claim_getter()
        if get is None:
            return QueueingHint.QUEUE
        try:
            self._pod_claims_now(new, get)
        except (_Unschedulable, PodParseError):
            return QueueingHint.QUEUE_SKIP
        return QueueingHint.QUEUE

    # -- claims of a Pod --------------------------------------------------------------------------
    @staticmethod
    def _pod_claims(pod: PodInfo) -> list[_PodClaim]:
        """``spec.resourceClaims`` parsed once per Pod.

        Raises:
            PodParseError: not a list of objects with string names.
        """
        return _CLAIMS_MEMO.get(pod, DynamicResources._parse_pod_claims)

    @staticmethod
    def _parse_pod_claims(pod: PodInfo) -> list[_PodClaim]:
        """``spec.resourceClaims`` parsed (see :meth:`_pod_claims`)."""
        return _parse_claims_spec(pod.spec)

    def _collect_claims(self, pod: PodInfo, objects: ClusterObjectsLister | None) -> list[Obj]:
        """``foreachPodResourceClaim``: the ResourceClaim of each ``spec.resourceClaims`` entry
        (:func:`_resolve_claims` over the cycle's objects).

        Raises:
            _Unschedulable: upstream's reason (claim not generated yet, not found, being deleted,
                not owned by the Pod, no source set).
            PodParseError: malformed ``spec.resourceClaims``.
        """
        def get(namespace: str, name: str) -> Obj | None:
            return objects.get("ResourceClaim", f"{namespace}/{name}") if objects is not None else None

        return _resolve_claims(pod.pod, self._pod_claims(pod), get)

    # -- PreFilter -------------------------------------------------------------------------------
    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> tuple[PreFilterResult, Status]:
        """``PreFilter``: Skip without claims; UnschedulableAndUnresolvable when a claim is missing,
        being allocated for another Pod, or names a missing DeviceClass; otherwise prepares the
        allocator over the ResourceSlices and the devices already allocated."""
        s = DRAState()
        state.write(STATE_KEY, s)
        objects = state.snapshot.objects if state.snapshot is not None else None
        try:
            user_claims = self._collect_claims(pod, objects)
        except _Unschedulable as exc:
            return None, _unresolvable(str(exc))
        except PodParseError as exc:
            return None, _unresolvable(str(exc))
        ext_claim = self._pre_filter_extended(pod, objects, s)
        claims = list(user_claims) + ([ext_claim] if ext_claim is not None else [])
        if not claims:
            return None, Status.skip()
        self._forget_stale_in_flight(objects)

        num_to_allocate = 0
        available: list[NodeSelector | None] = []
        for claim in claims:
            alloc = _allocation(claim)
            if alloc is not None:
                ns = alloc.get("nodeSelector")
                sel: NodeSelector | None = None
                if ns is not None:
                    try:
                        sel = NodeSelector.from_node_selector(ns)
                    except ValueError as exc:
                        return None, Status.error(str(exc), NAME)
                    if sel.errors:
                        return None, Status.error("; ".join(sel.errors), NAME)
                available.append(sel)
                continue
            available.append(None)
            num_to_allocate += 1
            if _uid(claim) in self._in_flight:
                return None, _unresolvable(f"resource claim {claim_ref(claim)} is in the process of being allocated")
            if claim is ext_claim:
                continue
            st = self._validate_requests(claim, objects)
            if st is not None:
                return None, st

        s.claims = claims
        s.num_user = len(user_claims)
        s.available_on = available
        s.allocations = [None] * len(claims)
        if ext_claim is None and num_to_allocate == len(claims):
            s.plain = list(claims)
        if num_to_allocate > 0:
            classes = {str(_meta(dc).get("name") or ""): dc for dc in (objects.list("DeviceClass") if objects
                                                                        is not None else []) if isinstance(dc, dict)}
            slices = [sl for sl in (objects.list("ResourceSlice") if objects is not None else [])
                      if isinstance(sl, dict)]
            slices = apply_taint_rules(slices, objects.list("DeviceTaintRule") if objects is not None else [])
            allocated = self._allocated_state(objects)
            s.allocator = Allocator(allocated.dedicated, classes, slices, shared=allocated.shared,
                                    capacity=allocated.capacity, index=self._slices)
        return None, Status.success()

    def _validate_requests(self, claim: Obj, objects: ClusterObjectsLister | None) -> Status | None:
        """The request checks of PreFilter (``validateDeviceClass`` per (sub)request): each names an
        existing DeviceClass."""
        for req in _requests(claim):
            rname = str(req.get("name") or "")
            exactly = req.get("exactly")
            subs = req.get("firstAvailable") or []
            if isinstance(exactly, dict):
                st = self._validate_device_class(objects, str(exactly.get("deviceClassName") or ""), rname)
                if st is not None:
                    return st
            elif isinstance(subs, list) and subs:
                for sub in subs:
                    if not isinstance(sub, dict):
                        return Status.error(f"request {rname}: unsupported request type", NAME)
                    qual = f"{rname}/{sub.get('name') or ''}"
                    st = self._validate_device_class(objects, str(sub.get("deviceClassName") or ""), qual)
                    if st is not None:
                        return st
            else:
                return _unresolvable(f"resource claim {claim_ref(claim)}, request {rname}: unknown request type")
        return None

    @staticmethod
    def _validate_device_class(objects: ClusterObjectsLister | None, class_name: str,
                               request_name: str) -> Status | None:
        """``validateDeviceClass``."""
        if not class_name:
            return Status.error(f"request {request_name}: unsupported request type", NAME)
        if objects is None or objects.get("DeviceClass", class_name) is None:
            return _unresolvable(f"request {request_name}: device class {class_name} does not exist")
        return None

    def _allocated_state(self, objects: ClusterObjectsLister | None) -> AllocatedState:
        """``GatherAllocatedState`` (``dra_manager.go``, ``foreachAllocatedDevice``): over every
        claim's ``status.allocation`` plus the in-flight allocations, admin-access results do not
        count; results with a ``shareID`` are shares of a multi-allocatable device (their
        ``consumedCapacity`` summed per device); the rest are dedicated devices."""
        st = AllocatedState()
        claims = [c for c in (objects.list("ResourceClaim") if objects is not None else []) if isinstance(c, dict)]
        claims += [entry[0] for entry in self._in_flight.values()]
        for claim in claims:
            for r in _results(_allocation(claim)):
                if r.get("adminAccess") is True:
                    continue
                did = (str(r.get("driver") or ""), str(r.get("pool") or ""), str(r.get("device") or ""))
                if r.get("shareID") is not None:
                    st.shared.add(did)
                    consumed = r.get("consumedCapacity")
                    if isinstance(consumed, dict):
                        agg = st.capacity.setdefault(did, {})
                        for name, raw in consumed.items():
                            try:
                                v = qty.parse(raw)
                            except qty.QuantityError:
                                continue
                            agg[str(name)] = agg.get(str(name), Decimal(0)) + v
                    continue
                st.dedicated.add(did)
        return st

    def _forget_stale_in_flight(self, objects: ClusterObjectsLister | None) -> None:
        """Drop in-flight entries whose claim now shows an allocation (written by someone) or is gone."""
        for uid, (claim, _n) in list(self._in_flight.items()):
            if _meta(claim).get("name") == SPECIAL_CLAIM_NAME:
                continue
            cur = objects.get("ResourceClaim", claim_ref(claim)) if objects is not None else None
            if cur is None or (_uid(cur) == uid and _allocation(cur) is not None):
                del self._in_flight[uid]

    def _pre_filter_extended(self, pod: PodInfo, objects: Any, s: DRAState) -> Obj | None:
        """``preFilterExtendedResources``: the special claim when the Pod requests an extended
        resource that a DeviceClass backs (an existing extended-resource claim owned by the Pod, or
        an in-memory one without requests)."""
        scalar = {k: v for k, v in pod.requests.scalar.items() if v != 0 and is_dra_extended_resource_name(k)}
        if not scalar or objects is None:
            return None
        resolver = DeviceClassResolver(objects.list("DeviceClass"))
        if not any(resolver.get(k) is not None for k in scalar):
            return None
        s.ext_resources = scalar
        s.resolver = resolver
        s.pod_spec = pod.spec
        for c in objects.list("ResourceClaim", pod.namespace):
            meta = _meta(c)
            if (meta.get("annotations") or {}).get(EXTENDED_RESOURCE_CLAIM_ANNOTATION) != "true":
                continue
            for ref in meta.get("ownerReferences") or []:
                if (isinstance(ref, dict) and ref.get("name") == pod.name and ref.get("controller")
                        and ref.get("uid") == pod.uid):
                    found: Obj = c
                    return found
        return {"metadata": {"namespace": pod.namespace, "name": SPECIAL_CLAIM_NAME,
                             "uid": f"{pod.uid or pod.key}-extended-resources",
                             "annotations": {EXTENDED_RESOURCE_CLAIM_ANNOTATION: "true"},
                             "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": pod.name,
                                                  "uid": pod.uid, "controller": True}]},
                "spec": {}}

    # -- Filter ------------------------------------------------------------------------------------
    def filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status:
        """``Filter``: allocated claims must be reachable from the node; the others must be
        allocatable from the node's devices (``cannot allocate all claims`` otherwise)."""
        s = _state_data(state)
        if s is None:
            return _state_not_found()
        if not s.claims:
            return Status.success()
        node = node_info.node or {}
        if s.plain is not None and s.allocator is not None:
            # Every claim unallocated and a user claim: no node selector, results or binding
            # conditions to check (the loop below finds nothing unavailable), no extended resources.
            return self._filter_allocate(s, node_info, node, s.plain)
        node_ext_claim, st = self._filter_extended(s, node_info)
        if st is not None:
            return st
        if node_ext_claim is None and s.num_user == 0:
            return Status.success()

        unavailable: list[int] = []
        declared = (node.get("status") or {}).get("declaredFeatures") or []
        for i, claim in enumerate(s.claims):
            sel = s.available_on[i]
            if sel is not None and not sel.match(node):
                unavailable.append(i)
                continue
            alloc = _allocation(claim)
            needs_ops = any(r.get("skipNodeOperations") for r in _results(alloc))
            if needs_ops and DRA_OPTIONAL_NODE_OPERATIONS not in declared:
                unavailable.append(i)
                continue
            if alloc is not None:
                # Allocated with binding conditions that failed, or that timed out: PostFilter may
                # deallocate it so other devices can be tried.
                ready, failure = claim_ready_for_binding(claim)
                if failure is not None or (not ready and claim_timed_out(claim, self.binding_timeout)):
                    unavailable.append(i)

        allocations: list[Obj] = []
        if s.allocator is not None:
            ext = s.extended_claim()
            to_alloc = [node_ext_claim if (c is ext and node_ext_claim is not None) else c for _, c in s.to_allocate()]
            result, st = self._allocate(s.allocator, node_info, node, to_alloc)
            if st is not None:
                return st
            allocations = result
        if unavailable:
            s.unavailable.update(unavailable)
            return _unresolvable("resourceclaim not available on the node")
        if s.allocator is not None:
            s.node_allocations[node_info.name] = allocations
        return Status.success()

    def _filter_allocate(self, s: DRAState, node_info: NodeInfo, node: Obj, to_alloc: list[Obj]) -> Status:
        """Filter's allocation step alone (see :attr:`DRAState.plain`)."""
        assert s.allocator is not None
        result, st = self._allocate(s.allocator, node_info, node, to_alloc)
        if st is not None:
            return st
        s.node_allocations[node_info.name] = result
        return Status.success()

    def _allocate(self, allocator: Allocator, node_info: NodeInfo, node: Obj,
                  to_alloc: list[Obj]) -> tuple[list[Obj], Status | None]:
        """The allocator run of Filter: (allocations, None), or ([], the rejecting / error status)."""
        deadline = time.monotonic() + self.filter_timeout if self.filter_timeout > 0 else None
        try:
            result, _ = allocator.allocate(node, to_alloc, deadline)
        except AllocationTimeout:
            return [], Status.error(f"node {node_info.name}: timed out trying to allocate devices", NAME)
        except FailedAllocationOnNode as exc:
            return [], _unresolvable(str(exc))
        except AllocationError as exc:
            return [], Status.error(str(exc), NAME)
        if result is None or len(result) != len(to_alloc):
            return [], _unresolvable("cannot allocate all claims")
        return result, None

    def _filter_extended(self, s: DRAState, node_info: NodeInfo) -> tuple[Obj | None, Status | None]:
        """``filterExtendedResources``: None when the node's device plugins provide every extended
        resource; DRA-provided extended resources are not supported by py-scheduler."""
        ext = s.extended_claim()
        if ext is None:
            return None, None
        if ((ext.get("spec") or {}).get("devices") or {}).get("requests") is not None:
            return None, _unresolvable("cannot schedule extended resource claim")
        need: list[str] = []
        resolver = s.resolver or DeviceClassResolver()
        for name, q in s.ext_resources.items():
            if q == 0:
                continue
            ok = name in node_info.allocatable.scalar
            backed = resolver.get(name) is not None
            if backed and node_info.allocatable.scalar.get(name, 0) == 0:
                need.append(name)
            elif not ok:
                return None, _unresolvable("cannot fit resource")
        if s.num_user == 0 and not need:
            return None, None
        if _allocation(ext) is not None:
            return None, None
        node_claim = copy.deepcopy(ext)
        try:
            reqs, mappings = _extended_resource_requests(s.pod_spec, {n: s.ext_resources[n] for n in need},
                                                         resolver)
        except (TypeError, ValueError, AttributeError) as exc:
            return None, _unresolvable(f"invalid extended resource request: {exc}")
        node_claim["spec"] = {"devices": {"requests": reqs}}
        s.node_ext[node_info.name] = (node_claim, mappings)
        return node_claim, None

    # -- PostFilter ------------------------------------------------------------------------------
    def post_filter(self, state: CycleState, pod: PodInfo,
                    node_statuses: dict[str, Status]) -> tuple[PostFilterResult | None, Status]:
        """``PostFilter`` / ``deallocateOrDeletePodClaims``: one claim that is allocated but
        unavailable on the nodes and reserved for nobody else (or only for this Pod) is deallocated
        (``status.reservedFor``, ``allocation`` and ``devices`` cleared through the status
        subresource, the claim's resourceVersion as precondition), so the next attempt may allocate
        other devices; otherwise an extended-resource claim left from an earlier cycle is deleted.
        The claim's ``namespace/name`` is kept in ``state.data[NEEDS_API_DEALLOCATION_KEY]``.

        Upstream writes inside PostFilter; py-scheduler's PostFilter is synchronous, so the write is a
        background task on the Handle's client (a failure is logged; the claim stays allocated and the
        next attempt's PostFilter tries again). Without a client (``explain`` / ``simulate``) nothing is
        written. Upstream picks a random unavailable claim (map order); py-scheduler the first.

        Without PreFilter state (an earlier PreFilter plugin rejected the Pod, so DynamicResources'
        PreFilter never ran) upstream's ``getStateData`` fails with ``fwk.ErrNotFound``: an Error
        ``not found``, which RunPostFilterPlugins returns in place of the preemption message."""
        try:
            s: DRAState = state.read(STATE_KEY)
        except KeyError:
            return None, Status.error("not found", NAME)
        if not s.claims:
            return None, Status(Code.UNSCHEDULABLE)
        ext = s.extended_claim()
        ext_real = ext is not None and _meta(ext).get("name") != SPECIAL_CLAIM_NAME
        for i in sorted(s.unavailable):
            claim = s.claims[i]
            if claim is ext:
                if ext_real:
                    break
                continue
            reserved = (claim.get("status") or {}).get("reservedFor") or []
            if not reserved or (len(reserved) == 1 and isinstance(reserved[0], dict)
                                and reserved[0].get("uid") == pod.uid):
                state.write(NEEDS_API_DEALLOCATION_KEY, claim_ref(claim))
                self._background(self._deallocate(claim))
                return None, Status(Code.UNSCHEDULABLE, ["deallocation of ResourceClaim completed"], NAME)
        if ext is not None and ext_real:
            state.write(NEEDS_API_DEALLOCATION_KEY, claim_ref(ext))
            self._background(self._delete_claim(ext))
            return None, Status(Code.UNSCHEDULABLE, ["deletion of ResourceClaim completed"], NAME)
        return None, Status(Code.UNSCHEDULABLE)

    def _background(self, make: Callable[[APIClient], Coroutine[Any, Any, None]]) -> None:
        """Run the coroutine factory ``make(client)`` as a background task when there is an API client
        and a running loop (else nothing is written: offline)."""
        client = self.handle.client if self.handle is not None else None
        if client is None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        task = loop.create_task(make(client))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @staticmethod
    def _deallocate(claim: Obj) -> Callable[[APIClient], Coroutine[Any, Any, None]]:
        """The deallocation write of PostFilter: PUT ``.../resourceclaims/NAME/status`` with the
        claim (its resourceVersion) less ``reservedFor``, ``allocation`` and ``devices``."""
        body = copy.deepcopy(claim)
        status = dict(body.get("status") or {})
        for k in ("reservedFor", "allocation", "devices"):
            status.pop(k, None)
        body["status"] = status

        async def run(client: APIClient) -> None:
            meta = _meta(body)
            try:
                await client.update(claim_path(str(meta.get("namespace") or ""), str(meta.get("name") or ""),
                                               "status"), body)
                log.info("deallocated resourceclaim=%s", claim_ref(body))
            except APIError as exc:
                log.error("deallocate resourceclaim=%s: %s", claim_ref(body), exc)

        return run

    def _delete_claim(self, claim: Obj) -> Callable[[APIClient], Coroutine[Any, Any, None]]:
        """``deleteClaim``: the finalizer off, then DELETE with the claim's UID as precondition."""
        meta = _meta(claim)
        ns, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")

        async def run(client: APIClient) -> None:
            try:
                if meta.get("finalizers"):
                    await client.patch(claim_path(ns, name), {"metadata": {"finalizers": None}})
                await client.delete(claim_path(ns, name), uid=_uid(claim))
            except APIError as exc:
                log.error("delete resourceclaim=%s: %s", claim_ref(claim), exc)

        return run

    # -- Score -------------------------------------------------------------------------------------
    def score_nodes(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> tuple[list[int], Status]:
        """:meth:`score` for each of ``nodes`` in order (batch form): all 0 at once for a Pod without
        claims, else node by node."""
        s = _state_data(state)
        if s is None:
            return [], _state_not_found()
        if not s.claims:
            return [0] * len(nodes), Status.success()
        if not any(req.get("firstAvailable") for c in s.claims for req in _requests(c)):
            # Without firstAvailable requests every term of computeScore is absent: 0 everywhere,
            # unless a node's allocations are too few (the error score() reports).
            need = len(s.to_allocate())
            allocs = s.node_allocations
            if all(len(allocs.get(ni.name) or ()) >= need or ni.name not in allocs for ni in nodes):
                return [0] * len(nodes), Status.success()
        out: list[int] = []
        for ni in nodes:
            sc, st = self.score(state, pod, ni)
            if not st.is_success():
                return [], st
            out.append(sc)
        return out, Status.success()

    def score(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> tuple[int, Status]:
        """``Score``: 0 without claims or without a Filter result for the node; otherwise
        ``computeScore``: for every ``firstAvailable`` subrequest used, ``8 - its index``."""
        s = _state_data(state)
        if s is None:
            return 0, _state_not_found()
        if not s.claims:
            return 0, Status.success()
        allocations = s.node_allocations.get(node_info.name)
        if allocations is None:
            return 0, Status.success()
        score = 0
        k = 0
        for claim in s.claims:
            alloc = _allocation(claim)
            if alloc is None:
                if k >= len(allocations):
                    return 0, Status.error(f"number of allocations {len(allocations)} is smaller than number of "
                                           f"claims needing allocation", NAME)
                alloc = allocations[k]
                k += 1
            used = {str(r.get("request") or "") for r in _results(alloc)}
            used = {u for u in used if len(u.split("/")) == 2}
            for req in _requests(claim):
                if req.get("exactly") is not None:
                    continue
                for i, sub in enumerate(req.get("firstAvailable") or []):
                    if isinstance(sub, dict) and f"{req.get('name') or ''}/{sub.get('name') or ''}" in used:
                        score += FIRST_AVAILABLE_DEVICE_REQUEST_MAX_SIZE - i
        return score, Status.success()

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: dict[str, int]) -> Status:
        """``DefaultNormalizeScore(MaxNodeScore, false)``."""
        default_normalize_score(100, False, scores)
        return Status.success()

    # -- Reserve -----------------------------------------------------------------------------------
    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        """``Reserve``: take the node's allocation from Filter, keep it in flight, record it in the
        CycleState and flag that the claims' status must be written through the API."""
        s = _state_data(state)
        if s is None:
            return _state_not_found()
        if not s.claims:
            return Status.success()
        recorded: dict[str, Obj] = {}
        needs_write = any(_allocation(c) is not None and not _reserved_for(c, pod.uid)
                          for c in s.claims[:s.num_user])
        to_alloc = s.to_allocate()
        if to_alloc and s.allocator is not None:
            user_to_alloc = any(i < s.num_user for i, _ in to_alloc)
            allocations = s.node_allocations.get(node_name)
            if not allocations:
                if not user_to_alloc:
                    return self._flag(state, needs_write, recorded)
                return Status.error("claim allocation not found for node", NAME)
            if len(allocations) != len(to_alloc):
                return Status.error(f"internal error, have {len(allocations)} allocations, {len(to_alloc)} claims to "
                                    f"allocate, want {len(to_alloc)} claims", NAME)
            for (i, claim), alloc in zip(to_alloc, allocations, strict=True):
                alloc = copy.deepcopy(alloc)  # Filter's result may be the allocator's memo (shared by Pods)
                s.allocations[i] = alloc
                allocated = copy.deepcopy(claim)
                allocated["status"] = dict(allocated.get("status") or {}, allocation=alloc)
                uid = _uid(claim)
                entry = self._in_flight.get(uid)
                if entry is not None:
                    entry[1] += 1
                else:
                    self._in_flight[uid] = [allocated, 1]
                recorded[claim_ref(claim)] = alloc
            needs_write = True
        return self._flag(state, needs_write, recorded)

    @staticmethod
    def _flag(state: CycleState, needs_write: bool, recorded: dict[str, Obj]) -> Status:
        if recorded:
            state.write(ALLOCATIONS_KEY, recorded)
        if needs_write:
            state.write(NEEDS_API_ALLOCATION_KEY, True)
        return Status.success()

    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        """``Unreserve``: release the in-flight allocations of this Pod's claims (idempotent)."""
        try:
            s: DRAState = state.read(STATE_KEY)
        except KeyError:
            return
        for i, claim in enumerate(s.claims):
            if s.allocations[i] is None:
                continue
            uid = _uid(claim)
            entry = self._in_flight.get(uid)
            if entry is None:
                continue
            entry[1] -= 1
            if entry[1] <= 0:
                del self._in_flight[uid]
            s.allocations[i] = None
        self._unreserve_api(s, pod)
        state.data.pop(NEEDS_API_ALLOCATION_KEY, None)
        state.data.pop(ALLOCATIONS_KEY, None)

    # -- the binding cycle ---------------------------------------------------------------------------
    def pre_bind_pre_flight(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        """``PreBindPreFlight``: Skip for a Pod without claims."""
        s = _state_data(state)
        if s is None:
            return _state_not_found()
        if not s.claims:
            return Status(Code.SKIP, [], NAME)
        return Status.success()

    async def pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        """``PreBind``: each claim not yet reserved for the Pod gets its allocation (from Reserve)
        and the Pod's reservation written through the API (:func:`.binding.bind_claim`); then, if
        an allocated device has binding conditions, wait for them (``bindingTimeout``). Without an
        API client (offline) the same effect is applied to the in-memory objects."""
        s = _state_data(state)
        if s is None:
            return _state_not_found()
        if not s.claims:
            return Status.success()
        client = self.handle.client if self.handle is not None else None
        if client is None:
            simulated_pre_bind(state, pod)
            return Status.success()
        pod_ref = {"resource": "pods", "name": pod.name, "uid": pod.uid}
        for i, claim in enumerate(s.claims):
            if _reserved_for(claim, pod.uid):
                continue
            ext = i >= s.num_user
            if ext and s.allocations[i] is None and not _requests(claim):
                continue
            try:
                if ext and _meta(claim).get("name") == SPECIAL_CLAIM_NAME:
                    claim = await self._create_extended_claim(client, s, claim, pod, node_name)
                s.claims[i] = await bind_claim(client, claim, s.allocations[i], pod_ref)
                if ext:
                    await self._patch_extended_status(client, s, s.claims[i], pod, node_name)
            except BindingError as exc:
                return Status.error(str(exc), NAME)
            s.reserved.add(i)
        if has_binding_conditions(s.claims):
            events = self.handle.events if self.handle is not None else None
            await record_pending(events, pod.pod, node_name)
            try:
                s.claims = await wait_for_binding_conditions(
                    s.claims, self.handle.objects if self.handle is not None else None, self.binding_timeout,
                    self.binding_poll)
            except BindingError as exc:
                return Status.error(str(exc), NAME)
        return Status.success()

    async def _create_extended_claim(self, client: APIClient, s: DRAState, special: Obj, pod: PodInfo,
                                     node_name: str) -> Obj:
        """``createExtendedResourceClaimInAPI``: the node's special claim created under the generated
        name ``<pod>-extended-resources-*``; the in-flight entry moves to the created claim's UID.

        Raises:
            BindingError: no special claim for the node, or the API refused the claim.
        """
        node_claim = s.node_ext.get(node_name)
        if node_claim is None:
            raise BindingError(f"extended resource claim not found for node {node_name}")
        meta = dict(_meta(node_claim[0]))
        body: Obj = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                     "metadata": {k: v for k, v in meta.items() if k not in ("name", "uid", "resourceVersion")},
                     "spec": copy.deepcopy(node_claim[0].get("spec") or {})}
        body["metadata"]["generateName"] = f"{pod.name}-extended-resources-"
        try:
            created = await client.create(claim_path(pod.namespace), body)
        except APIError as exc:
            raise BindingError(f"create claim for extended resources {pod.namespace}/: {exc.message}") from exc
        s.created_ext = created
        entry = self._in_flight.pop(_uid(special), None)
        if entry is not None:
            allocated = copy.deepcopy(created)
            allocated["status"] = {"allocation": _allocation(entry[0])}
            self._in_flight[_uid(created)] = [allocated, entry[1]]
        return created

    async def _patch_extended_status(self, client: APIClient, s: DRAState, claim: Obj, pod: PodInfo,
                                     node_name: str) -> None:
        """``patchPodExtendedResourceClaimStatus``: the Pod's ``status.extendedResourceClaimStatus``
        names the claim and maps each container's extended resource to its request.

        Raises:
            BindingError: no mappings for the node, or the API refused the patch.
        """
        mappings = s.node_ext.get(node_name, (None, []))[1]
        if not mappings:
            raise BindingError(f"nil or empty request mappings, no update of pod {pod.namespace}/{pod.name} "
                               f"ExtendedResourceClaimStatus")
        patch = {"status": {"extendedResourceClaimStatus": {"requestMappings": mappings,
                                                            "resourceClaimName": _meta(claim).get("name")}}}
        try:
            await client.patch(f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/status", patch,
                               content_type="application/strategic-merge-patch+json")
        except APIError as exc:
            raise BindingError(f"update pod {pod.namespace}/{pod.name} ExtendedResourceClaimStatus: "
                               f"{exc.message}") from exc

    def _unreserve_api(self, s: DRAState, pod: PodInfo) -> None:
        """``Unreserve``'s API part: take the Pod's reservation back from the claims PreBind
        reserved (a background task; failures are logged, as upstream)."""
        client = self.handle.client if self.handle is not None else None
        created, s.created_ext = s.created_ext, None
        claims = [s.claims[i] for i in sorted(s.reserved) if s.claims[i] is not created]
        s.reserved.clear()
        if client is None or not (claims or created):
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return

        async def patch_all() -> None:
            for claim in claims:
                meta = _meta(claim)
                try:
                    await client.patch(claim_path(str(meta.get("namespace") or ""), str(meta.get("name") or ""),
                                                  "status"), unreserve_patch(claim, pod.uid),
                                       content_type="application/strategic-merge-patch+json")
                except APIError as exc:
                    log.error("unreserve resourceclaim=%s: %s", claim_ref(claim), exc)
            if created is not None:
                # ``unreserveExtendedResourceClaim`` / ``deleteClaim``: the finalizer off, then delete.
                meta = _meta(created)
                ns, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
                try:
                    await client.patch(claim_path(ns, name), {"metadata": {"finalizers": None}})
                    await client.delete(claim_path(ns, name), uid=_uid(created))
                except APIError as exc:
                    log.error("delete resourceclaim=%s: %s", claim_ref(created), exc)
                self._in_flight.pop(_uid(created), None)

        task = loop.create_task(patch_all())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def in_flight_claims(self) -> list[str]:
        """``namespace/name`` of the claims whose allocation is in flight (Reserved, not yet written)."""
        return sorted(claim_ref(entry[0]) for entry in self._in_flight.values())


RequestMapping = dict[str, str]
"""A ``ContainerExtendedResourceRequest``: ``{"containerName", "resourceName", "requestName"}``."""


def _container_request(index: int, container: Obj, resource: str, class_name: str,
                        reusable: list[Obj | None]) -> tuple[Obj | None, list[RequestMapping]]:
    """``createResourceRequestAndMappings``: the device request of one container for ``resource``
    (named ``container-<index>-request-<position of resource in the sorted request names>``), less
    what ``reusable`` requests of later long-lived containers already provide (None if they
    provide it all), and the container's mappings to the requests that serve it."""
    creqs = (container.get("resources") or {}).get("requests") or {}
    if not isinstance(creqs, dict) or resource not in creqs:
        return None, []
    q = qty.parse(creqs[resource])
    if q != q.to_integral_value() or q == 0:
        return None, []
    crq = int(q)
    cname = str(container.get("name") or "")
    mappings: list[RequestMapping] = []
    total = 0
    for r in reusable:
        if r is not None:
            total += int(r["exactly"]["count"])
            mappings.append({"containerName": cname, "resourceName": resource, "requestName": str(r["name"])})
            if total >= crq:
                return None, mappings
    ridx = sorted(str(k) for k in creqs).index(resource)
    name = f"container-{index}-request-{ridx}"
    mappings.append({"containerName": cname, "resourceName": resource, "requestName": name})
    return ({"name": name,
             "exactly": {"deviceClassName": class_name, "allocationMode": "ExactCount", "count": crq - total}},
            mappings)


def _extended_resource_requests(spec: Obj, resources: dict[str, int],
                                resolver: DeviceClassResolver) -> tuple[list[Obj], list[RequestMapping]]:
    """``createRequestsAndMappings``: the device requests of the special claim for the extended
    resources the node must provide through DRA: one per long-lived container (regular and sidecar
    init containers) plus the largest one of the short-lived init containers, sorted by name; and
    the containers' request mappings (short-lived ones pointing at that largest request)."""
    inits = [c for c in spec.get("initContainers") or [] if isinstance(c, dict)]
    containers = inits + [c for c in spec.get("containers") or [] if isinstance(c, dict)]
    long_lived = [i for i, c in enumerate(containers) if i >= len(inits) or c.get("restartPolicy") == "Always"]
    short_lived = [i for i in range(len(inits)) if i not in long_lived]
    out: list[Obj] = []
    mappings: list[RequestMapping] = []
    for resource in sorted(resources):
        dc = resolver.get(resource)
        if dc is None:
            continue
        class_name = str(_meta(dc).get("name") or "")
        long_reqs: list[Obj | None] = [None] * len(containers)
        long_maps: list[RequestMapping] = []
        for i in long_lived:
            long_reqs[i], m = _container_request(i, containers[i], resource, class_name, [])
            long_maps += m
        biggest: Obj | None = None
        short_names: set[str] = set()
        short_maps: list[RequestMapping] = []
        for i in short_lived:
            r, m = _container_request(i, containers[i], resource, class_name, long_reqs[i:])
            short_maps += m
            if r is not None:
                short_names.add(str(r["name"]))
                if biggest is None or biggest["exactly"]["count"] < r["exactly"]["count"]:
                    biggest = r
        if biggest is not None and len(short_names) > 1:
            short_names.discard(str(biggest["name"]))
            for sm in short_maps:
                if sm["requestName"] in short_names:
                    sm["requestName"] = str(biggest["name"])
        if biggest is not None:
            out.append(biggest)
        out.extend(r for r in long_reqs if r is not None)
        mappings += long_maps + short_maps
    out.sort(key=lambda r: str(r["name"]))
    return out, mappings


def simulated_pre_bind(state: CycleState, pod: PodInfo) -> list[str]:
    """What upstream's PreBind writes, applied to the cycle's in-memory ClusterObjects (for
    ``explain`` / ``simulate`` only, never for the live informers' objects): each claim of the Pod
    gets ``status.allocation`` (from Reserve) and the Pod in ``status.reservedFor``. Later Pods
    then see those claims allocated (and may share them) instead of "in the process of being
    allocated". Returns the ``namespace/name`` of the claims written; the in-flight entries are
    dropped by the next PreFilter. The special extended-resource claim is created under the name
    ``<pod>-extended-resources``.
    """
    try:
        s: DRAState = state.read(STATE_KEY)
    except KeyError:
        return []
    if state.snapshot is None or not s.claims:
        return []
    objects = state.snapshot.objects
    if not s.claims:
        return []
    written: list[str] = []
    for i, claim in enumerate(s.claims):
        alloc = s.allocations[i] or _allocation(claim)
        if alloc is None:
            continue
        new = copy.deepcopy(claim)
        meta = _meta(new)
        if meta.get("name") == SPECIAL_CLAIM_NAME:
            meta["name"] = f"{pod.name}-extended-resources"
        status = dict(new.get("status") or {})
        status["allocation"] = alloc
        reserved = [r for r in status.get("reservedFor") or [] if isinstance(r, dict)]
        if not any(r.get("uid") == pod.uid for r in reserved):
            reserved.append({"resource": "pods", "name": pod.name, "uid": pod.uid})
        status["reservedFor"] = reserved
        new["status"] = status
        new["metadata"] = meta
        objects.upsert("ResourceClaim", new)
        written.append(claim_ref(new))
    return written


def _parse_claims_spec(spec: Obj) -> list[_PodClaim]:
    """A Pod's ``spec.resourceClaims`` as :class:`_PodClaim` entries.

    Raises:
        PodParseError: not a list of objects with string names.
    """
    raw = spec.get("resourceClaims")
    out: list[_PodClaim] = []
    if raw is not None:
        if not isinstance(raw, list):
            raise PodParseError("spec.resourceClaims", raw, "expected a list of PodResourceClaims")
        for i, rc in enumerate(raw):
            if not isinstance(rc, dict):
                raise PodParseError(f"spec.resourceClaims[{i}]", rc, "expected an object")
            vals = []
            for k in ("name", "resourceClaimName", "resourceClaimTemplateName"):
                v = rc.get(k)
                if v is not None and not isinstance(v, str):
                    raise PodParseError(f"spec.resourceClaims[{i}].{k}", v, "expected a string")
                vals.append(v)
            out.append(_PodClaim(str(vals[0] or ""), vals[1], vals[2]))
    return out


ClaimGetter = Callable[[str, str], Obj | None]
"""``(namespace, name) -> ResourceClaim`` or None: where :func:`_resolve_claims` looks claims up."""


def _resolve_claims(pod: Obj, pod_claims: list[_PodClaim], get: ClaimGetter) -> list[Obj]:
    """``foreachPodResourceClaim`` (upstream ``dynamicresources.go``, with ``resourceclaim.Name`` and
    ``IsForPod`` of ``k8s.io/dynamic-resource-allocation/resourceclaim``): the ResourceClaim of each
    entry of ``pod_claims`` (the Pod's parsed ``spec.resourceClaims``), looked up with ``get``. A
    template entry takes its claim's name from ``status.resourceClaimStatuses``; an entry whose
    status names no claim is skipped (valid upstream).

    Raises:
        _Unschedulable: upstream's reason (claim not generated yet, not found, being deleted, not
            owned by the Pod, no source set).
    """
    meta = pod.get("metadata") or {}
    namespace = str(meta.get("namespace") or "default")
    pod_name = str(meta.get("name") or "")
    pod_uid = str(meta.get("uid") or "")
    statuses = (pod.get("status") or {}).get("resourceClaimStatuses") or []
    out: list[Obj] = []
    for pc in pod_claims:
        must_check_owner = False
        if pc.claim_name is not None:
            claim_name: str | None = pc.claim_name
        elif pc.template_name is not None:
            found = False
            claim_name = None
            for st in statuses if isinstance(statuses, list) else []:
                if isinstance(st, dict) and st.get("name") == pc.name:
                    found = True
                    rcn = st.get("resourceClaimName")
                    claim_name = str(rcn) if rcn else None
                    must_check_owner = True
                    break
            if not found:
                raise _Unschedulable(f'pod "{namespace}/{pod_name}": ResourceClaim not created yet')
        else:
            raise _Unschedulable(f'pod "{namespace}/{pod_name}", spec.resourceClaim "{pc.name}": none of '
                                 f"the supported fields are set")
        if claim_name is None:
            continue
        claim = get(namespace, claim_name)
        if not isinstance(claim, dict):
            raise _Unschedulable(f'could not find ResourceClaim "{namespace}/{claim_name}"')
        cmeta = _meta(claim)
        if cmeta.get("deletionTimestamp"):
            raise _Unschedulable(f'resourceclaim "{cmeta.get("name")}" is being deleted')
        if must_check_owner and not _controlled_by(claim, pod_uid):
            raise _Unschedulable(f"ResourceClaim {namespace}/{cmeta.get('name')} was not created for Pod "
                                 f"{namespace}/{pod_name} (Pod is not owner)")
        out.append(claim)
    return out


def _controlled_by(claim: Obj, pod_uid: str) -> bool:
    """``metav1.IsControlledBy``: the claim's controller owner reference is the Pod."""
    for ref in _meta(claim).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller") is True:
            return bool(ref.get("uid")) and ref.get("uid") == pod_uid
    return False


def _reserved_for(claim: Obj, pod_uid: str) -> bool:
    """``IsReservedForPod``: the Pod is in ``status.reservedFor``."""
    for r in (claim.get("status") or {}).get("reservedFor") or []:
        if isinstance(r, dict) and r.get("uid") == pod_uid:
            return True
    return False
