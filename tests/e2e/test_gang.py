"""Gangs of GPU Pods (issue 22), py-scheduler and kube-scheduler v1.37.2 side by side, both with
``--feature-gates GenericWorkload=true``: a PodGroup (``scheduling.k8s.io/v1beta1``, gang policy
``minCount``) and its Pods (``spec.schedulingGroup.podGroupName``) on GPU Nodes of their own.

- a 4-Pod gang that fits: every member is bound, by both schedulers;
- a 4-Pod gang that does not fit (3 GPUs for 4 one-GPU members): no member is bound, by either;
  then a Node with one more GPU is added and the gang binds whole (the group is retried when the
  cluster changes, and no member was left holding a GPU: all 4 fit in exactly 4 GPUs).
- two 4-Pod gangs competing for 4 GPUs: one binds whole, the other holds nothing (no member bound
  nor nominated) and binds whole once the winner's Pods are deleted;
- members whose priority is not their PodGroup's: the group is refused whole (validatePodGroup);
- a rack-constrained gang lands in the one rack that holds it (TopologyAwareWorkloadScheduling), also
  when the other rack looks bigger by its Nodes' free GPUs but holds only 3 of 4 members (the placement
  algorithm tries the gang whole in each rack).

- a gang of high priority that fits only by evicting lower-priority Pods on two Nodes: both evicted
  (group preemption), then the gang binds;
- a gang with ``disruptionMode: All`` in the way of one higher-priority Pod: evicted whole, its member
  on the other Node too;
- a gang one of whose members is gated: held whole, silently (no event, no condition, nothing bound or
  nominated), also once that member is deleted; two 2-GPU Pods then bind (no GPU held).

py-scheduler alone: the leader killed while such a gang waits.

Each scheduler gets its own Nodes (a label and nodeSelector per run) and schedulerName, so the two
never race; what is compared is the outcome.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from tests.e2e.helpers import (
    PAUSE_IMAGE,
    Testbed,
    create_node,
    events_v1,
    pod_events,
    unique_name,
    wait_for,
    wait_for_failed_scheduling,
)
from tests.e2e.scheduler_proc import SchedulerProcess, stop_and_clean_up

GROUP_LABEL = "py-scheduler-e2e/gang-group"
L4 = {"nvidia.com/gpu.product": "NVIDIA-L4", "nvidia.com/gpu.memory": "23034", "nvidia.com/gpu.count": "2"}
NOT_BOUND_FOR = 15.0
"""Seconds a gang that cannot fit is watched to stay unbound (3 Permit timeouts of py-scheduler's run)."""


class GangBed:
    """Nodes, PodGroups, Pods and schedulers of one test."""

    def __init__(self, testbed: Testbed, api: client.ApiClient, tmp: Path) -> None:
        self.testbed = testbed
        self.api = api
        self.tmp = tmp
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.nodes: dict[str, int] = {}
        self.pods: list[str] = []
        self.groups: list[str] = []
        self.replicas: list[SchedulerProcess] = []
        self.kube_schedulers: list[str] = []

    def py_scheduler(self, scheduler_name: str, *, lease: str = "", replica: str = "",
                     permit_timeout: float = 5, gates: str = "GenericWorkload=true") -> SchedulerProcess:
        cfg = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
               "profiles": [{"schedulerName": scheduler_name,
                             "pluginConfig": [{"name": "GangScheduling",
                                               "args": {"permitTimeoutSeconds": permit_timeout}}]}]}
        path = self.tmp / f"{scheduler_name}.yaml"
        path.write_text(json.dumps(cfg))
        log = Path(self.testbed.dir) / "logs" / f"{scheduler_name}{replica}.log"
        p = SchedulerProcess(Path(self.testbed.kubeconfig), log,
                             lease_name=lease or unique_name("py-sched-gang"), verbosity=4,
                             extra_args=["--config", str(path), "--feature-gates", gates])
        p.start()
        self.replicas.append(p)
        return p

    def kube_scheduler(self, scheduler_name: str, gates: str = "GenericWorkload=true") -> None:
        self.kube_schedulers.append(scheduler_name)
        self.testbed.start_kube_scheduler(scheduler_name, config={"leaderElection": {"leaderElect": False},
                                                                  "profiles": [{"schedulerName": scheduler_name}]},
                                          wait_leading=False, restart=False,
                                          extra_args=[f"--feature-gates={gates}"])

    async def node(self, group: str, gpus: int, labels: dict[str, str] | None = None,
                   unschedulable: bool = False) -> str:
        name = unique_name("gang-gpu")
        self.nodes[name] = gpus
        await create_node(self.api, name, {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": str(gpus)},
                          labels={GROUP_LABEL: group, **L4, **(labels or {})}, unschedulable=unschedulable)
        return name

    async def pod_group(self, name: str, min_count: int, topology_key: str = "", disrupt_all: bool = False,
                        priority_class: str = "") -> None:
        self.groups.append(name)
        spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": min_count}}}
        if disrupt_all:
            spec["disruptionMode"] = {"all": {}}
        if priority_class:  # the Priority admission plugin resolves spec.priority from it
            spec["priorityClassName"] = priority_class
        if topology_key:
            spec["schedulingConstraints"] = {"topology": [{"key": topology_key}]}
        await self.custom.create_namespaced_custom_object(
            "scheduling.k8s.io", "v1beta1", "default", "podgroups",
            {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
             "metadata": {"name": name, "namespace": "default"}, "spec": spec})

    async def member(self, scheduler_name: str, group: str, node_group: str, *, gated: bool = False,
                     gpus: int = 1, priority_class: str = "") -> str:
        name = unique_name(f"{group}-m")
        self.pods.append(name)
        body: dict[str, Any] = {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"schedulerName": scheduler_name, "terminationGracePeriodSeconds": 0,
                     "schedulingGroup": {"podGroupName": group},
                     "nodeSelector": {GROUP_LABEL: node_group},
                     "containers": [{"name": "main", "image": PAUSE_IMAGE, "resources": {
                         "requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"nvidia.com/gpu": str(gpus)}}}]},
        }
        if gated:
            body["spec"]["schedulingGates"] = [{"name": "example.com/held"}]
        if priority_class:
            body["spec"]["priorityClassName"] = priority_class
        await self.core.create_namespaced_pod("default", body)
        return name

    async def victim(self, prefix: str, node: str, priority_class: str, gpus: int = 1) -> str:
        """A Pod of ``priority_class`` bound to ``node`` directly (``nodeName``), asking ``gpus`` GPUs (none
        for 0) and 100m CPU, deleted at once when evicted (grace period 0): its name."""
        name = unique_name(prefix)
        self.pods.append(name)
        resources: dict[str, Any] = {"requests": {"cpu": "100m"}}
        if gpus:
            resources["limits"] = {"nvidia.com/gpu": str(gpus)}
        await self.core.create_namespaced_pod("default", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": node, "priorityClassName": priority_class, "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "main", "image": PAUSE_IMAGE, "resources": resources}]}})
        return name

    async def bound(self, names: list[str]) -> dict[str, str]:
        pods = await self.core.list_namespaced_pod("default")
        wanted = set(names)
        return {p.metadata.name: p.spec.node_name for p in pods.items
                if p.metadata.name in wanted and p.spec.node_name}

    async def wait_all_bound(self, names: list[str], timeout: float, what: str) -> dict[str, str]:
        """Wait until every Pod of ``names`` is bound: ``name -> node``. Raises AssertionError naming
        ``what`` after ``timeout`` seconds."""

        async def all_bound() -> dict[str, str] | None:
            got = await self.bound(names)
            return got if len(got) == len(names) else None

        return await wait_for(all_bound, timeout=timeout, what=what)

    async def condition_message(self, name: str) -> str | None:
        """The PodGroup's PodGroupInitiallyScheduled message, or None."""
        pg = await self.custom.get_namespaced_custom_object("scheduling.k8s.io", "v1beta1", "default",
                                                            "podgroups", name)
        conds = (pg.get("status") or {}).get("conditions") or []
        c = next((c for c in conds if c.get("type") == "PodGroupInitiallyScheduled"), None)
        return str(c.get("message")) if c else None

    async def condition(self, name: str) -> tuple[str, str] | None:
        """The PodGroup's PodGroupInitiallyScheduled (status, reason), or None."""
        pg = await self.custom.get_namespaced_custom_object("scheduling.k8s.io", "v1beta1", "default",
                                                            "podgroups", name)
        conds = (pg.get("status") or {}).get("conditions") or []
        c = next((c for c in conds if c.get("type") == "PodGroupInitiallyScheduled"), None)
        return (c["status"], c["reason"]) if c else None

    async def close(self) -> None:
        for name in self.kube_schedulers:
            self.testbed.stop_kube_scheduler(name, kill=True)
        for g in self.groups:
            with contextlib.suppress(client.ApiException):
                await self.custom.delete_namespaced_custom_object("scheduling.k8s.io", "v1beta1", "default",
                                                                  "podgroups", g)
        await stop_and_clean_up(self.api, self.replicas, self.pods, self.nodes)
        # The PodGroupProtection admission plugin stamps a finalizer that only kube-controller-manager's
        # podgroupprotection controller removes, and it does not run for this module: without this the
        # groups stay Terminating on the bed, and a later fault test's cache diff finds them.
        for g in self.groups:
            with contextlib.suppress(client.ApiException):
                await self.custom.patch_namespaced_custom_object(
                    "scheduling.k8s.io", "v1beta1", "default", "podgroups", g, {"metadata": {"finalizers": None}},
                    _content_type="application/merge-patch+json")  # the client's default for a dict: JSON patch


