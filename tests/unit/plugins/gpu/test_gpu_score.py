"""GPUScore: the documented formula, the NVLink tie-break, NormalizeScore range, Skip, args."""

from __future__ import annotations

from typing import Any

import pytest

from py_scheduler.cache.snapshot import Snapshot
from py_scheduler.framework.errors import ConfigError
from py_scheduler.framework.types import MAX_NODE_SCORE, Code, CycleState, PodInfo
from py_scheduler.plugins.gpu.accounting import clear_memo
from py_scheduler.plugins.gpu.score import GPUScore
from tests.unit.plugins.gpu.gpu_objects import A100_40, a100_node, gpu_node, gpu_pod, h100_node, l4_node
from tests.unit.plugins.plain_handle import plain_handle

Obj = dict[str, Any]


@pytest.fixture(autouse=True)
def _fresh_memo() -> None:
    clear_memo()


NOPACK = GPUScore(packing="none")
"""The formula without the packing term (its own tests below)."""


def scores(nodes: list[Obj], pod: Obj, pods: list[Obj] | None = None,
           plugin: GPUScore | None = None) -> tuple[dict[str, int], dict[str, int]]:
    """(raw Score, normalized) per node."""
    pl = plugin or NOPACK
    snap = Snapshot.from_objects(nodes, pods or [])
    state = CycleState(snap)
    pi = PodInfo(pod)
    assert pl.pre_score(state, pi, snap.node_info_list).is_success()
    raw: dict[str, int] = {}
    for ni in snap.node_info_list:
        sc, s = pl.score(state, pi, ni)
        assert s.is_success()
        raw[ni.name] = sc
    norm = dict(raw)
    assert pl.normalize_score(state, pi, norm).is_success()
    assert all(0 <= v <= MAX_NODE_SCORE for v in norm.values())
    return raw, norm


def simple_node(name: str, mem_gb: str, used_gb: str, queue: str, gpus: int = 4) -> Obj:
    return gpu_node(name, gpus, labels={"gpu-scheduler/gpu-memory-gb": mem_gb, "gpu-scheduler/gpu-model": "A100"},
                    annotations={"gpu-scheduler/used-memory-gb": used_gb, "gpu-scheduler/current-queue": queue})


