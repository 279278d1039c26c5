"""Older ``resource.k8s.io`` versions in snapshot files, converted to v1 as the API server converts them.

The scheduler's DRA code reads v1 objects (what the live informers watch). A dump from a 1.32-1.33
cluster, or from a tool that still writes ``v1beta1`` / ``v1beta2``, holds the same objects in an
older shape; read as v1, a v1beta1 device's ``basic:`` wrapper hid every attribute ("no such key")
and a v1beta1 request had no ``exactly`` ("unknown request type"). :func:`to_v1` gives the v1 object
the API server returns when such an object is created in its version and read back as v1:

* the version's defaults (``SetObjectDefaults_*``): a request naming a class gets
  ``allocationMode: ExactCount`` and then ``count: 1``, so does every subrequest, a toleration without
  operator gets ``Equal``; after conversion the v1 defaults of ``exactly`` (storage reads apply them);
* ``v1beta1`` -> v1 (``pkg/apis/resource/v1beta1/conversion.go``): a device's ``basic`` fields move up
  into the device; a request's main fields (``deviceClassName``, ``selectors``, ``allocationMode``,
  ``count``, ``adminAccess``, ``tolerations``, ``capacity``, ``derivedAttributes``) move into
  ``exactly`` when any is set (``hasAnyMainRequestFieldsSet``), ``name`` and ``firstAvailable`` stay;
  a slice's ``nodeName: ""`` / ``allNodes: false`` are dropped (pointers in v1);
* ``v1beta2`` has v1's shape (its ``conversion.go`` only adds field-label conversions).
* a claim's ``status`` (allocation results, config, node selector, ``reservedFor``, device status)
  has the same shape in all three versions (``zz_generated.conversion.go``'s
  ``autoConvert_v1beta1_ResourceClaimStatus_To_resource_ResourceClaimStatus`` is a plain cast): only
  the results' toleration default applies.

Empty lists and maps are dropped where the Go field is ``omitempty`` (the API server never returns
them). A device taint's ``timeAdded``, which the server sets to the creation time, is left unset:
nothing the scheduler decides depends on it. Any other version (``v1alpha3`` claims, the 1.30
``v1alpha2`` model) is refused with one line naming it (:class:`DRAVersionError`).

Upstream: ``pkg/apis/resource/v1beta1/{conversion,defaults,zz_generated.defaults}.go``,
``pkg/apis/resource/v1beta2/defaults.go``, ``pkg/apis/resource/v1/defaults.go``, the types of
``k8s.io/api/resource/{v1,v1beta1,v1beta2}``. Proven against the API server by
``tests/e2e/test_dra_versions.py`` (create in the old version, read as v1, compare).
"""

from __future__ import annotations

import copy
from typing import Any

from py_scheduler.framework.objects import Obj

__all__ = ["DRA_KINDS", "DRAVersionError", "to_v1"]


GROUP = "resource.k8s.io"
DRA_KINDS = frozenset({"ResourceSlice", "ResourceClaim", "ResourceClaimTemplate", "DeviceClass", "DeviceTaintRule"})
CONVERTED = {"v1beta1": frozenset(DRA_KINDS - {"DeviceTaintRule"}), "v1beta2": DRA_KINDS}
"""Versions :func:`to_v1` converts, with the kinds each one serves (v1beta1 has no DeviceTaintRule)."""

MAIN_REQUEST_FIELDS = ("deviceClassName", "selectors", "allocationMode", "count", "adminAccess", "tolerations",
                       "capacity", "derivedAttributes")
"""A v1beta1 ``DeviceRequest``'s fields that v1 keeps in ``exactly`` (``ExactDeviceRequest``), in v1's order."""

BASIC_DEVICE_FIELDS = ("attributes", "capacity", "consumesCounters", "nodeName", "nodeSelector", "allNodes", "taints",
                       "bindsToNode", "bindingConditions", "bindingFailureConditions", "allowMultipleAllocations",
                       "nodeAllocatableResources")
"""A v1beta1 ``BasicDevice``'s fields, which v1 has on ``Device`` itself."""


class DRAVersionError(ValueError):
    """A ``resource.k8s.io`` object in a version that is not converted; the message is one line."""


