"""A Pod's ResourceClaims: parsing ``spec.resourceClaims``, finding each claim, and reading a claim.

Upstream: ``pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go``
(``foreachPodResourceClaim``) and ``k8s.io/dynamic-resource-allocation/resourceclaim/resourceclaim.go``
(``Name``, ``IsForPod``, ``IsReservedForPod``). Claims are API dicts (``resource.k8s.io/v1``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from py_scheduler.framework.errors import PodParseError
from py_scheduler.framework.events import QueueingHint
from py_scheduler.framework.memo import PodInput, PodMemo
from py_scheduler.framework.objects import Obj
from py_scheduler.framework.types import PodInfo
from py_scheduler.plugins.dynamic_resources.common import claim_ref
from py_scheduler.plugins.helpers.queueing_hints import hint_pod_info


def claim_meta(obj: Obj) -> Obj:
    m = obj.get("metadata")
    return m if isinstance(m, dict) else {}


def claim_uid(claim: Obj) -> str:
    return str(claim_meta(claim).get("uid") or claim_ref(claim))


def allocation_of(claim: Mapping[str, Any]) -> Obj | None:
    st = claim.get("status")
    if not isinstance(st, dict):
        return None
    a = st.get("allocation")
    return a if isinstance(a, dict) else None


def results_of(allocation: Obj | None) -> list[Obj]:
    if not allocation:
        return []
    devices = allocation.get("devices") or {}
    res = devices.get("results") if isinstance(devices, dict) else None
    return [r for r in res or [] if isinstance(r, dict)]


def requests_of(claim: Obj) -> list[Obj]:
    devices = ((claim.get("spec") or {}).get("devices") or {})
    reqs = devices.get("requests") if isinstance(devices, dict) else None
    return [r for r in reqs or [] if isinstance(r, dict)]


@dataclass(slots=True)
class PodClaim:
    name: str
    claim_name: str | None
    template_name: str | None


class ClaimUnschedulable(Exception):
    """A reason for ``statusUnschedulable`` found while collecting the Pod's claims."""


def parse_claims_spec(spec: Obj) -> list[PodClaim]:
    """A Pod's ``spec.resourceClaims`` as :class:`PodClaim` entries.

    Raises:
        PodParseError: not a list of objects with string names.
    """
    raw = spec.get("resourceClaims")
    out: list[PodClaim] = []
    if raw is not None:
        if not isinstance(raw, list):
            raise PodParseError("spec.resourceClaims", raw, "expected a list of PodResourceClaims")
        for i, rc in enumerate(raw):
            if not isinstance(rc, dict):
                raise PodParseError(f"spec.resourceClaims[{i}]", rc, "expected an object")
            vals = []
            for k in ("name", "resourceClaimName", "resourceClaimTemplateName"):
                v = rc.get(k)
                if v is not None and not isinstance(v, str):
                    raise PodParseError(f"spec.resourceClaims[{i}].{k}", v, "expected a string")
                vals.append(v)
            out.append(PodClaim(str(vals[0] or ""), vals[1], vals[2]))
    return out


ClaimGetter = Callable[[str, str], Obj | None]
"""``(namespace, name) -> ResourceClaim`` or None: where :func:`resolve_claims` looks claims up."""


