"""Cluster events that move unschedulable Pods back into the scheduling queue.

Upstream: ``staging/src/k8s.io/kube-scheduler/framework/types.go`` (``ActionType`` bit flags,
``EventResource``, ``ClusterEvent``, ``QueueingHint``), ``pkg/scheduler/framework/types.go``
(``MatchClusterEvents``, ``ClusterEventIsWildCard``, ``UnrollWildCardResource``, ``UnrollPodEvent``)
and ``pkg/scheduler/framework/events.go`` (``PodSchedulingPropertiesChange``,
``NodeSchedulingPropertiesChange``: which specific update an object change is).

A plugin that rejects Pods (PreEnqueue, PreFilter, Filter, Reserve) may declare the events that
could make those Pods schedulable by implementing the optional :class:`EnqueueExtensions` method
``events_to_register() -> list[ClusterEventWithHint]``; a plugin that does not is registered for
every event (upstream's ``defaultEnqueueExtension``), which is always correct, only less frugal.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from enum import IntEnum, IntFlag
from typing import Any, Protocol, runtime_checkable

from py_scheduler.framework import objects as ob
from py_scheduler.framework import quantity
from py_scheduler.framework.errors import PodParseError
from py_scheduler.framework.objects import Obj
from py_scheduler.framework.pod_resources import pod_requests

__all__ = [
    "ActionType",
    "ClusterEvent",
    "ClusterEventWithHint",
    "EnqueueExtensions",
    "QueueingHint",
    "QueueingHintFn",
    "Resource",
    "is_wildcard",
    "match_any_cluster_event",
    "match_cluster_events",
    "node_scheduling_properties_change",
    "pod_scheduling_properties_change",
    "unroll_pod_event",
    "unroll_wildcard_resource",
]


class ActionType(IntFlag):
    """``fwk.ActionType``: one kind of change; specific updates are single bits, ``UPDATE`` their union."""

    ADD = 1 << 0
    DELETE = 1 << 1
    UPDATE_NODE_ALLOCATABLE = 1 << 2
    UPDATE_NODE_LABEL = 1 << 3
    UPDATE_NODE_TAINT = 1 << 4
    UPDATE_NODE_CONDITION = 1 << 5
    UPDATE_NODE_ANNOTATION = 1 << 6
    UPDATE_NODE_DECLARED_FEATURE = 1 << 7
    UPDATE_NODE_PREEMPTION_POLICY = 1 << 8
    UPDATE_POD_LABEL = 1 << 9
    UPDATE_POD_SCALE_DOWN = 1 << 10
    UPDATE_POD_SCALE_UP = 1 << 11
    UPDATE_POD_TOLERATION = 1 << 12
    UPDATE_POD_SCHEDULING_GATES_ELIMINATED = 1 << 13
    UPDATE_POD_GENERATED_RESOURCE_CLAIM = 1 << 14
    ALL = (1 << 15) - 1
    UPDATE = ALL & ~(ADD | DELETE)

    def label(self) -> str:
        """Upstream's ``ActionType.String()`` (``Add``, ``UpdateNodeLabel``, ``Update``, ``All``)."""
        return _ACTION_NAMES.get(int(self), "")


_ACTION_NAMES: dict[int, str] = {
    ActionType.ADD: "Add", ActionType.DELETE: "Delete",
    ActionType.UPDATE_NODE_ALLOCATABLE: "UpdateNodeAllocatable", ActionType.UPDATE_NODE_LABEL: "UpdateNodeLabel",
    ActionType.UPDATE_NODE_TAINT: "UpdateNodeTaint", ActionType.UPDATE_NODE_CONDITION: "UpdateNodeCondition",
    ActionType.UPDATE_NODE_ANNOTATION: "UpdateNodeAnnotation",
    ActionType.UPDATE_NODE_DECLARED_FEATURE: "UpdateNodeDeclaredFeature",
    ActionType.UPDATE_NODE_PREEMPTION_POLICY: "UpdateNodePreemptionPolicy",
    ActionType.UPDATE_POD_LABEL: "UpdatePodLabel", ActionType.UPDATE_POD_SCALE_DOWN: "UpdatePodScaleDown",
    ActionType.UPDATE_POD_SCALE_UP: "UpdatePodScaleUp", ActionType.UPDATE_POD_TOLERATION: "UpdatePodToleration",
    ActionType.UPDATE_POD_SCHEDULING_GATES_ELIMINATED: "UpdatePodSchedulingGatesEliminated",
    ActionType.UPDATE_POD_GENERATED_RESOURCE_CLAIM: "UpdatePodGeneratedResourceClaim",
    ActionType.ALL: "All", ActionType.UPDATE: "Update",
}


