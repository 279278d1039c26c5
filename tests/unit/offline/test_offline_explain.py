"""explain: exact JSON keys, hand-computed scores, queue order with assume, bad Pods, table rendering."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from offline_objects import PREFER_SSD, node, pod, two_node_case, write_list
from typer.testing import CliRunner

from py_scheduler.cli import app
from py_scheduler.framework.algorithm import ScheduleResult
from py_scheduler.framework.types import Code, Status
from py_scheduler.offline.engine import OfflineScheduler, queue_order
from py_scheduler.offline.loader import load_snapshot_file, pending_pods
from py_scheduler.offline.render import make_console, print_explain

JSON_KEYS = ["pod", "profile", "nodes_evaluated", "filtered", "feasible", "scores", "weights", "skipped", "totals",
             "selected", "message"]

runner = CliRunner()


def _explain_json(path: Path, *extra: str) -> list[dict[str, Any]]:
    res = runner.invoke(app, ["explain", "--snapshot", str(path), "-o", "json", *extra])
    assert res.exit_code == 0, res.output
    return [json.loads(line) for line in res.stdout.splitlines() if line.strip()]


def test_two_node_case_in_queue_order(tmp_path: Path) -> None:
    """Hand-computed. Both Pods have no requests, so NodeResourcesFit scores the 100m / 200Mi defaults
    (LeastAllocated: cpu (4000-100)*100/4000 = 97, memory (16Gi-200Mi)*100/16Gi = 98, mean 97) and
    BalancedAllocation skips. ``tolerant``: TaintToleration 100 x3 on both, NodeAffinity 100 x2 on A
    -> A 300+200+97 = 597, B 300+97 = 397. ``intolerant`` comes second and sees ``tolerant`` assumed
    on A (cpu 3800/4000 -> 95, memory 98.77 -> 97, mean 96); its one intolerable PreferNoSchedule
    taint on A makes TaintToleration A 0, B 100 -> A 0+200+96 = 296, B 397."""
    lines = _explain_json(write_list(tmp_path / "two.yaml", two_node_case()))
    assert len(lines) == 2
    for rec in lines:
        assert list(rec) == JSON_KEYS
    first, second = lines
    assert first["pod"] == "default/tolerant" and first["profile"] == "py-scheduler"
    assert first["totals"] == {"A": 597, "B": 397}
    assert first["selected"] == "A" and first["message"] is None
    assert first["scores"]["TaintToleration"] == {"A": 100, "B": 100}
    assert first["scores"]["NodeAffinity"] == {"A": 100, "B": 0}
    assert first["scores"]["NodeResourcesFit"] == {"A": 97, "B": 97}
    assert "NodeResourcesBalancedAllocation" in first["skipped"]
    assert first["weights"]["TaintToleration"] == 3 and first["weights"]["NodeAffinity"] == 2
    assert sorted(first["feasible"]) == ["A", "B"] and first["filtered"] == {} and first["nodes_evaluated"] == 2
    assert second["pod"] == "default/intolerant"
    assert second["scores"]["TaintToleration"] == {"A": 0, "B": 100}
    assert second["scores"]["NodeResourcesFit"] == {"A": 96, "B": 97}
    assert second["totals"] == {"A": 296, "B": 397}
    assert second["selected"] == "B"


def test_single_pod_sees_the_cluster_as_it_is(tmp_path: Path) -> None:
    """--pod: only that Pod, nothing assumed before it: A 0+200+97 = 297, B 397."""
    (rec,) = _explain_json(write_list(tmp_path / "two.yaml", two_node_case()), "--pod", "default/intolerant")
    assert rec["totals"] == {"A": 297, "B": 397} and rec["selected"] == "B"


def test_single_feasible_node_is_still_scored(tmp_path: Path) -> None:
    objs = [node("big", cpu="8"), node("small", cpu="1"), pod("p", cpu="2")]
    (rec,) = _explain_json(write_list(tmp_path / "s.yaml", objs))
    assert rec["feasible"] == ["big"] and rec["selected"] == "big"
    assert rec["filtered"] == {"small": ["Insufficient cpu"]}
    assert set(rec["totals"]) == {"big"} and rec["totals"]["big"] > 0
    # LeastAllocated: cpu (8000-2000)*100/8000 = 75, memory (16Gi-200Mi)*100/16Gi = 98, mean 86
    assert rec["scores"]["NodeResourcesFit"] == {"big": 86}


def test_earlier_pods_are_assumed(tmp_path: Path) -> None:
    objs = [node("n1", cpu="2"), pod("second", cpu="1500m", created="2025-01-02T00:00:00Z"),
            pod("first", cpu="1500m", created="2025-01-01T00:00:00Z")]
    first, second = _explain_json(write_list(tmp_path / "s.yaml", objs))
    assert first["pod"] == "default/first" and first["selected"] == "n1"
    assert second["pod"] == "default/second" and second["selected"] is None
    # DefaultPreemption's tail, as kube-scheduler v1.37 (equal priorities: nothing to evict).
    assert second["message"] == ("0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are "
                                 "available: 1 No preemption victims found for incoming pod.")
    assert second["filtered"] == {"n1": ["Insufficient cpu"]}


def test_unfit_pod_message(tmp_path: Path) -> None:
    objs = [node("a", cpu="1", labels={"disk": "hdd"}), node("b", labels={"disk": "ssd"}), node("c"),
            pod("p", cpu="2", spec={"nodeSelector": {"disk": "hdd"}})]
    (rec,) = _explain_json(write_list(tmp_path / "s.yaml", objs))
    assert rec["selected"] is None and rec["feasible"] == [] and rec["totals"] == {}
    assert rec["message"] == ("0/3 nodes are available: 1 Insufficient cpu, "
                              "2 node(s) didn't match Pod's node affinity/selector. preemption: 0/3 nodes are "
                              "available: 3 Preemption is not helpful for scheduling.")
    assert rec["filtered"]["a"] == ["Insufficient cpu"]


def test_pod_parse_error_is_reported_not_raised(tmp_path: Path) -> None:
    objs = [node("n1"), pod("bad", cpu="two"), pod("good", cpu="1")]
    bad, good = _explain_json(write_list(tmp_path / "s.yaml", objs))
    assert list(bad) == JSON_KEYS
    assert bad["pod"] == "default/bad" and bad["selected"] is None
    assert "spec.containers[0].resources.requests.cpu" in bad["message"] and "'two'" in bad["message"]
    assert good["selected"] == "n1"


def test_bound_pod_is_explained_as_if_it_arrived_now(tmp_path: Path) -> None:
    objs = [node("n1", cpu="2"), node("n2", cpu="2"), pod("web", cpu="1500m", node_name="n1", phase="Running")]
    (rec,) = _explain_json(write_list(tmp_path / "s.yaml", objs), "--pod", "default/web")
    # taken off n1 first, so both nodes fit and score the same (tie broken by the seeded rng)
    assert sorted(rec["feasible"]) == ["n1", "n2"]
    assert rec["totals"]["n1"] == rec["totals"]["n2"]


def test_gpu_reserve_annotations_reach_the_assumed_pod() -> None:
    """Reserve plugins' Pod annotations (GPU indices) are kept on the assumed copy, so the next Pod
    on the node gets other GPUs."""
    from py_scheduler.offline.loader import bundled_example_path

    data = load_snapshot_file(bundled_example_path())
    sched = OfflineScheduler.from_data(data, None)
    outcomes = {o.key: o for o in sched.run(queue_order(pending_pods(data), data.order))}
    a, b = outcomes["ml/llm-70b-0"], outcomes["ml/llm-70b-1"]
    assert a.result.selected == b.result.selected == "h100-1"
    ia, ib = a.annotations["gpu-scheduler/gpu-indices"], b.annotations["gpu-scheduler/gpu-indices"]
    assert set(ia.split(",")).isdisjoint(ib.split(","))
    assumed = [p for p in sched.snapshot.get("h100-1").pods if p.name == "llm-70b-0"]
    assert assumed[0].pod["metadata"]["annotations"]["gpu-scheduler/gpu-indices"] == ia


def test_reproducible_tie_breaks(tmp_path: Path) -> None:
    objs = [node(f"n{i}") for i in range(6)] + [pod(f"p{i}", cpu="100m") for i in range(6)]
    path = write_list(tmp_path / "s.yaml", objs)
    assert _explain_json(path) == _explain_json(path)


# -- table ---------------------------------------------------------------------------------------
def test_table_has_plugin_columns_totals_and_marks(tmp_path: Path) -> None:
    objs = [*two_node_case()[:2], pod("p", cpu="1", spec={"affinity": PREFER_SSD}), node("tiny", cpu="500m")]
    res = runner.invoke(app, ["explain", "--snapshot", str(write_list(tmp_path / "s.yaml", objs))])
    assert res.exit_code == 0, res.output
    out = res.stdout
    header = next(line for line in out.splitlines() if "TaintToleration" in line)
    for plugin in ("TaintToleration", "NodeAffinity", "NodeResourcesFit", "ImageLocality"):
        assert plugin in header
    assert "Total" in out and "×3" in out
    selected = next(line for line in out.splitlines() if "✔ selected" in line)
    assert selected.split()[1] == "B"  # A's untolerated PreferNoSchedule taint costs 300 points
    tiny = next(line for line in out.splitlines() if "tiny" in line)
    assert "✘ NodeResourcesFit: Insufficient cpu" in tiny  # the rejecting plugin is named


def test_table_prints_failed_scheduling_and_reasons_verbatim() -> None:
    res = ScheduleResult(pod="ns/p", profile="py-scheduler", nodes_evaluated=1,
                         filtered={"n1": ["waiting for [a b] gates"]},
                         message="0/1 nodes are available: 1 waiting for [a b] gates.")
    from py_scheduler.framework.algorithm import Diagnosis

    res.diagnosis = Diagnosis(node_to_status={"n1": Status(Code.UNSCHEDULABLE, ["waiting for [a b] gates"], "X")})
    import io

    buf = io.StringIO()
    print_explain(make_console(buf), res)
    out = buf.getvalue()
    assert "X: waiting for [a b] gates" in out
    assert "FailedScheduling: 0/1 nodes are available: 1 waiting for [a b] gates." in out


def test_pending_pod_with_wrongly_typed_field_is_reported(tmp_path: Path) -> None:
    bad = pod("bad")
    bad["spec"]["containers"][0]["ports"] = "8080"
    bad_rec, good_rec = _explain_json(write_list(tmp_path / "s.yaml", [node("n1"), bad, pod("good")]))
    assert bad_rec["pod"] == "default/bad" and list(bad_rec) == JSON_KEYS
    if bad_rec["selected"] is None:
        assert "ports" in bad_rec["message"] or bad_rec["message"].startswith("malformed Pod")
    assert good_rec["selected"] == "n1"
