"""GPUFilter's ``EventsToRegister`` and queueing hints, kept apart from its Filter code.

Not an upstream plugin: the shape follows ``pkg/scheduler/framework/plugins/noderesources/fit.go``
(``EventsToRegister``, ``isSchedulableAfterPodEvent``, ``isSchedulableAfterNodeChange``). Without
``events_to_register`` the queue offered GPUFilter every event, so a Pod it rejected was retried
after any binding or Node change anywhere.

What can make a Pod GPUFilter rejected fit (GPUFilter reads a Node's labels, annotations and GPU
allocatable, and the assigned Pods' GPU requests and ``<prefix>gpu-indices`` annotation):

* ``Node/Add``: a new node offering some ``<domain>/...`` allocatable (``nvidia.com/gpu``,
  ``nvidia.com/mig-<profile>``, ...). Skip a node with none: it offers no GPU unit.
* ``Node/UpdateNodeLabel | UpdateNodeAllocatable | UpdateNodeAnnotation``: GFD / cloud labels,
  MIG / time-slicing config, NVLink groups, used-memory annotations, GPU allocatable. Skip only
  when the update changed neither labels, annotations nor any ``<domain>/`` allocatable, or the
  new node has no ``<domain>/`` allocatable.
* ``AssignedPod/Delete``: frees its GPUs. Skip when the deleted Pod holds no GPU (no
  ``<domain>/`` request and no ``<prefix>`` annotation).
* ``AssignedPod/Update`` (every update, since an annotation change is a general ``Update``):
  Queue when a Pod holding GPUs (before or after) changed its GPU requests, its ``<prefix>``
  annotations, its phase or its deletion timestamp; Skip otherwise.
* ``TargetPod/Update``: the rejected Pod's own GPU annotations or requests changed (a fixed
  malformed annotation, a smaller count); Skip when neither changed.

Every hint answers Queue for anything it cannot read: Queue is a superset (a spurious retry costs
one cycle), Skip is returned only when the change certainly cannot make the Pod fit, so a Pod is
never stranded.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from py_scheduler.framework.events import ActionType, ClusterEvent, ClusterEventWithHint, QueueingHint
from py_scheduler.framework.events import Resource as EventResource
from py_scheduler.plugins.gpu.model import GPUKeys

__all__ = [
    "gpu_after_assigned_pod_delete",
    "gpu_after_assigned_pod_update",
    "gpu_after_node_change",
    "gpu_after_target_pod_update",
    "gpu_events_to_register",
]

_QUEUE = QueueingHint.QUEUE
_SKIP = QueueingHint.QUEUE_SKIP


def _domain(keys: GPUKeys) -> str:
    """``nvidia.com/``: the prefix of every GPU extended resource (whole, shared, MIG)."""
    return keys.resource_name.split("/", 1)[0] + "/"


def _meta_map(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """``metadata.<key>`` as a mapping.

    Raises:
        ValueError: ``metadata`` or ``metadata.<key>`` is present and not a mapping.
    """
    meta = obj.get("metadata") or {}
    if not isinstance(meta, Mapping):
        raise ValueError("metadata is not a mapping")
    got = meta.get(key) or {}
    if not isinstance(got, Mapping):
        raise ValueError(f"metadata.{key} is not a mapping")
    return got


def _gpu_allocatable(node: Mapping[str, Any], domain: str) -> dict[str, Any]:
    """The node's ``status.allocatable`` entries under ``domain`` (raw values).

    Raises:
        ValueError: ``status`` or ``status.allocatable`` is not a mapping.
    """
    status = node.get("status") or {}
    if not isinstance(status, Mapping):
        raise ValueError("status is not a mapping")
    alloc = status.get("allocatable") or {}
    if not isinstance(alloc, Mapping):
        raise ValueError("status.allocatable is not a mapping")
    return {k: v for k, v in alloc.items() if isinstance(k, str) and k.startswith(domain)}


def gpu_after_node_change(keys: GPUKeys, pod: dict[str, Any], old: Any, new: Any) -> QueueingHint:
    """Node added (``old`` None) or updated: Skip when ``new`` has no ``<domain>/`` allocatable (it
    offers no GPU unit, whatever its labels), or (an update) when labels, annotations and the
    ``<domain>/`` allocatable are all unchanged; Queue otherwise, and for a malformed Node."""
    if not isinstance(new, Mapping) or (old is not None and not isinstance(old, Mapping)):
        return _QUEUE
    domain = _domain(keys)
    try:
        new_alloc = _gpu_allocatable(new, domain)
        if not new_alloc:
            return _SKIP
        if old is None:
            return _QUEUE
        if (_gpu_allocatable(old, domain) == new_alloc
                and _meta_map(old, "labels") == _meta_map(new, "labels")
                and _meta_map(old, "annotations") == _meta_map(new, "annotations")):
            return _SKIP
    except ValueError:
        return _QUEUE
    return _QUEUE


def _gpu_footprint(pod: Mapping[str, Any], keys: GPUKeys) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the Pod's ``<domain>/`` requests and limits as written, keyed ``(where, name)``; its
    ``<prefix>`` annotations). Read raw, requests and limits both (an extended resource may be given
    as a limit only, which the API server copies to requests), containers, init containers and
    pod-level ``spec.resources``; a zero quantity still counts (unsure: Queue).

    Raises:
        Exception: a malformed Pod (``ValueError``, ``AttributeError``, ...).
    """
    domain = _domain(keys)
    spec = pod.get("spec") or {}
    reqs: dict[Any, Any] = {}
    places: list[tuple[str, Any]] = [("pod", spec.get("resources"))]
    for field in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(field) or []):
            places.append((f"{field}[{i}]", (c or {}).get("resources")))
    for where, res in places:
        for kind in ("requests", "limits"):
            for k, v in ((res or {}).get(kind) or {}).items():
                if isinstance(k, str) and k.startswith(domain):
                    reqs[(where, kind, k)] = v
    ann = {k: v for k, v in _meta_map(pod, "annotations").items()
           if isinstance(k, str) and k.startswith(keys.prefix)}
    return reqs, ann


