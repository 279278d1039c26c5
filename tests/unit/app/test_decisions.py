"""Decision records (``py_scheduler.app.scheduling.decisions``): what the live loop records at the end of each
scheduling cycle, the ring's bound and metrics, and the ``/debug/decisions`` endpoints (JSON and
HTML) on a real aiohttp server."""

from __future__ import annotations

import re
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry, generate_latest

from py_scheduler.app.scheduling.decisions import (
    DecisionLog,
    filter_counts,
    register_metrics,
    render_histogram,
    top_nodes,
)
from py_scheduler.app.serving.decisions_http import add_routes
from py_scheduler.cache.snapshot import Snapshot
from py_scheduler.framework.algorithm import Algorithm, Diagnosis, ScheduleResult
from py_scheduler.framework.runtime import Framework
from py_scheduler.framework.types import Code, CycleState, PodInfo, Status
from py_scheduler.plugins.default_binder import DefaultBinder
from py_scheduler.plugins.queue_sort import PrioritySort
from tests.unit.app.test_loop import Annotating, Harness

Obj = dict[str, Any]


def _harness(fw: Framework | None = None, capacity: int = 100, top_k: int = 5) -> tuple[Harness, DecisionLog]:
    h = Harness(fw)
    log = DecisionLog(capacity, top_k, clock=lambda: 1_700_000_000.5)
    h.loop.decisions = log
    return h, log


async def test_scheduled_pod_records_top_k_and_selected_with_the_cycles_scores() -> None:
    h, log = _harness(top_k=3)
    for i in range(7):  # different sizes: different NodeResourcesFit / BalancedAllocation scores
        h.node(f"n{i}", cpu=str(2 + i))
    h.pod("a", cpu="1")
    # what the cycle computes, on the same snapshot, before the Pod is assumed
    snap = Snapshot(h.cache.objects)
    h.cache.update_snapshot(snap)
    expected = Algorithm().schedule(h.fw, snap, PodInfo(h.pods["default/a"]), explain=True)
    await h.cycle()
    [d] = list(log.records)
    j = d.to_json()
    assert j["pod"] == "default/a" and j["uid"] == "uid-a" and j["profile"] == "py-scheduler"
    assert j["attempt"] == 1 and j["result"] == "scheduled" and j["time"] == "2023-11-14T22:13:20.500000Z"
    assert j["nodes_total"] == 7 and j["nodes_evaluated"] == 7 and j["feasible_count"] == 7
    assert j["filtered_histogram"] == {} and j["rejected_by"] == [] and j["message"] is None
    bound = next(c[1][1] for c in h.kube.calls if c[0] == "bind")
    assert j["selected"] == bound
    # the kept nodes are the best 3 by total (best first) and carry the cycle's exact numbers
    best = sorted(expected.totals.items(), key=lambda kv: -kv[1])[:3]
    assert [j["totals"][n] for n in j["ranked"]] == [t for _, t in best]
    assert bound in j["ranked"]
    for plugin, per_node in j["scores"].items():
        for node, sc in per_node.items():
            assert sc == expected.scores[plugin][node], (plugin, node)
    assert j["weights"] == {p: expected.weights[p] for p in j["scores"]}
    assert "NodeResourcesFit" in j["scores"] and j["skipped"] == expected.skipped


async def test_fit_error_records_histogram_and_the_failedscheduling_message() -> None:
    h, log = _harness()
    h.node("small1", cpu="1")
    h.node("small2", cpu="1")
    h.cache.add_node({"metadata": {"name": "cordoned", "labels": {"kubernetes.io/hostname": "cordoned"}},
                      "spec": {"unschedulable": True},
                      "status": {"allocatable": {"cpu": "8", "memory": "8Gi", "pods": "110"}}})
    h.pod("big", cpu="4")
    await h.cycle()
    [d] = list(log.records)
    event = [e for e in h.kube.events if e["reason"] == "FailedScheduling"][-1]
    assert d.result == "unschedulable" and d.selected is None and d.nodes == ()
    assert d.message == event["note"]
    assert d.filters == (("Insufficient cpu", 2), ("node(s) were unschedulable", 1))
    assert d.rejected_by == ("NodeResourcesFit", "NodeUnschedulable")
    j = d.to_json()
    assert j["filtered_histogram"] == {"Insufficient cpu": 2, "node(s) were unschedulable": 1}
    assert j["rejected_by"] == ["NodeResourcesFit", "NodeUnschedulable"]


