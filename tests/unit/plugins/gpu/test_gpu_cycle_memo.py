"""GPUScore's per-cycle reuse of PreScore's node states (``PreScoreState.states``), its packing
fraction memoized in the derived node state (``pack_part``), and GPUFilter's request tokens
(``filter._token``: the verdict memo keyed by a small int per request) equal the plain form: on
random clusters changing between cycles, for random requests and both packing modes, the batch
forms with warm memos give what a fresh computation gives (every memo and token forgotten) and
what the node-by-node forms give, also when the token table is forgotten between cycles."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from py_scheduler.cache.snapshot import Snapshot
from py_scheduler.framework.types import CycleState, NodeInfo, PodInfo, Status
from py_scheduler.plugins.gpu import filter as gpu_filter
from py_scheduler.plugins.gpu.accounting import clear_memo
from py_scheduler.plugins.gpu.filter import GPUFilter
from py_scheduler.plugins.gpu.score import GPUScore
from tests.unit.plugins.gpu.gpu_objects import gpu_pod
from tests.unit.plugins.gpu.test_gpu_memo import P, _random_node, _random_request


def _run(pod: PodInfo, nodes: list[NodeInfo], snap: Snapshot, packing: str) -> tuple[Any, ...]:
    f, s = GPUFilter(), GPUScore(packing=packing)
    state = CycleState(snap)
    _, st_ = f.pre_filter(state, pod, nodes)
    assert st_.is_success(), st_.reasons
    assert s.pre_score(state, pod, nodes).is_success()

    def key(x: Status) -> tuple[int, tuple[str, ...], str]:
        return int(x.code), tuple(x.reasons), x.plugin

    got = f.filter_nodes(state, pod, nodes)
    batch = [key(Status.success())] * len(nodes) if got is None else [key(x) for x in got]
    one = [key(f.filter(state, pod, ni)) for ni in nodes]
    scores, sst = s.score_nodes(state, pod, nodes)
    assert sst.is_success()
    singles = [s.score(state, pod, ni)[0] for ni in nodes]
    ps = state.data["PreScoreGPUScore"]
    return batch, one, scores, singles, ps.best_model, ps.pack_range, ps.max_queue


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32), st.sampled_from(["binpack", "spread", "none"]), st.booleans())
def test_cycle_memos_equal_a_fresh_computation(seed: int, packing: str, forget_tokens: bool) -> None:
    rng = random.Random(seed)
    clear_memo()
    names = [f"g{i}" for i in range(10)]
    snap = Snapshot.from_objects([_random_node(rng, n) for n in names])
    for step in range(12):
        ni = rng.choice(snap.node_info_list)
        action = rng.randrange(4)
        if action == 0:
            ann = {P + "gpu-indices": str(rng.randrange(8))} if rng.random() < 0.5 else {}
            ni.add_pod(PodInfo(gpu_pod(f"b{step}", rng.choice([1, 2]), node=ni.name, annotations=ann)))
        elif action == 1 and ni.pods:
            ni.remove_pod(rng.choice(ni.pods).uid)
        elif action == 2:
            ni.set_node(_random_node(rng, ni.name))
        if forget_tokens:
            gpu_filter._TOKENS.clear()
        pod = _random_request(rng, step)
        nodes = snap.node_info_list
        warm = _run(pod, nodes, snap, packing)
        clear_memo()
        gpu_filter._TOKENS.clear()
        fresh = _run(pod, nodes, snap, packing)
        assert warm == fresh, step
        assert warm[0] == warm[1] and warm[2] == warm[3]


def test_a_token_is_never_reused_for_another_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu_filter, "_TOKENS_MAX", 2)
    rng = random.Random(3)
    reqs = [gpu_filter.parse_request(_random_request(rng, i), GPUFilter().keys) for i in range(12)]
    seen: dict[int, Any] = {}
    for req in reqs * 2:
        tok = gpu_filter._token(req)
        assert seen.setdefault(tok, req) == req


@given(st.text(max_size=6), st.text(max_size=6), st.text(max_size=6), st.text(max_size=6))
def test_gpu_keys_hash_once_and_compare_by_fields(p1: str, r1: str, p2: str, r2: str) -> None:
    """GPUKeys' stored hash agrees with its equality (equal keys, equal hashes), as the plain
    dataclass hash would; keys_from_args gives one object per configuration."""
    from py_scheduler.plugins.gpu.common import keys_from_args
    from py_scheduler.plugins.gpu.model import GPUKeys

    a, b = GPUKeys(p1, r1), GPUKeys(p2, r2)
    assert (a == b) == ((p1, r1) == (p2, r2))
    if a == b:
        assert hash(a) == hash(b)
    assert hash(a) == hash(GPUKeys(p1, r1)) and {a: 1}[GPUKeys(p1, r1)] == 1
    assert keys_from_args({"prefix": "x.io/"}) is keys_from_args({"prefix": "x.io/"})
