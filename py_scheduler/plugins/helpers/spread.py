"""Default spreading selector of a Pod: the selectors of the objects that select it.

Upstream: ``pkg/scheduler/framework/plugins/helper/spread.go`` (``DefaultSelector``,
``GetPodServices``). PodTopologySpread uses the result as the label selector of its default
(system or configured) constraints when the Pod has no ``topologySpreadConstraints`` of its own.

The selector is a compiled :class:`~py_scheduler.plugins.helpers.node_selector.LabelSelector`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from py_scheduler.framework.objects import Obj
from py_scheduler.framework.types import PodInfo
from py_scheduler.plugins.helpers.node_selector import LabelSelector, parse_label_selector

__all__ = ["InformerObjects", "SelectingObjects", "default_selector", "get_pod_services"]


class SelectingObjects(Protocol):
    """What the default selector reads: objects by ``namespace/name`` and by namespace (a Snapshot's
    :class:`~py_scheduler.framework.lister.ClusterObjectsLister` is one, :class:`InformerObjects` another)."""

    def get(self, kind: str, key: str) -> Obj | None: ...

    def list(self, kind: str, namespace: str | None = None) -> list[Obj]: ...


class _Lister(Protocol):
    def get(self, kind: str, namespace: str, name: str) -> Obj | None: ...

    def list(self, kind: str) -> Iterable[Obj]: ...


class InformerObjects:
    """:class:`SelectingObjects` over the Handle's informer objects (``Handle.objects``), for the
    queueing hints, which run outside a cycle and its Snapshot (upstream's hints read the informers'
    listers too)."""

    def __init__(self, objects: _Lister) -> None:
        self.objects = objects

    def get(self, kind: str, key: str) -> Obj | None:
        namespace, _, name = key.rpartition("/")
        return self.objects.get(kind, namespace, name)

    def list(self, kind: str, namespace: str | None = None) -> list[Obj]:
        return [o for o in self.objects.list(kind)
                if namespace is None or (o.get("metadata") or {}).get("namespace") == namespace]


_RC_KIND = ("", "v1", "ReplicationController")
_RS_KIND = ("apps", "v1", "ReplicaSet")
_SS_KIND = ("apps", "v1", "StatefulSet")


def _string_map(raw: object) -> dict[str, str] | None:
    """A ``map[string]string`` from JSON, or None when absent / not a map."""
    if not isinstance(raw, dict):
        return None
    return {str(k): str(v) for k, v in raw.items()}


def get_pod_services(pod: PodInfo, objects: SelectingObjects) -> list[Obj]:
    """Services in the Pod's namespace whose ``spec.selector`` matches the Pod's labels
    (``helper.GetPodServices``).

    A Service without a selector matches nothing; an empty selector map matches every Pod, as
    ``labels.Set{}.AsSelectorPreValidated()`` does.
    """
    out: list[Obj] = []
    for svc in objects.list("Service", pod.namespace):
        sel = _string_map((svc.get("spec") or {}).get("selector"))
        if sel is None:
            continue
        if all(pod.labels.get(k) == v for k, v in sel.items()):
            out.append(svc)
    return out


def _controller_of(pod: PodInfo) -> Obj | None:
    """``metav1.GetControllerOfNoCopy``: the ownerReference with ``controller: true``."""
    refs = (pod.pod.get("metadata") or {}).get("ownerReferences") or []
    if not isinstance(refs, list):
        return None
    for ref in refs:
        if isinstance(ref, dict) and ref.get("controller") is True:
            return ref
    return None


def _parse_group_version(api_version: str) -> tuple[str, str] | None:
    """``schema.ParseGroupVersion``: ``"apps/v1"`` -> (apps, v1), ``"v1"`` -> ("", v1), ``""`` ->
    ("", ""); None when there is more than one ``/``."""
    if not api_version:
        return "", ""
    parts = api_version.split("/")
    if len(parts) == 1:
        return "", parts[0]
    if len(parts) == 2:
        return parts[0], parts[1]
    return None


def default_selector(pod: PodInfo, objects: SelectingObjects) -> LabelSelector:
    """The selector deduced from the Services, ReplicationControllers, ReplicaSets and StatefulSets
    selecting ``pod`` (``helper.DefaultSelector``), compiled.

    Services' selectors are merged (they all match the Pod, so they cannot conflict); a controlling
    ReplicationController's selector is merged into the same label set; a controlling ReplicaSet's
    or StatefulSet's ``spec.selector`` requirements are added (a missing selector adds nothing, a
    malformed one is skipped, as upstream). Objects are looked up in the Pod's namespace in
    ``objects``; a missing owner, an unparsable ``apiVersion`` or an unsupported owner kind add
    nothing. The result selects everything (``is_everything``, upstream ``Empty()``) when nothing
    selects the Pod.
    """
    label_set: dict[str, str] = {}
    for svc in get_pod_services(pod, objects):
        label_set.update(_string_map((svc.get("spec") or {}).get("selector")) or {})
    requirements = list(LabelSelector.from_set(label_set).requirements)
    owner = _controller_of(pod)
    if owner is None:
        return LabelSelector(requirements)
    gv = _parse_group_version(str(owner.get("apiVersion") or ""))
    if gv is None:
        return LabelSelector(requirements)
    gvk = (gv[0], gv[1], str(owner.get("kind") or ""))
    key = f"{pod.namespace}/{owner.get('name') or ''}"
    if gvk == _RC_KIND:
        rc = objects.get("ReplicationController", key)
        if rc is not None:
            label_set.update(_string_map((rc.get("spec") or {}).get("selector")) or {})
            requirements = list(LabelSelector.from_set(label_set).requirements)
    elif gvk in (_RS_KIND, _SS_KIND):
        wl = objects.get("ReplicaSet" if gvk == _RS_KIND else "StatefulSet", key)
        if wl is not None:
            try:
                other = parse_label_selector((wl.get("spec") or {}).get("selector"))
            except ValueError:
                other = LabelSelector.none()
            if not other.nothing:
                requirements.extend(other.requirements)
    return LabelSelector(requirements)