def resolve_claims(pod: Obj, pod_claims: list[PodClaim], get: ClaimGetter) -> list[Obj]:
    """``foreachPodResourceClaim`` (upstream ``dynamicresources.go``, with ``resourceclaim.Name`` and
    ``IsForPod`` of ``k8s.io/dynamic-resource-allocation/resourceclaim``): the ResourceClaim of each
    entry of ``pod_claims`` (the Pod's parsed ``spec.resourceClaims``), looked up with ``get``. A
    template entry takes its claim's name from ``status.resourceClaimStatuses``; an entry whose
    status names no claim is skipped (valid upstream).

    Raises:
        ClaimUnschedulable: upstream's reason (claim not generated yet, not found, being deleted, not
            owned by the Pod, no source set).
    """
    meta = pod.get("metadata") or {}
    namespace = str(meta.get("namespace") or "default")
    pod_name = str(meta.get("name") or "")
    pod_uid = str(meta.get("uid") or "")
    statuses = (pod.get("status") or {}).get("resourceClaimStatuses") or []
    out: list[Obj] = []
    for pc in pod_claims:
        must_check_owner = False
        if pc.claim_name is not None:
            claim_name: str | None = pc.claim_name
        elif pc.template_name is not None:
            found = False
            claim_name = None
            for st in statuses if isinstance(statuses, list) else []:
                if isinstance(st, dict) and st.get("name") == pc.name:
                    found = True
                    rcn = st.get("resourceClaimName")
                    claim_name = str(rcn) if rcn else None
                    must_check_owner = True
                    break
            if not found:
                raise ClaimUnschedulable(f'pod "{namespace}/{pod_name}": ResourceClaim not created yet')
        else:
            raise ClaimUnschedulable(f'pod "{namespace}/{pod_name}", spec.resourceClaim "{pc.name}": none of '
                                 f"the supported fields are set")
        if claim_name is None:
            continue
        claim = get(namespace, claim_name)
        if not isinstance(claim, dict):
            raise ClaimUnschedulable(f'could not find ResourceClaim "{namespace}/{claim_name}"')
        cmeta = claim_meta(claim)
        if cmeta.get("deletionTimestamp"):
            raise ClaimUnschedulable(f'resourceclaim "{cmeta.get("name")}" is being deleted')
        if must_check_owner and not controlled_by(claim, pod_uid):
            raise ClaimUnschedulable(f"ResourceClaim {namespace}/{cmeta.get('name')} was not created for Pod "
                                 f"{namespace}/{pod_name} (Pod is not owner)")
        out.append(claim)
    return out


def pod_claims_now(pod: Obj, get: ClaimGetter) -> list[Obj]:
    """``foreachPodResourceClaim`` on a Pod's JSON against the latest claims (``get``). Raises
    ClaimUnschedulable (a claim missing, being deleted, not the Pod's, not generated yet) or
    PodParseError (malformed ``spec.resourceClaims``)."""
    return resolve_claims(pod, parse_claims_spec(pod.get("spec") or {}), get)


def claim_change_hint(pod: Obj, old: Any, new: Any, get: ClaimGetter | None) -> QueueingHint:
    """``isSchedulableAfterClaimChange``: whether a ResourceClaim add / update / delete may let
    ``pod`` (rejected by this plugin) through. ``old`` / ``new`` are the claim's JSON (None for
    an add / a delete).

    - deleted: Queue only if it was allocated (its devices are free now);
    - any of the Pod's claims missing, being deleted or not the Pod's: QueueSkip (the Pod
      still cannot pass; a later claim or Pod event will queue it);
    - deallocated (allocation removed): Queue, whoever's claim it is (devices freed);
    - not one of the Pod's claims (compared by UID): QueueSkip;
    - one of the Pod's claims created: Queue; updated: Queue only when its ``status`` changed
      (allocation, reservedFor, devices; a new finalizer or label alone is skipped).

    Without a claim getter (``get`` None: no Handle) every event queues the Pod.

    Raises:
        TypeError: ``old`` or ``new`` is not a JSON object (the queue counts it as Queue, as
            upstream counts a hint's error).
    """
    for side, obj in (("old", old), ("new", new)):
        if obj is not None and not isinstance(obj, dict):
            raise TypeError(f"unexpected {side} object in isSchedulableAfterClaimChange: {type(obj).__name__}")
    if new is None:
        if old is None:
            raise TypeError("isSchedulableAfterClaimChange: neither an old nor a new claim")
        return QueueingHint.QUEUE if allocation_of(old) is not None else QueueingHint.QUEUE_SKIP
    if get is None:
        return QueueingHint.QUEUE
    deallocated = old is not None and allocation_of(old) is not None and allocation_of(new) is None
    if not deallocated and not _may_be_the_pods(pod, new):
        return QueueingHint.QUEUE_SKIP  # what the walk below ends with, without looking up every claim
    try:
        claims = pod_claims_now(pod, get)
    except (ClaimUnschedulable, PodParseError):
        return QueueingHint.QUEUE_SKIP
    if deallocated:
        return QueueingHint.QUEUE
    uid = claim_uid(new)
    if not any(claim_uid(c) == uid for c in claims):
        return QueueingHint.QUEUE_SKIP
    if old is None:
        return QueueingHint.QUEUE
    if (old.get("status") or {}) == (new.get("status") or {}):
        return QueueingHint.QUEUE_SKIP
    return QueueingHint.QUEUE