@pytest.fixture
async def gbed(testbed: Testbed, api_client: client.ApiClient, tmp_path: Path) -> AsyncIterator[GangBed]:
    b = GangBed(testbed, api_client, tmp_path)
    try:
        yield b
    finally:
        await b.close()


async def _start_both(gbed: GangBed, gates: str = "GenericWorkload=true") -> dict[str, str]:
    """schedulerName per implementation ("py", "kube"), both running with ``gates``."""
    names = {"py": unique_name("gang-py"), "kube": unique_name("gang-ks")}
    sched = gbed.py_scheduler(names["py"], gates=gates)
    gbed.kube_scheduler(names["kube"], gates=gates)
    await sched.wait_leading()
    return names


async def test_gang_that_fits_binds_whole_side_by_side(gbed: GangBed) -> None:
    names = await _start_both(gbed)
    members: dict[str, list[str]] = {}
    for impl, sched in names.items():
        group = unique_name(f"fit-{impl}")
        for _ in range(2):
            await gbed.node(group, 2)
        await gbed.pod_group(group, 4)
        members[impl] = list(await asyncio.gather(*(gbed.member(sched, group, group) for _ in range(4))))
    for impl, pods in members.items():
        got = await gbed.wait_all_bound(pods, timeout=90, what=f"{impl}: the 4 members bound")
        per_node: dict[str, int] = {}
        for node in got.values():
            per_node[node] = per_node.get(node, 0) + 1
        assert sorted(per_node.values()) == [2, 2], (impl, got)
    assert "Traceback" not in gbed.replicas[0].log()


