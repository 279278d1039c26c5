"""DynamicResources' binding cycle: PreBind writes each claim's allocation and reservation through the
API, waits for device binding conditions; Unreserve takes the Pod's reservation back.

Upstream: ``pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go`` (``PreBind``,
``PreBindPreFlight``, ``bindClaim``, ``Unreserve``, ``isClaimReadyForBinding``, ``isClaimTimeout``,
``isPodReadyForBinding``, ``hasBindingConditions``) with v1.37.2's default gates
(DRADeviceBindingConditions and DRAResourceClaimDeviceStatus on).

Per claim of the Pod not yet reserved for it, ``bind_claim`` (in claim order):

1. re-reads the claim after a conflict (client-go ``RetryOnConflict`` with ``DefaultRetry``: 5 tries,
   10 ms apart), refuses a claim being deleted, or one allocated elsewhere meanwhile;
2. adds the ``resource.kubernetes.io/delete-protection`` finalizer (an update of the claim) when the
   Pod brought the allocation;
3. writes ``status.allocation`` (with ``allocationTimestamp``) and appends the Pod to
   ``status.reservedFor`` through the status subresource, the resourceVersion as precondition.

Then, when some allocated device has binding conditions, an Event ``BindingConditionsPending`` is
recorded and the claims are polled (every 5 s as upstream, or ``poll_interval``) until every
binding condition is true, a binding failure condition is true (``device binding failed``) or the
allocation is older than ``bindingTimeout`` (``device binding timeout``).

The plugin keeps its in-flight allocations until its informer reaches the write (PreBind records
the written resourceVersion, :func:`.dra_manager.mark_written`; see
:func:`.dra_manager.forget_stale_in_flight`), so a device is never offered twice between Reserve and
the watch event of the write, also when PreBind finished long before the event arrives, and is free
again as soon as the informer shows the claim deallocated.

Errors are upstream's messages; the framework turns a failed PreBind into Unreserve (in reverse
plugin order), which deletes the Pod's reservation again (a strategic-merge patch of
``status.reservedFor``), so a failed binding cycle leaves no claim reserved for a Pod that is not
bound. The allocation itself stays: kube-controller-manager's resourceclaim controller deallocates a
claim that nobody reserves, as it does for kube-scheduler.

Also here: PostFilter's writes (:func:`deallocate_claim`, :func:`delete_claim`) and, for ``explain`` /
``simulate``, PreBind's effect on the in-memory objects (:func:`simulated_pre_bind`).
"""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import logging
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_fixed, wait_random

from py_scheduler.framework import objects as ob
from py_scheduler.framework.handle import APIClient, APIConflict, APIError, EventRecorder, ObjectLister
from py_scheduler.framework.objects import Obj
from py_scheduler.framework.types import CycleState, PodInfo
from py_scheduler.plugins.dynamic_resources.claims import allocation_of, claim_meta, claim_uid, results_of
from py_scheduler.plugins.dynamic_resources.common import claim_ref
from py_scheduler.plugins.dynamic_resources.state import SPECIAL_CLAIM_NAME, STATE_KEY, DRAState

__all__ = [
    "FINALIZER",
    "BindingError",
    "bind_claim",
    "claim_path",
    "claim_ready_for_binding",
    "claim_timed_out",
    "deallocate_claim",
    "delete_claim",
    "has_binding_conditions",
    "simulated_pre_bind",
    "unreserve_in_api",
    "unreserve_patch",
    "wait_for_binding_conditions",
]

log = logging.getLogger("py_scheduler.plugins.dynamic_resources")


FINALIZER = "resource.kubernetes.io/delete-protection"
"""``resourceapi.Finalizer``: keeps an allocated claim until its allocation is released."""
BINDING_POLL_SECONDS = 5.0
"""``wait.PollUntilContextTimeout(ctx, 5*time.Second, bindingTimeout, ...)`` in PreBind."""


class BindingError(Exception):
    """PreBind failed; ``str()`` is upstream's message (the Pod's FailedScheduling reason)."""


class _Conflict(APIConflict):
    """A 409 of one write of ``bindClaim``, with what upstream prefixes the error with."""

    def __init__(self, what: str, exc: APIConflict) -> None:
        super().__init__(exc.status, exc.reason, exc.message)
        self.what = what





def claim_path(namespace: str, name: str = "", subresource: str = "") -> str:
    """API path of a ResourceClaim (the collection when ``name`` is empty)."""
    base = f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims"
    if not name:
        return base
    return f"{base}/{name}/{subresource}" if subresource else f"{base}/{name}"




