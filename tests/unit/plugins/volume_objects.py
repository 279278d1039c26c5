"""Object builders shared by the volume plugin tests (VolumeBinding, VolumeRestrictions, VolumeZone,
NodeVolumeLimits, the storage helpers): PV / PVC / StorageClass / CSINode / CSIDriver / CSIStorageCapacity / Pod /
Node dict factories, a Snapshot builder, and the parity bench's explain path with the view the oracle tables
are reduced to."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from py_scheduler.cache.snapshot import ClusterObjects, Snapshot
from py_scheduler.framework.interfaces import PreFilterPlugin
from py_scheduler.framework.types import CycleState, PodInfo, Status
from py_scheduler.plugins.helpers import storage as st

Obj = dict[str, Any]

REPO = Path(__file__).resolve().parents[3]
ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"
BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"
BETA_REGION = "failure-domain.beta.kubernetes.io/region"
DRIVER = "csi.example.com"


# -- builders -----------------------------------------------------------------------------------------

def node(name: str, labels: dict[str, str] | None = None) -> Obj:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                       "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"}}}


def pod(name: str, volumes: list[Obj] | None = None, node_name: str | None = None, ns: str = "default",
        ts: str = "2024-01-01T00:00:00Z") -> Obj:
    spec: Obj = {"containers": [{"name": "c", "image": "busybox",
                                 "resources": {"requests": {"cpu": "100m", "memory": "100Mi"}}}],
                 "volumes": list(volumes or [])}
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}", "creationTimestamp": ts}, "spec": spec}


def pvc_vol(vname: str, claim: str) -> Obj:
    return {"name": vname, "persistentVolumeClaim": {"claimName": claim}}


def pvc(name: str, size: str = "1Gi", sc: str | None = None, volume: str | None = None, bound: bool = False,
        modes: tuple[str, ...] = ("ReadWriteOnce",), ns: str = "default", ann: dict[str, str] | None = None,
        **spec_extra: Any) -> Obj:
    spec: Obj = {"accessModes": list(modes), "resources": {"requests": {"storage": size}}, **spec_extra}
    if sc is not None:
        spec["storageClassName"] = sc
    if volume:
        spec["volumeName"] = volume
    meta: Obj = {"name": name, "namespace": ns, "uid": f"uid-pvc-{name}", "resourceVersion": "1"}
    a = dict(ann or {})
    if bound:
        a[st.ANN_BIND_COMPLETED] = "yes"
    if a:
        meta["annotations"] = a
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": spec,
            "status": {"phase": "Bound" if bound else "Pending"}}


def pv(name: str, size: str = "1Gi", sc: str = "", modes: tuple[str, ...] = ("ReadWriteOnce",),
       claim: tuple[str, str] | None = None, labels: dict[str, str] | None = None,
       affinity: list[Obj] | None = None, phase: str = "Available", source: Obj | None = None,
       **spec_extra: Any) -> Obj:
    spec: Obj = {"capacity": {"storage": size}, "accessModes": list(modes), "storageClassName": sc, **spec_extra}
    spec.update(source or {"csi": {"driver": DRIVER, "volumeHandle": name}})
    if claim:
        spec["claimRef"] = {"namespace": claim[0], "name": claim[1]}
    if affinity:
        spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": affinity}}
    return {"apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": name, "labels": dict(labels or {}), "resourceVersion": "1"},
            "spec": spec, "status": {"phase": phase}}


def zone_affinity(zone: str, key: str = ZONE) -> list[Obj]:
    return [{"matchExpressions": [{"key": key, "operator": "In", "values": [zone]}]}]


def storage_class(name: str, mode: str | None = "WaitForFirstConsumer", provisioner: str = DRIVER,
                  topologies: list[Obj] | None = None) -> Obj:
    o: Obj = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name},
              "provisioner": provisioner}
    if mode:
        o["volumeBindingMode"] = mode
    if topologies:
        o["allowedTopologies"] = topologies
    return o


def csi_node(name: str, drivers: list[Obj], migrated: str | None = None) -> Obj:
    meta: Obj = {"name": name}
    if migrated is not None:
        meta["annotations"] = {st.ANN_MIGRATED_PLUGINS: migrated}
    return {"apiVersion": "storage.k8s.io/v1", "kind": "CSINode", "metadata": meta, "spec": {"drivers": drivers}}


def driver(name: str, count: int | None = None) -> Obj:
    d: Obj = {"name": name, "nodeID": "x"}
    if count is not None:
        d["allocatable"] = {"count": count}
    return d


def csi_driver(name: str, storage_capacity: bool = True, **spec: Any) -> Obj:
    return {"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver", "metadata": {"name": name},
            "spec": {"storageCapacity": storage_capacity, **spec}}


def capacity(name: str, sc: str, cap: str, labels: dict[str, str], ns: str = "default",
             max_size: str | None = None) -> Obj:
    o: Obj = {"apiVersion": "storage.k8s.io/v1", "kind": "CSIStorageCapacity",
              "metadata": {"name": name, "namespace": ns}, "storageClassName": sc, "capacity": cap,
              "nodeTopology": {"matchLabels": labels}}
    if max_size:
        o["maximumVolumeSize"] = max_size
    return o


def bound_csi(i: int, drv: str = DRIVER, ns: str = "default") -> list[Obj]:
    """A bound CSI PV ``p<i>`` (handle ``h<i>``) and its claim ``c<i>``."""
    return [pv(f"p{i}", claim=(ns, f"c{i}"), source={"csi": {"driver": drv, "volumeHandle": f"h{i}"}}),
            pvc(f"c{i}", volume=f"p{i}", bound=True, ns=ns)]


def run_py(objects: list[Obj]) -> list[Obj]:
    """``bench.parity_lib.runner.run_py``: the explain code path (full default profile, Reserve and
    assume between Pods, ties to the smallest node name), as the parity bench compares with the oracle."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from bench.parity_lib.runner import run_py as _run_py

    return _run_py(objects)


def fit_message(msg: str | None) -> str | None:
    """The FitError part of a FailedScheduling message, without the PostFilter (preemption) tail:
    the oracle's tail for PreFilter rejections (``... not found``) is an artefact of its harness."""
    if msg is None:
        return None
    msg = msg.split(" preemption:")[0]
    return msg.removesuffix(" not found") if msg.endswith(". not found") else msg


def volume_view(result: Obj, plugin: str = "VolumeBinding") -> Obj:
    """What the volume plugins decide for one Pod: feasible nodes, rejections, the plugin's scores and
    the FitError message."""
    return {"pod": result["pod"], "feasible": sorted(result["feasible"]), "filtered": result["filtered"],
            "scores": result["scores"].get(plugin), "message": fit_message(result["message"])}


def snapshot_with(nodes: list[Obj], objs: list[Obj]) -> Snapshot:
    """A Snapshot of ``nodes`` holding the Pods among ``objs``, every other object of ``objs`` in its
    ClusterObjects."""
    cobj = ClusterObjects()
    for o in objs:
        if o["kind"] != "Pod":
            cobj.upsert(o["kind"], o)
    return Snapshot.from_objects(nodes, [o for o in objs if o["kind"] == "Pod"], cobj)


def pre_filter_with(pl: PreFilterPlugin, snap: Snapshot, p: Obj) -> tuple[CycleState, PodInfo, Status]:
    """Runs ``pl``'s PreFilter for Pod ``p`` on a fresh CycleState of ``snap``: (state, PodInfo, status)."""
    state = CycleState(snap)
    pi = PodInfo(p)
    _, s = pl.pre_filter(state, pi, snap.node_info_list)
    return state, pi, s