async def test_second_attempt_is_a_second_record() -> None:
    h, log = _harness()
    h.node("n1", cpu="1")
    h.pod("a", cpu="2")
    await h.cycle()
    h.node("n2", cpu="4")
    h.queue.activate([h.pods["default/a"]])  # straight back to activeQ (no backoff wait in a unit test)
    qpi = h.queue.pop_nowait()
    assert qpi is not None
    h.loop.schedule_one(qpi)
    await h.loop.drain()
    recs = log.find("default/a")
    assert [r.attempt for r in recs] == [2, 1] and [r.result for r in recs] == ["scheduled", "unschedulable"]
    assert recs[0].selected == "n2"


async def test_malformed_pod_is_recorded_with_its_parse_error() -> None:
    h, log = _harness()
    h.node("n1")
    h.pod("bad", cpu="one")
    await h.cycle()
    [d] = list(log.records)
    assert d.result == "unschedulable" and d.nodes_evaluated == 0 and d.plugins == ()
    assert d.message is not None and "'one'" in d.message


async def test_reserve_annotations_and_rejection_are_recorded() -> None:
    class Gpu(Annotating):
        def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
            if self.reject:
                return Status(Code.UNSCHEDULABLE, ["no GPU left"], "Gpu")
            state.pod_annotations["gpu-scheduler/gpu-indices"] = "2,3"
            state.data["allocated"] = [{"claim": "default/claim", "allocation": {"devices": {"results": [
                {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "node-a", "device": "gpu-1"}]}}}]
            return Status.success()

        def claim_allocations(self, state: CycleState, pod: PodInfo) -> list[dict[str, Any]]:
            """AllocationReporter, as DynamicResources: the decision record reads only this."""
            return list(state.data.get("allocated") or [])

    h, log = _harness(Framework("py-scheduler", [(PrioritySort(), 0), (Gpu(), 0), (DefaultBinder(), 0)]))
    h.node("n1")
    h.pod("a")
    await h.cycle()
    j = log.records[-1].to_json()
    assert j["result"] == "scheduled" and j["selected"] == "n1" and j["gpu_indices"] == "2,3"
    assert j["dra_devices"] == [{"claim": "default/claim", "request": "gpu", "driver": "gpu.nvidia.com",
                                 "pool": "node-a", "device": "gpu-1"}]
    assert j["scores"] == {} and j["ranked"] == []  # one feasible node: not scored, as upstream

    h2, log2 = _harness(Framework("py-scheduler", [(PrioritySort(), 0), (Gpu(reject=True), 0), (DefaultBinder(), 0)]))
    h2.node("n1")
    h2.pod("a")
    await h2.cycle()
    d = log2.records[-1]
    assert d.result == "unschedulable" and d.selected is None
    assert d.message == "0/1 nodes are available: 1 no GPU left." and d.annotations is None


async def test_a_failing_recorder_never_fails_the_cycle(caplog: pytest.LogCaptureFixture) -> None:
    h, log = _harness()

    def boom(*_a: Any, **_k: Any) -> Any:
        raise RuntimeError("recorder bug")

    log.record = boom  # type: ignore[method-assign]
    h.node("n1")
    h.pod("a")
    await h.cycle()
    assert ("bind", ("default/a", "n1", "uid-a")) in h.kube.calls
    assert "recording the scheduling decision of pod default/a failed" in caplog.text