def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def bind_claim(client: APIClient, claim: Obj, allocation: Obj | None, pod_ref: Obj,
                     now: Callable[[], str] = _now) -> Obj:
    """``bindClaim``: write ``allocation`` (None: the claim is allocated already) and the Pod's
    reservation ``pod_ref`` (``{"resource": "pods", "name", "uid"}``) into the claim; returns the
    claim as stored.

    Raises:
        BindingError: the claim was deleted or allocated (deallocated) elsewhere meanwhile, or a write
            failed for another reason than a conflict, or conflicts persisted over 5 tries.
    """
    ns = str(ob.meta(claim).get("namespace") or "")
    name = ob.name(claim)
    current: Obj = copy.deepcopy(claim)
    refresh = False
    try:
        async for attempt in AsyncRetrying(stop=stop_after_attempt(5), wait=wait_fixed(0.01) + wait_random(0, 0.001),
                                           retry=retry_if_exception_type(_Conflict), reraise=True):
            with attempt:
                if refresh:
                    try:
                        got = await client.get(claim_path(ns, name))
                    except APIError as exc:
                        raise BindingError(f"get updated claim {claim_ref(claim)} after conflict: {exc}") from exc
                    if got is None:
                        raise BindingError(f"get updated claim {claim_ref(claim)} after conflict: "
                                           f'resourceclaims.resource.k8s.io "{name}" not found')
                    current = got
                refresh = True
                current = await _write_claim(client, current, allocation, pod_ref, now)
    except _Conflict as exc:
        raise BindingError(f"{exc.what}: {exc.message}") from exc
    return current


async def _write_claim(client: APIClient, claim: Obj, allocation: Obj | None, pod_ref: Obj,
                       now: Callable[[], str]) -> Obj:
    """One try of ``bindClaim``'s retry body; raises APIConflict to be retried."""
    ns = str(ob.meta(claim).get("namespace") or "")
    name = ob.name(claim)
    ref = claim_ref(claim)
    if ob.meta(claim).get("deletionTimestamp"):
        raise BindingError(f"claim {ref} got deleted in the meantime")
    if allocation is not None:
        if allocation_of(claim) is not None:
            raise BindingError(f"claim {ref} got allocated elsewhere in the meantime")
        finalizers = list(ob.meta(claim).get("finalizers") or [])
        if FINALIZER not in finalizers:
            claim = copy.deepcopy(claim)
            claim["metadata"]["finalizers"] = [*finalizers, FINALIZER]
            try:
                claim = await client.update(claim_path(ns, name), claim)
            except APIConflict as exc:
                raise _Conflict(f"add finalizer to claim {ref}", exc) from exc
            except APIError as exc:
                raise BindingError(f"add finalizer to claim {ref}: {exc.message}") from exc
    claim = copy.deepcopy(claim)
    status: Obj = dict(claim.get("status") or {})
    if allocation is not None:
        status["allocation"] = copy.deepcopy(allocation)
    status["reservedFor"] = [*[r for r in status.get("reservedFor") or [] if isinstance(r, dict)], pod_ref]
    alloc = status.get("allocation")
    if not isinstance(alloc, dict):
        raise BindingError(f"claim {ref} got deallocated elsewhere in the meantime")
    if not alloc.get("allocationTimestamp"):
        alloc["allocationTimestamp"] = now()
    claim["status"] = status
    what = "add allocation and reservation to" if allocation is not None else "add reservation to"
    try:
        return await client.update(claim_path(ns, name, "status"), claim)
    except APIConflict as exc:
        raise _Conflict(f"{what} claim {ref}", exc) from exc
    except APIError as exc:
        raise BindingError(f"{what} claim {ref}: {exc.message}") from exc


def unreserve_patch(claim: Mapping[str, Any], pod_uid: str) -> Obj:
    """The strategic-merge patch of ``Unreserve``: drop the Pod from ``status.reservedFor``, the
    claim's UID as precondition."""
    return {"metadata": {"uid": str(ob.meta(claim).get("uid") or "")},
            "status": {"reservedFor": [{"$patch": "delete", "uid": pod_uid}]}}


def has_binding_conditions(claims: list[Obj]) -> bool:
    """``hasBindingConditions``: some allocated device of the claims has binding conditions."""
    return any(r.get("bindingConditions") for c in claims for r in results_of(allocation_of(c)))


def _condition_true(conditions: object, ctype: str) -> bool:
    for c in conditions if isinstance(conditions, list) else []:
        if isinstance(c, Mapping) and c.get("type") == ctype:
            return c.get("status") == "True"
    return False


