"""``simulate`` with GenericWorkload on: a gang goes through the same pod group cycle as the live loop
(``framework/podgroup.py``): placed whole, or none of its members (the snapshot's usage after equals
before), each unplaced member saying why; Pods outside the group are scheduled as before."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from py_scheduler.offline.simulate import simulate_main

Obj = dict[str, Any]
GATES = "GenericWorkload=true"


def _node(name: str, gpus: int) -> Obj:
    alloc = {"cpu": "32", "memory": "128Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"allocatable": alloc, "capacity": alloc}}


def _pod(name: str, group: str | None, gpus: int = 1) -> Obj:
    spec: Obj = {"containers": [{"name": "c", "image": "x", "resources": {
        "requests": {"cpu": "1"}, "limits": {"nvidia.com/gpu": str(gpus)}}}]}
    if group:
        spec["schedulingGroup"] = {"podGroupName": group}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default", "uid": name},
            "spec": spec}


def _group(name: str, min_count: int) -> Obj:
    return {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}}}


def _simulate(tmp_path: Path, objs: list[Obj], capsys: pytest.CaptureFixture[str]) -> Obj:
    path = tmp_path / "snap.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}))
    assert simulate_main(path, None, False, "json", feature_gates=GATES) == 0
    doc: Obj = json.loads(capsys.readouterr().out)
    return doc


def test_a_gang_that_does_not_fit_places_no_member(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    objs = [_node("n1", 2), _node("n2", 1), _group("g", 4), *[_pod(f"m{i}", "g") for i in range(4)],
            _pod("solo", None)]
    doc = _simulate(tmp_path, objs, capsys)
    by = {p["pod"]: p for p in doc["placements"]}
    assert [by[f"default/m{i}"]["node"] for i in range(4)] == [None] * 4, doc["placements"]
    msgs = sorted(by[f"default/m{i}"]["message"] for i in range(4))
    # the members that fit carry the group's status with PodGroupPostFilter's outcome appended (as upstream)
    want = ("pod group is unschedulable, minCount (4) cannot be satisfied: 3 scheduled, 0 remaining, "
            "pod group preemption: No preemption victims found for incoming preemptor")
    assert msgs.count(want) == 3, msgs
    assert by["default/solo"]["node"] in ("n1", "n2")  # the GPUs the gang did not keep
    assert doc["scheduled"] == 1


def test_a_gang_that_fits_is_placed_whole_in_file_order(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    objs = [_node("n1", 2), _node("n2", 2), _group("g", 3), _pod("m0", "g"), _pod("solo", None, 1),
            _pod("m1", "g"), _pod("m2", "g")]
    doc = _simulate(tmp_path, objs, capsys)
    assert [p["pod"] for p in doc["placements"]] == ["default/m0", "default/solo", "default/m1", "default/m2"]
    assert all(p["node"] for p in doc["placements"]), doc["placements"]
    assert doc["scheduled"] == 4


def test_with_topology_the_gang_is_tried_whole_in_each_rack(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """TopologyAwareWorkloadScheduling on: rack a holds 3 of 4 two-GPU members (a cordoned Node's GPUs do
    not count), rack b holds 4; the placement algorithm places the whole gang in b, then a Pod outside
    the group finds a's GPUs free (the trial in a was reverted)."""
    rack = "example.com/rack"
    nodes = []
    for name, r, gpus, cordoned in (("a1", "a", 4, False), ("a2", "a", 2, False), ("a3", "a", 2, True),
                                    ("b1", "b", 4, False), ("b2", "b", 4, False)):
        n = _node(name, gpus)
        n["metadata"]["labels"][rack] = r
        n["spec"] = {"unschedulable": cordoned}
        nodes.append(n)
    group = _group("g", 4)
    group["spec"]["schedulingConstraints"] = {"topology": [{"key": rack}]}
    objs = [*nodes, group, *[_pod(f"m{i}", "g", 2) for i in range(4)], _pod("solo", None, 4)]
    path = tmp_path / "snap.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}))
    assert simulate_main(path, None, False, "json",
                         feature_gates="GenericWorkload=true,TopologyAwareWorkloadScheduling=true") == 0
    doc = json.loads(capsys.readouterr().out)
    by = {p["pod"]: p["node"] for p in doc["placements"]}
    assert sorted(by[f"default/m{i}"] for i in range(4)) == ["b1", "b1", "b2", "b2"], doc["placements"]
    assert by["default/solo"] == "a1"