async def test_gang_that_does_not_fit_binds_nothing_then_whole_when_a_gpu_appears(gbed: GangBed) -> None:
    names = await _start_both(gbed)
    members: dict[str, list[str]] = {}
    groups: dict[str, str] = {}
    for impl, sched in names.items():
        group = groups[impl] = unique_name(f"nofit-{impl}")
        await gbed.node(group, 2)
        await gbed.node(group, 1)
        await gbed.pod_group(group, 4)
        members[impl] = list(await asyncio.gather(*(gbed.member(sched, group, group) for _ in range(4))))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + NOT_BOUND_FOR
    while loop.time() < deadline:
        for impl, pods in members.items():
            got = await gbed.bound(pods)
            assert not got, f"{impl} bound part of a gang that cannot fit: {got}"
        await asyncio.sleep(1.0)  # sampling period of a negative check, not synchronisation
    # Both mark the PodGroup as upstream's updatePodGroupCondition does.
    for impl in names:
        async def unschedulable(impl: str = impl) -> bool:
            return await gbed.condition(groups[impl]) == ("False", "Unschedulable")

        await wait_for(unschedulable, timeout=30, what=f"{impl}: PodGroupInitiallyScheduled False/Unschedulable")
    # One more GPU: the gang fits exactly, so it binds whole only if no member still holds a GPU.
    for impl in names:
        await gbed.node(groups[impl], 1)
    for impl, pods in members.items():
        await gbed.wait_all_bound(pods, timeout=120, what=f"{impl}: the gang bound whole after a GPU appeared")

        async def scheduled(impl: str = impl) -> bool:
            return await gbed.condition(groups[impl]) == ("True", "Scheduled")

        await wait_for(scheduled, timeout=30, what=f"{impl}: PodGroupInitiallyScheduled True/Scheduled")
    assert "Traceback" not in gbed.replicas[0].log()


async def test_two_gangs_competing_for_the_same_gpus_one_wins_whole(gbed: GangBed) -> None:
    """4 GPUs, two 4-member gangs created interleaved: no deadlock, exactly one gang binds whole and
    the other binds nothing (both schedulers)."""
    names = await _start_both(gbed)
    runs: dict[str, tuple[list[str], list[str]]] = {}
    for impl, sched in names.items():
        nodes = unique_name(f"race-{impl}")
        for _ in range(2):
            await gbed.node(nodes, 2)
        a, b = unique_name(f"race-{impl}-a"), unique_name(f"race-{impl}-b")
        await gbed.pod_group(a, 4)
        await gbed.pod_group(b, 4)
        pods = await asyncio.gather(*(gbed.member(sched, g, nodes) for _ in range(4) for g in (a, b)))
        runs[impl] = (list(pods[0::2]), list(pods[1::2]))
    for impl, (a_pods, b_pods) in runs.items():
        async def one_whole(a_pods: list[str] = a_pods, b_pods: list[str] = b_pods) -> tuple[int, int] | None:
            got_a, got_b = len(await gbed.bound(a_pods)), len(await gbed.bound(b_pods))
            return (got_a, got_b) if 4 in (got_a, got_b) else None

        got = await wait_for(one_whole, timeout=120, what=f"{impl}: one of the two gangs bound whole")
        assert sorted(got) == [0, 4], (impl, got)
        # The loser holds nothing: none of its members is nominated (reserved at Permit) either.
        loser = b_pods if got[0] == 4 else a_pods
        pods = await gbed.core.list_namespaced_pod("default")
        assert not [p.metadata.name for p in pods.items
                    if p.metadata.name in loser and (p.spec.node_name or p.status.nominated_node_name)], impl
        runs[impl] = (a_pods if got[0] == 4 else b_pods, loser)
    # The winner goes away: the loser wins whole on the freed GPUs.
    for impl, (winner, loser) in runs.items():
        for name in winner:
            await gbed.core.delete_namespaced_pod(name, "default", grace_period_seconds=0)

        async def loser_whole(loser: list[str] = loser) -> bool:
            return len(await gbed.bound(loser)) == 4

        await wait_for(loser_whole, timeout=120, what=f"{impl}: the other gang bound whole once GPUs freed")
    assert "Traceback" not in gbed.replicas[0].log()