def _find_condition(conditions: object, ctype: str) -> Mapping[str, Any] | None:
    for c in conditions if isinstance(conditions, list) else []:
        if isinstance(c, Mapping) and c.get("type") == ctype:
            return c
    return None


def claim_ready_for_binding(claim: Mapping[str, Any]) -> tuple[bool, str | None]:
    """``isClaimReadyForBinding``: (ready, failure message). A device with binding conditions is
    ready when every condition in its ``status.devices`` entry is true; a true binding failure
    condition is a failure (``device binding failed: claim=NAME, reason=..., message="..."``)."""
    alloc = allocation_of(claim)
    if alloc is None:
        return False, None
    devices = (claim.get("status") or {}).get("devices") or []
    for r in results_of(alloc):
        if not r.get("bindingConditions"):
            continue
        status = next((d for d in devices if isinstance(d, Mapping) and d.get("device") == r.get("device")
                       and d.get("driver") == r.get("driver") and d.get("pool") == r.get("pool")), None)
        if status is None:
            return False, None
        for cond in r.get("bindingFailureConditions") or []:
            failed = _find_condition(status.get("conditions"), str(cond))
            if failed is not None and failed.get("status") == "True":
                msg = str(failed.get("message") or "").replace("\\", "\\\\").replace('"', '\\"')
                return False, (f"device binding failed: claim={ob.name(claim)}, reason={failed.get('reason') or ''}, "
                               f'message="{msg}"')
        if not all(_condition_true(status.get("conditions"), str(c)) for c in r.get("bindingConditions") or []):
            return False, None
    return True, None


