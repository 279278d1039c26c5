"""GPUFilter's verdicts and GPUScore's raw scores memoized on the derived node state (issue 9), and
their batch forms ``filter_nodes`` / ``score_nodes``, equal a fresh node-by-node computation (memo
cleared) while the cluster changes: GPU Pods bound / removed (with and without index annotations),
nodes relabelled (product, memory, count, NVLink groups, malformed values), for a mix of requests."""

from __future__ import annotations

import random
from typing import Any

from py_scheduler.cache.snapshot import Snapshot
from py_scheduler.framework.types import CycleState, NodeInfo, PodInfo, Status
from py_scheduler.plugins.gpu.accounting import clear_memo
from py_scheduler.plugins.gpu.filter import GPUFilter
from py_scheduler.plugins.gpu.score import GPUScore
from tests.unit.plugins.gpu.gpu_objects import A100_40, A100_80, H100_80, gpu_node, gpu_pod

Obj = dict[str, Any]
P = "gpu-scheduler/"


def _random_node(rng: random.Random, name: str) -> Obj:
    gpus = rng.choice([1, 2, 4, 8, 8])
    product = rng.choice([A100_40, A100_80, H100_80, None])
    ann: dict[str, str] = {}
    if rng.random() < 0.5 and gpus == 8:
        ann[P + "nvlink-groups"] = rng.choice(["0-3;4-7", "0-1;2-3;4-5;6-7", "0-7"])
    if rng.random() < 0.3:
        ann[P + "current-queue"] = str(rng.randrange(5))
    if rng.random() < 0.2:
        ann[P + "used-memory-gb"] = str(rng.randrange(40))
    if rng.random() < 0.05:
        ann[P + "nvlink-groups"] = "0-x"  # malformed: the node is rejected / scores 0
    return gpu_node(name, gpus, product=product, memory_mib=rng.choice([40960, 81920, None]), annotations=ann)


def _random_request(rng: random.Random, i: int) -> PodInfo:
    ann: dict[str, str] = {}
    if rng.random() < 0.4:
        ann[P + "gpu-model"] = rng.choice(["A100", "H100,A100", "A100-80GB"])
    if rng.random() < 0.3:
        ann[P + "gpu-memory-gb"] = rng.choice(["20", "60"])
    if rng.random() < 0.3:
        ann[P + "nvlink"] = "required"
    return PodInfo(gpu_pod(f"in-{i}", rng.choice([1, 2, 3, 4, 8]), annotations=ann))


def _run(pod: PodInfo, nodes: list[NodeInfo], snap: Snapshot) -> tuple[list[Any], list[Any], list[int], list[int]]:
    """(filter_nodes keys, filter keys, score_nodes, score) for ``nodes``."""
    f, s = GPUFilter(), GPUScore()
    state = CycleState(snap)
    _, st = f.pre_filter(state, pod, nodes)
    assert st.is_success(), st.reasons
    assert s.pre_score(state, pod, nodes).is_success()

    def key(x: Status) -> tuple[int, tuple[str, ...], str]:
        return int(x.code), tuple(x.reasons), x.plugin

    got = f.filter_nodes(state, pod, nodes)
    batch = [key(Status.success())] * len(nodes) if got is None else [key(x) for x in got]
    one = [key(f.filter(state, pod, ni)) for ni in nodes]
    scores, sst = s.score_nodes(state, pod, nodes)
    assert sst.is_success()
    singles = []
    for ni in nodes:
        sc, sst = s.score(state, pod, ni)
        assert sst.is_success()
        singles.append(sc)
    return batch, one, scores, singles


def test_memoized_verdicts_and_scores_follow_cluster_changes() -> None:
    rng = random.Random(11)
    clear_memo()
    names = [f"g{i}" for i in range(24)]
    snap = Snapshot.from_objects([_random_node(rng, n) for n in names])
    rejected = 0
    for step in range(120):
        ni = rng.choice(snap.node_info_list)
        action = rng.randrange(4)
        if action == 0:
            ann = {P + "gpu-indices": str(rng.randrange(8))} if rng.random() < 0.5 else {}
            ni.add_pod(PodInfo(gpu_pod(f"b{step}", rng.choice([1, 2]), node=ni.name, annotations=ann)))
        elif action == 1 and ni.pods:
            ni.remove_pod(rng.choice(ni.pods).uid)
        elif action == 2:
            ni.set_node(_random_node(rng, ni.name))
        for i in range(3):
            pod = _random_request(rng, step * 10 + i)
            nodes = snap.node_info_list
            warm = _run(pod, nodes, snap)  # memo warm (states and verdicts from earlier steps)
            clear_memo()
            fresh = _run(pod, nodes, snap)  # every state and verdict computed anew
            assert warm == fresh, (step, i)
            assert warm[0] == warm[1] and warm[2] == warm[3]
            rejected += sum(1 for k in warm[0] if k[0])
    assert rejected > 0  # the requests and nodes above do get rejected somewhere


def test_derived_states_keep_only_the_newest_generations_of_a_node() -> None:
    """A node whose Pods change keeps at most MEMO_GENERATIONS_PER_NODE derived states (the soak saw
    a small cluster fill the 8192-entry LRU with stale generations), and the newest is still a hit."""
    from py_scheduler.plugins.gpu import accounting as acc
    from py_scheduler.plugins.gpu.inventory import GPUKeys

    clear_memo()
    keys = GPUKeys()
    ni = NodeInfo(gpu_node("n1", 8, product=A100_80))
    other = NodeInfo(gpu_node("n2", 8, product=A100_80))
    acc.derive_state(other, keys)
    for i in range(50):
        ni.add_pod(PodInfo(gpu_pod(f"p{i}", 1, annotations={P + "gpu-indices": str(i % 8)})))
        st = acc.derive_state(ni, keys)
        assert acc.derive_state(ni, keys) is st  # the current generation is memoized
    n1 = [k for k in acc._memo if k[1] == "n1"]
    assert len(n1) == acc.MEMO_GENERATIONS_PER_NODE
    assert (keys, "n2", other.generation) in acc._memo  # other nodes' states are left alone
    clear_memo()