def _result(names: list[str], totals: list[int], selected: str) -> ScheduleResult:
    res = ScheduleResult(pod="default/p", profile="py-scheduler", selected=selected, feasible=list(names))
    res.score_names = names
    res.score_columns = [("A", bytes(t // 2 for t in totals)), ("B", bytes(t - t // 2 for t in totals))]
    res.total_values = totals
    res.weights = {"A": 1, "B": 1}
    return res


def test_top_nodes_orders_by_total_and_keeps_a_selected_node_outside_the_top() -> None:
    res = _result(["a", "b", "c", "d", "e"], [10, 50, 30, 50, 20], "a")
    nodes, totals, rows = top_nodes(res, 2)
    assert nodes == ("b", "d", "a") and totals == (50, 50, 10)
    assert rows == bytes([25, 25, 25, 25, 5, 5])
    assert top_nodes(res, 0) == (("a",), (10,), bytes([5, 5]))
    assert top_nodes(res, 9)[0] == ("b", "d", "c", "e", "a")
    # ties at the threshold: at most K kept, evaluation order among equals
    res = _result(["a", "b", "c", "d"], [7, 7, 7, 7], "c")
    assert top_nodes(res, 2)[0] == ("a", "b", "c")


def test_filter_histogram_counts_prefilter_absent_nodes_like_explain() -> None:
    res = ScheduleResult(pod="default/p", profile="p")
    d = Diagnosis(node_to_status={"n1": Status(Code.UNSCHEDULABLE, ["Insufficient cpu", "Insufficient memory"],
                                                "NodeResourcesFit"),
                                  "n2": Status(Code.UNSCHEDULABLE, ["Insufficient cpu"], "NodeResourcesFit")},
                  absent_nodes_status=Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ["didn't match"], ""))
    res.diagnosis = d
    # as the runtime builds it from the Diagnosis (what the record counts)
    res.filtered = {"n1": ["Insufficient cpu", "Insufficient memory"], "n2": ["Insufficient cpu"],
                    "n3": ["didn't match"], "n4": ["didn't match"]}
    assert render_histogram(filter_counts(res)) == (
        ("Insufficient cpu", 2), ("didn't match", 2), ("Insufficient memory", 1))


def test_ring_is_bounded_and_its_metrics_count_drops() -> None:
    now = [1000.0]
    log = DecisionLog(capacity=3, top_k=1, clock=lambda: now[0])
    reg = CollectorRegistry()
    register_metrics(log, reg)
    for i in range(5):
        pod = PodInfo({"metadata": {"name": f"p{i}", "namespace": "ns", "uid": f"u{i}"}, "spec": {}})
        log.record(pod, "py-scheduler", 1, "error", message="boom")
        now[0] += 10
    assert [d.pod for d in log.records] == ["ns/p2", "ns/p3", "ns/p4"]
    assert log.dropped == 2 and log.find("ns/p0") == [] and log.find("ns/p4")[0].uid == "u4"
    text = generate_latest(reg).decode()
    assert "py_scheduler_decision_records_dropped_total 2.0" in text
    assert "py_scheduler_decision_records 3.0" in text
    assert "py_scheduler_decision_records_oldest_age_seconds 30.0" in text  # p2 recorded at 1020, now 1050
    with pytest.raises(ValueError):
        DecisionLog(capacity=0)


# -- HTTP ------------------------------------------------------------------------------------------
async def _client(log: DecisionLog, leading: list[bool]) -> TestClient[web.Request, web.Application]:
    app = web.Application()
    add_routes(app, log, lambda: leading[0])
    client: TestClient[web.Request, web.Application] = TestClient(TestServer(app))
    await client.start_server()
    return client


async def test_http_json_html_and_leadership() -> None:
    h, log = _harness(top_k=2)
    for i in range(4):
        h.node(f"n{i}", cpu=str(2 + i))
    h.pod("a")
    await h.cycle()
    h.pod("huge", cpu="64")
    await h.cycle()
    # a reason with markup must be escaped in the page
    log.records[-1].counts = (("<script>alert(1)</script>", 1),)
    leading = [True]
    client = await _client(log, leading)
    try:
        r = await client.get("/debug/decisions", params={"pod": "default/a"})
        assert r.status == 200
        body = await r.json()
        [rec] = body["decisions"]
        assert rec["pod"] == "default/a" and rec["result"] == "scheduled" and len(rec["ranked"]) == 2
        assert body["ring"]["kept"] == 2 and body["ring"]["capacity"] == 100 and body["ring"]["dropped"] == 0
        r = await client.get("/debug/decisions", params={"pod": "default/nobody"})
        assert r.status == 404 and (await r.json())["decisions"] == []
        assert (await client.get("/debug/decisions", params={"limit": "x"})).status == 400
        assert (await client.get("/debug/decisions", params={"pod": "a/b/c"})).status == 400
        r = await client.get("/debug/decisions", params={"limit": "1"})
        assert [d["pod"] for d in (await r.json())["decisions"]] == ["default/huge"]

        r = await client.get("/debug/decisions/ui")
        assert r.status == 200 and r.headers["Content-Type"].startswith("text/html")
        assert "script-src" not in r.headers["Content-Security-Policy"]  # default-src 'none': no scripts
        page = await r.text()
        assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
        assert "default/a" in page and "default/huge" in page and "unschedulable" in page
        assert re.search(r"<tr class=sel><td class=l>✔ n\d", page)
        assert "NodeResourcesFit" in page and "0/4 nodes are available" in page

        leading[0] = False
        assert (await client.get("/debug/decisions")).status == 503
        assert (await client.get("/debug/decisions/ui")).status == 503
    finally:
        await client.close()


def test_run_refuses_a_negative_ring_size(tmp_path: Any) -> None:
    from py_scheduler.app.process.main import run_scheduler

    rc = run_scheduler(kubeconfig=tmp_path / "none", config=None, leader_elect=False, lease_name=None,
                       lease_namespace=None, metrics_bind_address="", verbosity=0, decisions_capacity=-1)
    assert rc == 1
