"""The scheduler's volume binder: which PVs / provisioning a Pod's claims get on a node.

Upstream: ``pkg/scheduler/framework/plugins/volumebinding/binder.go`` (``GetPodVolumeClaims``,
``FindPodVolumes``, ``checkBoundClaims``, ``findMatchingVolumes``, ``checkVolumeProvisions``,
``hasEnoughCapacity``, ``nodeHasAccess``, ``AssumePodVolumes``, ``RevertAssumedPodVolumes``,
``tryTranslatePVToCSI``, the ``ErrReason*`` strings; PreBind's half is :mod:`.bind`) over the assume
caches of :mod:`.assume_cache`, and ``component-helpers/storage/volume`` (see :mod:`.storage`).

Everything is computed from the cycle's :class:`~py_scheduler.cache.snapshot.ClusterObjectsLister` plus this
binder's assumed objects. Reserve assumes in memory only (a PV pre-bound to the claim, a PVC with the
``volume.kubernetes.io/selected-node`` annotation) so later Pods of the same run see the decision;
the API updates of upstream's PreBind (``BindPodVolumes``) are :mod:`.bind`'s.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal

from py_scheduler.framework import quantity
from py_scheduler.framework.lister import ClusterObjectsLister
from py_scheduler.framework.objects import Obj
from py_scheduler.plugins.helpers import csi_translation as csi
from py_scheduler.plugins.helpers import storage as st
from py_scheduler.plugins.helpers.node_selector import LabelSelector, NodeSelector, parse_label_selector
from py_scheduler.plugins.volume_binding.assume_cache import AssumeCache

__all__ = [
    "ERR_REASON_BIND_CONFLICT",
    "ERR_REASON_NODE_CONFLICT",
    "ERR_REASON_NOT_ENOUGH_SPACE",
    "ERR_REASON_PV_NOT_EXIST",
    "BindingInfo",
    "BoundClaimsCheck",
    "DelayBindingPlan",
    "DynamicProvision",
    "PodVolumeClaims",
    "PodVolumes",
    "StorageResource",
    "VolumeBinder",
    "conflict_reasons",
]

ERR_REASON_BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"
"""``ErrReasonBindConflict``: an unbound WaitForFirstConsumer claim has no PV and cannot be provisioned."""
ERR_REASON_NODE_CONFLICT = "node(s) didn't match PersistentVolume's node affinity"
"""``ErrReasonNodeConflict``: a bound claim's PV node affinity rejects the node."""
ERR_REASON_NOT_ENOUGH_SPACE = "node(s) did not have enough free storage"
"""``ErrReasonNotEnoughSpace``: no CSIStorageCapacity reachable from the node fits the claim."""
ERR_REASON_PV_NOT_EXIST = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
"""``ErrReasonPVNotExist``: a bound claim names a PV that does not exist."""


@dataclass(slots=True)
class StorageResource:
    """Requested and capacity bytes of one storage class on a node (``StorageResource``)."""

    requested: int = 0
    capacity: int = 0


@dataclass(slots=True)
class BindingInfo:
    """A static binding decision (``BindingInfo``): ``pvc`` is to be bound to ``pv``."""

    pvc: Obj
    pv: Obj

    def storage_class_name(self) -> str:
        """``StorageClassName``: the PV's ``spec.storageClassName`` (not the beta annotation)."""
        v = st.spec(self.pv).get("storageClassName")
        return v if isinstance(v, str) else ""

    def storage_resource(self) -> StorageResource:
        """``StorageResource``: the claim's request and the PV's capacity, ``Quantity.Value()`` bytes."""
        req = st.claim_storage_request(self.pvc) or Decimal(0)
        cap = st.pv_capacity(self.pv) or Decimal(0)
        return StorageResource(quantity.value(req), quantity.value(cap))


@dataclass(slots=True)
class DynamicProvision:
    """A claim to provision on the node (``DynamicProvision``); ``node_capacity`` is the
    CSIStorageCapacity that showed room for it (None when capacity is not tracked)."""

    pvc: Obj
    node_capacity: Obj | None = None


