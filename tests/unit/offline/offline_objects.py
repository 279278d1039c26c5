"""Builders of plain Kubernetes objects (dicts) and snapshot files for the offline tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

Obj = dict[str, Any]


def node(name: str, cpu: str = "4", memory: str = "16Gi", pods: str = "110", *, labels: dict[str, str] | None = None,
         taints: list[Obj] | None = None, extra: dict[str, str] | None = None) -> Obj:
    """A Node with allocatable cpu / memory / pods (and ``extra`` resources such as nvidia.com/gpu)."""
    n: Obj = {"apiVersion": "v1", "kind": "Node",
              "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
              "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": pods, **(extra or {})}}}
    if taints:
        n["spec"] = {"taints": taints}
    return n


def pod(name: str, namespace: str = "default", *, cpu: str | None = None, memory: str | None = None,
        node_name: str | None = None, priority: int | None = None, created: str | None = None,
        labels: dict[str, str] | None = None, spec: Obj | None = None, phase: str | None = None,
        annotations: dict[str, str] | None = None) -> Obj:
    """A one-container Pod; ``cpu`` / ``memory`` become requests."""
    c: Obj = {"name": "main", "image": "registry.k8s.io/pause:3.10"}
    req = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    if req:
        c["resources"] = {"requests": req}
    s: Obj = {"containers": [c]}
    if node_name:
        s["nodeName"] = node_name
    if priority is not None:
        s["priority"] = priority
    s.update(spec or {})
    meta: Obj = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    if created:
        meta["creationTimestamp"] = created
    p: Obj = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": s}
    if phase:
        p["status"] = {"phase": phase}
    return p


def write_list(path: Path, objs: list[Obj], fmt: str = "yaml") -> Path:
    """Write ``objs`` as a ``v1/List`` (``kubectl get ... -o yaml`` shape) in YAML or JSON."""
    doc = {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": objs}
    path.write_text(json.dumps(doc) if fmt == "json" else yaml.safe_dump(doc, sort_keys=False))
    return path


def write_multidoc(path: Path, objs: list[Obj]) -> Path:
    path.write_text(yaml.safe_dump_all(objs, sort_keys=False, explicit_start=True))
    return path


PREFER_SSD = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
    {"weight": 50, "preference": {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}}]}}
TOLERATE_A = [{"key": "dedicated", "operator": "Equal", "value": "a", "effect": "PreferNoSchedule"}]


def two_node_case() -> list[Obj]:
    """The published two-node case: A and B have 4 CPU / 16Gi / 110 pods; A is labelled disk=ssd and
    tainted dedicated=a:PreferNoSchedule. Pod ``tolerant`` (no requests, preferred node affinity
    weight 50 for disk=ssd, tolerating the taint) is queued before ``intolerant`` (same, without the
    toleration)."""
    return [
        node("A", labels={"disk": "ssd"}, taints=[{"key": "dedicated", "value": "a", "effect": "PreferNoSchedule"}]),
        node("B"),
        pod("tolerant", spec={"affinity": PREFER_SSD, "tolerations": TOLERATE_A}),
        pod("intolerant", spec={"affinity": PREFER_SSD}),
    ]
