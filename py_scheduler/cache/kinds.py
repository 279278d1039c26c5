"""The one table of the kinds the scheduler reads.

Three readers use it and nothing else: the live informers (``py_scheduler.app.client.informers``: one
reflector per row, LIST + WATCH of ``list_path`` with ``field_selector``), the snapshot loader
(``py_scheduler.offline.loader``: which kinds of a file are kept, which are skipped) and live
``explain`` (``py_scheduler.offline.live``: one LIST per row). :class:`~py_scheduler.cache.snapshot.ClusterObjects`
keys its objects by the rows' ``namespaced``.

Upstream: the informers kube-scheduler starts (``pkg/scheduler/scheduler.go`` ``New`` and
``eventhandlers.go`` ``addAllEventHandlers``: Pods with the terminal-phase field selector, Nodes,
then the kinds the enabled plugins' ``EventsToRegister`` name, and the listers the default plugins
read - Services, ReplicaSets, StatefulSets, ReplicationControllers for the system default spreading,
Namespaces for pod affinity, PodDisruptionBudgets for preemption, PriorityClasses for the Priority
admission stand-in of the offline loader).

``event_resource`` strings are ``fwk.EventResource`` names (``staging/src/k8s.io/kube-scheduler/framework/events.go``),
the same strings as :class:`py_scheduler.framework.events.Resource` (a unit test holds them equal; the
table does not import the queue so that it stays at the bottom of the layers).
"""

from __future__ import annotations

from dataclasses import dataclass

from py_scheduler.framework.objects import Obj

__all__ = ["CLUSTER_KINDS", "KINDS", "KINDS_BY_NAME", "NAMESPACED_KINDS", "POD_FIELD_SELECTOR", "WatchedKind"]


POD_FIELD_SELECTOR = "status.phase!=Succeeded,status.phase!=Failed"
"""The Pod informer's field selector (``scheduler.go`` ``newPodInformer``): terminal Pods hold nothing."""


@dataclass(frozen=True, slots=True)
class WatchedKind:
    """A kind the scheduler reads.

    Attributes:
        kind: as in objects' ``kind`` (``CSINode``).
        group_version: ``v1``, ``apps/v1``, ``storage.k8s.io/v1``...
        plural: the resource (``csinodes``).
        namespaced: whether objects are keyed ``namespace/name`` (else ``name``).
        event_resource: the ClusterEvent resource its changes are offered to the queue as (None: no
            plugin registers for it, changes are only stored).
        field_selector: the LIST / WATCH field selector (the Pods': :data:`POD_FIELD_SELECTOR`).
        optional: the API may be absent from a cluster (its LIST answers 404): the kind is then
            empty, not an error.
    """

    kind: str
    group_version: str
    plural: str
    namespaced: bool
    event_resource: str | None = None
    field_selector: str | None = None
    optional: bool = False

    @property
    def list_path(self) -> str:
        """The cluster-wide collection path (``/api/v1/pods``, ``/apis/apps/v1/replicasets``)."""
        prefix = "/api" if self.group_version == "v1" else "/apis"
        return f"{prefix}/{self.group_version}/{self.plural}"

    def key(self, obj: Obj) -> str:
        """``namespace/name`` (namespace ``default`` when absent) or ``name``; "" without a name."""
        meta = obj.get("metadata") or {}
        name = str(meta.get("name") or "")
        return f"{meta.get('namespace') or 'default'}/{name}" if self.namespaced else name


KINDS: tuple[WatchedKind, ...] = (
    WatchedKind("Node", "v1", "nodes", False, "Node"),
    WatchedKind("Pod", "v1", "pods", True, "Pod", POD_FIELD_SELECTOR),
    WatchedKind("Namespace", "v1", "namespaces", False),
    WatchedKind("Service", "v1", "services", True),
    WatchedKind("ReplicationController", "v1", "replicationcontrollers", True),
    WatchedKind("PersistentVolumeClaim", "v1", "persistentvolumeclaims", True, "PersistentVolumeClaim"),
    WatchedKind("PersistentVolume", "v1", "persistentvolumes", False, "PersistentVolume"),
    WatchedKind("ReplicaSet", "apps/v1", "replicasets", True),
    WatchedKind("StatefulSet", "apps/v1", "statefulsets", True),
    WatchedKind("StorageClass", "storage.k8s.io/v1", "storageclasses", False, "storage.k8s.io/StorageClass"),
    WatchedKind("CSINode", "storage.k8s.io/v1", "csinodes", False, "storage.k8s.io/CSINode"),
    WatchedKind("CSIDriver", "storage.k8s.io/v1", "csidrivers", False, "storage.k8s.io/CSIDriver"),
    WatchedKind("CSIStorageCapacity", "storage.k8s.io/v1", "csistoragecapacities", True,
                "storage.k8s.io/CSIStorageCapacity"),
    WatchedKind("VolumeAttachment", "storage.k8s.io/v1", "volumeattachments", False,
                "storage.k8s.io/VolumeAttachment"),
    WatchedKind("PodDisruptionBudget", "policy/v1", "poddisruptionbudgets", True),
    WatchedKind("PriorityClass", "scheduling.k8s.io/v1", "priorityclasses", False),
    WatchedKind("ResourceClaim", "resource.k8s.io/v1", "resourceclaims", True, "resource.k8s.io/ResourceClaim",
                optional=True),
    WatchedKind("ResourceSlice", "resource.k8s.io/v1", "resourceslices", False, "resource.k8s.io/ResourceSlice",
                optional=True),
    WatchedKind("DeviceClass", "resource.k8s.io/v1", "deviceclasses", False, "resource.k8s.io/DeviceClass",
                optional=True),
    # DeviceTaintRules (GA) patch the devices the allocator sees; a change requeues like a slice change
    # (upstream's ResourceSlice tracker emits slice events for them).
    WatchedKind("DeviceTaintRule", "resource.k8s.io/v1", "devicetaintrules", False,
                "resource.k8s.io/ResourceSlice", optional=True),
    # GenericWorkload (beta, off by default): watched only with the gate on (py_scheduler.app.process.main), and
    # absent unless the API server serves scheduling.k8s.io/v1beta1.
    WatchedKind("PodGroup", "scheduling.k8s.io/v1beta1", "podgroups", True, "scheduling.k8s.io/PodGroup",
                optional=True),
)
"""Every kind the scheduler reads, Nodes and Pods first (the informers list them in this order)."""

KINDS_BY_NAME: dict[str, WatchedKind] = {k.kind: k for k in KINDS}

NAMESPACED_KINDS: tuple[str, ...] = tuple(k.kind for k in KINDS if k.namespaced and k.kind != "Pod")
"""The namespaced kinds other than Pods (:class:`~py_scheduler.cache.snapshot.ClusterObjects`)."""
CLUSTER_KINDS: tuple[str, ...] = tuple(k.kind for k in KINDS if not k.namespaced and k.kind != "Node")
"""The cluster-scoped kinds other than Nodes (:class:`~py_scheduler.cache.snapshot.ClusterObjects`)."""
