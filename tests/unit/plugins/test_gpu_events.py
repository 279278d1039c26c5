"""GPUFilter's EventsToRegister and queueing hints (py_scheduler/plugins/gpu/events.py), alone and
through the scheduling queue: a Pod GPUFilter rejected waits for a change that may free or add
GPUs, not for any Pod bound or any Node touched elsewhere."""

from __future__ import annotations

from typing import Any

import pytest

from py_scheduler.framework.events import (
    EVENT_ASSIGNED_POD_ADD,
    EVENT_ASSIGNED_POD_DELETE,
    EVENT_NODE_ADD,
    ActionType,
    ClusterEvent,
    QueueingHint,
    Resource,
)
from py_scheduler.framework.runtime import Framework
from py_scheduler.plugins.gpu.events import (
    gpu_after_assigned_pod_delete,
    gpu_after_assigned_pod_update,
    gpu_after_node_change,
    gpu_after_target_pod_update,
)
from py_scheduler.plugins.gpu.filter import GPUFilter
from py_scheduler.plugins.gpu.model import GPUKeys
from py_scheduler.plugins.queue_sort import PrioritySort
from py_scheduler.queue.scheduling_queue import BACKOFF_Q, UNSCHEDULABLE_Q, PriorityQueue

Q, SKIP = QueueingHint.QUEUE, QueueingHint.QUEUE_SKIP
K = GPUKeys()
IDX = K.gpu_indices


def _pod(name: str = "p", *, gpus: int = 0, mig: str = "", ann: dict[str, str] | None = None, node: str = "",
         phase: str = "") -> dict[str, Any]:
    limits: dict[str, str] = {}
    if gpus:
        limits["nvidia.com/gpu"] = str(gpus)
    if mig:
        limits[f"nvidia.com/mig-{mig}"] = "1"
    c: dict[str, Any] = {"name": "c", "resources": {"requests": {"cpu": "1"}, **({"limits": limits} if limits else {})}}
    spec: dict[str, Any] = {"schedulerName": "py-scheduler", "containers": [c]}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "annotations": ann or {}},
            "spec": spec, "status": {"phase": phase} if phase else {}}


def _node(name: str = "n", *, gpus: int | None = 8, labels: dict[str, str] | None = None,
          ann: dict[str, str] | None = None, taints: list[Any] | None = None) -> dict[str, Any]:
    alloc = {"cpu": "64", "memory": "256Gi", "pods": "110"}
    if gpus is not None:
        alloc["nvidia.com/gpu"] = str(gpus)
    return {"metadata": {"name": name, "labels": labels or {}, "annotations": ann or {}},
            "spec": {"taints": taints or []}, "status": {"allocatable": alloc}}


WANT = _pod("w", gpus=4)
GFD = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
TAINT = [{"key": "k", "effect": "NoSchedule"}]


def test_registers_node_and_pod_events() -> None:
    got = {e.event for e in GPUFilter().events_to_register()}
    assert got == {
        ClusterEvent(Resource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL | ActionType.UPDATE_NODE_ALLOCATABLE
                     | ActionType.UPDATE_NODE_ANNOTATION),
        ClusterEvent(Resource.ASSIGNED_POD, ActionType.DELETE),
        ClusterEvent(Resource.ASSIGNED_POD, ActionType.UPDATE),
        ClusterEvent(Resource.TARGET_POD, ActionType.UPDATE),
    }
    assert all(e.hint_fn is not None for e in GPUFilter().events_to_register())


@pytest.mark.parametrize(("old", "new", "want"), [
    (None, _node(), Q),                                               # GPU node added
    (None, _node(gpus=None), SKIP),                                   # CPU-only node added
    (None, {"metadata": {}, "status": {"allocatable": {"nvidia.com/mig-1g.10gb": "7"}}}, Q),  # MIG node
    (_node(), _node(taints=TAINT), SKIP),                             # taint only
    (_node(), _node(), SKIP),                                         # nothing GPU-relevant
    (_node(gpus=4), _node(gpus=8), Q),                                # allocatable grew
    (_node(), _node(labels=GFD), Q),                                  # GFD label
    (_node(), _node(ann={K.nvlink_groups: "0-3,4-7"}), Q),            # annotation
    (_node(gpus=None), _node(gpus=None, labels=GFD), SKIP),           # labels on a node offering no GPU
    (_node(), {"metadata": {"labels": "bad"}, "status": {"allocatable": {"nvidia.com/gpu": "8"}}}, Q),
    (_node(), "not a node", Q),
])
def test_node_hint(old: Any, new: Any, want: QueueingHint) -> None:
    assert gpu_after_node_change(K, WANT, old, new) == want