class Resource:
    """``fwk.EventResource`` names (strings, as upstream, so metric labels match)."""

    POD = "Pod"
    ASSIGNED_POD = "AssignedPod"
    UNSCHEDULED_POD = "UnscheduledPod"
    TARGET_POD = "TargetPod"
    NODE = "Node"
    PERSISTENT_VOLUME = "PersistentVolume"
    PERSISTENT_VOLUME_CLAIM = "PersistentVolumeClaim"
    CSI_NODE = "storage.k8s.io/CSINode"
    CSI_DRIVER = "storage.k8s.io/CSIDriver"
    VOLUME_ATTACHMENT = "storage.k8s.io/VolumeAttachment"
    CSI_STORAGE_CAPACITY = "storage.k8s.io/CSIStorageCapacity"
    STORAGE_CLASS = "storage.k8s.io/StorageClass"
    RESOURCE_CLAIM = "resource.k8s.io/ResourceClaim"
    RESOURCE_SLICE = "resource.k8s.io/ResourceSlice"
    DEVICE_CLASS = "resource.k8s.io/DeviceClass"
    POD_GROUP = "scheduling.k8s.io/PodGroup"
    WILDCARD = "*"


@dataclass(frozen=True, slots=True)
class ClusterEvent:
    """``fwk.ClusterEvent``: a resource and an action; ``custom_label`` names special events."""

    resource: str
    action_type: ActionType
    custom_label: str = ""

    def label(self) -> str:
        """``ClusterEvent.Label()``: ``NodeAdd``, ``AssignedPodDelete``, ``UnschedulableTimeout``..."""
        return self.custom_label or f"{self.resource}{self.action_type.label()}"


class QueueingHint(IntEnum):
    """``fwk.QueueingHint``: whether an event may make a rejected Pod schedulable."""

    QUEUE_SKIP = 0
    QUEUE = 1


QueueingHintFn = Callable[[Obj, Any, Any], QueueingHint]
"""``(pod, old_obj, new_obj) -> QueueingHint``; raising counts as ``QUEUE`` (as upstream)."""


@dataclass(frozen=True, slots=True)
class ClusterEventWithHint:
    """``fwk.ClusterEventWithHint``: an event of interest and an optional hint (``None``: always Queue)."""

    event: ClusterEvent
    hint_fn: QueueingHintFn | None = None


@runtime_checkable
class EnqueueExtensions(Protocol):
    """Optional plugin method (``fwk.EnqueueExtensions``)."""

    name: str

    def events_to_register(self) -> list[ClusterEventWithHint]: ...


# Special event labels (framework/events.go).
SCHEDULE_ATTEMPT_FAILURE = "ScheduleAttemptFailure"
BACKOFF_COMPLETE = "BackoffComplete"
POP_FROM_BACKOFF_Q = "PopFromBackoffQ"
FORCE_ACTIVATE = "ForceActivate"
UNSCHEDULABLE_TIMEOUT = "UnschedulableTimeout"

