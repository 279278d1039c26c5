"""Structured-parameters device allocator (what DynamicResources' Filter runs per node).

Upstream: ``k8s.io/dynamic-resource-allocation@v0.37.2/structured/internal/incubating/``
(``allocator_incubating.go``: ``Allocate``, ``validateDeviceRequest``, ``allocateOne``,
``isSelectable``, ``selectorsMatch``, ``allocateDevice``, ``createNodeSelector``, the
``matchAttribute`` constraint, device taints; ``constraint.go``: ``distinctAttribute``;
``pools_incubating.go``: ``GatherPools``, ``NodeMatches``, ``buildPool``,
``checkSlicesInPool``; ``compatibility_groups.go``). v1.37's default feature set (DRAConsumableCapacity,
DRADeviceBindingConditions on) selects the *incubating* variant in ``structured/allocator.go``.

The search is upstream's exhaustive first-fit: claims in order, requests in order, each device
from the pools sorted by (driver, pool), slices sorted by name, devices in slice order;
``firstAvailable`` subrequests are tried in priority order; combinations (not permutations) of
devices within one request. The first full solution wins.

v1.37's default DRA features are modelled as upstream's incubating variant does:

* partitionable devices (DRAPartitionableDevices): counter sets published in ``sharedCounters``
  slices of the pool, devices consuming them through ``consumesCounters`` (MIG profiles carved
  from one physical GPU); counters already consumed by allocated devices anywhere in the pool
  (also in slices that do not target the node) are subtracted once per Allocator
  (``checkAvailableCounters``), those of the devices being allocated per run;
* consumable capacity (DRAConsumableCapacity, with DRAFractionalCapacityRange): a device with
  ``allowMultipleAllocations`` may be allocated to several claims, each result carrying a
  ``shareID`` and the ``consumedCapacity`` computed from the request and the capacity's
  ``requestPolicy`` (default, valid values, valid range with step), see :mod:`.capacity`;
* admin access (DRAAdminAccess): such a request may take devices in use, and its results are not
  counted as allocated;
* binding conditions (DRADeviceBindingConditions): pools with such devices are tried last and the
  results carry ``bindingConditions`` / ``bindingFailureConditions``.

Objects are plain resource.k8s.io/v1 JSON dicts. Device IDs are ``(driver, pool, device)``.
"""

from __future__ import annotations

import json
import logging
import operator
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from py_scheduler.framework import quantity as qty
from py_scheduler.plugins.dynamic_resources.capacity import (
    CapacityError,
    consumed_from_request,
    fits_capacity,
    format_quantity,
    request_amounts,
)
from py_scheduler.plugins.helpers.node_selector import NodeSelector

# py_scheduler.plugins.helpers.cel is imported where a selector is first evaluated, not here:
# importing it loads celpy and lark and builds the CEL environment (~0.2-0.3 s of CPU) that only
# DRA selectors need, so the scheduler's start-up does not pay for it
# (tests/unit/plugins/test_lazy_cel.py).

__all__ = [
    "ALLOCATION_RESULTS_MAX_SIZE",
    "AllocationError",
    "AllocationTimeout",
    "Allocator",
    "DeviceID",
    "FailedAllocationOnNode",
    "SliceIndex",
    "SliceView",
    "apply_taint_rules",
    "claim_ref",
    "node_matches",
]

log = logging.getLogger("py_scheduler.plugins.dynamic_resources")

Obj = dict[str, Any]
DeviceID = tuple[str, str, str]

ALLOCATION_RESULTS_MAX_SIZE = 32
"""``resourceapi.AllocationResultsMaxSize``: devices one claim may get."""

MODE_EXACT_COUNT = "ExactCount"
MODE_ALL = "All"



class AllocationError(Exception):
    """Something wrong with a claim or class (upstream returns the error: the Filter fails with
    Error and the Pod is retried). ``str()`` is upstream's message."""


class FailedAllocationOnNode(Exception):
    """``ErrFailedAllocationOnNode``: not fatal, the node is rejected with ``str()`` as reason."""


class AllocationTimeout(Exception):
    """The Filter timeout (``filterTimeout``) expired during the search."""


class _Stop(Exception):
    """``errAllocationResultMaxSizeExceeded``: backtrack more aggressively."""


def claim_ref(claim: Mapping[str, Any]) -> str:
    """``klog.KObj(claim)``: ``namespace/name``."""
    meta = claim.get("metadata") or {}
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"


def node_matches(node: Mapping[str, Any] | None, node_name: str, all_nodes: bool, node_selector: object) -> bool:
    """``NodeMatches``: a node name, all nodes, or a node selector (one of them).

    Raises:
        AllocationError: an unparsable node selector (``failed to parse node selector``).
    """
    if node_name:
        return node is not None and str((node.get("metadata") or {}).get("name") or "") == node_name
    if all_nodes:
        return True
    if node_selector is not None:
        try:
            sel = NodeSelector.from_node_selector(node_selector if isinstance(node_selector, Mapping) else None)
        except ValueError as exc:
            raise AllocationError(f"failed to parse node selector: {exc}") from exc
        if not isinstance(node_selector, Mapping):
            raise AllocationError(f"failed to parse node selector {node_selector!r}")
        return sel.match(node)
    return False


def apply_taint_rules(slices: list[Obj], rules: Iterable[Mapping[str, Any]]) -> list[Obj]:
    """DeviceTaintRules (GA in v1.37) applied to the slices the allocator sees, as the scheduler's
    ResourceSlice tracker does (``resourceslice/tracker/tracker.go`` ``applyPatches``): a rule's
    taint is appended to every device its selector (driver, pool, device; each optional, no
    selector: no device) matches. Slices no rule touches are returned as they are (not copied)."""
    rules = [r for r in rules if isinstance(r, Mapping)]
    if not rules:
        return slices
    out: list[Obj] = []
    for sl in slices:
        spec = sl.get("spec") if isinstance(sl.get("spec"), Mapping) else None
        if spec is None:
            out.append(sl)
            continue
        patched: Obj | None = None
        for rule in rules:
            rspec = rule.get("spec")
            if not isinstance(rspec, Mapping):
                continue
            sel = rspec.get("deviceSelector")
            taint = rspec.get("taint")
            if not isinstance(sel, Mapping) or not isinstance(taint, Mapping):
                continue
            if sel.get("driver") is not None and sel.get("driver") != spec.get("driver"):
                continue
            pool = spec.get("pool") if isinstance(spec.get("pool"), Mapping) else {}
            if sel.get("pool") is not None and sel.get("pool") != pool.get("name"):
                continue
            for i, d in enumerate(spec.get("devices") or []):
                if not isinstance(d, Mapping):
                    continue
                if sel.get("device") is not None and sel.get("device") != d.get("name"):
                    continue
                if patched is None:
                    patched = {**sl, "spec": {**spec, "devices": list(spec.get("devices") or [])}}
                dev = dict(patched["spec"]["devices"][i])
                dev["taints"] = [*(dev.get("taints") or []), dict(taint)]
                patched["spec"]["devices"][i] = dev
        out.append(patched if patched is not None else sl)
    return out


