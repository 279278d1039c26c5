"""The pod group scheduling cycle in the live loop (``schedule_one_podgroup.go``), GenericWorkload on:
a real default profile with GangScheduling, the live cache and queue, a fake API.

- a gang that fits: one pop schedules every member (all bound, GPU indices distinct per node);
- a gang that does not fit: nothing assumed nor reserved afterwards (each NodeInfo's accounting and
  the GPU indices exactly as before), every member back in the unschedulable Pods with the same
  rejectors, FailedScheduling with upstream's messages, PodGroup condition False/Unschedulable;
  then a Node with one more GPU moves all of them and the next pop places the whole gang;
- too few members queued (minCount not reachable): PlacementFeasible refuses before any Filter.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from py_scheduler.app.scheduling import loop as loop_module
from py_scheduler.app.telemetry.metrics import REGISTRY
from py_scheduler.cache.cache import CacheError
from py_scheduler.framework.events import ActionType, ClusterEvent, Resource
from py_scheduler.framework.podgroup import RevertFns
from py_scheduler.queue.scheduling_queue import BACKOFF_Q, UNSCHEDULABLE_Q
from tests.unit.app import gang_bed as gb
from tests.unit.app.test_loop import Harness
from tests.unit.plugins import test_dynamic_resources as dra


def _harness() -> tuple[Harness, gb.Objects]:
    """The loop harness with a default profile built with GenericWorkload on and an ObjectLister."""
    h, objs = gb.gang_harness({"GenericWorkload": True})
    assert "GangScheduling" in h.fw.plugins
    return h, objs


def _gpu_node(h: Harness, name: str, gpus: int) -> dict[str, Any]:
    node = {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"allocatable": {"cpu": "8", "memory": "8Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}}}
    h.cache.add_node(node)
    return node


def _members(h: Harness, group: str, n: int) -> list[str]:
    return gb.members(h, group, n, cpu="100m", gpus=1)


def _accounting(h: Harness) -> dict[str, Any]:
    return gb.accounting(h, ("n1", "n2", "n3"))


def _attempts(result: str) -> float:
    return REGISTRY.get_sample_value("scheduler_podgroup_schedule_attempts_total",
                                     {"result": result, "profile": "py-scheduler"}) or 0.0


async def test_a_gang_that_fits_is_placed_in_one_cycle() -> None:
    scheduled = _attempts("scheduled")
    h, objs = _harness()
    _gpu_node(h, "n1", 2)
    _gpu_node(h, "n2", 2)
    gb.pod_group(objs, "g", 4)
    names = _members(h, "g", 4)
    await h.cycle()  # one pop
    assert h.queue.lengths() == {k: 0 for k in h.queue.lengths()}
    bound = gb.bound(h)
    assert sorted(bound) == [f"default/{n}" for n in names]
    assert sorted(bound.values()) == ["n1", "n1", "n2", "n2"]
    assert h.queue.in_flight_uids() == []
    assert _attempts("scheduled") == scheduled + 1  # one pod group attempt


async def test_a_gang_that_does_not_fit_holds_nothing_and_is_requeued_together() -> None:
    h, objs = _harness()
    _gpu_node(h, "n1", 2)
    _gpu_node(h, "n2", 1)
    other = h.pod("plain", cpu="1")  # an unrelated Pod already assumed: its accounting must stay
    await h.cycle()
    assert h.cache.is_assumed_pod(other)
    before = _accounting(h)
    gb.pod_group(objs, "g", 4)
    names = _members(h, "g", 4)
    unschedulable = _attempts("unschedulable")
    await h.cycle()
    assert _attempts("unschedulable") == unschedulable + 1
    assert _accounting(h) == before  # no member assumed, no GPU index, no resource held
    assert h.cache.assumed_count() == 1
    assert not any(f"default/{n}" in gb.bound(h) for n in names)
    # requeued as upstream requeues the group entity: after its backoff, whatever the events
    assert [h.queue.where("default", n) for n in names] == [BACKOFF_Q] * 4
    rejectors = {h.queue.get("default", n).rejector_plugins() for n in names}  # type: ignore[union-attr]
    assert len(rejectors) == 1 and next(iter(rejectors)) == {"GangScheduling", "GPUFilter"}
    notes = sorted(e["note"] for e in h.kube.events if e["reason"] == "FailedScheduling")
    assert len(notes) == 4
    # the members that fit carry the group's status with PodGroupPostFilter's outcome appended (as upstream)
    assert notes.count("pod group is unschedulable, minCount (4) cannot be satisfied: 3 scheduled, 0 remaining, "
                       "pod group preemption: No preemption victims found for incoming preemptor") == 3
    assert sum(n.startswith("0/2 nodes are available:") for n in notes) == 1, notes
    assert h.queue.in_flight_uids() == []
    # One more GPU: the Node event moves every member; one pop places the whole gang.
    n3 = _gpu_node(h, "n3", 1)  # the event carries the Node as the informer does (GPUFilter's hint reads it)
    h.queue.move_all_to_active_or_backoff(ClusterEvent(Resource.NODE, ActionType.ADD), None, n3)
    h.queue.flush_backoff_q_completed()
    for q in list(h.queue._backoff_q.list()):  # backoff expiry without waiting (test clock)
        q.backoff_expiration = 0.0
    h.queue.flush_backoff_q_completed()
    qpi = h.queue.pop_nowait()
    assert qpi is not None
    h.loop.schedule_one(qpi)
    await h.loop.drain()
    bound = gb.bound(h)
    assert sorted(k for k in bound if k != "default/plain") == [f"default/{n}" for n in names]
    indices: dict[str, list[str]] = {}
    for c in h.kube.calls:
        if c[0] == "bind" and c[1][0] != "default/plain":
            pod = h.cache.node_info(c[1][1])
            assert pod is not None
    for name in ("n1", "n2", "n3"):
        ni = h.cache.node_info(name)
        assert ni is not None
        for p in ni.pods:
            raw = ((p.pod.get("metadata") or {}).get("annotations") or {}).get("gpu-scheduler/gpu-indices")
            if raw:
                indices.setdefault(name, []).extend(raw.split(","))
    assert all(len(v) == len(set(v)) for v in indices.values()), indices


async def test_too_few_members_are_refused_before_any_filter() -> None:
    h, objs = _harness()
    _gpu_node(h, "n1", 4)
    gb.pod_group(objs, "g", 3)
    names = _members(h, "g", 3)
    h.queue.delete(h.pods[f"default/{names[2]}"])  # still listed (PreEnqueue passes), not queued
    await h.cycle()
    assert h.cache.assumed_count() == 0
    notes = [e["note"] for e in h.kube.events if e["reason"] == "FailedScheduling"]
    assert notes == ["pod group is unschedulable, minCount (3) cannot be satisfied: 0 scheduled, 2 remaining"] * 2
    assert {h.queue.get("default", n).rejector_plugins() for n in names[:2]} == {  # type: ignore[union-attr]
        frozenset({"GangScheduling"})}


def test_revert_fns_run_newest_first_once_and_survive_a_failure() -> None:
    seen: list[int] = []
    r = RevertFns()
    r.append(lambda: seen.append(1))

    def boom() -> None:
        raise RuntimeError("x")

    r.append(boom)
    r.append(lambda: seen.append(3))
    r.revert()
    r.revert()
    assert seen == [3, 1] and len(r) == 0


async def test_a_dra_gang_that_does_not_fit_leaves_no_device_in_flight() -> None:
    """Three members, each with its own ResourceClaim for one device, minCount 3, two devices: the
    first two allocate devices in the trial, the third fits nowhere; after the revert no claim is in
    flight (no device held) and nothing is assumed. With a third device the gang places whole, each
    claim on its own device."""
    h, objs = _harness()
    h.node("n1")
    h.cache.objects.upsert("DeviceClass", dra.dclass("gpu", [f'device.driver == "{dra.G}"']))
    h.cache.objects.upsert("ResourceSlice", dra.rslice("s1", dra.G, "p1", node="n1",
                                                       devices=[dra.dev("g0"), dra.dev("g1")]))
    gb.pod_group(objs, "g", 3)
    names = gb.claim_members(h, "g", 3)
    before = _accounting(h)
    plugin = h.fw.plugins["DynamicResources"]
    await h.cycle()
    assert plugin.in_flight_claims() == []
    assert h.cache.assumed_count() == 0 and _accounting(h) == before
    assert [h.queue.where("default", n) for n in names] == [BACKOFF_Q] * 3
    assert not [c for c in h.kube.calls if c[0] in ("put", "bind")]  # nothing written to the API
    # A third device: the whole gang is placed, each claim on its own device.
    h.cache.objects.upsert("ResourceSlice", dra.rslice("s1", dra.G, "p1", node="n1",
                                                       devices=[dra.dev("g0"), dra.dev("g1"), dra.dev("g2")]))
    for n in names:
        h.queue.activate([h.pods[f"default/{n}"]])
    await h.cycle()
    assert sorted(c[1][0] for c in h.kube.calls if c[0] == "bind") == [f"default/{n}" for n in names]
    devices = sorted(h.kube.objects[f"/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/c-{n}"]
                     ["status"]["allocation"]["devices"]["results"][0]["device"] for n in names)
    assert devices == ["g0", "g1", "g2"]


def _gang_of_four_on_four_gpus() -> tuple[Harness, list[str], dict[str, Any]]:
    """Two 2-GPU Nodes and a queued minCount-4 gang of one-GPU members: (harness, members, the
    Nodes' accounting before the cycle)."""
    h, objs = _harness()
    _gpu_node(h, "n1", 2)
    _gpu_node(h, "n2", 2)
    before = _accounting(h)
    gb.pod_group(objs, "g", 4)
    return h, _members(h, "g", 4), before


def _raising_at(call: int, real: Callable[..., Any], exc: Exception) -> Callable[..., Any]:
    """``real``, except that its ``call``-th call (from 1) raises ``exc``."""
    calls = 0

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == call:
            raise exc
        return real(*args, **kwargs)

    return wrapper


def _nothing_held_all_requeued(h: Harness, names: list[str], before: dict[str, Any]) -> list[str]:
    """Assert no member is assumed, bound or in flight and every one is queued again; the
    FailedScheduling notes."""
    assert h.cache.assumed_count() == 0 and _accounting(h) == before
    assert gb.bound(h) == {}
    assert h.queue.in_flight_uids() == []
    assert all(h.queue.where("default", n) is not None for n in names)
    return [e["note"] for e in h.kube.events if e["reason"] == "FailedScheduling"]


async def test_a_cache_failure_after_a_member_is_assumed_reverts_the_group_and_requeues_it() -> None:
    """The snapshot update after the second member's assumption fails (a CacheError): that member's
    Reserve and assumption are undone, the group ends in Error so the first member is reverted too,
    and every member goes back to the queue (none lost in flight, none left assumed)."""
    h, names, before = _gang_of_four_on_four_gpus()
    # calls: 1 the cycle's snapshot, 2 after member 0's assumption, 3 after member 1's
    h.cache.update_snapshot = _raising_at(3, h.cache.update_snapshot,  # type: ignore[method-assign]
                                          CacheError("snapshot inconsistent"))
    await h.cycle()
    notes = _nothing_held_all_requeued(h, names, before)
    assert len(notes) == 4 and all("snapshot inconsistent" in n for n in notes), notes


async def test_a_bug_in_the_group_cycle_reverts_the_assumed_members_and_requeues_all() -> None:
    """An unexpected exception right after the third member is assumed (here the nominator raising
    as its nomination is cleared): that member and the two assumed before are reverted, every member
    is requeued with the error, no exception leaves the cycle."""
    h, names, before = _gang_of_four_on_four_gpus()
    h.queue.delete_nominated_pod_if_exists = _raising_at(  # type: ignore[method-assign]
        3, h.queue.delete_nominated_pod_if_exists, RuntimeError("boom"))
    await h.cycle()
    assert _nothing_held_all_requeued(h, names, before) == ["RuntimeError: boom"] * 4


async def test_a_bug_submitting_one_placed_member_loses_neither_it_nor_the_members_after_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Permit of the second placed member raises (a bug, after the group was found feasible): that
    member is unreserved, forgotten and requeued with the error; the others still go to their binding
    cycles: the first was allowed (the quorum was assumed) and is bound, the third and fourth wait at
    Permit for the quorum the requeued member will complete. None is left popped but unhandled."""
    h, names, _before = _gang_of_four_on_four_gpus()
    monkeypatch.setattr(loop_module.bc, "run_permit",
                        _raising_at(2, loop_module.bc.run_permit, RuntimeError("permit bug")))
    h.loop.schedule_one(h.queue.pop_nowait())  # type: ignore[arg-type]
    requeued = [n for n in names if h.queue.where("default", n) not in (None, "in-flight")]
    assert len(requeued) == 1
    assert not h.cache.is_assumed_pod(h.pods[f"default/{requeued[0]}"])
    assert all(f"default/{requeued[0]}" not in [k for k, _g in acc[4]] for acc in _accounting(h).values())
    waiting = {wp.pod.name for wp in h.fw.waiting_pods}
    handed = [n for n in names if n not in requeued]
    assert set(h.queue.in_flight_uids()) == {f"uid-{n}" for n in handed}  # each owned by its binding cycle
    assert len(waiting) == 2 and waiting < set(handed)
    for wp in list(h.fw.waiting_pods):
        wp.reject("test", "end of the test")
    await h.loop.drain()
    assert list(gb.bound(h)) == [f"default/{handed[0]}"] and h.queue.in_flight_uids() == []
    notes = [e["note"] for e in h.kube.events if e["reason"] == "FailedScheduling"]
    assert notes.count("RuntimeError: permit bug") == 1


async def test_a_bug_reporting_one_rejected_member_still_requeues_every_member() -> None:
    """The group does not fit (three GPUs for four); reporting the second member's failure raises:
    that member is requeued anyway (as after an internal error), and so are the others."""
    h, objs = _harness()
    _gpu_node(h, "n1", 2)
    _gpu_node(h, "n2", 1)
    before = _accounting(h)
    gb.pod_group(objs, "g", 4)
    names = _members(h, "g", 4)
    h.loop._failure = _raising_at(2, h.loop._failure, RuntimeError("report bug"))  # type: ignore[method-assign]
    await h.cycle()
    assert _nothing_held_all_requeued(h, names, before)


@pytest.mark.parametrize(("change", "want"), [
    (lambda pods: pods[1]["spec"].update(priority=1000),
     "all pods in a single pod group should have the same priority as the pod group's priority, got 1000 and 0"),
    (lambda pods: pods[2]["spec"].update(preemptionPolicy="Never"),
     "all pods in a single pod group should have the same preemption policy, got Never and PreemptLowerPriority"),
])
async def test_a_group_whose_members_disagree_with_it_fails_whole(change: Callable[[list[Any]], None],
                                                                   want: str) -> None:
    """validatePodGroup (schedule_one_podgroup.go): a member whose priority is not its PodGroup's, or
    whose preemption policy is not the first member's, fails the whole group before any Filter --
    SchedulerError for every member and the group's condition -- though the Nodes have room."""
    h, objs = _harness()
    _gpu_node(h, "n1", 4)
    gb.pod_group(objs, "g", 3)
    names = [f"g-{i}" for i in range(3)]
    for name in names:
        h.pods[f"default/{name}"] = {
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "resourceVersion": "1"},
            "spec": {"schedulerName": "py-scheduler", "schedulingGroup": {"podGroupName": "g"},
                     "containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}]}}
    change([h.pods[f"default/{n}"] for n in names])
    conditions: list[tuple[Any, ...]] = []
    h.fw.plugins["GangScheduling"].write_condition = lambda *a: conditions.append(a)  # type: ignore[method-assign]
    for name in names:
        h.queue.add(h.pods[f"default/{name}"])
    await h.cycle()
    assert not gb.bound(h) and h.cache.assumed_count() == 0
    notes = [e["note"] for e in h.kube.events if e["reason"] == "FailedScheduling"]
    assert notes == [want] * 3
    reasons = {p["status"]["conditions"][0]["reason"] for k, p in h.kube.status_patches if k.startswith("default/g-")}
    assert reasons == {"SchedulerError"}
    assert conditions == [("default", "g", "False", "SchedulerError", want)]


async def test_a_gated_member_holds_its_group_silently_until_let_in() -> None:
    """A member held by a scheduling gate gates its whole group (upstream's queue gates the group entity):
    the others are not tried -- nothing bound, no event, no condition -- until the gate is lifted; then
    one pop places all of them."""
    h, objs = _harness()
    _gpu_node(h, "n1", 4)
    gb.pod_group(objs, "g", 3)
    conditions: list[tuple[Any, ...]] = []
    h.fw.plugins["GangScheduling"].write_condition = lambda *a: conditions.append(a)  # type: ignore[method-assign]
    names = [f"g-{i}" for i in range(3)]
    for i, name in enumerate(names):
        h.pods[f"default/{name}"] = {
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "resourceVersion": "1"},
            "spec": {"schedulerName": "py-scheduler", "schedulingGroup": {"podGroupName": "g"},
                     **({"schedulingGates": [{"name": "example.com/held"}]} if i == 0 else {}),
                     "containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}]}}
    for name in names:
        h.queue.add(h.pods[f"default/{name}"])
    assert h.queue.where("default", "g-0") == "gated"
    await h.cycle()
    assert not gb.bound(h) and not h.kube.events and not conditions and h.cache.assumed_count() == 0
    assert [h.queue.where("default", n) for n in names[1:]] == [UNSCHEDULABLE_Q] * 2
    old = h.pods["default/g-0"]
    new = {**old, "metadata": {**old["metadata"], "resourceVersion": "2"},
           "spec": {k: v for k, v in old["spec"].items() if k != "schedulingGates"}}
    h.pods["default/g-0"] = new
    h.queue.update(old, new)
    await h.cycle()
    assert sorted(gb.bound(h)) == [f"default/{n}" for n in names]
    assert {c[2:4] for c in conditions} == {("True", "Scheduled")}


def test_validation_takes_an_unset_scheduler_name_as_the_api_servers_default() -> None:
    """A snapshot's members without ``schedulerName`` are default-scheduler's, as the API server
    defaults them: no mismatch with the first member's (PodInfo) name."""
    from py_scheduler.core.group_cycle import validate_pod_group
    from py_scheduler.framework.types import PodInfo

    class Gang:
        def scheduled_pods(self, namespace: str, name: str) -> list[dict[str, Any]]:
            return [{"metadata": {"name": "done"}, "spec": {"nodeName": "n1"}}]

    pods = [PodInfo({"metadata": {"name": f"m{i}", "namespace": "default", "uid": f"u{i}"},
                     "spec": {"schedulingGroup": {"podGroupName": "g"}}}) for i in range(2)]
    group = {"metadata": {"name": "g", "namespace": "default"}, "spec": {}}
    assert validate_pod_group(Gang(), group, pods) is None  # type: ignore[arg-type]
    pods[1].pod["spec"]["schedulerName"] = "other"
    assert validate_pod_group(Gang(), group, [PodInfo(p.pod) for p in pods]) == (  # type: ignore[arg-type]
        'all pods in a single pod group should have the same .spec.schedulerName set, got: "other" and '
        '"default-scheduler"')


@pytest.mark.parametrize(("lower", "tail"), [
    (False, ", pod group preemption: No preemption victims found for incoming preemptor"),
    # a lower-priority Pod whose eviction does not help: the group algorithm's failure without it
    (True, ", deallocation and deletion of ResourceClaims completed, pod group preemption: minCount (2) cannot be "
           "satisfied: 1 scheduled, 0 remaining"),
])
async def test_the_group_condition_carries_the_pod_group_post_filter_outcome(lower: bool, tail: str) -> None:
    h, objs = _harness()
    _gpu_node(h, "n1", 1)
    gb.pod_group(objs, "g", 2)
    objs.groups["default/g"]["spec"]["priority"] = 1000
    if lower:
        h.pod("low", cpu="100m")  # priority 0 < the group's 1000
        await h.cycle()
    conditions: list[tuple[Any, ...]] = []
    h.fw.plugins["GangScheduling"].write_condition = lambda *a: conditions.append(a)  # type: ignore[method-assign]
    for name in ("g-0", "g-1"):
        h.pods[f"default/{name}"] = {
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "resourceVersion": "1"},
            "spec": {"schedulerName": "py-scheduler", "schedulingGroup": {"podGroupName": "g"}, "priority": 1000,
                     "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
    for name in ("g-0", "g-1"):
        h.queue.add(h.pods[f"default/{name}"])
    await h.cycle()
    (cond,) = conditions
    assert cond[2:4] == ("False", "Unschedulable")
    assert cond[4] == "minCount (2) cannot be satisfied: 1 scheduled, 0 remaining" + tail, cond


async def test_a_gang_preempts_lower_priority_pods_on_two_nodes() -> None:
    """Group preemption (``PodGroupEvaluator``): a gang of priority 1000 whose two one-GPU members fit
    only without the priority-0 Pods holding the GPU of each Node. Both are evicted (DisruptionTarget
    ``... higher priority podgroup``, Preempted ``by podgroup pg-g on node cluster``), each member is
    nominated to its own Node, the condition ends with the outcome, nothing stays assumed, and a
    lower-priority Pod that was not in the way (a CPU-only one) is reprieved."""
    h, objs = _harness()
    for n in ("n1", "n2"):
        _gpu_node(h, n, 1)
        for name, gpus in ((f"low-{n}", "1"), (f"cpu-{n}", "0")):
            h.cache.add_pod({"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
                             "spec": {"nodeName": n, "priority": 0, "containers": [{"name": "c", "resources": {
                                 "requests": {"cpu": "100m"}, "limits": {"nvidia.com/gpu": gpus}}}]},
                             "status": {"phase": "Running"}})
    before = _accounting(h)
    gb.pod_group(objs, "g", 2)
    objs.groups["default/g"]["spec"]["priority"] = 1000
    conditions: list[tuple[Any, ...]] = []
    h.fw.plugins["GangScheduling"].write_condition = lambda *a: conditions.append(a)  # type: ignore[method-assign]
    names = gb._queue_members(h, "g", 2, lambda _n: {"priority": 1000, "containers": [{"name": "c", "resources": {
        "requests": {"cpu": "100m"}, "limits": {"nvidia.com/gpu": "1"}}}]})
    await h.cycle()
    assert sorted(k for k, _ in h.kube.deleted) == ["default/low-n1", "default/low-n2"]
    disrupted = [p["status"]["conditions"][0] for k, p in h.kube.status_patches if k.startswith("default/low-")]
    want = "py-scheduler: preempting to accommodate a higher priority podgroup"
    assert [c["message"] for c in disrupted] == [want] * 2
    notes = [e["note"] for e in h.kube.events if e["reason"] == "Preempted"]
    assert notes == ["Preempted by podgroup pg-g on node cluster"] * 2
    nominated = {k: p["status"].get("nominatedNodeName") for k, p in h.kube.status_patches
                 if k in {f"default/{n}" for n in names}}
    assert sorted(nominated.values()) == ["n1", "n2"], nominated
    (cond,) = conditions
    assert cond[2:4] == ("False", "Unschedulable")
    assert cond[4].endswith(", pod group preemption: found a placement for podgroup, preempting 2 victims"), cond
    assert _accounting(h) == before and h.cache.assumed_count() == 0  # the dry run touched no NodeInfo
    assert not gb.bound(h)


async def test_a_bug_in_group_preemption_fails_the_group_and_holds_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A PodGroupPostFilter that raises midway (here after the dry run removed the victims and
    scheduled the group on its copy): the group's Error for every member, requeued, no eviction, no
    member assumed, every NodeInfo as before."""
    from py_scheduler.framework import group_preemption

    h, objs = _harness()
    _gpu_node(h, "n1", 1)
    h.cache.add_pod({"metadata": {"name": "low", "namespace": "default", "uid": "uid-low"},
                     "spec": {"nodeName": "n1", "priority": 0, "containers": [{"name": "c", "resources": {
                         "limits": {"nvidia.com/gpu": "1"}}}]}, "status": {"phase": "Running"}})
    before = _accounting(h)
    gb.pod_group(objs, "g", 1)
    objs.groups["default/g"]["spec"]["priority"] = 1000
    real = group_preemption.sort_slice

    def boom(*_a: Any) -> None:
        raise RuntimeError("injected")

    monkeypatch.setattr(group_preemption, "sort_slice", boom)
    (name,) = gb._queue_members(h, "g", 1, lambda _n: {"priority": 1000, "containers": [{"name": "c", "resources": {
        "limits": {"nvidia.com/gpu": "1"}}}]})
    await h.cycle()
    monkeypatch.setattr(group_preemption, "sort_slice", real)
    assert h.kube.deleted == [] and not gb.bound(h)
    assert _accounting(h) == before and h.cache.assumed_count() == 0
    assert h.queue.get("default", name) is not None
    cond = [p["status"]["conditions"][0] for k, p in h.kube.status_patches if k == f"default/{name}"][-1]
    assert cond["reason"] == "SchedulerError" and "injected" in cond["message"], cond


async def test_a_member_created_while_its_group_preempts_joins_it_afterwards() -> None:
    """A member that arrives while its group's preemption runs is gated (PreEnqueue, by the PodGroup's
    UID). Once the victims are gone, the other members come back through the deletion events and,
    as upstream's group entity is let in whole, the late member joins them (it was left gated for
    ever before, and the group with it: one gated member holds the group)."""
    from py_scheduler.framework.events import EVENT_ASSIGNED_POD_DELETE
    from py_scheduler.queue.scheduling_queue import GATED

    h, objs = _harness()
    victims = []
    for n in ("n1", "n2"):
        _gpu_node(h, n, 1)
        v = {"metadata": {"name": f"low-{n}", "namespace": "default", "uid": f"uid-low-{n}"},
             "spec": {"nodeName": n, "priority": 0, "containers": [{"name": "c", "resources": {
                 "limits": {"nvidia.com/gpu": "1"}}}]}, "status": {"phase": "Running"}}
        h.cache.add_pod(v)
        victims.append(v)
    gb.pod_group(objs, "g", 2)
    objs.groups["default/g"]["spec"]["priority"] = 1000

    def spec(_n: str) -> dict[str, Any]:
        return {"priority": 1000, "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}

    names = gb._queue_members(h, "g", 2, spec)
    qpi = h.queue.pop_nowait()
    assert qpi is not None
    h.loop.schedule_one(qpi)  # the group preempts; the evictions run in a task
    late = "g-late"
    h.pods[f"default/{late}"] = {"metadata": {"name": late, "namespace": "default", "uid": f"uid-{late}",
                                              "resourceVersion": "1"},
                                 "spec": {"schedulerName": "py-scheduler", "schedulingGroup": {"podGroupName": "g"},
                                          **spec(late)}}
    h.queue.add(h.pods[f"default/{late}"])
    assert h.queue.where("default", late) == GATED
    await h.loop.drain()
    assert sorted(k for k, _ in h.kube.deleted) == ["default/low-n1", "default/low-n2"]
    for v in victims:  # the watch shows the victims gone
        h.cache.remove_pod(v)
        h.queue.move_all_to_active_or_backoff(EVENT_ASSIGNED_POD_DELETE, v, None)
    h.queue.flush_backoff_q_completed()
    for q in list(h.queue._backoff_q.list()):  # backoff expiry without waiting (test clock)
        q.backoff_expiration = 0.0
    h.queue.flush_backoff_q_completed()
    assert h.queue.where("default", late) == GATED  # only its group's pop lets it in
    await h.cycle()
    assert sorted(gb.bound(h)) == [f"default/{n}" for n in names]
    notes = [e["note"] for e in h.kube.events if e["reason"] == "FailedScheduling" and e["regarding"]["name"] == late]
    assert notes, "the late member was tried with its group"
