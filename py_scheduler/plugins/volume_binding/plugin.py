"""VolumeBinding: a Pod's PersistentVolumeClaims must be bound, bindable or provisionable on the node.

Upstream: ``pkg/scheduler/framework/plugins/volumebinding/volume_binding.go`` (``PreFilter``,
``podHasPVCs``, ``Filter``, ``PreScore``, ``Score``, ``Reserve``, ``Unreserve``, ``PreBind``, ``New``)
with :mod:`.binder` (``binder.go``) and :mod:`.scorer` (``scorer.go``); args and defaults from
``apis/config/v1/defaults.go`` (``bindTimeoutSeconds: 600``; StorageCapacityScoring is Beta and on in
v1.37, so ``shape`` defaults to ``[{utilization: 0, score: 10}, {utilization: 100, score: 0}]``) and
``apis/config/validation/validation_pluginargs.go`` (``ValidateVolumeBindingArgsWithOptions``).

Extension points:

* **PreFilter**: each PVC-backed volume's claim must exist (``persistentvolumeclaim "X" not found``;
  for a generic ephemeral volume ``waiting for ephemeral volume controller to create the
  persistentvolumeclaim "X"``), not be Lost or being deleted, and (ephemeral) be owned by the Pod:
  otherwise UnschedulableAndUnresolvable with that message. A Pod with no PVC-backed volume: Skip (its
  Filter is skipped, but its Score is *not*: it scores 0 on every node, as upstream). An unbound
  claim whose class is not WaitForFirstConsumer (or that names a PV but is not yet bound):
  ``pod has unbound immediate PersistentVolumeClaims`` (UnschedulableAndUnresolvable).
* **Filter**: bound claims' PVs must accept the node (node affinity, after CSI translation of a
  migrated in-tree PV); each unbound WaitForFirstConsumer claim needs a matching available PV
  (class, size, access modes, volume mode, selector, node affinity) or dynamic provisioning on the
  node (StorageClass provisioner, ``allowedTopologies``, CSIStorageCapacity when the CSIDriver has
  ``storageCapacity: true``). Reasons (UnschedulableAndUnresolvable) are :mod:`.binder`'s
  ``ERR_REASON_*``.
* **PreScore / Score** (StorageCapacityScoring): per storage class, requested vs capacity of the
  chosen static PVs, or (when there are none) of the CSIStorageCapacity that admitted each
  provisioned claim; see :mod:`.scorer`. No NormalizeScore.
* **Reserve / Unreserve**: assume the node's decisions in the binder's in-memory caches (PVs
  pre-bound to their claims, claims annotated ``volume.kubernetes.io/selected-node``) / revert them.

* **PreBindPreFlight / PreBind** (``BindPodVolumes``, see :func:`.bind.bind_pod_volumes`): Skip when
  Reserve found every claim bound; otherwise PUT the assumed PVs (``spec.claimRef``) and claims
  (``volume.kubernetes.io/selected-node``) through the Handle's client, then wait (polling the
  Handle's object lister every second) until the PV controller reports every claim fully bound, at
  most ``bindTimeoutSeconds``. Any failure is an Error status with upstream's text; the framework then
  runs Unreserve, which reverts the assume caches, and the Pod is retried.

The cycle state (key ``"VolumeBinding"``, a :class:`VolumeBindingState`) says after Reserve whether
PreBind has work: ``all_bound`` False means the Pod's volumes still need API binding
(``pod_volumes_by_node[node]``: the PVs and claims PreBind writes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from py_scheduler.framework import quantity, signers
from py_scheduler.framework.errors import PodParseError
from py_scheduler.framework.events import ActionType, ClusterEvent, ClusterEventWithHint, QueueingHint, Resource
from py_scheduler.framework.handle import Handle
from py_scheduler.framework.lister import ClusterObjectsLister, SnapshotLister
from py_scheduler.framework.memo import NodeInput, NodeMemo
from py_scheduler.framework.types import Code, CycleState, NodeInfo, PodInfo, Status
from py_scheduler.plugins.helpers import csi_translation as csi
from py_scheduler.plugins.helpers import storage as st
from py_scheduler.plugins.helpers.resource_scoring import FieldErrors, UtilizationShapePoint, decode_shape
from py_scheduler.plugins.volume_binding.bind import BIND_POLL_INTERVAL_SECONDS, BindError, bind_pod_volumes
from py_scheduler.plugins.volume_binding.binder import (
    BoundClaimsCheck,
    PodVolumeClaims,
    PodVolumes,
    StorageResource,
    VolumeBinder,
    conflict_reasons,
)
from py_scheduler.plugins.volume_binding.scorer import DEFAULT_SHAPE, VolumeCapacityScorer, build_scorer_function

__all__ = [
    "DEFAULT_BIND_TIMEOUT_SECONDS",
    "ERR_UNBOUND_IMMEDIATE",
    "NAME",
    "STATE_KEY",
    "VolumeBinding",
    "VolumeBindingArgs",
    "VolumeBindingState",
]

NAME = "VolumeBinding"
STATE_KEY = NAME
"""CycleState key of :class:`VolumeBindingState` (upstream ``stateKey``)."""
DEFAULT_BIND_TIMEOUT_SECONDS = 600
ERR_UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"


@dataclass(slots=True)
class VolumeBindingArgs:
    """``VolumeBindingArgs``: ``bind_timeout_seconds`` (seconds, >= 0) bounds upstream's PreBind wait;
    ``shape`` the StorageCapacityScoring function (utilization percent -> score 0..10)."""

    bind_timeout_seconds: int = DEFAULT_BIND_TIMEOUT_SECONDS
    shape: tuple[UtilizationShapePoint, ...] = DEFAULT_SHAPE

    @classmethod
    def decode(cls, args: dict[str, Any] | None) -> VolumeBindingArgs:
        """Default and validate ``pluginConfig.args``.

        Raises:
            ConfigError: unknown fields, a negative or non-integer ``bindTimeoutSeconds``, or an
            invalid ``shape`` (unsorted / out-of-range points), worded as upstream's field errors.
        """
        raw = dict(args or {})
        errs = FieldErrors()
        errs.unknown_fields("", raw, ("apiVersion", "kind", "bindTimeoutSeconds", "shape"))
        timeout = raw.get("bindTimeoutSeconds")
        bind_timeout = DEFAULT_BIND_TIMEOUT_SECONDS
        if timeout is not None:
            if isinstance(timeout, bool) or not isinstance(timeout, int):
                errs.invalid("bindTimeoutSeconds", timeout, "must be an integer")
            elif timeout < 0:
                errs.invalid("bindTimeoutSeconds", timeout,
                             "invalid BindTimeoutSeconds, should not be a negative value")
            else:
                bind_timeout = timeout
        shape: tuple[UtilizationShapePoint, ...] = DEFAULT_SHAPE
        raw_shape = raw.get("shape")
        if raw_shape is not None and raw_shape != []:
            shape = tuple(decode_shape(raw_shape, "shape", errs))
        errs.raise_if_any()
        return cls(bind_timeout, shape)


@dataclass(slots=True)
class VolumeBindingState:
    """The cycle state (upstream ``stateData``), shared by reference like upstream's pointer.

    Attributes:
        all_bound: set by Reserve: True when every claim was already fully bound (nothing for PreBind).
        pod_volumes_by_node: node name -> the decisions Filter found there (after Reserve, the chosen
            node's entry holds the assumed objects).
        pod_volume_claims: the Pod's claims split by PreFilter (None for a Pod without claims).
        has_static_bindings: some node's decisions bind a pre-provisioned PV.
    """

    all_bound: bool = False
    pod_volumes_by_node: dict[str, PodVolumes] = field(default_factory=dict)
    pod_volume_claims: PodVolumeClaims | None = None
    has_static_bindings: bool = False

    def clone(self) -> VolumeBindingState:
        """Upstream's ``Clone`` returns the same pointer."""
        return self


def _read_state(state: CycleState) -> VolumeBindingState | None:
    s = state.data.get(STATE_KEY)
    return s if isinstance(s, VolumeBindingState) else None


class VolumeBinding:
    """PreFilter, Filter, PreScore, Score, Reserve, PreBind (``volumebinding.VolumeBinding``).

    One instance per profile keeps the binder's assumed PVs / PVCs across cycles (as upstream's
    binder), so a PV chosen in Reserve is not offered to the next Pod.
    """

    name = NAME

    def sign_pod(self, pod: PodInfo, snapshot: SnapshotLister | None) -> signers.SignResult:
        """``SignPod`` (upstream ``pkg/scheduler/framework/plugins/volumebinding/volume_binding.go``): the Pod's
        volume sources but ConfigMaps and Secrets. ``snapshot`` is unused by most plugins."""
        return signers.volumes_fragment(pod)


    def __init__(self, args: VolumeBindingArgs | None = None, *, storage_capacity_scoring: bool = True,
                 handle: Handle | None = None) -> None:
        self.args = args or VolumeBindingArgs()
        self.handle = handle
        self.binder = VolumeBinder()
        self.bind_poll_interval = BIND_POLL_INTERVAL_SECONDS
        """Seconds between PreBind's checks (upstream: 1 s; tests shorten it)."""
        self.storage_capacity_scoring = storage_capacity_scoring
        self.scorer: VolumeCapacityScorer | None = (
            build_scorer_function(self.args.shape) if storage_capacity_scoring else None)

    @classmethod
    def create(cls, args: dict[str, Any], handle: Handle) -> VolumeBinding:
        """``New``: the plugin with its args; ``handle`` gives PreBind its API client and object
        lister (without a client, PreBind reports an Error for a Pod whose volumes need binding).

        Raises:
            ConfigError: invalid args (see :meth:`VolumeBindingArgs.decode`).
        """
        return cls(VolumeBindingArgs.decode(args), handle=handle)

    # -- queueing hints -------------------------------------------------------------------------------
    def events_to_register(self) -> list[ClusterEventWithHint]:
        """``EventsToRegister``: StorageClass / PVC / PV / Node / CSINode / CSIDriver / CSIStorageCapacity
        changes, with upstream's queueing hints."""
        add_update = ActionType.ADD | ActionType.UPDATE
        return [
            ClusterEventWithHint(ClusterEvent(Resource.STORAGE_CLASS, add_update), _hint_storage_class_change),
            ClusterEventWithHint(ClusterEvent(Resource.PERSISTENT_VOLUME_CLAIM, add_update), _hint_pvc_change),
            ClusterEventWithHint(ClusterEvent(Resource.PERSISTENT_VOLUME, add_update)),
            ClusterEventWithHint(ClusterEvent(Resource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL)),
            ClusterEventWithHint(ClusterEvent(Resource.CSI_NODE, add_update), _hint_csi_node_change),
            ClusterEventWithHint(ClusterEvent(Resource.CSI_DRIVER, ActionType.UPDATE), _hint_csi_driver_change),
            ClusterEventWithHint(ClusterEvent(Resource.CSI_STORAGE_CAPACITY, add_update), _hint_capacity_change),
        ]

    # -- PreFilter ------------------------------------------------------------------------------------
    def _pod_has_pvcs(self, state: CycleState, pod: PodInfo) -> tuple[bool, str | None]:
        """``podHasPVCs``: (has PVC-backed volumes, the first problem with one of their claims)."""
        objects = st.cycle_objects(state)
        has = False
        for ref in st.pod_volume_refs(pod.pod):
            has = True
            pvc = objects.get("PersistentVolumeClaim", st.claim_key(pod.namespace, ref.claim))
            if pvc is None:
                if ref.ephemeral:
                    return has, ("waiting for ephemeral volume controller to create the persistentvolumeclaim "
                                 f'"{ref.claim}"')
                return has, f'persistentvolumeclaim "{ref.claim}" not found'
            if st.status(pvc).get("phase") == "Lost":
                return has, (f'persistentvolumeclaim "{st.name(pvc)}" bound to non-existent persistentvolume '
                             f'"{st.spec(pvc).get("volumeName") or ""}"')
            if st.deletion_timestamp(pvc) is not None:
                return has, f'persistentvolumeclaim "{st.name(pvc)}" is being deleted'
            if ref.ephemeral:
                err = st.volume_is_for_pod(pod.pod, pvc)
                if err is not None:
                    return has, err
            try:
                st.claim_storage_request(pvc)
            except PodParseError as exc:
                return has, str(exc)
        return has, None

    def pre_filter(self, state: CycleState, pod: PodInfo,
                   nodes: list[NodeInfo]) -> tuple[set[str] | None, Status]:
        """Skip for a Pod without PVC-backed volumes (an empty state is still written);
        UnschedulableAndUnresolvable for a missing / lost / deleted / foreign claim or an unbound
        immediate claim; Error when a claim's StorageClass has no ``volumeBindingMode``."""
        has, problem = self._pod_has_pvcs(state, pod)
        if problem is not None:
            return None, Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [problem], NAME)
        if not has:
            state.write(STATE_KEY, VolumeBindingState())
            return None, Status.skip()
        try:
            claims = self.binder.get_pod_volume_claims(st.cycle_objects(state), pod.pod)
        except st.StorageError as exc:
            return None, Status.error(str(exc), NAME)
        if claims.unbound_claims_immediate:
            return None, Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [ERR_UNBOUND_IMMEDIATE], NAME)
        state.write(STATE_KEY, VolumeBindingState(pod_volume_claims=claims))
        return None, Status.success()

    # -- Filter ---------------------------------------------------------------------------------------
    def filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status:
        """UnschedulableAndUnresolvable with the binder's conflict reasons; Error on a missing cycle
        state or an upstream error (invalid claim selector, failed CSI translation)."""
        s = _read_state(state)
        if s is None:
            return Status.error(f"reading {STATE_KEY!r} from cycleState: not found", NAME)
        return self._filter_node(s, st.cycle_objects(state), pod, s.pod_volume_claims or PodVolumeClaims(),
                                 node_info)

    def filter_nodes(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> list[Status] | None:
        """:meth:`filter` on each of ``nodes`` (batch form, the same per-node work and state writes
        without the per-call lookups); None when every node passes."""
        s = _read_state(state)
        if s is None:
            return [Status.error(f"reading {STATE_KEY!r} from cycleState: not found", NAME) for _ in nodes]
        objects = st.cycle_objects(state)
        claims = s.pod_volume_claims or PodVolumeClaims()
        if claims.bound_claims and not claims.unbound_claims_delay_binding:
            check = claims.bound_check
            if check is None:
                check = claims.bound_check = BoundClaimsCheck(self.binder.pv_cache, objects, claims.bound_claims)
            if check.constant is not None:  # the same answer on every node: no per-node work
                if check.constant == (True, True):
                    byn = s.pod_volumes_by_node
                    for ni in nodes:
                        byn[ni.name] = PodVolumes()
                    return None
                bound_ok, found = check.constant
                reasons = conflict_reasons(bound_ok, True, True, found)
                return [Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, list(reasons), NAME) for _ in nodes]
        out: list[Status] | None = None
        for i, ni in enumerate(nodes):
            got = self._filter_node(s, objects, pod, claims, ni)
            if got.code:
                if out is None:
                    out = [Status.success()] * len(nodes)
                out[i] = got
        return out

    def _filter_node(self, s: VolumeBindingState, objects: ClusterObjectsLister, pod: PodInfo,
                     claims: PodVolumeClaims, node_info: NodeInfo) -> Status:
        node = node_info.node or {}
        labels = _NODE_LABELS.get(node_info, _str_labels) if claims.unbound_claims_delay_binding else None
        try:
            pod_volumes, reasons = self.binder.find_pod_volumes(objects, pod.pod, claims, node, labels)
        except (st.StorageError, csi.TranslationError) as exc:
            return Status.error(str(exc), NAME)
        except PodParseError as exc:
            return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, [str(exc)], NAME)
        if reasons:
            return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, reasons, NAME)
        s.pod_volumes_by_node[node_info.name] = pod_volumes
        if pod_volumes.static_bindings:
            s.has_static_bindings = True
        return Status.success()

    # -- PreScore / Score -----------------------------------------------------------------------------
    def pre_score(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> Status:
        """Skip only without a scorer, or when neither static bindings nor capacity scoring apply
        (never with StorageCapacityScoring on: Pods without claims score 0 everywhere)."""
        if self.scorer is None:
            return Status.skip()
        s = _read_state(state)
        if s is None:
            return Status.error(f"reading {STATE_KEY!r} from cycleState: not found", NAME)
        if s.has_static_bindings or self.storage_capacity_scoring:
            return Status.success()
        return Status.skip()

    def score(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> tuple[int, Status]:
        """0..100 from :mod:`.scorer`: static bindings grouped by the PV's ``storageClassName``
        (requested and capacity summed); without static bindings, provisioned claims grouped by their
        class (requests summed, capacity = that class's CSIStorageCapacity ``capacity``, not summed);
        0 when the node has no decisions (e.g. a Pod without claims)."""
        if self.scorer is None:
            return 0, Status.success()
        s = _read_state(state)
        if s is None:
            return 0, Status.error(f"reading {STATE_KEY!r} from cycleState: not found", NAME)
        pv = s.pod_volumes_by_node.get(node_info.name)
        if pv is None:
            return 0, Status.success()
        classes: dict[str, StorageResource] = {}
        if pv.static_bindings or not self.storage_capacity_scoring:
            for b in pv.static_bindings:
                r = classes.setdefault(b.storage_class_name(), StorageResource())
                res = b.storage_resource()
                r.requested += res.requested
                r.capacity += res.capacity
        else:
            for d in pv.dynamic_provisions:
                if d.node_capacity is None:
                    continue
                r = classes.setdefault(_provision_class(d.pvc), StorageResource())
                r.capacity = st.capacity_value(d.node_capacity)
                req = st.claim_storage_request(d.pvc)
                r.requested += 0 if req is None else quantity.value(req)
        return self.scorer(classes), Status.success()

    def score_nodes(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> tuple[list[int], Status]:
        """:meth:`score` for each of ``nodes`` in order (batch form): all 0 at once when no node's
        decisions bind or provision anything (a Pod without claims, or whose claims are all bound:
        :meth:`score` then groups no class and the scorer gives 0), else node by node."""
        if self.scorer is None:
            return [0] * len(nodes), Status.success()
        s = _read_state(state)
        if s is None:
            return [], Status.error(f"reading {STATE_KEY!r} from cycleState: not found", NAME)
        if not any(pv.static_bindings or pv.dynamic_provisions for pv in s.pod_volumes_by_node.values()):
            return [0] * len(nodes), Status.success()
        out: list[int] = []
        for ni in nodes:
            sc, st_ = self.score(state, pod, ni)
            if not st_.is_success():
                return [], st_
            out.append(sc)
        return out, Status.success()

    # -- Reserve --------------------------------------------------------------------------------------
    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        """Assume the node's decisions in memory; sets ``all_bound``. Error when the state is missing
        or an object changed since Filter read it."""
        s = _read_state(state)
        if s is None:
            return Status.error(f"reading {STATE_KEY!r} from cycleState: not found", NAME)
        pv = s.pod_volumes_by_node.get(node_name)
        if pv is None:
            s.all_bound = True
            return Status.success()
        try:
            s.all_bound = self.binder.assume_pod_volumes(st.cycle_objects(state), pod.pod, node_name, pv)
        except st.StorageError as exc:
            return Status.error(str(exc), NAME)
        return Status.success()

    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        """Revert what Reserve assumed for ``node_name`` (idempotent)."""
        s = _read_state(state)
        if s is None:
            return
        pv = s.pod_volumes_by_node.get(node_name)
        if pv is not None:
            self.binder.revert_assumed_pod_volumes(pv)

    # -- PreBind --------------------------------------------------------------------------------------
    def pre_bind_pre_flight(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        """``PreBindPreFlight``: Skip when Reserve found every claim bound (or the Pod has none); Error
        ``no pod volume found for node "X"`` when Filter recorded no decisions for the node."""
        s = _read_state(state)
        if s is None:
            return Status.error(f"reading {STATE_KEY!r} from cycleState: not found", NAME)
        if s.all_bound:
            return Status.skip()
        if node_name not in s.pod_volumes_by_node:
            return Status.error(f'no pod volume found for node "{node_name}"', NAME)
        return Status.success()

    async def pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        """``PreBind``: :func:`.bind.bind_pod_volumes` with ``bindTimeoutSeconds``; Success when every
        claim is bound, Error with upstream's text otherwise (the framework unreserves and retries)."""
        s = _read_state(state)
        if s is None:
            return Status.error(f"reading {STATE_KEY!r} from cycleState: not found", NAME)
        if s.all_bound:
            return Status.success()
        pod_volumes = s.pod_volumes_by_node.get(node_name)
        if pod_volumes is None:
            return Status.error(f'no pod volume found for node "{node_name}"', NAME)
        handle = self.handle
        if handle is None or handle.client is None or handle.objects is None:
            return Status.error("VolumeBinding PreBind needs the Handle's API client and object lister", NAME)
        try:
            await bind_pod_volumes(self.binder, handle.client, handle.objects, pod.pod, node_name, pod_volumes,
                                   float(self.args.bind_timeout_seconds), self.bind_poll_interval)
        except BindError as exc:
            return Status.error(str(exc), NAME)
        return Status.success()


def _str_labels(node_info: NodeInfo) -> dict[str, str]:
    return st.labels(node_info.node)


_NODE_LABELS: NodeMemo[dict[str, str]] = NodeMemo(NAME + "/string labels", NodeInput.NODE)
"""``storage.labels`` of the Node object (its string-valued labels), per Node object; read only."""


def _provision_class(pvc: dict[str, Any]) -> str:
    """``*pvc.Spec.StorageClassName`` (the beta annotation as a fallback where upstream would panic)."""
    v = st.spec(pvc).get("storageClassName")
    return v if isinstance(v, str) else st.claim_class(pvc)


# -- queueing hints (volume_binding.go isSchedulableAfter*) -----------------------------------------------

def _hint_pvc_change(pod: dict[str, Any], old: Any, new: Any) -> QueueingHint:
    """A claim of the Pod (by name, ephemeral names included) in its namespace was added or updated."""
    if not isinstance(new, dict) or st.namespace(new) != st.namespace(pod):
        return QueueingHint.QUEUE_SKIP
    names = {ref.claim for ref in st.pod_volume_refs(pod)}
    return QueueingHint.QUEUE if st.name(new) in names else QueueingHint.QUEUE_SKIP


def _hint_storage_class_change(pod: dict[str, Any], old: Any, new: Any) -> QueueingHint:
    """Any new StorageClass; an update only when ``allowedTopologies`` changed."""
    if old is None:
        return QueueingHint.QUEUE
    if (old.get("allowedTopologies") or None) != (new.get("allowedTopologies") or None):
        return QueueingHint.QUEUE
    return QueueingHint.QUEUE_SKIP


def _hint_csi_node_change(pod: dict[str, Any], old: Any, new: Any) -> QueueingHint:
    """Any new CSINode; an update only when its migrated-plugins annotation changed."""
    if old is None:
        return QueueingHint.QUEUE
    if st.annotation(old, st.ANN_MIGRATED_PLUGINS) != st.annotation(new, st.ANN_MIGRATED_PLUGINS):
        return QueueingHint.QUEUE
    return QueueingHint.QUEUE_SKIP


def _hint_csi_driver_change(pod: dict[str, Any], old: Any, new: Any) -> QueueingHint:
    """A CSIDriver of one of the Pod's inline CSI volumes stopped tracking storage capacity."""
    for v in st.pod_volumes(pod):
        src = v.get("csi")
        if not isinstance(src, dict) or src.get("driver") != st.name(new):
            continue
        if st.spec(old).get("storageCapacity") is True and st.spec(new).get("storageCapacity") is not True:
            return QueueingHint.QUEUE
    return QueueingHint.QUEUE_SKIP


def _hint_capacity_change(pod: dict[str, Any], old: Any, new: Any) -> QueueingHint:
    """Any new CSIStorageCapacity; an update only when its volume limit grew (or appeared)."""
    if old is None:
        return QueueingHint.QUEUE
    new_limit, old_limit = st.volume_limit(new), st.volume_limit(old)
    if new_limit is not None and (old_limit is None or quantity.value(new_limit) > quantity.value(old_limit)):
        return QueueingHint.QUEUE
    return QueueingHint.QUEUE_SKIP
