"""DynamicResources: Pods that use ResourceClaims (DRA, resource.k8s.io/v1) fit only nodes where
their claims are or can be allocated.

Upstream: ``pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go`` (PreFilter,
Filter, PostFilter, Score / ``computeScore``, NormalizeScore, Reserve, Unreserve, the reason strings),
``claims.go`` (``claimStore``), ``dra_manager.go`` (allocated devices, in-flight allocations),
``extendeddynamicresources.go`` (extended resources backed by DRA) and
``k8s.io/dynamic-resource-allocation/resourceclaim/resourceclaim.go`` (``Name``, ``IsForPod``,
``IsReservedForPod``). Its parts follow upstream's files: the allocator is :mod:`.allocator`, a Pod's
claims :mod:`.claims`, the cycle state and keys :mod:`.state`, the extended resources backed by DRA
:mod:`.extended` (``extendeddynamicresources.go``), the API writes of the binding cycle and PostFilter
:mod:`.binding`; selectors are evaluated by :mod:`py_scheduler.plugins.helpers.cel`.

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
in-memory objects, :func:`.binding.simulated_pre_bind`), so later Pods see the devices taken and may share
the claim.

PostFilter deallocates a claim allocated where the Pod cannot go (or deletes a stale
extended-resource claim) through the Handle's client, as a background task.

DeviceTaintRules (GA) add their taints to the devices they select before allocation, as the
scheduler's ResourceSlice tracker does; only NoSchedule / NoExecute taints keep a device from a
request that does not tolerate them (the eviction of running Pods is the controller's).

Admin access, consumable capacity (shares of a device, capacity request policies), partitionable
devices (counter sets) and binding conditions are allocated as upstream's incubating allocator does
(:mod:`.allocator`, :mod:`.capacity`); the allocated state counts dedicated devices, shares and the
capacity shares consume (:class:`.dra_manager.AllocatedState`, :mod:`.dra_manager`).

Extended resources backed by a DeviceClass (``DRAExtendedResource``) are allocated like upstream
(the special ``<extended-resources>`` claim with one request per container) on nodes whose device
plugins do not advertise them.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from py_scheduler.framework import signers
from py_scheduler.framework.config import parse_go_duration
from py_scheduler.framework.errors import PodParseError
from py_scheduler.framework.events import ActionType, ClusterEvent, ClusterEventWithHint, QueueingHint, Resource
from py_scheduler.framework.handle import APIClient, Handle
from py_scheduler.framework.interfaces import (
    PodGroupDryRun,
    PodGroupInfo,
    PodGroupPostFilterResult,
    PostFilterResult,
    PreFilterResult,
)
from py_scheduler.framework.lister import ClusterObjectsLister, SnapshotLister
from py_scheduler.framework.memo import PodInput, PodMemo
from py_scheduler.framework.objects import Obj
from py_scheduler.framework.types import Code, CycleState, NodeInfo, PodInfo, Status
from py_scheduler.plugins.dynamic_resources import binding, extended
from py_scheduler.plugins.dynamic_resources.allocator import Allocator
from py_scheduler.plugins.dynamic_resources.claims import (
    ClaimGetter,
    ClaimUnschedulable,
    PodClaim,
    allocation_of,
    claim_change_hint,
    claim_meta,
    claim_uid,
    parse_claims_spec,
    pod_claims_now,
    requests_of,
    reserved_for,
    resolve_claims,
    results_of,
    target_pod_update_hint,
)
from py_scheduler.plugins.dynamic_resources.common import (
    AllocationError,
    AllocationTimeout,
    CycleBudget,
    FailedAllocationOnNode,
    claim_ref,
)
from py_scheduler.plugins.dynamic_resources.dra_manager import (
    InFlight,
    forget_stale_in_flight,
    gather_allocated_state,
    mark_written,
)
from py_scheduler.plugins.dynamic_resources.pools import SliceIndex
from py_scheduler.plugins.dynamic_resources.state import (
    ALLOCATIONS_KEY,
    DRA_OPTIONAL_NODE_OPERATIONS,
    FIRST_AVAILABLE_DEVICE_REQUEST_MAX_SIZE,
    NAME,
    NEEDS_API_ALLOCATION_KEY,
    NEEDS_API_DEALLOCATION_KEY,
    SPECIAL_CLAIM_NAME,
    STATE_KEY,
    DRAState,
    state_data,
    state_not_found,
    unresolvable,
)
from py_scheduler.plugins.dynamic_resources.taints import apply_taint_rules
from py_scheduler.plugins.helpers.node_selector import NodeSelector
from py_scheduler.plugins.helpers.normalize import default_normalize_column, default_normalize_score

log = logging.getLogger("py_scheduler.plugins.dynamic_resources")

_CLAIMS_MEMO: PodMemo[list[PodClaim]] = PodMemo(NAME + "/claims", PodInput.SPEC)
"""A Pod's ``spec.resourceClaims``, parsed."""


