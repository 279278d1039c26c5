"""VolumeRestrictions: in-tree disks that cannot be shared on a node, and ReadWriteOncePod claims.

Upstream: ``pkg/scheduler/framework/plugins/volumerestrictions/volume_restrictions.go`` (``PreFilter``,
``readWriteOncePodPVCsForPod``, ``calPreFilterState``, ``AddPod`` / ``RemovePod``, ``Filter``,
``satisfyVolumeConflicts``, ``isVolumeConflict``, ``haveOverlap``, ``satisfyReadWriteOncePod``).

* Disk conflicts (Filter, ``node(s) had no available disk``, Unschedulable): a GCE PD with the same
  ``pdName`` unless both mounts are read-only; an AWS EBS volume with the same ``volumeID``; an iSCSI
  volume with the same ``iqn`` unless both are read-only; an RBD image with an overlapping monitor, the
  same pool and image unless both are read-only; against every Pod already on the node.
* ReadWriteOncePod (PreFilter + Filter): a ``persistentVolumeClaim`` volume whose claim has the
  ``ReadWriteOncePod`` access mode and is already used by a scheduled Pod anywhere in the cluster
  (the snapshot's ``used_pvc_ref_counts``) makes every node ``node(s) unavailable due to
  PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod``
  (Unschedulable, so preemption may free it). A missing claim is UnschedulableAndUnresolvable
  (``persistentvolumeclaim "X" not found``).
* PreFilter Skip: no disk volume to check and no conflicting ReadWriteOncePod claim.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from py_scheduler.framework import signers
from py_scheduler.framework.events import (
    EVENT_ASSIGNED_POD_DELETE,
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    QueueingHint,
    Resource,
)
from py_scheduler.framework.lister import SnapshotLister
from py_scheduler.framework.objects import Obj
from py_scheduler.framework.types import Code, CycleState, NodeInfo, PodInfo, Status
from py_scheduler.plugins.helpers import NoArgs
from py_scheduler.plugins.helpers import storage as st

__all__ = ["ERR_REASON_DISK_CONFLICT", "ERR_REASON_RWOP_CONFLICT", "NAME", "PRE_FILTER_STATE_KEY",
           "VolumeRestrictions", "is_volume_conflict"]

NAME = "VolumeRestrictions"
PRE_FILTER_STATE_KEY = "PreFilter" + NAME
ERR_REASON_DISK_CONFLICT = "node(s) had no available disk"
ERR_REASON_RWOP_CONFLICT = ("node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode "
                            "already in-use by another pod")

_CHECKED_SOURCES = ("gcePersistentDisk", "awsElasticBlockStore", "rbd", "iscsi")



def _src(volume: Obj, key: str) -> Obj | None:
    v = volume.get(key)
    return v if isinstance(v, dict) else None


def _ro(src: Obj) -> bool:
    return src.get("readOnly") is True


def _have_overlap(a: object, b: object) -> bool:
    """``haveOverlap``: the two monitor lists share an entry."""
    la = [x for x in a if isinstance(x, str)] if isinstance(a, list) else []
    lb = [x for x in b if isinstance(x, str)] if isinstance(b, list) else []
    return bool(set(la) & set(lb))


def is_volume_conflict(volume: Obj, pod: Obj) -> bool:
    """``isVolumeConflict``: does ``volume`` (of the incoming Pod) conflict with a volume of ``pod``?"""
    gce, aws, iscsi, rbd = (_src(volume, k) for k in ("gcePersistentDisk", "awsElasticBlockStore", "iscsi", "rbd"))
    for ev in st.pod_volumes(pod):
        egce = _src(ev, "gcePersistentDisk")
        if gce is not None and egce is not None and gce.get("pdName") == egce.get("pdName") and not (
                _ro(gce) and _ro(egce)):
            return True
        eaws = _src(ev, "awsElasticBlockStore")
        if aws is not None and eaws is not None and aws.get("volumeID") == eaws.get("volumeID"):
            return True
        eiscsi = _src(ev, "iscsi")
        if iscsi is not None and eiscsi is not None and iscsi.get("iqn") == eiscsi.get("iqn") and not (
                _ro(iscsi) and _ro(eiscsi)):
            return True
        erbd = _src(ev, "rbd")
        if (rbd is not None and erbd is not None and _have_overlap(rbd.get("monitors"), erbd.get("monitors"))
                and rbd.get("pool") == erbd.get("pool") and rbd.get("image") == erbd.get("image")
                and not (_ro(rbd) and _ro(erbd))):
            return True
    return False


def _needs_restrictions_check(volume: Obj) -> bool:
    return any(volume.get(k) is not None for k in _CHECKED_SOURCES)


@dataclass(slots=True)
class _PreFilterState:
    """``preFilterState``: claim names of the Pod's ReadWriteOncePod volumes and how many references
    scheduled Pods hold to them."""

    read_write_once_pod_pvcs: frozenset[str]
    conflicting_pvc_ref_count: int

    def clone(self) -> _PreFilterState:
        return _PreFilterState(self.read_write_once_pod_pvcs, self.conflicting_pvc_ref_count)

    def ref_count_for_pod(self, pod: Obj) -> int:
        """``conflictingPVCRefCountForPod``: the Pod's ``persistentVolumeClaim`` volumes naming one of
        the claims (by name only, as upstream)."""
        n = 0
        for v in st.pod_volumes(pod):
            ref = v.get("persistentVolumeClaim")
            if isinstance(ref, dict) and ref.get("claimName") in self.read_write_once_pod_pvcs:
                n += 1
        return n


class VolumeRestrictions(NoArgs):
    """PreFilter (+ AddPod / RemovePod) and Filter (``volumerestrictions.VolumeRestrictions``)."""

    name = NAME


    def sign_pod(self, pod: PodInfo, snapshot: SnapshotLister | None) -> signers.SignResult:
        """``SignPod`` (upstream ``pkg/scheduler/framework/plugins/volumerestrictions/volume_restrictions.go``):
        the Pod's volume sources but ConfigMaps and Secrets. ``snapshot`` is unused by most plugins."""
        return signers.volumes_fragment(pod)

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """``EventsToRegister``: an assigned Pod deleted (hint: it held a conflicting disk or one of the
        Pod's claims), a Node added, one of the Pod's claims added."""
        return [
            ClusterEventWithHint(EVENT_ASSIGNED_POD_DELETE, _hint_assigned_pod_deleted),
            ClusterEventWithHint(ClusterEvent(Resource.NODE, ActionType.ADD)),
            ClusterEventWithHint(ClusterEvent(Resource.PERSISTENT_VOLUME_CLAIM, ActionType.ADD), _hint_pvc_added),
        ]

    def pre_filter(self, state: CycleState, pod: PodInfo,
                   nodes: list[NodeInfo]) -> tuple[set[str] | None, Status]:
        """Count references to the Pod's ReadWriteOncePod claims; Skip when there is nothing to check."""
        vols = st.pod_volumes(pod.pod)
        needs_check = any(_needs_restrictions_check(v) for v in vols)
        objects = st.cycle_objects(state)
        rwop: set[str] = set()
        for v in vols:
            ref = v.get("persistentVolumeClaim")
            if ref is None:
                continue
            claim = ref.get("claimName") if isinstance(ref, dict) else None
            claim = claim if isinstance(claim, str) else ""
            pvc = objects.get("PersistentVolumeClaim", st.claim_key(pod.namespace, claim))
            if pvc is None:
                return None, Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
                                    [f'persistentvolumeclaim "{claim}" not found'], NAME)
            if st.contains_access_mode(st.spec(pvc).get("accessModes"), "ReadWriteOncePod"):
                rwop.add(st.name(pvc))
        used = st.used_pvc_ref_counts(state)
        conflicts = sum(1 for c in rwop if used.get(st.claim_key(pod.namespace, c), 0) > 0)
        if not needs_check and conflicts == 0:
            return None, Status.skip()
        state.write(PRE_FILTER_STATE_KEY, _PreFilterState(frozenset(rwop), conflicts))
        return None, Status.success()

    def _state(self, state: CycleState) -> _PreFilterState | None:
        s = state.data.get(PRE_FILTER_STATE_KEY)
        return s if isinstance(s, _PreFilterState) else None

    def add_pod(self, state: CycleState, pod: PodInfo, to_add: PodInfo, node_info: NodeInfo) -> Status:
        """``AddPod``: a Pod added to a node (preemption / nominated Pods) may hold a claim."""
        s = self._state(state)
        if s is None:
            return Status.error(f'cannot read "{PRE_FILTER_STATE_KEY}" from cycleState', NAME)
        s.conflicting_pvc_ref_count += s.ref_count_for_pod(to_add.pod)
        return Status.success()

    def remove_pod(self, state: CycleState, pod: PodInfo, to_remove: PodInfo, node_info: NodeInfo) -> Status:
        """``RemovePod``: a victim's references no longer count."""
        s = self._state(state)
        if s is None:
            return Status.error(f'cannot read "{PRE_FILTER_STATE_KEY}" from cycleState', NAME)
        s.conflicting_pvc_ref_count -= s.ref_count_for_pod(to_remove.pod)
        return Status.success()

    def filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status:
        """Disk conflicts with the node's Pods, then the ReadWriteOncePod reference count."""
        for v in st.pod_volumes(pod.pod):
            if not _needs_restrictions_check(v):
                continue
            for existing in node_info.pods:
                if is_volume_conflict(v, existing.pod):
                    return Status(Code.UNSCHEDULABLE, [ERR_REASON_DISK_CONFLICT], NAME)
        s = self._state(state)
        if s is None:
            return Status.error(f'cannot read "{PRE_FILTER_STATE_KEY}" from cycleState', NAME)
        if s.conflicting_pvc_ref_count > 0:
            return Status(Code.UNSCHEDULABLE, [ERR_REASON_RWOP_CONFLICT], NAME)
        return Status.success()


