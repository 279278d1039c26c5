"""EventsToRegister and QueueingHints of PodTopologySpread and InterPodAffinity (upstream
``podtopologyspread/plugin.go`` and ``interpodaffinity/plugin.go``; cases after their
``Test_isSchedulableAfter...`` tables), alone and through the scheduling queue."""

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
from py_scheduler.plugins.inter_pod_affinity.plugin import InterPodAffinity
from py_scheduler.plugins.pod_topology_spread.plugin import PodTopologySpread
from py_scheduler.plugins.queue_sort import PrioritySort
from py_scheduler.queue.scheduling_queue import BACKOFF_Q, UNSCHEDULABLE_Q, PriorityQueue

Q, SKIP = QueueingHint.QUEUE, QueueingHint.QUEUE_SKIP
ASSIGNED = ClusterEvent(Resource.ASSIGNED_POD, ActionType.ADD | ActionType.UPDATE_POD_LABEL | ActionType.DELETE)
PTS_TARGET = ClusterEvent(Resource.TARGET_POD, ActionType.UPDATE_POD_TOLERATION | ActionType.UPDATE_POD_LABEL)
PTS_NODE = ClusterEvent(Resource.NODE, ActionType.ADD | ActionType.DELETE | ActionType.UPDATE_NODE_LABEL
                        | ActionType.UPDATE_NODE_TAINT)
IPA_NODE = ClusterEvent(Resource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL)
IPA_TARGET = ClusterEvent(Resource.TARGET_POD, ActionType.UPDATE_POD_LABEL)
ZONE, HOST = "topology.kubernetes.io/zone", "kubernetes.io/hostname"


def _pod(name: str = "p", labels: dict[str, str] | None = None, *, node: str = "", nominated: str = "",
         namespace: str = "default", spread: list[dict[str, Any]] | None = None,
         affinity: dict[str, Any] | None = None, tolerations: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulerName": "py-scheduler", "containers": [{"name": "c"}]}
    if node:
        spec["nodeName"] = node
    if spread is not None:
        spec["topologySpreadConstraints"] = spread
    if affinity is not None:
        spec["affinity"] = affinity
    if tolerations is not None:
        spec["tolerations"] = tolerations
    return {"metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}", "labels": labels or {}},
            "spec": spec, "status": {"nominatedNodeName": nominated} if nominated else {}}


