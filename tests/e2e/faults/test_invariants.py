"""The invariant checker itself (no test bed): each invariant flags a crafted violation, so a clean
report after a fault scenario means something."""

from __future__ import annotations

from typing import Any

from tests.e2e.faults import invariants as inv


def node(name: str, cpu: str = "4", gpus: int = 0) -> dict[str, Any]:
    alloc = {"cpu": cpu, "memory": "8Gi", "pods": "3"}
    labels = {"nvidia.com/gpu.memory": "40960"} if gpus else {}
    if gpus:
        alloc["nvidia.com/gpu"] = str(gpus)
    return {"metadata": {"name": name, "labels": labels}, "status": {"allocatable": alloc}}


def pod(name: str, node_name: str = "", cpu: str = "1", gpus: int = 0, idx: str | None = None,
        mem_gb: str | None = None, uid: str | None = None, **status: Any) -> dict[str, Any]:
    ann = {}
    if idx is not None:
        ann[inv.IDX_ANNOTATION] = idx
    if mem_gb is not None:
        ann[inv.MEM_ANNOTATION] = mem_gb
    res: dict[str, Any] = {"requests": {"cpu": cpu}}
    if gpus:
        res["limits"] = {"nvidia.com/gpu": str(gpus)}
    return {"metadata": {"name": name, "namespace": "default", "uid": uid or f"u-{name}", "annotations": ann},
            "spec": {"nodeName": node_name, "containers": [{"name": "c", "resources": res}]}, "status": status}


def test_quantities() -> None:
    assert inv.amount("cpu", "100m") == 100 and inv.amount("cpu", "1.5") == 1500
    assert inv.amount("memory", "1Gi") == 2**30 and inv.amount("memory", "1e3") == 1000
    assert inv.amount("cpu", "1n") == 1  # rounded up


def test_effective_requests_use_init_containers_and_sidecars() -> None:
    p = pod("p", cpu="1")
    p["spec"]["initContainers"] = [{"name": "i", "resources": {"requests": {"cpu": "3"}}},
                                   {"name": "s", "restartPolicy": "Always", "resources": {"requests": {"cpu": "500m"}}}]
    assert inv.pod_requests(p)["cpu"] == 3000  # max(1 + 0.5 sidecar, 3 init before the sidecar)
    p["spec"]["initContainers"].reverse()  # the sidecar starts first: it runs beside the init container
    assert inv.pod_requests(p)["cpu"] == 3500


def test_overcommit_and_pod_count_flagged() -> None:
    r = inv.Report()
    inv.check_capacity([node("n1")], [pod("a", "n1", cpu="3"), pod("b", "n1", cpu="2")], r)
    assert any("overcommitted on cpu" in v for v in r.violations)
    r = inv.Report()
    inv.check_capacity([node("n1")], [pod(f"p{i}", "n1", cpu="10m") for i in range(4)], r)
    assert any("overcommitted on pods" in v for v in r.violations)
    r = inv.Report()
    inv.check_capacity([node("n1")], [pod("a", "n1", cpu="3"), pod("b", "n1", cpu="2", phase="Succeeded")], r)
    assert r.violations == []


def test_gpu_index_conflicts_and_memory_flagged() -> None:
    r = inv.Report()
    inv.check_capacity([node("g", "8", gpus=4)], [pod("a", "g", "1", gpus=2, idx="0,1"),
                                                  pod("b", "g", "1", gpus=1, idx="1"),
                                                  pod("c", "g", "1", gpus=1, idx="7"),
                                                  pod("d", "g", "1", gpus=1, idx="2", mem_gb="80")], r)
    text = "\n".join(r.violations)
    assert "held by both" in text and "out of range" in text and "per GPU" in text


def test_double_binding_flagged() -> None:
    r = inv.Report()
    ev = {"reason": "Scheduled", "reportingController": "py-scheduler", "reportingInstance": "a",
          "regarding": {"uid": "u-p"}, "note": "Successfully assigned default/p to n1"}
    inv.check_bound_once([pod("p", "n1")], [ev, {**ev, "reportingInstance": "b"}], {}, r)
    assert any("2 Scheduled events" in v for v in r.violations)
    r = inv.Report()
    inv.check_bound_once([pod("p", "n2")], [{**ev, "series": {"count": 2}}], {}, r)
    assert any("but the Pod is on n2" in v for v in r.violations)
    assert any("2 Scheduled events" in v for v in r.violations)
    r = inv.Report()
    line = "I0101 00:00:00.000000 1 scheduler.loop] Successfully bound pod to node pod=default/p node=n1 x\n"
    inv.check_bound_once([], [], {"a": line, "b": line}, r)
    assert any("bound 2 times" in v for v in r.violations)


def test_pending_without_reason_and_deleted_node_choice() -> None:
    p = pod("p")
    assert inv.pending_without_reason([p], [], {"p"}) == ["p"]
    p["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    assert inv.pending_without_reason([p], [], {"p"}) == []
    log = ("I 1 scheduler.informers] Delete event for node node=n9\n"
           "I 1 scheduler.loop] Attempting to schedule pod pod=default/q\n"
           "I 1 scheduler.loop] Successfully bound pod to node pod=default/q node=n9 x\n")
    r = inv.Report()
    inv.check_deleted_nodes([pod("q", "n9")], [node("n1")], {"a": log}, {"n9", "n1"}, r)
    assert any("after it had seen the Node deleted" in v for v in r.violations)
    r = inv.Report()
    in_flight = log.split("\n")[1] + "\n" + log.split("\n")[0] + "\n" + log.split("\n")[2] + "\n"
    inv.check_deleted_nodes([pod("q", "n9")], [node("n1")], {"a": in_flight}, {"n9", "n1"}, r)
    assert r.violations == [] and r.on_deleted_nodes_in_flight == 1
