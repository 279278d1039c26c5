"""An in-memory API server for the offline engine: the Handle's client and object lister on a Snapshot.

``explain`` and ``simulate`` run the binding cycle's PreBind plugins as the live scheduler does, but
their writes land here, in the snapshot's :class:`~py_scheduler.cache.snapshot.ClusterObjects`, so
later Pods of the same run see them (a claim bound, a PV taken). Nothing leaves the process.

What the cluster's controllers would then do is done at once, synchronously, after each write
(:meth:`MemoryAPI.settle`), so a PreBind that waits for them finds its work done on its first check:

* kube-controller-manager's PV binder (``pkg/controller/volume/persistentvolume/pv_controller.go``
  ``syncUnboundClaim`` / ``bind``): a PV whose ``claimRef`` names an unbound claim is bound to it (the
  claim gets ``spec.volumeName``, ``pv.kubernetes.io/bind-completed``, phase Bound; the PV the
  claim's UID and phase Bound);
* an external provisioner (what a CSI external-provisioner does on ``volume.kubernetes.io/selected-node``):
  a claim of a class with a provisioner, annotated with a node, gets a PV ``pvc-<claim uid>`` of the
  requested size, pinned to that node by a ``kubernetes.io/hostname`` node affinity, and is bound to it.

Errors are the Handle's (:class:`~py_scheduler.framework.handle.APINotFound`,
:class:`~py_scheduler.framework.handle.APIConflict` on a stale ``resourceVersion``), worded as the API
server words them.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from py_scheduler.cache.kinds import NAMESPACED_KINDS
from py_scheduler.cache.snapshot import ClusterObjects, Snapshot
from py_scheduler.framework import objects as ob
from py_scheduler.framework.handle import APIConflict, APIError, APINotFound
from py_scheduler.framework.objects import Obj

__all__ = ["MemoryAPI", "MemoryClient"]


KINDS: dict[str, str] = {
    "persistentvolumes": "PersistentVolume",
    "persistentvolumeclaims": "PersistentVolumeClaim",
    "resourceclaims": "ResourceClaim",
    "storageclasses": "StorageClass",
    "csinodes": "CSINode",
    "pods": "Pod",
    "nodes": "Node",
}
"""API resource (plural) -> kind, for the paths the binding cycle's plugins write."""

ANN_BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
ANN_BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
ANN_SELECTED_NODE = "volume.kubernetes.io/selected-node"
ANN_PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"
HOSTNAME_LABEL = "kubernetes.io/hostname"




def _merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = _merge_patch(out.get(k), v)
    return out