def _node(name: str = "n", labels: dict[str, str] | None = None,
          taints: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": {"taints": taints} if taints else {}}


def _spread(key: str = ZONE, *, app: str = "web", taints_policy: str = "") -> dict[str, Any]:
    c: dict[str, Any] = {"maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule",
                         "labelSelector": {"matchLabels": {"app": app}}}
    if taints_policy:
        c["nodeTaintsPolicy"] = taints_policy
    return c


def _hints(plugin: Any) -> dict[ClusterEvent, Any]:
    return {e.event: e.hint_fn for e in plugin.events_to_register()}


WEB = {"app": "web"}
SPREAD_POD = _pod(labels=WEB, spread=[_spread()])


# -- PodTopologySpread ------------------------------------------------------------------------------
def test_spread_registers_upstreams_events() -> None:
    assert set(_hints(PodTopologySpread())) == {ASSIGNED, PTS_TARGET, PTS_NODE}


@pytest.mark.parametrize(("old", "new", "want"), [
    (None, _pod("a", WEB, node="n"), Q),                               # matching Pod added
    (None, _pod("a", {"app": "db"}, node="n"), SKIP),                  # unrelated Pod added
    (None, _pod("a", WEB), SKIP),                                      # not placed
    (None, _pod("a", WEB, nominated="n"), Q),                          # nominated counts
    (None, _pod("a", WEB, node="n", namespace="other"), SKIP),         # other namespace
    (_pod("a", WEB, node="n"), None, Q),                               # matching Pod deleted
    (_pod("a", {"app": "db"}, node="n"), None, SKIP),
    (_pod("a", WEB, node="n"), _pod("a", {"app": "db"}, node="n"), Q),  # label flips the selector
    (_pod("a", WEB, node="n"), _pod("a", {**WEB, "x": "y"}, node="n"), SKIP),  # unrelated label
    (_pod("a", WEB, node="n"), _pod("a", WEB, node="n"), SKIP),        # no label change
    (None, "not a pod", Q),
])
def test_spread_assigned_pod_hint(old: Any, new: Any, want: QueueingHint) -> None:
    assert _hints(PodTopologySpread())[ASSIGNED](SPREAD_POD, old, new) == want


@pytest.mark.parametrize(("pod", "old", "new", "want"), [
    (_pod(labels=WEB, spread=[_spread(taints_policy="Honor")]), _pod(labels=WEB),
     _pod(labels=WEB, tolerations=[{"operator": "Exists"}]), Q),        # new toleration, Honor
    (SPREAD_POD, _pod(labels=WEB), _pod(labels=WEB, tolerations=[{"operator": "Exists"}]), SKIP),  # Ignore
    (SPREAD_POD, _pod(labels=WEB), _pod(labels={"app": "db"}), Q),       # own label flips selector
    (SPREAD_POD, _pod(labels=WEB), _pod(labels={**WEB, "x": "y"}), SKIP),
])
def test_spread_target_pod_hint(pod: Any, old: Any, new: Any, want: QueueingHint) -> None:
    assert _hints(PodTopologySpread())[PTS_TARGET](pod, old, new) == want


@pytest.mark.parametrize(("old", "new", "want"), [
    (None, _node(labels={ZONE: "a"}), Q),                              # add with the key
    (None, _node(), SKIP),                                             # add without
    (_node(labels={ZONE: "a"}), None, Q),                              # delete with the key
    (_node(), None, SKIP),
    (_node(), _node(labels={ZONE: "a"}), Q),                           # key appears
    (_node(labels={ZONE: "a"}), _node(), Q),                           # key disappears
    (_node(labels={ZONE: "a"}), _node(labels={ZONE: "b"}), Q),         # value changes
    (_node(labels={ZONE: "a"}), _node(labels={ZONE: "a", "x": "y"}), SKIP),  # unrelated label
    (_node(labels={ZONE: "a"}), _node(labels={ZONE: "a"}, taints=[{"key": "k", "effect": "NoSchedule"}]), Q),
    (_node(), _node(taints=[{"key": "k", "effect": "NoSchedule"}]), SKIP),   # taint on a non-matching node
])
def test_spread_node_hint(old: Any, new: Any, want: QueueingHint) -> None:
    assert _hints(PodTopologySpread())[PTS_NODE](SPREAD_POD, old, new) == want


def test_spread_hints_read_default_constraints_from_the_informers() -> None:
    """A Pod without constraints under hard default constraints: the selector comes from the Services
    (ReplicaSets...) selecting it, read from the Handle's informer objects (buildDefaultConstraints).
    Found side by side: py-scheduler queued on any Pod or Node label, kube-scheduler skipped unrelated ones."""
    from py_scheduler.framework.handle import Handle

    class Objects:
        def __init__(self, *objs: dict[str, Any]) -> None:
            self.objs = objs

        def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
            return None

        def list(self, kind: str) -> list[dict[str, Any]]:
            return [o for o in self.objs if o["kind"] == kind]

    svc = {"kind": "Service", "metadata": {"name": "s", "namespace": "default"}, "spec": {"selector": WEB}}
    hard = [{"topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule", "maxSkew": 1}]
    selected = _hints(PodTopologySpread(hard, "List", handle=Handle.detached(objects=Objects(svc))))
    assert selected[ASSIGNED](_pod(labels=WEB), None, _pod("a", {"app": "db"}, node="n")) == SKIP
    assert selected[ASSIGNED](_pod(labels=WEB), None, _pod("a", WEB, node="n")) == Q
    assert selected[PTS_NODE](_pod(labels=WEB), _node(labels={ZONE: "a"}), _node(labels={ZONE: "a", "x": "y"})) == SKIP
    assert selected[PTS_NODE](_pod(labels=WEB), None, _node(labels={ZONE: "a"})) == Q
    # nothing selects the Pod: no default constraint applies, nothing helps it through them
    unselected = _hints(PodTopologySpread(hard, "List", handle=Handle.detached(objects=Objects())))
    assert unselected[ASSIGNED](_pod(labels=WEB), None, _pod("a", WEB, node="n")) == SKIP
    # without a Handle the selector cannot be known: Queue (a superset)
    no_handle = _hints(PodTopologySpread(hard, "List"))
    assert no_handle[ASSIGNED](_pod(labels=WEB), None, _pod("a", {"app": "db"}, node="n")) == Q
    # System defaults are ScheduleAnyway only: no hard constraint, every node "matches".
    assert _hints(PodTopologySpread())[ASSIGNED](_pod(labels=WEB), None, _pod("a", WEB, node="n")) == SKIP


# -- InterPodAffinity -------------------------------------------------------------------------------
def _terms(kind: str, key: str = ZONE, app: str = "web") -> dict[str, Any]:
    return {kind: {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}]}}


AFF_POD = _pod(affinity=_terms("podAffinity"))
ANTI_POD = _pod(affinity=_terms("podAntiAffinity"))


