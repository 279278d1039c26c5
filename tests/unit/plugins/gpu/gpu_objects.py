"""Node / Pod dict builders for the GPU plugin tests (plain Kubernetes JSON)."""

from __future__ import annotations

import itertools
from typing import Any

Obj = dict[str, Any]

_uid = itertools.count(1)


def gpu_node(name: str, gpus: int = 0, *, product: str | None = None, memory_mib: int | None = None,
             labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
             cpu: str = "64", memory: str = "512Gi", pods: str = "110") -> Obj:
    """A Node with ``gpus`` allocatable ``nvidia.com/gpu`` and optional GFD labels."""
    lab = {"kubernetes.io/hostname": name}
    if product is not None:
        lab["nvidia.com/gpu.product"] = product
    if memory_mib is not None:
        lab["nvidia.com/gpu.memory"] = str(memory_mib)
    if gpus:
        lab["nvidia.com/gpu.count"] = str(gpus)
    lab.update(labels or {})
    alloc = {"cpu": cpu, "memory": memory, "pods": pods}
    if gpus:
        alloc["nvidia.com/gpu"] = str(gpus)
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": lab, "annotations": dict(annotations or {})},
        "status": {"allocatable": alloc, "capacity": dict(alloc)},
    }


def gpu_pod(name: str, gpus: int = 0, *, annotations: dict[str, str] | None = None, node: str | None = None,
            uid: str | None = None, limits_only: bool = False, created: str | None = None,
            namespace: str = "default", cpu: str = "100m", memory: str = "128Mi") -> Obj:
    """A Pod with one container asking for ``gpus`` ``nvidia.com/gpu`` (requests = limits, or
    limits only), optionally bound to ``node``."""
    res: Obj = {"requests": {"cpu": cpu, "memory": memory}, "limits": {}}
    if gpus:
        res["limits"]["nvidia.com/gpu"] = str(gpus)
        if not limits_only:
            res["requests"]["nvidia.com/gpu"] = str(gpus)
    meta: Obj = {"name": name, "namespace": namespace, "uid": uid or f"uid-{name}-{next(_uid)}",
                 "annotations": dict(annotations or {})}
    if created is not None:
        meta["creationTimestamp"] = created
    spec: Obj = {"schedulerName": "py-scheduler", "containers": [{"name": "main", "image": "cuda", "resources": res}]}
    if node is not None:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec,
            "status": {"phase": "Running" if node else "Pending"}}


A100_40 = "NVIDIA-A100-SXM4-40GB"
A100_80 = "NVIDIA-A100-SXM4-80GB"
H100_80 = "NVIDIA-H100-80GB-HBM3"
L4 = "NVIDIA-L4-24GB"


def a100_node(name: str, **kw: Any) -> Obj:
    """8x A100-40GB, NVLink groups 0-3 and 4-7."""
    ann = {"gpu-scheduler/nvlink-groups": "0-3;4-7"}
    ann.update(kw.pop("annotations", {}))
    return gpu_node(name, 8, product=A100_40, memory_mib=40960, annotations=ann, **kw)


def h100_node(name: str, **kw: Any) -> Obj:
    """8x H100-80GB in one NVLink group of 8 (via max-nvlink-group-size)."""
    labels = {"gpu-scheduler/max-nvlink-group-size": "8"}
    labels.update(kw.pop("labels", {}))
    return gpu_node(name, 8, product=H100_80, memory_mib=81559, labels=labels, **kw)


def l4_node(name: str, **kw: Any) -> Obj:
    """1x L4 (24 GB)."""
    return gpu_node(name, 1, product=L4, memory_mib=23034, **kw)


def cpu_node(name: str) -> Obj:
    return gpu_node(name, 0)