# -- slices and pools --------------------------------------------------------------------------
@dataclass(slots=True)
class _Slice:
    name: str
    driver: str
    pool: str
    generation: int
    count: int
    node_name: str
    all_nodes: bool
    node_selector: Any
    per_device: bool
    shared_counters: bool
    devices: list[Obj]
    counter_sets: list[Obj] = field(default_factory=list)

    @classmethod
    def parse(cls, obj: Mapping[str, Any]) -> _Slice | None:
        """A ResourceSlice, or None when its shape is unusable (logged; API validation prevents it)."""
        spec = obj.get("spec")
        if not isinstance(spec, Mapping):
            return None
        pool = spec.get("pool") or {}
        devices = spec.get("devices") or []
        if not isinstance(pool, Mapping) or not isinstance(devices, list):
            return None
        gen, count = pool.get("generation", 0), pool.get("resourceSliceCount", 0)
        if not isinstance(gen, int) or not isinstance(count, int):
            return None
        return cls(
            name=str((obj.get("metadata") or {}).get("name") or ""),
            driver=str(spec.get("driver") or ""),
            pool=str(pool.get("name") or ""),
            generation=gen,
            count=count,
            node_name=str(spec.get("nodeName") or ""),
            all_nodes=bool(spec.get("allNodes")),
            node_selector=spec.get("nodeSelector"),
            per_device=bool(spec.get("perDeviceNodeSelection")),
            shared_counters=bool(spec.get("sharedCounters")),
            devices=[d for d in devices if isinstance(d, dict)],
            counter_sets=[c for c in spec.get("sharedCounters") or [] if isinstance(c, dict)],
        )

    def uses_compatibility_groups(self) -> bool:
        """``sliceUsesCompatibilityGroups`` (DRADeviceCompatibilityGroups is off in v1.37)."""
        for d in self.devices:
            for c in d.get("consumesCounters") or []:
                if isinstance(c, Mapping) and c.get("compatibilityGroups"):
                    return True
        return False


@dataclass(slots=True)
class _Pool:
    driver: str
    pool: str
    incomplete: bool = False
    invalid: bool = False
    invalid_reason: str = ""
    slices: list[_Slice] = field(default_factory=list)
    slices_not_targeting: list[_Slice] = field(default_factory=list)
    counter_sets: dict[str, dict[str, Decimal]] = field(default_factory=dict)

    @property
    def pool_id(self) -> str:
        return f"{self.driver}/{self.pool}"


def gather_pools(slices_for_node: Iterable[_Slice], node: Mapping[str, Any],
                 all_slices: list[_Slice]) -> list[_Pool]:
    """``GatherPools``: the pools with devices reachable from ``node``, sorted by (driver, pool);
    pools with binding conditions last. Outdated slices are ignored; a pool missing slices is
    ``incomplete``; duplicate device names make it ``invalid``.

    Raises:
        AllocationError: a malformed node selector on a slice or device.
    """
    pools: dict[tuple[str, str], list[_Slice]] = {}
    for sl in slices_for_node:
        if sl.uses_compatibility_groups():
            continue
        if sl.node_name or sl.all_nodes or sl.node_selector is not None:
            relevant = node_matches(node, sl.node_name, sl.all_nodes, sl.node_selector)
        elif sl.per_device:
            relevant = any(node_matches(node, str(d.get("nodeName") or ""), bool(d.get("allNodes")),
                                        d.get("nodeSelector")) for d in sl.devices)
        else:
            continue
        if not relevant:
            continue
        pid = (sl.driver, sl.pool)
        cur = pools.get(pid)
        if cur is None or sl.generation > cur[0].generation:
            pools[pid] = [sl]
        elif sl.generation == cur[0].generation:
            cur.append(sl)
    result: list[_Pool] = []
    with_binding: list[_Pool] = []
    for (driver, pool_name), pslices in pools.items():
        want = pslices[0].count
        complete_slices: list[_Slice] | None = None
        if len(pslices) != want:
            gen = pslices[0].generation
            all_for_pool: list[_Slice] = []
            obsolete = False
            for sl in all_slices:
                if sl.driver != driver or sl.pool != pool_name:
                    continue
                if sl.generation == gen:
                    all_for_pool.append(sl)
                elif sl.generation > gen:
                    obsolete = True
                    break
            if obsolete:
                continue
            all_for_pool = [s for s in all_for_pool if not s.uses_compatibility_groups()]
            if len(all_for_pool) != want:
                result.append(_Pool(driver, pool_name, incomplete=True))
                continue
            complete_slices = all_for_pool
        p = _build_pool(driver, pool_name, pslices, complete_slices)
        if any(d.get("bindingConditions") is not None for s in p.slices for d in s.devices):
            with_binding.append(p)
        else:
            result.append(p)
    result.sort(key=lambda p: (p.driver, p.pool))
    with_binding.sort(key=lambda p: (p.driver, p.pool))
    return result + with_binding


def _build_pool(driver: str, pool: str, slices: list[_Slice], all_for_pool: list[_Slice] | None) -> _Pool:
    """``buildPool``: device slices sorted by name; slices with ``sharedCounters`` are counter sets,
    not devices; with ``all_for_pool`` (the pool did not lie wholly on the node) the pool's other
    slices count too: their counter sets, and their devices for the counters allocated devices
    consume. Duplicate device names, duplicate counter sets and devices consuming unknown counters
    make the pool invalid (``InvalidReason`` as upstream)."""
    ordered = sorted(slices, key=lambda s: s.name)
    device_slices = [s for s in ordered if not s.shared_counters]
    counter_slices = [s for s in ordered if s.shared_counters]
    not_targeting: list[_Slice] = []
    if all_for_pool is not None and len(slices) < len(all_for_pool):
        names = {s.name for s in slices}
        for s in all_for_pool:
            if s.name in names:
                continue
            (counter_slices if s.shared_counters else not_targeting).append(s)
    seen: set[str] = set()
    for s in device_slices:
        for d in s.devices:
            n = str(d.get("name") or "")
            if n in seen:
                return _Pool(driver, pool, invalid=True, invalid_reason=f"duplicate device name {n}")
            seen.add(n)
    counter_sets: dict[str, dict[str, Decimal]] = {}
    for s in counter_slices:
        for cs in s.counter_sets:
            cname = str(cs.get("name") or "")
            if cname in counter_sets:
                return _Pool(driver, pool, invalid=True, invalid_reason=f"duplicate counter set name {cname}")
            counter_sets[cname] = _counters(cs.get("counters"))
    for group in (device_slices, not_targeting):
        reason = _validate_counter_consumption(counter_sets, group)
        if reason:
            return _Pool(driver, pool, invalid=True, invalid_reason=reason)
    return _Pool(driver, pool, slices=device_slices, slices_not_targeting=not_targeting, counter_sets=counter_sets)


def _counters(raw: object) -> dict[str, Decimal]:
    """``map[string]Counter`` -> name -> value (a malformed value counts as 0; API validation
    prevents it)."""
    out: dict[str, Decimal] = {}
    if not isinstance(raw, Mapping):
        return out
    for name, c in raw.items():
        v = c.get("value") if isinstance(c, Mapping) else None
        try:
            out[str(name)] = qty.parse(v)
        except qty.QuantityError:
            out[str(name)] = Decimal(0)
    return out


