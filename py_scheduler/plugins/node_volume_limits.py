"""NodeVolumeLimits: per-CSI-driver attach limits of a node (``CSINode.spec.drivers[].allocatable.count``).

Upstream: ``pkg/scheduler/framework/plugins/nodevolumelimits/csi.go`` (``CSILimits``: ``PreFilter``,
``Filter``, ``filterAttachableVolumes``, ``checkAttachableInlineVolume``, ``getCSIDriverInfo``,
``getCSIDriverInfoFromSC``, ``checkCSIDriverOnNode``, ``getVolumeLimits``,
``getNodeVolumeAttachmentInfo``), ``utils.go`` (``isCSIMigrationOn``), ``csi_manager.go`` (CSINodes by
node name) and ``csi-translation-lib`` (see :mod:`py_scheduler.plugins.helpers.csi_translation`).

A volume is identified as ``<driver>/<volume handle>``:

* a ``persistentVolumeClaim`` / generic ``ephemeral`` volume: the bound PV's ``spec.csi`` (or the CSI
  translation of an in-tree PV whose migration is on: AWS EBS, GCE PD, Azure Disk, Cinder, Portworx,
  when the node has a CSINode); for an unbound claim (or a missing PV) the StorageClass provisioner
  with a per-instance random handle ``<random>-<namespace>/<claim>``;
* an inline in-tree volume of a migrated plugin: its translated driver and handle.

Filter: the incoming Pod's new unique volumes per driver plus those already used by the node's Pods
(each counted once) plus VolumeAttachments to the node of CSI PVs not used by those Pods must not
exceed the driver's limit: ``node(s) exceed max volume count`` (Unschedulable). Drivers without a
limit, nodes without a CSINode and Pods without such volumes pass. With VolumeLimitScaling (Beta, on
in v1.37) a CSIDriver with ``preventPodSchedulingIfMissing: true`` that the node's CSINode does not
list rejects the node: ``<driver> CSI driver is not installed on the node`` (Unschedulable). A missing
claim of the incoming Pod is UnschedulableAndUnresolvable (``looking up PVC ns/x: persistentvolumeclaim
"x" not found``). PreFilter: Skip unless the Pod has a PVC, ephemeral or migratable inline volume.

VolumeAttachments are read from the snapshot's objects (kind ``VolumeAttachment``); the live cache
must feed them (and CSIDriver, CSINode objects) for the count to include attachments of Pods already
gone.
"""

from __future__ import annotations

import secrets
import string
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
from py_scheduler.framework.lister import ClusterObjectsLister, SnapshotLister
from py_scheduler.framework.memo import NodeInput, NodeMemo, PodInput, PodMemo
from py_scheduler.framework.objects import Obj
from py_scheduler.framework.types import Code, CycleState, NodeInfo, PodInfo, Status
from py_scheduler.plugins.helpers import NoArgs
from py_scheduler.plugins.helpers import csi_translation as csi
from py_scheduler.plugins.helpers import storage as st

__all__ = ["ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED", "NAME", "NodeVolumeLimits", "get_volume_limits"]

NAME = "NodeVolumeLimits"
ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED = "node(s) exceed max volume count"



VA_INDEX_KEY = "NodeVolumeLimits/VolumeAttachmentsByNode"
"""CycleState key of the per-cycle VolumeAttachment index."""


POD_VOLUMES_KEY = "NodeVolumeLimits/PodVolumes"
"""CycleState key of the incoming Pod's per-cycle :class:`_PodVolumes`."""


class _PodVolumes:
    """The incoming Pod's attachable volumes for one cycle (shared, not copied, by CycleState.clone).

    ``filterAttachableVolumes`` of the incoming Pod reads the Pod's claims, their PVs and StorageClasses
    and the CSIDriver objects, which do not change while the Pod's Filters run, and of the node only
    whether it has a CSINode (``isCSIMigrationOn``: a migrated in-tree volume counts only on a node
    with one). So it is computed at most twice per cycle, once per answer, and kept here with the
    distinct drivers in first-use order; a lookup error is kept and answered on every node. ``pod`` is
    the Pod dict it was computed for (a state holding another Pod's entry recomputes).
    ``must_be_listed`` memoizes per driver whether its CSIDriver has ``preventPodSchedulingIfMissing``.
    """

    __slots__ = ("has_volumes", "must_be_listed", "pod", "variants")

    def __init__(self, pod: Obj) -> None:
        self.pod = pod
        self.has_volumes = bool(st.pod_volumes(pod))
        self.variants: dict[bool, tuple[dict[str, str], tuple[str, ...]] | _LookupError] = {}
        self.must_be_listed: dict[str, bool] = {}

    def clone(self) -> _PodVolumes:
        return self