async def test_members_whose_priority_is_not_their_groups_fail_whole_side_by_side(gbed: GangBed) -> None:
    """validatePodGroup: members of priority 1000 in a PodGroup of priority 0 (none set) are refused as
    a group before any Filter, though their Nodes have room: each member's FailedScheduling says so,
    the PodGroup is False/SchedulerError, nothing binds (both schedulers)."""
    names = await _start_both(gbed)
    sched_api = client.SchedulingV1Api(gbed.api)
    high = unique_name("gang-high")
    await sched_api.create_priority_class({"metadata": {"name": high}, "value": 1000})
    want = "all pods in a single pod group should have the same priority as the pod group's priority, got 1000 and 0"
    try:
        runs: dict[str, tuple[str, list[str]]] = {}
        for impl, sched in names.items():
            group = unique_name(f"prio-{impl}")
            await gbed.node(group, 2)
            await gbed.pod_group(group, 2)
            runs[impl] = (group, [await gbed.member(sched, group, group, priority_class=high) for _ in range(2)])
        for impl, (group, pods) in runs.items():
            for pod in pods:
                await wait_for_failed_scheduling(gbed.api, pod, want, timeout=60)

            async def refused(group: str = group) -> bool:
                return await gbed.condition(group) == ("False", "SchedulerError")

            await wait_for(refused, timeout=30, what=f"{impl}: PodGroupInitiallyScheduled False/SchedulerError")
            assert not await gbed.bound(pods), impl
    finally:
        await sched_api.delete_priority_class(high)
    assert "Traceback" not in gbed.replicas[0].log()


async def _unfit_gangs(gbed: GangBed, names: dict[str, str], priority_class: str,
                       members: dict[str, list[str]] | None = None, low_priority_class: str = "") -> dict[str, str]:
    """Per scheduler, a minCount-2 PodGroup of two one-GPU members on one one-GPU Node: its name (the
    members' names in ``members`` when given). With ``low_priority_class`` the Node also runs a Pod of
    that class that asks no GPU (a victim whose eviction does not help), and the PodGroup takes
    ``priority_class`` too."""
    groups: dict[str, str] = {}
    for impl, sched in names.items():
        group = groups[impl] = unique_name(f"pgpf-{impl}")
        node = await gbed.node(group, 1)
        if low_priority_class:
            await gbed.victim(f"pgpf-{impl}-low", node, low_priority_class, gpus=0)
        await gbed.pod_group(group, 2, priority_class=priority_class if low_priority_class else "")
        pods = [await gbed.member(sched, group, group, priority_class=priority_class) for _ in range(2)]
        if members is not None:
            members[impl] = pods
    return groups


async def _failed_scheduling_notes(gbed: GangBed, pods: list[str]) -> list[str] | None:
    """The latest FailedScheduling message of each of ``pods``, sorted; None until each has one."""
    out = []
    for pod in pods:
        notes = [m for r, m in await pod_events(gbed.api, pod) if r == "FailedScheduling"]
        if not notes:
            return None
        out.append(notes[-1])
    return sorted(out)