def _duration(args: dict[str, Any], key: str) -> float:
    """``args[key]`` as a Go duration in seconds.

    Raises:
        ConfigError: not a duration string, naming ``key``.
    """
    from py_scheduler.framework.errors import ConfigError

    raw = args[key]
    try:
        if not isinstance(raw, str):
            raise ValueError(f"invalid duration {raw!r}")
        return parse_go_duration(raw)
    except ValueError as exc:
        raise ConfigError(f"{key}: {exc}") from exc


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
        self.cycle_budget: CycleBudget | None = CycleBudget()
        """What the Filter may spend in one cycle (None: no limit, as in the offline engine, which
        has no event loop to keep answering)."""
        self._tasks: set[asyncio.Task[None]] = set()
        # claim UID -> [claim with status.allocation, sharers]
        self._in_flight: InFlight = {}
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
            ft = _duration(args, "filterTimeout")
            if ft < 0:
                raise ConfigError(f"filterTimeout: Invalid value: {args['filterTimeout']!r}: must be zero or positive")
        bt = 600.0
        if args.get("bindingTimeout") is not None:
            bt = _duration(args, "bindingTimeout")
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

    def pre_enqueue(self, pod: PodInfo) -> Status:
        """``PreEnqueue``: Unschedulable with ``foreachPodResourceClaim``'s error while one of the Pod's
        claims is missing, being deleted, not the Pod's or not generated yet: the Pod waits, silently,
        for a claim event. A malformed ``spec.resourceClaims`` goes through, for PreFilter to name it."""
        get = self._claim_getter()
        if get is not None and pod.spec.get("resourceClaims"):
            try:
                pod_claims_now(pod.pod, get)
            except ClaimUnschedulable as exc:
                return Status(Code.UNSCHEDULABLE, [str(exc)], NAME)
            except PodParseError:
                pass
        return Status.success()

    def is_schedulable_after_claim_change(self, pod: Obj, old: Any, new: Any) -> QueueingHint:
        """``isSchedulableAfterClaimChange`` (:func:`~.claims.claim_change_hint`) against the claims the
        informers hold now (every event queues the Pod without a Handle)."""
        return claim_change_hint(pod, old, new, self._claim_getter())

    def is_schedulable_after_target_pod_update(self, pod: Obj, old: Any, new: Any) -> QueueingHint:
        """``isSchedulableAfterTargetPodUpdate`` (:func:`~.claims.target_pod_update_hint`)."""
        return target_pod_update_hint(new, self._claim_getter())

    # -- claims of a Pod --------------------------------------------------------------------------
    @staticmethod
    def _pod_claims(pod: PodInfo) -> list[PodClaim]:
        """``spec.resourceClaims`` parsed once per Pod.

        Raises:
            PodParseError: not a list of objects with string names.
        """
        return _CLAIMS_MEMO.get(pod, DynamicResources._parse_pod_claims)

    @staticmethod
    def _parse_pod_claims(pod: PodInfo) -> list[PodClaim]:
        """``spec.resourceClaims`` parsed (see :meth:`_pod_claims`)."""
        return parse_claims_spec(pod.spec)

    def _collect_claims(self, pod: PodInfo, objects: ClusterObjectsLister | None) -> list[Obj]:
        """``foreachPodResourceClaim``: the ResourceClaim of each ``spec.resourceClaims`` entry
        (:func:`resolve_claims` over the cycle's objects).

        Raises:
            ClaimUnschedulable: upstream's reason (claim not generated yet, not found, being deleted,
                not owned by the Pod, no source set).
            PodParseError: malformed ``spec.resourceClaims``.
        """
        def get(namespace: str, name: str) -> Obj | None:
            return objects.get("ResourceClaim", f"{namespace}/{name}") if objects is not None else None

        return resolve_claims(pod.pod, self._pod_claims(pod), get)

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
        except ClaimUnschedulable as exc:
            return None, unresolvable(str(exc))
        except PodParseError as exc:
            return None, unresolvable(str(exc))
        ext_claim = extended.pre_filter_extended(pod, objects, s)
        claims = list(user_claims) + ([ext_claim] if ext_claim is not None else [])
        if not claims:
            return None, Status.skip()
        forget_stale_in_flight(objects, self._in_flight)

        num_to_allocate = 0
        available: list[NodeSelector | None] = []
        for claim in claims:
            alloc = allocation_of(claim)
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
            if claim_uid(claim) in self._in_flight:
                return None, unresolvable(f"resource claim {claim_ref(claim)} is in the process of being allocated")
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
            classes = {str(claim_meta(dc).get("name") or ""): dc for dc in (objects.list("DeviceClass") if objects
                                                                        is not None else []) if isinstance(dc, dict)}
            slices = [sl for sl in (objects.list("ResourceSlice") if objects is not None else [])
                      if isinstance(sl, dict)]
            slices = apply_taint_rules(slices, objects.list("DeviceTaintRule") if objects is not None else [])
            allocated = gather_allocated_state(objects, self._in_flight)
            s.allocator = Allocator(allocated.dedicated, classes, slices, shared=allocated.shared,
                                    capacity=allocated.capacity, index=self._slices,
                                    budget=self.cycle_budget)
        return None, Status.success()

    def _validate_requests(self, claim: Obj, objects: ClusterObjectsLister | None) -> Status | None:
        """The request checks of PreFilter (``validateDeviceClass`` per (sub)request): each names an
        existing DeviceClass."""
        for req in requests_of(claim):
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
                return unresolvable(f"resource claim {claim_ref(claim)}, request {rname}: unknown request type")
        return None

    @staticmethod
    def _validate_device_class(objects: ClusterObjectsLister | None, class_name: str,
                               request_name: str) -> Status | None:
        """``validateDeviceClass``."""
        if not class_name:
            return Status.error(f"request {request_name}: unsupported request type", NAME)
        if objects is None or objects.get("DeviceClass", class_name) is None:
            return unresolvable(f"request {request_name}: device class {class_name} does not exist")
        return None

    # -- Filter ------------------------------------------------------------------------------------
    def filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status:
        """``Filter``: allocated claims must be reachable from the node; the others must be
        allocatable from the node's devices (``cannot allocate all claims`` otherwise)."""
        s = state_data(state)
        if s is None:
            return state_not_found()
        if not s.claims:
            return Status.success()
        node = node_info.node or {}
        if s.plain is not None and s.allocator is not None:
            # Every claim unallocated and a user claim: no node selector, results or binding
            # conditions to check (the loop below finds nothing unavailable), no extended resources.
            return self._filter_allocate(s, node_info, node, s.plain)
        node_ext_claim, st = extended.filter_extended(s, node_info)
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
            alloc = allocation_of(claim)
            needs_ops = any(r.get("skipNodeOperations") for r in results_of(alloc))
            if needs_ops and DRA_OPTIONAL_NODE_OPERATIONS not in declared:
                unavailable.append(i)
                continue
            if alloc is not None:
                # Allocated with binding conditions that failed, or that timed out: PostFilter may
                # deallocate it so other devices can be tried.
                ready, failure = binding.claim_ready_for_binding(claim)
                if failure is not None or (not ready and binding.claim_timed_out(claim, self.binding_timeout)):
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
            return unresolvable("resourceclaim not available on the node")
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
        start = time.monotonic()
        deadline = start + self.filter_timeout if self.filter_timeout > 0 else None
        left = allocator.time_left
        cut = left is not None and (deadline is None or start + left < deadline)  # the cycle's bound is nearer
        if cut and left is not None:
            deadline = start + max(left, 0.0)
        try:
            result = allocator.allocate(node, to_alloc, deadline)
        except AllocationTimeout:
            if cut and self.cycle_budget is not None:
                claims = ", ".join(f"claim {claim_ref(c)}" for c in to_alloc)
                return [], Status.error(
                    f"node {node_info.name}: timed out trying to allocate devices: the DynamicResources Filter ran "
                    f"{self.cycle_budget.seconds:g} s in this scheduling cycle, py-scheduler's bound on one cycle "
                    f"(filterTimeout bounds one node), allocating {claims} (spec.devices); the Pod is retried", NAME)
            return [], Status.error(f"node {node_info.name}: timed out trying to allocate devices", NAME)
        except FailedAllocationOnNode as exc:
            return [], unresolvable(str(exc))
        except AllocationError as exc:
            return [], Status.error(str(exc), NAME)
        finally:
            if left is not None:
                allocator.time_left = left - (time.monotonic() - start)
        if result is None or len(result) != len(to_alloc):
            return [], unresolvable("cannot allocate all claims")
        return result, None

    def pod_group_post_filter(self, state: CycleState, pod_group: PodGroupInfo, dry_run: PodGroupDryRun
                              ) -> tuple[PodGroupPostFilterResult | None, Status] | None:
        """``PodGroupPostFilter`` (dynamicresources.go) for a group none of whose members uses a claim:
        nothing to deallocate, Unschedulable ``deallocation and deletion of ResourceClaims completed``
        (no reason for a topology-constrained group). None with claims: the group-level deallocation
        is not reproduced. The dry run is not used."""
        if any(pi.spec.get("resourceClaims") for pi in pod_group.pods):
            return None
        gates = self.handle.feature_gates if self.handle is not None else None
        if gates is not None and gates.topology_aware_workload_scheduling and \
                (pod_group.pod_group.get("spec") or {}).get("schedulingConstraints") is not None:
            return None, Status(Code.UNSCHEDULABLE)
        return None, Status(Code.UNSCHEDULABLE, ["deallocation and deletion of ResourceClaims completed"])

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
        ext_real = ext is not None and claim_meta(ext).get("name") != SPECIAL_CLAIM_NAME
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
                self._background(binding.deallocate_claim(claim))
                return None, Status(Code.UNSCHEDULABLE, ["deallocation of ResourceClaim completed"], NAME)
        if ext is not None and ext_real:
            state.write(NEEDS_API_DEALLOCATION_KEY, claim_ref(ext))
            self._background(binding.delete_claim(ext))
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

    # -- Score -------------------------------------------------------------------------------------
    def score_nodes(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> tuple[list[int], Status]:
        """:meth:`score` for each of ``nodes`` in order (batch form): all 0 at once for a Pod without
        claims, else node by node."""
        s = state_data(state)
        if s is None:
            return [], state_not_found()
        if not s.claims:
            return [0] * len(nodes), Status.success()
        if not any(req.get("firstAvailable") for c in s.claims for req in requests_of(c)):
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
        s = state_data(state)
        if s is None:
            return 0, state_not_found()
        if not s.claims:
            return 0, Status.success()
        allocations = s.node_allocations.get(node_info.name)
        if allocations is None:
            return 0, Status.success()
        score = 0
        k = 0
        for claim in s.claims:
            alloc = allocation_of(claim)
            if alloc is None:
                if k >= len(allocations):
                    return 0, Status.error(f"number of allocations {len(allocations)} is smaller than number of "
                                           f"claims needing allocation", NAME)
                alloc = allocations[k]
                k += 1
            used = {str(r.get("request") or "") for r in results_of(alloc)}
            used = {u for u in used if len(u.split("/")) == 2}
            for req in requests_of(claim):
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

    def normalize_column(self, state: CycleState, pod: PodInfo, values: Sequence[int]) -> tuple[list[int], Status]:
        """:meth:`normalize_score` on a column (``BatchNormalizeScorePlugin``)."""
        return default_normalize_column(100, False, values), Status.success()

    # -- Reserve -----------------------------------------------------------------------------------
    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        """``Reserve``: take the node's allocation from Filter, keep it in flight, record it in the
        CycleState and flag that the claims' status must be written through the API."""
        s = state_data(state)
        if s is None:
            return state_not_found()
        if not s.claims:
            return Status.success()
        recorded: dict[str, Obj] = {}
        needs_write = any(allocation_of(c) is not None and not reserved_for(c, pod.uid)
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
                uid = claim_uid(claim)
                entry = self._in_flight.get(uid)
                if entry is not None:
                    entry[1] += 1
                else:
                    self._in_flight[uid] = [allocated, 1, None]
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
            uid = claim_uid(claim)
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
        s = state_data(state)
        if s is None:
            return state_not_found()
        if not s.claims:
            return Status(Code.SKIP, [], NAME)
        return Status.success()

    async def pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        """``PreBind``: each claim not yet reserved for the Pod gets its allocation (from Reserve)
        and the Pod's reservation written through the API (:func:`.binding.bind_claim`); then, if
        an allocated device has binding conditions, wait for them (``bindingTimeout``). Without an
        API client (offline) the same effect is applied to the in-memory objects."""
        s = state_data(state)
        if s is None:
            return state_not_found()
        if not s.claims:
            return Status.success()
        client = self.handle.client if self.handle is not None else None
        if client is None:
            binding.simulated_pre_bind(state, pod)
            return Status.success()
        pod_ref = {"resource": "pods", "name": pod.name, "uid": pod.uid}
        for i, claim in enumerate(s.claims):
            if reserved_for(claim, pod.uid):
                continue
            ext = i >= s.num_user
            if ext and s.allocations[i] is None and not requests_of(claim):
                continue
            try:
                if ext and claim_meta(claim).get("name") == SPECIAL_CLAIM_NAME:
                    claim = await extended.create_extended_claim(client, s, claim, pod, node_name, self._in_flight)
                s.claims[i] = await binding.bind_claim(client, claim, s.allocations[i], pod_ref)
                if s.allocations[i] is not None:
                    mark_written(self._in_flight, s.claims[i])
                if ext:
                    await extended.patch_extended_status(client, s, s.claims[i], pod, node_name)
            except binding.BindingError as exc:
                return Status.error(str(exc), NAME)
            s.reserved.add(i)
        if binding.has_binding_conditions(s.claims):
            events = self.handle.events if self.handle is not None else None
            await binding.record_pending(events, pod.pod, node_name)
            try:
                s.claims = await binding.wait_for_binding_conditions(
                    s.claims, self.handle.objects if self.handle is not None else None, self.binding_timeout,
                    self.binding_poll)
            except binding.BindingError as exc:
                return Status.error(str(exc), NAME)
        return Status.success()

    def _unreserve_api(self, s: DRAState, pod: PodInfo) -> None:
        """``Unreserve``'s API part: take the Pod's reservation back from the claims PreBind
        reserved (a background task; failures are logged, as upstream)."""
        created, s.created_ext = s.created_ext, None
        claims = [s.claims[i] for i in sorted(s.reserved) if s.claims[i] is not created]
        s.reserved.clear()
        if not (claims or created):
            return
        self._background(binding.unreserve_in_api(claims, created, pod.uid, self._in_flight))

    def claim_allocations(self, state: CycleState, pod: PodInfo) -> list[Obj]:
        """:class:`~py_scheduler.framework.interfaces.AllocationReporter`: each claim of the Pod with
        its allocation (Reserve's, else the one the claim already had), ``status.allocation``'s shape;
        the special extended-resource claim under the name PreBind gives it. Empty without claims or
        after Unreserve."""
        s = state_data(state)
        if s is None:
            return []
        out: list[Obj] = []
        for i, claim in enumerate(s.claims):
            alloc = (s.allocations[i] if i < len(s.allocations) else None) or allocation_of(claim)
            if alloc is None:
                continue
            ref = claim_ref(claim)
            if claim_meta(claim).get("name") == SPECIAL_CLAIM_NAME:
                ref = f"{pod.namespace}/{pod.name}-extended-resources"
            out.append({"claim": ref, "allocation": copy.deepcopy(alloc)})
        return out

    def in_flight_claims(self) -> list[str]:
        """``namespace/name`` of the claims whose allocation is in flight (Reserved, not yet written)."""
        return sorted(claim_ref(entry[0]) for entry in self._in_flight.values())
