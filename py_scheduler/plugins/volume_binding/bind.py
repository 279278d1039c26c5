"""VolumeBinding's PreBind: the API writes and the wait (upstream ``volumebinding/binder.go``:
``BindPodVolumes``, ``bindAPIUpdate``, ``checkBindings``).
"""

from __future__ import annotations

import asyncio
import time

from py_scheduler.framework.handle import APIClient, APIError, ObjectLister
from py_scheduler.framework.objects import Obj
from py_scheduler.plugins.helpers import csi_translation as csi
from py_scheduler.plugins.helpers import storage as st
from py_scheduler.plugins.volume_binding.binder import (
    BindingInfo,
    DynamicProvision,
    PodVolumes,
    VolumeBinder,
    try_translate_pv_to_csi,
)

BIND_POLL_INTERVAL_SECONDS = 1.0
"""Upstream polls ``checkBindings`` every second (``wait.PollUntilContextTimeout(ctx, time.Second, ...)``)."""


class BindError(Exception):
    """``BindPodVolumes`` failed; the text is upstream's error (``binding volumes: ...``, the API's
    refusal of a PV / PVC update, ...). The binding cycle fails and the Pod is retried."""


def pv_path(name: str) -> str:
    """API path of a PersistentVolume."""
    return f"/api/v1/persistentvolumes/{name}"


def pvc_path(namespace: str, name: str) -> str:
    """API path of a PersistentVolumeClaim."""
    return f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{name}"


def _rv_int(obj: Obj) -> int | None:
    try:
        return int(st.resource_version(obj))
    except ValueError:
        return None


def _newer_than(ours: Obj, seen: Obj) -> bool:
    """``versioner.CompareResourceVersion(ours, seen) > 0``: the object we wrote is newer than the one
    the informer holds (wait for the watch to deliver ours). Unparsable versions never wait."""
    a, b = _rv_int(ours), _rv_int(seen)
    return a is not None and b is not None and a > b


async def bind_pod_volumes(binder: VolumeBinder, client: APIClient, objects: ObjectLister, pod: Obj, node_name: str,
                           pod_volumes: PodVolumes, timeout_seconds: float,
                           interval_seconds: float = BIND_POLL_INTERVAL_SECONDS) -> None:
    """``BindPodVolumes``: write the assumed decisions through the API, then wait until the PV
    controller (and, for provisioned claims, the external provisioner) reports every claim bound.

    1. ``bindAPIUpdate``: PUT each static binding's PV (``spec.claimRef`` set; the body carries the
       resourceVersion read at Filter time, so a PV changed since is refused with a conflict), then
       each provisioned claim (``volume.kubernetes.io/selected-node: <node>``). The stored objects
       replace ``pod_volumes``' entries; the assumed versions not yet written are reverted in the
       binder's caches on failure (those written stay until the informer delivers the newer object).
    2. Every ``interval_seconds`` (upstream: 1 s, first check after one interval) up to
       ``timeout_seconds``: :func:`check_bindings` on ``objects`` (the latest informer state, not the
       assume caches). With ``interval_seconds`` 0 the coroutine only ever suspends on bare yields, so
       the offline engine can drive it without an event loop.

    Raises:
        BindError: an API write was refused (the API's message), a check found a condition that needs
            a new scheduling attempt (``binding volumes: <reason>``), or the wait timed out
            (``binding volumes: context deadline exceeded``).
    """
    bindings = pod_volumes.static_bindings
    claims = [d.pvc for d in pod_volumes.dynamic_provisions]
    done_b = done_c = 0
    try:
        for b in bindings:
            b.pv = await client.update(pv_path(st.name(b.pv)), b.pv)
            done_b += 1
        for i, c in enumerate(claims):
            claims[i] = await client.update(pvc_path(st.namespace(c), st.name(c)), c)
            pod_volumes.dynamic_provisions[i] = DynamicProvision(claims[i])
            done_c += 1
    except APIError as exc:
        raise BindError(exc.message or str(exc)) from exc
    finally:
        binder._revert_pvs(bindings[done_b:])
        binder._revert_pvcs(claims[done_c:])

    deadline = time.monotonic() + timeout_seconds
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise BindError("binding volumes: context deadline exceeded")
        await asyncio.sleep(min(interval_seconds, remaining))  # sleep(0) needs no event loop (offline)
        if time.monotonic() > deadline:
            raise BindError("binding volumes: context deadline exceeded")
        try:
            if check_bindings(objects, pod, node_name, bindings, claims):
                return
        except st.StorageError as exc:
            raise BindError(f"binding volumes: {exc}") from exc