class _CSINodeInfo:
    """What Filter reads of a CSINode object: its limits (:func:`get_volume_limits`) and the names of
    its drivers, computed once per CSINode object (``obj``, compared by identity: the informer
    replaces the object on every update)."""

    __slots__ = ("drivers", "limits", "obj")

    def __init__(self, obj: Obj) -> None:
        self.obj = obj
        self.limits = get_volume_limits(obj)
        drivers = st.spec(obj).get("drivers")
        self.drivers = frozenset(d["name"] for d in (drivers if isinstance(drivers, list) else [])
                                 if isinstance(d, dict) and isinstance(d.get("name"), str))


class _VAIndex:
    """VolumeAttachments by ``spec.nodeName`` for one cycle (shared, not copied, by CycleState.clone)."""

    __slots__ = ("by_node",)

    def __init__(self) -> None:
        self.by_node: dict[str, list[Obj]] = {}

    def clone(self) -> _VAIndex:
        return self


def _cannot_exceed(node_info: NodeInfo, attachments: dict[str, str], new_volumes: dict[str, str],
                   limits: dict[str, int], drivers: tuple[str, ...] | None = None) -> bool:
    """A cheap sufficient condition for passing: even if every PVC volume of the node's Pods and every
    VolumeAttachment were a distinct volume of the new volumes' driver, no limit would be exceeded.

    Only used when the node's Pods have plain PVC volumes with names (whose lookups cannot fail): with
    ephemeral or inline in-tree volumes upstream may return an error while counting, so the full count
    runs. The result is then the one the full count would give. ``drivers``: the distinct values of
    ``new_volumes`` when the caller has them.
    """
    pods_upper = _NODE_PVC_COUNT_MEMO.get(node_info, _count_node_plain_pvc_volumes)
    if pods_upper < 0:
        return False
    upper = len(attachments) + pods_upper
    relevant = [limits[d] for d in (drivers if drivers is not None else set(new_volumes.values())) if d in limits]
    return not relevant or upper + len(new_volumes) <= min(relevant)


def _count_node_plain_pvc_volumes(node_info: NodeInfo) -> int:
    """The sum of :func:`_plain_pvc_volume_count` over the node's Pods, -1 when one of them is -1."""
    upper = 0
    for existing in node_info.pods:
        n = _plain_pvc_volume_count(existing)
        if n < 0:
            return -1
        upper += n
    return upper


_NODE_PVC_COUNT_MEMO: NodeMemo[int] = NodeMemo(NAME + "/plain PVC volumes of the node's Pods", NodeInput.NODE_INFO)
"""Per NodeInfo generation (every change of its Pods bumps it)."""


def _plain_pvc_volume_count(pod: PodInfo) -> int:
    """Number of the Pod's named ``persistentVolumeClaim`` volumes, or -1 when it has a volume whose
    counting may fail upstream (ephemeral, inline in-tree, unnamed claim). Memoized on the PodInfo
    (a Pod's volumes are immutable)."""
    return _PVC_COUNT_MEMO.get(pod, _count_plain_pvc_volumes)


def _count_plain_pvc_volumes(pod: PodInfo) -> int:
    n = 0
    for v in st.pod_volumes(pod.pod):
        ref = v.get("persistentVolumeClaim")
        if ref is not None:
            if not isinstance(ref, dict) or not ref.get("claimName"):
                n = -1
                break
            n += 1
        elif v.get("ephemeral") is not None or csi.in_tree_plugin_for_volume(v) is not None:
            n = -1
            break
    return n


_PVC_COUNT_MEMO: PodMemo[int] = PodMemo(NAME, PodInput.SPEC)


class _LookupError(Exception):
    """An error ``filterAttachableVolumes`` returns; ``not_found`` marks apierrors.IsNotFound."""

    def __init__(self, message: str, not_found: bool = False) -> None:
        super().__init__(message)
        self.not_found = not_found