EVENT_ASSIGNED_POD_ADD = ClusterEvent(Resource.ASSIGNED_POD, ActionType.ADD)
EVENT_ASSIGNED_POD_DELETE = ClusterEvent(Resource.ASSIGNED_POD, ActionType.DELETE)
EVENT_UNSCHEDULED_POD_ADD = ClusterEvent(Resource.UNSCHEDULED_POD, ActionType.ADD)
EVENT_NODE_ADD = ClusterEvent(Resource.NODE, ActionType.ADD)
EVENT_NODE_DELETE = ClusterEvent(Resource.NODE, ActionType.DELETE)
EVENT_UNSCHEDULABLE_TIMEOUT = ClusterEvent(Resource.WILDCARD, ActionType.ALL, UNSCHEDULABLE_TIMEOUT)
EVENT_FORCE_ACTIVATE = ClusterEvent(Resource.WILDCARD, ActionType.ALL, FORCE_ACTIVATE)


def is_wildcard(ev: ClusterEvent) -> bool:
    """``ClusterEventIsWildCard``: resource ``*`` and action ``All``."""
    return ev.resource == Resource.WILDCARD and ev.action_type == ActionType.ALL


def _match_resources(registered: str, incoming: str) -> bool:
    return (registered in (Resource.WILDCARD, incoming)
            or (registered == Resource.POD
                and incoming in (Resource.ASSIGNED_POD, Resource.UNSCHEDULED_POD, Resource.TARGET_POD)))


def match_cluster_events(registered: ClusterEvent, incoming: ClusterEvent) -> bool:
    """``MatchClusterEvents``: ``incoming`` is the same as or more specific than ``registered``.

    A registered ``Node/Update`` matches an incoming ``Node/UpdateNodeLabel``, not the reverse; an
    incoming wildcard matches only a registered wildcard.
    """
    return is_wildcard(registered) or (
        _match_resources(registered.resource, incoming.resource)
        and bool(registered.action_type & incoming.action_type)
        and int(incoming.action_type) <= int(registered.action_type))


def match_any_cluster_event(ev: ClusterEvent, registered: list[ClusterEvent]) -> bool:
    """``MatchAnyClusterEvent``: ``ev`` matches one of ``registered``."""
    return any(match_cluster_events(r, ev) for r in registered)


def unroll_wildcard_resource() -> list[ClusterEventWithHint]:
    """``UnrollWildCardResource``: every resource with ``All`` (registered for plugins without
    ``events_to_register``)."""
    return [ClusterEventWithHint(ClusterEvent(r, ActionType.ALL)) for r in (
        Resource.ASSIGNED_POD, Resource.UNSCHEDULED_POD, Resource.TARGET_POD, Resource.NODE,
        Resource.PERSISTENT_VOLUME, Resource.PERSISTENT_VOLUME_CLAIM, Resource.CSI_NODE, Resource.CSI_DRIVER,
        Resource.CSI_STORAGE_CAPACITY, Resource.STORAGE_CLASS, Resource.RESOURCE_CLAIM, Resource.DEVICE_CLASS)]


def unroll_pod_event(ev: ClusterEvent) -> list[ClusterEvent]:
    """``UnrollPodEvent``: a ``Pod`` registration stands for assigned, unscheduled and target Pods."""
    return [ClusterEvent(r, ev.action_type)
            for r in (Resource.ASSIGNED_POD, Resource.UNSCHEDULED_POD, Resource.TARGET_POD)]


# -- object change -> specific update events ------------------------------------------------------

def _spec(obj: Obj | None) -> Obj:
    spec: Obj = (obj or {}).get("spec") or {}
    return spec


def _status(obj: Obj | None) -> Obj:
    status: Obj = (obj or {}).get("status") or {}
    return status


def _requests(pod: Obj) -> dict[str, Decimal] | None:
    try:
        return pod_requests(pod)
    except PodParseError:
        return None


def _scale(new: Obj, old: Obj) -> tuple[bool, bool]:
    """(scaled down, scaled up) comparing ``PodRequests`` by milli-value, as upstream."""
    nr, orq = _requests(new), _requests(old)
    if nr is None or orq is None:
        return (nr is not orq), (nr is not orq)
    mv = quantity.milli_value
    down = any(name not in nr or mv(q) > mv(nr[name]) for name, q in orq.items())
    up = any(name not in orq or mv(q) > mv(orq[name]) for name, q in nr.items())
    return down, up


