"""Storage object helpers shared by the volume plugins (PVC / PV / StorageClass / CSI objects as dicts).

Upstream:
    ``staging/src/k8s.io/component-helpers/storage/volume/helpers.go`` (``GetPersistentVolumeClaimClass``,
    ``GetPersistentVolumeClass``, ``CheckNodeAffinity``),
    ``staging/src/k8s.io/component-helpers/storage/volume/pv_helpers.go`` (``IsDelayBindingMode``,
    ``GetBindVolumeToClaim``, ``IsVolumeBoundToClaim``, ``FindMatchingVolume``,
    ``CheckVolumeModeMismatches``, ``CheckAccessModes``, the ``pv.kubernetes.io/*`` annotations),
    ``staging/src/k8s.io/component-helpers/storage/ephemeral/ephemeral.go`` (``VolumeClaimName``,
    ``VolumeIsForPod``), ``pkg/apis/core/v1/helper/helpers.go`` (``MatchTopologySelectorTerms``,
    ``ContainsAccessMode``) and ``staging/src/k8s.io/cloud-provider/volume/helpers/zones.go``
    (``LabelZonesToSet``).

Objects are plain Kubernetes JSON dicts. The API server validates and defaults these objects, but
offline snapshot files need not be: a malformed quantity on the Pod's own claim raises
:class:`~py_scheduler.framework.errors.PodParseError` naming the object, field and value (the plugins turn
it into an UnschedulableAndUnresolvable status); a malformed PV / CSIStorageCapacity is treated as
not matching (it can never be chosen), never as an exception escaping a plugin.

Quantities are exact ``Decimal`` bytes (``Quantity.Cmp`` semantics); ``Quantity.Value()`` is
:func:`py_scheduler.framework.quantity.value` (rounds up).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any, cast

from py_scheduler.framework import quantity
from py_scheduler.framework.errors import PodParseError
from py_scheduler.framework.lister import ClusterObjectsLister, objects_of
from py_scheduler.framework.memo import PV_NODE_AFFINITY
from py_scheduler.framework.objects import Obj
from py_scheduler.framework.types import CycleState
from py_scheduler.plugins.helpers.node_selector import NodeSelector, Requirement, parse_label_selector

__all__ = [
    "ANN_BETA_STORAGE_CLASS",
    "ANN_BIND_COMPLETED",
    "ANN_BOUND_BY_CONTROLLER",
    "ANN_MIGRATED_PLUGINS",
    "ANN_SELECTED_NODE",
    "NOT_SUPPORTED_PROVISIONER",
    "ClaimMatcher",
    "PodVolumeRef",
    "StorageError",
    "affinity_matches",
    "annotation",
    "annotations_of",
    "capacity_value",
    "check_access_modes",
    "check_node_affinity",
    "claim_class",
    "claim_key",
    "claim_storage_request",
    "compiled_node_affinity",
    "contains_access_mode",
    "cycle_objects",
    "deletion_timestamp",
    "find_matching_volume",
    "get_bind_volume_to_claim",
    "is_delay_binding_mode",
    "is_pvc_fully_bound",
    "is_volume_bound_to_claim",
    "label_selector_matches",
    "label_zones_to_set",
    "labels",
    "match_topology_selector_terms",
    "meta",
    "name",
    "namespace",
    "pod_volume_refs",
    "pod_volumes",
    "pv_capacity",
    "pv_class",
    "resource_version",
    "spec",
    "status",
    "used_pvc_ref_counts",
    "volume_is_for_pod",
    "volume_limit",
    "volume_mode_mismatch",
]

ANN_BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
"""``AnnBindCompleted``: on a PVC, the PV controller finished binding it."""
ANN_BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
"""``AnnBoundByController``: the binding was made by a controller (not pre-bound by the user)."""
ANN_SELECTED_NODE = "volume.kubernetes.io/selected-node"
"""``AnnSelectedNode``: set on a PVC by the scheduler to start provisioning on that node."""
ANN_BETA_STORAGE_CLASS = "volume.beta.kubernetes.io/storage-class"
"""``v1.BetaStorageClassAnnotation``: wins over ``spec.storageClassName`` when present."""
ANN_MIGRATED_PLUGINS = "storage.alpha.kubernetes.io/migrated-plugins"
"""``v1.MigratedPluginsAnnotationKey`` on a CSINode: in-tree plugins migrated to CSI on that node."""
NOT_SUPPORTED_PROVISIONER = "kubernetes.io/no-provisioner"
"""``NotSupportedProvisioner``: a StorageClass that cannot provision dynamically."""
LABEL_MULTI_ZONE_DELIMITER = "__"
"""``cloudvolume.LabelMultiZoneDelimiter``: separates zones in a PV zone label value."""


class StorageError(ValueError):
    """An error upstream returns as a plain ``error`` (``fwk.AsStatus``: code Error)."""


# -- dict access ------------------------------------------------------------------------------------

def _dict(v: object) -> Obj:
    return v if isinstance(v, dict) else {}


def meta(o: Mapping[str, Any] | None) -> Obj:
    """``o.metadata`` (``{}`` when absent or malformed)."""
    return _dict((o or {}).get("metadata"))


_meta = meta


def status(o: Mapping[str, Any] | None) -> Obj:
    """``o.status`` (``{}`` when absent or malformed)."""
    return _dict((o or {}).get("status"))


def deletion_timestamp(o: Mapping[str, Any] | None) -> object:
    """``metadata.deletionTimestamp`` (None when the object is not being deleted)."""
    return _meta(o).get("deletionTimestamp")


def cycle_objects(state: CycleState) -> ClusterObjectsLister:
    """The cycle snapshot's objects (an empty lister when the state has no snapshot)."""
    return objects_of(state.snapshot)