def is_csi_migration_on(csi_node: Obj | None, plugin_name: str) -> bool:
    """``isCSIMigrationOn``: the node has a CSINode and the plugin is one whose migration is on."""
    return csi_node is not None and bool(plugin_name) and plugin_name in csi.MIGRATION_ON


def get_volume_limits(csi_node: Obj | None) -> dict[str, int]:
    """``getVolumeLimits``: driver name -> ``allocatable.count`` (drivers without a count: no limit)."""
    out: dict[str, int] = {}
    if csi_node is None:
        return out
    drivers = st.spec(csi_node).get("drivers")
    for d in drivers if isinstance(drivers, list) else []:
        if not isinstance(d, dict):
            continue
        alloc = d.get("allocatable")
        count = alloc.get("count") if isinstance(alloc, dict) else None
        if isinstance(count, int) and not isinstance(count, bool) and isinstance(d.get("name"), str):
            out[d["name"]] = count
    return out


class NodeVolumeLimits(NoArgs):
    """PreFilter + Filter (``nodevolumelimits.CSILimits``)."""

    name = NAME

    def sign_pod(self, pod: PodInfo, snapshot: SnapshotLister | None) -> signers.SignResult:
        """``SignPod`` (upstream ``pkg/scheduler/framework/plugins/nodevolumelimits/csi.go``): the Pod's volume
        sources but ConfigMaps and Secrets. ``snapshot`` is unused by most plugins."""
        return signers.volumes_fragment(pod)


    def __init__(self, volume_limit_scaling: bool = True) -> None:
        self.volume_limit_scaling = volume_limit_scaling
        alphabet = string.ascii_lowercase + string.digits
        self.random_volume_id_prefix = "".join(secrets.choice(alphabet) for _ in range(32))
        self._csi_nodes: dict[str, _CSINodeInfo] = {}
        """Node name -> the :class:`_CSINodeInfo` of its CSINode object, checked by identity on every
        read; entries of CSINodes no longer stored are dropped when the map outgrows the store."""

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """``EventsToRegister``: CSINode added, or updated with a raised limit; an assigned Pod with
        attachable volumes deleted; one of the Pod's claims added; a VolumeAttachment deleted."""
        return [
            ClusterEventWithHint(ClusterEvent(Resource.CSI_NODE, ActionType.ADD)),
            ClusterEventWithHint(ClusterEvent(Resource.CSI_NODE, ActionType.UPDATE), _hint_csi_node_updated),
            ClusterEventWithHint(EVENT_ASSIGNED_POD_DELETE, _hint_assigned_pod_deleted),
            ClusterEventWithHint(ClusterEvent(Resource.PERSISTENT_VOLUME_CLAIM, ActionType.ADD), _hint_pvc_added),
            ClusterEventWithHint(ClusterEvent(Resource.VOLUME_ATTACHMENT, ActionType.DELETE),
                                 _hint_volume_attachment_deleted),
        ]

    def pre_filter(self, state: CycleState, pod: PodInfo,
                   nodes: list[NodeInfo]) -> tuple[set[str] | None, Status]:
        """Skip unless some volume is a PVC, a generic ephemeral volume or a migratable in-tree volume."""
        for v in st.pod_volumes(pod.pod):
            if (v.get("persistentVolumeClaim") is not None or v.get("ephemeral") is not None
                    or csi.in_tree_plugin_for_volume(v) is not None):
                return None, Status.success()
        return None, Status.skip()

    def filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status:
        """See the module docstring for the counting rule and reasons. The incoming Pod's volumes are
        resolved once per cycle (:class:`_PodVolumes`) and each CSINode read once per object
        (:class:`_CSINodeInfo`); the node's own Pods and VolumeAttachments are counted per node."""
        memo = self._pod_volumes(state, pod)
        if not memo.has_volumes:
            return Status.success()
        return self._filter_node(memo, state, st.cycle_objects(state), node_info)

    def filter_nodes(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> list[Status] | None:
        """:meth:`filter` on each of ``nodes`` (batch form); None when every node passes."""
        memo = self._pod_volumes(state, pod)
        if not memo.has_volumes:
            return None
        objects = st.cycle_objects(state)
        out: list[Status] | None = None
        for i, ni in enumerate(nodes):
            got = self._filter_node(memo, state, objects, ni)
            if got.code:
                if out is None:
                    out = [Status.success()] * len(nodes)
                out[i] = got
        return out

    @staticmethod
    def _pod_volumes(state: CycleState, pod: PodInfo) -> _PodVolumes:
        """The cycle's :class:`_PodVolumes` of ``pod`` (created and written on first use)."""
        memo = state.data.get(POD_VOLUMES_KEY)
        if not isinstance(memo, _PodVolumes) or memo.pod is not pod.pod:
            memo = _PodVolumes(pod.pod)
            state.write(POD_VOLUMES_KEY, memo)
        return memo

    def _filter_node(self, memo: _PodVolumes, state: CycleState, objects: ClusterObjectsLister,
                     node_info: NodeInfo) -> Status:
        node_name = node_info.name
        csi_node = objects.get("CSINode", node_name)
        got = memo.variants.get(csi_node is not None)
        if got is None:
            found: dict[str, str] = {}
            try:
                self._filter_attachable_volumes(objects, memo.pod, csi_node, True, found)
                got = (found, tuple(dict.fromkeys(found.values())))
            except _LookupError as exc:
                got = exc
            memo.variants[csi_node is not None] = got
        if isinstance(got, _LookupError):
            if got.not_found:
                return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [str(got)], NAME)
            return Status.error(str(got), NAME)
        pod_volumes, drivers = got
        if not pod_volumes:
            return Status.success()
        info = self._csi_node_info(objects, node_name, csi_node)
        if self.volume_limit_scaling:
            for driver in drivers:
                must = memo.must_be_listed.get(driver)
                if must is None:
                    must = memo.must_be_listed[driver] = self._driver_must_be_listed(objects, driver)
                if must and (info is None or driver not in info.drivers):
                    return Status(Code.UNSCHEDULABLE, [f"{driver} CSI driver is not installed on the node"], NAME)
        limits = info.limits if info is not None else {}
        if not limits:
            return Status.success()
        attachments = self._volume_attachments(state, objects, node_name)
        if _cannot_exceed(node_info, attachments, pod_volumes, limits, drivers):
            return Status.success()
        new_volumes = dict(pod_volumes)
        attached: dict[str, str] = {}
        try:
            for existing in node_info.pods:
                self._filter_attachable_volumes(objects, existing.pod, csi_node, False, attached)
        except _LookupError as exc:
            return Status.error(str(exc), NAME)
        attached_count: dict[str, int] = {}
        for unique, driver in attached.items():
            new_volumes.pop(unique, None)
            attached_count[driver] = attached_count.get(driver, 0) + 1
        for unique, driver in attachments.items():
            if unique not in attached:
                attached_count[driver] = attached_count.get(driver, 0) + 1
        new_count: dict[str, int] = {}
        for driver in new_volumes.values():
            new_count[driver] = new_count.get(driver, 0) + 1
        for driver, count in new_count.items():
            limit = limits.get(driver)
            if limit is not None and attached_count.get(driver, 0) + count > limit:
                return Status(Code.UNSCHEDULABLE, [ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED], NAME)
        return Status.success()

    def _csi_node_info(self, objects: ClusterObjectsLister, node_name: str,
                       csi_node: Obj | None) -> _CSINodeInfo | None:
        """The node's :class:`_CSINodeInfo` (None without a CSINode), from ``self._csi_nodes``."""
        if csi_node is None:
            return None
        hit = self._csi_nodes.get(node_name)
        if hit is None or hit.obj is not csi_node:
            hit = self._csi_nodes[node_name] = _CSINodeInfo(csi_node)
            store = objects.by_kind.get("CSINode", {})
            if len(self._csi_nodes) > 2 * len(store) + 1024:
                for key in [k for k, v in self._csi_nodes.items() if store.get(k) is not v.obj]:
                    del self._csi_nodes[key]
        return hit

    # -- helpers --------------------------------------------------------------------------------------
    @staticmethod
    def _driver_must_be_listed(objects: ClusterObjectsLister, driver: str) -> bool:
        """The driver's CSIDriver has ``preventPodSchedulingIfMissing: true`` (``checkCSIDriverOnNode``
        then requires the node's CSINode to list it)."""
        obj = objects.get("CSIDriver", driver)
        return obj is not None and st.spec(obj).get("preventPodSchedulingIfMissing") is True

    def _filter_attachable_volumes(self, objects: ClusterObjectsLister, pod: Obj, csi_node: Obj | None, new_pod: bool,
                                   result: dict[str, str]) -> None:
        """``filterAttachableVolumes``: add ``driver/handle -> driver`` for each attachable volume.

        Raises:
            _LookupError: upstream's errors (a missing claim of the new Pod is ``not_found``).
        """
        ns = st.namespace(pod)
        for ref_vol in st.pod_volumes(pod):
            pvc_ref = ref_vol.get("persistentVolumeClaim")
            ephemeral = False
            if pvc_ref is not None:
                claim = pvc_ref.get("claimName") if isinstance(pvc_ref, dict) else None
                claim = claim if isinstance(claim, str) else ""
            elif ref_vol.get("ephemeral") is not None:
                vname = ref_vol.get("name")
                claim = f"{st.name(pod)}-{vname if isinstance(vname, str) else ''}"
                ephemeral = True
            else:
                self._check_attachable_inline_volume(ref_vol, csi_node, result)
                continue
            if not claim:
                raise _LookupError("PersistentVolumeClaim had no name")
            pvc = objects.get("PersistentVolumeClaim", st.claim_key(ns, claim))
            if pvc is None:
                if new_pod:
                    raise _LookupError(f'looking up PVC {ns}/{claim}: persistentvolumeclaim "{claim}" not found',
                                       not_found=True)
                continue
            if ephemeral:
                err = st.volume_is_for_pod(pod, pvc)
                if err is not None:
                    raise _LookupError(err)
            driver, handle = self._csi_driver_info(objects, csi_node, pvc)
            if not driver or not handle:
                continue
            result[f"{driver}/{handle}"] = driver

    def _check_attachable_inline_volume(self, volume: Obj, csi_node: Obj | None, result: dict[str, str]) -> None:
        """``checkAttachableInlineVolume``: count an inline in-tree volume whose migration is on."""
        plugin = csi.in_tree_plugin_for_volume(volume)
        if plugin is None or not is_csi_migration_on(csi_node, plugin.plugin_name):
            return
        try:
            driver, handle = csi.translate_inline_volume(volume)
        except csi.TranslationError as exc:
            raise _LookupError(f"converting volume({volume.get('name')}) from inline to csi: {exc}") from exc
        result[f"{driver}/{handle}"] = driver

    def _csi_driver_info(self, objects: ClusterObjectsLister, csi_node: Obj | None, pvc: Obj) -> tuple[str, str]:
        """``getCSIDriverInfo``: (driver, handle) of the claim's PV, or from its StorageClass when the
        claim is unbound or its PV missing; ("", "") when not a CSI volume."""
        pv_name = st.spec(pvc).get("volumeName")
        if not pv_name:
            return self._csi_driver_info_from_sc(objects, csi_node, pvc)
        pv = objects.get("PersistentVolume", str(pv_name))
        if pv is None:
            return self._csi_driver_info_from_sc(objects, csi_node, pvc)
        src = st.spec(pv).get("csi")
        if not isinstance(src, dict):
            plugin = csi.in_tree_plugin_for_pv(pv)
            if plugin is None or not is_csi_migration_on(csi_node, plugin.plugin_name):
                return "", ""
            try:
                src = csi.translate_pv_to_csi(pv)["spec"]["csi"]
            except csi.TranslationError:
                return "", ""
        driver, handle = src.get("driver"), src.get("volumeHandle")
        return (driver if isinstance(driver, str) else "", handle if isinstance(handle, str) else "")

    def _csi_driver_info_from_sc(self, objects: ClusterObjectsLister, csi_node: Obj | None,
                                 pvc: Obj) -> tuple[str, str]:
        """``getCSIDriverInfoFromSC``: the class's provisioner (or the CSI driver of a migrated in-tree
        provisioner) with a random per-claim handle."""
        sc_name = st.claim_class(pvc)
        if not sc_name:
            return "", ""
        sc = objects.get("StorageClass", sc_name)
        if sc is None:
            return "", ""
        handle = f"{self.random_volume_id_prefix}-{st.namespace(pvc)}/{st.name(pvc)}"
        provisioner = sc.get("provisioner")
        provisioner = provisioner if isinstance(provisioner, str) else ""
        if csi.is_migratable_plugin_name(provisioner):
            if not is_csi_migration_on(csi_node, provisioner):
                return "", ""
            return csi.csi_name_from_in_tree(provisioner), handle
        return provisioner, handle

    def _volume_attachments(self, state: CycleState, objects: ClusterObjectsLister, node_name: str) -> dict[str, str]:
        """``getNodeVolumeAttachmentInfo``: ``attacher/handle -> attacher`` of the node's
        VolumeAttachments whose PV exists and is a CSI PV (VolumeAttachments are indexed by node once
        per cycle, as upstream's informer index)."""
        index = state.data.get(VA_INDEX_KEY)
        if not isinstance(index, _VAIndex):
            index = _VAIndex()
            for va in objects.list("VolumeAttachment"):
                va_node = st.spec(va).get("nodeName")
                if isinstance(va_node, str):
                    index.by_node.setdefault(va_node, []).append(va)
            state.write(VA_INDEX_KEY, index)
        out: dict[str, str] = {}
        vas = index.by_node.get(node_name)
        if not vas:
            return out
        for va in vas:
            va_spec = st.spec(va)
            attacher = va_spec.get("attacher")
            source = va_spec.get("source")
            pv_name = source.get("persistentVolumeName") if isinstance(source, dict) else None
            if not isinstance(attacher, str) or not attacher or not isinstance(pv_name, str):
                continue
            pv = objects.get("PersistentVolume", pv_name)
            src = st.spec(pv).get("csi") if pv is not None else None
            if not isinstance(src, dict):
                continue
            out[f"{attacher}/{src.get('volumeHandle') or ''}"] = attacher
        return out


