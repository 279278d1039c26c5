"""Shared builders for the parity regression tests.

Each ``test_*.py`` beside this module reproduces one difference ``bench/parity`` found between
py-scheduler and upstream kube-scheduler v1.37.2 (the Go oracle in ``tests/e2e/testbed/oracle``),
reduced to the smallest scenario that showed it. The expected values were produced by the oracle on
exactly these objects and are hard-coded, so the tests need no Go. They run the same code path as
the parity bench (:func:`bench.parity_lib.runner.run_py`: explain, Reserve, assume, nominations).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

Obj = dict[str, Any]

REPO = Path(__file__).resolve().parents[3]


def node(name: str, cpu: str = "4", memory: str = "8Gi", pods: str = "110", labels: dict[str, str] | None = None,
         **extra: str) -> Obj:
    """A Node with the given allocatable (``extra``: extended resources, e.g. ``{"example.com/foo": "2"}``)."""
    alloc = {"cpu": cpu, "memory": memory, "pods": pods, **{k.replace("__", "/"): v for k, v in extra.items()}}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
            "status": {"allocatable": alloc, "capacity": dict(alloc)}}


def pod(name: str, containers: list[Obj] | None = None, node_name: str | None = None, ns: str = "default",
        ts: str = "2026-01-01T00:00:00Z", status: Obj | None = None, **spec: Any) -> Obj:
    """A Pod (``containers`` default: one container without requests); ``spec`` adds spec fields."""
    s: Obj = {"containers": containers or [{"name": "c", "image": "busybox"}], **spec}
    if node_name:
        s["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}", "creationTimestamp": ts},
            "spec": s, "status": status or {"phase": "Running" if node_name else "Pending"}}


def ctr(name: str, requests: Obj | None = None, **extra: Any) -> Obj:
    """A container with ``requests`` (and limits equal to them for extended resources)."""
    c: Obj = {"name": name, "image": "busybox", **extra}
    if requests is not None:
        c["resources"] = {"requests": requests}
        ext = {k: v for k, v in requests.items() if "/" in k}
        if ext:
            c["resources"]["limits"] = ext
    return c


def run(objects: list[Obj]) -> list[Obj]:
    """py-scheduler's verdict per pending Pod, in queue order, as ``bench/parity`` computes it."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from bench.parity_lib.runner import run_py

    return run_py(objects)