def used_pvc_ref_counts(state: CycleState) -> Mapping[str, int]:
    """The cycle snapshot's ``namespace/claim -> number of scheduled Pods using it``."""
    return state.snapshot.used_pvc_ref_counts if state.snapshot is not None else {}


def spec(o: Mapping[str, Any] | None) -> Obj:
    """``o.spec`` (``{}`` when absent or malformed)."""
    return _dict((o or {}).get("spec"))


def name(o: Mapping[str, Any] | None) -> str:
    v = _meta(o).get("name")
    return v if isinstance(v, str) else ""


def namespace(o: Mapping[str, Any] | None) -> str:
    """``metadata.namespace``, ``default`` when unset (as the snapshot keys objects)."""
    v = _meta(o).get("namespace")
    return v if isinstance(v, str) and v else "default"


def resource_version(o: Mapping[str, Any] | None) -> str:
    v = _meta(o).get("resourceVersion")
    return str(v) if v is not None else ""


def _str_map(v: object) -> dict[str, str]:
    if not isinstance(v, dict):
        return {}
    return {str(k): x for k, x in v.items() if isinstance(x, str)}


def annotation(o: Mapping[str, Any] | None, key: str) -> str | None:
    """One annotation's value (None when absent or not a string); no copy of the map is made."""
    meta_d = (o or {}).get("metadata")
    ann = meta_d.get("annotations") if isinstance(meta_d, dict) else None
    v = ann.get(key) if isinstance(ann, dict) else None
    return v if isinstance(v, str) else None


def annotations_of(o: Mapping[str, Any] | None) -> dict[str, str]:
    return _str_map(_meta(o).get("annotations"))


def labels(o: Mapping[str, Any] | None) -> dict[str, str]:
    return _str_map(_meta(o).get("labels"))


def claim_key(ns: str, claim: str) -> str:
    """``namespace/name``: the key of a PVC in the snapshot's objects."""
    return f"{ns}/{claim}"


def _str_list(v: object) -> list[str]:
    return [x for x in v if isinstance(x, str)] if isinstance(v, list) else []


# -- pod volumes ------------------------------------------------------------------------------------

def pod_volumes(pod: Mapping[str, Any]) -> list[Obj]:
    """``pod.spec.volumes`` (entries that are not objects are dropped)."""
    vols = spec(pod).get("volumes")
    return [v for v in vols if isinstance(v, dict)] if isinstance(vols, list) else []