@dataclass(slots=True)
class PodVolumes:
    """The Pod's volume decisions for one node (``PodVolumes``)."""

    static_bindings: list[BindingInfo] = field(default_factory=list)
    dynamic_provisions: list[DynamicProvision] = field(default_factory=list)


@dataclass(slots=True)
class PodVolumeClaims:
    """The Pod's claims split by binding state (``PodVolumeClaims``); ``unbound_volumes_delay_binding``
    maps a storage class name to its PVs (assumed versions included).

    ``matchers`` (claim key -> :class:`~.storage.ClaimMatcher`), ``capacities`` (class -> usable
    CSIStorageCapacities), ``bound_check`` (the bound claims' PVs, see :class:`BoundClaimsCheck`) and
    ``delay_plan`` (the unbound claims' split and order, see :class:`DelayBindingPlan`) are per-cycle
    caches of the node-independent work, filled by the first Filter call that needs them, so each node
    only evaluates what depends on it.
    """

    bound_claims: list[Obj] = field(default_factory=list)
    unbound_claims_delay_binding: list[Obj] = field(default_factory=list)
    unbound_claims_immediate: list[Obj] = field(default_factory=list)
    unbound_volumes_delay_binding: dict[str, list[Obj]] = field(default_factory=dict)
    matchers: dict[str, st.ClaimMatcher] = field(default_factory=dict)
    capacities: dict[str, list[tuple[int, Obj, LabelSelector | None]]] = field(default_factory=dict)
    bound_check: BoundClaimsCheck | None = None
    delay_plan: DelayBindingPlan | None = None
    capacity_sizes: dict[int, int | None] = field(default_factory=dict)
    """Claim object id -> the bytes a CSIStorageCapacity must allow, None when the claim's capacity is
    not checked (no storage request, or a driver without ``storageCapacity``): node-independent,
    worked out once per cycle (a Pod of 2 000 claims on 2 000 nodes parsed each request per node: 4 s)."""

    def matcher(self, pvc: Obj) -> st.ClaimMatcher:
        """The claim's :class:`~.storage.ClaimMatcher` over its class's PVs (built once per cycle)."""
        key = _pvc_key(pvc)
        m = self.matchers.get(key)
        if m is None:
            m = self.matchers[key] = st.ClaimMatcher(
                pvc, self.unbound_volumes_delay_binding.get(st.claim_class(pvc), []))
        return m


def _pv_key(pv: Obj) -> str:
    return st.name(pv)


def _pvc_key(pvc: Obj) -> str:
    return st.claim_key(st.namespace(pvc), st.name(pvc))


def _pvc_size(pvc: Obj) -> Decimal:
    try:
        return st.claim_storage_request(pvc) or Decimal(0)
    except ValueError:
        return Decimal(0)


def conflict_reasons(bound_ok: bool, unbound_ok: bool, sufficient: bool, pvs_found: bool) -> list[str]:
    """``FindPodVolumes``' conflict reasons in upstream's order (empty when the node fits)."""
    if bound_ok and unbound_ok and sufficient and pvs_found:
        return []
    out: list[str] = []
    if not bound_ok:
        out.append(ERR_REASON_NODE_CONFLICT)
    if not unbound_ok:
        out.append(ERR_REASON_BIND_CONFLICT)
    if not sufficient:
        out.append(ERR_REASON_NOT_ENOUGH_SPACE)
    if not pvs_found:
        out.append(ERR_REASON_PV_NOT_EXIST)
    return out


