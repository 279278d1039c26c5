"""Device taints: DeviceTaintRules applied to the slices the allocator sees, and whether a device's
taints keep it from a request.

Upstream: ``k8s.io/dynamic-resource-allocation/resourceslice/tracker/tracker.go`` (``applyPatches``),
``resourceclaim/toleration.go`` (``ToleratesTaint``) and ``allocator_incubating.go``
(``taintPreventsAllocation``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from py_scheduler.framework.objects import Obj
from py_scheduler.plugins.dynamic_resources.request_data import Request


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


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """``resourceclaim.ToleratesTaint`` (device tolerations: Equal / Exists)."""
    if toleration.get("effect") and toleration.get("effect") != taint.get("effect"):
        return False
    if toleration.get("key") and toleration.get("key") != taint.get("key"):
        return False
    op = toleration.get("operator") or "Equal"
    if op == "Equal":
        return (toleration.get("value") or "") == (taint.get("value") or "")
    return op == "Exists"


def taint_prevents_allocation(device: Mapping[str, Any], request: Request) -> bool:
    """``taintPreventsAllocation``: an untolerated NoSchedule / NoExecute taint."""
    for taint in device.get("taints") or []:
        if not isinstance(taint, Mapping):
            continue
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not any(
                tolerates(t, taint) for t in request.tolerations):
            return True
    return False