@pytest.mark.parametrize("case", ["no-victims", "preemption-never", "victims-do-not-help"])
async def test_a_gang_that_cannot_fit_reports_its_pod_group_post_filter_side_by_side(gbed: GangBed,
                                                                                    case: str) -> None:
    """A gang that does not fit, in a cluster with no lower-priority Pod, or whose members say
    preemptionPolicy Never, or where evicting the lower-priority Pod would not help: the PodGroup's
    condition message ends with what PodGroupPostFilter decided (``pod group preemption: No preemption
    victims found for incoming preemptor``; with Never, after DynamicResources' ``deallocation and
    deletion of ResourceClaims completed``; when victims do not help, that and the group algorithm's
    failure on the cluster without them) word for word as kube-scheduler writes it, and so does the
    FailedScheduling of the member that fit."""
    names = await _start_both(gbed)
    sched_api = client.SchedulingV1Api(gbed.api)
    pc = unique_name("gang-pc") if case != "no-victims" else ""
    low = unique_name("gang-low") if case == "victims-do-not-help" else ""
    if case == "preemption-never":  # a Pod's preemptionPolicy comes from its PriorityClass (admission)
        await sched_api.create_priority_class({"metadata": {"name": pc}, "value": 0, "preemptionPolicy": "Never"})
    elif pc:
        await sched_api.create_priority_class({"metadata": {"name": pc}, "value": 1000})
        await sched_api.create_priority_class({"metadata": {"name": low}, "value": 100})
    members: dict[str, list[str]] = {}
    try:
        groups = await _unfit_gangs(gbed, names, pc, members, low)
    finally:
        for name in (pc, low):
            if name:
                await sched_api.delete_priority_class(name)
    messages: dict[str, str] = {}
    for impl, group in groups.items():
        async def unschedulable(group: str = group) -> str | None:
            if await gbed.condition(group) != ("False", "Unschedulable"):
                return None
            return await gbed.condition_message(group)

        messages[impl] = await wait_for(unschedulable, timeout=60, what=f"{impl}: the PodGroup's Unschedulable message")
    tail = {"no-victims": "pod group preemption: No preemption victims found for incoming preemptor",
            "preemption-never": "deallocation and deletion of ResourceClaims completed, pod group preemption: not "
                                "eligible due to preemptionPolicy=Never.",
            "victims-do-not-help": "deallocation and deletion of ResourceClaims completed, pod group preemption: "
                                   "minCount (2) cannot be satisfied: 1 scheduled, 0 remaining"}[case]
    assert messages["kube"].endswith(tail), messages  # the case is what it says upstream
    assert messages["py"] == messages["kube"]
    # the members' own messages: the one that fit carries the group's message with the outcome appended
    notes = {impl: await wait_for(lambda pods=pods: _failed_scheduling_notes(gbed, pods), timeout=30,
                                  what=f"{impl}: the members' FailedScheduling")
             for impl, pods in members.items()}
    grouped = {impl: [n for n in got if n.startswith("pod group is unschedulable")] for impl, got in notes.items()}
    assert grouped["kube"] and grouped["kube"][0].endswith(tail), notes  # as upstream writes it
    assert grouped["py"] == grouped["kube"], notes  # the other member's FitError counts each bed's Nodes
    assert "Traceback" not in gbed.replicas[0].log()


async def test_a_gang_evicted_for_one_pod_goes_whole_side_by_side(gbed: GangBed) -> None:
    """Single-Pod preemption meeting a PodGroup with ``disruptionMode: {all: {}}``: a gang of two
    one-GPU members, bound one per one-GPU Node, and then a Pod of priority 1000 that needs one GPU.
    Making room on either Node evicts the whole gang, its member on the other Node too
    (``getCrossNodesVictims``); the Pod then binds. Both schedulers evict both members (py-scheduler
    evicted only the one on the chosen Node before)."""
    names = await _start_both(gbed)
    sched_api = client.SchedulingV1Api(gbed.api)
    high = unique_name("gang-evict")
    await sched_api.create_priority_class({"metadata": {"name": high}, "value": 1000})
    try:
        runs: dict[str, tuple[list[str], str]] = {}
        for impl, sched in names.items():
            group = unique_name(f"evict-{impl}")
            for _ in range(2):
                await gbed.node(group, 1)
            await gbed.pod_group(group, 2, disrupt_all=True)
            members = [await gbed.member(sched, group, group) for _ in range(2)]
            placed = await gbed.wait_all_bound(members, 60, f"{impl}: the gang bound")
            assert len(set(placed.values())) == 2, placed
            preemptor = unique_name(f"evict-{impl}-high")
            gbed.pods.append(preemptor)
            await gbed.core.create_namespaced_pod("default", {
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": preemptor, "namespace": "default"},
                "spec": {"schedulerName": sched, "priorityClassName": high, "terminationGracePeriodSeconds": 0,
                         "nodeSelector": {GROUP_LABEL: group},
                         "containers": [{"name": "main", "image": PAUSE_IMAGE, "resources": {
                             "requests": {"cpu": "100m"}, "limits": {"nvidia.com/gpu": "1"}}}]}})
            runs[impl] = (members, preemptor)
        for impl, (members, preemptor) in runs.items():
            await gbed.wait_all_bound([preemptor], 90, f"{impl}: the preemptor bound")

            async def gang_gone(members: list[str] = members) -> bool:
                pods = await gbed.core.list_namespaced_pod("default")
                left = {p.metadata.name for p in pods.items if not p.metadata.deletion_timestamp}
                return not left & set(members)

            await wait_for(gang_gone, timeout=60, what=f"{impl}: both members of the gang evicted")
    finally:
        await sched_api.delete_priority_class(high)
    assert "Traceback" not in gbed.replicas[0].log()


