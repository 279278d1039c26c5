"""The benchmark workloads are what bench/RESULTS.md says they are (a wrong generator would make every
benchmark figure meaningless): node shape and the 10% GPU nodes, workload Pods, bound init Pods that
respect the workload's own rules, and a short in-process cycle run that schedules every Pod."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

from bench.bench_lib import workloads as w  # noqa: E402
from bench.bench_lib.cycle import percentile, run_cycles  # noqa: E402


def test_nodes_shape_and_gpu_share() -> None:
    nodes = w.make_nodes(1000)
    gpu = [n for n in nodes if "nvidia.com/gpu" in n["status"]["allocatable"]]
    assert len(gpu) == 100
    assert Counter(n["metadata"]["labels"][w.LABEL_ZONE] for n in gpu) == {f"zone-{i}": 10 for i in range(10)}
    g = gpu[0]
    assert g["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB"
    assert g["metadata"]["labels"]["nvidia.com/gpu.memory"] == "40960"
    assert g["status"]["allocatable"] == {"cpu": "32", "memory": "128Gi", "pods": "110", "nvidia.com/gpu": "8"}
    assert w.gpu_capacity(1000) == 800
    assert len({n["metadata"]["name"] for n in nodes}) == 1000


def test_init_pods_respect_the_workload_rules() -> None:
    anti = list(w.init_pods(w.get_workload("PodAntiAffinity"), 50, 200))
    by_group: dict[str, list[str]] = {}
    for p in anti:
        by_group.setdefault(p["metadata"]["labels"]["app"], []).append(p["spec"]["nodeName"])
    assert all(len(set(nodes)) == len(nodes) == 10 for nodes in by_group.values())
    gpu = list(w.init_pods(w.get_workload("GPU"), 100, 10_000))
    used = Counter()
    for p in gpu:
        idx = int(p["spec"]["nodeName"].split("-")[1])
        assert w.is_gpu_node(idx)
        used[idx] += int(p["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"])
    assert used and max(used.values()) <= w.GPUS_PER_NODE
    aff = list(w.init_pods(w.get_workload("NodeAffinity"), 100, 60))
    assert {int(p["spec"]["nodeName"].split("-")[1]) % 10 for p in aff} <= {0, 1, 2}


def test_max_pods_caps_gpu_workload_only() -> None:
    assert w.max_pods(w.get_workload("SchedulingBasic"), 1000, 5000) == 5000
    assert w.max_pods(w.get_workload("GPU"), 1000, 5000) == 480
    with pytest.raises(KeyError, match="unknown workload"):
        w.get_workload("nope")


@pytest.mark.parametrize("name", [n for n, wl in w.WORKLOADS.items() if not wl.live_only])
def test_cycle_run_schedules_every_pod(name: str) -> None:
    res = run_cycles(w.get_workload(name), 120, cycles=12, warmup=2, n_init=60)
    assert res.scheduled == 12 and res.unschedulable == 0
    assert len(res.cycles) == len(res.cpu) == 12


def test_percentile_nearest_rank() -> None:
    values = [float(i) for i in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile(values, 100) == 100.0
    assert percentile([], 99) == 0.0


def test_cycle_run_of_the_claim_template_workload_fills_every_device() -> None:
    """bench/cycle simulates the resourceclaim controller (a claim per Pod from the template) and
    PreBind's claim write: on 2 nodes of 10 devices, 20 Pods all get a device (without the claims
    every Pod would be unschedulable)."""
    wl = w.get_workload("SchedulingWithResourceClaimTemplate")
    res = run_cycles(wl, 2, cycles=18, warmup=2)
    assert res.scheduled == 18 and res.unschedulable == 0
    pod = wl.pod(0, "ns", "sched", "uid-0")
    claim = w.generated_claim(pod)
    name = claim["metadata"]["name"]
    assert pod["status"]["resourceClaimStatuses"] == [{"name": "resource", "resourceClaimName": name}]
    assert claim["metadata"]["ownerReferences"][0]["uid"] == "uid-0"