class MemoryAPI:
    """``APIClient`` and ``ObjectLister`` over one Snapshot (attach it with :meth:`attach`).

    Nodes and Pods are read from the snapshot's NodeInfos (plus :attr:`pending`, the Pods being
    bound); every other kind from its ClusterObjects, which writes update in place. Each accepted
    write gets a new ``resourceVersion`` (a counter above every version in the snapshot) and is
    followed by :meth:`settle`. :attr:`client` is the ``APIClient`` face (its ``get`` takes a path).
    """

    def __init__(self, snapshot: Snapshot | None = None) -> None:
        self.snapshot = snapshot
        self.pending: dict[tuple[str, str], Obj] = {}
        """(namespace, name) -> Pods in their binding cycle (not yet in the snapshot)."""
        self.unscheduled: list[Obj] = []
        """The file's Pods without a node (what the live informers' store would hold as the queue's
        Pods): listed and found as ``Pod`` too, so GangScheduling counts a group's members."""
        self.writes: list[tuple[str, str, str]] = []
        """(verb, kind, key) of every accepted write, in order (for reports and tests)."""
        self._rv = 0
        self.client = MemoryClient(self)

    def attach(self, snapshot: Snapshot) -> None:
        """Serve ``snapshot`` (the offline engine builds its frameworks before its snapshot)."""
        self.snapshot = snapshot

    @property
    def objects(self) -> ClusterObjects:
        if self.snapshot is None:
            raise APIError(0, "NoSnapshot", "the in-memory API has no snapshot attached")
        return self.snapshot.objects

    # -- ObjectLister ---------------------------------------------------------------------------------
    def get(self, kind: str, namespace: str, name: str) -> Obj | None:
        """The object, or None (``namespace`` is ``""`` for cluster-scoped kinds)."""
        if kind == "Node":
            ni = self.snapshot.node_info_map.get(name) if self.snapshot is not None else None
            return ni.node if ni is not None else None
        if kind == "Pod":
            hit = self.pending.get((namespace, name))
            if hit is not None or self.snapshot is None:
                return hit
            for pi in self.snapshot.all_pods():
                if pi.namespace == namespace and pi.name == name:
                    return pi.pod
            for p in self.unscheduled:
                meta = p.get("metadata") or {}
                if (meta.get("namespace") or "default") == namespace and meta.get("name") == name:
                    return p
            return None
        key = f"{namespace or 'default'}/{name}" if kind in NAMESPACED_KINDS else name
        return self.objects.get(kind, key)

    def list(self, kind: str) -> Iterable[Obj]:
        """Every object of ``kind`` (Nodes and Pods from the snapshot)."""
        if kind == "Node":
            return [ni.node for ni in self.snapshot.node_info_list if ni.node] if self.snapshot else []
        if kind == "Pod":
            placed = [pi.pod for pi in self.snapshot.all_pods()] if self.snapshot else []
            seen = {((p.get("metadata") or {}).get("namespace"), (p.get("metadata") or {}).get("name"))
                    for p in placed}
            return placed + [p for p in self.unscheduled
                             if ((p.get("metadata") or {}).get("namespace"), (p.get("metadata") or {}).get("name"))
                             not in seen]
        return self.objects.list(kind)

    # -- APIClient ------------------------------------------------------------------------------------
    def _parse(self, path: str) -> tuple[str, str, str, str]:
        """(kind, namespace, name, subresource) of an API path; name "" for a collection."""
        parts = [p for p in path.split("/") if p]
        if parts[:1] == ["api"]:
            rest = parts[2:]
        elif parts[:1] == ["apis"]:
            rest = parts[3:]
        else:
            raise APIError(404, "NotFound", f"the server could not find the requested resource ({path})")
        ns = ""
        if rest[:1] == ["namespaces"] and len(rest) >= 3:
            ns, rest = rest[1], rest[2:]
        if not rest or rest[0] not in KINDS:
            raise APIError(404, "NotFound", f"the server could not find the requested resource ({path})")
        return KINDS[rest[0]], ns, rest[1] if len(rest) > 1 else "", rest[2] if len(rest) > 2 else ""

    def _not_found(self, kind: str, name: str) -> APINotFound:
        plural = next(p for p, k in KINDS.items() if k == kind)
        return APINotFound(404, "NotFound", f'{plural} "{name}" not found')

    def _store(self, kind: str, obj: Obj) -> Obj:
        self._rv += 1
        if self.snapshot is not None and self._rv == 1:
            self._rv = 1 + max((_rv(o) for objs in self.objects.by_kind.values() for o in objs.values()), default=0)
        stored = copy.deepcopy(obj)
        stored.setdefault("metadata", {})["resourceVersion"] = str(self._rv)
        self.objects.upsert(kind, stored)
        return stored

    def _write(self, verb: str, kind: str, stored: Obj) -> Obj:
        self.writes.append((verb, kind, ClusterObjects.key(kind, stored)))
        self.settle()
        return copy.deepcopy(stored)

    async def get_obj(self, path: str) -> Obj | None:
        kind, ns, name, _ = self._parse(path)
        o = self.get(kind, ns, name)
        return copy.deepcopy(o) if o is not None else None

    async def create(self, path: str, obj: Obj) -> Obj:
        kind, ns, _, _ = self._parse(path)
        name = str(ob.meta(obj).get("name") or "")
        if self.get(kind, ns, name) is not None:
            plural = next(p for p, k in KINDS.items() if k == kind)
            raise APIConflict(409, "AlreadyExists", f'{plural} "{name}" already exists')
        new = copy.deepcopy(obj)
        if ns:
            new.setdefault("metadata", {})["namespace"] = ns
        return self._write("create", kind, self._store(kind, new))

    async def update(self, path: str, obj: Obj) -> Obj:
        kind, ns, name, _ = self._parse(path)
        cur = self.get(kind, ns, name)
        if cur is None:
            raise self._not_found(kind, name)
        if str(ob.meta(obj).get("resourceVersion") or "") not in ("", str(ob.meta(cur).get("resourceVersion") or "")):
            plural = next(p for p, k in KINDS.items() if k == kind)
            raise APIConflict(409, "Conflict", f'Operation cannot be fulfilled on {plural} "{name}": the object '
                                               "has been modified; please apply your changes to the latest "
                                               "version and try again")
        return self._write("update", kind, self._store(kind, obj))

    async def patch(self, path: str, patch: Obj, content_type: str = "application/merge-patch+json") -> Obj:
        kind, ns, name, _ = self._parse(path)
        cur = self.get(kind, ns, name)
        if cur is None:
            raise self._not_found(kind, name)
        return self._write("patch", kind, self._store(kind, _merge_patch(cur, patch)))

    async def delete(self, path: str, uid: str | None = None) -> None:
        kind, ns, name, _ = self._parse(path)
        cur = self.get(kind, ns, name)
        if cur is None:
            raise self._not_found(kind, name)
        if uid is not None and ob.meta(cur).get("uid") != uid:
            raise APIConflict(409, "Conflict", f"Precondition failed: UID in precondition: {uid}, "
                                               f"UID in object meta: {ob.meta(cur).get('uid')}")
        self.objects.delete(kind, cur)
        self.writes.append(("delete", kind, ClusterObjects.key(kind, cur)))

    async def bind(self, namespace: str, name: str, uid: str, node_name: str,
                   annotations: Mapping[str, str] | None = None) -> None:
        """Offline, the engine assumes the Pod in the snapshot itself; this only records the call."""
        self.writes.append(("bind", "Pod", f"{namespace}/{name}"))

    # -- the controllers ------------------------------------------------------------------------------
    def settle(self) -> None:
        """Do at once what the PV controller and an external provisioner would do next (see the
        module docstring). Idempotent."""
        objects = self.objects
        for claim in list(objects.list("PersistentVolumeClaim")):
            spec = claim.get("spec") or {}
            if spec.get("volumeName") and ANN_BIND_COMPLETED in ob.annotations_of(claim):
                continue
            ns, name = str(ob.meta(claim).get("namespace") or "default"), str(ob.meta(claim).get("name") or "")
            pv = self._prebound_pv(ns, name, spec.get("volumeName"))
            if pv is None and ANN_SELECTED_NODE in ob.annotations_of(claim) and not spec.get("volumeName"):
                pv = self._provision(claim, ob.annotations_of(claim)[ANN_SELECTED_NODE])
            if pv is not None:
                self._bind(claim, pv)

    def _prebound_pv(self, ns: str, name: str, volume_name: object) -> Obj | None:
        if isinstance(volume_name, str) and volume_name:
            pv = self.objects.get("PersistentVolume", volume_name)
            return pv
        for pv in self.objects.list("PersistentVolume"):
            ref = (pv.get("spec") or {}).get("claimRef")
            if isinstance(ref, dict) and ref.get("namespace") == ns and ref.get("name") == name:
                return pv
        return None

    def _provision(self, claim: Obj, node_name: str) -> Obj | None:
        spec = claim.get("spec") or {}
        cls_name = spec.get("storageClassName")
        sc = self.objects.get("StorageClass", cls_name) if isinstance(cls_name, str) else None
        provisioner = (sc or {}).get("provisioner")
        if not isinstance(provisioner, str) or not provisioner or provisioner == "kubernetes.io/no-provisioner":
            return None
        uid = str(ob.meta(claim).get("uid") or ob.meta(claim).get("name") or "")
        size = ((spec.get("resources") or {}).get("requests") or {}).get("storage", "0")
        pv: Obj = {
            "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": f"pvc-{uid}", "annotations": {ANN_PROVISIONED_BY: provisioner}},
            "spec": {
                "capacity": {"storage": size},
                "accessModes": list(spec.get("accessModes") or []),
                "storageClassName": cls_name,
                "persistentVolumeReclaimPolicy": (sc or {}).get("reclaimPolicy", "Delete"),
                "volumeMode": spec.get("volumeMode", "Filesystem"),
                "csi": {"driver": provisioner, "volumeHandle": f"pvc-{uid}"},
                "claimRef": {"kind": "PersistentVolumeClaim", "apiVersion": "v1",
                             "namespace": ob.meta(claim).get("namespace") or "default",
                             "name": ob.meta(claim).get("name"), "uid": ob.meta(claim).get("uid")},
                "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": HOSTNAME_LABEL, "operator": "In", "values": [node_name]}]}]}},
            },
            "status": {"phase": "Pending"},
        }
        self.writes.append(("create", "PersistentVolume", f"pvc-{uid}"))
        return self._store("PersistentVolume", pv)

    def _bind(self, claim: Obj, pv: Obj) -> None:
        ref = dict((pv.get("spec") or {}).get("claimRef") or {})
        if ref and (ref.get("name") != ob.meta(claim).get("name")
                    or (ref.get("namespace") or "default") != (ob.meta(claim).get("namespace") or "default")):
            return  # the PV belongs to another claim: the PV controller would not bind these two
        ref.update({"kind": "PersistentVolumeClaim", "apiVersion": "v1", "uid": ob.meta(claim).get("uid"),
                    "namespace": ob.meta(claim).get("namespace") or "default", "name": ob.meta(claim).get("name")})
        new_pv = copy.deepcopy(pv)
        new_pv["spec"]["claimRef"] = ref
        new_pv["status"] = {"phase": "Bound"}
        self._store("PersistentVolume", new_pv)
        new_claim = copy.deepcopy(claim)
        new_claim["spec"]["volumeName"] = ob.meta(pv).get("name")
        new_claim["metadata"]["annotations"] = {**ob.annotations_of(claim), ANN_BIND_COMPLETED: "yes"}
        status = dict(new_claim.get("status") or {})
        status.update({"phase": "Bound", "accessModes": new_claim["spec"].get("accessModes", []),
                       "capacity": (pv.get("spec") or {}).get("capacity", {})})
        new_claim["status"] = status
        self._store("PersistentVolumeClaim", new_claim)


class MemoryClient:
    """The ``APIClient`` of a :class:`MemoryAPI` (whose own ``get`` is the lister's)."""

    def __init__(self, api: MemoryAPI) -> None:
        self.api = api

    async def get(self, path: str) -> Obj | None:
        return await self.api.get_obj(path)

    async def create(self, path: str, obj: Obj) -> Obj:
        return await self.api.create(path, obj)

    async def update(self, path: str, obj: Obj) -> Obj:
        return await self.api.update(path, obj)

    async def patch(self, path: str, patch: Obj, content_type: str = "application/merge-patch+json") -> Obj:
        return await self.api.patch(path, patch, content_type)

    async def delete(self, path: str, uid: str | None = None) -> None:
        await self.api.delete(path, uid)

    async def bind(self, namespace: str, name: str, uid: str, node_name: str,
                   annotations: Mapping[str, str] | None = None) -> None:
        await self.api.bind(namespace, name, uid, node_name, annotations)


def _rv(o: Mapping[str, Any]) -> int:
    try:
        return int(str(ob.meta(o).get("resourceVersion") or "0"))
    except ValueError:
        return 0