class PodVolumeRef:
    """A Pod volume backed by a PVC: ``claim`` is ``claimName`` or, for a generic ephemeral volume,
    ``<pod name>-<volume name>`` (``ephemeral.VolumeClaimName``)."""

    __slots__ = ("claim", "ephemeral", "volume")

    def __init__(self, claim: str, ephemeral: bool, volume: Obj) -> None:
        self.claim = claim
        self.ephemeral = ephemeral
        self.volume = volume


def pod_volume_refs(pod: Mapping[str, Any]) -> list[PodVolumeRef]:
    """The Pod's PVC-backed volumes in ``spec.volumes`` order (``persistentVolumeClaim`` first, as
    upstream's switch, then ``ephemeral``)."""
    out: list[PodVolumeRef] = []
    pod_name = name(pod)
    for v in pod_volumes(pod):
        pvc = v.get("persistentVolumeClaim")
        if pvc is not None:
            claim = _dict(pvc).get("claimName")
            out.append(PodVolumeRef(claim if isinstance(claim, str) else "", False, v))
        elif v.get("ephemeral") is not None:
            vname = v.get("name")
            out.append(PodVolumeRef(f"{pod_name}-{vname if isinstance(vname, str) else ''}", True, v))
    return out


def volume_is_for_pod(pod: Mapping[str, Any], pvc: Mapping[str, Any]) -> str | None:
    """``ephemeral.VolumeIsForPod``: None when the PVC is in the Pod's namespace and controlled by it
    (an ownerReference with ``controller: true`` and the Pod's UID), else the error message."""
    uid = _meta(pod).get("uid")
    owned = False
    refs = _meta(pvc).get("ownerReferences")
    for ref in refs if isinstance(refs, list) else []:
        if isinstance(ref, dict) and ref.get("controller") is True and ref.get("uid") == uid and uid:
            owned = True
            break
    if namespace(pvc) != namespace(pod) or not owned:
        return (f"PVC {namespace(pvc)}/{name(pvc)} was not created for pod {namespace(pod)}/{name(pod)} "
                "(pod is not owner)")
    return None


# -- classes, binding state -------------------------------------------------------------------------

def claim_class(obj: Mapping[str, Any]) -> str:
    """``GetPersistentVolumeClaimClass`` of a PVC, and ``GetPersistentVolumeClass`` of a PV (the same
    rule, so :data:`pv_class` is this function): the beta annotation first, then
    ``spec.storageClassName``, else ``""``."""
    beta = annotation(obj, ANN_BETA_STORAGE_CLASS)
    if beta is not None:
        return beta
    v = spec(obj).get("storageClassName")
    return v if isinstance(v, str) else ""


pv_class = claim_class


def is_pvc_fully_bound(pvc: Mapping[str, Any]) -> bool:
    """``isPVCFullyBound``: ``spec.volumeName`` set and the ``bind-completed`` annotation present."""
    return bool(spec(pvc).get("volumeName")) and annotation(pvc, ANN_BIND_COMPLETED) is not None


def is_delay_binding_mode(pvc: Mapping[str, Any], storage_class: Mapping[str, Any] | None) -> bool:
    """``IsDelayBindingMode``: the claim's StorageClass (looked up by the caller, None when the class
    name is empty or not found) has ``volumeBindingMode: WaitForFirstConsumer``.

    Raises:
        StorageError: the class has no ``volumeBindingMode`` (``VolumeBindingMode not set for
        StorageClass "X"``; the API server always defaults it, offline files may not).
    """
    if storage_class is None:
        return False
    mode = storage_class.get("volumeBindingMode")
    if mode is None:
        raise StorageError(f'VolumeBindingMode not set for StorageClass "{name(storage_class)}"')
    return bool(mode == "WaitForFirstConsumer")


