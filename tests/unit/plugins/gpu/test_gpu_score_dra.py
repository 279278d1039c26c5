"""GPUScore for Pods that get their GPUs by ResourceClaim (issue 16 item 3): the same model
preference, memory headroom, queue and packing terms, read from the devices DynamicResources'
Filter would allocate on each node (``productName`` attribute, ``memory`` capacity, as NVIDIA's GPU
DRA driver publishes them); placement is kube-scheduler's when GPUScore is disabled."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from bench.parity_lib.runner import MinChoice
from py_scheduler.framework.algorithm import Algorithm
from py_scheduler.framework.config import PluginSet, ProfileConfig, build_framework
from py_scheduler.framework.types import PodInfo
from py_scheduler.plugins import registry
from py_scheduler.plugins.gpu.accounting import clear_memo
from py_scheduler.plugins.gpu.dra import DRANodeGPUs
from py_scheduler.plugins.gpu.model import GPURequest
from py_scheduler.plugins.gpu.score import GPUScore, PreScoreState
from tests.unit.plugins.test_dynamic_resources import G, _snapshot, claim, dclass, dev, ex, node, pod, rslice, uses

Obj = dict[str, Any]

H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-40GB"


@pytest.fixture(autouse=True)
def _fresh_memo() -> None:
    clear_memo()


def gpu(name: str, product: str, memory: str, **extra: Any) -> Obj:
    """A device as NVIDIA's GPU DRA driver publishes one (qualified and plain attribute names)."""
    return dev(name, {"type": {"string": "gpu"}, f"{G}/productName": {"string": product},
                      "architecture": {"string": "Hopper" if "H100" in product else "Ampere"}}, {"memory": memory},
               **extra)


def world(annotations: dict[str, str] | None = None, held_on_a: bool = False) -> list[Obj]:
    """Nodes a (two A100 40GB) and b (two H100 80GB); a Pod with one claim for one GPU."""
    objs: list[Obj] = [
        node("a"), node("b"), dclass("gpu", [f'device.driver == "{G}"']),
        rslice("s-a", G, "pa", node="a", devices=[gpu("g0", A100, "40Gi"), gpu("g1", A100, "40Gi")]),
        rslice("s-b", G, "pb", node="b", devices=[gpu("g0", H100, "80Gi"), gpu("g1", H100, "80Gi")]),
        claim("c", [{"name": "r", "exactly": ex()}]),
    ]
    if held_on_a:
        objs.append(claim("other", [{"name": "r", "exactly": ex()}], allocation={
            "devices": {"results": [{"request": "r", "driver": G, "pool": "pa", "device": "g0"}]}}))
    p = pod("p", uses("c"))
    if annotations:
        p["metadata"]["annotations"] = annotations
    objs.append(p)
    return objs


def schedule(objs: list[Obj], disabled: bool = False) -> Any:
    cfg = ProfileConfig(scheduler_name="default-scheduler")
    if disabled:
        cfg.plugins["multiPoint"] = PluginSet(disabled=["GPUScore"])
    fw = build_framework(cfg, registry=registry)
    p = next(o for o in objs if o["kind"] == "Pod")
    return Algorithm(rng=MinChoice()).schedule(fw, _snapshot(objs), PodInfo(p), explain=True)


def test_model_preference_read_from_product_name() -> None:
    res = schedule(world({"gpu-scheduler/gpu-model": "H100,A100"}))
    assert res.selected == "b"
    sc = res.scores["GPUScore"]
    assert sc["b"] > sc["a"] > 0
    res = schedule(world({"gpu-scheduler/gpu-model": "A100,H100"}))
    assert res.selected == "a"


def test_memory_headroom_read_from_memory_capacity() -> None:
    # No model asked: (80 - 20) / 80 on b beats (40 - 20) / 40 on a.
    res = schedule(world({"gpu-scheduler/gpu-memory-gb": "20"}))
    assert res.selected == "b"
    assert res.scores["GPUScore"]["b"] > res.scores["GPUScore"]["a"]


def test_binpack_prefers_the_node_whose_gpus_are_partly_held() -> None:
    # Same headroom on both (no memory asked, M unknown terms equal): a has one GPU held by another
    # claim, so taking the other fills it (binpack); b would be half used.
    objs = world(held_on_a=True)
    objs = [o for o in objs if o.get("kind") != "ResourceSlice"] + [
        rslice("s-a", G, "pa", node="a", devices=[gpu("g0", H100, "80Gi"), gpu("g1", H100, "80Gi")]),
        rslice("s-b", G, "pb", node="b", devices=[gpu("g0", H100, "80Gi"), gpu("g1", H100, "80Gi")])]
    res = schedule(objs)
    assert res.scores["GPUScore"]["a"] > res.scores["GPUScore"]["b"]
    assert res.selected == "a"


def test_disabled_gpu_score_leaves_kube_scheduler_placement() -> None:
    # kube-scheduler scores a and b alike for this Pod (MinChoice: the first); GPUScore picks b.
    objs = world({"gpu-scheduler/gpu-model": "H100"})
    off = schedule(objs, disabled=True)
    assert "GPUScore" not in off.scores
    assert off.selected == "a"
    assert schedule(objs).selected == "b"


def test_claim_without_gpu_devices_skips_gpu_score() -> None:
    objs = [node("a"), node("b"), dclass("gpu", [f'device.driver == "{G}"']),
            rslice("s-a", G, "pa", node="a", devices=[dev("nic0", {"model": {"string": "cx7"}})]),
            rslice("s-b", G, "pb", node="b", devices=[dev("nic0", {"model": {"string": "cx7"}})]),
            claim("c", [{"name": "r", "exactly": ex()}]), pod("p", uses("c"))]
    res = schedule(objs)
    assert res.selected == "a"
    assert set(res.scores.get("GPUScore", {}).values()) <= {0}


def test_shared_device_headroom_counts_other_shares() -> None:
    g = DRANodeGPUs(products=(H100,), memory=((80 << 30, 40 << 30, 20 << 30),), total=1, used=1, new=0)
    ps = PreScoreState(GPURequest(count=0), 0, dra={"a": g})
    pl = GPUScore(packing="none")
    model, memory, queue, pack = pl.dra_parts(ps, g, 0)
    assert (model, memory, queue, pack) == (1, Fraction(1, 4), 1, None)
    # The Pod's gpu-memory-gb wins when larger than what the claim consumes; unknown capacity is 0.
    ps = PreScoreState(GPURequest(count=0, memory_bytes=30 << 30), 0, dra={"a": g})
    assert pl.dra_parts(ps, g, 0)[1] == Fraction(1, 8)
    unknown = DRANodeGPUs(products=(H100,), memory=((None, 0, 0),), total=1, used=0, new=1)
    assert pl.dra_parts(ps, unknown, 0)[1] == 0