def gpu_after_assigned_pod_delete(keys: GPUKeys, pod: dict[str, Any], old: Any, new: Any) -> QueueingHint:
    """Assigned Pod deleted (``old`` the Pod): Skip when it holds no GPU (no ``<domain>/`` request,
    no ``<prefix>`` annotation), Queue otherwise and for a malformed Pod."""
    if not isinstance(old, Mapping):
        return _QUEUE
    try:
        reqs, ann = _gpu_footprint(old, keys)
    except Exception:  # malformed Pod: Queue never strands
        return _QUEUE
    return _QUEUE if reqs or ann else _SKIP


def _lifecycle(pod: Mapping[str, Any]) -> tuple[Any, Any]:
    status = pod.get("status") or {}
    meta = pod.get("metadata") or {}
    return (status.get("phase") if isinstance(status, Mapping) else status,
            meta.get("deletionTimestamp") if isinstance(meta, Mapping) else meta)


def gpu_after_assigned_pod_update(keys: GPUKeys, pod: dict[str, Any], old: Any, new: Any) -> QueueingHint:
    """Assigned Pod updated: Skip when it holds no GPU before nor after, or when its GPU requests,
    ``<prefix>`` annotations, phase and deletion timestamp are unchanged; Queue otherwise and for a
    malformed Pod."""
    if not isinstance(old, Mapping) or not isinstance(new, Mapping):
        return _QUEUE
    try:
        o, n = _gpu_footprint(old, keys), _gpu_footprint(new, keys)
    except Exception:  # malformed Pod: Queue never strands
        return _QUEUE
    if not (o[0] or o[1] or n[0] or n[1]):
        return _SKIP
    if o == n and _lifecycle(old) == _lifecycle(new):
        return _SKIP
    return _QUEUE


def gpu_after_target_pod_update(keys: GPUKeys, pod: dict[str, Any], old: Any, new: Any) -> QueueingHint:
    """The rejected Pod itself updated: Queue when its ``<domain>/`` requests or ``<prefix>``
    annotations changed (or it cannot be read), Skip otherwise."""
    if not isinstance(old, Mapping) or not isinstance(new, Mapping):
        return _QUEUE
    try:
        return _SKIP if _gpu_footprint(old, keys) == _gpu_footprint(new, keys) else _QUEUE
    except Exception:  # malformed Pod: Queue never strands
        return _QUEUE


def gpu_events_to_register(keys: GPUKeys) -> list[ClusterEventWithHint]:
    """GPUFilter's ``EventsToRegister`` (module docstring), hints bound to ``keys``."""
    def node(pod: dict[str, Any], old: Any, new: Any) -> QueueingHint:
        return gpu_after_node_change(keys, pod, old, new)

    def deleted(pod: dict[str, Any], old: Any, new: Any) -> QueueingHint:
        return gpu_after_assigned_pod_delete(keys, pod, old, new)

    def updated(pod: dict[str, Any], old: Any, new: Any) -> QueueingHint:
        return gpu_after_assigned_pod_update(keys, pod, old, new)

    def target(pod: dict[str, Any], old: Any, new: Any) -> QueueingHint:
        return gpu_after_target_pod_update(keys, pod, old, new)

    node_actions = (ActionType.ADD | ActionType.UPDATE_NODE_LABEL | ActionType.UPDATE_NODE_ALLOCATABLE
                    | ActionType.UPDATE_NODE_ANNOTATION)
    return [
        ClusterEventWithHint(ClusterEvent(EventResource.NODE, node_actions), node),
        ClusterEventWithHint(ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE), deleted),
        ClusterEventWithHint(ClusterEvent(EventResource.ASSIGNED_POD, ActionType.UPDATE), updated),
        ClusterEventWithHint(ClusterEvent(EventResource.TARGET_POD, ActionType.UPDATE), target),
    ]