def is_volume_bound_to_claim(pv: Mapping[str, Any], pvc: Mapping[str, Any]) -> bool:
    """``IsVolumeBoundToClaim``: ``spec.claimRef`` names the claim (and its UID when the ref has one)."""
    ref = spec(pv).get("claimRef")
    if not isinstance(ref, dict):
        return False
    if ref.get("name") != name(pvc) or ref.get("namespace") != namespace(pvc):
        return False
    uid = ref.get("uid")
    return not (uid and uid != _meta(pvc).get("uid"))


def get_bind_volume_to_claim(pv: Obj, pvc: Mapping[str, Any]) -> tuple[Obj, bool]:
    """``GetBindVolumeToClaim``: (a copy of ``pv`` bound to ``pvc``, whether anything changed).

    The copy gets ``spec.claimRef`` (``{kind, apiVersion, namespace, name, uid, resourceVersion}``, as
    ``reference.GetReference``) unless it already names the claim with the same UID, and the
    ``bound-by-controller`` annotation unless the PV was pre-bound to this claim.
    """
    dirty = False
    set_bound_by_controller = not is_volume_bound_to_claim(pv, pvc)
    clone: Obj = dict(pv)
    clone_meta = dict(_meta(pv))
    clone_spec = dict(spec(pv))
    clone["metadata"] = clone_meta
    clone["spec"] = clone_spec
    ref = clone_spec.get("claimRef")
    ref_d = ref if isinstance(ref, dict) else None
    pvc_meta = _meta(pvc)
    if (ref_d is None or ref_d.get("name") != name(pvc) or ref_d.get("namespace") != namespace(pvc)
            or (ref_d.get("uid") or "") != (pvc_meta.get("uid") or "")):
        new_ref: Obj = {"kind": "PersistentVolumeClaim", "namespace": namespace(pvc), "name": name(pvc),
                        "apiVersion": "v1"}
        if pvc_meta.get("uid"):
            new_ref["uid"] = pvc_meta["uid"]
        if pvc_meta.get("resourceVersion"):
            new_ref["resourceVersion"] = pvc_meta["resourceVersion"]
        clone_spec["claimRef"] = new_ref
        dirty = True
    if set_bound_by_controller and ANN_BOUND_BY_CONTROLLER not in annotations_of(pv):
        clone_meta["annotations"] = {**annotations_of(pv), ANN_BOUND_BY_CONTROLLER: "yes"}
        dirty = True
    return clone, dirty


# -- quantities -------------------------------------------------------------------------------------

def claim_storage_request(pvc: Mapping[str, Any]) -> Decimal | None:
    """``spec.resources.requests.storage`` in bytes (None when the claim requests no storage).

    Raises:
        PodParseError: the value is not a quantity (field names the PVC, e.g.
        ``PersistentVolumeClaim default/data spec.resources.requests.storage``).
    """
    reqs = _dict(_dict(spec(pvc).get("resources")).get("requests"))
    if "storage" not in reqs:
        return None
    raw = reqs["storage"]
    try:
        return quantity.parse(raw)
    except quantity.QuantityError as exc:
        where = f"PersistentVolumeClaim {namespace(pvc)}/{name(pvc)} spec.resources.requests.storage"
        raise PodParseError(where, raw, "not a valid quantity") from exc


def _quantity_or_none(raw: object) -> Decimal | None:
    if raw is None:
        return None
    try:
        return quantity.parse(raw)
    except quantity.QuantityError:
        return None


def pv_capacity(pv: Mapping[str, Any]) -> Decimal | None:
    """``spec.capacity.storage`` in bytes; ``0`` when absent (Go's zero Quantity); None when malformed."""
    cap = _dict(spec(pv).get("capacity"))
    if "storage" not in cap:
        return Decimal(0)
    return _quantity_or_none(cap["storage"])


def volume_limit(capacity: Mapping[str, Any]) -> Decimal | None:
    """``volumeLimit``: a CSIStorageCapacity's ``maximumVolumeSize`` if set, else ``capacity`` (bytes);
    None when neither is set (or the value is malformed)."""
    if capacity.get("maximumVolumeSize") is not None:
        return _quantity_or_none(capacity.get("maximumVolumeSize"))
    return _quantity_or_none(capacity.get("capacity"))


