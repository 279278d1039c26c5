"""The pod group placement algorithm in the live loop (``podGroupSchedulingPlacementAlgorithm`` of
``schedule_one_podgroup.go``), GenericWorkload and TopologyAwareWorkloadScheduling on: a real default
profile (GangScheduling, TopologyPlacementGenerator, PodGroupPodsCount), the live cache and queue, a
fake API.

- 4 x 2-GPU members, rack A with room for 3, rack B for 4: the gang lands whole in B (the trial in A
  is reverted: no NodeInfo of A changes);
- a smaller minimum (2): both racks are feasible, PodGroupPodsCount prefers B (4 members vs 3);
- both racks hold the gang whole with the same score: the tie is broken at random (the algorithm's
  RNG, upstream's ``Randomizer``), each time whole in one rack;
- no rack holds the minimum: ``0/2 placements are available``, nothing held (accounting and GPU
  indices as before);
- DRA: the losing trial's devices are not left in flight.
- the gate off: the default algorithm alone (no placement in the members' CycleState).
"""

from __future__ import annotations

import random

from py_scheduler.framework.algorithm import PLACEMENT_STATE_KEY
from py_scheduler.framework.interfaces import PodGroupInfo
from py_scheduler.framework.podgroup import schedule_pod_group
from py_scheduler.framework.types import PodInfo, Status
from py_scheduler.queue.scheduling_queue import BACKOFF_Q
from tests.unit.app import gang_bed as gb
from tests.unit.app.test_loop import Harness
from tests.unit.plugins import test_dynamic_resources as dra

RACK = "example.com/rack"
GATES = {"GenericWorkload": True, "TopologyAwareWorkloadScheduling": True}


def _harness(gates: dict[str, bool] | None = None) -> tuple[Harness, gb.Objects]:
    """The loop harness with the default profile built with the workload gates on (its Handle's)."""
    return gb.gang_harness(gates or GATES)


def _node(h: Harness, name: str, rack: str, gpus: int, cordoned: bool = False) -> None:
    h.cache.add_node({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, RACK: rack}},
                      "spec": {"unschedulable": True} if cordoned else {},
                      "status": {"allocatable": {"cpu": "32", "memory": "64Gi", "pods": "110",
                                                 "nvidia.com/gpu": str(gpus)}}})


def _group(objs: gb.Objects, name: str, min_count: int, topology: bool = True) -> None:
    gb.pod_group(objs, name, min_count, RACK if topology else "")


def _members(h: Harness, group: str, n: int, gpus: int = 2) -> list[str]:
    return gb.members(h, group, n, cpu="1", gpus=gpus)


def _racks(h: Harness, bound: dict[str, str]) -> set[str]:
    return {n[0] for n in bound.values()}


def _a3_b4(h: Harness) -> None:
    """Rack A: room for 3 two-GPU members (4 + 2 GPUs; a cordoned 2-GPU node the per-Pod estimate
    would count), listed first; rack B: room for 4 (4 + 4 GPUs)."""
    _node(h, "a1", "a", 4)
    _node(h, "a2", "a", 2)
    _node(h, "a3", "a", 2, cordoned=True)
    _node(h, "b1", "b", 4)
    _node(h, "b2", "b", 4)


async def test_the_gang_lands_whole_in_the_rack_that_holds_it() -> None:
    h, objs = _harness()
    _a3_b4(h)
    before_a = gb.accounting(h, ["a1", "a2", "a3"])
    _group(objs, "g", 4)
    names = _members(h, "g", 4)
    await h.cycle()
    bound = gb.bound(h)
    assert sorted(bound) == [f"default/{n}" for n in names]
    assert sorted(bound.values()) == ["b1", "b1", "b2", "b2"]
    assert gb.accounting(h, ["a1", "a2", "a3"]) == before_a  # the trial in A left nothing behind
    for name in ("b1", "b2"):  # distinct GPU indices per node
        ni = h.cache.node_info(name)
        assert ni is not None
        idx = [i for p in ni.pods for i in ((p.pod.get("metadata") or {}).get("annotations") or {}).get(
            "gpu-scheduler/gpu-indices", "").split(",") if i]
        assert len(idx) == 4 == len(set(idx)), idx
    assert h.queue.in_flight_uids() == []


async def test_pods_count_prefers_the_placement_holding_more_members() -> None:
    """minCount 2: A (3 members) and B (4) are both feasible; PodGroupPodsCount scores 75 and 100."""
    h, objs = _harness()
    _a3_b4(h)
    _group(objs, "g", 2)
    _members(h, "g", 4)
    await h.cycle()
    bound = gb.bound(h)
    assert len(bound) == 4 and _racks(h, bound) == {"b"}


async def test_equal_placements_are_chosen_at_random_and_whole() -> None:
    chosen = set()
    for seed in range(12):
        h, objs = _harness()
        h.loop.algorithm.rng = random.Random(seed)
        for rack in ("a", "b"):
            _node(h, f"{rack}1", rack, 4)
            _node(h, f"{rack}2", rack, 4)
        _group(objs, "g", 4)
        _members(h, "g", 4)
        await h.cycle()
        bound = gb.bound(h)
        assert len(bound) == 4
        racks = _racks(h, bound)
        assert len(racks) == 1, bound
        chosen |= racks
    assert chosen == {"a", "b"}


