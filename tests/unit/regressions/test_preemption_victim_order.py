"""Parity bug: preemption chose other victims than upstream among equally important Pods.

Found by ``bench/parity --seed 5`` (scenarios 279 and 283 of 400, once bound Pods shared start
times): ``SelectVictimsOnNode`` sorts the node's lower-priority Pods with Go's ``sort.Slice`` (most
important first) and reprieves them in that order. ``sort.Slice`` is not stable: for more than 12
Pods, Pods of equal priority and start time end up in pdqsort's order, not in node order as
py-scheduler's stable sort left them, so different Pods were reprieved and evicted. py-scheduler
now sorts with a port of Go's algorithm (``py_scheduler.framework.gosort.sort_slice``).

Upstream: ``framework/plugins/defaultpreemption/default_preemption.go`` (``SelectVictimsOnNode``),
``framework/preemption/util.go`` (``MoreImportantVictim``), Go ``src/sort/zsortfunc.go``.
"""

from __future__ import annotations

from py_scheduler.framework.gosort import sort_slice
from tests.unit.regressions._util import ctr, node, pod, run

T = "2025-06-01T00:00:00Z"
CPUS = ["1000m", "900m", "300m", "600m", "1000m", "800m", "1000m", "200m", "1000m", "100m", "800m", "500m", "900m",
        "400m"]
PRIOS = [0, 10, 0, 10, 10, 0, 0, 10, 0, 0, 10, 0, 10, 0]
OBJS = [node("n1", cpu="10"),
        *(pod(f"v{i:02d}", [ctr("c", {"cpu": c})], node_name="n1", status={"phase": "Running", "startTime": T},
              priority=p) for i, (c, p) in enumerate(zip(CPUS, PRIOS, strict=True))),
        pod("p", [ctr("c", {"cpu": "2"})], priority=100)]

# Oracle (kube-scheduler v1.37.2 framework) on OBJS (a stable sort evicts v08 and v11 instead):
WANT_VICTIMS = ["default/v02", "default/v05", "default/v13"]
WANT_MESSAGE = ("0/1 nodes are available: 1 Insufficient cpu. preemption: found a potential placement for pod on "
                "node n1, preempting 3 victims")


def test_victims_match_upstream() -> None:
    (res,) = run(OBJS)
    assert res["nominated"] == "n1"
    assert res["victims"] == WANT_VICTIMS
    assert res["message"] == WANT_MESSAGE


def test_sort_slice_reproduces_go() -> None:
    # Permutations printed by Go 1.26's sort.Slice on the same inputs.
    keys = [i % 2 for i in range(14)]
    idx = list(range(14))
    sort_slice(idx, lambda a, b: keys[a] > keys[b])
    assert idx == [9, 1, 13, 3, 7, 5, 11, 12, 6, 0, 10, 8, 4, 2]
    keys2 = [3, 1, 2] * 20
    idx2 = list(range(60))
    sort_slice(idx2, lambda a, b: keys2[a] < keys2[b])
    assert idx2 == [22, 1, 58, 55, 4, 52, 49, 7, 46, 43, 10, 40, 37, 13, 34, 31, 16, 28, 25, 19, 29, 11, 20, 23, 59,
                    2, 26, 56, 17, 53, 5, 50, 32, 47, 14, 35, 8, 44, 38, 41, 39, 6, 42, 9, 12, 45, 36, 33, 48, 21, 15,
                    51, 30, 0, 54, 3, 27, 57, 18, 24]