def capacity_value(capacity: Mapping[str, Any] | None) -> int:
    """``capacity.Capacity.Value()`` of a CSIStorageCapacity in bytes (0 when unset or malformed)."""
    if capacity is None:
        return 0
    q = _quantity_or_none(capacity.get("capacity"))
    return quantity.value(q) if q is not None else 0


# -- matching ---------------------------------------------------------------------------------------

_NO_MATCH = False


def compiled_node_affinity(pv: Mapping[str, Any]) -> NodeSelector | bool:
    """The PV's ``spec.nodeAffinity.required`` compiled once: True when there is none (every node
    matches), False when it is malformed (no node matches), else a NodeSelector.

    Compiled selectors are cached by the identity of the ``nodeAffinity`` object (which assumed copies
    of a PV share; :data:`~py_scheduler.framework.memo.PV_NODE_AFFINITY`), so a cluster's PVs are
    compiled once, not once per node per Pod.
    """
    na = spec(pv).get("nodeAffinity")
    if na is None:
        return True
    hit = PV_NODE_AFFINITY.get(id(na))
    if hit is not None and hit[0] is na:
        return cast("NodeSelector | bool", hit[1])
    compiled: NodeSelector | bool
    if not isinstance(na, dict):
        compiled = _NO_MATCH
    elif na.get("required") is None:
        compiled = True
    else:
        try:
            compiled = NodeSelector.from_node_selector(na["required"])
        except ValueError:
            compiled = _NO_MATCH
    PV_NODE_AFFINITY.put(na, compiled)
    return compiled


def affinity_matches(compiled: NodeSelector | bool, node_labels: Mapping[str, str]) -> bool:
    """Evaluate :func:`compiled_node_affinity` for a node built from ``node_labels`` only."""
    if isinstance(compiled, bool):
        return compiled
    return compiled.match({"metadata": {"labels": node_labels}})


def check_node_affinity(pv: Mapping[str, Any], node_labels: Mapping[str, str]) -> bool:
    """``CheckNodeAffinity``: True when the PV has no ``spec.nodeAffinity.required`` or one of its
    terms selects a node with ``node_labels`` (the node is built from labels only, so
    ``matchFields`` requirements are ignored, as upstream). A malformed affinity never matches."""
    return affinity_matches(compiled_node_affinity(pv), node_labels)


def volume_mode_mismatch(pvc: Mapping[str, Any], pv: Mapping[str, Any]) -> bool:
    """``CheckVolumeModeMismatches``: ``spec.volumeMode`` differs (unset means ``Filesystem``)."""
    return (spec(pvc).get("volumeMode") or "Filesystem") != (spec(pv).get("volumeMode") or "Filesystem")


def contains_access_mode(modes: object, mode: str) -> bool:
    """``ContainsAccessMode``."""
    return mode in _str_list(modes)


def check_access_modes(pvc: Mapping[str, Any], pv: Mapping[str, Any]) -> bool:
    """``CheckAccessModes``: the PV offers every access mode the claim asks for."""
    have = set(_str_list(spec(pv).get("accessModes")))
    return all(m in have for m in _str_list(spec(pvc).get("accessModes")))


def label_selector_matches(selector: object, obj_labels: Mapping[str, str]) -> bool:
    """A ``metav1.LabelSelector`` (``None``: nothing) against labels.

    Raises:
        ValueError: an invalid selector (``LabelSelectorAsSelector`` error).
    """
    if selector is not None and not isinstance(selector, dict):
        raise ValueError(f"label selector must be an object, got {selector!r}")
    return parse_label_selector(selector).matches(obj_labels)