def _validate_counter_consumption(counter_sets: Mapping[str, Mapping[str, Decimal]], slices: list[_Slice]) -> str:
    """``validateDeviceCounterConsumption``: every consumed counter exists in its set ('' when so)."""
    for s in slices:
        for d in s.devices:
            for use in d.get("consumesCounters") or []:
                if not isinstance(use, Mapping):
                    continue
                cset = str(use.get("counterSet") or "")
                if cset not in counter_sets:
                    return f"counter set {cset} not found"
                for cname in use.get("counters") or {}:
                    if cname not in counter_sets[cset]:
                        return f"counter {cname} not found in counter set {cset}"
    return ""


def _consumption(device: Mapping[str, Any]) -> list[tuple[str, dict[str, Decimal]]]:
    """A device's ``consumesCounters`` as (counter set, name -> value)."""
    return [(str(use.get("counterSet") or ""), _counters(use.get("counters")))
            for use in device.get("consumesCounters") or [] if isinstance(use, Mapping)]


# -- requests ------------------------------------------------------------------------------------
@dataclass(slots=True)
class _Request:
    """``requestAccessor`` over an ``exactly`` request or a ``firstAvailable`` subrequest."""

    name: str
    class_name: str
    mode: str
    count: int
    admin_access: bool
    has_admin_access: bool
    selectors: list[Any]
    tolerations: list[Any]
    capacity: dict[str, Decimal] | None
    derived: Any

    @classmethod
    def from_exact(cls, name: str, ex: Mapping[str, Any]) -> _Request:
        return cls._from(name, ex, admin=ex.get("adminAccess"))

    @classmethod
    def from_sub(cls, sub: Mapping[str, Any]) -> _Request:
        return cls._from(str(sub.get("name") or ""), sub, admin=None)

    @classmethod
    def _from(cls, name: str, m: Mapping[str, Any], admin: object) -> _Request:
        count = m.get("count")
        return cls(
            name=name,
            class_name=str(m.get("deviceClassName") or ""),
            # The API server defaults allocationMode to ExactCount and count to 1.
            mode=str(m.get("allocationMode") or MODE_EXACT_COUNT),
            count=count if isinstance(count, int) and not isinstance(count, bool) else 1,
            admin_access=admin is True,
            has_admin_access=admin is not None,
            selectors=list(m.get("selectors") or []),
            tolerations=[t for t in m.get("tolerations") or [] if isinstance(t, Mapping)],
            capacity=request_amounts(m.get("capacity")),
            derived=m.get("derivedAttributes"),
        )


@dataclass(slots=True)
class _Candidate:
    id: DeviceID
    device: Obj
    slice: _Slice
    pool: _Pool


@dataclass(slots=True)
class _RequestData:
    request: _Request
    parent: str | None
    device_class: Obj | None
    num_devices: int = 0
    selected_sub: int = 0
    all_devices: list[_Candidate] = field(default_factory=list)

    def request_name(self) -> str:
        return f"{self.parent}/{self.request.name}" if self.parent is not None else self.request.name


@dataclass(slots=True)
class _Result:
    request: str
    parent: str | None
    id: DeviceID
    device: Obj
    slice: _Slice
    tolerations: list[Any]
    admin_access: bool = False
    share_id: str | None = None
    consumed_capacity: dict[str, Decimal] | None = None

    def request_name(self) -> str:
        return f"{self.parent}/{self.request}" if self.parent is not None else self.request


# -- constraints ------------------------------------------------------------------------------
def _lookup_attribute(device: Mapping[str, Any], driver: str, name: str) -> Mapping[str, Any] | None:
    """``lookupAttribute``: the fully qualified name, or the bare id when the domain is the driver."""
    attrs = device.get("attributes") or {}
    if not isinstance(attrs, Mapping):
        return None
    v = attrs.get(name)
    if isinstance(v, Mapping):
        return v
    domain, sep, ident = name.partition("/")
    if not sep or domain != driver:
        return None
    v = attrs.get(ident)
    return v if isinstance(v, Mapping) else None


_SCALAR_KEYS = ("string", "int", "bool", "version")


def _scalar(attr: Mapping[str, Any]) -> tuple[str, Any] | None:
    for k in _SCALAR_KEYS:
        if attr.get(k) is not None:
            return k, attr[k]
    return None


class _Constraint:
    def __init__(self, requests: Iterable[str], attribute: str) -> None:
        self.requests = set(requests)
        self.attribute = attribute

    def applies(self, request: str, sub: str | None) -> bool:
        if not self.requests:
            return True
        if sub is None:
            return request in self.requests
        return request in self.requests or f"{request}/{sub}" in self.requests

    def add(self, request: str, sub: str | None, device: Obj, did: DeviceID) -> bool:
        raise NotImplementedError

    def remove(self, request: str, sub: str | None) -> None:
        raise NotImplementedError


class _MatchAttribute(_Constraint):
    """``matchAttributeConstraint``: every device has the attribute, all with the same value."""

    def __init__(self, requests: Iterable[str], attribute: str) -> None:
        super().__init__(requests, attribute)
        self.value: tuple[str, Any] | None = None
        self.num = 0

    def add(self, request: str, sub: str | None, device: Obj, did: DeviceID) -> bool:
        if not self.applies(request, sub):
            return True
        attr = _lookup_attribute(device, did[0], self.attribute)
        if attr is None:
            return False
        if self.num == 0:
            self.value = _scalar(attr)
            self.num = 1
            return True
        v = _scalar(attr)
        if v is None or self.value is None or v != self.value:
            return False
        self.num += 1
        return True

    def remove(self, request: str, sub: str | None) -> None:
        if self.applies(request, sub):
            self.num -= 1


class _DistinctAttribute(_Constraint):
    """``distinctAttributeConstraint``: every device has the attribute, all values differ."""

    def __init__(self, requests: Iterable[str], attribute: str) -> None:
        super().__init__(requests, attribute)
        self.values: list[tuple[str, Any] | None] = []

    def add(self, request: str, sub: str | None, device: Obj, did: DeviceID) -> bool:
        if not self.applies(request, sub):
            return True
        attr = _lookup_attribute(device, did[0], self.attribute)
        if attr is None:
            return False
        v = _scalar(attr)
        if v is None or v in self.values:
            return False
        self.values.append(v)
        return True

    def remove(self, request: str, sub: str | None) -> None:
        if self.applies(request, sub):
            self.values.pop()


def _tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """``resourceclaim.ToleratesTaint`` (device tolerations: Equal / Exists)."""
    if toleration.get("effect") and toleration.get("effect") != taint.get("effect"):
        return False
    if toleration.get("key") and toleration.get("key") != taint.get("key"):
        return False
    op = toleration.get("operator") or "Equal"
    if op == "Equal":
        return (toleration.get("value") or "") == (taint.get("value") or "")
    return op == "Exists"


def _taint_prevents_allocation(device: Mapping[str, Any], request: _Request) -> bool:
    """``taintPreventsAllocation``: an untolerated NoSchedule / NoExecute taint."""
    for taint in device.get("taints") or []:
        if not isinstance(taint, Mapping):
            continue
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not any(
                _tolerates(t, taint) for t in request.tolerations):
            return True
    return False