# -- queueing hints (csi.go isSchedulableAfter*) -----------------------------------------------------------

def _hint_csi_node_updated(pod: Obj, old: Any, new: Any) -> QueueingHint:
    """Some driver's ``allocatable.count`` grew (a missing count counts as 0)."""
    def counts(csi_node: Any) -> dict[str, int]:
        out: dict[str, int] = {}
        drivers = st.spec(csi_node).get("drivers") if isinstance(csi_node, dict) else None
        for d in drivers if isinstance(drivers, list) else []:
            if isinstance(d, dict) and isinstance(d.get("name"), str):
                alloc = d.get("allocatable")
                count = alloc.get("count") if isinstance(alloc, dict) else None
                out[d["name"]] = count if isinstance(count, int) and not isinstance(count, bool) else 0
        return out

    before = counts(old)
    return QueueingHint.QUEUE if any(c > before.get(n, 0) for n, c in counts(new).items()) \
        else QueueingHint.QUEUE_SKIP


def _hint_assigned_pod_deleted(pod: Obj, old: Any, new: Any) -> QueueingHint:
    deleted = old if isinstance(old, dict) else new
    vols = st.pod_volumes(deleted) if isinstance(deleted, dict) else []
    if not vols:
        return QueueingHint.QUEUE_SKIP
    if not st.spec(deleted).get("nodeName") and not st.status(deleted).get("nominatedNodeName"):
        return QueueingHint.QUEUE_SKIP
    for v in vols:
        if (v.get("persistentVolumeClaim") is not None or v.get("ephemeral") is not None
                or csi.in_tree_plugin_for_volume(v) is not None):
            return QueueingHint.QUEUE
    return QueueingHint.QUEUE_SKIP


