"""EventsToRegister and queueing hints of NodeDeclaredFeatures (upstream nodedeclaredfeatures.go
``EventsToRegister``, ``isSchedulableAfterNodeChange``, ``isSchedulableAfterTargetPodUpdate``) and of
TopologyPlacementGenerator's per-Pod PreFilter (py-scheduler's own), alone and through the queue."""

from __future__ import annotations

from typing import Any

import pytest

from py_scheduler.framework.events import (
    EVENT_ASSIGNED_POD_ADD,
    EVENT_NODE_ADD,
    ActionType,
    ClusterEvent,
    QueueingHint,
    Resource,
)
from py_scheduler.framework.runtime import Framework
from py_scheduler.plugins.node_declared_features import (
    RESTART_ALL_CONTAINERS,
    USER_NAMESPACES_HOST_NETWORK,
    NodeDeclaredFeatures,
)
from py_scheduler.plugins.queue_sort import PrioritySort
from py_scheduler.plugins.topology_placement import TopologyPlacement
from py_scheduler.queue.scheduling_queue import BACKOFF_Q, UNSCHEDULABLE_Q, PriorityQueue

Q, SKIP = QueueingHint.QUEUE, QueueingHint.QUEUE_SKIP
NODE_DECLARED = ClusterEvent(Resource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_DECLARED_FEATURE)


def _pod(name: str = "p", *, host_users: bool | None = None, group: str = "", ns: str = "default",
         node: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulerName": "py-scheduler", "containers": [{"name": "c"}]}
    if host_users is not None:
        spec["hostNetwork"] = True
        spec["hostUsers"] = host_users
    if group:
        spec["schedulingGroup"] = {"podGroupName": group}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}"}, "spec": spec, "status": {}}