async def test_a_gang_preempts_lower_priority_pods_across_nodes_side_by_side(gbed: GangBed) -> None:
    """Group preemption (``PodGroupEvaluator``): a minCount-2 gang of priority 1000 whose two one-GPU
    members fit only once the priority-100 Pods holding the GPUs of both one-GPU Nodes are gone. Both
    schedulers evict both (each gets DisruptionTarget ``... higher priority podgroup`` and a Preempted
    event ``Preempted by podgroup <uid> on node cluster``), write the same FailedScheduling on the
    member not tried (the group's message), and then bind the gang, one member per Node. py-scheduler
    left the gang pending before."""
    names = await _start_both(gbed)
    sched_api = client.SchedulingV1Api(gbed.api)
    low, high = unique_name("gang-low"), unique_name("gang-high")
    await sched_api.create_priority_class({"metadata": {"name": low}, "value": 100})
    await sched_api.create_priority_class({"metadata": {"name": high}, "value": 1000})
    try:
        runs: dict[str, tuple[list[str], list[str]]] = {}
        for impl, sched in names.items():
            group = unique_name(f"gpre-{impl}")
            victims = []
            for _ in range(2):
                victims.append(await gbed.victim(f"gpre-{impl}-low", await gbed.node(group, 1), low))
            await gbed.pod_group(group, 2, priority_class=high)
            runs[impl] = ([await gbed.member(sched, group, group, priority_class=high) for _ in range(2)], victims)
        notes: dict[str, list[str]] = {}
        for impl, (members, victims) in runs.items():
            placed = await gbed.wait_all_bound(members, 90, f"{impl}: the gang bound after preempting")
            assert len(set(placed.values())) == 2, (impl, placed)
            pods = {p.metadata.name for p in (await gbed.core.list_namespaced_pod("default")).items}
            assert not pods & set(victims), impl
            preempted = []
            for v in victims:
                preempted += [m for r, m in await pod_events(gbed.api, v) if r == "Preempted"]
            assert len(preempted) == 2 and all(m.startswith("Preempted by podgroup ") and m.endswith(" on node cluster")
                                               for m in preempted), (impl, preempted)
            notes[impl] = []
            for pod in members:  # the FitError of the member tried counts each bed's Nodes: left out
                notes[impl] += [m for r, m in await pod_events(gbed.api, pod)
                                if r == "FailedScheduling" and not m.startswith("0/")]
        assert notes["kube"] == ["minCount (2) cannot be satisfied: 0 scheduled, 1 remaining"], notes
        assert notes["py"] == notes["kube"], notes
    finally:
        for pc in (low, high):
            await sched_api.delete_priority_class(pc)
    assert "Traceback" not in gbed.replicas[0].log()


async def test_a_gang_whose_members_keep_coming_while_it_preempts_binds_side_by_side(gbed: GangBed) -> None:
    """A minCount-2 gang of priority 1000 whose three one-GPU members are created back to back, on two
    one-GPU Nodes held by priority-100 Pods: its first cycle preempts both, and the third member
    arrives while the evictions run (held at PreEnqueue). Both schedulers then bind two members, one
    per Node, and leave the third pending. py-scheduler bound none before: the late member stayed
    gated and held the whole group."""
    names = await _start_both(gbed)
    sched_api = client.SchedulingV1Api(gbed.api)
    low, high = unique_name("gang-low"), unique_name("gang-high")
    await sched_api.create_priority_class({"metadata": {"name": low}, "value": 100})
    await sched_api.create_priority_class({"metadata": {"name": high}, "value": 1000})
    try:
        groups: dict[str, str] = {}
        for impl in names:
            group = groups[impl] = unique_name(f"gcome-{impl}")
            for _ in range(2):
                await gbed.victim(f"gcome-{impl}-low", await gbed.node(group, 1), low)
            await gbed.pod_group(group, 2, priority_class=high)
        members = {impl: [await gbed.member(sched, groups[impl], groups[impl], priority_class=high)
                          for _ in range(3)] for impl, sched in names.items()}
        for impl, pods in members.items():
            async def two_bound(pods: list[str] = pods) -> dict[str, str] | None:
                got = await gbed.bound(pods)
                return got if len(got) == 2 else None

            placed = await wait_for(two_bound, timeout=90, what=f"{impl}: two members bound after preempting")
            assert len(set(placed.values())) == 2, (impl, placed)
    finally:
        for pc in (low, high):
            await sched_api.delete_priority_class(pc)
    assert "Traceback" not in gbed.replicas[0].log()