def to_v1(kind: str, obj: Obj) -> Obj:
    """``obj`` of ``kind`` as a v1 object: unchanged when it is not a DRA kind or already v1 (or has
    no ``apiVersion``); a converted deep copy for ``resource.k8s.io/v1beta1`` / ``v1beta2``.

    Raises:
        DRAVersionError: a DRA kind in another group or version.
    """
    api_version = obj.get("apiVersion")
    if kind not in DRA_KINDS or api_version in (None, "", f"{GROUP}/v1"):
        return obj
    group, _, version = str(api_version).rpartition("/")
    if group != GROUP or kind not in CONVERTED.get(version, ()):
        served = ", ".join(f"{GROUP}/{v}" for v in ("v1", *CONVERTED) if v == "v1" or kind in CONVERTED[v])
        raise DRAVersionError(f"apiVersion {api_version} is not a version of {kind} this scheduler reads "
                              f"(Kubernetes v1.37 serves {served}); convert it to {GROUP}/v1")
    out = copy.deepcopy(obj)
    out["apiVersion"] = f"{GROUP}/v1"
    spec = out.get("spec")
    if not isinstance(spec, dict):
        return out
    beta1 = version == "v1beta1"
    if kind == "ResourceSlice":
        _slice(spec, beta1)
    elif kind == "ResourceClaim":
        _claim_spec(spec, beta1)
        status = out.get("status")
        allocation = status.get("allocation") if isinstance(status, dict) else None
        devices = allocation.get("devices") if isinstance(allocation, dict) else None
        for result in _dicts(devices.get("results") if isinstance(devices, dict) else None):
            _default_tolerations(result)
    elif kind == "ResourceClaimTemplate" and isinstance(spec.get("spec"), dict):
        _claim_spec(spec["spec"], beta1)
    return out


def _dicts(value: Any) -> list[Obj]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _empty(value: Any) -> bool:
    """Dropped by ``omitempty``: null, an empty list or map (a pointer to ``""`` / ``false`` stays)."""
    return value is None or value == [] or value == {}


def _default_tolerations(holder: Obj) -> None:
    """``DeviceToleration``'s generated default: ``operator: Equal``."""
    for t in _dicts(holder.get("tolerations")):
        if not t.get("operator"):
            t["operator"] = "Equal"


def _default_count(request: Obj) -> None:
    """``SetDefaults_ExactDeviceRequest`` / ``SetDefaults_DeviceSubRequest``."""
    if not request.get("allocationMode"):
        request["allocationMode"] = "ExactCount"
    if request["allocationMode"] == "ExactCount" and not request.get("count"):
        request["count"] = 1


def _zero(value: Any) -> bool:
    """A Go zero value of a request field (``""``, ``0``, nil, empty): not sent. ``false`` is a set
    ``*bool`` (``adminAccess``)."""
    return _empty(value) or (value in ("", 0) and value is not False)


def _any_main_field(main: Obj) -> bool:
    """``hasAnyMainRequestFieldsSet``: a non-empty class name, mode or count, or any of the list /
    pointer fields present (a nil slice is absent; ``selectors: []`` is set)."""
    return bool(main.get("deviceClassName") or main.get("allocationMode") or main.get("count")
                or any(main.get(f) is not None for f in ("selectors", "adminAccess", "tolerations", "capacity",
                                                          "derivedAttributes")))


def _claim_spec(spec: Obj, beta1: bool) -> None:
    devices = spec.get("devices")
    if not isinstance(devices, dict):
        return
    for request in _dicts(devices.get("requests")):
        if beta1:
            if request.get("deviceClassName"):  # v1beta1 SetDefaults_DeviceRequest
                _default_count(request)
            main = {f: request.pop(f) for f in MAIN_REQUEST_FIELDS if f in request}
            if _any_main_field(main):
                request["exactly"] = {"deviceClassName": main.get("deviceClassName") or "",
                                      **{f: v for f, v in main.items() if f != "deviceClassName" and not _zero(v)}}
        exactly = request.get("exactly")
        if isinstance(exactly, dict):
            _default_count(exactly)
            _default_tolerations(exactly)
        for sub in _dicts(request.get("firstAvailable")):
            _default_count(sub)
            _default_tolerations(sub)


def _slice(spec: Obj, beta1: bool) -> None:
    if not beta1:
        return
    if spec.get("nodeName") == "":
        del spec["nodeName"]
    if spec.get("allNodes") is False:
        del spec["allNodes"]
    for device in _dicts(spec.get("devices")):
        basic = device.pop("basic", None)
        if isinstance(basic, dict):
            for f in BASIC_DEVICE_FIELDS:
                if f in basic and not _empty(basic[f]):
                    device[f] = basic[f]