class VolumeBinder:
    """``volumeBinder``: the PV / PVC assume caches and the binding decisions.

    Methods take the cycle's ``ClusterObjectsLister``; errors upstream returns as Go ``error`` (Filter /
    PreFilter status Error) raise :class:`~.storage.StorageError` or
    :class:`~.csi_translation.TranslationError`.
    """

    def __init__(self) -> None:
        self.pv_cache = AssumeCache("PersistentVolume", _pv_key)
        self.pvc_cache = AssumeCache("PersistentVolumeClaim", _pvc_key)

    # -- claims ---------------------------------------------------------------------------------------
    def _is_volume_bound(self, objects: ClusterObjectsLister, pod: Obj,
                         ref: st.PodVolumeRef) -> tuple[bool, Obj | None]:
        """``isVolumeBound``: (fully bound?, the claim from the PVC cache)."""
        key = st.claim_key(st.namespace(pod), ref.claim)
        pvc = self.pvc_cache.get(objects, key)
        if pvc is None:
            raise st.StorageError(f'error getting PVC "{key}": persistentvolumeclaim "{key}" not found')
        if ref.ephemeral:
            err = st.volume_is_for_pod(pod, pvc)
            if err is not None:
                raise st.StorageError(err)
        return st.is_pvc_fully_bound(pvc), pvc

    def are_pod_volumes_bound(self, objects: ClusterObjectsLister, pod: Obj) -> bool:
        """``arePodVolumesBound``: every PVC-backed volume is fully bound (a missing claim counts as not)."""
        for ref in st.pod_volume_refs(pod):
            try:
                bound, _ = self._is_volume_bound(objects, pod, ref)
            except st.StorageError:
                return False
            if not bound:
                return False
        return True

    def get_pod_volume_claims(self, objects: ClusterObjectsLister, pod: Obj) -> PodVolumeClaims:
        """``GetPodVolumeClaims``: the Pod's claims as bound, unbound WaitForFirstConsumer (delay binding)
        and unbound immediate (incl. pre-bound to a PV but not yet fully bound), plus the PVs of each
        delay-binding claim's class.

        Raises:
            st.StorageError: a claim is missing, is not owned by the Pod (ephemeral), or its class has
            no ``volumeBindingMode``.
        """
        out = PodVolumeClaims()
        for ref in st.pod_volume_refs(pod):
            bound, pvc = self._is_volume_bound(objects, pod, ref)
            if pvc is None:
                continue
            if bound:
                out.bound_claims.append(pvc)
                continue
            cls_name = st.claim_class(pvc)
            sc = objects.get("StorageClass", cls_name) if cls_name else None
            delay = st.is_delay_binding_mode(pvc, sc)
            if delay and not st.spec(pvc).get("volumeName"):
                out.unbound_claims_delay_binding.append(pvc)
            else:
                out.unbound_claims_immediate.append(pvc)
        for pvc in out.unbound_claims_delay_binding:
            cls_name = st.claim_class(pvc)
            if cls_name in out.unbound_volumes_delay_binding:
                continue
            out.unbound_volumes_delay_binding[cls_name] = self.pv_cache.by_index(objects, st.pv_class, cls_name)
        return out

    # -- filter ---------------------------------------------------------------------------------------
    def find_pod_volumes(self, objects: ClusterObjectsLister, pod: Obj, claims: PodVolumeClaims,
                         node: Obj, node_labels: dict[str, str] | None = None) -> tuple[PodVolumes, list[str]]:
        """``FindPodVolumes``: (the node's volume decisions, conflict reasons; empty when it fits).
        ``node_labels``: ``storage.labels(node)`` when the caller has it (read only).

        Reasons, in upstream's order: ``ERR_REASON_NODE_CONFLICT``, ``ERR_REASON_BIND_CONFLICT``,
        ``ERR_REASON_NOT_ENOUGH_SPACE``, ``ERR_REASON_PV_NOT_EXIST``.

        Raises:
            st.StorageError / csi.TranslationError: upstream's errors (Filter status Error).
        """
        bound_ok = pvs_found = True
        if claims.bound_claims:
            check = claims.bound_check
            if check is None:
                check = claims.bound_check = BoundClaimsCheck(self.pv_cache, objects, claims.bound_claims)
            bound_ok, pvs_found = check.check(objects, node)
        if not claims.unbound_claims_delay_binding:
            return PodVolumes(), conflict_reasons(bound_ok, True, True, pvs_found)
        node_name = st.name(node)
        plan = claims.delay_plan
        if plan is None:
            plan = claims.delay_plan = DelayBindingPlan(claims.unbound_claims_delay_binding)
        for _, selected in plan.selected:
            if selected != node_name:
                return PodVolumes(), conflict_reasons(bound_ok, False, True, pvs_found)
        if node_labels is None:
            node_labels = st.labels(node)
        unbound_ok = sufficient = True
        static: list[BindingInfo] = []
        dynamic: list[DynamicProvision] = []
        to_provision = [pvc for pvc, _ in plan.selected]
        if plan.to_match:
            unbound_ok, static, unmatched = self._find_matching_volumes(plan, claims, node_labels)
            to_provision.extend(unmatched)
        if to_provision:
            unbound_ok, sufficient, dynamic = self._check_volume_provisions(objects, claims, to_provision, node_labels,
                                                                            plan)
        return PodVolumes(static, dynamic), conflict_reasons(bound_ok, unbound_ok, sufficient, pvs_found)

    def _find_matching_volumes(self, plan: DelayBindingPlan, pod_claims: PodVolumeClaims,
                               node_labels: dict[str, str]) -> tuple[bool, list[BindingInfo], list[Obj]]:
        """``findMatchingVolumes``: claims in increasing size order (``plan.to_match``) each take the
        smallest fitting PV not chosen before; returns (all matched, bindings, claims left for
        provisioning)."""
        chosen: dict[str, Obj] = {}
        bindings: list[BindingInfo] = []
        unmatched: list[Obj] = []
        found = True
        matchers = plan.matchers
        for i, pvc in enumerate(plan.to_match):
            m = matchers[i]
            if m is None:
                m = matchers[i] = pod_claims.matcher(pvc)
            pv = m.match(node_labels, chosen)
            if pv is None:
                unmatched.append(pvc)
                found = False
                continue
            chosen[st.name(pv)] = pv
            bindings.append(BindingInfo(pvc, pv))
        return found, bindings, unmatched

    def _check_volume_provisions(self, objects: ClusterObjectsLister, pod_claims: PodVolumeClaims, claims: list[Obj],
                                 node_labels: dict[str, str],
                                 plan: DelayBindingPlan | None = None) -> tuple[bool, bool, list[DynamicProvision]]:
        """``checkVolumeProvisions``: (provisioning possible, enough capacity, provisions). ``plan``
        keeps each claim's class lookup for the cycle (:meth:`DelayBindingPlan.provisioner`)."""
        out: list[DynamicProvision] = []
        for pvc in claims:
            got = plan.provisioner(objects, pvc) if plan is not None else _claim_provisioner(objects, pvc)
            if got is None:
                return False, True, []
            sc, provisioner, cls_name = got
            if not st.match_topology_selector_terms(sc.get("allowedTopologies"), node_labels):
                return False, True, []
            ok, cap = self._has_enough_capacity(objects, pod_claims, provisioner, pvc, cls_name, node_labels)
            if not ok:
                return True, False, []
            out.append(DynamicProvision(pvc, cap))
        return True, True, out

    def _has_enough_capacity(self, objects: ClusterObjectsLister, pod_claims: PodVolumeClaims, provisioner: str,
                             pvc: Obj, class_name: str, node_labels: dict[str, str]) -> tuple[bool, Obj | None]:
        """``hasEnoughCapacity``: capacity is checked only for a claim with a storage request whose
        provisioner is a CSIDriver with ``storageCapacity: true``; then some CSIStorageCapacity of the
        class, reachable from the node (``nodeTopology``), must allow a volume of that size
        (``maximumVolumeSize`` if set, else ``capacity``). Objects are tried in namespace/name order
        (upstream's lister order is unspecified)."""
        sizes = pod_claims.capacity_sizes
        if id(pvc) in sizes:
            size_bytes = sizes[id(pvc)]
        else:
            size = st.claim_storage_request(pvc)
            driver = objects.get("CSIDriver", provisioner) if size is not None else None
            size_bytes = sizes[id(pvc)] = (quantity.value(size) if size is not None and driver is not None
                                           and st.spec(driver).get("storageCapacity") is True else None)
        if size_bytes is None:
            return True, None
        caps = pod_claims.capacities.get(class_name)
        if caps is None:
            caps = pod_claims.capacities[class_name] = _class_capacities(objects, class_name)
        for limit, cap, topology in caps:
            if limit >= size_bytes and topology is not None and topology.matches(node_labels):
                return True, cap
        return False, None

    # -- reserve --------------------------------------------------------------------------------------
    def assume_pod_volumes(self, objects: ClusterObjectsLister, pod: Obj, node_name: str,
                           pod_volumes: PodVolumes) -> bool:
        """``AssumePodVolumes``: True when every claim is already fully bound; otherwise assume each
        static binding's PV bound to its claim and each provisioned claim annotated with the node,
        replacing ``pod_volumes``' entries by the assumed objects, and return False.

        Raises:
            st.StorageError: an object changed since it was read (the assumed ones are reverted).
        """
        if self.are_pod_volumes_bound(objects, pod):
            return True
        new_bindings: list[BindingInfo] = []
        for b in pod_volumes.static_bindings:
            new_pv, dirty = st.get_bind_volume_to_claim(b.pv, b.pvc)
            if dirty:
                try:
                    self.pv_cache.assume(objects, new_pv)
                except st.StorageError:
                    self._revert_pvs(new_bindings)
                    raise
            new_bindings.append(BindingInfo(b.pvc, new_pv))
        new_provisions: list[DynamicProvision] = []
        for p in pod_volumes.dynamic_provisions:
            meta = dict(st.meta(p.pvc))
            meta["annotations"] = {**st.annotations_of(p.pvc), st.ANN_SELECTED_NODE: node_name}
            clone = dict(p.pvc, metadata=meta)
            try:
                self.pvc_cache.assume(objects, clone)
            except st.StorageError:
                self._revert_pvs(new_bindings)
                self._revert_pvcs(d.pvc for d in new_provisions)
                raise
            new_provisions.append(DynamicProvision(clone))
        pod_volumes.static_bindings = new_bindings
        pod_volumes.dynamic_provisions = new_provisions
        return False

    def revert_assumed_pod_volumes(self, pod_volumes: PodVolumes) -> None:
        """``RevertAssumedPodVolumes``."""
        self._revert_pvs(pod_volumes.static_bindings)
        self._revert_pvcs(d.pvc for d in pod_volumes.dynamic_provisions)

    def _revert_pvs(self, bindings: Iterable[BindingInfo]) -> None:
        for b in bindings:
            self.pv_cache.restore(b.pv)

    def _revert_pvcs(self, claims: Iterable[Obj]) -> None:
        for c in claims:
            self.pvc_cache.restore(c)


