"""The typed memo API (framework/memo.py): values computed once per PodInfo / NodeInfo, errors
memoized, Node memos recomputed when their stamp (Node object or generation) changes."""

from __future__ import annotations

from typing import Any

import pytest

from py_scheduler.framework.errors import PodParseError
from py_scheduler.framework.memo import NodeInput, NodeMemo, PodInput, PodMemo
from py_scheduler.framework.types import NodeInfo, PodInfo

Obj = dict[str, Any]


def _pod(**spec: Any) -> PodInfo:
    return PodInfo({"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": spec})


def _node(zone: str) -> Obj:
    return {"metadata": {"name": "n", "labels": {"zone": zone}}, "status": {"allocatable": {"pods": "10"}}}


def test_pod_memo_computes_once() -> None:
    calls: list[int] = []
    memo: PodMemo[int] = PodMemo("t", PodInput.SPEC)

    def compute(p: PodInfo) -> int:
        calls.append(1)
        return len(p.spec)

    pi = _pod(a=1, b=2)
    assert memo.get(pi, compute) == 2 and memo.get(pi, compute) == 2
    assert calls == [1]
    assert memo.peek(_pod()) is None


def test_pod_memo_memoizes_declared_errors_only() -> None:
    calls: list[int] = []

    def bad(p: PodInfo) -> int:
        calls.append(1)
        raise PodParseError("spec.x", 1, "bad")

    memo: PodMemo[int] = PodMemo("t", PodInput.SPEC, (PodParseError,))
    pi = _pod()
    for _ in range(2):
        with pytest.raises(PodParseError, match=r"spec\.x"):
            memo.get(pi, bad)
    assert calls == [1] and memo.peek(pi) is None
    unmemoized: PodMemo[int] = PodMemo("u", PodInput.SPEC)
    for _ in range(2):
        with pytest.raises(PodParseError):
            unmemoized.get(pi, bad)
    assert len(calls) == 3


@pytest.mark.parametrize("inputs", [NodeInput.NODE, NodeInput.NODE_INFO])
def test_node_memo_follows_its_stamp(inputs: NodeInput) -> None:
    memo: NodeMemo[str] = NodeMemo("zone", inputs)
    ni = NodeInfo(_node("z0"))
    assert memo.get(ni, lambda n: n.labels["zone"]) == "z0"
    ni.add_pod(_pod(nodeName="n"))  # a Pod change: only the generation-stamped memo recomputes
    got = memo.get(ni, lambda n: "recomputed")
    assert got == ("z0" if inputs is NodeInput.NODE else "recomputed")
    ni.set_node(_node("z1"))  # a new Node object: both recompute
    assert memo.get(ni, lambda n: n.labels["zone"]) == "z1"
    clone = ni.clone()  # same node, same generation: the memo stays valid on the clone
    assert memo.get(clone, lambda n: "again") == "z1"