async def test_a_gang_that_cannot_fit_is_retried_after_its_backoff_side_by_side(gbed: GangBed) -> None:
    """``AddAttemptedPodGroupIfNeeded``: a gang that does not fit goes back to the queue after its
    backoff (1, 2, 4 s...), not to wait for a cluster event: with nothing changing in the cluster,
    both schedulers try it a third time within 30 s (py-scheduler tried it once, then waited)."""
    names = await _start_both(gbed)
    members: dict[str, list[str]] = {}
    await _unfit_gangs(gbed, names, "", members)

    async def attempts(pods: list[str]) -> int:
        n = 0
        for ev in await events_v1(gbed.api):
            if ev.reason == "FailedScheduling" and ev.regarding and ev.regarding.name in pods:
                n += ev.series.count if ev.series else 1
        return n

    for impl, pods in members.items():
        async def thrice(pods: list[str] = pods) -> int | None:
            got = await attempts(pods)
            return got if got >= 6 else None  # two members, three attempts each

        await wait_for(thrice, timeout=30, what=f"{impl}: three attempts of the gang")
    assert "Traceback" not in gbed.replicas[0].log()


async def _incomplete_gang(gbed: GangBed, sched_name: str, prefix: str) -> tuple[str, str, str, list[str]]:
    """Two 2-GPU Nodes (node group ``<prefix>-...``), a minCount-4 PodGroup, one member held back by a
    scheduling gate (created first) and three queued one-GPU members (for ``sched_name``).
    ``(node group, PodGroup, held, members)``."""
    nodes = unique_name(prefix)
    for _ in range(2):
        await gbed.node(nodes, 2)
    group = unique_name(f"{prefix}-g")
    await gbed.pod_group(group, 4)
    held = await gbed.member(sched_name, group, nodes, gated=True)
    members = [await gbed.member(sched_name, group, nodes) for _ in range(3)]
    return nodes, group, held, members


