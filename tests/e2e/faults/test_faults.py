"""Fault scenarios on the real test bed, each with a burst of Pods in flight; every scenario ends with
the invariants of :mod:`tests.e2e.faults.invariants` (no overcommit, GPU indices unique, every Pod
bound once or pending with a reason, no crash) and most with a leak probe (every Node asked for
whole once the scenario's Pods are gone).

Sizes come from ``FAULTS_PROFILE`` (conftest): ``ci`` uses 6 s / 4 s / 1 s leases and bursts of 30,
``full`` (bench/faults) kube-scheduler's default 15 s / 10 s / 2 s and bursts of 120.
"""

from __future__ import annotations

import asyncio
import re

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from tests.e2e.faults.invariants import cluster_state
from tests.e2e.faults.scenarios import (
    STATS,
    FaultEnv,
    bound_count,
    etcd_compact,
    etcd_revision,
    log_after,
    now,
    wait_log_after,
)
from tests.e2e.helpers import unique_name, wait_for


def cpu_nodes_for(pods: int) -> int:
    """4-CPU Nodes enough for ``pods`` burst Pods (at most 500m each: 8 a Node) with room to spare."""
    return max(3, pods // 8 + 1)


async def test_leader_sigkill_repeatedly(env: FaultEnv) -> None:
    """SIGKILL the leader several times in a row while Pods keep arriving; a fresh standby is started
    after each kill so two replicas always compete. Failover = kill -> the standby logs that it leads."""
    per_round = max(env.scale.burst // 2, 10) if env.scale.kills <= 3 else max(env.scale.burst // 4, 10)
    for _ in range(cpu_nodes_for(per_round * env.scale.kills)):
        await env.node()
    for _ in range(2):
        await env.node(gpu=True)
    first = env.replica("flt-le")
    await first.wait_leading()
    env.replica("flt-le")
    names: list[str] = []
    for _ in range(env.scale.kills):
        leader = await env.leader()
        before = bound_count(leader)
        creating = asyncio.ensure_future(env.create_all(
            env.burst_bodies(per_round, gpu_share=0.15, gpu_budget=16 // env.scale.kills), spread=2.0))
        await wait_for(lambda leader=leader, before=before: bound_count(leader) >= before + per_round // 3,
                       timeout=60, interval=0.02, what="the leader binding part of the burst")
        env.kill(leader)
        killed_at = now()
        env.replica("flt-le")  # the next standby (it may win the Lease as well: same wait, jitter)

        def took_over() -> bool:  # every live replica never led before this kill
            return any("became the leader" in r.log() for r in env.replicas if r.alive())

        await wait_for(took_over, timeout=60, interval=0.02, what="a standby taking over")
        STATS.failovers.append(now() - killed_at)
        names += await creating
    await env.wait_bound(names, timeout=180)
    await env.check()
    await env.leak_probe()


@pytest.mark.parametrize("component", ["kube-apiserver", "etcd"])
async def test_control_plane_restart_mid_burst(env: FaultEnv, component: str) -> None:
    """Restart kube-apiserver (SIGTERM) or etcd (SIGKILL) while a burst is being bound; Pods created
    during the outage are retried by the test. All end bound once, without overcommit."""
    for _ in range(cpu_nodes_for(env.scale.burst)):
        await env.node()
    await env.node(gpu=True)
    sched = env.replica("flt-cp")
    await sched.wait_leading()
    bodies = env.burst_bodies(env.scale.burst, gpu_share=0.15)
    first, rest = bodies[: len(bodies) // 2], bodies[len(bodies) // 2:]
    names = await env.create_all(first)
    await wait_for(lambda: bound_count(sched) >= len(first) // 3, timeout=60, interval=0.02,
                   what="part of the burst bound")
    creating = asyncio.ensure_future(env.create_all(rest, retry_for=120, spread=3.0))
    if component == "kube-apiserver":
        await asyncio.to_thread(env.testbed.restart_apiserver)
    else:
        await asyncio.to_thread(env.testbed.restart_etcd, kill=True)
    STATS.fault(f"restart {component}")
    names += await creating
    await env.wait_bound(names, timeout=180)
    assert sched.alive()
    await env.check()
    await env.leak_probe()


async def test_watch_gap_410_gone(env: FaultEnv) -> None:
    """A watch gap the scheduler cannot bridge: freeze it (SIGSTOP), restart kube-apiserver (its watch
    connections drop), then - while no watch is open - delete a Node and a bound Pod, create Pods,
    compact etcd at the current revision, and resume it. Its watches resume from a compacted
    resourceVersion: 410 Gone, a re-list, and the reconcile must find what the watch never delivered.

    Afterwards the cache must have dropped what vanished: a Pod pinned to the deleted Node stays
    pending with a reason naming only existing Nodes, and a Pod that fits only in the room the deleted
    Pod held binds there."""
    doomed = await env.node()
    keeper = await env.node()
    sched = env.replica("flt-gap")
    await sched.wait_leading()
    # keeper: 3.5 of its 4 CPUs taken by one Pod (deleted during the gap); doomed: a small bound Pod
    big = await env.create(env.pod_body(unique_name("flt-big"), cpu="3500m",
                                        node_selector={"kubernetes.io/hostname": keeper}))
    small = await env.create(env.pod_body(unique_name("flt-small"), cpu="100m",
                                          node_selector={"kubernetes.io/hostname": doomed}))
    await env.wait_bound([big, small])
    offset = env.freeze(sched)
    STATS.fault("SIGSTOP scheduler (watch gap)")
    await asyncio.to_thread(env.testbed.restart_apiserver)
    STATS.fault("restart kube-apiserver")
    rev_before = etcd_revision(env.testbed)
    await env.delete_node(doomed)
    await env.delete_pod(big)
    # created during the gap: pinned to the deleted Node / needing the room `big` held
    pinned = await env.create(env.pod_body(unique_name("flt-pinned"), cpu="100m",
                                           node_selector={"kubernetes.io/hostname": doomed}))
    needs_room = await env.create(env.pod_body(unique_name("flt-room"), cpu="3"))
    # churn: the revision the scheduler resumes from is well behind the compaction point
    for _ in range(5):
        c = await env.create(env.pod_body(unique_name("flt-churn"), cpu="1m", node_selector={"none": "x"}))
        await env.delete_pod(c)
        env.pods.discard(c)
    rev = etcd_compact(env.testbed)
    assert rev > rev_before
    STATS.fault("etcd compaction")
    env.thaw(sched)
    await wait_log_after(sched, offset, "reconciled Node: 1 change(s) the watch had not delivered", timeout=90)
    await wait_log_after(sched, offset, "reconciled Pod:", timeout=60)
    got = await env.wait_bound([needs_room], timeout=90)
    assert got[needs_room].spec.node_name == keeper

    async def pinned_failed() -> str | None:
        p = await env.core.read_namespaced_pod(pinned, "default")
        assert not p.spec.node_name, f"{pinned} bound to {p.spec.node_name}"
        for c in p.status.conditions or []:
            if c.type == "PodScheduled" and c.status == "False":
                return str(c.message)
        return None

    msg = await wait_for(pinned_failed, timeout=60, what=f"{pinned} to fail scheduling")
    assert "didn't match Pod's node affinity/selector" in msg, msg
    # the deleted Node is gone from the cache: the message counts only the Nodes that exist
    existing = len((await env.core.list_node()).items)
    assert msg.startswith(f"0/{existing} nodes are available"), msg
    await env.check()
    await env.leak_probe()


async def test_nodes_and_pods_deleted_in_flight(env: FaultEnv) -> None:
    """Many Pods in flight while half the Nodes are deleted and some Pods are deleted (queued or
    binding). Every Pod ends bound to an existing Node, or - only when the Binding was already on its
    way when the Node went (upstream's race too) - to the deleted one, or pending with a reason."""
    nodes = [await env.node() for _ in range(6)]
    sched = env.replica("flt-del")
    await sched.wait_leading()
    for _ in range(env.scale.churn_rounds):
        bodies = env.burst_bodies(min(env.scale.burst * 2, 150))
        creating = asyncio.ensure_future(env.create_all(bodies, spread=2.0))
        await wait_for(lambda: bound_count(sched) >= 5, timeout=60, interval=0.01, what="binding started")
        victims_nodes = [n for n in nodes if n in env.nodes][: max(1, len(env.nodes) // 2)]
        victim_pods = [b["metadata"]["name"] for b in env.rng.sample(bodies, len(bodies) // 5)]

        async def delete_nodes(victims_nodes: list[str] = victims_nodes) -> None:
            for n in victims_nodes:
                await env.delete_node(n)
                STATS.fault("delete Node in flight")
                await asyncio.sleep(env.rng.random() * 0.3)  # staggered, not synchronisation

        async def delete_pods(victim_pods: list[str] = victim_pods) -> None:
            for p in victim_pods:
                await wait_for(lambda p=p: p in env.pods, timeout=30, what="pod created")
                try:
                    await env.delete_pod(p)
                except ApiException:
                    continue
                STATS.fault("delete Pod queued/binding")
                await asyncio.sleep(env.rng.random() * 0.1)

        await asyncio.gather(delete_nodes(), delete_pods())
        await creating
        for _ in range(2):  # keep some room for the next round
            nodes.append(await env.node())
    await env.check()
    await env.leak_probe()


async def test_external_bind_conflict(env: FaultEnv) -> None:
    """Pods are bound by someone else just before py-scheduler's Binding (its client is throttled to
    2 requests/s so its Bindings queue up): its Binding gets 409, it forgets the assumed Pod, keeps
    running, and the room it had assumed is free again (leak probe)."""
    nodes = [await env.node() for _ in range(3)]
    sched = env.replica("flt-409", leader_elect=False, qps=2, burst=1)
    await sched.wait_synced()
    names = await env.create_all([env.pod_body(unique_name("flt-409"), cpu="300m") for _ in range(10)])

    def all_attempted() -> bool:
        log = sched.log()
        return all(f"Attempting to schedule pod pod=default/{n}" in log for n in names)

    await wait_for(all_attempted, timeout=60, interval=0.01, what="every pod attempted")
    target = nodes[-1]

    async def bind(n: str) -> bool:
        body = client.V1Binding(metadata=client.V1ObjectMeta(name=n),
                                target=client.V1ObjectReference(api_version="v1", kind="Node", name=target))
        # without _preload_content the client raises nothing for a 409: the status says who was first
        resp = await env.core.create_namespaced_binding("default", body, _preload_content=False)
        try:
            if resp.status == 409:  # py-scheduler was first for this one
                return False
            assert resp.status < 300, (resp.status, await resp.text())
            return True
        finally:
            resp.release()

    won = sum(await asyncio.gather(*(bind(n) for n in names)))
    env.external_binds = won
    STATS.fault("external Binding race", len(names))
    assert won >= 1
    await env.wait_bound(names)
    lost = re.compile(r"(?:Failed to bind|Not binding) pod (?:pod=)?(\S+?)[ :].*already assigned")
    await wait_for(lambda: len(set(lost.findall(sched.log()))) >= won, timeout=60, interval=0.1,
                   what="py-scheduler to give up its Bindings that lost (409)")
    assert sched.alive()
    await env.check()
    await env.leak_probe()


@pytest.mark.parametrize("writes", ["--no-request-process", "--request-process"],
                         ids=["one-process", "request-process"])
async def test_frozen_leader_does_not_bind_after_losing_the_lease(env: FaultEnv, writes: str) -> None:
    """SIGSTOP the leader (client throttled, so Bindings are queued inside it) for longer than the
    lease; the standby takes over and binds everything; after SIGCONT the old leader binds nothing
    and sends no Binding: its fence refuses (log line) and no Scheduled event names it afterwards.

    With ``--request-process`` the writes' own process is not frozen with the scheduler: it goes on
    sending the queued Bindings until the leader fence's deadline (the renew deadline after the last
    renewal, before the standby can take the Lease), then refuses the rest. So the old leader may
    report Bindings that took while it was stopped; none may have lost a race to the new leader's
    (409 "already assigned"), which is what a Binding sent after the deadline would show."""
    for _ in range(cpu_nodes_for(env.scale.burst)):
        await env.node()
    a = env.replica("flt-stop-a", qps=4, burst=1, extra_args=[writes])
    await a.wait_leading()
    b = env.replica("flt-stop-b", qps=4, burst=1, extra_args=[writes])
    await b.wait_log("attempting to acquire leader lease")
    names = await env.create_all(env.burst_bodies(env.scale.burst))
    await wait_for(lambda: bound_count(a) >= 3, timeout=60, interval=0.01, what="the leader binding")
    env.freeze(a)
    bound_before = {m.group(1) for m in re.finditer(r"Successfully bound pod to node pod=default/(\S+)", a.log())}
    STATS.fault("SIGSTOP leader past its lease")
    stopped_at = now()
    await b.wait_leading(timeout=60)
    STATS.failovers.append(now() - stopped_at)
    await env.wait_bound(names, timeout=180)
    resumed = env.thaw(a)
    # the old leader notices: its renewal fails (the Lease is b's) and leadership is dropped
    await wait_log_after(a, resumed, "lost leadership", timeout=60)
    after = log_after(a, resumed)
    assert "already assigned" not in after and "Not binding pod" not in after, after[-3000:]
    if writes == "--request-process":
        bound_while_stopped = set(re.findall(r"Successfully bound pod to node pod=default/(\S+)", after))
        print(f"request process: {len(bound_while_stopped)} Binding(s) sent while the scheduler was stopped, "
              f"{after.count('not binding')} refused at the deadline")
        # and none took after the standby acquired the Lease (the apiserver stamps PodScheduled to the
        # second, rounded down, so this catches a Binding a second or more late, won or lost)
        lease = await client.CoordinationV1Api(env.api).read_namespaced_lease(env.lease, "kube-system")
        acquired = lease.spec.acquire_time
        assert acquired is not None and lease.spec.holder_identity == b.identity()
        core = client.CoreV1Api(env.api)
        for name in bound_while_stopped:
            pod = await core.read_namespaced_pod(name, "default")
            took = [c.last_transition_time for c in pod.status.conditions or [] if c.type == "PodScheduled"]
            assert took and took[0] <= acquired, (name, took, acquired)
        bound_before |= bound_while_stopped
    else:
        assert "Successfully bound" not in after, after[-3000:]
        # its queued Bindings were refused by the fence (the log line), not sent
        assert "leader election lease could have expired; not binding" in after, after[-3000:]
    _, _, evs = await cluster_state(env.api)
    by_a = {e["regarding"]["name"] for e in evs if e.get("reason") == "Scheduled"
            and e.get("reportingInstance") == a.identity()}
    assert by_a <= bound_before, by_a - bound_before
    await env.check()