def _node(name: str = "n", features: list[str] | None = None, taints: list[Any] | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"}}
    if features is not None:
        status["declaredFeatures"] = features
    return {"metadata": {"name": name, "labels": {}}, "spec": {"taints": taints or []}, "status": status}


def _hints(plugin: Any) -> dict[ClusterEvent, Any]:
    return {e.event: e.hint_fn for e in plugin.events_to_register()}


# -- NodeDeclaredFeatures ----------------------------------------------------------------------------
def test_ndf_registers_upstreams_events() -> None:
    assert set(_hints(NodeDeclaredFeatures())) == {
        NODE_DECLARED, ClusterEvent(Resource.TARGET_POD, ActionType.UPDATE)}


@pytest.mark.parametrize(("old", "new", "want"), [
    (None, _node(), Q),                                                         # add
    (_node(features=[RESTART_ALL_CONTAINERS]), _node(features=[RESTART_ALL_CONTAINERS]), SKIP),
    (_node(), _node(features=[]), SKIP),                                        # absent == empty
    (_node(), _node(features=[USER_NAMESPACES_HOST_NETWORK]), Q),
    (_node(), {"status": "bad"}, Q),
    (_node(), None, Q),
])
def test_ndf_node_hint(old: Any, new: Any, want: QueueingHint) -> None:
    assert _hints(NodeDeclaredFeatures())[NODE_DECLARED](_pod(), old, new) == want


@pytest.mark.parametrize(("old", "new", "want"), [
    (_pod(host_users=False), _pod(host_users=False), SKIP),
    (_pod(host_users=False), _pod(host_users=True), Q),                         # requirement dropped
    (_pod(), {"spec": {"containers": "bad"}}, Q),
])
def test_ndf_target_pod_hint(old: Any, new: Any, want: QueueingHint) -> None:
    hint = _hints(NodeDeclaredFeatures())[ClusterEvent(Resource.TARGET_POD, ActionType.UPDATE)]
    assert hint(old, old, new) == want


# -- TopologyPlacementGenerator ----------------------------------------------------------------------
UNSCHEDULED_ADD = ClusterEvent(Resource.UNSCHEDULED_POD, ActionType.ADD | ActionType.DELETE)
PG_ALL = ClusterEvent(Resource.POD_GROUP, ActionType.ALL)


def test_topology_placement_registers_events() -> None:
    assert set(_hints(TopologyPlacement())) == {
        ClusterEvent(Resource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL | ActionType.UPDATE_NODE_ALLOCATABLE),
        ClusterEvent(Resource.ASSIGNED_POD, ActionType.ADD | ActionType.DELETE | ActionType.UPDATE_POD_SCALE_DOWN
                     | ActionType.UPDATE_POD_SCALE_UP),
        UNSCHEDULED_ADD, PG_ALL}


@pytest.mark.parametrize(("old", "new", "want"), [
    (None, _pod("m", group="g"), Q),
    (_pod("m", group="g"), None, Q),
    (None, _pod("m", group="h"), SKIP),
    (None, _pod("m", group="g", ns="other"), SKIP),
    (None, _pod("m"), SKIP),
    (None, "bad", Q),
])
def test_topology_placement_unscheduled_pod_hint(old: Any, new: Any, want: QueueingHint) -> None:
    assert _hints(TopologyPlacement())[UNSCHEDULED_ADD](_pod("w", group="g"), old, new) == want


def _pg(name: str, ns: str = "default") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": ns}, "spec": {}}


@pytest.mark.parametrize(("old", "new", "want"), [
    (None, _pg("g"), Q), (_pg("g"), _pg("g"), Q), (_pg("g"), None, Q),
    (None, _pg("h"), SKIP), (None, _pg("g", "other"), SKIP), (None, {"metadata": {}}, Q),
])
def test_topology_placement_pod_group_hint(old: Any, new: Any, want: QueueingHint) -> None:
    assert _hints(TopologyPlacement())[PG_ALL](_pod("w", group="g"), old, new) == want


# -- through the queue -------------------------------------------------------------------------------
@pytest.mark.parametrize(("plugin", "pod", "unrelated", "helpful"), [
    (NodeDeclaredFeatures(), _pod("w", host_users=False),
     (ClusterEvent(Resource.NODE, ActionType.UPDATE_NODE_TAINT), _node("a"), _node("a", taints=[{"key": "k"}])),
     (ClusterEvent(Resource.NODE, ActionType.UPDATE_NODE_DECLARED_FEATURE), _node("a"),
      _node("a", features=[USER_NAMESPACES_HOST_NETWORK]))),
    (TopologyPlacement(), _pod("w", group="g"),
     (ClusterEvent(Resource.NODE, ActionType.UPDATE_NODE_TAINT), _node("a"), _node("a", taints=[{"key": "k"}])),
     (EVENT_NODE_ADD, None, _node("b"))),
    (TopologyPlacement(), _pod("w", group="g"),
     (ClusterEvent(Resource.POD_GROUP, ActionType.UPDATE), _pg("h"), _pg("h")),
     (ClusterEvent(Resource.POD_GROUP, ActionType.UPDATE), _pg("g"), _pg("g"))),
])
def test_queue_keeps_a_rejected_pod_until_a_helpful_event(plugin: Any, pod: dict[str, Any],
                                                          unrelated: tuple[Any, Any, Any],
                                                          helpful: tuple[Any, Any, Any]) -> None:
    fw = Framework("py-scheduler", [(PrioritySort(), 0), (plugin, 0)])
    q = PriorityQueue({"py-scheduler": fw}, now=lambda: 1000.0)
    q.add(pod)
    qpi = q.pop_nowait()
    assert qpi is not None
    qpi.unschedulable_plugins = frozenset({plugin.name})
    assert q.add_unschedulable_if_not_present(qpi) == UNSCHEDULABLE_Q
    if plugin.name == NodeDeclaredFeatures.name:
        q.move_all_to_active_or_backoff(EVENT_ASSIGNED_POD_ADD, None, _pod("other", node="n1"))  # a binding
    q.move_all_to_active_or_backoff(*unrelated)
    assert q.where("default", "w") == UNSCHEDULABLE_Q
    q.move_all_to_active_or_backoff(*helpful)
    assert q.where("default", "w") == BACKOFF_Q