def test_inter_pod_affinity_registers_upstreams_events() -> None:
    hints = _hints(InterPodAffinity())
    assert set(hints) == {ASSIGNED, IPA_TARGET, IPA_NODE}
    assert hints[IPA_TARGET] is None


@pytest.mark.parametrize(("pod", "old", "new", "want"), [
    (AFF_POD, None, _pod("a", WEB, node="n"), Q),                       # add matching affinity
    (AFF_POD, None, _pod("a", {"app": "db"}, node="n"), SKIP),
    (AFF_POD, None, _pod("a", WEB), SKIP),                              # unscheduled
    (ANTI_POD, None, _pod("a", WEB, node="n"), SKIP),                   # an add never helps anti-affinity
    (AFF_POD, _pod("a", {"app": "db"}, node="n"), _pod("a", WEB, node="n"), Q),   # now matches affinity
    (AFF_POD, _pod("a", WEB, node="n"), _pod("a", {"app": "db"}, node="n"), SKIP),
    (ANTI_POD, _pod("a", WEB, node="n"), _pod("a", {"app": "db"}, node="n"), Q),  # no longer hated
    (ANTI_POD, _pod("a", WEB, node="n"), None, Q),                      # hated Pod deleted
    (ANTI_POD, _pod("a", {"app": "db"}, node="n"), None, SKIP),
    (_pod(labels=WEB), _pod("a", affinity=_terms("podAntiAffinity"), node="n"), None, Q),  # its hater deleted
    (_pod(labels=WEB), _pod("a", node="n"), None, SKIP),
    (_pod(affinity={"podAffinity": "bad"}), None, _pod("a", WEB, node="n"), Q),  # malformed: Queue
])
def test_inter_pod_affinity_assigned_pod_hint(pod: Any, old: Any, new: Any, want: QueueingHint) -> None:
    assert _hints(InterPodAffinity())[ASSIGNED](pod, old, new) == want


@pytest.mark.parametrize(("pod", "old", "new", "want"), [
    (AFF_POD, None, _node(labels={ZONE: "a"}), Q),                      # added with the key
    (AFF_POD, None, _node(), SKIP),
    (AFF_POD, _node(), _node(labels={ZONE: "a"}), Q),                   # key added
    (AFF_POD, _node(labels={ZONE: "a"}), _node(labels={ZONE: "b"}), Q),  # moved domain
    (AFF_POD, _node(labels={ZONE: "a"}), _node(), SKIP),                # key removed
    (ANTI_POD, None, _node(), Q),                                       # any add
    (ANTI_POD, _node(labels={ZONE: "a"}), _node(), Q),                  # key removed
    (ANTI_POD, _node(), _node(labels={ZONE: "a"}), SKIP),               # key added
    (ANTI_POD, _node(labels={ZONE: "a"}), _node(labels={ZONE: "b"}), Q),
    (_pod(), None, _node(labels={ZONE: "a"}), SKIP),                    # no terms
])
def test_inter_pod_affinity_node_hint(pod: Any, old: Any, new: Any, want: QueueingHint) -> None:
    assert _hints(InterPodAffinity())[IPA_NODE](pod, old, new) == want


# -- through the queue ------------------------------------------------------------------------------
@pytest.mark.parametrize(("plugin", "pod", "unrelated", "helpful"), [
    (PodTopologySpread(), SPREAD_POD,
     (EVENT_ASSIGNED_POD_ADD, None, _pod("o", {"app": "db"}, node="n1")),
     (EVENT_ASSIGNED_POD_DELETE, _pod("d", WEB, node="n1"), None)),
    (InterPodAffinity(), AFF_POD,
     (EVENT_ASSIGNED_POD_ADD, None, _pod("o", {"app": "db"}, node="n1")),
     (EVENT_ASSIGNED_POD_ADD, None, _pod("w", WEB, node="n1"))),
    (InterPodAffinity(), AFF_POD,
     (EVENT_NODE_ADD, None, _node("x")), (EVENT_NODE_ADD, None, _node("z", {ZONE: "a"}))),
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
    q.move_all_to_active_or_backoff(*unrelated)
    assert q.where("default", "p") == UNSCHEDULABLE_Q
    q.move_all_to_active_or_backoff(*helpful)
    assert q.where("default", "p") == BACKOFF_Q


def test_hint_pod_info_is_kept_per_object() -> None:
    """One event offered to many rejected Pods parses each Pod object once; a new version of a Pod
    (a new object, even if equal) is parsed afresh."""
    from py_scheduler.plugins.helpers.queueing_hints import hint_pod_info

    a = _pod("a", WEB)
    assert hint_pod_info(a) is hint_pod_info(a)
    assert hint_pod_info(_pod("a", WEB)) is not hint_pod_info(a)