class DelayBindingPlan:
    """The node-independent part of ``FindPodVolumes`` for the unbound WaitForFirstConsumer claims,
    done once per Pod and cycle (kept in the cycle's :class:`PodVolumeClaims`).

    Inputs: the claims (``PodVolumeClaims.unbound_claims_delay_binding``, fixed for the cycle).
    ``selected``: the claims that already carry ``volume.kubernetes.io/selected-node`` with that node
    name, in claim order (a node with another name fails them all, as upstream's first mismatch);
    ``to_match``: the others in increasing size order (``byPVCSize``, stable), each with its
    :class:`~.storage.ClaimMatcher` filled on first use (a malformed claim raises on every node that
    reaches it, as before).
    """

    __slots__ = ("_provisioners", "matchers", "selected", "to_match")

    def __init__(self, claims: list[Obj]) -> None:
        self.selected: list[tuple[Obj, str]] = []
        to_match: list[Obj] = []
        for pvc in claims:
            selected = st.annotation(pvc, st.ANN_SELECTED_NODE)
            if selected is not None:
                self.selected.append((pvc, selected))
            else:
                to_match.append(pvc)
        self.to_match = sorted(to_match, key=_pvc_size)
        self.matchers: list[st.ClaimMatcher | None] = [None] * len(self.to_match)
        self._provisioners: dict[int, tuple[tuple[Obj, str, str] | None, str | None]] = {}

    def provisioner(self, objects: ClusterObjectsLister, pvc: Obj) -> tuple[Obj, str, str] | None:
        """:func:`_claim_provisioner` of one of the plan's claims, looked up once per cycle (keyed by
        the claim object's identity; the plan holds the claims, so identities are not reused).

        Raises:
            st.StorageError: as :func:`_claim_provisioner`, on every call.
        """
        hit = self._provisioners.get(id(pvc))
        if hit is None:
            try:
                hit = (_claim_provisioner(objects, pvc), None)
            except st.StorageError as exc:
                hit = (None, str(exc))
            self._provisioners[id(pvc)] = hit
        if hit[1] is not None:
            raise st.StorageError(hit[1])
        return hit[0]


