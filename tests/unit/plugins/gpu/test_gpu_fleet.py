"""End-to-end offline: the full default profile schedules GPU Pods on a mixed fleet.

``Algorithm.schedule`` + ``fw.run_reserve`` + ``snapshot.assume`` of a copy carrying the Reserve
annotations: what the live loop does, without the API.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from py_scheduler.cache.snapshot import Snapshot
from py_scheduler.framework.algorithm import Algorithm, ScheduleResult
from py_scheduler.framework.config import ProfileConfig, build_framework
from py_scheduler.framework.runtime import Framework
from py_scheduler.framework.types import PodInfo
from py_scheduler.plugins import registry
from py_scheduler.plugins.gpu.accounting import clear_memo
from tests.unit.plugins.gpu.gpu_objects import a100_node, cpu_node, gpu_pod, h100_node, l4_node

Obj = dict[str, Any]
IDX = "gpu-scheduler/gpu-indices"
NVLINK_GROUPS_A100 = ({0, 1, 2, 3}, {4, 5, 6, 7})


def fleet() -> list[Obj]:
    return [a100_node("a100-0"), a100_node("a100-1"), h100_node("h100-0"), l4_node("l4-0"),
            cpu_node("cpu-0"), cpu_node("cpu-1"), cpu_node("cpu-2")]


class Cluster:
    """A snapshot plus the bound Pods, scheduled through the full default profile."""

    def __init__(self, nodes: list[Obj], seed: int = 0) -> None:
        self.nodes = nodes
        self.bound: list[Obj] = []
        self.snap = Snapshot.from_objects(nodes)
        self.fw: Framework = build_framework(ProfileConfig(), registry=registry)
        self.alg = Algorithm(rng=random.Random(seed))

    def schedule(self, pod: Obj) -> ScheduleResult:
        pi = PodInfo(pod)
        res = self.alg.schedule(self.fw, self.snap, pi)
        if res.selected is None:
            return res
        assert res.state is not None
        s = self.fw.run_reserve(res.state, pi, res.selected)
        assert s.is_success(), s
        meta = dict(pod["metadata"], annotations={**pod["metadata"].get("annotations", {}),
                                                  **res.state.pod_annotations})
        annotated = dict(pod, metadata=meta)
        self.snap.assume(PodInfo(annotated), res.selected)
        self.bound.append(dict(annotated, spec=dict(annotated["spec"], nodeName=res.selected)))
        return res

    def delete(self, name: str) -> None:
        """The informer saw the Pod deleted: the next snapshot is built without it."""
        self.bound = [p for p in self.bound if p["metadata"]["name"] != name]
        self.snap = Snapshot.from_objects(self.nodes, self.bound)

    def indices(self, pod_name: str) -> set[int]:
        p = next(p for p in self.bound if p["metadata"]["name"] == pod_name)
        return {int(i) for i in p["metadata"]["annotations"][IDX].split(",")}

    def check_invariants(self) -> None:
        alloc = {n["metadata"]["name"]: int(n["status"]["allocatable"].get("nvidia.com/gpu", "0")) for n in self.nodes}
        seen: dict[str, set[int]] = {}
        for p in self.bound:
            if "nvidia.com/gpu" not in p["spec"]["containers"][0]["resources"]["limits"]:
                continue
            node = p["spec"]["nodeName"]
            idx = self.indices(p["metadata"]["name"])
            assert len(idx) == int(p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"])
            assert all(0 <= i < alloc[node] for i in idx), (p["metadata"]["name"], node, idx)
            assert not (seen.setdefault(node, set()) & idx), f"{p['metadata']['name']} shares an index on {node}"
            seen[node] |= idx


@pytest.fixture(autouse=True)
def _fresh_memo() -> None:
    clear_memo()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fleet_sequence(seed: int) -> None:
    c = Cluster(fleet(), seed)
    # 2x A100, 40 GB each, NVLink: an A100 node, both GPUs in one NVLink group
    res = c.schedule(gpu_pod("train", 2, annotations={
        "gpu-scheduler/gpu-model": "A100", "gpu-scheduler/gpu-memory-gb": "40",
        "gpu-scheduler/nvlink-required": "true"}))
    assert res.selected in ("a100-0", "a100-1"), res.message
    assert res.filtered["h100-0"] == ["node(s) didn't match the requested GPU model"]
    assert res.filtered["l4-0"] == ["Insufficient nvidia.com/gpu"]  # NodeResourcesFit runs first
    assert any(c.indices("train") <= g for g in NVLINK_GROUPS_A100)

    # a CPU-only Pod: the GPU plugins stay out of the way
    res = c.schedule(gpu_pod("web"))
    assert res.selected is not None
    assert res.state is not None and "GPUFilter" in res.state.skip_filter and IDX not in res.state.pod_annotations

    # a burst of 2-GPU Pods: 25 GPUs, 2 taken, the L4 can't hold two -> 11 more fit, then FitErrors
    placed, failed = [], []
    for i in range(14):
        res = c.schedule(gpu_pod(f"burst-{i}", 2))
        (placed if res.selected else failed).append((f"burst-{i}", res))
        c.check_invariants()
    assert len(placed) == 11 and len(failed) == 3
    for _, res in failed:
        assert res.message is not None and res.message.startswith("0/7 nodes are available: ")
        assert "Insufficient nvidia.com/gpu" in res.message
    per_node: dict[str, int] = {}
    for _, res in placed:
        assert res.selected is not None
        per_node[res.selected] = per_node.get(res.selected, 0) + 2
    per_node[c.bound[0]["spec"]["nodeName"]] += 2
    assert per_node == {"a100-0": 8, "a100-1": 8, "h100-0": 8}

    # deleting a Pod frees exactly its GPUs for the next one
    victim, vres = placed[4]
    freed = c.indices(victim)
    c.delete(victim)
    res = c.schedule(gpu_pod("after-delete", 2))
    assert res.selected == vres.selected
    assert c.indices("after-delete") == freed
    c.check_invariants()


def test_unknown_model_is_unresolvable_with_upstream_style_message() -> None:
    c = Cluster(fleet())
    res = c.schedule(gpu_pod("p", 1, annotations={"gpu-scheduler/gpu-model": "B200"}))
    assert res.selected is None and res.unresolvable
    # (DefaultPreemption, once present, appends its own tail after the histogram)
    assert res.message is not None and res.message.startswith(
        "0/7 nodes are available: 3 Insufficient nvidia.com/gpu, 4 node(s) didn't match the requested GPU model.")


def test_bad_annotation_fails_only_that_pod() -> None:
    c = Cluster(fleet())
    res = c.schedule(gpu_pod("bad", 1, annotations={"gpu-scheduler/gpu-memory-gb": "abc"}))
    assert res.selected is None
    assert res.message is not None and res.message.startswith(
        '0/7 nodes are available: invalid annotation gpu-scheduler/gpu-memory-gb="abc": not a non-negative number.')
    assert c.schedule(gpu_pod("good", 1, annotations={"gpu-scheduler/gpu-memory-gb": "20"})).selected is not None


def test_memory_request_steers_to_big_cards_and_nvlink_to_groups() -> None:
    c = Cluster(fleet())
    res = c.schedule(gpu_pod("big", 4, annotations={"gpu-scheduler/gpu-memory-gb": "80",
                                                   "gpu-scheduler/nvlink-required": "true"}))
    assert res.selected == "h100-0"
    # 5 GPUs in one NVLink group: only the H100 group of 8 could (4 left there) -> no node
    res = c.schedule(gpu_pod("wide", 5, annotations={"gpu-scheduler/nvlink-required": "true"}))
    assert res.selected is None
    assert res.message is not None and res.message.startswith(
        "0/7 nodes are available: 2 node(s) had no NVLink group with enough free GPUs, 5 Insufficient nvidia.com/gpu.")
