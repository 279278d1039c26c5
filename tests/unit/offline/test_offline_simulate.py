"""simulate on the bundled GPU cluster and on generated snapshots; CLI error paths of both commands."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from offline_objects import node, pod, write_list
from typer.testing import CliRunner

from py_scheduler.cli import app
from py_scheduler.offline.loader import bundled_example_path, load_snapshot_file, pending_pods

runner = CliRunner()

UNFIT = "ml/llm-405b"


def _simulate_json(*args: str) -> dict[str, Any]:
    res = runner.invoke(app, ["simulate", *args, "-o", "json"])
    assert res.exit_code == 0, res.output
    doc: dict[str, Any] = json.loads(res.stdout)
    return doc


def test_bundled_cluster_every_pod_placed_or_explained() -> None:
    doc = _simulate_json()
    data = load_snapshot_file(bundled_example_path())
    pending = {f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in pending_pods(data)}
    placements = {p["pod"]: p for p in doc["placements"]}
    assert set(placements) == pending
    for key, p in placements.items():
        assert (p["node"] is None) == (p["message"] is not None), key
        if p["node"] is not None:
            assert isinstance(p["score"], int) and p["score"] > 0
    unfit = placements[UNFIT]
    assert unfit["node"] is None
    assert unfit["message"].startswith(f"0/{len(data.nodes)} nodes are available: ")
    assert "insufficient GPU memory" in unfit["message"]
    assert doc["unschedulable"] == 1 and doc["scheduled"] == len(pending) - 1
    # the queue order: inference-critical first, low-priority batch last
    order = [p["pod"] for p in doc["placements"]]
    assert order[:3] == [UNFIT, "ml/llm-70b-0", "ml/llm-70b-1"] and order[-1] == "batch/etl-nightly"


def test_bundled_cluster_placements() -> None:
    placements = {p["pod"]: p for p in _simulate_json()["placements"]}
    assert placements["ml/llm-70b-0"]["node"] == placements["ml/llm-70b-1"]["node"] == "h100-1"
    assert placements["ml/whisper"]["node"] == "l4-1"
    assert placements["default/redis"]["node"] == "cpu-3"  # nodeSelector disk=ssd
    assert placements["default/api-0"]["node"] in {"cpu-1", "cpu-2"}  # zones a / b, no GPU toleration
    for web in ("default/web-3", "default/web-4", "default/web-5"):
        assert placements[web]["node"] in {"cpu-1", "cpu-2", "cpu-3"}  # GPU nodes are tainted, cpu-4 cordoned
    assert placements["ml/vision-0"]["node"] in {"a100-1", "a100-2"}
    assert placements["ml/vision-1"]["node"] in {"a100-1", "a100-2"}
    gpu_indices = placements["ml/llm-70b-0"]["annotations"]["gpu-scheduler/gpu-indices"]
    assert len(gpu_indices.split(",")) == 4


def test_bundled_cluster_gpu_summary_before_after() -> None:
    nodes = {n["name"]: n for n in _simulate_json()["nodes"]}
    h100 = nodes["h100-1"]
    assert (h100["before"]["gpu_requested"], h100["after"]["gpu_requested"], h100["after"]["gpu_allocatable"]) == (
        0, 8, 8)
    assert nodes["a100-1"]["before"]["gpu_requested"] == 4  # train-bert holds GPUs 0-3
    assert nodes["l4-1"]["after"]["gpu_requested"] == 2
    assert nodes["cpu-4"]["before"] == nodes["cpu-4"]["after"]  # cordoned
    assert nodes["cpu-3"]["after"]["milli_cpu_requested"] > nodes["cpu-3"]["before"]["milli_cpu_requested"]
    assert nodes["cpu-2"]["before"]["milli_cpu_requested"] == 1000  # the Succeeded backup Pod does not count


def test_bundled_cluster_table() -> None:
    res = runner.invoke(app, ["simulate"])
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert "Placements" in out and "Nodes (requested before → after / allocatable)" in out
    unfit = next(line for line in out.splitlines() if UNFIT in line)
    assert "0/8 nodes are available:" in unfit and "insufficient GPU memory" in unfit
    h100 = next(line for line in out.splitlines() if line.startswith("│ h100-1"))
    assert "0 → 8 / 8" in h100
    assert "11 of 12 pending Pods scheduled, 1 unschedulable" in out


def test_explain_flag_adds_per_pod_tables() -> None:
    res = runner.invoke(app, ["simulate", "--explain"])
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert out.count("(profile py-scheduler)") == 12
    assert "TaintToleration" in out and "GPUScore" in out and "✔ selected" in out
    assert "FailedScheduling: 0/8 nodes are available" in out
    doc = _simulate_json("--explain")
    rec = doc["placements"][0]["explain"]
    assert list(rec) == ["pod", "profile", "nodes_evaluated", "filtered", "feasible", "scores", "weights", "skipped",
                         "totals", "selected", "message"]
    assert rec["selected"] == doc["placements"][0]["node"]


def test_progress_bar_on_many_pods(tmp_path: Path) -> None:
    objs = [node(f"n{i}", cpu="64", memory="256Gi") for i in range(4)]
    objs += [pod(f"p{i:02d}", cpu="100m", memory="128Mi") for i in range(60)]
    path = write_list(tmp_path / "many.yaml", objs)
    res = runner.invoke(app, ["simulate", str(path)])
    assert res.exit_code == 0, res.output
    assert "60/60" in res.stderr
    assert "60 of 60 pending Pods scheduled" in res.stdout
    small = write_list(tmp_path / "few.yaml", objs[:5])
    res = runner.invoke(app, ["simulate", str(small)])
    assert res.exit_code == 0 and "scheduling" not in res.stderr


def test_no_pending_pods_and_no_nodes(tmp_path: Path) -> None:
    path = write_list(tmp_path / "idle.yaml", [node("n1"), pod("b", node_name="n1")])
    res = runner.invoke(app, ["simulate", str(path)])
    assert res.exit_code == 0
    assert "no pending Pods" in res.stderr
    res = runner.invoke(app, ["explain", "--snapshot", str(path)])
    assert res.exit_code == 0 and "no pending Pods" in res.stderr and res.stdout == ""
    empty = write_list(tmp_path / "empty.yaml", [pod("p")])
    doc = _simulate_json(str(empty))
    assert doc["placements"][0]["message"] == "no nodes available to schedule pods"


# -- errors: exit 2, one line, no traceback -----------------------------------------------------
def _bad_node(tmp_path: Path) -> Path:
    n = node("x")
    del n["metadata"]["name"]
    return write_list(tmp_path / "noname.yaml", [n])


def _bad_bound_pod(tmp_path: Path) -> Path:
    return write_list(tmp_path / "badpod.yaml", [node("n1"), pod("web", cpu="1 core", node_name="n1")])


def _bad_yaml(tmp_path: Path) -> Path:
    p = tmp_path / "bad.yaml"
    p.write_text("items: [\n")
    return p


@pytest.mark.parametrize(("make", "expect"), [
    (lambda t: t / "missing.yaml", "no such file"),
    (_bad_yaml, "invalid YAML"),
    (_bad_node, "Node at document 1 item 1: missing metadata.name"),
    (_bad_bound_pod, "Pod default/web (bound to n1)"),
])
@pytest.mark.parametrize("command", ["simulate", "explain"])
def test_snapshot_errors_exit_2_with_one_line(tmp_path: Path, make: Any, expect: str, command: str) -> None:
    path = make(tmp_path)
    args = ["simulate", str(path)] if command == "simulate" else ["explain", "--snapshot", str(path)]
    res = runner.invoke(app, args)
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("error: ") and expect in lines[0] and str(path) in lines[0]
    assert res.stdout == ""


@pytest.mark.parametrize("args", [
    ["explain"],
    ["explain", "--snapshot", "a.yaml", "--kubeconfig", "k"],
    ["explain", "--snapshot", "{ex}", "-o", "yaml"],
    ["simulate", "-o", "xml"],
    ["explain", "--snapshot", "{ex}", "--pod", "a/b/c"],
    ["explain", "--snapshot", "{ex}", "--pod", "default/nope"],
    ["simulate", "--config", "{missing}"],
])
def test_usage_errors_exit_2_with_one_line(tmp_path: Path, args: list[str]) -> None:
    args = [a.format(ex=bundled_example_path(), missing=tmp_path / "nope.yaml") for a in args]
    res = runner.invoke(app, args)
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    assert len(res.stderr.strip().splitlines()) == 1 and res.stderr.startswith("error: ")


@pytest.mark.parametrize("command", ["simulate", "explain"])
def test_unread_kinds_are_skipped_with_one_note_line(tmp_path: Path, command: str) -> None:
    path = write_list(tmp_path / "kind.yaml", [node("n1"), pod("web", cpu="1"),
                                               {"kind": "Gadget", "apiVersion": "v1", "metadata": {"name": "g"}}])
    args = ["simulate", str(path)] if command == "simulate" else ["explain", "--snapshot", str(path)]
    res = runner.invoke(app, [*args, "-o", "json"])
    assert res.exit_code == 0, res.output
    assert res.stderr.strip().splitlines() == [
        f"note: {path}: skipped 1 object of kinds the scheduler does not read: Gadget (1)"]



@pytest.mark.parametrize("command", ["simulate", "explain"])
def test_gated_pods_are_named_not_silently_dropped(tmp_path: Path, command: str) -> None:
    """A Pod waiting for scheduling gates is not placed (upstream's SchedulingGates PreEnqueue holds it),
    but it used to vanish from the output without a word ("nothing to simulate")."""
    gated = pod("gated", cpu="1")
    gated["spec"]["schedulingGates"] = [{"name": "example.com/wait"}]
    path = write_list(tmp_path / "gated.yaml", [node("n1"), pod("web", cpu="1"), gated])
    args = ["simulate", str(path)] if command == "simulate" else ["explain", "--snapshot", str(path)]
    res = runner.invoke(app, [*args, "-o", "json"])
    assert res.exit_code == 0, res.output
    assert res.stderr.strip().splitlines() == [
        f"note: {path}: 1 Pod waits for scheduling gates and is not placed: default/gated"]
    placed = (json.loads(res.stdout)["placements"] if command == "simulate"
              else [json.loads(line) for line in res.stdout.splitlines()])
    assert [p["pod"] for p in placed] == ["default/web"]



@pytest.mark.parametrize("gate,held", [("", False), ("GenericWorkload=true", True)])
def test_explain_pod_held_by_pre_enqueue_says_so(tmp_path: Path, gate: str, held: bool) -> None:
    """With GenericWorkload on, a gang member whose PodGroup does not exist is held by GangScheduling's
    PreEnqueue: the live scheduler never tries it (no event, no condition). explain used to show it
    "selected" on a node without a word; now a note says it is held and by what."""
    member = pod("gang-0", cpu="1")
    member["spec"]["schedulingGroup"] = {"podGroupName": "pg-missing"}
    path = write_list(tmp_path / "gang.yaml", [node("n1"), member])
    flags = ["--feature-gates", gate] if gate else []
    res = runner.invoke(app, ["explain", "--snapshot", str(path), "--pod", "default/gang-0", "-o", "json", *flags])
    assert res.exit_code == 0, res.output
    notes = res.stderr.strip().splitlines()
    if held:
        assert notes == ['note: Pod default/gang-0 is not tried by the scheduler: held by PreEnqueue plugin '
                         '"GangScheduling": waiting for pods\'s pod group "pg-missing" to appear in scheduling queue; '
                         'no event, no condition until that changes; explaining it as if it were let through']
    else:
        assert notes == []
    assert json.loads(res.stdout)["selected"] == "n1"



@pytest.mark.parametrize("gate,node_name", [("", "n1"), ("GenericWorkload=true", None)])
def test_simulate_does_not_place_a_gang_member_without_its_pod_group(tmp_path: Path, gate: str,
                                                                     node_name: str | None) -> None:
    """GenericWorkload on: a member naming a missing PodGroup is held by GangScheduling's PreEnqueue and
    never tried live, so simulate must not place it (it used to, alone); the other Pod is unaffected."""
    member = pod("gang-0", cpu="1")
    member["spec"]["schedulingGroup"] = {"podGroupName": "pg-missing"}
    path = write_list(tmp_path / "gang.yaml", [node("n1"), member, pod("web", cpu="1")])
    flags = ["--feature-gates", gate] if gate else []
    placements = {p["pod"]: p for p in _simulate_json(str(path), *flags)["placements"]}
    assert placements["default/gang-0"]["node"] == node_name
    if node_name is None:
        assert placements["default/gang-0"]["message"] == (
            'held by PreEnqueue plugin "GangScheduling": waiting for pods\'s pod group "pg-missing" to appear in '
            "scheduling queue")
    assert placements["default/web"]["node"] == "n1"


# -- --feature-gates: the same option and path as run ---------------------------------------------
def _gt_toleration_cluster(tmp_path: Path) -> Path:
    """n1 tainted ``slots=5:NoSchedule``; the Pod tolerates ``slots Gt 3``: with
    TaintTolerationComparisonOperators on it fits n1 (5 > 3), off it tolerates nothing."""
    n1 = node("n1")
    n1["spec"] = {"taints": [{"key": "slots", "value": "5", "effect": "NoSchedule"}]}
    p = pod("web", cpu="1")
    p["spec"]["tolerations"] = [{"key": "slots", "operator": "Gt", "value": "3", "effect": "NoSchedule"}]
    return write_list(tmp_path / "gt.yaml", [n1, p])


@pytest.mark.parametrize("gate,selected", [("", None), ("TaintTolerationComparisonOperators=false", None),
                                           ("TaintTolerationComparisonOperators=true", "n1")])
def test_feature_gates_reach_explain_and_simulate(tmp_path: Path, gate: str, selected: str | None) -> None:
    path = _gt_toleration_cluster(tmp_path)
    flags = ["--feature-gates", gate] if gate else []
    res = runner.invoke(app, ["simulate", str(path), "-o", "json", *flags])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["placements"][0]["node"] == selected
    res = runner.invoke(app, ["explain", "--snapshot", str(path), "-o", "json", *flags])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["selected"] == selected
    if selected is None:
        assert doc["filtered"] == {"n1": ["node(s) had untolerated taint(s)"]}


@pytest.mark.parametrize("command", ["simulate", "explain"])
def test_bad_feature_gates_exit_2_with_one_line(command: str) -> None:
    ex = str(bundled_example_path())
    args = ["simulate", ex] if command == "simulate" else ["explain", "--snapshot", ex]
    res = runner.invoke(app, [*args, "--feature-gates", "NoSuchGate=true"])
    assert res.exit_code == 2, res.output
    assert res.stderr.strip().splitlines() == [
        "error: invalid --feature-gates: unrecognized feature gate: NoSuchGate (py-scheduler takes "
        "OpportunisticBatching, TaintTolerationComparisonOperators, GenericWorkload, TopologyAwareWorkloadScheduling; "
        "kube-scheduler's other gates stay at their v1.37 defaults)"]


def test_explain_live_unreachable_is_one_line(tmp_path: Path) -> None:
    kc = tmp_path / "kubeconfig"
    kc.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "users": [{"name": "u", "user": {"token": "t"}}]}))
    res = runner.invoke(app, ["explain", "--kubeconfig", str(kc)])
    assert res.exit_code == 2, res.output
    assert len(res.stderr.strip().splitlines()) == 1 and "cannot reach the API server" in res.stderr
    res = runner.invoke(app, ["explain", "--kubeconfig", str(tmp_path / "none")])
    assert res.exit_code == 2 and len(res.stderr.strip().splitlines()) == 1


# -- --config: the Pod's schedulerName picks the profile ------------------------------------------
BINPACK_CONFIG = """\
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: py-scheduler
- schedulerName: binpack
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: MostAllocated
"""


def test_config_profiles_follow_scheduler_name(tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(BINPACK_CONFIG)
    objs = [node("empty"), node("busy"), pod("running", cpu="2", memory="8Gi", node_name="busy"),
            pod("spread", cpu="1", memory="1Gi"),
            pod("packed", cpu="1", memory="1Gi", spec={"schedulerName": "binpack"}),
            pod("stranger", cpu="1", memory="1Gi", spec={"schedulerName": "someone-else"})]
    doc = _simulate_json(str(write_list(tmp_path / "s.yaml", objs)), "--config", str(cfg))
    assert doc["profiles"] == ["binpack", "py-scheduler"]
    got = {p["pod"]: (p["profile"], p["node"]) for p in doc["placements"]}
    assert got["default/spread"] == ("py-scheduler", "empty")  # LeastAllocated
    assert got["default/packed"] == ("binpack", "busy")  # MostAllocated
    assert got["default/stranger"][0] == "py-scheduler"  # unknown schedulerName: the default profile


def test_bad_config_exit_2_one_line(tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nbogus: 1\n")
    for args in (["simulate", "--config", str(cfg)],
                 ["explain", "--snapshot", str(bundled_example_path()), "--config", str(cfg)]):
        res = runner.invoke(app, args)
        assert res.exit_code == 2, res.output
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and "bogus" in lines[0] and lines[0].count(str(cfg)) == 1