def _claim_provisioner(objects: ClusterObjectsLister, pvc: Obj) -> tuple[Obj, str, str] | None:
    """The node-independent head of ``checkVolumeProvisions`` for one claim: (StorageClass,
    provisioner, class name), or None when the class cannot provision dynamically (no provisioner,
    ``kubernetes.io/no-provisioner``).

    Raises:
        st.StorageError: the claim has no class, or its StorageClass does not exist.
    """
    key = st.claim_key(st.namespace(pvc), st.name(pvc))
    cls_name = st.claim_class(pvc)
    if not cls_name:
        raise st.StorageError(f'no class for claim "{key}"')
    sc = objects.get("StorageClass", cls_name)
    if sc is None:
        raise st.StorageError(f'failed to find storage class "{cls_name}"')
    provisioner = sc.get("provisioner")
    if not isinstance(provisioner, str) or not provisioner or provisioner == st.NOT_SUPPORTED_PROVISIONER:
        return None
    return sc, provisioner, cls_name


class _BoundPV:
    """One bound claim's PV as :class:`BoundClaimsCheck` keeps it: the compiled node affinity of the
    PV as stored and, for an in-tree PV whose CSI migration is on, of its CSI translation (computed on
    the first node whose CSINode lists the plugin as migrated; a translation error is kept as its
    message and raised again on every such node)."""

    __slots__ = ("_translated", "affinity", "migratable", "pv")

    def __init__(self, pv: Obj) -> None:
        self.pv = pv
        plugin = csi.in_tree_plugin_for_pv(pv)
        self.migratable: str | None = (plugin.plugin_name if plugin is not None
                                       and plugin.plugin_name in csi.MIGRATION_ON else None)
        self.affinity = st.compiled_node_affinity(pv)
        self._translated: NodeSelector | bool | str | None = None

    def translated_affinity(self) -> NodeSelector | bool:
        """The compiled node affinity of the CSI translation of the PV.

        Raises:
            csi.TranslationError: upstream's ``could not translate pv: ...``.
        """
        t = self._translated
        if t is None:
            try:
                t = st.compiled_node_affinity(csi.translate_pv_to_csi(self.pv))
            except csi.TranslationError as exc:
                t = f"could not translate pv: {exc}"
            self._translated = t
        if isinstance(t, str):
            raise csi.TranslationError(t)
        return t


