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
"""Claim UID -> ``[claim with status.allocation, number of Pods sharing it]``."""


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


def forget_stale_in_flight(objects: ClusterObjectsLister | None, in_flight: InFlight) -> None:
    """Drop in-flight entries whose claim now shows an allocation (written by someone) or is gone."""
    for uid, (claim, _n) in list(in_flight.items()):
        if claim_meta(claim).get("name") == SPECIAL_CLAIM_NAME:
            continue
        cur = objects.get("ResourceClaim", claim_ref(claim)) if objects is not None else None
        if cur is None or (claim_uid(cur) == uid and allocation_of(cur) is not None):
            del in_flight[uid]
