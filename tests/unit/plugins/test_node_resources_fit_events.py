"""NodeResourcesFit's EventsToRegister and QueueingHints (upstream ``noderesources/fit.go``
``EventsToRegister``, ``isSchedulableAfterAssignedPodDelete``, ``isSchedulableAfterNodeChange``),
alone and through the scheduling queue: a Pod rejected for resources waits for a deletion or a
node that may fit it, not for any Pod bound elsewhere."""

from __future__ import annotations

import copy
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
from py_scheduler.plugins.node_resources_fit import NodeResourcesFit
from py_scheduler.plugins.queue_sort import PrioritySort
from py_scheduler.queue.scheduling_queue import BACKOFF_Q, UNSCHEDULABLE_Q, PriorityQueue


def _pod(name: str, cpu: str, node: str = "", nominated: str = "") -> dict[str, Any]:
    p: dict[str, Any] = {"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
                         "spec": {"schedulerName": "py-scheduler",
                                  "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
                         "status": {}}
    if node:
        p["spec"]["nodeName"] = node
    if nominated:
        p["status"]["nominatedNodeName"] = nominated
    return p


def _node(name: str, cpu: str, pods: str = "110", extra: dict[str, str] | None = None) -> dict[str, Any]:
    alloc = {"cpu": cpu, "memory": "64Gi", "pods": pods, **(extra or {})}
    return {"metadata": {"name": name}, "status": {"allocatable": alloc, "capacity": alloc}}


def _hints() -> dict[ClusterEvent, Any]:
    return {e.event: e.hint_fn for e in NodeResourcesFit().events_to_register()}


def test_registers_upstreams_events() -> None:
    assert set(_hints()) == {
        ClusterEvent(Resource.ASSIGNED_POD, ActionType.DELETE),
        ClusterEvent(Resource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_ALLOCATABLE),
        ClusterEvent(Resource.DEVICE_CLASS, ActionType.ADD | ActionType.UPDATE),
        ClusterEvent(Resource.ASSIGNED_POD, ActionType.UPDATE_POD_SCALE_DOWN),
        ClusterEvent(Resource.TARGET_POD, ActionType.UPDATE_POD_SCALE_DOWN),
    }


@pytest.mark.parametrize(("deleted", "want"), [
    (_pod("d", "1", node="n1"), QueueingHint.QUEUE),
    (_pod("d", "1", nominated="n1"), QueueingHint.QUEUE),
    (_pod("d", "1"), QueueingHint.QUEUE_SKIP),     # never placed nor nominated: frees nothing
    (None, QueueingHint.QUEUE),                    # not a Pod: upstream's error path queues
])
def test_assigned_pod_delete_hint(deleted: Any, want: QueueingHint) -> None:
    fn = _hints()[ClusterEvent(Resource.ASSIGNED_POD, ActionType.DELETE)]
    assert fn(_pod("p", "64"), deleted, None) == want


@pytest.mark.parametrize(("pod_cpu", "node", "want"), [
    ("64", _node("n", "32"), QueueingHint.QUEUE_SKIP),        # cpu: no node of that size fits it
    ("16", _node("n", "32"), QueueingHint.QUEUE),
    ("1", _node("n", "32", pods="0"), QueueingHint.QUEUE_SKIP),  # no pod slot at all
    ("1", {"metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "x"}}}, QueueingHint.QUEUE),  # malformed
])
def test_node_change_hint(pod_cpu: str, node: dict[str, Any], want: QueueingHint) -> None:
    fn = _hints()[ClusterEvent(Resource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_ALLOCATABLE)]
    assert fn(_pod("p", pod_cpu), None, node) == want


def test_a_node_is_judged_against_the_pending_pods_spec_not_its_resize_status() -> None:
    """isFit reads the spec alone (computePodResourceRequest), as PreFilter does."""
    fn = _hints()[ClusterEvent(Resource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_ALLOCATABLE)]
    pod = _pod("p", "2001m")
    pod["status"] = {"conditions": [{"type": "PodResizePending", "status": "True", "reason": "Infeasible"}]}
    assert fn(pod, None, _node("n", "2")) == QueueingHint.QUEUE_SKIP
    assert fn(pod, None, _node("n", "3")) == QueueingHint.QUEUE


def _objects(*device_classes: dict[str, Any]) -> Any:
    from py_scheduler.framework.handle import Handle

    class Objects:
        def get(self, kind: str, namespace: str, name: str) -> None:
            return None

        def list(self, kind: str) -> list[dict[str, Any]]:
            return list(device_classes) if kind == "DeviceClass" else []

    return Handle.detached(objects=Objects())


def _node_hint(*device_classes: dict[str, Any]) -> Any:
    return {e.event: e.hint_fn for e in NodeResourcesFit(handle=_objects(*device_classes)).events_to_register()}[
        ClusterEvent(Resource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_ALLOCATABLE)]


def test_a_node_without_the_extended_resource_is_skipped_unless_a_device_class_backs_it() -> None:
    """isFit: an extended resource the node lacks fails the fit, unless DRA serves it there
    (shouldDelegateResourceToDRA: the node advertises none and a DeviceClass maps it). Found side by
    side: py-scheduler retried such a Pod on every Node added, kube-scheduler did not."""
    pod = _pod("p", "1")
    pod["spec"]["containers"][0]["resources"]["requests"]["example.com/gpu"] = "1"
    assert _node_hint()(pod, None, _node("n", "32")) == QueueingHint.QUEUE_SKIP
    assert _node_hint()(pod, None, _node("n", "32", extra={"example.com/gpu": "1"})) == QueueingHint.QUEUE
    mapped = {"metadata": {"name": "gpu"}, "spec": {"extendedResourceName": "example.com/gpu"}}
    assert _node_hint(mapped)(pod, None, _node("n", "32")) == QueueingHint.QUEUE
    old = _node("n", "32")
    new = _node("n", "32", extra={"example.com/other": "1"})
    assert _node_hint(mapped)(pod, old, new) == QueueingHint.QUEUE  # DRA serves it on the updated node
    assert _node_hint()(pod, old, {**new, "status": {"allocatable": {**new["status"]["allocatable"],
                                                                      "example.com/gpu": "2"}}}) == QueueingHint.QUEUE
    huge = _pod("h", "1")
    huge["spec"]["containers"][0]["resources"]["requests"]["hugepages-2Mi"] = "2Mi"
    assert _node_hint(mapped)(huge, None, _node("n", "32")) == QueueingHint.QUEUE_SKIP


def test_a_device_class_event_queues_only_for_a_resource_the_pod_asks() -> None:
    fn = _hints()[ClusterEvent(Resource.DEVICE_CLASS, ActionType.ADD | ActionType.UPDATE)]
    pod = _pod("p", "1")
    pod["spec"]["containers"][0]["resources"]["requests"]["example.com/foo"] = "1"
    foo = {"metadata": {"name": "c"}, "spec": {"extendedResourceName": "example.com/foo"}}
    bar = {"metadata": {"name": "c"}, "spec": {"extendedResourceName": "example.com/bar"}}
    plain = {"metadata": {"name": "c"}, "spec": {}}
    assert fn(pod, None, foo) == QueueingHint.QUEUE
    assert fn(pod, None, bar) == QueueingHint.QUEUE_SKIP
    assert fn(pod, None, plain) == QueueingHint.QUEUE_SKIP
    assert fn(pod, foo, {**foo, "metadata": {"name": "c", "labels": {"x": "y"}}}) == QueueingHint.QUEUE_SKIP
    assert fn(pod, bar, foo) == QueueingHint.QUEUE
    implicit = _pod("i", "1")
    implicit["spec"]["containers"][0]["resources"]["requests"]["deviceclass.resource.kubernetes.io/c"] = "1"
    assert fn(implicit, None, plain) == QueueingHint.QUEUE


def test_an_assigned_pod_scaled_down_queues_only_for_a_resource_the_pod_asks() -> None:
    """haveEnoughRelevantResourcesDecreased. Found side by side: a memory scale-down retried a Pod
    that asks only cpu."""
    fn = _hints()[ClusterEvent(Resource.ASSIGNED_POD, ActionType.UPDATE_POD_SCALE_DOWN)]
    target = _pod("t", "1")
    filler = _pod("f", "1500m", node="n")
    filler["spec"]["containers"][0]["resources"]["requests"]["memory"] = "1Gi"
    less_memory = copy.deepcopy(filler)
    less_memory["spec"]["containers"][0]["resources"]["requests"]["memory"] = "512Mi"
    less_cpu = copy.deepcopy(filler)
    less_cpu["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "500m"
    assert fn(target, filler, less_memory) == QueueingHint.QUEUE_SKIP
    assert fn(target, filler, less_cpu) == QueueingHint.QUEUE
    unbound = {**less_cpu, "spec": {k: v for k, v in less_cpu["spec"].items() if k != "nodeName"}}
    assert fn(target, filler, unbound) == QueueingHint.QUEUE_SKIP


def test_queue_keeps_a_pod_rejected_for_resources_until_room_may_appear() -> None:
    fw = Framework("py-scheduler", [(PrioritySort(), 0), (NodeResourcesFit(), 0)])
    clock = [1000.0]
    q = PriorityQueue({"py-scheduler": fw}, now=lambda: clock[0])
    q.add(_pod("big", "64"))
    qpi = q.pop_nowait()
    assert qpi is not None
    qpi.unschedulable_plugins = frozenset({"NodeResourcesFit"})
    assert q.add_unschedulable_if_not_present(qpi) == UNSCHEDULABLE_Q
    q.move_all_to_active_or_backoff(EVENT_ASSIGNED_POD_ADD, None, _pod("other", "1", node="n1"))
    q.move_all_to_active_or_backoff(EVENT_NODE_ADD, None, _node("small", "32"))
    q.move_all_to_active_or_backoff(EVENT_ASSIGNED_POD_DELETE, _pod("pending", "1"), None)
    assert q.where("default", "big") == UNSCHEDULABLE_Q
    q.move_all_to_active_or_backoff(EVENT_NODE_ADD, None, _node("large", "128"))
    assert q.where("default", "big") == BACKOFF_Q


def test_node_hint_memos_follow_the_objects() -> None:
    """The node hint keeps the last node's NodeInfo and each Pod object's request: another node or
    another version of the Pod (a new object) is parsed afresh."""
    plugin = NodeResourcesFit()
    fn = plugin._schedulable_after_node_change
    big, small_node, large_node = _pod("p", "64"), _node("s", "32"), _node("l", "128")
    assert fn(big, None, small_node) == QueueingHint.QUEUE_SKIP
    assert fn(big, None, large_node) == QueueingHint.QUEUE
    assert fn(big, None, small_node) == QueueingHint.QUEUE_SKIP
    resized = _pod("p", "16")   # the Pod's next version: a new object
    assert fn(resized, None, small_node) == QueueingHint.QUEUE
    assert fn(big, None, small_node) == QueueingHint.QUEUE_SKIP


def test_a_node_update_that_grew_nothing_the_pod_asks_is_skipped() -> None:
    """``haveAnyRequestedResourcesIncreased``: a node update requeues the Pod only when it grew the Pod
    slots or a resource the Pod requests. Memory growing does not help a Pod that asks only cpu (found
    side by side: kube-scheduler skipped it, py-scheduler tried the Pod again)."""
    fn = NodeResourcesFit()._schedulable_after_node_change
    pod = _pod("p", "2")
    old = _node("n", "4")
    more_memory = copy.deepcopy(old)
    more_memory["status"]["allocatable"]["memory"] = "128Gi"
    more_cpu = copy.deepcopy(old)
    more_cpu["status"]["allocatable"]["cpu"] = "8"
    more_pods = copy.deepcopy(old)
    more_pods["status"]["allocatable"]["pods"] = "220"
    assert fn(pod, old, more_memory) == QueueingHint.QUEUE_SKIP
    assert fn(pod, old, more_cpu) == QueueingHint.QUEUE
    assert fn(pod, old, more_pods) == QueueingHint.QUEUE
    assert fn(pod, None, more_memory) == QueueingHint.QUEUE  # an added node that fits
