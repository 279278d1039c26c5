"""Network faults between the leader and the API server (:mod:`tests.e2e.faults.netproxy`): the
leader reaches kube-apiserver only through the fault proxy, the standby directly.

A partition (every connection of the leader, established or new, carries nothing; nothing is closed)
while Pods are being bound: the leader's Bindings are fenced off at its renew deadline, before its
lease can expire, and it gives the Lease up (``lost leadership``) within a retry period and a renew
deadline, as client-go; the standby takes over and binds the rest, and when the network heals the
Bindings the partition held are delivered late - none may bind a Pod twice. Then the fault suite's
invariants. A second scenario silences the watches of a replica (a blackholed watch)."""

from __future__ import annotations

import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.e2e.faults.netproxy import FaultProxy
from tests.e2e.faults.scenarios import STATS, FaultEnv, bound_count
from tests.e2e.helpers import unique_name, wait_for
from tests.e2e.scheduler_proc import SchedulerProcess


async def test_partitioned_leader_stops_binding_and_the_standby_takes_over(env: FaultEnv) -> None:
    up = urlsplit(env.testbed.server)
    proxy = FaultProxy(up.hostname or "127.0.0.1", int(up.port or 443))
    await proxy.start()
    try:
        for _ in range(3):
            await env.node()
        await env.node(gpu=True)
        logs = Path(env.testbed.dir) / "logs"
        kc = proxy.kubeconfig(Path(env.testbed.kubeconfig), logs / f"{unique_name('proxied')}.kubeconfig")
        leader = SchedulerProcess(kc, logs / f"{unique_name('net-leader')}.log", lease_name=env.lease, verbosity=4,
                                  extra_args=["--config", str(env.config_file())])
        leader.start()
        env.replicas.append(leader)
        await leader.wait_leading()
        standby = env.replica("net-standby")
        await standby.wait_log("informer caches synced")
        names = await env.create_all(env.burst_bodies(env.scale.burst, gpu_share=0.1), spread=2.0)
        await wait_for(lambda: bound_count(leader) >= 3, timeout=60, interval=0.02, what="the leader binding")
        proxy.blackhole()
        cut = time.monotonic()
        STATS.fault("network partition of the leader")
        lease_duration, renew_deadline, _ = env.scale.lease

        def stopped() -> bool:
            return "lost leadership" in leader.log()

        await wait_for(stopped, timeout=60, interval=0.05, what="the partitioned leader giving up")
        gave_up = time.monotonic() - cut
        await standby.wait_leading(timeout=60)
        took_over = time.monotonic() - cut
        STATS.failovers.append(took_over)
        # Its Bindings are fenced off renewDeadline after its last renewal began (is_leader_valid), before
        # the lease it last wrote can expire; it gives the Lease up (the log line) when a retryPeriod
        # plus renewDeadline passed without a renewal, as client-go's renew loop (+2 s: polling, load).
        _, _, retry_period = env.scale.lease
        assert gave_up < retry_period + renew_deadline + 2.0, (gave_up, renew_deadline)
        assert took_over >= lease_duration - retry_period, took_over  # not before its lease could expire
        more = await env.create_all(env.burst_bodies(10, prefix="flt-net"), spread=1.0)
        await env.wait_bound(more, timeout=120)
        bound_while_cut = bound_count(leader)
        proxy.heal()  # what the partition held (Bindings included) is delivered now
        await env.wait_bound(names, timeout=180)
        assert leader.alive(), leader.log()[-3000:]
        await env.check()
        print(f"partition: the leader gave up {gave_up:.1f} s after the cut, the standby led after {took_over:.1f} s "
              f"(lease {lease_duration:g} s, renew deadline {renew_deadline:g} s); the leader's binds: "
              f"{bound_while_cut} before the heal, {bound_count(leader)} after")
    finally:
        await proxy.close()


WATCH_IDLE = 8.0
"""``PY_SCHEDULER_WATCH_IDLE_TIMEOUT_SECONDS`` of the blackhole test (90 s by default: a bookmark
comes every minute; shortened here so that CI does not wait 90 s)."""


async def test_blackholed_watch_is_noticed_and_reopened(env: FaultEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every connection the replica has open goes silent (it stays open; new connections work): its
    watches must notice within the idle timeout and re-open from their resourceVersion, so a Node
    and a Pod pinned to it, both created during the silence, get scheduled."""
    monkeypatch.setenv("PY_SCHEDULER_WATCH_IDLE_TIMEOUT_SECONDS", f"{WATCH_IDLE:g}")
    up = urlsplit(env.testbed.server)
    proxy = FaultProxy(up.hostname or "127.0.0.1", int(up.port or 443))
    await proxy.start()
    try:
        await env.node()
        logs = Path(env.testbed.dir) / "logs"
        kc = proxy.kubeconfig(Path(env.testbed.kubeconfig), logs / f"{unique_name('proxied')}.kubeconfig")
        sched = SchedulerProcess(kc, logs / f"{unique_name('net-watch')}.log", lease_name=env.lease,
                                 leader_elect=False, verbosity=4, extra_args=["--config", str(env.config_file())])
        sched.start()
        env.replicas.append(sched)
        await sched.wait_log("informer caches synced")
        before = len(sched.log())
        held = proxy.blackhole_established()
        cut = time.monotonic()
        STATS.fault("blackholed watch connections", held)
        late = await env.node()
        name = await env.create(env.pod_body(unique_name("flt-late"), node_selector={"kubernetes.io/hostname": late}))
        noticed: dict[str, float] = {}

        def reopened() -> bool:
            text = sched.log()[before:]
            for kind in ("Node", "Pod"):
                if kind not in noticed and f"{kind} watch failed (" in text:
                    noticed[kind] = time.monotonic() - cut
            return len(noticed) == 2

        await wait_for(reopened, timeout=WATCH_IDLE + 30, interval=0.05, what="the silent watches noticed")
        await env.wait_bound([name], timeout=90)
        bound = time.monotonic() - cut
        assert max(noticed.values()) <= WATCH_IDLE + 5, noticed  # the idle timeout, plus polling and load
        assert "re-listing" not in sched.log()[before:]  # resumed from the resourceVersion: no gap, no LIST
        await env.check()
        print(f"blackholed watches ({held} connections): noticed after {noticed['Node']:.1f} s (Node) / "
              f"{noticed['Pod']:.1f} s (Pod) with a {WATCH_IDLE:g} s idle timeout; the Pod created during "
              f"the silence bound after {bound:.1f} s")
    finally:
        await proxy.close()
