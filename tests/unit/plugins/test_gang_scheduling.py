"""GangScheduling (GenericWorkload): PreEnqueue gating, Permit all-or-nothing, release on failure.

Upstream cases from ``pkg/scheduler/framework/plugins/gangscheduling/gangscheduling_test.go``
(PreEnqueue without PodGroup / below minCount / at minCount; Permit Wait below quorum, Allow of the
waiting members at quorum; the queueing hints), plus py-scheduler's per-Pod-cycle rules (Unreserve /
PostFilter below quorum reject the waiting members). The waiting-Pods map is a fake here, then the
real :class:`~py_scheduler.framework.binding_cycle.WaitingPods` for the timeout.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import pytest

from py_scheduler.framework import config
from py_scheduler.framework.binding_cycle import WaitingPod, WaitingPods
from py_scheduler.framework.config import ConfigError
from py_scheduler.framework.events import QueueingHint
from py_scheduler.framework.features import FeatureGates
from py_scheduler.framework.handle import Handle, LateObjects, QueueActivator
from py_scheduler.framework.types import Code, CycleState, PodInfo
from py_scheduler.plugins import gang_scheduling as gs
from py_scheduler.plugins import registry
from tests.unit.plugins.plain_handle import plain_handle

Obj = dict[str, Any]


def pod(name: str, group: str | None = "pg", node: str = "", ns: str = "ns", phase: str = "Pending") -> Obj:
    spec: Obj = {"containers": [{"name": "c"}]}
    if group is not None:
        spec["schedulingGroup"] = {"podGroupName": group}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}"}, "spec": spec,
            "status": {"phase": phase}}


def pod_group(name: str = "pg", min_count: int | None = 3, ns: str = "ns") -> Obj:
    policy: Obj = {"gang": {"minCount": min_count}} if min_count is not None else {"basic": {}}
    return {"metadata": {"name": name, "namespace": ns}, "spec": {"schedulingPolicy": policy}}


class Objects:
    """A fake ObjectLister: Pods and PodGroups by (namespace, name)."""

    def __init__(self) -> None:
        self.pods: list[Obj] = []
        self.groups: dict[tuple[str, str], Obj] = {}

    def add(self, *objs: Obj) -> None:
        for o in objs:
            if "schedulingPolicy" in o["spec"]:
                self.groups[(o["metadata"]["namespace"], o["metadata"]["name"])] = o
            else:
                self.pods.append(o)

    def get(self, kind: str, namespace: str, name: str) -> Obj | None:
        if kind == "Pod":
            return next((p for p in self.pods if (p["metadata"]["namespace"], p["metadata"]["name"])
                         == (namespace, name)), None)
        return self.groups.get((namespace, name)) if kind == "PodGroup" else None

    def list(self, kind: str) -> list[Obj]:
        return list(self.pods) if kind == "Pod" else []


class FakeWaiting:
    """A waiting Pod that records Allow / Reject (the first outcome wins, as the real one)."""

    def __init__(self, p: PodInfo) -> None:
        self.pod = p
        self.allowed: list[str] = []
        self.rejected: list[tuple[str, str]] = []
        self.done = False

    def pending_plugins(self) -> list[str]:
        return [] if self.allowed else [gs.NAME]

    def allow(self, plugin: str) -> None:
        self.allowed.append(plugin)
        self.done = True

    def reject(self, plugin: str, message: str) -> bool:
        if self.rejected or self.allowed:
            return False
        self.rejected.append((plugin, message))
        self.done = True
        return True


class FakeFramework:
    def __init__(self) -> None:
        self.waiting_pods: list[FakeWaiting] = []
        self.activated: list[list[Obj]] = []

    def activate(self, pods: list[Obj]) -> None:
        self.activated.append(pods)


def _handle(objs: Any, profile: Any = None, client: Any = None, activator: Any = None) -> Handle:
    """A complete Handle over ``objs`` bound to ``profile`` (a FakeFramework when None), activating
    through ``activator`` (the profile when it has ``activate``)."""
    profile = profile if profile is not None else FakeFramework()
    h = Handle(objects=objs, client=client, events=None, feature_gates=FeatureGates(),
               activator=activator or (profile if hasattr(profile, "activate") else QueueActivator()))
    h.bind_profile(profile)
    return h


def make(objs: Objects) -> tuple[gs.GangScheduling, FakeFramework]:
    fw = FakeFramework()
    pl = gs.GangScheduling.create({}, _handle(objs, fw))
    return pl, fw


def test_pre_enqueue_passes_pods_without_group_and_basic_groups() -> None:
    objs = Objects()
    objs.add(pod_group("basic", None), pod("b1", "basic"))
    pl, _ = make(objs)
    assert pl.pre_enqueue(PodInfo(pod("solo", None))).is_success()
    assert pl.pre_enqueue(PodInfo(pod("b1", "basic"))).is_success()


def test_pre_enqueue_waits_for_pod_group_then_for_min_count() -> None:
    objs = Objects()
    p1 = pod("p1")
    objs.add(p1)
    pl, _ = make(objs)
    s = pl.pre_enqueue(PodInfo(p1))
    assert s.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE and s.plugin == gs.NAME
    assert s.message() == 'waiting for pods\'s pod group "pg" to appear in scheduling queue'
    objs.add(pod_group(min_count=3), pod("p2"))
    s = pl.pre_enqueue(PodInfo(p1))
    assert s.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert s.message() == "waiting for minCount pods from a gang to appear in scheduling queue"
    # A terminal member or one in another namespace does not count.
    objs.add(pod("done", phase="Succeeded"), pod("other-ns", ns="elsewhere"))
    assert not pl.pre_enqueue(PodInfo(p1)).is_success()
    objs.add(pod("p3"))
    assert pl.pre_enqueue(PodInfo(p1)).is_success()


def test_permit_waits_below_quorum_and_allows_all_waiting_members_at_quorum() -> None:
    objs = Objects()
    members = [pod(f"p{i}") for i in range(4)]
    objs.add(pod_group(min_count=3), *members)
    pl, fw = make(objs)
    infos = [PodInfo(p) for p in members]
    state = CycleState()
    for i in range(2):
        assert pl.reserve(state, infos[i], "n1").is_success()
        s, timeout = pl.permit(state, infos[i], "n1")
        assert s.code == Code.WAIT and s.message() == gs.MSG_MIN_COUNT_NOT_SCHEDULED
        assert timeout == gs.PERMIT_TIMEOUT_SECONDS
        fw.waiting_pods.append(FakeWaiting(infos[i]))
    # Below quorum, Permit activated the group's unscheduled members (upstream handle.Activate).
    assert [p["metadata"]["name"] for p in fw.activated[-1]] == ["p2", "p3"]
    # A waiting Pod of another group is left alone.
    stranger = FakeWaiting(PodInfo(pod("x", "other")))
    fw.waiting_pods.append(stranger)
    pl.reserve(state, infos[2], "n2")
    s, timeout = pl.permit(state, infos[2], "n2")
    assert s.is_success() and timeout == 0.0
    assert [w.allowed for w in fw.waiting_pods[:2]] == [[gs.NAME], [gs.NAME]]
    assert stranger.allowed == [] and stranger.rejected == []
    # Past the quorum a late member (minCount 3 of 4) is admitted at once.
    pl.reserve(state, infos[3], "n2")
    assert pl.permit(state, infos[3], "n2")[0].is_success()


def test_bound_members_count_toward_the_quorum() -> None:
    objs = Objects()
    objs.add(pod_group(min_count=2), pod("bound", node="n1"), pod("p1"))
    pl, _ = make(objs)
    p1 = PodInfo(pod("p1"))
    pl.reserve(CycleState(), p1, "n2")
    assert pl.permit(CycleState(), p1, "n2")[0].is_success()


def test_unreserve_below_quorum_rejects_every_waiting_member() -> None:
    objs = Objects()
    members = [pod(f"p{i}") for i in range(3)]
    objs.add(pod_group(min_count=3), *members)
    pl, fw = make(objs)
    infos = [PodInfo(p) for p in members]
    for i in range(2):
        pl.reserve(CycleState(), infos[i], "n1")
        pl.permit(CycleState(), infos[i], "n1")
        fw.waiting_pods.append(FakeWaiting(infos[i]))
    # p0's Permit timed out: its binding cycle unreserves it.
    pl.unreserve(CycleState(), infos[0], "n1")
    assert fw.waiting_pods[1].rejected and fw.waiting_pods[1].rejected[0][0] == gs.NAME
    assert fw.waiting_pods[1].rejected[0][1] == "rejected with its pod group pg: member p0 was unreserved"
    assert pl.pod_group_state("ns", "pg").assumed == set()  # p1 is rejected: it no longer counts
    pl.unreserve(CycleState(), infos[1], "n1")
    assert pl.pod_group_state("ns", "pg").scheduled_pods_count() == 0


def test_unreserve_after_quorum_leaves_the_gang_alone() -> None:
    objs = Objects()
    members = [pod(f"p{i}") for i in range(3)]
    objs.add(pod_group(min_count=2), *members)
    pl, fw = make(objs)
    infos = [PodInfo(p) for p in members]
    for i in range(3):
        pl.reserve(CycleState(), infos[i], "n1")
    fw.waiting_pods.append(FakeWaiting(infos[1]))
    pl.unreserve(CycleState(), infos[0], "n1")  # 2 of minCount 2 still scheduled
    assert fw.waiting_pods[0].rejected == []


def test_post_filter_below_quorum_releases_the_waiting_members_without_a_reason() -> None:
    objs = Objects()
    members = [pod(f"p{i}") for i in range(3)]
    objs.add(pod_group(min_count=3), *members)
    pl, fw = make(objs)
    infos = [PodInfo(p) for p in members]
    pl.reserve(CycleState(), infos[0], "n1")
    fw.waiting_pods.append(FakeWaiting(infos[0]))
    r, s = pl.post_filter(CycleState(), infos[1], {})
    assert r is None and s.code == Code.UNSCHEDULABLE and s.reasons == []
    assert fw.waiting_pods[0].rejected
    # A Pod without a group: nothing happens.
    r, s = pl.post_filter(CycleState(), PodInfo(pod("solo", None)), {})
    assert r is None and s.code == Code.UNSCHEDULABLE and s.reasons == []


def test_permit_and_unreserve_ignore_pods_without_gang() -> None:
    objs = Objects()
    objs.add(pod_group("basic", None))
    pl, fw = make(objs)
    for p in (pod("solo", None), pod("b", "basic"), pod("orphan", "missing")):
        pl.reserve(CycleState(), PodInfo(p), "n1")
        s, timeout = pl.permit(CycleState(), PodInfo(p), "n1")
        assert s.is_success() and timeout == 0.0
        pl.unreserve(CycleState(), PodInfo(p), "n1")
    assert fw.activated == []


def test_queueing_hints() -> None:
    pl, _ = make(Objects())
    hints = {ev.event.label(): ev.hint_fn for ev in pl.events_to_register()}
    assert {"UnscheduledPodAdd", "AssignedPodAdd", "scheduling.k8s.io/PodGroupAdd",
            "scheduling.k8s.io/PodGroupUpdate", "NodeAll"} <= set(hints)
    me = pod("p0")
    add = hints["UnscheduledPodAdd"]
    assert add is not None
    assert add(me, None, pod("p1")) == QueueingHint.QUEUE
    assert add(me, None, pod("p1", "other")) == QueueingHint.QUEUE_SKIP
    assert add(me, None, pod("p1", ns="elsewhere")) == QueueingHint.QUEUE_SKIP
    assert add(pod("solo", None), None, pod("p1")) == QueueingHint.QUEUE_SKIP
    pg_add = hints["scheduling.k8s.io/PodGroupAdd"]
    assert pg_add is not None
    assert pg_add(me, None, pod_group()) == QueueingHint.QUEUE
    assert pg_add(me, None, pod_group("other")) == QueueingHint.QUEUE_SKIP
    upd = hints["scheduling.k8s.io/PodGroupUpdate"]
    assert upd is not None
    assert upd(me, pod_group(min_count=4), pod_group(min_count=3)) == QueueingHint.QUEUE
    assert upd(me, pod_group(min_count=3), pod_group(min_count=3)) == QueueingHint.QUEUE_SKIP
    assert upd(me, pod_group(min_count=3), pod_group(min_count=5)) == QueueingHint.QUEUE_SKIP
    assert upd(me, pod_group(min_count=None), pod_group(min_count=1)) == QueueingHint.QUEUE_SKIP


def test_placement_feasible() -> None:
    assert gs.placement_feasible(4, 1, 2).code == Code.UNSCHEDULABLE
    assert gs.placement_feasible(4, 1, 2).message() == "minCount (4) cannot be satisfied: 1 scheduled, 2 remaining"
    assert gs.placement_feasible(4, 2, 2).code == Code.WAIT
    assert gs.placement_feasible(4, 4, 0).is_success()


def test_helpers_tolerate_malformed_objects() -> None:
    assert gs.pod_group_name({"spec": {"schedulingGroup": {"podGroupName": ""}}}) is None
    assert gs.pod_group_name({"spec": {"schedulingGroup": "x"}}) is None
    assert gs.pod_group_name({}) is None
    assert gs.gang_min_count({"spec": {"schedulingPolicy": {"gang": {"minCount": "3"}}}}) == 1
    assert gs.gang_min_count({"spec": {"schedulingPolicy": {"gang": {"minCount": True}}}}) == 1
    assert gs.gang_min_count({"spec": None}) is None


def test_bad_args() -> None:
    for bad in (0, -1, "5m", True):
        with pytest.raises(ConfigError, match="permitTimeoutSeconds"):
            gs.GangScheduling.create({"permitTimeoutSeconds": bad}, plain_handle())
    assert gs.GangScheduling.create({"permitTimeoutSeconds": 2}, plain_handle()).permit_timeout == 2.0


def test_with_the_real_waiting_pods_map_a_partial_gang_times_out_together() -> None:
    """Two of three members wait; the first one's timer fires; its Unreserve (what the binding cycle
    runs after a rejected Permit) rejects the other, so neither keeps its reservation."""

    async def scenario() -> list[str]:
        objs = Objects()
        members = [pod(f"p{i}") for i in range(3)]
        objs.add(pod_group(min_count=3), *members)

        class Fw:
            waiting_pods = WaitingPods()

        pl = gs.GangScheduling(objs, 0.05, _handle(objs, Fw))
        infos = [PodInfo(p) for p in members]
        wps: list[WaitingPod] = []
        for i, t in ((0, 0.05), (1, 30.0)):
            pl.reserve(CycleState(), infos[i], "n1")
            s, _ = pl.permit(CycleState(), infos[i], "n1")
            assert s.code == Code.WAIT
            wp = WaitingPod(infos[i], {gs.NAME: t})
            Fw.waiting_pods.add(wp)
            wps.append(wp)
        first = await asyncio.wait_for(wps[0].outcome(), 5)
        Fw.waiting_pods.remove(infos[0].uid)
        pl.unreserve(CycleState(), infos[0], "n1")
        second = await asyncio.wait_for(wps[1].outcome(), 5)
        return [first.message(), second.message()]

    first, second = asyncio.run(scenario())
    assert first.startswith("rejected due to timeout after waiting")
    assert second == "rejected with its pod group pg: member p0 was unreserved"


def test_default_profile_gains_gang_scheduling_only_with_the_gate() -> None:
    assert "GangScheduling" not in [n for n, _ in config.default_multipoint(registry)]
    gates = FeatureGates(generic_workload=True)
    names = [n for n, _ in config.default_multipoint(registry, with_gpu=False, gates=gates)]
    assert names[-1] == "GangScheduling" and names[-2] == "NodeDeclaredFeatures"
    fw = config.build_framework(config.ProfileConfig(), config.SchedulerConfig(feature_gates=gates), registry=registry)
    assert any(p.name == "GangScheduling" for p in fw.permit_plugins)
    assert not any(p.name == "GangScheduling" for p in config.build_framework(
        config.ProfileConfig(), config.SchedulerConfig(), registry=registry).permit_plugins)
    with pytest.raises(ValueError, match="depends on GenericWorkload"):
        FeatureGates(topology_aware_workload_scheduling=True)


def test_feature_gates_flag_and_the_live_lister() -> None:
    from py_scheduler.app.client.lister import InformerLister
    from py_scheduler.app.client.reflector import ObjectStore
    from py_scheduler.cache.kinds import KINDS_BY_NAME

    assert FeatureGates.parse("GenericWorkload=true") == FeatureGates(generic_workload=True)
    with pytest.raises(ValueError, match="depends on GenericWorkload"):
        FeatureGates.parse("GenericWorkload=false,TopologyAwareWorkloadScheduling=true")
    store = ObjectStore()
    store.apply(KINDS_BY_NAME["PodGroup"], "ADDED", pod_group() | {"metadata": {"name": "pg", "namespace": "ns",
                                                                               "resourceVersion": "1"}})
    store.apply(KINDS_BY_NAME["Pod"], "ADDED", pod("p0") | {"metadata": {"name": "p0", "namespace": "ns",
                                                                        "uid": "uid-p0", "resourceVersion": "2"}})
    lister = InformerLister(store)
    objects = LateObjects()
    pl = gs.GangScheduling.create({}, _handle(objects))
    objects.connect(lister)  # connected after the profile is built, as the live process does
    assert pl.pre_enqueue(PodInfo(pod("p0"))).message() == gs.MSG_MIN_COUNT_NOT_IN_QUEUE
    assert pl.pod_group_state("ns", "pg").all_pods_count() == 1


def test_condition_patch_sets_and_never_regresses() -> None:
    pg = pod_group() | {"metadata": {"name": "pg", "namespace": "ns", "generation": 2}}
    p = gs.condition_patch(pg, "False", "Unschedulable", "why", "T1")
    assert p == {"status": {"conditions": [{"type": gs.CONDITION, "status": "False", "reason": "Unschedulable",
                                            "message": "why", "observedGeneration": 2, "lastTransitionTime": "T1"}]}}
    pg["status"] = p["status"]
    assert gs.condition_patch(pg, "False", "Unschedulable", "why", "T2") is None  # unchanged
    p = gs.condition_patch(pg, "True", "Scheduled", "", "T3")
    assert p is not None and p["status"]["conditions"][0]["lastTransitionTime"] == "T3"
    pg["status"] = p["status"]
    assert gs.condition_patch(pg, "False", "Unschedulable", "again", "T4") is None  # True is terminal


def test_quorum_and_release_write_the_pod_group_condition_through_the_client() -> None:
    class Client:
        def __init__(self) -> None:
            self.patches: list[tuple[str, Obj, str]] = []

        async def patch(self, path: str, patch: Obj, content_type: str = "") -> Obj:
            self.patches.append((path, patch, content_type))
            if len(self.patches) > 1:
                raise RuntimeError("API down")  # logged, never raised
            return {}

    async def scenario() -> list[tuple[str, Obj, str]]:
        objs = Objects()
        members = [pod(f"p{i}") for i in range(2)]
        objs.add(pod_group(min_count=2), *members)
        api = Client()
        fw = FakeFramework()
        pl = gs.GangScheduling.create({}, _handle(objs, fw, api))
        infos = [PodInfo(p) for p in members]
        pl.reserve(CycleState(), infos[0], "n1")
        fw.waiting_pods.append(FakeWaiting(infos[0]))
        pl.post_filter(CycleState(), infos[1], {})  # below quorum: Unschedulable
        await asyncio.sleep(0)  # its writer sends it (a condition wanted before then would replace it)
        objs.groups[("ns", "pg")]["status"] = {"conditions": []}
        pl._hint_cluster_change(members[0], None, {"metadata": {"name": "new-node"}})  # the hold ends
        fw.waiting_pods.clear()  # the rejected p0 left the map (its binding cycle ended)
        pl.reserve(CycleState(), infos[0], "n1")
        pl.reserve(CycleState(), infos[1], "n1")
        assert pl.permit(CycleState(), infos[1], "n1")[0].is_success()  # quorum: Scheduled
        await asyncio.wait_for(asyncio.gather(*pl._writes), 5)
        return api.patches

    patches = asyncio.run(scenario())
    assert [p[0] for p in patches] == ["/apis/scheduling.k8s.io/v1beta1/namespaces/ns/podgroups/pg/status"] * 2
    assert [(c["status"], c["reason"]) for _, body, _ in patches for c in body["status"]["conditions"]] == [
        ("False", "Unschedulable"), ("True", "Scheduled")]
    assert patches[0][2] == "application/strategic-merge-patch+json"



def test_a_group_released_for_a_misfit_is_held_until_the_cluster_changes() -> None:
    """No reserve-and-release loop: after PostFilter released the waiting members, the group's
    members stay at PreEnqueue (and a member already past it is refused at Permit) until a Node
    event or another Pod's deletion; the release of the group's own members does not count."""
    objs = Objects()
    members = [pod(f"p{i}") for i in range(3)]
    objs.add(pod_group(min_count=3), *members)
    pl, fw = make(objs)
    infos = [PodInfo(p) for p in members]
    pl.reserve(CycleState(), infos[0], "n1")
    fw.waiting_pods.append(FakeWaiting(infos[0]))
    pl.post_filter(CycleState(), infos[2], {})
    held = pl.pre_enqueue(infos[2])
    assert held.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert held.message() == "pod group pg could not be placed whole; waiting for a cluster change"
    s, _ = pl.permit(CycleState(), infos[1], "n1")
    assert s.code == Code.UNSCHEDULABLE and s.message() == held.message()
    hints = {ev.event.label(): ev.hint_fn for ev in pl.events_to_register()}
    own_delete = [ev.hint_fn for ev in pl.events_to_register() if ev.hint_fn == pl._hint_cluster_change]
    assert len(own_delete) == 2
    assert pl._hint_cluster_change(members[1], members[0], None) == QueueingHint.QUEUE_SKIP  # own member
    assert not pl.pre_enqueue(infos[2]).is_success()
    node_hint = hints["NodeAll"]
    assert node_hint is not None
    assert node_hint(members[1], None, {"metadata": {"name": "n9"}, "spec": {}}) == QueueingHint.QUEUE
    assert node_hint(pod("solo", None), None, {"metadata": {"name": "n9"}}) == QueueingHint.QUEUE_SKIP
    assert pl.pre_enqueue(infos[2]).is_success()
    assert pl.pre_enqueue(infos[1]).is_success()  # the hold is gone for every member


def test_a_misfit_with_nothing_waiting_does_not_hold_the_group() -> None:
    objs = Objects()
    members = [pod(f"p{i}") for i in range(2)]
    objs.add(pod_group(min_count=2), *members)
    pl, _ = make(objs)
    pl.post_filter(CycleState(), PodInfo(members[0]), {})
    assert pl.pre_enqueue(PodInfo(members[0])).is_success()



def test_a_member_rejected_at_permit_does_not_count_before_its_unreserve() -> None:
    """The partial-gang race: p0 and p1 wait, p0's Permit timer fires (rejected, not yet unreserved);
    p2 and p3 arrive. Counting p0 would let p1..p3 through while p0 goes back to the queue."""
    objs = Objects()
    members = [pod(f"p{i}") for i in range(4)]
    objs.add(pod_group(min_count=4), *members)
    pl, fw = make(objs)
    infos = [PodInfo(p) for p in members]
    for i in range(2):
        pl.reserve(CycleState(), infos[i], "n1")
        fw.waiting_pods.append(FakeWaiting(infos[i]))
    fw.waiting_pods[0].reject("", "rejected due to timeout")  # its binding cycle has not unreserved yet
    for i in (2, 3):
        pl.reserve(CycleState(), infos[i], "n1")
    s, _ = pl.permit(CycleState(), infos[3], "n1")
    assert s.code == Code.WAIT, "a rejected member was counted toward the quorum"
    assert fw.waiting_pods[1].allowed == []


def test_competing_gangs_the_older_one_wins() -> None:
    """A (older) and B each hold members at Permit; A's next member fits nowhere: B's waiting members
    are rejected and B is held, A keeps its reservations. Then B's misfit yields to A."""
    objs = Objects()
    a = [pod(f"a{i}", "ga") for i in range(3)]
    b = [pod(f"b{i}", "gb") for i in range(3)]
    ga, gb = pod_group("ga", 3), pod_group("gb", 3)
    ga["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    gb["metadata"]["creationTimestamp"] = "2026-01-01T00:00:01Z"
    objs.add(ga, gb, *a, *b)
    pl, fw = make(objs)
    for p in (a[0], b[0]):
        pl.reserve(CycleState(), PodInfo(p), "n1")
        fw.waiting_pods.append(FakeWaiting(PodInfo(p)))
    wa, wb = fw.waiting_pods
    pl.post_filter(CycleState(), PodInfo(a[1]), {})
    assert wa.rejected == [] and wb.rejected and "yields to the older pod group ga" in wb.rejected[0][1]
    assert not pl.pre_enqueue(PodInfo(b[1])).is_success()  # B held
    assert pl.pre_enqueue(PodInfo(a[1])).is_success()  # A not held
    # The other way round: B's misfit while A waits -> B releases its own.
    fw.waiting_pods.clear()
    pl._released.clear()
    for p in (a[0], b[0]):
        fw.waiting_pods.append(FakeWaiting(PodInfo(p)))
    wa, wb = fw.waiting_pods
    pl.post_filter(CycleState(), PodInfo(b[1]), {})
    assert wa.rejected == [] and wb.rejected and "member b1 cannot be scheduled" in wb.rejected[0][1]


def test_older_gang_keeps_waiting_while_the_younger_one_is_still_yielding() -> None:
    """A second misfit of the older gang before the yielded members' Unreserve ran: the older gang
    still keeps its reservations (the room is on its way); once they ran, a misfit releases it."""
    objs = Objects()
    a = [pod(f"a{i}", "ga") for i in range(3)]
    b = [pod(f"b{i}", "gb") for i in range(2)]
    ga, gb = pod_group("ga", 3), pod_group("gb", 2)
    ga["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    gb["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"  # same second: namespace/name decides
    objs.add(ga, gb, *a, *b)
    pl, fw = make(objs)
    for p in (a[0], b[0]):
        pl.reserve(CycleState(), PodInfo(p), "n1")
        fw.waiting_pods.append(FakeWaiting(PodInfo(p)))
    wa, wb = fw.waiting_pods
    pl.post_filter(CycleState(), PodInfo(a[1]), {})
    assert wb.rejected and not wa.rejected
    pl.post_filter(CycleState(), PodInfo(a[2]), {})  # b0 not unreserved yet
    assert not wa.rejected
    pl.unreserve(CycleState(), PodInfo(b[0]), "n1")
    pl.post_filter(CycleState(), PodInfo(a[2]), {})
    assert wa.rejected and "member a2 cannot be scheduled" in wa.rejected[0][1]


def test_another_gangs_undone_reservation_is_not_a_cluster_change() -> None:
    objs = Objects()
    a = [pod(f"a{i}", "ga") for i in range(2)]
    other = pod("x0", "gx")
    objs.add(pod_group("ga", 2), pod_group("gx", 2), *a, other)
    pl, fw = make(objs)
    pl.reserve(CycleState(), PodInfo(a[0]), "n1")
    fw.waiting_pods.append(FakeWaiting(PodInfo(a[0])))
    pl.post_filter(CycleState(), PodInfo(a[1]), {})
    assumed_copy = {**other, "spec": {**other["spec"], "nodeName": "n1"}}  # what the loop reports
    assert pl._hint_cluster_change(a[1], assumed_copy, None) == QueueingHint.QUEUE_SKIP
    assert not pl.pre_enqueue(PodInfo(a[1])).is_success()
    bound_elsewhere = pod("y0", None, node="n2")  # a real Pod leaving a node
    assert pl._hint_cluster_change(a[1], bound_elsewhere, None) == QueueingHint.QUEUE
    assert pl.pre_enqueue(PodInfo(a[1])).is_success()


def test_the_scheduled_groups_remembered_are_forgotten_once_deleted_or_seen_true() -> None:
    """The lag guard holds a group only until its informer copy shows True or it is deleted: one
    entry per PodGroup ever scheduled would grow without end in a long-lived scheduler."""
    class Client:
        async def patch(self, path: str, patch: Obj, content_type: str = "") -> Obj:
            return {}

    async def scenario() -> None:
        objs = Objects()
        groups = [pod_group(f"g{i}", min_count=1) for i in range(3)]
        for i, g in enumerate(groups):
            g["metadata"]["uid"] = f"uid-g{i}"
        objs.add(*groups)
        pl = gs.GangScheduling.create({}, _handle(objs, client=Client()))
        for i in range(3):
            pl.write_condition("ns", f"g{i}", "True", "Scheduled", "")
        assert len(pl._initially_scheduled) == 3
        del objs.groups[("ns", "g0")]  # deleted
        groups[1]["status"] = {"conditions": [{"type": gs.CONDITION, "status": "True"}]}  # the update arrived
        pl.write_condition("ns", "g2", "False", "Unschedulable", "late")  # still guarded: nothing written
        assert set(pl._initially_scheduled) == {"uid-g2"}
        objs.groups[("ns", "g2")] = {**groups[2], "metadata": {**groups[2]["metadata"], "uid": "uid-new"}}
        pl.write_condition("ns", "g2", "False", "Unschedulable", "a new group of that name")
        assert set(pl._initially_scheduled) == set()  # the old UID went; the new group is not guarded
        await asyncio.wait_for(asyncio.gather(*pl._writes), 5)

    asyncio.run(scenario())


def test_scheduled_condition_is_never_followed_by_unschedulable() -> None:
    """The informer's copy lags: after this process wrote True, a late release writes nothing."""
    class Client:
        def __init__(self) -> None:
            self.bodies: list[Obj] = []

        async def patch(self, path: str, patch: Obj, content_type: str = "") -> Obj:
            self.bodies.append(patch)
            return {}

    async def scenario() -> list[Obj]:
        objs = Objects()
        objs.add(pod_group(min_count=1))
        api = Client()
        pl = gs.GangScheduling.create({}, _handle(objs, client=api))
        pl.write_condition("ns", "pg", "True", "Scheduled", "")
        pl.write_condition("ns", "pg", "False", "Unschedulable", "late")
        await asyncio.wait_for(asyncio.gather(*pl._writes), 5)
        return api.bodies

    bodies = asyncio.run(scenario())
    assert [b["status"]["conditions"][0]["status"] for b in bodies] == ["True"]


def test_condition_writes_of_one_group_go_out_one_at_a_time_latest_first() -> None:
    """Two patches of one PodGroup in flight at once can land in either order, and a False landing
    after True stays False (the e2e not-fitting gang stayed Unschedulable after binding whole, under
    load). While a patch is on the wire, the next waits, and only the latest one wanted is sent."""
    class Client:
        def __init__(self) -> None:
            self.sent: list[tuple[str, str]] = []
            self.in_flight = 0
            self.most_in_flight = 0
            self.release = asyncio.Event()

        async def patch(self, path: str, patch: Obj, content_type: str = "") -> Obj:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            c = patch["status"]["conditions"][0]
            self.sent.append((c["status"], c["message"]))
            if len(self.sent) == 1:
                await self.release.wait()  # the first patch is slow on the wire
            self.in_flight -= 1
            return {}

    async def scenario() -> Client:
        objs = Objects()
        objs.add(pod_group(min_count=1))
        api = Client()
        pl = gs.GangScheduling.create({}, _handle(objs, client=api))
        pl.write_condition("ns", "pg", "False", "Unschedulable", "first")
        await asyncio.sleep(0)  # the writer sends the first patch and waits on the wire
        pl.write_condition("ns", "pg", "False", "Unschedulable", "second")
        pl.write_condition("ns", "pg", "True", "Scheduled", "")
        api.release.set()
        await asyncio.wait_for(asyncio.gather(*pl._writes), 5)
        assert pl._condition_writers == {} and pl._condition_wanted == {}
        return api

    api = asyncio.run(scenario())
    assert api.sent == [("False", "first"), ("True", "")]
    assert api.most_in_flight == 1


def test_the_members_come_from_one_listing_per_version_of_the_live_pods() -> None:
    """``pod_group_state`` per member of a gang listed every Pod of the cluster each time: an event or a
    cycle that asks about each of N members cost N x all Pods (5 s for a 1 000-member gang, an
    adversarial run). With the live lister (a ``VersionedLister``) the groups come from one listing
    until a Pod is stored or removed; the answers are those of a fresh listing."""
    from py_scheduler.app.client.lister import InformerLister
    from py_scheduler.app.client.reflector import ObjectStore
    from py_scheduler.cache.kinds import KINDS_BY_NAME

    store = ObjectStore()
    listed = [0]

    class Counting(InformerLister):
        def list(self, kind: str) -> Iterable[Obj]:
            listed[0] += kind == "Pod"
            return super().list(kind)

    def add(name: str, rv: int, group: str = "pg", phase: str = "Pending") -> None:
        p = pod(name, group=group, phase=phase)
        p["metadata"] = dict(p["metadata"], resourceVersion=str(rv))
        store.apply(KINDS_BY_NAME["Pod"], "MODIFIED" if name in added else "ADDED", p)
        added.add(name)

    added: set[str] = set()
    for i in range(50):
        add(f"m{i}", i + 1)
    add("other", 100, group="og")
    objects = LateObjects()
    pl = gs.GangScheduling.create({}, _handle(objects))
    objects.connect(Counting(store))
    for _ in range(3):
        assert all(pl.pod_group_state("ns", "pg").all_pods_count() == 50 for _ in range(50))
    assert pl.pod_group_state("ns", "og").all_pods_count() == 1
    assert listed[0] == 1
    add("m0", 200, phase="Succeeded")  # a new version of the Pods: listed again, the change seen
    assert pl.pod_group_state("ns", "pg").all_pods_count() == 49 and listed[0] == 2
    add("m50", 201)
    assert pl.pod_group_state("ns", "pg").all_pods_count() == 50 and listed[0] == 3
