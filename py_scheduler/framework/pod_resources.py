"""A Pod's effective resource requests, parsed from its JSON as exact Decimals.

Upstream: ``staging/src/k8s.io/component-helpers/resource/helpers.go`` (``PodRequests``: containers, init
containers, restartable (sidecar) init containers, pod-level requests, overhead; ``IsPodLevelRequestsSet``,
``IsPodResizeInfeasible``) and the API server's quantity checks a snapshot file can skip.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

from py_scheduler.framework import quantity
from py_scheduler.framework.errors import PodParseError
from py_scheduler.framework.memo import ParseMemo
from py_scheduler.framework.objects import Obj

DEFAULT_MILLI_CPU_REQUEST = 100
"""``schedutil.DefaultMilliCPURequest``: milli-CPU assumed for a container with no CPU request."""
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024
"""``schedutil.DefaultMemoryRequest``: bytes assumed for a container with no memory request."""


def parse_resource_list(rl: Mapping[str, object] | None, where: str) -> dict[str, Decimal]:
    """Parse a ResourceList into exact Decimals.

    Raises:
        PodParseError: naming ``where.<resource>`` and the raw value.
    """
    out: dict[str, Decimal] = {}
    if not rl:
        return out
    if not isinstance(rl, Mapping):
        raise PodParseError(where, rl, "expected a map of resource name to quantity")
    for name, raw in rl.items():
        try:
            out[str(name)] = quantity.parse(raw)
        except quantity.QuantityError as exc:
            raise PodParseError(f"{where}.{name}", raw, "not a valid quantity") from exc
    return out


def _parse_memo(rl: Mapping[str, object] | None, where: str, memo: ParseMemo | None) -> dict[str, Decimal]:
    """:func:`parse_resource_list` through ``memo`` (:data:`~py_scheduler.framework.memo.ParseMemo`).
    Raises as :func:`parse_resource_list`."""
    if memo is None or not rl:
        return parse_resource_list(rl, where)
    hit: dict[str, Decimal] | None = memo.find(rl)
    return hit if hit is not None else memo.put(rl, parse_resource_list(rl, where))


def _add(into: dict[str, Decimal], rl: Mapping[str, Decimal]) -> None:
    for k, v in rl.items():
        into[k] = into.get(k, Decimal(0)) + v


def _max(into: dict[str, Decimal], rl: Mapping[str, Decimal]) -> None:
    for k, v in rl.items():
        if k not in into or v > into[k]:
            into[k] = v


def _with_defaults(rl: dict[str, Decimal], defaults: Mapping[str, Decimal]) -> dict[str, Decimal]:
    if not defaults:
        return rl
    out = dict(rl)
    for k, v in defaults.items():
        if k not in rl:
            out[k] = v
    return out


def is_pod_level_requests_set(spec: Mapping[str, Any]) -> bool:
    """``resourcehelper.IsPodLevelRequestsSet``: ``spec.resources.requests`` names cpu, memory or a
    ``hugepages-*`` resource (the resources pod-level requests apply to)."""
    res = spec.get("resources")
    reqs = res.get("requests") if isinstance(res, Mapping) else None
    return isinstance(reqs, Mapping) and any(_pod_level_resource(str(k)) for k in reqs)


def _pod_level_resource(name: str) -> bool:
    return name in ("cpu", "memory") or name.startswith("hugepages-")


def pod_resize_infeasible(pod: Obj) -> bool:
    """``resourcehelper.IsPodResizeInfeasible``: the first ``PodResizePending`` condition has reason
    ``Infeasible``."""
    status = pod.get("status")
    conds = status.get("conditions") if isinstance(status, Mapping) else None
    for c in conds if isinstance(conds, list) else []:
        if isinstance(c, Mapping) and c.get("type") == "PodResizePending":
            return bool(c.get("reason") == "Infeasible")
    return False


def is_extended_resource_name(name: str) -> bool:
    """``IsExtendedResourceName``: a ``vendor/name`` resource outside the ``kubernetes.io/`` domain
    and not a ``requests.`` quota name (``nvidia.com/gpu``)."""
    return "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")


def validate_pod_resources(spec: Obj, memo: ParseMemo | None = None) -> None:
    """The API server's resource checks a snapshot file can skip (``ValidateResourceRequirements``,
    ``validateResourceQuantityValue``): every request, limit and overhead quantity non-negative,
    extended resources whole numbers.

    ``memo``: shares the parsed quantities with :func:`pod_requests` (see :data:`ParseMemo`).

    Raises:
        PodParseError: naming the field, e.g. ``spec.containers[0].resources.limits.nvidia.com/gpu``
        with ``must be an integer``.
    """
    lists: list[tuple[object, str]] = []
    for key in ("containers", "initContainers"):
        items = spec.get(key)
        if items is not None and not isinstance(items, list):  # a string would iterate as characters
            raise PodParseError(f"spec.{key}", items, "expected a list of containers")
        for i, c in enumerate(items or []):
            res = c.get("resources") if isinstance(c, dict) else None
            if isinstance(res, dict):
                lists += [(res.get(k), f"spec.{key}[{i}].resources.{k}") for k in ("requests", "limits")]
    pod_res = spec.get("resources")
    if isinstance(pod_res, dict):
        lists += [(pod_res.get(k), f"spec.resources.{k}") for k in ("requests", "limits")]
    lists.append((spec.get("overhead"), "spec.overhead"))
    for rl, where in lists:
        if not isinstance(rl, Mapping):
            continue
        for name, q in _parse_memo(rl, where, memo).items():
            if q < 0:
                raise PodParseError(f"{where}.{name}", rl[name], "must be greater than or equal to 0")
            if is_extended_resource_name(name) and q != q.to_integral_value():
                raise PodParseError(f"{where}.{name}", rl[name], "must be an integer")


def pod_requests(pod: Obj, non_missing: Mapping[str, Decimal] | None = None,
                 memo: ParseMemo | None = None) -> dict[str, Decimal]:
    """Effective requests of a Pod (``resourcehelper.PodRequests`` with the options kube-scheduler
    v1.37 passes: ``UseStatusResources``, ``InPlacePodLevelResourcesVerticalScalingEnabled``, pod-level
    resources on), as exact Decimals.

    Each aggregate is ``sum(containers)`` plus restartable (sidecar) init containers, ``max``-ed with
    each init container's need (its requests plus the sidecars started before it);
    ``non_missing`` fills a resource a container lacks (the 100m / 200Mi scoring defaults). Three
    aggregates are taken (``AggregateContainerRequests``): the spec's requests, the *allocated* ones
    (a container status's ``allocatedResources``, else the spec) and the *actuated* ones (a container
    status's ``resources.requests``, else ``allocatedResources``, else the spec); when the Pod status
    carries pod-level ``allocatedResources`` and ``resources.requests`` those two replace the
    container aggregates. The result is their per-resource maximum, without the spec when a
    ``PodResizePending`` condition says ``Infeasible`` (then a container without status counts
    nothing). Pod-level requests (``spec.resources.requests``: cpu / memory / hugepages) then
    override, themselves max-ed with the pod-level status when ``status.resources`` is set; finally
    ``spec.overhead`` is added. ``memo`` shares the containers' parsed spec requests between calls
    on the same Pod (:data:`ParseMemo`).

    Raises:
        PodParseError: a malformed quantity or list, naming the field.
    """
    spec = pod.get("spec") or {}
    if not isinstance(spec, dict):
        raise PodParseError("spec", spec, "expected an object")
    for key in ("containers", "initContainers"):
        items = spec.get(key)
        if items is not None and (not isinstance(items, list) or not all(isinstance(c, dict) for c in items)):
            raise PodParseError(f"spec.{key}", items, "expected a list of containers")
    for key in ("resources", "overhead"):
        if spec.get(key) is not None and not isinstance(spec.get(key), dict):
            raise PodParseError(f"spec.{key}", spec.get(key), "expected an object")
    status = pod.get("status") or {}
    if not isinstance(status, dict):
        status = {}
    statuses: dict[str, Obj] = {}
    for key in ("initContainerStatuses", "containerStatuses"):  # containerStatuses win (findContainerStatus)
        listed = status.get(key) or []
        if not isinstance(listed, list):
            raise PodParseError(f"status.{key}", listed, "expected a list of container statuses")
        for cs in listed:
            if isinstance(cs, dict) and "name" in cs:
                statuses[str(cs["name"])] = cs
    infeasible = pod_resize_infeasible(pod)
    defaults = non_missing or {}
    containers: list[tuple[Obj, str, bool]] = [
        (c, f"spec.containers[{i}]", False) for i, c in enumerate(spec.get("containers") or [])]
    containers += [(c, f"spec.initContainers[{i}]", True) for i, c in enumerate(spec.get("initContainers") or [])]

    def spec_requests(c: Obj, where: str) -> dict[str, Decimal] | None:
        res = c.get("resources") or {}
        if not isinstance(res, dict):
            raise PodParseError(f"{where}.resources", res, "expected an object")
        return _parse_memo(res.get("requests"), f"{where}.resources.requests", memo)

    def allocated_requests(c: Obj, where: str) -> dict[str, Decimal] | None:
        cs = statuses.get(str(c.get("name")))
        if cs is not None and cs.get("allocatedResources") is not None:
            return parse_resource_list(cs["allocatedResources"], f"status.containerStatuses[{c.get('name')}]"
                                                                 ".allocatedResources")
        return None if infeasible else spec_requests(c, where)

    def actuated_requests(c: Obj, where: str) -> dict[str, Decimal] | None:
        cs = statuses.get(str(c.get("name")))
        res = cs.get("resources") if cs is not None else None
        if isinstance(res, dict) and res.get("requests") is not None:
            return parse_resource_list(res["requests"], f"status.containerStatuses[{c.get('name')}]"
                                                        ".resources.requests")
        return allocated_requests(c, where)

    def aggregate(get: Callable[[Obj, str], dict[str, Decimal] | None]) -> dict[str, Decimal]:
        result: dict[str, Decimal] = {}
        sidecars: dict[str, Decimal] = {}
        init_max: dict[str, Decimal] = {}
        for c, where, init in containers:
            reqs = _with_defaults(get(c, where) or {}, defaults)
            if not init:
                _add(result, reqs)
            elif c.get("restartPolicy") == "Always":
                _add(result, reqs)
                _add(sidecars, reqs)
                _max(init_max, sidecars)
            else:
                use = dict(reqs)
                _add(use, sidecars)
                _max(init_max, use)
        _max(result, init_max)
        return result

    pod_alloc, pod_res = status.get("allocatedResources"), status.get("resources")
    pod_res_reqs = pod_res.get("requests") if isinstance(pod_res, dict) else None
    if pod_alloc is not None and pod_res_reqs is not None:
        allocated = parse_resource_list(pod_alloc, "status.allocatedResources")
        actuated = parse_resource_list(pod_res_reqs, "status.resources.requests")
    elif not statuses and not infeasible:
        allocated = actuated = {}  # no container status: both aggregates are the spec's (below)
    else:
        allocated, actuated = aggregate(allocated_requests), aggregate(actuated_requests)
    result = {} if infeasible else aggregate(spec_requests)
    _max(result, actuated)
    _max(result, allocated)

    if is_pod_level_requests_set(spec):
        effective = parse_resource_list(spec["resources"]["requests"], "spec.resources.requests")
        if isinstance(pod_res, dict):
            effective = {} if infeasible else effective
            _max(effective, parse_resource_list(pod_res_reqs, "status.resources.requests"))
            _max(effective, parse_resource_list(pod_alloc, "status.allocatedResources"))
        for k, v in effective.items():
            if _pod_level_resource(k):
                result[k] = v
    _add(result, parse_resource_list(spec.get("overhead"), "spec.overhead"))
    return result


def requests_key(spec: Obj, status: object) -> str | None:
    """The memo key of a Pod's resource inputs: ``repr`` of each container's and init container's
    ``(name, resources, restartPolicy)`` (the name finds its status, the policy tells a sidecar),
    ``spec.resources``, ``spec.overhead`` and :func:`resize_status_inputs` of the status (``()``
    when the status has none of those fields). ``repr`` distinguishes what JSON and YAML decode to
    (``1`` / ``1.0`` / ``"1"`` / ``True``, ``nan``), so equal keys are equal inputs. None (no memo)
    for container lists that are not lists of plain dicts (the parse then reports them)."""
    parts: list[Any] = []
    for key in ("containers", "initContainers"):
        items = spec.get(key)
        if items is None:
            parts.append(None)
            continue
        if type(items) is not list:
            return None
        row = []
        for c in items:
            if type(c) is not dict:
                return None
            row.append((c.get("name"), c.get("resources"), c.get("restartPolicy")))
        parts.append(row)
    st = resize_status_inputs(status) if type(status) is dict and any(k in status for k in STATUS_KEYS) else ()
    return repr((parts, spec.get("resources"), spec.get("overhead"), st))


STATUS_KEYS = ("allocatedResources", "resources", "initContainerStatuses", "containerStatuses", "conditions")
"""The Pod status fields :func:`pod_requests` reads (through :func:`resize_status_inputs`)."""


def resize_status_inputs(status: object) -> tuple[Any, ...]:
    """The parts of a Pod status :func:`pod_requests` reads: per container name (container statuses
    winning over init ones, as they are looked up) its ``allocatedResources`` and ``resources``,
    leaving out statuses with neither (they count as no status: the spec's requests apply); the
    pod-level ``allocatedResources`` / ``resources``; whether a ``PodResizePending`` condition says
    ``Infeasible``."""
    if not isinstance(status, dict):
        status = {}
    containers: dict[str, tuple[Any, Any]] = {}
    for key in ("initContainerStatuses", "containerStatuses"):
        listed = status.get(key) or []
        if not isinstance(listed, list):
            return (key, listed)  # malformed (PodInfo raises on it): equal to nothing a parse succeeded on
        for cs in listed:
            if isinstance(cs, dict) and "name" in cs:
                containers[str(cs["name"])] = (cs.get("allocatedResources"), cs.get("resources"))
    return ({k: v for k, v in containers.items() if v != (None, None)}, status.get("allocatedResources"),
            status.get("resources"), pod_resize_infeasible({"status": status}))