class BoundClaimsCheck:
    """``checkBoundClaims`` (binder.go) split into what is the same on every node, done once per
    Pod and cycle, and :meth:`check`, done per node.

    Inputs (read once, at construction, in the first Filter call of the cycle): each bound claim's
    ``spec.volumeName`` and that PV from the binder's PV assume cache (claims after the first one whose
    PV is missing are not looked at: upstream returns there on every node), each PV's in-tree plugin
    and compiled node affinity. Per node :meth:`check` reads only the node's labels and, when some PV
    is a migratable in-tree PV, its CSINode's ``storage.alpha.kubernetes.io/migrated-plugins``
    annotation; when neither can matter (no CSINode object at all, or no migratable PV, and no PV
    with a node selector) the answer is computed once (``constant``). Valid for one cycle (the
    snapshot's objects and the assume caches do not change while a Pod's Filters run); it lives in
    the cycle's :class:`PodVolumeClaims`, so nothing survives the cycle. The result equals
    ``checkBoundClaims`` read straight from the stores on every node, errors included (the reference
    form is in ``tests/unit/plugins/test_volume_binding_memo.py``).
    """

    __slots__ = ("constant", "entries", "needs_csi_node")

    def __init__(self, pv_cache: AssumeCache, objects: ClusterObjectsLister, claims: list[Obj]) -> None:
        self.entries: list[_BoundPV | None] = []
        """Per claim in order: its PV, or None (missing PV; always the last entry)."""
        for pvc in claims:
            pv_name = st.spec(pvc).get("volumeName")
            pv = pv_cache.get(objects, pv_name) if isinstance(pv_name, str) else None
            if pv is None:
                self.entries.append(None)
                break
            self.entries.append(_BoundPV(pv))
        self.needs_csi_node = bool(objects.by_kind.get("CSINode")) and any(
            e is not None and e.migratable is not None for e in self.entries)
        """A migratable PV can be translated on some node (none can without any CSINode object)."""
        self.constant: tuple[bool, bool] | None = None
        """The answer on every node when it depends on no node (no CSINode to read, every affinity
        absent or malformed)."""
        if not self.needs_csi_node and all(e is None or isinstance(e.affinity, bool) for e in self.entries):
            self.constant = self.check(objects, {})

    def check(self, objects: ClusterObjectsLister, node: Obj) -> tuple[bool, bool]:
        """(node affinity of every bound PV satisfied, every bound PV exists) for ``node``.

        Raises:
            csi.TranslationError: a migrated in-tree PV cannot be translated (Filter status Error).
        """
        if self.constant is not None:
            return self.constant
        csi_node = objects.get("CSINode", st.name(node)) if self.needs_csi_node else None
        node_labels: dict[str, str] | None = None
        for e in self.entries:
            if e is None:
                return True, False
            affinity = e.affinity
            if e.migratable is not None and is_plugin_migrated_on_node(e.migratable, csi_node):
                affinity = e.translated_affinity()
            if affinity is True:
                continue
            if affinity is False:
                return False, True
            if node_labels is None:
                node_labels = st.labels(node)
            if not st.affinity_matches(affinity, node_labels):
                return False, True
        return True, True


