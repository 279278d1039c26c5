"""Snapshot Pods are defaulted as the API server defaults them (issue 30, Deliver 1).

The per-field comparison with a real API server is ``tests/e2e/test_snapshot_defaults.py``; these
are the user-visible consequences in ``simulate``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from offline_objects import node, write_list
from typer.testing import CliRunner

from py_scheduler.cli import app

runner = CliRunner()


def _simulate(tmp_path: Path, objs: list[dict[str, Any]]) -> dict[str, Any]:
    res = runner.invoke(app, ["simulate", str(write_list(tmp_path / "s.yaml", objs)), "-o", "json"])
    assert res.exit_code == 0, res.output
    doc: dict[str, Any] = json.loads(res.stdout)
    return doc


def test_limits_only_pod_does_not_land_on_a_node_too_small_for_them(tmp_path: Path) -> None:
    """Issue 30: a Pod with limits 8 CPU / 64Gi and no requests landed on a 2 CPU / 4Gi node (the
    API server would have copied the limits into the requests)."""
    big = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "big", "namespace": "default"},
           "spec": {"containers": [{"name": "c", "image": "app:1", "resources": {
               "limits": {"cpu": "8", "memory": "64Gi"}}}]}}
    doc = _simulate(tmp_path, [node("small", cpu="2", memory="4Gi"), big])
    (p,) = doc["placements"]
    assert p["node"] is None
    assert "Insufficient cpu" in p["message"] and "Insufficient memory" in p["message"]
    doc = _simulate(tmp_path, [node("small", cpu="2", memory="4Gi"), node("large", cpu="16", memory="128Gi"), big])
    assert doc["placements"][0]["node"] == "large"
    after = {n["name"]: n["after"] for n in doc["nodes"]}
    assert after["large"] != {n["name"]: n["before"] for n in doc["nodes"]}["large"]  # the requests count


def test_priority_class_preemption_policy_never_reaches_the_pod(tmp_path: Path) -> None:
    """The Priority admission plugin copies the class's preemptionPolicy: a Pod of a ``Never`` class
    must not be shown preempting (DefaultPreemption reads ``spec.preemptionPolicy``)."""
    pcs = [{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "batch"},
            "value": 1000, "preemptionPolicy": "Never"}]
    low = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "low", "namespace": "default"},
           "spec": {"nodeName": "n", "priority": 0, "containers": [
               {"name": "c", "image": "x", "resources": {"requests": {"cpu": "2"}}}]}}
    high = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "high", "namespace": "default"},
            "spec": {"priorityClassName": "batch", "containers": [
                {"name": "c", "image": "x", "resources": {"requests": {"cpu": "2"}}}]}}
    (p,) = _simulate(tmp_path, [node("n", cpu="2"), *pcs, low, high])["placements"]
    assert p["node"] is None and "nominated_node" not in p
    assert "not eligible due to preemptionPolicy=Never" in p["message"]