# -- selector results across cycles ------------------------------------------------------------
class SelectorMemo:
    """Whether a CEL selector expression matches a device, kept across scheduling cycles.

    Key: ``(expression, driver, id(device))`` with the device dict itself stored beside the result
    and compared by identity on a hit (so a freed dict whose id is reused is a miss, never a wrong
    hit). Inputs: exactly those of ``cel.device_matches(cel.compile_selector(expression),
    cel.device_variable(driver, device))``, which read nothing else (no feature gate, no clock, no
    other object). What it depends on: a device dict is never changed in place - the informers
    replace a ResourceSlice with a new object on every update, and :func:`apply_taint_rules` copies
    a device it adds taints to - so the same dict object means the same attributes and capacity.
    Only booleans are kept: a compile or runtime error is raised again on every evaluation, as
    before. Bounded: at ``max_size`` entries it starts over (a cluster has ``devices x distinct
    expressions`` entries; taint-patched copies are new dicts every cycle and only churn it).

    Why: the per-cycle ``Allocator.cel_cache`` evaluated every (expression, device) pair again in
    each cycle; cel-python's tree-walking evaluation (~0.3 ms) plus the ``device`` variable
    (~0.15 ms) per device per node was ~2/3 of a DRA Pod's scheduling CPU
    (SchedulingWithResourceClaimTemplate, bench/RESULTS.md optimisation log).
    ``tests/unit/plugins/test_dra_selector_memo.py`` checks the allocator with the memo against a
    cold memo on random slices, selectors and updates.
    """

    def __init__(self, max_size: int = 200_000) -> None:
        self.max_size = max_size
        self._memo: dict[tuple[str, str, int], tuple[Obj, bool]] = {}

    def get(self, expression: str, driver: str, device: Obj) -> bool | None:
        """The stored result, or None when there is none for this very device dict."""
        hit = self._memo.get((expression, driver, id(device)))
        if hit is None or hit[0] is not device:
            return None
        return hit[1]

    def put(self, expression: str, driver: str, device: Obj, matches: bool) -> None:
        if len(self._memo) >= self.max_size:
            self._memo.clear()
        self._memo[(expression, driver, id(device))] = (device, matches)

    def clear(self) -> None:
        self._memo.clear()

    def __len__(self) -> int:
        return len(self._memo)


SELECTOR_MEMO = SelectorMemo()
"""The process's :class:`SelectorMemo` (one per process: results do not depend on the profile)."""


# -- slices parsed once per slice-store change -------------------------------------------------
class SliceIndex:
    """The ResourceSlices as the allocator reads them (parsed, by node), kept across scheduling cycles
    and rebuilt only when the slice objects change; plus each node's pools (``GatherPools``) while
    nothing changed.

    Inputs: the list of ResourceSlice JSON dicts handed to :meth:`update` (after
    :func:`apply_taint_rules`). What it depends on: the informers replace a slice with a new dict on
    every update and never change one in place (the same assumption as :class:`SelectorMemo`), so a
    list whose elements are the very same objects, in the same order, parses to the same slices.
    Invalidated when any element differs by identity, or the length does (a slice added, replaced or
    deleted; taint rules give patched copies, so with DeviceTaintRules it rebuilds every cycle).

    ``SliceView.pools(node)`` memoizes :func:`gather_pools` per node name when the node's pools can depend on
    nothing but its name: no slice targets nodes by ``allNodes`` / ``nodeSelector`` / per-device
    selection (``shared_slices`` empty), so a slice is relevant to a node exactly when its
    ``spec.nodeName`` is the node's name, which is how :attr:`SliceView.on_node` is keyed. Pools and slices
    are never changed by an allocation (run state lives in ``_Run`` / ``Allocator``).

    Why: at 5000 nodes with one slice each, parsing every slice in PreFilter and gathering a node's
    pools in each Filter call were most of a DRA Pod's scheduling CPU outside the search itself
    (bench/RESULTS.md optimisation log). ``tests/unit/plugins/test_dra_slice_index.py`` checks
    allocations with a long-lived index against fresh allocators on random slice updates.
    """

    def __init__(self) -> None:
        self._objs: list[Mapping[str, Any]] = []
        self.view = SliceView([])
        self.rebuilds = 0
        """How many times the slices were parsed (for tests)."""

    def update(self, slices: list[Mapping[str, Any]]) -> SliceView:
        """The view of the current slice objects: the last one when they are the same objects as
        last time, else a new one (parsed again). A view is never changed once made, except for its
        pools memo, so an Allocator holding one is not disturbed by a later update."""
        old = self._objs
        if len(slices) == len(old) and all(map(operator.is_, slices, old)):
            return self.view
        self._objs = list(slices)
        self.view = SliceView(slices)
        self.rebuilds += 1
        return self.view


class SliceView:
    """One generation of :class:`SliceIndex`: the parsed slices, by node, and the pools memo."""

    def __init__(self, slices: Iterable[Mapping[str, Any]]) -> None:
        self.all_slices: list[_Slice] = []
        for obj in slices:
            sl = _Slice.parse(obj)
            if sl is None:
                log.warning("ignoring malformed ResourceSlice %s", (obj.get("metadata") or {}).get("name"))
                continue
            self.all_slices.append(sl)
        self.on_node: dict[str, list[_Slice]] = {}
        self.shared_slices: list[_Slice] = []
        for sl in self.all_slices:
            if sl.node_name:
                self.on_node.setdefault(sl.node_name, []).append(sl)
            else:
                self.shared_slices.append(sl)
        self._pools: dict[str, list[_Pool]] = {}
        self._ids: dict[str, tuple[DeviceID, ...]] = {}
        self.results: dict[str, tuple[tuple[Any, ...], list[Obj] | None, tuple[Obj, ...]]] = {}
        """Node name -> (key, the last allocation result there, class objects the key names by id):
        :meth:`Allocator.allocate`'s memo, one entry per node."""

    def memoizable(self) -> bool:
        """Whether a node's pools and allocations can depend on nothing of the node but its name."""
        return not self.shared_slices

    def device_ids(self, node: Mapping[str, Any], node_name: str) -> tuple[DeviceID, ...]:
        """Every device of the node's pools (also their slices on other nodes: their counters), in
        pool order (memoized with the pools; only when :meth:`memoizable`)."""
        hit = self._ids.get(node_name)
        if hit is None:
            hit = tuple((sl.driver, sl.pool, str(d.get("name") or ""))
                        for p in self.pools(node, node_name) for group in (p.slices, p.slices_not_targeting)
                        for sl in group for d in sl.devices)
            self._ids[node_name] = hit
        return hit

    def pools(self, node: Mapping[str, Any], node_name: str) -> list[_Pool]:
        """``GatherPools`` for ``node`` (memoized per node name when no slice targets nodes other
        than by name; see :class:`SliceIndex`).

        Raises:
            AllocationError: a malformed node selector on a slice or device.
        """
        if self.shared_slices:
            return gather_pools(self.on_node.get(node_name, []) + self.shared_slices, node, self.all_slices)
        hit = self._pools.get(node_name)
        if hit is None:
            hit = gather_pools(self.on_node.get(node_name, []), node, self.all_slices)
            self._pools[node_name] = hit
        return hit