def _claim_names(pod: Obj) -> set[str]:
    out: set[str] = set()
    for v in st.pod_volumes(pod):
        ref = v.get("persistentVolumeClaim")
        if isinstance(ref, dict) and isinstance(ref.get("claimName"), str):
            out.add(ref["claimName"])
    return out


def _hint_pvc_added(pod: Obj, old: Any, new: Any) -> QueueingHint:
    if not isinstance(new, dict) or st.namespace(new) != st.namespace(pod):
        return QueueingHint.QUEUE_SKIP
    return QueueingHint.QUEUE if st.name(new) in _claim_names(pod) else QueueingHint.QUEUE_SKIP


def _hint_assigned_pod_deleted(pod: Obj, old: Any, new: Any) -> QueueingHint:
    """``isSchedulableAfterAssignedPodDeleted``: same namespace, and the deleted Pod had a conflicting
    disk or shared one of the Pod's claims (access modes are not looked up, as upstream)."""
    deleted = old if isinstance(old, dict) else new
    if not isinstance(deleted, dict) or st.namespace(deleted) != st.namespace(pod):
        return QueueingHint.QUEUE_SKIP
    for v in st.pod_volumes(pod):
        if _needs_restrictions_check(v) and is_volume_conflict(v, deleted):
            return QueueingHint.QUEUE
    if _claim_names(pod) & _claim_names(deleted):
        return QueueingHint.QUEUE
    return QueueingHint.QUEUE_SKIP