@pytest.fixture
def reserve_bug(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """GPUFilter's Reserve reserves, then raises for the Pods named ``bad*`` (a plugin bug); returns
    the Pods whose reservation was undone (Unreserve)."""
    from py_scheduler.plugins.gpu.filter import GPUFilter

    real_reserve, real_unreserve = GPUFilter.reserve, GPUFilter.unreserve
    undone: list[str] = []

    def reserve(self: GPUFilter, state: Any, pod: Any, node_name: str) -> Any:
        st = real_reserve(self, state, pod, node_name)
        if pod.name.startswith("bad"):
            raise RuntimeError("reserve bug")
        return st

    def unreserve(self: GPUFilter, state: Any, pod: Any, node_name: str) -> None:
        undone.append(pod.name)
        real_unreserve(self, state, pod, node_name)

    monkeypatch.setattr(GPUFilter, "reserve", reserve)
    monkeypatch.setattr(GPUFilter, "unreserve", unreserve)
    return undone


def test_a_plugin_bug_in_reserve_fails_that_pod_alone_and_holds_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], reserve_bug: list[str]) -> None:
    # three GPUs for four one-GPU Pods: the last fits only if the failed one holds nothing
    objs = [_node("n1", 3), _pod("a", None), _pod("bad", None), _pod("b", None), _pod("c", None)]
    doc = _simulate(tmp_path, objs, capsys)
    by = {p["pod"]: p for p in doc["placements"]}
    assert by["default/bad"]["node"] is None and "RuntimeError: reserve bug" in by["default/bad"]["message"]
    assert [by[f"default/{n}"]["node"] for n in "abc"] == ["n1"] * 3 and doc["scheduled"] == 3
    assert reserve_bug == ["bad"]


def test_a_plugin_bug_in_a_gang_members_reserve_places_no_member_and_the_run_goes_on(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], reserve_bug: list[str]) -> None:
    objs = [_node("n1", 2), _group("g", 2), _pod("m0", "g"), _pod("bad-m1", "g"), _pod("solo", None),
            _pod("solo2", None)]
    doc = _simulate(tmp_path, objs, capsys)
    by = {p["pod"]: p for p in doc["placements"]}
    assert by["default/m0"]["node"] is None and by["default/bad-m1"]["node"] is None
    assert "RuntimeError: reserve bug" in by["default/bad-m1"]["message"], by["default/bad-m1"]
    assert by["default/solo"]["node"] == "n1" and by["default/solo2"]["node"] == "n1"  # both GPUs free again
    assert "bad-m1" in reserve_bug and "m0" in reserve_bug


def test_a_gang_below_its_minimum_is_waiting_for_members_as_explain_says(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two members of a minCount-3 gang, with room for both: the live scheduler holds them before the
    queue (GangScheduling's PreEnqueue), so simulate says they wait for members -- not a capacity
    refusal ("minCount (3) cannot be satisfied") -- as ``explain --pod`` does (issue 30, item 5)."""
    objs = [_node("n1", 4), _group("g", 3), _pod("m0", "g"), _pod("m1", "g")]
    doc = _simulate(tmp_path, objs, capsys)
    by = {p["pod"]: p for p in doc["placements"]}
    for m in ("default/m0", "default/m1"):
        assert by[m]["node"] is None
        assert by[m]["message"] == ('held by PreEnqueue plugin "GangScheduling": '
                                    "waiting for minCount pods from a gang to appear in scheduling queue"), by[m]


def test_simulate_and_explain_give_a_gang_below_its_minimum_the_same_reason(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One snapshot, a minCount-3 gang with two members and room for both: ``simulate``, ``explain``
    (every pending Pod) and ``explain --pod`` say word for word why the member is not tried --
    GangScheduling's PreEnqueue holds it, waiting for members (issue 30, item 5). ``explain --pod``
    explains it as if let through (it fits n1) and says so in its note, which quotes simulate's
    message."""
    from py_scheduler.offline.explain import explain_main

    path = tmp_path / "snap.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List",
                                "items": [_node("n1", 4), _group("g", 3), _pod("m0", "g"), _pod("m1", "g")]}))
    want = ('held by PreEnqueue plugin "GangScheduling": '
            "waiting for minCount pods from a gang to appear in scheduling queue")
    assert simulate_main(path, None, False, "json", feature_gates=GATES) == 0
    simulated = {p["pod"]: p for p in json.loads(capsys.readouterr().out)["placements"]}
    assert simulated["default/m0"]["node"] is None and simulated["default/m0"]["message"] == want

    assert explain_main(path, None, None, None, "json", feature_gates=GATES) == 0
    explained = {d["pod"]: d for d in map(json.loads, capsys.readouterr().out.splitlines())}
    assert explained["default/m0"]["selected"] is None
    assert explained["default/m0"]["message"] == simulated["default/m0"]["message"]

    assert explain_main(path, None, "default/m0", None, "json", feature_gates=GATES) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["selected"] == "n1"
    (note,) = out.err.strip().splitlines()
    assert note == (f"note: Pod default/m0 is not tried by the scheduler: {simulated['default/m0']['message']}; "
                    "no event, no condition until that changes; explaining it as if it were let through"), note