def _class_capacities(objects: ClusterObjectsLister, class_name: str) -> list[tuple[int, Obj, LabelSelector | None]]:
    """The class's CSIStorageCapacities as (``volumeLimit`` bytes, object, compiled ``nodeTopology``),
    in namespace/name order (upstream's lister order is unspecified). A missing or malformed limit never
    suffices; a missing or invalid topology gives no access (``nodeHasAccess``)."""
    out: list[tuple[int, Obj, LabelSelector | None]] = []
    for cap in sorted(objects.list("CSIStorageCapacity"), key=lambda c: (st.namespace(c), st.name(c))):
        if cap.get("storageClassName") != class_name:
            continue
        limit = st.volume_limit(cap)
        if limit is None:
            continue
        topo = cap.get("nodeTopology")
        selector: LabelSelector | None = None
        if isinstance(topo, dict):
            try:
                selector = parse_label_selector(topo)
            except ValueError:
                selector = None
        out.append((quantity.value(limit), cap, selector))
    return out


def is_plugin_migrated_on_node(plugin_name: str, csi_node: Obj | None) -> bool:
    """``isPluginMigratedToCSIOnNode``: the CSINode's ``storage.alpha.kubernetes.io/migrated-plugins``
    annotation (comma-separated) lists the plugin."""
    if csi_node is None:
        return False
    value = st.annotation(csi_node, st.ANN_MIGRATED_PLUGINS)
    return value is not None and plugin_name in value.split(",")


def try_translate_pv_to_csi(pv: Obj, csi_node: Obj | None) -> Obj:
    """``tryTranslatePVToCSI``: the CSI translation of an in-tree PV whose plugin's migration is on
    and migrated on the node; otherwise the PV itself.

    Raises:
        csi.TranslationError: the translation failed (upstream: ``could not translate pv: ...``).
    """
    plugin = csi.in_tree_plugin_for_pv(pv)
    if plugin is None or plugin.plugin_name not in csi.MIGRATION_ON:
        return pv
    if not is_plugin_migrated_on_node(plugin.plugin_name, csi_node):
        return pv
    try:
        return csi.translate_pv_to_csi(pv)
    except csi.TranslationError as exc:
        raise csi.TranslationError(f"could not translate pv: {exc}") from exc
