"""VolumeZone: a Pod's bound PersistentVolumes' zone / region labels must match the node's.

Upstream: ``pkg/scheduler/framework/plugins/volumezone/volume_zone.go`` (``PreFilter``, ``getPVbyPod``,
``Filter``, ``getPVTopologies``, ``translateToGALabel``, ``ErrReasonConflict``) and
``k8s.io/cloud-provider/volume/helpers/zones.go`` (``LabelZonesToSet``: ``zone-a__zone-b``).

PreFilter reads each ``persistentVolumeClaim`` volume's claim (generic ephemeral volumes are not
looked at): a claim bound to a PV contributes the PV's ``failure-domain.beta.kubernetes.io/zone``,
``failure-domain.beta.kubernetes.io/region``, ``topology.kubernetes.io/zone`` and
``topology.kubernetes.io/region`` labels; an unbound claim of a WaitForFirstConsumer class is ignored;
any other unbound claim, a missing claim / class / PV is UnschedulableAndUnresolvable with upstream's
message (``persistentvolumeclaim "X" not found``, ``storageclass.storage.k8s.io "X" not found``,
``persistentvolume "X" not found``, ``PersistentVolume had no name``, ...). No such labels: Skip.

Filter: a node without any of the four labels passes (single-zone clusters); otherwise for every PV
label the node must carry the same key (or, for a beta key, its GA twin) with a value in the PV's
set, else ``node(s) had no available volume zone`` (UnschedulableAndUnresolvable).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from py_scheduler.framework import signers
from py_scheduler.framework.events import ActionType, ClusterEvent, ClusterEventWithHint, QueueingHint, Resource
from py_scheduler.framework.lister import SnapshotLister
from py_scheduler.framework.types import Code, CycleState, NodeInfo, PodInfo, Status
from py_scheduler.plugins.helpers import NoArgs
from py_scheduler.plugins.helpers import storage as st

__all__ = ["ERR_REASON_CONFLICT", "NAME", "PRE_FILTER_STATE_KEY", "PVTopology", "VolumeZone"]

NAME = "VolumeZone"
PRE_FILTER_STATE_KEY = "PreFilter" + NAME
ERR_REASON_CONFLICT = "node(s) had no available volume zone"

LABEL_ZONE_BETA = "failure-domain.beta.kubernetes.io/zone"
LABEL_REGION_BETA = "failure-domain.beta.kubernetes.io/region"
LABEL_ZONE = "topology.kubernetes.io/zone"
LABEL_REGION = "topology.kubernetes.io/region"
TOPOLOGY_LABELS = (LABEL_ZONE_BETA, LABEL_REGION_BETA, LABEL_ZONE, LABEL_REGION)


def translate_to_ga_label(label: str) -> str:
    """``translateToGALabel``: beta zone / region keys to their GA names."""
    if label == LABEL_REGION_BETA:
        return LABEL_REGION
    if label == LABEL_ZONE_BETA:
        return LABEL_ZONE
    return label


@dataclass(frozen=True, slots=True)
class PVTopology:
    """One topology label of a PV (``pvTopology``): its key and the set of allowed values."""

    pv_name: str
    key: str
    values: frozenset[str]


def pv_topologies(pv: dict[str, Any]) -> list[PVTopology]:
    """``getPVTopologies``: the PV's topology labels in ``TOPOLOGY_LABELS`` order; a value with an empty
    ``__``-separated part is ignored."""
    lbls = st.labels(pv)
    out: list[PVTopology] = []
    for key in TOPOLOGY_LABELS:
        if key in lbls:
            zones = st.label_zones_to_set(lbls[key])
            if zones is None:
                continue
            out.append(PVTopology(st.name(pv), key, frozenset(zones)))
    return out


@dataclass(slots=True)
class _State:
    pod_pv_topologies: list[PVTopology]

    def clone(self) -> _State:
        return self


class VolumeZone(NoArgs):
    """PreFilter + Filter (``volumezone.VolumeZone``)."""

    name = NAME


    def sign_pod(self, pod: PodInfo, snapshot: SnapshotLister | None) -> signers.SignResult:
        """``SignPod`` (upstream ``pkg/scheduler/framework/plugins/volumezone/volume_zone.go``): the Pod's volume
        sources but ConfigMaps and Secrets. ``snapshot`` is unused by most plugins."""
        return signers.volumes_fragment(pod)

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """``EventsToRegister``: a WaitForFirstConsumer StorageClass added, a Node added or relabelled,
        one of the Pod's claims added or updated, a PV added or its topology labels changed."""
        add_update = ActionType.ADD | ActionType.UPDATE
        return [
            ClusterEventWithHint(ClusterEvent(Resource.STORAGE_CLASS, ActionType.ADD), _hint_storage_class_added),
            ClusterEventWithHint(ClusterEvent(Resource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL)),
            ClusterEventWithHint(ClusterEvent(Resource.PERSISTENT_VOLUME_CLAIM, add_update), _hint_pvc_change),
            ClusterEventWithHint(ClusterEvent(Resource.PERSISTENT_VOLUME, add_update), _hint_pv_change),
        ]

    def _pv_by_pod(self, state: CycleState, pod: PodInfo) -> tuple[list[PVTopology], Status]:
        """``getPVbyPod``."""
        objects = st.cycle_objects(state)
        out: list[PVTopology] = []
        for v in st.pod_volumes(pod.pod):
            ref = v.get("persistentVolumeClaim")
            if ref is None:
                continue
            claim = ref.get("claimName") if isinstance(ref, dict) else None
            if not isinstance(claim, str) or not claim:
                return [], _unresolvable("PersistentVolumeClaim had no name")
            pvc = objects.get("PersistentVolumeClaim", st.claim_key(pod.namespace, claim))
            if pvc is None:
                return [], _unresolvable(f'persistentvolumeclaim "{claim}" not found')
            pv_name = st.spec(pvc).get("volumeName")
            if not pv_name:
                sc_name = st.claim_class(pvc)
                if not sc_name:
                    return [], _unresolvable("PersistentVolumeClaim had no pv name and storageClass name")
                sc = objects.get("StorageClass", sc_name)
                if sc is None:
                    return [], _unresolvable(f'storageclass.storage.k8s.io "{sc_name}" not found')
                mode = sc.get("volumeBindingMode")
                if mode is None:
                    return [], _unresolvable(f'VolumeBindingMode not set for StorageClass "{sc_name}"')
                if mode == "WaitForFirstConsumer":
                    continue
                return [], _unresolvable("PersistentVolume had no name")
            pv = objects.get("PersistentVolume", str(pv_name))
            if pv is None:
                return [], _unresolvable(f'persistentvolume "{pv_name}" not found')
            out.extend(pv_topologies(pv))
        return out, Status.success()

    def pre_filter(self, state: CycleState, pod: PodInfo,
                   nodes: list[NodeInfo]) -> tuple[set[str] | None, Status]:
        """Collect the bound PVs' topology labels; Skip when there are none."""
        topologies, s = self._pv_by_pod(state, pod)
        if not s.is_success():
            return None, s
        if not topologies:
            return None, Status.skip()
        state.write(PRE_FILTER_STATE_KEY, _State(topologies))
        return None, Status.success()

    def filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status:
        """``node(s) had no available volume zone`` when a PV topology label is missing on the node or
        its value is not allowed; nodes without any topology label pass."""
        if not st.pod_volumes(pod.pod):
            return Status.success()
        data = state.data.get(PRE_FILTER_STATE_KEY)
        if isinstance(data, _State):
            topologies = data.pod_pv_topologies
        else:
            topologies, s = self._pv_by_pod(state, pod)
            if not s.is_success():
                return s
        node_labels = node_info.labels
        if not any(k in node_labels for k in TOPOLOGY_LABELS):
            return Status.success()
        for t in topologies:
            v = node_labels.get(t.key)
            if v is None:
                v = node_labels.get(translate_to_ga_label(t.key))
            if v is None or v not in t.values:
                return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [ERR_REASON_CONFLICT], NAME)
        return Status.success()


def _unresolvable(msg: str) -> Status:
    return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [msg], NAME)


def _hint_storage_class_added(pod: dict[str, Any], old: Any, new: Any) -> QueueingHint:
    return QueueingHint.QUEUE if new.get("volumeBindingMode") == "WaitForFirstConsumer" else QueueingHint.QUEUE_SKIP


def _hint_pvc_change(pod: dict[str, Any], old: Any, new: Any) -> QueueingHint:
    """``isPVCRequestedFromPod``: a ``persistentVolumeClaim`` volume of the Pod names the claim."""
    if not isinstance(new, dict) or st.namespace(new) != st.namespace(pod):
        return QueueingHint.QUEUE_SKIP
    names = {ref.claim for ref in st.pod_volume_refs(pod) if not ref.ephemeral}
    return QueueingHint.QUEUE if st.name(new) in names else QueueingHint.QUEUE_SKIP


def _hint_pv_change(pod: dict[str, Any], old: Any, new: Any) -> QueueingHint:
    if old is None or pv_topologies(old) != pv_topologies(new):
        return QueueingHint.QUEUE
    return QueueingHint.QUEUE_SKIP