class ClaimMatcher:
    """``FindMatchingVolume`` on the scheduler path (a node given, delayBinding true,
    VolumeAttributesClass on as in v1.37), split into the node-independent part, done once per claim
    and cycle, and :meth:`match` per node.

    Upstream walks the claim's class PVs in order: a PV pre-bound to the claim (``claimRef`` naming it)
    is returned at once (None if its node affinity rejects the node); otherwise the smallest
    ``Available`` PV with enough capacity, the same volume mode and VolumeAttributesClass, matching the
    claim's selector, class, node affinity and access modes, not being deleted and not excluded (the
    first one wins ties). The checks that do not depend on the node are applied here; the candidates
    keep upstream's order (pre-bound PVs) or are sorted by (capacity, position) so the first one whose
    node affinity matches is upstream's choice.

    Raises (constructor): PodParseError: the claim's storage request is malformed. An invalid claim
    ``spec.selector`` is raised by :meth:`match` (upstream fails FindMatchingVolume, i.e. Filter).
    """

    __slots__ = ("_index", "eligible", "error", "prebound")

    def __init__(self, pvc: Mapping[str, Any], volumes: Iterable[Obj]) -> None:
        request = claim_storage_request(pvc) or Decimal(0)
        requested_class = claim_class(pvc)
        pvc_spec = spec(pvc)
        selector = pvc_spec.get("selector")
        self.error: StorageError | None = None
        self.prebound: list[tuple[Obj, NodeSelector | bool]] = []
        self.eligible: list[tuple[Decimal, int, Obj, NodeSelector | bool]] = []
        compiled = None
        if selector is not None:
            try:
                if not isinstance(selector, dict):
                    raise ValueError(f"label selector must be an object, got {selector!r}")
                compiled = parse_label_selector(selector)
            except ValueError as exc:
                self.error = StorageError(f"error creating internal label selector for claim: "
                                          f"{namespace(pvc)}/{name(pvc)}: {exc}")
                return
        claim_vac = pvc_spec.get("volumeAttributesClassName") or ""
        for idx, pv in enumerate(volumes):
            pv_spec = spec(pv)
            bound_to_claim = is_volume_bound_to_claim(pv, pvc)
            if pv_spec.get("claimRef") is not None and not bound_to_claim:
                continue
            qty = pv_capacity(pv)
            if qty is None or qty < request:
                continue
            if volume_mode_mismatch(pvc, pv):
                continue
            if claim_vac != (pv_spec.get("volumeAttributesClassName") or ""):
                continue
            if deletion_timestamp(pv) is not None:
                continue
            affinity = compiled_node_affinity(pv)
            if bound_to_claim:
                self.prebound.append((pv, affinity))
                continue
            if status(pv).get("phase") != "Available":
                continue
            if compiled is not None and not compiled.matches(labels(pv)):
                continue
            if pv_class(pv) != requested_class:
                continue
            if not check_access_modes(pvc, pv):
                continue
            self.eligible.append((qty, idx, pv, affinity))
        self.eligible.sort(key=lambda t: (t[0], t[1]))
        self._index: _AffinityIndex | None = None

    def match(self, node_labels: Mapping[str, str], excluded: Mapping[str, Obj]) -> Obj | None:
        """The PV upstream's FindMatchingVolume returns for a node with ``node_labels``, not taking PVs
        named in ``excluded`` (those chosen for the Pod's other claims).

        Raises:
            StorageError: the claim's ``spec.selector`` is invalid.
        """
        if self.error is not None:
            raise self.error
        for pv, affinity in self.prebound:
            if name(pv) in excluded:
                continue
            return pv if affinity_matches(affinity, node_labels) else None
        eligible = self.eligible
        if len(eligible) < _INDEX_MIN_PVS:
            for _, _, pv, affinity in eligible:
                if name(pv) not in excluded and affinity_matches(affinity, node_labels):
                    return pv
            return None
        index = self._index
        if index is None:
            index = self._index = _AffinityIndex([e[3] for e in eligible])
        for pos in index.candidates(node_labels):
            _, _, pv, affinity = eligible[pos]
            if name(pv) not in excluded and affinity_matches(affinity, node_labels):
                return pv
        return None


_INDEX_MIN_PVS = 4
"""Below this many eligible PVs a claim's candidates are walked in order without an index."""