@pytest.mark.parametrize(("deleted", "want"), [
    (_pod("d", gpus=2, node="x"), Q),
    (_pod("d", mig="1g.10gb", node="x"), Q),
    (_pod("d", ann={IDX: "0,1"}, node="x"), Q),                      # indices without a request: unsure
    (_pod("d", node="x"), SKIP),                                      # holds no GPU
    ({"metadata": {}, "spec": {"containers": [{"resources": "bad"}]}}, Q),  # malformed
    (None, Q),
])
def test_assigned_pod_delete_hint(deleted: Any, want: QueueingHint) -> None:
    assert gpu_after_assigned_pod_delete(K, WANT, deleted, None) == want


@pytest.mark.parametrize(("old", "new", "want"), [
    (_pod("u", node="x"), _pod("u", node="x", ann={"other": "1"}), SKIP),           # no GPU either side
    (_pod("u", gpus=2, node="x"), _pod("u", gpus=2, node="x", ann={"other": "1"}), SKIP),  # unrelated change
    (_pod("u", gpus=2, node="x"), _pod("u", gpus=2, node="x", ann={IDX: "0,1"}), Q),       # indices written
    (_pod("u", gpus=2, node="x", ann={IDX: "0,1"}), _pod("u", gpus=2, node="x", ann={IDX: "2,3"}), Q),
    (_pod("u", gpus=2, node="x"), _pod("u", gpus=1, node="x"), Q),                  # scaled down
    (_pod("u", gpus=2, node="x"), _pod("u", gpus=2, node="x", phase="Succeeded"), Q),  # terminal
    (_pod("u", gpus=2, node="x"), None, Q),
])
def test_assigned_pod_update_hint(old: Any, new: Any, want: QueueingHint) -> None:
    assert gpu_after_assigned_pod_update(K, WANT, old, new) == want


@pytest.mark.parametrize(("old", "new", "want"), [
    (_pod("w", gpus=4), _pod("w", gpus=4, ann={"other": "1"}), SKIP),
    (_pod("w", gpus=4, ann={K.gpu_model: "h100"}), _pod("w", gpus=4), Q),       # constraint dropped
    (_pod("w", gpus=4), _pod("w", gpus=2), Q),
])
def test_target_pod_update_hint(old: Any, new: Any, want: QueueingHint) -> None:
    assert gpu_after_target_pod_update(K, old, old, new) == want


@pytest.mark.parametrize(("unrelated", "helpful"), [
    ((EVENT_ASSIGNED_POD_DELETE, _pod("d", node="n1"), None),
     (EVENT_ASSIGNED_POD_DELETE, _pod("d", gpus=4, node="n1"), None)),
    ((EVENT_NODE_ADD, None, _node("cpu", gpus=None)), (EVENT_NODE_ADD, None, _node("gpu"))),
    ((ClusterEvent(Resource.NODE, ActionType.UPDATE_NODE_TAINT), _node("n1"), _node("n1", taints=TAINT)),
     (ClusterEvent(Resource.NODE, ActionType.UPDATE_NODE_LABEL), _node("n1"), _node("n1", labels=GFD))),
    ((ClusterEvent(Resource.ASSIGNED_POD, ActionType.UPDATE), _pod("u", node="n1"),
      _pod("u", node="n1", ann={"x": "1"})),
     (ClusterEvent(Resource.ASSIGNED_POD, ActionType.UPDATE_POD_SCALE_DOWN), _pod("u", gpus=4, node="n1"),
      _pod("u", gpus=1, node="n1"))),
])
def test_queue_keeps_a_gpu_rejected_pod_until_a_freeing_event(unrelated: tuple[Any, Any, Any],
                                                               helpful: tuple[Any, Any, Any]) -> None:
    plugin = GPUFilter()
    fw = Framework("py-scheduler", [(PrioritySort(), 0), (plugin, 0)])
    q = PriorityQueue({"py-scheduler": fw}, now=lambda: 1000.0)
    q.add(_pod("w", gpus=4))
    qpi = q.pop_nowait()
    assert qpi is not None
    qpi.unschedulable_plugins = frozenset({plugin.name})
    assert q.add_unschedulable_if_not_present(qpi) == UNSCHEDULABLE_Q
    q.move_all_to_active_or_backoff(EVENT_ASSIGNED_POD_ADD, None, _pod("other", gpus=1, node="n1"))  # a binding
    q.move_all_to_active_or_backoff(*unrelated)
    assert q.where("default", "w") == UNSCHEDULABLE_Q
    q.move_all_to_active_or_backoff(*helpful)
    assert q.where("default", "w") == BACKOFF_Q
