"""EventsToRegister and QueueingHints of TaintToleration, NodeAffinity, NodeUnschedulable, NodeName
and NodePorts (upstream ``EventsToRegister`` / ``isSchedulableAfter...`` of each plugin, cases after
their ``*_test.go`` tables), alone and through the scheduling queue: a Pod they rejected waits for a
node or Pod change that may help it, not for any Pod bound elsewhere."""

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
from py_scheduler.plugins.helpers.node_selector import NodeSelector
from py_scheduler.plugins.node_affinity import NodeAffinity
from py_scheduler.plugins.node_name import NodeName
from py_scheduler.plugins.node_ports import NodePorts
from py_scheduler.plugins.node_unschedulable import NodeUnschedulable
from py_scheduler.plugins.queue_sort import PrioritySort
from py_scheduler.plugins.taint_toleration import TaintToleration
from py_scheduler.queue.scheduling_queue import BACKOFF_Q, UNSCHEDULABLE_Q, PriorityQueue

Q, SKIP = QueueingHint.QUEUE, QueueingHint.QUEUE_SKIP
NODE_ADD_TAINT = ClusterEvent(Resource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_TAINT)
NODE_ADD_LABEL = ClusterEvent(Resource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL)
TARGET_TOLERATION = ClusterEvent(Resource.TARGET_POD, ActionType.UPDATE_POD_TOLERATION)


def _pod(name: str = "p", *, tolerations: list[dict[str, Any]] | None = None,
         node_selector: dict[str, str] | None = None, affinity: dict[str, Any] | None = None,
         host_ports: list[int] | None = None, node: str = "", nominated: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulerName": "py-scheduler", "containers": [{"name": "c"}]}
    if tolerations is not None:
        spec["tolerations"] = tolerations
    if node_selector is not None:
        spec["nodeSelector"] = node_selector
    if affinity is not None:
        spec["affinity"] = affinity
    if host_ports:
        spec["containers"][0]["ports"] = [{"containerPort": p, "hostPort": p} for p in host_ports]
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"}, "spec": spec,
            "status": {"nominatedNodeName": nominated} if nominated else {}}


def _node(name: str = "n", *, labels: dict[str, str] | None = None, taints: list[dict[str, Any]] | None = None,
          unschedulable: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if taints is not None:
        spec["taints"] = taints
    if unschedulable:
        spec["unschedulable"] = True
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": spec,
            "status": {"allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"}}}


def _hints(plugin: Any) -> dict[ClusterEvent, Any]:
    return {e.event: e.hint_fn for e in plugin.events_to_register()}


# -- TaintToleration ---------------------------------------------------------------------------------
TAINT = {"key": "foo", "value": "bar", "effect": "NoSchedule"}
TOLERATE = [{"key": "foo", "operator": "Equal", "value": "bar", "effect": "NoSchedule"}]


def test_taint_toleration_registers_upstreams_events() -> None:
    assert set(_hints(TaintToleration())) == {NODE_ADD_TAINT, TARGET_TOLERATION}
    assert _hints(TaintToleration())[TARGET_TOLERATION](_pod(), _pod(), _pod(tolerations=TOLERATE)) == Q


@pytest.mark.parametrize(("pod", "old", "new", "want"), [
    (_pod(), None, _node(taints=[TAINT]), SKIP),                        # add: untolerated taint
    (_pod(), None, _node(), Q),                                          # add: no taint
    (_pod(tolerations=TOLERATE), None, _node(taints=[TAINT]), Q),        # add: taint tolerated
    (_pod(), _node(taints=[TAINT]), _node(), Q),                         # update: taint removed
    (_pod(), _node(), _node(taints=[TAINT]), SKIP),                      # update: taint added
    (_pod(tolerations=TOLERATE), _node(), _node(taints=[TAINT]), SKIP),  # was tolerated already
    (_pod(), None, _node(taints=[{**TAINT, "effect": "PreferNoSchedule"}]), Q),  # soft taint only
    (_pod(), None, _node(taints=[{**TAINT, "effect": "NoExecute"}]), SKIP),
    (_pod(tolerations="bad"), None, _node(), Q),                         # type: ignore[arg-type]
    (_pod(), None, "not a node", Q),
])
def test_taint_toleration_node_hint(pod: Any, old: Any, new: Any, want: QueueingHint) -> None:
    assert _hints(TaintToleration())[NODE_ADD_TAINT](pod, old, new) == want


# -- NodeUnschedulable -------------------------------------------------------------------------------
UNSCHED_TOL = [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]


def test_node_unschedulable_registers_upstreams_events() -> None:
    assert set(_hints(NodeUnschedulable())) == {NODE_ADD_TAINT, TARGET_TOLERATION}


@pytest.mark.parametrize(("old", "new", "want"), [
    (None, _node(), Q),                                          # schedulable node added
    (None, _node(unschedulable=True), SKIP),                     # cordoned node added
    (_node(unschedulable=True), _node(), Q),                     # uncordoned
    (_node(), _node(unschedulable=True), SKIP),                  # cordoned
    (_node(), _node(), SKIP),                                    # stays schedulable
    (None, 42, Q),                                               # not a node
])
def test_node_unschedulable_node_hint(old: Any, new: Any, want: QueueingHint) -> None:
    assert _hints(NodeUnschedulable())[NODE_ADD_TAINT](_pod(), old, new) == want