def _parse_time(raw: object) -> float | None:
    if not isinstance(raw, str):
        return None
    try:
        return dt.datetime.fromisoformat(raw.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def claim_timed_out(claim: Mapping[str, Any], binding_timeout: float, now: float | None = None) -> bool:
    """``isClaimTimeout``: the allocation has a device with binding conditions and is older than
    ``binding_timeout`` seconds."""
    alloc = allocation_of(claim)
    if alloc is None:
        return False
    at = _parse_time(alloc.get("allocationTimestamp"))
    if at is None:
        return False
    t = time.time() if now is None else now
    return any(r.get("bindingConditions") is not None for r in results_of(alloc)) and at + binding_timeout < t


async def wait_for_binding_conditions(claims: list[Obj], objects: ObjectLister | None, binding_timeout: float,
                                      poll: float = BINDING_POLL_SECONDS) -> list[Obj]:
    """``isPodReadyForBinding`` polled until ready: each claim is read again from ``objects`` (the
    informers' latest; the written copy while the informer has not seen it yet) every ``poll``
    seconds, at most ``binding_timeout`` seconds. Returns the claims as last read.

    Raises:
        BindingError: ``device binding failed: ...`` or ``device binding timeout: claim=NAME`` (a
            claim whose allocation passed the timeout) or ``device binding timeout: context
            deadline exceeded`` (the wait itself).
    """
    deadline = time.monotonic() + binding_timeout
    current = list(claims)
    while True:
        ready = True
        for i, claim in enumerate(current):
            fresh = objects.get("ResourceClaim", str(ob.meta(claim).get("namespace") or ""), ob.name(claim)) \
                if objects is not None else None
            if fresh is not None and allocation_of(fresh) is not None:
                current[i] = claim = fresh
            ok, failure = claim_ready_for_binding(claim)
            if failure is not None:
                raise BindingError(failure)
            if not ok:
                if claim_timed_out(claim, binding_timeout):
                    raise BindingError(f"device binding timeout: claim={ob.name(claim)}")
                ready = False
        if ready:
            return current
        if time.monotonic() + poll > deadline:
            raise BindingError("device binding timeout: context deadline exceeded")
        await asyncio.sleep(poll)


async def record_pending(events: EventRecorder | None, pod: Obj, node_name: str) -> None:
    """The ``BindingConditionsPending`` Event upstream records before waiting."""
    if events is None:
        return
    try:
        await events.event(pod, "Normal", "BindingConditionsPending", "Scheduling",
                           f"waiting for binding conditions for device on node {node_name}")
    except Exception:  # an Event is best effort, as upstream's recorder
        log.debug("BindingConditionsPending event not recorded", exc_info=True)


def deallocate_claim(claim: Obj) -> Callable[[APIClient], Coroutine[Any, Any, None]]:
    """The deallocation write of PostFilter: PUT ``.../resourceclaims/NAME/status`` with the
    claim (its resourceVersion) less ``reservedFor``, ``allocation`` and ``devices``."""
    body = copy.deepcopy(claim)
    status = dict(body.get("status") or {})
    for k in ("reservedFor", "allocation", "devices"):
        status.pop(k, None)
    body["status"] = status

    async def run(client: APIClient) -> None:
        meta = ob.meta(body)
        try:
            await client.update(claim_path(str(meta.get("namespace") or ""), str(meta.get("name") or ""),
                                           "status"), body)
            log.info("deallocated resourceclaim=%s", claim_ref(body))
        except APIError as exc:
            log.error("deallocate resourceclaim=%s: %s", claim_ref(body), exc)

    return run


def delete_claim(claim: Obj) -> Callable[[APIClient], Coroutine[Any, Any, None]]:
    """``deleteClaim``: the finalizer off, then DELETE with the claim's UID as precondition."""
    meta = ob.meta(claim)
    ns, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")

    async def run(client: APIClient) -> None:
        try:
            if meta.get("finalizers"):
                await client.patch(claim_path(ns, name), {"metadata": {"finalizers": None}})
            await client.delete(claim_path(ns, name), uid=claim_uid(claim))
        except APIError as exc:
            log.error("delete resourceclaim=%s: %s", claim_ref(claim), exc)

    return run


def unreserve_in_api(claims: list[Obj], created: Obj | None, pod_uid: str,
                     in_flight: dict[str, list[Any]]) -> Callable[[APIClient], Coroutine[Any, Any, None]]:
    """``Unreserve``'s API writes: the Pod's reservation taken back from ``claims`` (a strategic-merge
    patch of ``status.reservedFor``), the extended-resource claim PreBind ``created`` deleted
    (``unreserveExtendedResourceClaim`` / ``deleteClaim``: the finalizer off, then delete) and its
    entry dropped from the plugin's ``in_flight`` claims. Failures are logged, as upstream."""

    async def run(client: APIClient) -> None:
        for claim in claims:
            meta = claim_meta(claim)
            try:
                await client.patch(claim_path(str(meta.get("namespace") or ""), str(meta.get("name") or ""),
                                              "status"), unreserve_patch(claim, pod_uid),
                                   content_type="application/strategic-merge-patch+json")
            except APIError as exc:
                log.error("unreserve resourceclaim=%s: %s", claim_ref(claim), exc)
        if created is not None:
            meta = claim_meta(created)
            ns, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
            try:
                await client.patch(claim_path(ns, name), {"metadata": {"finalizers": None}})
                await client.delete(claim_path(ns, name), uid=claim_uid(created))
            except APIError as exc:
                log.error("delete resourceclaim=%s: %s", claim_ref(created), exc)
            in_flight.pop(claim_uid(created), None)

    return run


def simulated_pre_bind(state: CycleState, pod: PodInfo) -> list[str]:
    """What upstream's PreBind writes, applied to the cycle's in-memory ClusterObjects (for
    ``explain`` / ``simulate`` only, never for the live informers' objects): each claim of the Pod
    gets ``status.allocation`` (from Reserve) and the Pod in ``status.reservedFor``. Later Pods
    then see those claims allocated (and may share them) instead of "in the process of being
    allocated". Returns the ``namespace/name`` of the claims written; the in-flight entries are
    dropped by the next PreFilter. The special extended-resource claim is created under the name
    ``<pod>-extended-resources``.
    """
    try:
        s: DRAState = state.read(STATE_KEY)
    except KeyError:
        return []
    if state.snapshot is None or not s.claims:
        return []
    objects = state.snapshot.objects
    if not s.claims:
        return []
    written: list[str] = []
    for i, claim in enumerate(s.claims):
        alloc = s.allocations[i] or allocation_of(claim)
        if alloc is None:
            continue
        new = copy.deepcopy(claim)
        meta = claim_meta(new)
        if meta.get("name") == SPECIAL_CLAIM_NAME:
            meta["name"] = f"{pod.name}-extended-resources"
        status = dict(new.get("status") or {})
        status["allocation"] = alloc
        reserved = [r for r in status.get("reservedFor") or [] if isinstance(r, dict)]
        if not any(r.get("uid") == pod.uid for r in reserved):
            reserved.append({"resource": "pods", "name": pod.name, "uid": pod.uid})
        status["reservedFor"] = reserved
        new["status"] = status
        new["metadata"] = meta
        objects.upsert("ResourceClaim", new)
        written.append(claim_ref(new))
    return written