def _in_requirement(compiled: NodeSelector | bool) -> tuple[str, frozenset[str]] | None:
    """A necessary condition for ``compiled`` to select a node, as (label key, allowed values): the
    selector has exactly one valid term whose label part has an ``In`` requirement (the node must
    carry the key with one of the values; the term's other requirements and ``matchFields``, which
    :func:`affinity_matches` ignores, are checked by the full match). None when there is no such
    condition (no affinity, several terms, no ``In``)."""
    if isinstance(compiled, bool) or len(compiled.terms) != 1:
        return None
    term = compiled.terms[0]
    if term.errors or term.labels is None or term.labels.nothing:
        return None
    r = term.labels.first_in()
    return None if r is None else (r.key, r.values)


class _AffinityIndex:
    """The positions of a claim's eligible PVs (``ClaimMatcher.eligible``, in upstream's order) that
    may match a node, found without evaluating every PV's node affinity on every node: PVs whose
    affinity has an ``In`` requirement (:func:`_in_requirement`: local PVs pinned to a hostname or
    zone) are filed under each allowed (key, value); the others are always candidates, except
    affinities that never match (malformed), which are dropped.

    Inputs: the compiled affinities of the eligible PVs, fixed when the matcher is built (once per
    Pod and cycle). :meth:`candidates` yields a superset of the matching positions in increasing
    order, so the first candidate that passes the full check is the first match of the plain walk over
    ``ClaimMatcher.eligible`` (the reference form in ``tests/unit/plugins/test_volume_binding_memo.py``).
    """

    __slots__ = ("always", "by_key")

    def __init__(self, affinities: list[NodeSelector | bool]) -> None:
        self.always: list[int] = []
        self.by_key: dict[str, dict[str, list[int]]] = {}
        for pos, affinity in enumerate(affinities):
            if affinity is False:
                continue
            cond = _in_requirement(affinity)
            if cond is None:
                self.always.append(pos)
                continue
            by_value = self.by_key.setdefault(cond[0], {})
            for v in cond[1]:
                by_value.setdefault(v, []).append(pos)

    def candidates(self, node_labels: Mapping[str, str]) -> Iterable[int]:
        """Positions that may match a node with ``node_labels``, increasing."""
        lists: list[list[int]] = [self.always] if self.always else []
        for key, by_value in self.by_key.items():
            v = node_labels.get(key)
            if v is not None:
                hit = by_value.get(v)
                if hit:
                    lists.append(hit)
        if not lists:
            return ()
        if len(lists) == 1:
            return lists[0]
        return heapq.merge(*lists)


def find_matching_volume(pvc: Mapping[str, Any], volumes: Iterable[Obj], node_labels: Mapping[str, str],
                         excluded: Mapping[str, Obj]) -> Obj | None:
    """``FindMatchingVolume`` for one node (see :class:`ClaimMatcher`, which the binder keeps per cycle).

    Raises:
        StorageError: the claim's ``spec.selector`` is invalid.
        PodParseError: the claim's storage request is malformed.
    """
    return ClaimMatcher(pvc, volumes).match(node_labels, excluded)


def match_topology_selector_terms(terms: object, node_labels: Mapping[str, str]) -> bool:
    """``MatchTopologySelectorTerms`` (StorageClass ``allowedTopologies``): an empty list matches every
    node; terms are ORed, a term's ``matchLabelExpressions`` (key In values) ANDed; an empty or
    invalid term matches nothing."""
    if not isinstance(terms, list) or not terms:
        return True
    for term in terms:
        exprs = _dict(term).get("matchLabelExpressions")
        if not isinstance(exprs, list) or not exprs:
            continue
        ok = True
        for e in exprs:
            if not isinstance(e, dict):
                ok = False
                break
            req, errs = Requirement.new(e.get("key"), "In", e.get("values"))
            if req is None or errs or not req.matches(node_labels):
                ok = False
                break
        if ok:
            return True
    return False


def label_zones_to_set(value: str) -> set[str] | None:
    """``LabelZonesToSet``: a zone label value split on ``__`` (trimmed); None if any part is empty."""
    out: set[str] = set()
    for z in value.split(LABEL_MULTI_ZONE_DELIMITER):
        z = z.strip()
        if not z:
            return None
        out.add(z)
    return out

