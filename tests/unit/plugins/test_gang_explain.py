"""``explain`` on a snapshot with a topology-constrained gang (gates on): the group's placement decision
(which domain, and why the group cannot fit whole) is printed as a note; the Pod is kept to that domain
(the other nodes fail with upstream's PreFilter-result reason)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from py_scheduler.offline.explain import explain_main

Obj = dict[str, Any]
RACK = "example.com/rack"


def _node(name: str, rack: str, gpus: int) -> Obj:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {RACK: rack}},
            "status": {"allocatable": {"cpu": "32", "memory": "128Gi", "pods": "110", "nvidia.com/gpu": str(gpus)},
                       "capacity": {"cpu": "32", "memory": "128Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}}}


def _pod(name: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default", "uid": name},
            "spec": {"schedulingGroup": {"podGroupName": "llm"},
                     "containers": [{"name": "c", "image": "x", "resources": {
                         "requests": {"cpu": "1"}, "limits": {"nvidia.com/gpu": "4"}}}]}}


def _snapshot(tmp_path: Path, members: int) -> Path:
    pg = {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
          "metadata": {"name": "llm", "namespace": "default"},
          "spec": {"schedulingPolicy": {"gang": {"minCount": members}},
                   "schedulingConstraints": {"topology": [{"key": RACK}]}}}
    objs = [_node("a1", "a", 8), _node("a2", "a", 8), _node("b1", "b", 4), pg, *[_pod(f"m{i}") for i in range(members)]]
    path = tmp_path / "snap.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}))
    return path


GATES = "GenericWorkload=true,TopologyAwareWorkloadScheduling=true"
"""explain's --feature-gates (the one configuration path of run / explain / simulate)."""


def test_explain_shows_the_group_domain(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert explain_main(_snapshot(tmp_path, 4), None, "default/m0", None, "json", feature_gates=GATES) == 0
    out, err = capsys.readouterr()
    assert f"note: pod group default/llm: topology {RACK}=a (holds the whole group; 4 members" in err
    res = json.loads(out.splitlines()[0])
    assert res["selected"] in ("a1", "a2"), res
    assert "b1" in json.dumps(res), res  # b1 is reported as filtered out


def test_explain_says_why_the_group_cannot_fit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert explain_main(_snapshot(tmp_path, 6), None, "default/m0", None, "json", feature_gates=GATES) == 0
    err = capsys.readouterr().err
    assert "holds the most members, but not all: the group cannot fit whole; 6 members" in err
    assert "room per domain: a=4, b=1" in err