def test_pod_groups_with_generic_workload_off_are_named_as_ignored(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Gate off, kube-scheduler schedules a gang's members one by one, and so does simulate; a note on
    stderr says the PodGroup was ignored and which gate honours it (a new user read "2 of 2 scheduled"
    for a gang below its minimum as the gang being honoured). Gate on: no note."""
    from py_scheduler.offline.explain import explain_main

    path = tmp_path / "snap.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List",
                                "items": [_node("n1", 4), _group("g", 3), _pod("m0", "g"), _pod("m1", "g")]}))
    note = "1 PodGroup is ignored (GenericWorkload is off; --feature-gates GenericWorkload=true"
    assert simulate_main(path, None, False, "json") == 0
    out = capsys.readouterr()
    assert note in out.err and all(p["node"] == "n1" for p in json.loads(out.out)["placements"]), out
    assert explain_main(path, None, None, None, "json") == 0
    assert note in capsys.readouterr().err
    assert simulate_main(path, None, False, "json", feature_gates=GATES) == 0
    assert note not in capsys.readouterr().err


def test_a_gated_member_holds_its_whole_group(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """As the live queue (a gated Pod gates its pod group entity): the three members that could be
    placed are not tried while the fourth waits for its scheduling gate; a Pod outside the group is."""
    gated = _pod("m3", "g")
    gated["spec"]["schedulingGates"] = [{"name": "example.com/held"}]
    objs = [_node("n1", 4), _group("g", 3), *[_pod(f"m{i}", "g") for i in range(3)], gated, _pod("solo", None)]
    doc = _simulate(tmp_path, objs, capsys)
    by = {p["pod"]: p for p in doc["placements"]}
    assert [by[f"default/m{i}"]["node"] for i in range(3)] == [None] * 3, doc["placements"]
    assert {by[f"default/m{i}"]["message"] for i in range(3)} == {
        'held by PreEnqueue plugin "SchedulingGates": pod default/m3 of its pod group is waiting for scheduling '
        'gates: [example.com/held]'}
    assert by["default/solo"]["node"] == "n1" and doc["scheduled"] == 1


def test_a_gang_that_needs_victims_is_reported_nominated_nothing_evicted(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Group preemption in ``simulate``: a gang of priority 1000 that fits only without the priority-0
    Pods holding both GPUs. As for a single Pod, nothing is evicted: each member stays unplaced, with
    its nomination (one per Node, as the live scheduler would write) in the JSON."""
    low = [_pod("low1", None), _pod("low2", None)]
    for p, node in zip(low, ("n1", "n2"), strict=True):
        p["spec"].update(nodeName=node, priority=0)
    group = _group("g", 2)
    group["spec"]["priority"] = 1000
    members = [_pod(f"m{i}", "g") for i in range(2)]
    for m in members:
        m["spec"]["priority"] = 1000
    doc = _simulate(tmp_path, [_node("n1", 1), _node("n2", 1), *low, group, *members], capsys)
    by = {p["pod"]: p for p in doc["placements"]}
    assert [by[f"default/m{i}"]["node"] for i in range(2)] == [None, None]
    assert sorted(by[f"default/m{i}"]["nominated_node"] for i in range(2)) == ["n1", "n2"], doc["placements"]
    assert doc["scheduled"] == 0