def test_formula_worked_example() -> None:
    # A: model 1, memory (40 - 40/4 - 20) / 40 = 0.25, queue 1 - 5/10 = 0.5 -> 40 + 8.75 + 12.5 = 61.25
    # B: model 1, memory (80 - 0 - 20) / 80 = 0.75, queue 1 - 10/10 = 0 -> 40 + 26.25 + 0 = 66.25
    nodes = [simple_node("a", "40", "40", "5"), simple_node("b", "80", "0", "10")]
    raw, norm = scores(nodes, gpu_pod("p", 1, annotations={"gpu-scheduler/gpu-memory-gb": "20"}))
    assert raw == {"a": 61250 * 1000 + 1, "b": 66250 * 1000 + 1}  # t = 1: only singleton groups
    assert norm == {"a": 99 * 61250 // 100000 + 1, "b": 99 * 66250 // 100000 + 1} == {"a": 61, "b": 66}


def test_model_preference_order() -> None:
    nodes = [h100_node("h"), a100_node("a"), l4_node("l")]
    _, norm = scores(nodes, gpu_pod("p", 1, annotations={"gpu-scheduler/gpu-model": "H100,A100"}))
    assert norm["h"] > norm["a"] > norm["l"]
    # model part: H100 40, A100 20, L4 0; memory headroom with no request is 35 on every node; queue 25
    assert norm == {"h": 100, "a": 80, "l": 60}
    # with packing (default): only the best model's nodes get the packing term, so the L4 (which the
    # 1-GPU Pod would fill) never beats the preferred H100: (40+35+25+100)/200, (20+35+25)/200, 60/200
    _, norm = scores(nodes, gpu_pod("p", 1, annotations={"gpu-scheduler/gpu-model": "H100,A100"}), plugin=GPUScore())
    assert norm == {"h": 100, "a": 40, "l": 30}


def test_memory_headroom_and_queue() -> None:
    nodes = [simple_node("busy", "80", "0", "30"), simple_node("idle", "80", "0", "0"),
             simple_node("full", "80", "240", "0")]  # 60 of 80 GB used per GPU
    _, norm = scores(nodes, gpu_pod("p", 1))
    assert norm["idle"] > norm["busy"] and norm["idle"] > norm["full"]
    assert norm["idle"] == 100
    assert norm["full"] == 99 * (100000 - 35000 * 3 // 4) // 100000 + 1


def test_unknown_memory_costs_nothing_without_a_memory_request_and_bad_nodes_score_zero() -> None:
    """Issue 17: a node with unknown GPU memory lost the whole memory term (35 of 100, 70 weighted
    points) even for Pods that ask no memory; now the term is left out for it."""
    bad = gpu_node("bad", 4, annotations={"gpu-scheduler/current-queue": "x"})
    raw, _ = scores([gpu_node("anon", 4), bad, simple_node("ok", "80", "0", "7")], gpu_pod("p", 1))
    assert raw["bad"] == 0
    assert raw["anon"] // 1000 == 100000  # (model 40 + queue 25) / 65 (bad node's queue is ignored)
    assert raw["ok"] // 1000 == 75000  # (40 + 35 + 0) / 100: queue 7 is the largest
    # a Pod asking memory: unknown memory scores no headroom (GPUFilter rejects the node anyway)
    raw, _ = scores([gpu_node("anon", 4)], gpu_pod("p", 1, annotations={"gpu-scheduler/gpu-memory-gb": "1"}))
    assert raw["anon"] // 1000 == 65000


def test_nvlink_tie_break_prefers_keeping_the_largest_free_group() -> None:
    one_group = gpu_node("one8", 8, product=A100_40, memory_mib=40960,
                         labels={"gpu-scheduler/max-nvlink-group-size": "8"})
    nodes = [one_group, a100_node("two4"),
             a100_node("half", annotations={})]
    used = [gpu_pod("x", 2, node="half", annotations={"gpu-scheduler/gpu-indices": "4,5"})]
    raw, norm = scores(nodes, gpu_pod("p", 2), used)
    assert {n: r % 1000 for n, r in raw.items()} == {"one8": 0, "two4": 4, "half": 4}
    assert len({r // 1000 for r in raw.values()}) == 1  # otherwise equal
    assert norm["two4"] == norm["half"] == norm["one8"] + 1


def test_skip_for_non_gpu_and_malformed_pods() -> None:
    pl = GPUScore()
    snap = Snapshot.from_objects([a100_node("a")])
    assert pl.pre_score(CycleState(snap), PodInfo(gpu_pod("cpu")), snap.node_info_list).is_skip()
    bad = PodInfo(gpu_pod("bad", 1, annotations={"gpu-scheduler/gpu-model": "!!"}))
    assert pl.pre_score(CycleState(snap), bad, snap.node_info_list).is_skip()
    _, s = pl.score(CycleState(snap), PodInfo(gpu_pod("p", 1)), snap.get("a"))
    assert s.code == Code.ERROR  # Score without PreScore state, as upstream


def test_weights_from_args() -> None:
    nodes = [simple_node("short", "80", "0", "1"), simple_node("long", "80", "0", "4")]
    pl = GPUScore.create({"modelWeight": 0, "memoryWeight": 0, "queueWeight": 7, "packing": "none"}, plain_handle())
    _, norm = scores(nodes, gpu_pod("p", 1), plugin=pl)
    assert norm == {"short": 99 * 75000 // 100000 + 1, "long": 0 + 1}


@pytest.mark.parametrize(("args", "field"), [
    ({"modelWeight": -1}, "modelWeight"),
    ({"memoryWeight": "35"}, "memoryWeight"),
    ({"queueWeight": True}, "queueWeight"),
    ({"modelWeight": 0, "memoryWeight": 0, "queueWeight": 0}, "modelWeight, memoryWeight, queueWeight"),
    ({"prefix": ""}, "prefix"),
    ({"weights": 1}, "weights"),
    ({"packing": "tight"}, "packing"),
    ({"packingWeight": -3}, "packingWeight"),
])
def test_bad_args_name_the_field(args: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as ei:
        GPUScore.create(args, plain_handle())
    assert str(ei.value).startswith(f"{field}: ")


def test_defaults() -> None:
    pl = GPUScore.create({"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "GPUScoreArgs"}, plain_handle())
    assert pl.weights == (40, 35, 25)


def test_binpack_prefers_the_fullest_node_and_spread_the_emptiest() -> None:
    """Issue 17 (fragmentation): GPU Pods used to spread by CPU/memory, leaving one free GPU per node."""
    nodes = [a100_node("empty"), a100_node("six"), a100_node("three")]
    used = [gpu_pod("s", 6, node="six", annotations={"gpu-scheduler/gpu-indices": "0-5"}),
            gpu_pod("t", 3, node="three", annotations={"gpu-scheduler/gpu-indices": "0-2"})]
    _, norm = scores(nodes, gpu_pod("p", 2), used, plugin=GPUScore())
    assert norm["six"] > norm["three"] > norm["empty"]
    # pack fractions (6+2)/8, (3+2)/8, 2/8 normalized to 1, 1/2, 0 -> weighted 100, 50, 0 of 200
    assert norm["six"] - norm["empty"] == 50
    _, norm = scores(nodes, gpu_pod("p", 2), used, plugin=GPUScore.create({"packing": "spread"}, plain_handle()))
    assert norm["empty"] > norm["three"] > norm["six"]
    assert GPUScore().packing == "binpack" and GPUScore().packing_weight == 100