async def test_no_rack_holds_the_minimum_nothing_is_held() -> None:
    h, objs = _harness()
    _node(h, "a1", "a", 4)
    _node(h, "a2", "a", 2)
    _node(h, "b1", "b", 4)
    _node(h, "b2", "b", 2)
    nodes = ["a1", "a2", "b1", "b2"]
    before = gb.accounting(h, nodes)
    _group(objs, "g", 4)
    names = _members(h, "g", 4)
    await h.cycle()
    assert gb.accounting(h, nodes) == before
    assert h.cache.assumed_count() == 0 and gb.bound(h) == {}
    assert [h.queue.where("default", n) for n in names] == [BACKOFF_Q] * 4  # the group entity's backoff
    notes = sorted(e["note"] for e in h.kube.events if e["reason"] == "FailedScheduling")
    # The first placement's (A's) results: the member that did not fit there its own FitError (on the
    # placement's 2 nodes), the 3 that fit the group's status after errPodGroupUnschedulable (upstream
    # submitPodGroupAlgorithmResult: NewStatus(Unschedulable, group.Message()).WithError(err)), where the
    # group's status has PodGroupPostFilter's outcome appended (applyPodGroupPostFilterResult).
    group = ("pod group is unschedulable, 0/2 placements are available, first placement status: "
             "minCount (4) cannot be satisfied: 3 scheduled, 0 remaining, "
             "pod group preemption: No preemption victims found for incoming preemptor")
    assert notes == ["0/2 nodes are available: 2 node(s) had insufficient free GPUs."] + [
        f"pod group is unschedulable, {group}"] * 3


async def test_a_losing_dra_placement_leaves_no_device_in_flight() -> None:
    """Rack A (node a1: two devices) and rack B (node b1: three devices), 3 members with one claim
    each, minCount 3: the trial in A allocates two devices then fails; B holds the gang. Afterwards
    each claim is allocated once, in B's pool, and A's NodeInfo is as before."""
    h, objs = _harness()
    for n, rack in (("a1", "a"), ("b1", "b")):
        h.cache.add_node({"metadata": {"name": n, "labels": {"kubernetes.io/hostname": n, RACK: rack}},
                          "status": {"allocatable": {"cpu": "8", "memory": "8Gi", "pods": "110"}}})
    h.cache.objects.upsert("DeviceClass", dra.dclass("gpu", [f'device.driver == "{dra.G}"']))
    h.cache.objects.upsert("ResourceSlice", dra.rslice("sa", dra.G, "pa", node="a1",
                                                       devices=[dra.dev("g0"), dra.dev("g1")]))
    h.cache.objects.upsert("ResourceSlice", dra.rslice("sb", dra.G, "pb", node="b1",
                                                       devices=[dra.dev("g0"), dra.dev("g1"), dra.dev("g2")]))
    _group(objs, "g", 3)
    names = gb.claim_members(h, "g", 3)
    before_a = gb.accounting(h, ["a1"])
    await h.cycle()
    # Each claim in flight once (written, until the informer sees it), none left from the trial in A.
    assert h.fw.plugins["DynamicResources"].in_flight_claims() == [f"default/c-{n}" for n in names]
    assert gb.accounting(h, ["a1"]) == before_a
    assert sorted(gb.bound(h).values()) == ["b1"] * 3
    pools = {h.kube.objects[f"/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/c-{n}"]
             ["status"]["allocation"]["devices"]["results"][0]["pool"] for n in names}
    assert pools == {"pb"}


def test_gate_off_runs_the_default_algorithm_without_placement() -> None:
    """Only GenericWorkload: no placement is set on a member's CycleState (the default algorithm)."""
    h, objs = _harness({"GenericWorkload": True, "TopologyAwareWorkloadScheduling": False})
    _node(h, "a1", "a", 4)
    _group(objs, "g", 1)
    names = _members(h, "g", 1)
    h.cache.update_snapshot(h.loop.snapshot)
    group = PodGroupInfo(objs.groups["default/g"], [PodInfo(h.pods[f"default/{names[0]}"])])
    res, _reverts = schedule_pod_group(h.fw, h.loop.algorithm, h.loop.snapshot, group,
                                      lambda p, n, s: (Status.success(), None))
    assert res.status.is_success()
    state = res.members[0].state
    assert state is not None and PLACEMENT_STATE_KEY not in state.data
    h, objs = _harness()  # the profile's own gates decide, read at each group cycle
    _node(h, "a1", "a", 4)
    _group(objs, "g", 1)
    names = _members(h, "g", 1)
    h.cache.update_snapshot(h.loop.snapshot)
    group = PodGroupInfo(objs.groups["default/g"], [PodInfo(h.pods[f"default/{names[0]}"])])
    res, _reverts = schedule_pod_group(h.fw, h.loop.algorithm, h.loop.snapshot, group,
                                      lambda p, n, s: (Status.success(), None))
    state = res.members[0].state
    assert res.status.is_success() and state is not None and state.data[PLACEMENT_STATE_KEY] == {"a1"}


async def test_no_placement_generated_the_generator_is_a_rejector() -> None:
    """No node carries the rack label: TopologyPlacement generates no placement, so no member is
    evaluated; the members' rejectors name that plugin too (not only GangScheduling), so the queue
    retries them on the events that can bring a placement (a labelled Node), not only at the flush."""
    h, objs = _harness()
    h.cache.add_node({"metadata": {"name": "x1", "labels": {"kubernetes.io/hostname": "x1"}},
                      "status": {"allocatable": {"cpu": "32", "memory": "64Gi", "pods": "110",
                                                 "nvidia.com/gpu": "8"}}})
    _group(objs, "g", 2)
    names = _members(h, "g", 2)
    await h.cycle()
    assert gb.bound(h) == {}
    for n in names:
        q = h.queue.get("default", n)
        assert q is not None and h.queue.where("default", n) == BACKOFF_Q
        assert {"GangScheduling", "TopologyPlacementGenerator"} <= set(q.unschedulable_plugins)