def check_bindings(objects: ObjectLister, pod: Obj, node_name: str, bindings: list[BindingInfo],
                   claims: list[Obj]) -> bool:
    """``checkBindings``: True when every PV / PVC PreBind wrote is fully bound in the latest API state.

    False (keep waiting) while the informer has not yet delivered our own writes, or a claim is not
    yet fully bound (``spec.volumeName`` and ``pv.kubernetes.io/bind-completed``).

    Raises:
        st.StorageError: a condition that needs a new scheduling attempt, worded as upstream: the node
            or the Pod is gone, a PV / PVC we wrote is gone, a PV's ``claimRef`` was reset or its node
            affinity rejects the node, a provisioned claim lost its ``selected-node`` annotation (the
            provisioner gave up: ``provisioning failed for PVC "x"``).
    """
    node = objects.get("Node", "", node_name)
    if node is None:
        raise st.StorageError(f'failed to get node "{node_name}": nodes "{node_name}" not found')
    node_labels = st.labels(node)
    csi_node = objects.get("CSINode", "", node_name)
    if objects.get("Pod", st.namespace(pod), st.name(pod)) is None:
        raise st.StorageError(f'pod does not exist any more: pods "{st.name(pod)}" not found')
    for b in bindings:
        pv_name = st.name(b.pv)
        pv = objects.get("PersistentVolume", "", pv_name)
        if pv is None:
            raise st.StorageError(f'failed to check binding: persistentvolumes "{pv_name}" not found')
        pvc = objects.get("PersistentVolumeClaim", st.namespace(b.pvc), st.name(b.pvc))
        if pvc is None:
            raise st.StorageError(f'failed to check binding: persistentvolumeclaims '
                                  f'"{st.namespace(b.pvc)}/{st.name(b.pvc)}" not found')
        if _newer_than(b.pv, pv):
            return False
        try:
            pv = try_translate_pv_to_csi(pv, csi_node)
        except csi.TranslationError as exc:
            raise st.StorageError(f"failed to translate pv to csi: {exc}") from exc
        if not st.check_node_affinity(pv, node_labels):
            raise st.StorageError(f'pv "{pv_name}" node affinity doesn\'t match node "{node_name}": '
                                  "no matching NodeSelectorTerms")
        ref = st.spec(pv).get("claimRef")
        if not isinstance(ref, dict) or not ref.get("uid"):
            raise st.StorageError(f'ClaimRef got reset for pv "{pv_name}"')
        if not st.is_pvc_fully_bound(pvc):
            return False
    for claim in claims:
        pvc = objects.get("PersistentVolumeClaim", st.namespace(claim), st.name(claim))
        if pvc is None:
            raise st.StorageError(f'failed to check provisioning pvc: persistentvolumeclaims '
                                  f'"{st.namespace(claim)}/{st.name(claim)}" not found')
        if _newer_than(claim, pvc):
            return False
        if st.annotation(pvc, st.ANN_SELECTED_NODE) != node_name:
            if not st.annotations_of(pvc):
                raise st.StorageError(f'selectedNode annotation reset for PVC "{st.name(pvc)}"')
            raise st.StorageError(f'provisioning failed for PVC "{st.name(pvc)}"')
        vol = st.spec(pvc).get("volumeName")
        if isinstance(vol, str) and vol:
            pv = objects.get("PersistentVolume", "", vol)
            if pv is None:
                return False  # tolerated: the watch may not have delivered the PV yet
            try:
                pv = try_translate_pv_to_csi(pv, csi_node)
            except csi.TranslationError as exc:
                raise st.StorageError(str(exc)) from exc
            if not st.check_node_affinity(pv, node_labels):
                raise st.StorageError(f'pv "{vol}" node affinity doesn\'t match node "{node_name}": '
                                      "no matching NodeSelectorTerms")
        if not st.is_pvc_fully_bound(pvc):
            return False
    return True
