"""What the scheduler's DRA manager tracks for the plugin: the claims allocated in flight (Reserve
done, the allocation not yet seen in the informer's claim) and the devices every allocation takes.

Upstream: ``pkg/scheduler/framework/plugins/dynamicresources/dra_manager.go``
(``SignalClaimPendingAllocation`` / ``RemoveClaimPendingAllocation``, ``GatherAllocatedState``,
``foreachAllocatedDevice``) and ``schedulerapi.AllocatedState``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from py_scheduler.framework import quantity as qty
from py_scheduler.framework.lister import ClusterObjectsLister
from py_scheduler.plugins.dynamic_resources.claims import allocation_of, claim_meta, claim_uid, results_of
from py_scheduler.plugins.dynamic_resources.common import DeviceID, claim_ref
from py_scheduler.plugins.dynamic_resources.state import SPECIAL_CLAIM_NAME

InFlight = dict[str, list[Any]]
"""Claim UID -> ``[claim with status.allocation, number of Pods sharing it, resourceVersion PreBind
wrote it at or None]``: Reserve's allocation until the informer shows its write (the assumed claim of
upstream's ``AssumeClaimAfterAPICall``)."""


@dataclass(slots=True)
class AllocatedState:
    """``schedulerapi.AllocatedState``: devices dedicated to claims, devices with allocated shares,
    and the capacity those shares consume (device -> capacity name -> amount)."""

    dedicated: set[DeviceID] = field(default_factory=set)
    shared: set[DeviceID] = field(default_factory=set)
    capacity: dict[DeviceID, dict[str, Decimal]] = field(default_factory=dict)


def gather_allocated_state(objects: ClusterObjectsLister | None, in_flight: InFlight) -> AllocatedState:
    """``GatherAllocatedState`` (``foreachAllocatedDevice``): over every claim's ``status.allocation``
    plus the ``in_flight`` allocations, admin-access results do not count; results with a
    ``shareID`` are shares of a multi-allocatable device (their ``consumedCapacity`` summed per
    device); the rest are dedicated devices."""
    st = AllocatedState()
    claims = [c for c in (objects.list("ResourceClaim") if objects is not None else []) if isinstance(c, dict)]
    claims += [entry[0] for entry in in_flight.values()]
    for claim in claims:
        for r in results_of(allocation_of(claim)):
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


def mark_written(in_flight: InFlight, stored: Any) -> None:
    """PreBind wrote the allocation: the in-flight entry of ``stored`` (the claim as the API returned
    it) becomes that claim at its resourceVersion, kept until the informer reaches that version."""
    entry = in_flight.get(claim_uid(stored))
    if entry is not None:
        entry[0] = stored
        entry[2] = str(claim_meta(stored).get("resourceVersion") or "")


def _caught_up(current: Any, written: str) -> bool:
    """Whether the informer's claim is at or past the version PreBind wrote (resourceVersions compare
    as integers, as upstream's assume cache compares them; another form counts as caught up)."""
    try:
        return int(str(claim_meta(current).get("resourceVersion") or "")) >= int(written)
    except ValueError:
        return True


def forget_stale_in_flight(objects: ClusterObjectsLister | None, in_flight: InFlight) -> None:
    """Drop in-flight entries whose claim is gone (or recreated), now shows an allocation (written by
    someone), or, once PreBind wrote it, is at or past that write in the informer: from then on the
    informer's claim says whether the devices are taken (a claim deallocated after its Pod went frees
    them; upstream's assume cache gives way to the informer's newer object the same way)."""
    for uid, entry in list(in_flight.items()):
        claim, written = entry[0], entry[2]
        if claim_meta(claim).get("name") == SPECIAL_CLAIM_NAME:
            continue
        cur = objects.get("ResourceClaim", claim_ref(claim)) if objects is not None else None
        if (cur is None or claim_uid(cur) != uid or allocation_of(cur) is not None
                or (written is not None and _caught_up(cur, written))):
            del in_flight[uid]