def _hint_pvc_added(pod: Obj, old: Any, new: Any) -> QueueingHint:
    if not isinstance(new, dict) or st.namespace(new) != st.namespace(pod):
        return QueueingHint.QUEUE_SKIP
    names = {ref.claim for ref in st.pod_volume_refs(pod)}
    return QueueingHint.QUEUE if st.name(new) in names else QueueingHint.QUEUE_SKIP


def _hint_volume_attachment_deleted(pod: Obj, old: Any, new: Any) -> QueueingHint:
    """A Pod using a PVC, or an inline in-tree volume translating to the deleted attachment's attacher.

    Raises:
        csi.TranslationError: an inline volume cannot be translated (the queue treats it as Queue).
    """
    deleted = old if isinstance(old, dict) else new
    attacher = st.spec(deleted).get("attacher") if isinstance(deleted, dict) else None
    for v in st.pod_volumes(pod):
        if v.get("persistentVolumeClaim") is not None:
            return QueueingHint.QUEUE
        plugin = csi.in_tree_plugin_for_volume(v)
        if plugin is None:
            continue
        if plugin.plugin_name in csi.MIGRATION_ON:
            driver, _ = csi.translate_inline_volume(v)
        else:
            driver = plugin.driver
        if driver == attacher:
            return QueueingHint.QUEUE
    return QueueingHint.QUEUE_SKIP
