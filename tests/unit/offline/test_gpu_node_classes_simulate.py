"""``simulate`` on GPU node classes as users have them (issue 30, Deliver 4).

NVIDIA's MIG "single" example (k8s-device-plugin's MIG documentation, "Testing with different
strategies"): an A100-80GB cut into seven ``1g.10gb`` slices advertised as ``nvidia.com/gpu: 7``,
and Pods asking ``limits: {nvidia.com/gpu: 1}``. The kubelet grants each a slice; py-scheduler placed
0 of 7 ("node(s) had MIG slices, not whole GPUs").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from offline_objects import write_list
from typer.testing import CliRunner

from py_scheduler.cli import app
from tests.unit.plugins.gpu import real_nodes as rn

runner = CliRunner()


def _mig_example_pod(i: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"mig-single-example-{i}", "namespace": "default"},
            "spec": {"schedulerName": "py-scheduler", "restartPolicy": "Never", "containers": [
                {"name": "mig-single-example", "image": "nvidia/cuda:12.4.1-base-ubuntu22.04",
                 "command": ["nvidia-smi", "-L"], "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}


def test_nvidia_mig_single_example_places_7_of_7(tmp_path: Path) -> None:
    objs = [rn.a100_mig_single("a100-mig"), *(_mig_example_pod(i) for i in range(8))]
    res = runner.invoke(app, ["simulate", str(write_list(tmp_path / "mig.yaml", objs)), "-o", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    placed = [p for p in doc["placements"] if p["node"] == "a100-mig"]
    assert len(placed) == 7 and doc["scheduled"] == 7
    indices = {p["annotations"]["gpu-scheduler/gpu-indices"] for p in placed}
    assert indices == {str(i) for i in range(7)}  # one slice each
    eighth = next(p for p in doc["placements"] if p["node"] is None)
    assert "insufficient" in eighth["message"].lower()