async def test_incomplete_gang_is_held_whole_and_silent_side_by_side(gbed: GangBed) -> None:
    """Three members of a minCount-4 gang are queued; the fourth exists but is held back by a scheduling
    gate. A gated member gates its whole group (upstream's queue: "If any pod is gated, the whole entity
    is gated"): no member is bound nor nominated, none gets a FailedScheduling event and the PodGroup
    gets no condition, in both schedulers. The gated member is deleted (the group can no longer reach
    its minimum): still nothing, and two 2-GPU Pods, one per Node, bind (no GPU was held)."""
    names = await _start_both(gbed)
    runs: dict[str, tuple[str, str, str, list[str]]] = {}
    for impl, sched_name in names.items():
        runs[impl] = await _incomplete_gang(gbed, sched_name, f"held-{impl}")
    await gbed.replicas[0].wait_log(f"Pod group gated podGroup=default/{runs['py'][1]}")

    async def silent() -> None:
        for impl, (_nodes, group, _held, members) in runs.items():
            pods = await gbed.core.list_namespaced_pod("default")
            assert not [p.metadata.name for p in pods.items
                        if p.metadata.name in members and (p.spec.node_name or p.status.nominated_node_name)], impl
            assert await gbed.condition(group) is None, impl
            for m in members:
                assert not [r for r, _ in await pod_events(gbed.api, m) if r == "FailedScheduling"], (impl, m)

    loop = asyncio.get_running_loop()
    deadline = loop.time() + NOT_BOUND_FOR
    while loop.time() < deadline:
        await silent()
        await asyncio.sleep(1.0)  # sampling period of a negative check, not synchronisation
    fillers: list[str] = []
    for impl, (nodes, _group, held, _members) in runs.items():
        await gbed.core.delete_namespaced_pod(held, "default", grace_period_seconds=0)
        for _ in range(2):  # two 2-GPU Pods without a gang: they fit only if the gang holds nothing
            name = unique_name(f"held-fill-{impl}")
            gbed.pods.append(name)
            fillers.append(name)
            await gbed.core.create_namespaced_pod("default", {
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
                "spec": {"schedulerName": names[impl], "terminationGracePeriodSeconds": 0,
                         "nodeSelector": {GROUP_LABEL: nodes},
                         "containers": [{"name": "main", "image": PAUSE_IMAGE, "resources": {
                             "requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"nvidia.com/gpu": "2"}}}]}})
    await gbed.wait_all_bound(fillers, timeout=60, what="the 2-GPU Pods bound beside the incomplete gangs")
    await silent()
    assert "Traceback" not in gbed.replicas[0].log()


async def test_leader_killed_while_the_gang_waits(gbed: GangBed) -> None:
    """Three members of a minCount-4 gang are held by the leader (the fourth, held back by a scheduling
    gate, gates the group: nothing reserved); the leader is killed (SIGKILL). The standby takes the
    Lease; the gate is lifted and the whole gang binds in one group cycle, each GPU index once per Node."""
    sched_name = unique_name("gang-py")
    lease = unique_name("py-sched-gang-le")
    a = gbed.py_scheduler(sched_name, lease=lease, replica="-a", permit_timeout=120)
    await a.wait_leading()
    b = gbed.py_scheduler(sched_name, lease=lease, replica="-b", permit_timeout=120)
    await b.wait_log("attempting to acquire leader lease")
    _nodes, group, held, members = await _incomplete_gang(gbed, sched_name, "le")
    await a.wait_log(f"Pod group gated podGroup=default/{group}")
    a.kill()
    await b.wait_log("became the leader", timeout=60)
    assert not await gbed.bound(members), "a member bound before its gang was complete"
    await gbed.core.patch_namespaced_pod(held, "default", {"spec": {"schedulingGates": None}})
    got = await gbed.wait_all_bound([*members, held], timeout=90, what="the whole gang bound by the new leader")
    assert sorted(list(got.values()).count(n) for n in set(got.values())) == [2, 2], got
    pods = await gbed.core.list_namespaced_pod("default")
    indices: dict[str, list[str]] = {}
    for p in pods.items:
        if p.metadata.name in got:
            raw = (p.metadata.annotations or {}).get("gpu-scheduler/gpu-indices", "")
            indices.setdefault(p.spec.node_name, []).extend(raw.split(","))
    assert all(sorted(v) == ["0", "1"] for v in indices.values()), indices
    assert "Traceback" not in b.log()


RACK = "example.com/rack"
TOPOLOGY_GATES = "GenericWorkload=true,TopologyAwareWorkloadScheduling=true"


async def _rack_gang_side_by_side(gbed: GangBed, prefix: str, nodes: list[tuple[str, int, bool]], gpus: int,
                                  rack: str, timeout: float, what: str) -> None:
    """Both schedulers with TopologyAwareWorkloadScheduling on, each with Nodes of its own: ``nodes`` as
    ``(rack, GPUs, cordoned)`` (label :data:`RACK` ``<node group>-<rack>``), a minCount-4 PodGroup
    constrained to one rack and 4 members of ``gpus`` GPUs each. Each scheduler binds its gang whole
    (within ``timeout`` s; ``what`` names it) in ``rack``; py-scheduler logs no traceback."""
    names = await _start_both(gbed, TOPOLOGY_GATES)
    members: dict[str, list[str]] = {}
    racks: dict[str, dict[str, str]] = {}
    for impl, sched_name in names.items():
        node_group = unique_name(f"{prefix}-{impl}")
        racks[impl] = {}
        for node_rack, node_gpus, cordoned in nodes:
            name = await gbed.node(node_group, node_gpus, {RACK: f"{node_group}-{node_rack}"}, unschedulable=cordoned)
            racks[impl][name] = node_rack
        group = unique_name(f"{prefix}-{impl}-g")
        await gbed.pod_group(group, 4, RACK)
        members[impl] = list(await asyncio.gather(*(gbed.member(sched_name, group, node_group, gpus=gpus)
                                                    for _ in range(4))))
    for impl, pods in members.items():
        got = await gbed.wait_all_bound(pods, timeout=timeout, what=f"{impl}: {what}")
        assert {racks[impl][n] for n in got.values()} == {rack}, (impl, got)
    assert "Traceback" not in gbed.replicas[0].log()


async def test_topology_aware_gang_lands_in_the_one_rack_that_holds_it(gbed: GangBed) -> None:
    """TopologyAwareWorkloadScheduling on for both: rack a has 4 free GPUs on two Nodes, rack b 3 on two
    Nodes. A 4-member one-GPU gang with a rack constraint lands whole in rack a (without the constraint
    the default scoring would spread it over both racks)."""
    await _rack_gang_side_by_side(gbed, "topo", [("a", 2, False), ("a", 2, False), ("b", 2, False), ("b", 1, False)],
                                  gpus=1, rack="a", timeout=90, what="the topology-constrained gang bound")


async def test_topology_aware_gang_is_tried_whole_in_each_rack(gbed: GangBed) -> None:
    """TopologyAwareWorkloadScheduling on for both (``podGroupSchedulingPlacementAlgorithm``): 4 members
    of 2 GPUs each, minCount 4. Rack a holds 3 (Nodes of 4 and 2 GPUs, plus a cordoned 2-GPU Node: 8
    GPUs listed, 6 usable); rack b holds 5 (4 + 4 + 2 GPUs). Both schedulers try the gang whole in
    each rack and bind all 4 in rack b; none lands in rack a."""
    await _rack_gang_side_by_side(gbed, "place", [("a", 4, False), ("a", 2, False), ("a", 2, True),
                                                  ("b", 4, False), ("b", 4, False), ("b", 2, False)],
                                  gpus=2, rack="b", timeout=60, what="the gang bound whole in one rack")