def pod_scheduling_properties_change(new: Obj, old: Obj, is_target_pod: bool) -> list[ClusterEvent]:
    """``PodSchedulingPropertiesChange``: the specific update events of a Pod change.

    The resource is ``AssignedPod`` when ``new`` is bound, else ``TargetPod`` (the queued Pod
    itself changed) or ``UnscheduledPod``; falls back to a general ``Update``.
    """
    if _spec(new).get("nodeName"):
        res = Resource.ASSIGNED_POD
    elif is_target_pod:
        res = Resource.TARGET_POD
    else:
        res = Resource.UNSCHEDULED_POD
    actions: list[ActionType] = []
    if (ob.meta(new).get("labels") or {}) != (ob.meta(old).get("labels") or {}):
        actions.append(ActionType.UPDATE_POD_LABEL)
    down, up = _scale(new, old)
    if down:
        actions.append(ActionType.UPDATE_POD_SCALE_DOWN)
    if up:
        actions.append(ActionType.UPDATE_POD_SCALE_UP)
    if not _spec(new).get("schedulingGates") and _spec(old).get("schedulingGates"):
        actions.append(ActionType.UPDATE_POD_SCHEDULING_GATES_ELIMINATED)
    if len(_spec(new).get("tolerations") or []) != len(_spec(old).get("tolerations") or []):
        actions.append(ActionType.UPDATE_POD_TOLERATION)
    if (_status(new).get("resourceClaimStatuses") != _status(old).get("resourceClaimStatuses")
            or _status(new).get("extendedResourceClaimStatus") != _status(old).get("extendedResourceClaimStatus")):
        actions.append(ActionType.UPDATE_POD_GENERATED_RESOURCE_CLAIM)
    if not actions:
        actions.append(ActionType.UPDATE)
    return [ClusterEvent(res, a) for a in actions]


def _condition_statuses(node: Obj) -> dict[str, Any]:
    return {str(c.get("type")): c.get("status") for c in _status(node).get("conditions") or []
            if isinstance(c, Mapping)}


def node_scheduling_properties_change(new: Obj, old: Obj) -> list[ClusterEvent]:
    """``NodeSchedulingPropertiesChange``: one event per changed scheduling-relevant property
    (unschedulable lifted counts as ``UpdateNodeTaint``); empty when nothing relevant changed."""
    actions: list[ActionType] = []
    ns, os_ = _spec(new), _spec(old)
    if bool(ns.get("unschedulable")) != bool(os_.get("unschedulable")) and not ns.get("unschedulable"):
        actions.append(ActionType.UPDATE_NODE_TAINT)
    if _status(new).get("allocatable") != _status(old).get("allocatable"):
        actions.append(ActionType.UPDATE_NODE_ALLOCATABLE)
    if (ob.meta(new).get("labels") or {}) != (ob.meta(old).get("labels") or {}):
        actions.append(ActionType.UPDATE_NODE_LABEL)
    if (ns.get("taints") or []) != (os_.get("taints") or []):
        actions.append(ActionType.UPDATE_NODE_TAINT)
    if _condition_statuses(new) != _condition_statuses(old):
        actions.append(ActionType.UPDATE_NODE_CONDITION)
    if (ob.meta(new).get("annotations") or {}) != (ob.meta(old).get("annotations") or {}):
        actions.append(ActionType.UPDATE_NODE_ANNOTATION)
    if ns.get("podPreemptionPolicy") != os_.get("podPreemptionPolicy"):
        actions.append(ActionType.UPDATE_NODE_PREEMPTION_POLICY)
    if (_status(new).get("declaredFeatures") or []) != (_status(old).get("declaredFeatures") or []):
        actions.append(ActionType.UPDATE_NODE_DECLARED_FEATURE)
    out: list[ClusterEvent] = []
    for a in actions:
        ev = ClusterEvent(Resource.NODE, a)
        if ev not in out:
            out.append(ev)
    return out
