"""A small dynamic provisioner for e2e tests: what a CSI external-provisioner does, as an asyncio task.

kube-controller-manager's PV controller hands a WaitForFirstConsumer claim to its external provisioner
once the scheduler has annotated it with ``volume.kubernetes.io/selected-node``: it sets
``volume.kubernetes.io/storage-provisioner: <name>`` and waits for a PV. This task watches claims
(listing every ``interval`` seconds, as an informer's resync would) and, for each claim handed to
``name`` with a selected node and no volume yet, creates a PV as external-provisioner would:

* name ``pvc-<claim uid>``, annotation ``pv.kubernetes.io/provisioned-by: <name>``;
* the claim's request as capacity, its access modes and volume mode, its class, reclaim ``Delete``;
* ``claimRef`` to the claim (with its UID), so the PV controller binds the two;
* a ``hostPath`` source pinned to the selected node by a ``kubernetes.io/hostname`` node affinity
  (a local volume: no attach, no CSIDriver object needed).

Upstream: ``kubernetes-csi/external-provisioner`` (``controller.go`` ``Provision``) and
``sig-storage-lib-external-provisioner`` (``shouldProvision``, ``provisionClaimOperation``).
``paused`` stops it answering (a provisioner that is down); ``created`` lists the PVs it made,
``first_seen`` the monotonic time it first saw each claim handed to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

ANN_SELECTED_NODE = "volume.kubernetes.io/selected-node"
ANN_STORAGE_PROVISIONER = "volume.kubernetes.io/storage-provisioner"
ANN_PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"


class Provisioner:
    """Provisions claims handed to ``name`` (see the module docstring)."""

    def __init__(self, api: client.ApiClient, name: str, interval: float = 0.1) -> None:
        self.core = client.CoreV1Api(api)
        self.name = name
        self.interval = interval
        self.paused = False
        self.created: list[str] = []
        self.first_seen: dict[str, float] = {}
        self.errors: list[str] = []

    def _pv(self, claim: Any, node: str) -> dict[str, Any]:
        meta, spec = claim["metadata"], claim["spec"]
        size = ((spec.get("resources") or {}).get("requests") or {}).get("storage", "1Gi")
        name = f"pvc-{meta['uid']}"
        return {
            "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": name, "annotations": {ANN_PROVISIONED_BY: self.name}},
            "spec": {
                "capacity": {"storage": size},
                "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
                "volumeMode": spec.get("volumeMode") or "Filesystem",
                "storageClassName": spec.get("storageClassName"),
                "persistentVolumeReclaimPolicy": "Delete",
                "claimRef": {"kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": meta["namespace"],
                             "name": meta["name"], "uid": meta["uid"]},
                "hostPath": {"path": f"/tmp/e2e-provisioned/{name}"},
                "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}},
            },
        }

    async def step(self) -> None:
        """One pass over every claim."""
        resp = await self.core.list_persistent_volume_claim_for_all_namespaces(_preload_content=False)
        items = (await resp.json())["items"]
        for claim in items:
            ann = claim["metadata"].get("annotations") or {}
            if ann.get(ANN_STORAGE_PROVISIONER) != self.name or (claim.get("spec") or {}).get("volumeName"):
                continue
            key = f"{claim['metadata']['namespace']}/{claim['metadata']['name']}"
            self.first_seen.setdefault(key, time.monotonic())
            node = ann.get(ANN_SELECTED_NODE)
            if not node or self.paused:
                continue
            body = self._pv(claim, node)
            try:
                await self.core.create_persistent_volume(body)
            except ApiException as e:
                if e.status != 409:  # 409: made on an earlier pass, the PV controller has not bound it yet
                    self.errors.append(f"{key}: {e.status} {e.reason}")
                continue
            self.created.append(body["metadata"]["name"])

    async def run(self) -> None:
        while True:
            try:
                await self.step()
            except Exception as e:  # keep serving; the test reads .errors
                self.errors.append(repr(e))
            await asyncio.sleep(self.interval)


@contextlib.asynccontextmanager
async def running_provisioner(api: client.ApiClient, name: str) -> AsyncIterator[Provisioner]:
    """A :class:`Provisioner` running as a task for the ``async with`` block."""
    p = Provisioner(api, name)
    task = asyncio.create_task(p.run(), name=f"provisioner {name}")
    try:
        yield p
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
