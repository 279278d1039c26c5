"""Parity bug: requests of a bound Pod with an in-place resize in flight.

Found by ``bench/parity --seed 1`` once the generator gave bound Pods container statuses
(scenarios 26, 27, 44, 48, 49, ... of 200: NodeResourcesFit / BalancedAllocation scores and
``Insufficient cpu`` / ``memory`` / ``example.com/foo`` differing). py-scheduler took, per
container, the larger of spec and status; upstream's ``AggregateContainerRequests`` takes the
per-resource maximum of three *Pod aggregates*: spec, allocated (``allocatedResources``, else spec)
and actuated (``resources.requests``, else allocated, else spec), uses the Pod's own
``status.allocatedResources`` / ``status.resources`` for the last two when both are set, leaves the
spec out when ``PodResizePending`` is ``Infeasible``, and max-es pod-level requests with the
pod-level status.

Upstream: ``component-helpers/resource/helpers.go`` (``PodRequests``,
``AggregateContainerRequests``, ``effectivePodLevelResources``, ``IsPodResizeInfeasible``),
``pkg/scheduler/framework/types.go`` (``CalculateResource``).
"""

from __future__ import annotations

from decimal import Decimal

from py_scheduler.framework.pod_resources import pod_requests
from tests.unit.regressions._util import Obj, ctr, node, pod, run


def cs(name: str, alloc: Obj | None = None, applied: Obj | None = None) -> Obj:
    c: Obj = {"name": name, "image": "busybox", "ready": True, "restartCount": 0, "imageID": "", "started": True}
    if alloc is not None:
        c["allocatedResources"] = alloc
    if applied is not None:
        c["resources"] = {"requests": applied}
    return c


# n1: resizes in opposite directions per container: every aggregate is 3 cpu (per-container max gave 4).
B1 = pod("b1", [ctr("c1", {"cpu": "1", "memory": "1Gi"}), ctr("c2", {"cpu": "2", "memory": "1Gi"})], node_name="n1",
         status={"phase": "Running", "containerStatuses": [cs("c1", {"cpu": "2", "memory": "1Gi"}),
                                                           cs("c2", {"cpu": "1", "memory": "1Gi"})]})
# n2: infeasible resize: the spec does not count, c2 (no status) counts nothing: 1 cpu.
B2 = pod("b2", [ctr("c1", {"cpu": "3", "memory": "2Gi"}), ctr("c2", {"cpu": "500m"})], node_name="n2",
         status={"phase": "Running",
                 "containerStatuses": [cs("c1", {"cpu": "1", "memory": "2Gi"}, {"cpu": "1", "memory": "1Gi"})],
                 "conditions": [{"type": "PodResizePending", "status": "True", "reason": "Infeasible"}]})
# n3: pod-level requests max-ed with the pod-level status: 2 cpu.
B3 = pod("b3", [ctr("c1", {"example.com/foo": "1"})], node_name="n3",
         resources={"requests": {"cpu": "1", "memory": "1Gi"}},
         status={"phase": "Running", "allocatedResources": {"cpu": "1500m", "memory": "1Gi"},
                 "resources": {"requests": {"cpu": "2", "memory": "512Mi"}}})
# n4: pod-level status aggregates replace the container statuses: max(spec 2, 2500m, 1) = 2500m.
B4 = pod("b4", [ctr("c1", {"cpu": "1"}), ctr("c2", {"cpu": "1"})], node_name="n4",
         status={"phase": "Running", "containerStatuses": [cs("c1", {"cpu": "3"})],
                 "allocatedResources": {"cpu": "2500m"}, "resources": {"requests": {"cpu": "1"}}})
OBJS = [node("n1"), node("n2"), node("n3", **{"example.com/foo": "1"}), node("n4"), B1, B2, B3, B4,
        pod("p", [ctr("c", {"cpu": "1500m", "memory": "1Gi"})])]

# Oracle (kube-scheduler v1.37.2 framework) on OBJS:
WANT = {"feasible": ["n2", "n3", "n4"], "filtered": {"n1": ["Insufficient cpu"]},
        "NodeResourcesFit": {"n2": 47, "n3": 43, "n4": 41},
        "NodeResourcesBalancedAllocation": {"n2": 68, "n3": 68, "n4": 69},
        "totals": {"n2": 415, "n3": 411, "n4": 410}}


def test_matches_upstream() -> None:
    (res,) = run(OBJS)
    assert sorted(res["feasible"]) == WANT["feasible"]
    assert res["filtered"] == WANT["filtered"]
    assert res["scores"]["NodeResourcesFit"] == WANT["NodeResourcesFit"]
    assert res["scores"]["NodeResourcesBalancedAllocation"] == WANT["NodeResourcesBalancedAllocation"]
    assert res["totals"] == WANT["totals"]


def test_effective_cpu_per_pod() -> None:
    assert [pod_requests(p)["cpu"] for p in (B1, B2, B3, B4)] == [Decimal(3), Decimal(1), Decimal(2), Decimal("2.5")]