# -- the allocator -------------------------------------------------------------------------------
class Allocator:
    """``structured.Allocator`` for one scheduling cycle (built in PreFilter, used by every Filter).

    Args:
        allocated: device IDs dedicated to some claim (``AllocatedState.AllocatedDevices``).
        classes: DeviceClass name -> object.
        slices: every ResourceSlice (JSON).
        cel_cache: shared ``(expression, device id) -> bool`` memo for this cycle.
        shared: device IDs allocated as shares of a multi-allocatable device
            (``AllocatedSharedDeviceIDs`` without the share IDs).
        capacity: device ID -> capacity name -> amount consumed by allocated shares
            (``AggregatedCapacity``).
        fractional_capacity: the DRAFractionalCapacityRange gate (on in v1.37).
        index: a long-lived :class:`SliceIndex` to take ``slices`` into (parsed again only when
            they changed); a private one without.
    """

    def __init__(self, allocated: set[DeviceID], classes: Mapping[str, Obj], slices: Iterable[Mapping[str, Any]],
                 cel_cache: dict[tuple[str, DeviceID], bool] | None = None, *,
                 shared: set[DeviceID] | None = None,
                 capacity: Mapping[DeviceID, Mapping[str, Decimal]] | None = None,
                 fractional_capacity: bool = True, index: SliceIndex | None = None) -> None:
        self.allocated = allocated
        self.shared: set[DeviceID] = shared or set()
        self.capacity: Mapping[DeviceID, Mapping[str, Decimal]] = capacity or {}
        self.fractional_capacity = fractional_capacity
        self.available_counters: dict[tuple[str, str], dict[str, dict[str, Decimal]]] = {}
        """Pool -> counter set -> counter -> what allocated devices left (``availableCounters``),
        computed once per Allocator: allocated devices do not change during a cycle."""
        self.classes = classes
        objs = slices if isinstance(slices, list) else list(slices)
        self.slices = index.update(objs) if index is not None else SliceView(objs)
        self.cel_cache: dict[tuple[str, DeviceID], bool] = cel_cache if cel_cache is not None else {}
        self._device_vars: dict[DeviceID, Any] = {}
        self._last_specs: tuple[list[Obj], tuple[Obj, ...], tuple[str, ...]] | None = None
        """(claims list, its claims, their specs as JSON): the claims of the last allocate call;
        Filter passes one list object for every node of a cycle (``DRAState.plain``)."""
        self._classes_key = tuple(sorted((str(name), id(dc)) for name, dc in classes.items()))

    def allocate(self, node: Mapping[str, Any], claims: list[Obj],
                 deadline: float | None = None) -> tuple[list[Obj] | None, set[str]]:
        """``Allocator.Allocate``: one allocation result per claim (same order), or None when the
        claims do not fit on ``node``; plus an empty set (formerly: features py-scheduler skipped;
        kept for callers).
        ``deadline`` is a ``time.monotonic()`` instant (the Filter timeout).

        Raises:
            AllocationError: a broken claim or class (missing class, bad CEL, unknown constraint, ...).
            FailedAllocationOnNode: nothing fits and some pool was invalid.
            AllocationTimeout: ``deadline`` passed.
        """
        view = self.slices
        key: tuple[Any, ...] | None = None
        node_name = ""
        if view.memoizable():
            node_name = str((node.get("metadata") or {}).get("name") or "")
            key = self._memo_key(node, node_name, claims)
            if key is not None:
                hit = view.results.get(node_name)
                if hit is not None and hit[0] == key:
                    return hit[1], set()
        run = _Run(self, node, claims, deadline)
        result = run.allocate()
        if key is not None and not any(r.share_id is not None for rs in run.results for r in rs):
            view.results[node_name] = (key, result, tuple(self.classes.values()))
        return result, run.skipped_features

    def _memo_key(self, node: Mapping[str, Any], node_name: str, claims: list[Obj]) -> tuple[Any, ...] | None:
        """What an allocation on a node of a :meth:`SliceView.memoizable` view depends on, besides the
        view itself (which holds the memo): the claims' specs (names only appear in error messages,
        and errors are not memoized), the DeviceClass objects (by identity: the informers replace
        them), the gate, and which of the node's pools' devices are taken, shared, or have capacity
        consumed (and how much). None when a claim's spec is not plain JSON.

        The memo (``SliceView.results``): one result per node, reused while this key is equal; a
        result with a share of a multi-allocatable device (a random ``shareID``) is not kept.
        Callers must not change a returned result (DynamicResources' Reserve copies it).
        ``tests/unit/plugins/test_dra_slice_index.py`` checks it against fresh allocators."""
        last = self._last_specs
        if last is not None and last[0] is claims and len(last[1]) == len(claims) \
                and all(map(operator.is_, claims, last[1])):
            specs = last[2]
        else:
            texts: list[str] = []
            for claim in claims:
                try:
                    texts.append(json.dumps(claim.get("spec"), sort_keys=True))
                except (TypeError, ValueError):
                    return None
            specs = tuple(texts)
            self._last_specs = (claims, tuple(claims), specs)
        ids = self.slices.device_ids(node, node_name)
        allocated, shared, capacity = self.allocated, self.shared, self.capacity
        taken: Any = allocated.intersection(ids)
        if shared or capacity:
            taken = (frozenset(taken), None, *(d for d in ids if d in shared),
                     None, *((d, tuple(sorted(capacity[d].items()))) for d in ids if d in capacity))
        return (specs, self._classes_key, self.fractional_capacity, taken)

    def device_var(self, did: DeviceID, device: Obj) -> Any:
        v = self._device_vars.get(did)
        if v is None:
            from py_scheduler.plugins.helpers import cel

            v = cel.device_variable(did[0], device)
            self._device_vars[did] = v
        return v


