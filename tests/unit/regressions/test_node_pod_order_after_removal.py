"""Parity bug: a NodeInfo's Pod order after a removal differed from upstream's.

Found by ``bench/parity --seed 8`` (scenario 475 of 1000: a second preemption on a node where a
first one had evicted 16 Pods chose other victims). Upstream's ``NodeInfo.RemovePod``
(``removeFromSlice``) moves the last Pod into the removed one's slot; py-scheduler deleted in
place, keeping the order. The order is observable: preemption sorts the node's Pods with Go's
unstable ``sort.Slice``, so equally important Pods (same priority and start time) are reprieved in
an order that depends on it.

Upstream: ``pkg/scheduler/framework/types.go`` (``removeFromSlice``, ``NodeInfo.RemovePod``),
``framework/plugins/defaultpreemption/default_preemption.go`` (``SelectVictimsOnNode``).
"""

from __future__ import annotations

from py_scheduler.framework.types import NodeInfo, PodInfo
from tests.unit.regressions._util import ctr, node, pod, run

T = "2025-06-01T00:00:00Z"
VICTIMS = [("200m", 0), ("900m", 0), ("300m", 0), ("300m", 0), ("700m", 0), ("200m", 5), ("600m", 0), ("600m", 5),
           ("800m", 5), ("800m", 0), ("200m", 0), ("800m", 5), ("200m", 0), ("500m", 5), ("800m", 0), ("700m", 5),
           ("600m", 0)]
# p1 preempts 9 Pods on n1 (they leave the snapshot), then p2 preempts again among the rest.
OBJS = [node("n1", cpu="10"),
        *(pod(f"v{i:02d}", [ctr("c", {"cpu": c})], node_name="n1", status={"phase": "Running", "startTime": T},
              priority=p) for i, (c, p) in enumerate(VICTIMS)),
        pod("p1", [ctr("c", {"cpu": "5"})], priority=10, ts="2026-01-01T00:00:00Z"),
        pod("p2", [ctr("c", {"cpu": "4"})], priority=10, ts="2026-01-01T00:00:01Z")]

# Oracle (kube-scheduler v1.37.2 framework) on OBJS; keeping the order evicts v08 instead of v07 for p2.
WANT = [["default/v00", "default/v01", "default/v02", "default/v03", "default/v09", "default/v10", "default/v12",
         "default/v14", "default/v16"],
        ["default/v04", "default/v06", "default/v07", "default/v11", "default/v13", "default/v15"]]


def test_second_preemption_matches_upstream() -> None:
    res = run(OBJS)
    assert [r["nominated"] for r in res] == ["n1", "n1"]
    assert [r["victims"] for r in res] == WANT


def test_remove_pod_moves_the_last_pod_into_the_gap() -> None:
    ni = NodeInfo(node("n1"))
    for name in "abcde":
        ni.add_pod(PodInfo(pod(name, node_name="n1")))
    ni.remove_pod("uid-b")
    assert [p.name for p in ni.pods] == ["a", "e", "c", "d"]
    ni.remove_pod("uid-d")
    assert [p.name for p in ni.pods] == ["a", "e", "c"]