def _may_be_the_pods(pod: Obj, claim: Obj) -> bool:
    """Whether ``claim`` can be one of the Pod's: in the Pod's namespace, with a name the Pod's spec
    names (``resourceClaimName``) or its status records for a template. When it is not, the walk of
    :func:`claim_change_hint` (which looks the Pod's claims up by name) cannot find it and the hint
    is QueueSkip whatever else the walk finds: 4 000 waiting Pods of 128 claims each cost 2.75 s per
    claim event when every Pod's claims were looked up (an adversarial run)."""
    cmeta = claim_meta(claim)
    namespace, names = _NAMES_MEMO.get(hint_pod_info(pod), _claim_names)
    return str(cmeta.get("namespace") or "") == namespace and cmeta.get("name") in names


def _claim_names(pi: PodInfo) -> tuple[str, frozenset[Any]]:
    """The Pod's namespace and every claim name its spec or status gives (see :func:`_may_be_the_pods`)."""
    pod = pi.pod
    spec_claims = (pod.get("spec") or {}).get("resourceClaims")
    statuses = (pod.get("status") or {}).get("resourceClaimStatuses")
    names = {rc.get("resourceClaimName") for rc in (spec_claims if isinstance(spec_claims, list) else ())
             if isinstance(rc, dict)}
    names.update(st.get("resourceClaimName") for st in (statuses if isinstance(statuses, list) else ())
                 if isinstance(st, dict))
    names.discard(None)
    return str((pod.get("metadata") or {}).get("namespace") or "default"), frozenset(names)


_NAMES_MEMO: PodMemo[tuple[str, frozenset[Any]]] = PodMemo(
    "dynamic_resources/claim-names", PodInput.IDENTITY | PodInput.SPEC | PodInput.STATUS)


def target_pod_update_hint(new: Any, get: ClaimGetter | None) -> QueueingHint:
    """``isSchedulableAfterTargetPodUpdate``: the queued Pod's own update that recorded generated
    claims (``status.resourceClaimStatuses``) queues it only once every claim it needs exists
    and is its own (``new`` is the updated Pod's JSON; ``old`` is not read).

    Without an object lister (no Handle) the update queues the Pod.

    Raises:
        TypeError: ``new`` is not a JSON object (counted as Queue by the queue).
    """
    if not isinstance(new, dict):
        raise TypeError(f"unexpected object in isSchedulableAfterTargetPodUpdate: {type(new).__name__}")
    if get is None:
        return QueueingHint.QUEUE
    try:
        pod_claims_now(new, get)
    except (ClaimUnschedulable, PodParseError):
        return QueueingHint.QUEUE_SKIP
    return QueueingHint.QUEUE


def controlled_by(claim: Obj, pod_uid: str) -> bool:
    """``metav1.IsControlledBy``: the claim's controller owner reference is the Pod."""
    for ref in claim_meta(claim).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller") is True:
            return bool(ref.get("uid")) and ref.get("uid") == pod_uid
    return False


def reserved_for(claim: Obj, pod_uid: str) -> bool:
    """``IsReservedForPod``: the Pod is in ``status.reservedFor``."""
    for r in (claim.get("status") or {}).get("reservedFor") or []:
        if isinstance(r, dict) and r.get("uid") == pod_uid:
            return True
    return False
