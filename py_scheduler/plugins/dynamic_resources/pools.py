"""The pools of devices the allocator searches on a node, and the ResourceSlices parsed once per change
of the slice objects.

Upstream: ``k8s.io/dynamic-resource-allocation@v0.37.2/structured/internal/incubating/pools_incubating.go``
(``GatherPools``, ``NodeMatches``, ``buildPool``, ``checkSlicesInPool``, the counter sets of
partitionable devices); :class:`SliceIndex` / :class:`SliceView` are py-scheduler's own (kept across
cycles, see their docstrings).
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from py_scheduler.framework import quantity as qty
from py_scheduler.framework.objects import Obj
from py_scheduler.plugins.dynamic_resources.common import AllocationError, DeviceID, log
from py_scheduler.plugins.helpers.node_selector import NodeSelector


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


# -- slices and pools --------------------------------------------------------------------------
@dataclass(slots=True)
class Slice:
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
    def parse(cls, obj: Mapping[str, Any]) -> Slice | None:
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
class Pool:
    driver: str
    pool: str
    incomplete: bool = False
    invalid: bool = False
    invalid_reason: str = ""
    slices: list[Slice] = field(default_factory=list)
    slices_not_targeting: list[Slice] = field(default_factory=list)
    counter_sets: dict[str, dict[str, Decimal]] = field(default_factory=dict)

    @property
    def pool_id(self) -> str:
        return f"{self.driver}/{self.pool}"


def gather_pools(slices_for_node: Iterable[Slice], node: Mapping[str, Any],
                 all_slices: list[Slice]) -> list[Pool]:
    """``GatherPools``: the pools with devices reachable from ``node``, sorted by (driver, pool);
    pools with binding conditions last. Outdated slices are ignored; a pool missing slices is
    ``incomplete``; duplicate device names make it ``invalid``.

    Raises:
        AllocationError: a malformed node selector on a slice or device.
    """
    pools: dict[tuple[str, str], list[Slice]] = {}
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
    result: list[Pool] = []
    with_binding: list[Pool] = []
    for (driver, pool_name), pslices in pools.items():
        want = pslices[0].count
        complete_slices: list[Slice] | None = None
        if len(pslices) != want:
            gen = pslices[0].generation
            all_for_pool: list[Slice] = []
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
                result.append(Pool(driver, pool_name, incomplete=True))
                continue
            complete_slices = all_for_pool
        p = build_pool(driver, pool_name, pslices, complete_slices)
        if any(d.get("bindingConditions") is not None for s in p.slices for d in s.devices):
            with_binding.append(p)
        else:
            result.append(p)
    result.sort(key=lambda p: (p.driver, p.pool))
    with_binding.sort(key=lambda p: (p.driver, p.pool))
    return result + with_binding


def build_pool(driver: str, pool: str, slices: list[Slice], all_for_pool: list[Slice] | None) -> Pool:
    """``buildPool``: device slices sorted by name; slices with ``sharedCounters`` are counter sets,
    not devices; with ``all_for_pool`` (the pool did not lie wholly on the node) the pool's other
    slices count too: their counter sets, and their devices for the counters allocated devices
    consume. Duplicate device names, duplicate counter sets and devices consuming unknown counters
    make the pool invalid (``InvalidReason`` as upstream)."""
    ordered = sorted(slices, key=lambda s: s.name)
    device_slices = [s for s in ordered if not s.shared_counters]
    counter_slices = [s for s in ordered if s.shared_counters]
    not_targeting: list[Slice] = []
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
                return Pool(driver, pool, invalid=True, invalid_reason=f"duplicate device name {n}")
            seen.add(n)
    counter_sets: dict[str, dict[str, Decimal]] = {}
    for s in counter_slices:
        for cs in s.counter_sets:
            cname = str(cs.get("name") or "")
            if cname in counter_sets:
                return Pool(driver, pool, invalid=True, invalid_reason=f"duplicate counter set name {cname}")
            counter_sets[cname] = parse_counters(cs.get("counters"))
    for group in (device_slices, not_targeting):
        reason = validate_counter_consumption(counter_sets, group)
        if reason:
            return Pool(driver, pool, invalid=True, invalid_reason=reason)
    return Pool(driver, pool, slices=device_slices, slices_not_targeting=not_targeting, counter_sets=counter_sets)


def parse_counters(raw: object) -> dict[str, Decimal]:
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


def validate_counter_consumption(counter_sets: Mapping[str, Mapping[str, Decimal]], slices: list[Slice]) -> str:
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


def counter_consumption(device: Mapping[str, Any]) -> list[tuple[str, dict[str, Decimal]]]:
    """A device's ``consumesCounters`` as (counter set, name -> value)."""
    return [(str(use.get("counterSet") or ""), parse_counters(use.get("counters")))
            for use in device.get("consumesCounters") or [] if isinstance(use, Mapping)]


# -- slices parsed once per slice-store change -------------------------------------------------
class SliceIndex:
    """The ResourceSlices as the allocator reads them (parsed, by node), kept across scheduling cycles
    and rebuilt only when the slice objects change; plus each node's pools (``GatherPools``) while
    nothing changed.

    Inputs: the list of ResourceSlice JSON dicts handed to :meth:`update` (after
    :func:`apply_taint_rules`). What it depends on: the informers replace a slice with a new dict on
    every update and never change one in place (the same assumption as :class:`.selector_memo.SelectorMemo`), so a
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


SLICE_VIEW_NODES_MAX = 20_000
"""Node names a :class:`SliceView`'s per-node memos (pools, device ids, allocation results) hold at
most; past it they start over (node churn under an unchanged slice set would otherwise add names
without end). 5000 nodes fit four times over."""


class SliceView:
    """One generation of :class:`SliceIndex`: the parsed slices, by node, and the pools memo."""

    def __init__(self, slices: Iterable[Mapping[str, Any]]) -> None:
        self.all_slices: list[Slice] = []
        for obj in slices:
            sl = Slice.parse(obj)
            if sl is None:
                log.warning("ignoring malformed ResourceSlice %s", (obj.get("metadata") or {}).get("name"))
                continue
            self.all_slices.append(sl)
        self.on_node: dict[str, list[Slice]] = {}
        self.shared_slices: list[Slice] = []
        for sl in self.all_slices:
            if sl.node_name:
                self.on_node.setdefault(sl.node_name, []).append(sl)
            else:
                self.shared_slices.append(sl)
        self._pools: dict[str, list[Pool]] = {}
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
            if len(self._ids) >= SLICE_VIEW_NODES_MAX:
                self._ids.clear()
            self._ids[node_name] = hit
        return hit

    def pools(self, node: Mapping[str, Any], node_name: str) -> list[Pool]:
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
            if len(self._pools) >= SLICE_VIEW_NODES_MAX:
                self._pools.clear()
            self._pools[node_name] = hit
        return hit
