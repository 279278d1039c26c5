"""The optional batch forms ``filter_nodes`` / ``score_nodes`` give exactly what ``filter`` / ``score``
give node by node (same statuses, same scores, same order), on the parity generator's random
clusters (taints, extended resources, images, overhead, sidecars...) plus GPU, negative-quantity and
cordoned-node cases. The runtime relies on this equivalence (scheduler/framework/runtime.py)."""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

import pytest

from scheduler.cache.snapshot import Snapshot
from scheduler.framework.config import ProfileConfig, build_framework
from scheduler.framework.runtime import Framework
from scheduler.framework.types import CycleState, NodeInfo, PodInfo, Status

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

from bench.bench_lib import workloads  # noqa: E402
from bench.parity_lib.generator import scenario  # noqa: E402

Obj = dict[str, Any]


def _key(st: Status) -> tuple[int, tuple[str, ...], str]:
    return int(st.code), tuple(st.reasons), st.plugin


def _check(fw: Framework, snap: Snapshot, pod: PodInfo) -> int:
    """Compare batch and node-by-node forms for every plugin of ``fw``; returns comparisons made."""
    nodes: list[NodeInfo] = list(snap.node_info_list)
    state = CycleState(snap)
    for pl in fw.pre_filter_plugins:
        _, s = pl.pre_filter(state, pod, nodes)
        if s.is_skip():
            state.skip_filter.add(pl.name)
    n = 0
    for pl in fw.filter_plugins:
        batch = getattr(pl, "filter_nodes", None)
        if batch is None or pl.name in state.skip_filter:
            continue
        one = [_key(pl.filter(state, pod, ni)) for ni in nodes]
        got = batch(state, pod, nodes)
        many = [_key(Status.success())] * len(nodes) if got is None else [_key(s) for s in got]
        assert [k[:2] for k in many] == [k[:2] for k in one], pl.name
        n += 1
    for pl in fw.pre_score_plugins:
        if pl.pre_score(state, pod, nodes).is_skip():
            state.skip_score.add(pl.name)
    for pl in fw.score_plugins:
        batch = getattr(pl, "score_nodes", None)
        if batch is None or pl.name in state.skip_score:
            continue
        one = [pl.score(state, pod, ni) for ni in nodes]
        values, st = batch(state, pod, nodes)
        if any(not s.is_success() for _, s in one):
            assert not st.is_success(), pl.name
            continue
        assert st.is_success(), pl.name
        assert values == [sc for sc, _ in one], pl.name
        n += 1
    return n


def _cluster(objects: list[Obj]) -> tuple[Snapshot, list[PodInfo]]:
    pods = [o for o in objects if o["kind"] == "Pod"]
    snap = Snapshot.from_object_list(objects)
    pending = [PodInfo(p) for p in pods if not p["spec"].get("nodeName")]
    return snap, pending


@pytest.mark.parametrize("seed", [3, 11])
def test_batch_equals_node_by_node_on_random_clusters(seed: int) -> None:
    fw = build_framework(ProfileConfig(scheduler_name="default-scheduler"))
    compared = 0
    for index in range(40):
        snap, pending = _cluster(scenario(seed, index))
        for pod in pending:
            compared += _check(fw, snap, pod)
    assert compared > 200


def test_batch_equals_node_by_node_gpu_negative_and_cordoned() -> None:
    rng = random.Random(5)
    nodes = workloads.make_nodes(40)
    nodes[3]["spec"]["unschedulable"] = True
    nodes[4]["spec"]["taints"] = [{"key": "k", "value": "v", "effect": "PreferNoSchedule"}]
    nodes[5]["spec"]["taints"] = [{"key": "k", "effect": "NoSchedule"}]
    nodes[6]["status"]["allocatable"]["cpu"] = "0"
    nodes[7]["status"]["allocatable"]["memory"] = "-1Gi"
    nodes[8]["status"]["allocatable"]["pods"] = "0"
    bound = list(workloads.init_pods(workloads.get_workload("GPU"), 40, 30))
    snap = Snapshot.from_objects(nodes, bound)
    fw = build_framework(ProfileConfig())
    compared = 0
    for i in range(12):
        wl = rng.choice(list(workloads.WORKLOADS.values()))
        raw = wl.pod(1000 + i, "ns", "py-scheduler", f"u{i}")
        if i % 4 == 1:
            raw["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "40"
        if i % 4 == 2:  # huge (a negative request is refused by PodInfo, as by the API server)
            raw["spec"]["containers"][0]["resources"]["requests"]["memory"] = "8Ei"
        compared += _check(fw, snap, PodInfo(raw))
    assert compared > 30


@pytest.mark.parametrize("strategy", ["LeastAllocated", "MostAllocated"])
def test_vectorized_resource_scores_equal_node_by_node(strategy: str) -> None:
    """Enough nodes for the numpy path of the resource scorers: random allocatable / used amounts
    (zero cpu or memory on some nodes, over-committed ones), against ``score`` node by node."""
    rng = random.Random(17)
    nodes = workloads.make_nodes(300)
    for i, n in enumerate(nodes):
        alloc = n["status"]["allocatable"]
        alloc["cpu"] = "0" if i % 37 == 0 else f"{rng.randint(1, 64000)}m"
        alloc["memory"] = "0" if i % 41 == 0 else str(rng.randint(1, 2**38))
    bound = []
    for i in range(900):
        p = workloads.get_workload("SchedulingBasic").pod(i, "ns", "py-scheduler", f"b{i}")
        req = p["spec"]["containers"][0]["resources"]["requests"]
        req["cpu"] = f"{rng.randint(0, 9000)}m"
        req["memory"] = str(rng.randint(0, 2**36))
        if i % 5 == 0:
            del req["cpu"]
        p["spec"]["nodeName"] = workloads.node_name(rng.randrange(300))
        bound.append(p)
    snap = Snapshot.from_objects(nodes, bound)
    args = {"scoringStrategy": {"type": strategy, "resources": [{"name": "cpu", "weight": 3},
                                                                 {"name": "memory", "weight": 1}]}}
    fw = build_framework(ProfileConfig(plugin_config={"NodeResourcesFit": args}))
    compared = 0
    for i in range(8):
        raw = workloads.get_workload("SchedulingBasic").pod(5000 + i, "ns", "py-scheduler", f"u{i}")
        raw["spec"]["containers"][0]["resources"]["requests"] = {"cpu": f"{rng.randint(0, 4000)}m",
                                                                  "memory": str(rng.randint(0, 2**33))}
        compared += _check(fw, snap, PodInfo(raw))
    assert compared >= 16
