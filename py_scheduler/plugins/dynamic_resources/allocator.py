"""Structured-parameters device allocator (what DynamicResources' Filter runs per node).

Upstream: ``k8s.io/dynamic-resource-allocation@v0.37.2/structured/internal/incubating/``
(``allocator_incubating.go``: ``Allocate``, ``validateDeviceRequest``, ``allocateOne``,
``isSelectable``, ``selectorsMatch``, ``allocateDevice``, ``createNodeSelector``;
``compatibility_groups.go``). v1.37's default feature set (DRAConsumableCapacity,
DRADeviceBindingConditions on) selects the *incubating* variant in ``structured/allocator.go``.
The other parts follow upstream's files: the pools (``pools_incubating.go``) in :mod:`.pools`, the
constraints (``matchAttribute``, ``constraint.go``'s ``distinctAttribute``) in :mod:`.constraints`,
device taints in :mod:`.taints`, the per-request records in :mod:`.request_data`, the errors and
device IDs in :mod:`.common`; the selector results kept across cycles in :mod:`.selector_memo`.

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
import operator
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal
from typing import Any

from py_scheduler.framework.objects import Obj
from py_scheduler.plugins.dynamic_resources.capacity import (
    CapacityError,
    consumed_from_request,
    fits_capacity,
    format_quantity,
)

# py_scheduler.plugins.helpers.cel is imported where a selector is first evaluated, not here:
# importing it loads celpy and lark and builds the CEL environment (~0.2-0.3 s of CPU) that only
# DRA selectors need, so the scheduler's start-up does not pay for it
# (tests/unit/plugins/test_lazy_cel.py).
from py_scheduler.plugins.dynamic_resources.common import (
    ALLOCATION_RESULTS_MAX_SIZE,
    MODE_ALL,
    MODE_EXACT_COUNT,
    AllocationError,
    AllocationTimeout,
    CelCycleBudgetExceeded,
    CycleBudget,
    DeviceID,
    FailedAllocationOnNode,
    claim_ref,
)
from py_scheduler.plugins.dynamic_resources.constraints import Constraint, DistinctAttribute, MatchAttribute
from py_scheduler.plugins.dynamic_resources.pools import (
    SLICE_VIEW_NODES_MAX,
    Pool,
    Slice,
    SliceIndex,
    SliceView,
    counter_consumption,
    node_matches,
)
from py_scheduler.plugins.dynamic_resources.request_data import Candidate, Request, RequestData, Result
from py_scheduler.plugins.dynamic_resources.selector_memo import SELECTOR_MEMO, SelectorError
from py_scheduler.plugins.dynamic_resources.taints import taint_prevents_allocation

__all__ = ["Allocator"]

class _Stop(Exception):
    """``errAllocationResultMaxSizeExceeded``: backtrack more aggressively."""


# -- the allocator -------------------------------------------------------------------------------
class Allocator:
    """``structured.Allocator`` for one scheduling cycle (built in PreFilter, used by every Filter).

    Args:
        allocated: device IDs dedicated to some claim (``AllocatedState.AllocatedDevices``).
        classes: DeviceClass name -> object.
        slices: every ResourceSlice (JSON).
        cel_cache: shared ``(expression, device id) -> bool | SelectorError`` memo for this cycle.
        shared: device IDs allocated as shares of a multi-allocatable device
            (``AllocatedSharedDeviceIDs`` without the share IDs).
        capacity: device ID -> capacity name -> amount consumed by allocated shares
            (``AggregatedCapacity``).
        fractional_capacity: the DRAFractionalCapacityRange gate (on in v1.37).
        index: a long-lived :class:`SliceIndex` to take ``slices`` into (parsed again only when
            they changed); a private one without.
        budget: what this cycle may spend (:class:`CycleBudget`, the live scheduler's): CEL cost
            units on (selector, device) pairs the selector memo lacks, and Filter seconds (kept
            by the plugin in :attr:`time_left`); None: no limit.
    """

    def __init__(self, allocated: set[DeviceID], classes: Mapping[str, Obj], slices: Iterable[Mapping[str, Any]],
                 cel_cache: dict[tuple[str, DeviceID], bool | SelectorError] | None = None, *,
                 shared: set[DeviceID] | None = None,
                 capacity: Mapping[DeviceID, Mapping[str, Decimal]] | None = None,
                 fractional_capacity: bool = True, index: SliceIndex | None = None,
                 budget: CycleBudget | None = None) -> None:
        self.allocated = allocated
        self.cel_budget = budget.cel_units if budget is not None else None
        self.cel_left = self.cel_budget
        """Cost units left to this cycle's selector evaluations (None: no limit)."""
        self.time_left = budget.seconds if budget is not None else None
        """Seconds left to this cycle's Filter calls (None: no limit)."""
        self.cel_spent: dict[tuple[str, int, tuple[int, int, int]], tuple[int, RequestData, Obj | None]] = {}
        """(``class X`` / ``claim ns/c``, selector index, request key) -> (cost units it spent this cycle,
        its request, its class) (with a budget)."""
        self.shared: set[DeviceID] = shared or set()
        self.capacity: Mapping[DeviceID, Mapping[str, Decimal]] = capacity or {}
        self.fractional_capacity = fractional_capacity
        self.available_counters: dict[tuple[str, str], dict[str, dict[str, Decimal]]] = {}
        """Pool -> counter set -> counter -> what allocated devices left (``availableCounters``),
        computed once per Allocator: allocated devices do not change during a cycle."""
        self.classes = classes
        objs = slices if isinstance(slices, list) else list(slices)
        self.slices = index.update(objs) if index is not None else SliceView(objs)
        self.cel_cache: dict[tuple[str, DeviceID], bool | SelectorError] = \
            cel_cache if cel_cache is not None else {}
        self._device_vars: dict[DeviceID, Any] = {}
        self._last_specs: tuple[list[Obj], tuple[Obj, ...], tuple[str, ...]] | None = None
        """(claims list, its claims, their specs as JSON): the claims of the last allocate call;
        Filter passes one list object for every node of a cycle (``DRAState.plain``)."""
        self._classes_key = tuple(sorted((str(name), id(dc)) for name, dc in classes.items()))

    def allocate(self, node: Mapping[str, Any], claims: list[Obj],
                 deadline: float | None = None) -> list[Obj] | None:
        """``Allocator.Allocate``: one allocation result per claim (same order), or None when the
        claims do not fit on ``node``.
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
                    return hit[1]
        run = _Run(self, node, claims, deadline)
        result = run.allocate()
        if key is not None and not any(r.share_id is not None for rs in run.results for r in rs):
            if len(view.results) >= SLICE_VIEW_NODES_MAX:
                view.results.clear()
            view.results[node_name] = (key, result, tuple(self.classes.values()))
        return result

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
        self.pools: list[Pool] = []
        self.request_data: dict[tuple[int, int, int], RequestData] = {}
        self.constraints: list[list[Constraint]] = [[] for _ in claims]
        self.allocating: dict[DeviceID, set[int]] = {}
        self.results: list[list[Result]] = [[] for _ in claims]
        self.matches: dict[tuple[DeviceID, tuple[int, int, int]], bool] = {}
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
                        rd = self._validate(Request.from_sub(sub), name, (ci, ri, si))
                        self.request_data[(ci, ri, si)] = rd
                        lowest = rd.num_devices if lowest is None else min(lowest, rd.num_devices)
                    per_request = lowest or 0
                else:
                    rd = self._validate(Request.from_exact(name, req.get("exactly") or {}), None, (ci, ri, 0))
                    self.request_data[(ci, ri, 0)] = rd
                    per_request = rd.num_devices
                if per_request > ALLOCATION_RESULTS_MAX_SIZE - min_devices:
                    raise AllocationError(
                        f"claim {claim_ref(claim)}, request {name}: adding {per_request} devices exceeds the claim "
                        f"limit of {ALLOCATION_RESULTS_MAX_SIZE}, with {min_devices} already accounted for")
                min_devices += per_request
            cons: list[Constraint] = []
            for i, c in enumerate(devices.get("constraints") or []):
                reqs = [str(r) for r in (c.get("requests") or [])] if isinstance(c, Mapping) else []
                if isinstance(c, Mapping) and c.get("matchAttribute"):
                    cons.append(MatchAttribute(reqs, str(c["matchAttribute"])))
                elif isinstance(c, Mapping) and c.get("distinctAttribute"):
                    cons.append(DistinctAttribute(reqs, str(c["distinctAttribute"])))
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

    def _selected(self, ci: int, ri: int) -> RequestData:
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

    def _validate(self, request: Request, parent: str | None, key: tuple[int, int, int]) -> RequestData:
        """``validateDeviceRequest``."""
        claim = self.claims[key[0]]
        rname = request.name
        rd = RequestData(request, parent, None)
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
                            rd.all_devices.append(Candidate(did, d, sl, pool))
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
                    undo = self._allocate_device(ci, ri, si, Candidate(did, d, sl, pool), must=False)
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

    def _capacity_fits(self, claim: Obj, rd: RequestData, did: DeviceID, d: Obj) -> bool:
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

    def _pool_available_counters(self, pool: Pool) -> dict[str, dict[str, Decimal]]:
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
                    for cset, counters in counter_consumption(d):
                        have = avail.get(cset)
                        if have is None:
                            continue
                        for cname, v in counters.items():
                            if cname in have:
                                have[cname] -= v  # may go negative: no counters left
        self.a.available_counters[key] = avail
        return avail

    def _reserve_counters(self, cand: Candidate) -> bool:
        """``checkAvailableCounters``: add the device's consumption to this run's and check that no
        counter of the pool is exceeded (undone at once when one is)."""
        avail = self._pool_available_counters(cand.pool)
        consumed = self.consumed_counters.setdefault((cand.pool.driver, cand.pool.pool), {})
        for cset, counters in counter_consumption(cand.device):
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

    def _release_counters(self, cand: Candidate) -> None:
        """``deallocateCountersForDevice``."""
        consumed = self.consumed_counters.get((cand.pool.driver, cand.pool.pool), {})
        for cset, counters in counter_consumption(cand.device):
            mine = consumed.setdefault(cset, {})
            for cname, v in counters.items():
                mine[cname] = mine.get(cname, Decimal(0)) - v

    def _selectable(self, key: tuple[int, int, int], rd: RequestData, sl: Slice, did: DeviceID, d: Obj) -> bool:
        """``isSelectable``: class selectors, then request selectors, then per-device node selection."""
        mk = (did, key)
        hit = self.matches.get(mk)
        if hit is not None:
            return hit
        ok = True
        if rd.device_class is not None:
            ok = self._selectors_match(key, d, did, rd.device_class,
                                       list((rd.device_class.get("spec") or {}).get("selectors") or []), rd)
        if ok:
            ok = self._selectors_match(key, d, did, None, rd.request.selectors, rd)
        if ok and sl.per_device:
            ok = node_matches(self.node, str(d.get("nodeName") or ""), bool(d.get("allNodes")), d.get("nodeSelector"))
        self.matches[mk] = ok
        return ok

    def _selectors_match(self, key: tuple[int, int, int], d: Obj, did: DeviceID, dc: Obj | None,
                         selectors: list[Any], rd: RequestData) -> bool:
        """``selectorsMatch``: every CEL selector must match.

        Raises:
            AllocationError: ``class X: selector #i: CEL compile error: ...`` / ``... CEL runtime error``.
            CelCycleBudgetExceeded: a selector not in the memo was due when the cycle's budget was spent.
            AllocationTimeout: one was due past the deadline (compiling a long selector takes ~30 ms).
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

                if self.deadline is not None and time.monotonic() > self.deadline:
                    raise AllocationTimeout  # compiling and judging count too: checked before each one
                compiled = cel.compile_selector(expr)
                left = self.a.cel_left
                if left is not None and left <= 0 and compiled.error is None:
                    self._budget_spent(f"{who}: selector #{i} ({self._selector_field(key, rd, dc, i)})", did)
                try:
                    if compiled.error is not None:
                        raise compiled.error
                    cached = cel.device_matches(compiled, self.a.device_var(did, d))
                except (cel.CELCompileError, cel.CELRuntimeError) as exc:
                    cached = SelectorError(exc, isinstance(exc, cel.CELCompileError))
                if left is not None:
                    cost = compiled.last_cost()
                    self.a.cel_left = left - cost
                    spent = self.a.cel_spent.get((who, i, key))
                    self.a.cel_spent[(who, i, key)] = (cost + (spent[0] if spent else 0), rd, dc)
                SELECTOR_MEMO.put(expr, did[0], d, cached)
            self.a.cel_cache[ck] = cached
            if isinstance(cached, SelectorError):
                if cached.compile:
                    raise AllocationError(f"{who}: selector #{i}: CEL compile error: {cached.error}") from cached.error
                raise AllocationError(f"{who}: selector #{i} on device {'/'.join(did)}: CEL runtime error: "
                                      f"{cached.error}") from cached.error
            if not cached:
                return False
        return True

    def _budget_spent(self, due: str, did: DeviceID) -> None:
        """Raise :class:`CelCycleBudgetExceeded` naming the selector that spent most of the budget
        (``due``, the one to evaluate next, when none spent any)."""
        top, units = due, 0
        if self.a.cel_spent:  # the label of the selector that spent most, built only now
            (who, i, key), (units, rd, dc) = max(self.a.cel_spent.items(), key=lambda kv: kv[1][0])
            top = f"{who}: selector #{i} ({self._selector_field(key, rd, dc, i)})"
        raise CelCycleBudgetExceeded(
            f"{top}: the CEL selectors of this scheduling cycle spent its budget of {self.a.cel_budget} cost units "
            f"({units} by this one) before device {'/'.join(did)}; the devices judged so far are remembered and "
            f"the Pod is retried")

    @staticmethod
    def _selector_field(key: tuple[int, int, int], rd: RequestData, dc: Obj | None, i: int) -> str:
        """The API field holding selector ``i`` of the class ``dc`` or of request ``key``'s claim."""
        if dc is not None:
            return f"spec.selectors[{i}].cel.expression"
        where = f"firstAvailable[{key[2]}]" if rd.parent is not None else "exactly"
        return f"spec.devices.requests[{key[1]}].{where}.selectors[{i}].cel.expression"

    def _allocate_device(self, ci: int, ri: int, si: int, cand: Candidate, must: bool) -> Callable[[], None] | None:
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
        if taint_prevents_allocation(device, request):
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
        self.results[ci].append(Result(request.name, rd.parent, did, device, cand.slice, list(request.tolerations),
                                        admin_access=request.admin_access, share_id=share_id,
                                        consumed_capacity=consumed or None))
        n = len(self.results[ci])

        def undo() -> None:
            del self.results[ci][n - 1:]
            rollback()

        return undo

    def _node_selector(self, results: list[Result]) -> Obj | None:
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
