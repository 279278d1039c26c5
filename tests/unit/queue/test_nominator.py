"""The queue's nominator (``backend/queue/nominator.go`` and its use in ``scheduling_queue.go``): Pods
nominated on Add / Update, dropped on Delete, ``UpdateNominatedPod`` keeping a nomination the loop made
until the status write is seen, the pod lister check, and the ``Nominator`` mapping the runtime reads."""

from __future__ import annotations

from typing import Any

from py_scheduler.framework.runtime import Framework
from py_scheduler.plugins.queue_sort import PrioritySort
from py_scheduler.queue.nominator import nominated_node_name
from py_scheduler.queue.scheduling_queue import PriorityQueue

Obj = dict[str, Any]


def pod(name: str, nnn: str | None = None, prio: int = 0, rv: str = "1", node: str | None = None,
        uid: str | None = None) -> Obj:
    p: Obj = {"metadata": {"name": name, "namespace": "default", "uid": uid or f"uid-{name}", "resourceVersion": rv},
              "spec": {"schedulerName": "py-scheduler", "priority": prio, "containers": [{"name": "c"}]}}
    if node:
        p["spec"]["nodeName"] = node
    if nnn is not None:
        p["status"] = {"nominatedNodeName": nnn}
    return p


def queue(lister: dict[str, Obj] | None = None) -> PriorityQueue:
    fw = Framework("py-scheduler", [(PrioritySort(), 0)])
    q = PriorityQueue({"py-scheduler": fw})
    if lister is not None:
        q.pod_lister = lambda ns, n: lister.get(f"{ns}/{n}")
    return q


def keys(q: PriorityQueue, node: str) -> list[str]:
    return [pi.key for pi in q.nominator.get(node, [])]


def test_add_update_delete_follow_the_pods_status() -> None:
    q = queue()
    assert not q.nominator and len(q.nominator) == 0 and q.nominator.get("n1") is None
    q.add(pod("a", "n1"))
    q.add(pod("b", "n1"))
    q.add(pod("c"))
    assert keys(q, "n1") == ["default/a", "default/b"]
    assert list(q.nominator) == ["n1"] and "n1" in q.nominator and q.nominated_node_of("uid-a") == "n1"
    # moved to another node, then cleared
    q.update(pod("a", "n1"), pod("a", "n2", rv="2"))
    assert keys(q, "n1") == ["default/b"] and keys(q, "n2") == ["default/a"]
    q.update(pod("a", "n2", rv="2"), pod("a", "", rv="3"))
    assert keys(q, "n2") == [] and "n2" not in q.nominator
    q.delete(pod("b", "n1"))
    assert len(q.nominator) == 0


def test_lookups_resolve_to_the_latest_queued_pod_info() -> None:
    q = queue()
    q.add(pod("a", "n1", prio=1))
    q.update(pod("a", "n1", prio=1), pod("a", "n1", prio=7, rv="2"))
    (pi,) = q.nominator["n1"]
    assert pi.priority == 7


def test_a_nomination_made_by_the_loop_survives_updates_without_one() -> None:
    q = queue()
    q.add(pod("a"))
    qpi = q.pop_nowait()
    assert qpi is not None
    qpi.unschedulable_plugins = frozenset({"NodeResourcesFit"})
    q.add_unschedulable_if_not_present(qpi)
    q.add_nominated_pod(qpi.pod_info, "n1")  # ModeOverride after preemption
    assert keys(q, "n1") == ["default/a"]
    # an unrelated update arrives before the status write: the nomination is kept
    q.update(pod("a"), {**pod("a", rv="2"), "metadata": {**pod("a")["metadata"], "labels": {"x": "y"}}})
    assert keys(q, "n1") == ["default/a"]
    # the status write arrives
    q.update(pod("a", rv="2"), pod("a", "n1", rv="3"))
    assert keys(q, "n1") == ["default/a"]
    # ModeNoop re-reads the Pod's own status; "" (ModeOverride) clears
    q.add_nominated_pod(qpi.pod_info)
    assert keys(q, "n1") == ["default/a"]
    q.add_nominated_pod(qpi.pod_info, "")
    assert len(q.nominator) == 0


def test_lister_keeps_gone_and_bound_pods_out() -> None:
    live: dict[str, Obj] = {}
    q = queue(live)
    live["default/a"] = pod("a", "n1")
    q.add(pod("a", "n1"))
    assert keys(q, "n1") == ["default/a"]
    qpi = q.get("default", "a")
    assert qpi is not None
    live["default/a"] = pod("a", "n1", node="n1")  # bound meanwhile
    q.add_nominated_pod(qpi.pod_info)
    assert len(q.nominator) == 0
    del live["default/a"]  # gone
    q.add_nominated_pod(qpi.pod_info, "n2")
    assert len(q.nominator) == 0


def test_in_flight_pod_update_leaves_the_nominator_and_delete_if_exists_is_idempotent() -> None:
    q = queue()
    q.add(pod("a", "n1"))
    qpi = q.pop_nowait()
    assert qpi is not None
    q.update(pod("a", "n1"), pod("a", "n2", rv="2"))  # recorded as an in-flight event only, as upstream
    assert keys(q, "n1") == ["default/a"]
    (pi,) = q.nominator["n1"]  # not queued: a bare Pod (name, namespace, UID), as nominatedPodToInfo
    assert pi.uid == "uid-a" and pi.requests.milli_cpu == 0
    q.delete_nominated_pod_if_exists(qpi.pod)
    q.delete_nominated_pod_if_exists(qpi.pod)
    assert len(q.nominator) == 0


def test_nominated_node_name_tolerates_malformed_status() -> None:
    assert nominated_node_name({"status": {"nominatedNodeName": 5}}) == ""
    assert nominated_node_name({"status": "bad"}) == ""
    assert nominated_node_name(pod("a", "n1")) == "n1"
    q = queue()
    q.add({**pod("a"), "status": {"nominatedNodeName": ["n1"]}})
    assert len(q.nominator) == 0