class _Run:
    """``allocator``: the state of one ``Allocate`` call."""

    def __init__(self, a: Allocator, node: Mapping[str, Any], claims: list[Obj], deadline: float | None) -> None:
        self.a = a
        self.deadline = deadline
        self.node = node
        self.node_name = str((node.get("metadata") or {}).get("name") or "")
        self.claims = claims
        self.pools: list[_Pool] = []
        self.request_data: dict[tuple[int, int, int], _RequestData] = {}
        self.constraints: list[list[_Constraint]] = [[] for _ in claims]
        self.allocating: dict[DeviceID, set[int]] = {}
        self.results: list[list[_Result]] = [[] for _ in claims]
        self.matches: dict[tuple[DeviceID, tuple[int, int, int]], bool] = {}
        self.skipped_features: set[str] = set()
        self.consumed_counters: dict[tuple[str, str], dict[str, dict[str, Decimal]]] = {}
        self.allocating_capacity: dict[DeviceID, dict[str, Decimal]] = {}
        """Device -> capacity consumed by the shares allocated in this run (``allocatingCapacity``);
        an entry, even empty, marks the device as shared in this run."""

    # -- setup ------------------------------------------------------------------------------
    def allocate(self) -> list[Obj] | None:
        self.pools = self.a.slices.pools(self.node, self.node_name)
        for ci, claim in enumerate(self.claims):
            min_devices = 0
            devices = ((claim.get("spec") or {}).get("devices") or {})
            for ri, req in enumerate(devices.get("requests") or []):
                name = str(req.get("name") or "")
                subs = req.get("firstAvailable") or []
                if subs:
                    lowest: int | None = None
                    for si, sub in enumerate(subs):
                        rd = self._validate(_Request.from_sub(sub), name, (ci, ri, si))
                        self.request_data[(ci, ri, si)] = rd
                        lowest = rd.num_devices if lowest is None else min(lowest, rd.num_devices)
                    per_request = lowest or 0
                else:
                    rd = self._validate(_Request.from_exact(name, req.get("exactly") or {}), None, (ci, ri, 0))
                    self.request_data[(ci, ri, 0)] = rd
                    per_request = rd.num_devices
                if per_request > ALLOCATION_RESULTS_MAX_SIZE - min_devices:
                    raise AllocationError(
                        f"claim {claim_ref(claim)}, request {name}: adding {per_request} devices exceeds the claim "
                        f"limit of {ALLOCATION_RESULTS_MAX_SIZE}, with {min_devices} already accounted for")
                min_devices += per_request
            cons: list[_Constraint] = []
            for i, c in enumerate(devices.get("constraints") or []):
                reqs = [str(r) for r in (c.get("requests") or [])] if isinstance(c, Mapping) else []
                if isinstance(c, Mapping) and c.get("matchAttribute"):
                    cons.append(_MatchAttribute(reqs, str(c["matchAttribute"])))
                elif isinstance(c, Mapping) and c.get("distinctAttribute"):
                    cons.append(_DistinctAttribute(reqs, str(c["distinctAttribute"])))
                else:
                    raise AllocationError(f"claim {claim_ref(claim)}, constraint #{i}: empty constraint "
                                          f"(unsupported constraint type?)")
            self.constraints[ci] = cons

        if not self._allocate_one(0, 0, 0, 0, False, (0, 0, 0)):
            if any(p.invalid for p in self.pools):
                raise FailedAllocationOnNode("invalid resource pools were encountered")
            return None
        out: list[Obj] = []
        for ci in range(len(self.claims)):
            results = []
            for r in self.results[ci]:
                item: Obj = {"request": r.request_name(), "driver": r.id[0], "pool": r.id[1], "device": r.id[2]}
                if r.admin_access:
                    item["adminAccess"] = True
                if r.tolerations:
                    item["tolerations"] = r.tolerations
                if r.share_id is not None:
                    item["shareID"] = r.share_id
                if r.consumed_capacity:
                    item["consumedCapacity"] = {k: format_quantity(v) for k, v in r.consumed_capacity.items()}
                if r.device.get("bindingConditions"):
                    item["bindingConditions"] = list(r.device.get("bindingConditions") or [])
                    item["bindingFailureConditions"] = list(r.device.get("bindingFailureConditions") or [])
                results.append(item)
            alloc: Obj = {"devices": {"results": results}}
            config = self._configs(ci)
            if config:
                alloc["devices"]["config"] = config
            ns = self._node_selector(self.results[ci])
            if ns is not None:
                alloc["nodeSelector"] = ns
            out.append(alloc)
        return out

    def _selected(self, ci: int, ri: int) -> _RequestData:
        """The request data of request ``ri``: its selected subrequest for ``firstAvailable``."""
        rd = self.request_data[(ci, ri, 0)]
        if rd.parent is not None:
            rd = self.request_data[(ci, ri, rd.selected_sub)]
        return rd

    def _configs(self, ci: int) -> list[Obj]:
        """The ``devices.config`` of claim ``ci``'s AllocationResult (``Allocate``'s "Populate
        configs"): each DeviceClass's configs once (``source: FromClass``) naming every request that
        used the class, then the claim's own configs that apply to an allocated (sub)request
        (``FromClaim``); a config whose requests cover every request of the claim names none."""
        claim = self.claims[ci]
        devices = (claim.get("spec") or {}).get("devices") or {}
        requests = [r for r in devices.get("requests") or [] if isinstance(r, Mapping)]
        out: list[Obj] = []
        class_range: dict[str, tuple[int, int]] = {}
        for ri in range(len(requests)):
            rd = self._selected(ci, ri)
            dc = rd.device_class
            if dc is None:
                continue
            cname = str((dc.get("metadata") or {}).get("name") or "")
            if cname in class_range:
                a, b = class_range[cname]
                for i in range(a, b):
                    out[i]["requests"].append(rd.request_name())
                continue
            start = len(out)
            for cfg in (dc.get("spec") or {}).get("config") or []:
                if isinstance(cfg, Mapping):
                    out.append({"source": "FromClass", "requests": [rd.request_name()],
                                **{k: v for k, v in cfg.items() if k != "requests"}})
            class_range[cname] = (start, len(out))

        def selected_sub_name(ri: int) -> str | None:
            rd = self.request_data[(ci, ri, 0)]
            if rd.parent is None:
                return None
            return self._selected(ci, ri).request_name()

        for cfg in devices.get("config") or []:
            if not isinstance(cfg, Mapping):
                continue
            names = [str(n) for n in cfg.get("requests") or []]
            body = {k: v for k, v in cfg.items() if k != "requests"}
            if not names:
                out.append({"source": "FromClaim", **body})
                continue
            for ri, req in enumerate(requests):
                if str(req.get("name") or "") in names or selected_sub_name(ri) in names:
                    out.append({"source": "FromClaim", "requests": list(names), **body})
                    break
        for item in out:
            covered = item.get("requests")
            if not covered:
                continue
            if all(str(req.get("name") or "") in covered or selected_sub_name(ri) in covered
                   for ri, req in enumerate(requests)):
                del item["requests"]
        return out

    def _validate(self, request: _Request, parent: str | None, key: tuple[int, int, int]) -> _RequestData:
        """``validateDeviceRequest``."""
        claim = self.claims[key[0]]
        rname = request.name
        rd = _RequestData(request, parent, None)
        if request.derived:
            raise AllocationError(f"claim {claim_ref(claim)}, request {rname}: cannot handle request with derived "
                                  f"attributes, the feature is disabled")
        for i, sel in enumerate(request.selectors):
            if not isinstance(sel, Mapping) or not isinstance(sel.get("cel"), Mapping):
                raise AllocationError(f"claim {claim_ref(claim)}, request {rname}, selector #{i}: CEL expression "
                                      f"empty (unsupported selector type?)")
        if not request.class_name:
            raise AllocationError(f"claim {claim_ref(claim)}, request {rname}: missing device class name "
                                  f"(unsupported request type?)")
        dc = self.a.classes.get(request.class_name)
        if dc is None:
            raise AllocationError(f"claim {claim_ref(claim)}, request {rname}: could not retrieve device class "
                                  f"{request.class_name}: deviceclass.resource.k8s.io \"{request.class_name}\" "
                                  f"not found")
        rd.device_class = dc
        if request.mode == MODE_EXACT_COUNT:
            rd.num_devices = request.count
        elif request.mode == MODE_ALL:
            for pool in self.pools:
                if pool.incomplete:
                    raise AllocationError(f"claim {claim_ref(claim)}, request {rname}: asks for all devices, but "
                                          f"resource pool {pool.pool_id} is currently being updated")
                if pool.invalid:
                    raise AllocationError(f"claim {claim_ref(claim)}, request {rname}: asks for all devices, but "
                                          f"resource pool {pool.pool_id} is currently invalid")
                for sl in pool.slices:
                    for d in sl.devices:
                        did = (sl.driver, sl.pool, str(d.get("name") or ""))
                        if not self._selectable(key, rd, sl, did, d):
                            continue
                        # Static capacity only: what is left is checked in _allocate_device, so a
                        # capacity-blocked matching device stays a candidate and "All" fails.
                        try:
                            ok = fits_capacity(None, request.capacity, d.get("capacity"), None,
                                               self.a.fractional_capacity)
                        except CapacityError as exc:
                            raise AllocationError(f"claim {claim_ref(claim)}, request {rname}: checking capacity "
                                                  f"for device {d.get('name') or ''}: {exc}") from exc
                        if ok:
                            rd.all_devices.append(_Candidate(did, d, sl, pool))
            rd.num_devices = len(rd.all_devices)
        else:
            raise AllocationError(f"claim {claim_ref(claim)}, request {rname}: unsupported count mode "
                                  f"{request.mode}")
        return rd

    # -- search -----------------------------------------------------------------------------
    def _allocate_one(self, ci: int, ri: int, si: int, di: int, in_sub: bool,
                      start: tuple[int, int, int]) -> bool:
        """``allocateOne``: True when everything from this device on got allocated.

        Raises:
            _Stop: the result size limit was hit (more aggressive backtracking).
            AllocationTimeout: the deadline passed.
        """
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise AllocationTimeout
        if ci >= len(self.claims):
            return True
        claim = self.claims[ci]
        requests = ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []
        if ri >= len(requests):
            try:
                return self._allocate_one(ci + 1, 0, 0, 0, False, (0, 0, 0))
            except _Stop:
                return False
        key = (ci, ri, si)
        rd = self.request_data[key]
        if not in_sub and rd.parent is not None:
            all_exceeded = True
            sub = 0
            while (ci, ri, sub) in self.request_data:
                try:
                    ok = self._allocate_one(ci, ri, sub, 0, True, (0, 0, 0))
                except _Stop:
                    sub += 1
                    continue
                all_exceeded = False
                if ok:
                    rd.selected_sub = sub
                    return True
                sub += 1
            if all_exceeded:
                raise _Stop
            return False

        request = rd.request
        if request.mode == MODE_ALL and not rd.all_devices:
            return False
        if di >= rd.num_devices:
            return self._allocate_one(ci, ri + 1, 0, 0, False, (0, 0, 0))
        if rd.num_devices - di > ALLOCATION_RESULTS_MAX_SIZE - len(self.results[ci]):
            raise _Stop

        if request.mode == MODE_ALL:
            cand = rd.all_devices[di]
            undo = self._allocate_device(ci, ri, si, cand, must=True)
            if undo is None:
                return False
            try:
                done = self._allocate_one(ci, ri, si, di + 1, in_sub, (0, 0, 0))
            except BaseException:
                undo()
                raise
            if not done:
                undo()
            return done

        for pi in range(start[0], len(self.pools)):
            pool = self.pools[pi]
            if pool.incomplete or pool.invalid:
                continue
            s_start = start[1] if pi == start[0] else 0
            for sli in range(s_start, len(pool.slices)):
                sl = pool.slices[sli]
                d_start = start[2] if pi == start[0] and sli == start[1] else 0
                for dvi in range(d_start, len(sl.devices)):
                    d = sl.devices[dvi]
                    did = (pool.driver, pool.pool, str(d.get("name") or ""))
                    if request.admin_access:
                        if ci in self.allocating.get(did, ()):
                            continue
                    elif self._in_use(did):
                        continue
                    if not self._selectable(key, rd, sl, did, d):
                        continue
                    if not self._capacity_fits(claim, rd, did, d):
                        continue
                    undo = self._allocate_device(ci, ri, si, _Candidate(did, d, sl, pool), must=False)
                    if undo is None:
                        continue
                    try:
                        done = self._allocate_one(ci, ri, si, di + 1, in_sub, (pi, sli, dvi + 1))
                    except BaseException:
                        undo()
                        raise
                    if done:
                        return True
                    undo()
        return False

    def _in_use(self, did: DeviceID) -> bool:
        """``deviceInUse``: dedicated to an allocated claim or to a claim of this run."""
        return did in self.a.allocated or bool(self.allocating.get(did))

    def _capacity_in_use(self, did: DeviceID) -> bool:
        """``deviceCapacityInUse``: some share of the device is allocated or being allocated."""
        return did in self.a.capacity or did in self.a.shared or did in self.allocating_capacity

    def _capacity_fits(self, claim: Obj, rd: _RequestData, did: DeviceID, d: Obj) -> bool:
        """``allocator.CmpRequestOverCapacity``: the request fits what allocated and allocating
        shares left of the device's capacity.

        Raises:
            AllocationError: an unrepresentable capacity amount (upstream's message).
        """
        try:
            return fits_capacity(self.a.capacity.get(did), rd.request.capacity, d.get("capacity"),
                                 self.allocating_capacity.get(did), self.a.fractional_capacity)
        except CapacityError as exc:
            raise AllocationError(f"claim {claim_ref(claim)}, request {rd.request.name}: checking capacity for "
                                  f"device {'/'.join(did)}: {exc}") from exc

    def _pool_available_counters(self, pool: _Pool) -> dict[str, dict[str, Decimal]]:
        """The pool's counters minus what allocated devices consume (memoized on the Allocator)."""
        key = (pool.driver, pool.pool)
        avail = self.a.available_counters.get(key)
        if avail is not None:
            return avail
        avail = {name: dict(counters) for name, counters in pool.counter_sets.items()}
        for group in (pool.slices, pool.slices_not_targeting):
            for sl in group:
                for d in sl.devices:
                    did = (sl.driver, sl.pool, str(d.get("name") or ""))
                    if not (did in self.a.allocated or did in self.a.shared or did in self.a.capacity):
                        continue
                    for cset, counters in _consumption(d):
                        have = avail.get(cset)
                        if have is None:
                            continue
                        for cname, v in counters.items():
                            if cname in have:
                                have[cname] -= v  # may go negative: no counters left
        self.a.available_counters[key] = avail
        return avail

    def _reserve_counters(self, cand: _Candidate) -> bool:
        """``checkAvailableCounters``: add the device's consumption to this run's and check that no
        counter of the pool is exceeded (undone at once when one is)."""
        avail = self._pool_available_counters(cand.pool)
        consumed = self.consumed_counters.setdefault((cand.pool.driver, cand.pool.pool), {})
        for cset, counters in _consumption(cand.device):
            mine = consumed.setdefault(cset, {})
            for cname, v in counters.items():
                mine[cname] = mine.get(cname, Decimal(0)) + v
        for cset, counters in avail.items():
            mine = consumed.get(cset, {})
            for cname, v in counters.items():
                if v < mine.get(cname, Decimal(0)):
                    self._release_counters(cand)
                    return False
        return True

    def _release_counters(self, cand: _Candidate) -> None:
        """``deallocateCountersForDevice``."""
        consumed = self.consumed_counters.get((cand.pool.driver, cand.pool.pool), {})
        for cset, counters in _consumption(cand.device):
            mine = consumed.setdefault(cset, {})
            for cname, v in counters.items():
                mine[cname] = mine.get(cname, Decimal(0)) - v

    def _selectable(self, key: tuple[int, int, int], rd: _RequestData, sl: _Slice, did: DeviceID, d: Obj) -> bool:
        """``isSelectable``: class selectors, then request selectors, then per-device node selection."""
        mk = (did, key)
        hit = self.matches.get(mk)
        if hit is not None:
            return hit
        ok = True
        if rd.device_class is not None:
            ok = self._selectors_match(key, d, did, rd.device_class,
                                       list((rd.device_class.get("spec") or {}).get("selectors") or []))
        if ok:
            ok = self._selectors_match(key, d, did, None, rd.request.selectors)
        if ok and sl.per_device:
            ok = node_matches(self.node, str(d.get("nodeName") or ""), bool(d.get("allNodes")), d.get("nodeSelector"))
        self.matches[mk] = ok
        return ok

    def _selectors_match(self, key: tuple[int, int, int], d: Obj, did: DeviceID, dc: Obj | None,
                         selectors: list[Any]) -> bool:
        """``selectorsMatch``: every CEL selector must match.

        Raises:
            AllocationError: ``class X: selector #i: CEL compile error: ...`` / ``... CEL runtime error``.
        """
        who = (f"class {(dc.get('metadata') or {}).get('name')}" if dc is not None
               else f"claim {claim_ref(self.claims[key[0]])}")
        for i, sel in enumerate(selectors):
            expr = str(((sel or {}).get("cel") or {}).get("expression") or "") if isinstance(sel, Mapping) else ""
            ck = (expr, did)
            cached = self.a.cel_cache.get(ck)
            if cached is None:
                cached = SELECTOR_MEMO.get(expr, did[0], d)
            if cached is None:
                from py_scheduler.plugins.helpers import cel

                compiled = cel.compile_selector(expr)
                if compiled.error is not None:
                    raise AllocationError(f"{who}: selector #{i}: CEL compile error: {compiled.error}")
                try:
                    cached = cel.device_matches(compiled, self.a.device_var(did, d))
                except cel.CELCompileError as exc:
                    raise AllocationError(f"{who}: selector #{i}: CEL compile error: {exc}") from exc
                except cel.CELRuntimeError as exc:
                    raise AllocationError(f"{who}: selector #{i} on device {'/'.join(did)}: CEL runtime error: "
                                          f"{exc}") from exc
                SELECTOR_MEMO.put(expr, did[0], d, cached)
                self.a.cel_cache[ck] = cached
            else:
                self.a.cel_cache[ck] = cached
            if not cached:
                return False
        return True

    def _allocate_device(self, ci: int, ri: int, si: int, cand: _Candidate, must: bool) -> Callable[[], None] | None:
        """``allocateDevice``: use ``cand`` for the request if it is free (or shareable), its
        counters and capacity suffice, its taints are tolerated and the claim's constraints hold;
        returns the rollback (``rollbackDevice``), or None when it cannot be used.

        Raises:
            AllocationError: ``must`` and a constraint rejects the device; a capacity amount that
                cannot be represented.
        """
        rd = self.request_data[(ci, ri, si)]
        request = rd.request
        did = cand.id
        device = cand.device
        multi = device.get("allowMultipleAllocations") is True
        if not multi and request.admin_access and ci in self.allocating.get(did, ()):
            return None
        if not request.admin_access and self._in_use(did):
            return None
        base = rd.parent if rd.parent is not None else request.name
        sub = request.name if rd.parent is not None else None

        undo_steps: list[Callable[[], None]] = []

        def rollback() -> None:
            for step in reversed(undo_steps):
                step()

        # An allow-multiple device already shared has its counters accounted for already.
        if not (multi and self._capacity_in_use(did)) and device.get("consumesCounters"):
            if not self._reserve_counters(cand):
                return None
            undo_steps.append(lambda: self._release_counters(cand))
        if _taint_prevents_allocation(device, request):
            rollback()
            return None
        for c in self.constraints[ci]:
            if not c.add(base, sub, device, did):
                rollback()
                if must:
                    raise AllocationError(
                        f"claim {claim_ref(self.claims[ci])}, request {request.name}: cannot add device "
                        f"{'/'.join(did)} because a claim constraint would not be satisfied")
                return None
            undo_steps.append(lambda c=c: c.remove(base, sub))  # type: ignore[misc]
        if not multi:
            self.allocating.setdefault(did, set()).add(ci)
            undo_steps.append(lambda: self.allocating[did].discard(ci))
        consumed: dict[str, Decimal] = {}
        share_id: str | None = None
        if not self._capacity_fits(self.claims[ci], rd, did, device):
            rollback()
            return None
        if multi:
            try:
                consumed = consumed_from_request(request.capacity, device.get("capacity"),
                                                 self.a.fractional_capacity)
            except CapacityError as exc:
                rollback()
                raise AllocationError(f"claim {claim_ref(self.claims[ci])}, request {request.name}: computing "
                                      f"consumed capacity for device {'/'.join(did)}: {exc}") from exc
            share_id = str(uuid.uuid4())
            existed = did in self.allocating_capacity
            entry = self.allocating_capacity.setdefault(did, {})
            for k, v in consumed.items():
                entry[k] = entry.get(k, Decimal(0)) + v

            def release_capacity() -> None:
                cur = self.allocating_capacity.get(did, {})
                for k, v in consumed.items():
                    cur[k] = cur.get(k, Decimal(0)) - v
                    if cur[k] == 0:
                        del cur[k]
                if not cur and not existed:
                    self.allocating_capacity.pop(did, None)

            undo_steps.append(release_capacity)
        self.results[ci].append(_Result(request.name, rd.parent, did, device, cand.slice, list(request.tolerations),
                                        admin_access=request.admin_access, share_id=share_id,
                                        consumed_capacity=consumed or None))
        n = len(self.results[ci])

        def undo() -> None:
            del self.results[ci][n - 1:]
            rollback()

        return undo

    def _node_selector(self, results: list[_Result]) -> Obj | None:
        """``createNodeSelector``: the node itself when a device is node-local, else the merged
        single-term selectors of the slices, else None (available everywhere).

        Raises:
            AllocationError: a slice selector with more than one term.
        """
        fields: list[Obj] = []
        exprs: list[Obj] = []
        for r in results:
            if r.slice.per_device:
                node_name, selector = str(r.device.get("nodeName") or ""), r.device.get("nodeSelector")
            else:
                node_name, selector = r.slice.node_name, r.slice.node_selector
            if node_name or r.device.get("bindsToNode"):
                return {"nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": [self.node_name]}]}]}
            if isinstance(selector, Mapping):
                terms = selector.get("nodeSelectorTerms") or []
                if len(terms) == 1 and isinstance(terms[0], Mapping):
                    _merge(terms[0].get("matchFields") or [], fields)
                    _merge(terms[0].get("matchExpressions") or [], exprs)
                elif len(terms) > 1:
                    raise AllocationError(f"unsupported ResourceSlice.NodeSelector with {len(terms)} terms")
        if fields or exprs:
            term: Obj = {}
            if exprs:
                term["matchExpressions"] = exprs
            if fields:
                term["matchFields"] = fields
            return {"nodeSelectorTerms": [term]}
        return None


def _merge(src: Iterable[Any], dst: list[Obj]) -> None:
    """``addNewNodeSelectorRequirements``: append requirements not already present (same key,
    operator and value set)."""
    for req in src:
        if not isinstance(req, Mapping):
            continue
        vals = set(req.get("values") or [])
        if not any(e.get("key") == req.get("key") and e.get("operator") == req.get("operator")
                   and set(e.get("values") or []) == vals for e in dst):
            dst.append(dict(req))