@pytest.mark.parametrize(("new", "want"), [
    (_pod(tolerations=UNSCHED_TOL), Q),
    (_pod(tolerations=TOLERATE), SKIP),                          # unrelated toleration
    (_pod(tolerations=[{"operator": "Exists"}]), Q),             # tolerates everything
    (_pod(tolerations="bad"), Q),                                # type: ignore[arg-type]
])
def test_node_unschedulable_toleration_hint(new: Any, want: QueueingHint) -> None:
    assert _hints(NodeUnschedulable())[TARGET_TOLERATION](_pod(), _pod(), new) == want


# -- NodeName / NodePorts ----------------------------------------------------------------------------
def test_node_name_registers_node_add_only() -> None:
    assert _hints(NodeName()) == {EVENT_NODE_ADD: None}


def test_node_ports_registers_upstreams_events() -> None:
    hints = _hints(NodePorts())
    assert set(hints) == {EVENT_ASSIGNED_POD_DELETE, EVENT_NODE_ADD}
    assert hints[EVENT_NODE_ADD] is None


@pytest.mark.parametrize(("deleted", "want"), [
    (_pod("d", host_ports=[8080], node="n"), Q),                 # frees the wanted port
    (_pod("d", host_ports=[8080], nominated="n"), Q),
    (_pod("d", host_ports=[8080]), SKIP),                        # never placed
    (_pod("d", node="n"), SKIP),                                 # uses no host port
    (_pod("d", host_ports=[9090], node="n"), SKIP),              # other port
    (None, Q),
])
def test_node_ports_delete_hint(deleted: Any, want: QueueingHint) -> None:
    fn = _hints(NodePorts())[EVENT_ASSIGNED_POD_DELETE]
    assert fn(_pod(host_ports=[8080]), deleted, None) == want


# -- NodeAffinity ------------------------------------------------------------------------------------
def _required(key: str, *values: str) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": key, "operator": "In", "values": list(values)}]}]}}}


ZONE_A = {"zone": "a"}


@pytest.mark.parametrize(("pod", "old", "new", "want"), [
    (_pod(node_selector=ZONE_A), None, _node(labels=ZONE_A), Q),                    # matching node added
    (_pod(node_selector=ZONE_A), None, _node(labels={"zone": "b"}), SKIP),          # other node added
    (_pod(node_selector=ZONE_A), _node(), _node(labels=ZONE_A), Q),                 # label now matches
    (_pod(node_selector=ZONE_A), _node(labels=ZONE_A), _node(labels={**ZONE_A, "x": "y"}), SKIP),  # matched
    (_pod(node_selector=ZONE_A), _node(labels=ZONE_A), _node(), SKIP),              # no longer matches
    (_pod(affinity=_required("zone", "a")), None, _node(labels=ZONE_A), Q),
    (_pod(affinity=_required("zone", "a")), None, _node(labels={"zone": "b"}), SKIP),
    (_pod(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "Bogus", "values": ["a"]}]}]}}}),
     None, _node(labels=ZONE_A), Q),                                                 # parse error: Queue
    (_pod(affinity="bad"), None, _node(), Q),                                        # type: ignore[arg-type]
    (_pod(node_selector=ZONE_A), None, None, Q),
])
def test_node_affinity_node_hint(pod: Any, old: Any, new: Any, want: QueueingHint) -> None:
    assert _hints(NodeAffinity())[NODE_ADD_LABEL](pod, old, new) == want


def test_node_affinity_hint_applies_the_added_affinity() -> None:
    added = NodeSelector.from_node_selector({"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["gpu"]}]}]})
    fn = _hints(NodeAffinity(added))[NODE_ADD_LABEL]
    assert fn(_pod(node_selector=ZONE_A), None, _node(labels=ZONE_A)) == SKIP
    assert fn(_pod(node_selector=ZONE_A), None, _node(labels={**ZONE_A, "pool": "gpu"})) == Q
    assert fn(_pod(), None, _node(labels={"pool": "gpu"})) == Q


# -- through the queue -------------------------------------------------------------------------------
@pytest.mark.parametrize(("plugin", "pod", "unrelated", "helpful"), [
    (NodeAffinity(), _pod("w", node_selector=ZONE_A),
     (EVENT_NODE_ADD, None, _node("b", labels={"zone": "b"})), (EVENT_NODE_ADD, None, _node("a", labels=ZONE_A))),
    (TaintToleration(), _pod("w"),
     (EVENT_NODE_ADD, None, _node("t", taints=[TAINT])),
     (ClusterEvent(Resource.NODE, ActionType.UPDATE_NODE_TAINT), _node("t", taints=[TAINT]), _node("t"))),
    (NodeUnschedulable(), _pod("w"),
     (EVENT_NODE_ADD, None, _node("c", unschedulable=True)),
     (ClusterEvent(Resource.NODE, ActionType.UPDATE_NODE_TAINT), _node("c", unschedulable=True), _node("c"))),
    (NodePorts(), _pod("w", host_ports=[80]),
     (EVENT_ASSIGNED_POD_DELETE, _pod("d", host_ports=[81], node="n"), None),
     (EVENT_ASSIGNED_POD_DELETE, _pod("d", host_ports=[80], node="n"), None)),
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
    q.move_all_to_active_or_backoff(EVENT_ASSIGNED_POD_ADD, None, _pod("other", node="n1"))   # any binding
    q.move_all_to_active_or_backoff(*unrelated)
    assert q.where("default", "w") == UNSCHEDULABLE_Q
    q.move_all_to_active_or_backoff(*helpful)
    assert q.where("default", "w") == BACKOFF_Q
