"""Network faults through toxiproxy (:mod:`tests.e2e.faults.toxiproxy`) between one py-scheduler
replica and kube-apiserver, each during a seeded burst of CPU and GPU Pods, each followed by the
fault suite's invariants (no over-commit of any resource or GPU index, every Pod bound once or
pending with a reason, no crash) and the differential check of the replica's cache against a fresh
LIST (:mod:`tests.e2e.faults.cachediff`):

- latency 200 ms +- 100 ms on both directions (every chunk), with leader election on: no Lease lost;
- bandwidth limited to 64 KB/s each way;
- resets: every connection (the watches and the Bindings in flight) reset with an RST mid-burst;
- a lost Binding response: the Binding reaches the API server and succeeds, its response is lost (the
  connection reset as the answer comes back), the client fails; the Pod must stay bound exactly once,
  on the node the Binding named, and the cache must hold it there (assumed, then confirmed by the
  watch; never forgotten and scheduled elsewhere);
- a partition longer than the lease (the proxy disabled: connections closed, new ones refused):
  the leader gives the Lease up, a direct standby takes over, the old leader's cache catches up.

The silent partition and the blackholed watch are in :mod:`tests.e2e.faults.test_network` (a Python proxy
that can silence only the connections open now, which toxiproxy's toxics cannot: a toxic applies to
new connections as well).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from bench.bench_lib.soak import serving_port
from tests.e2e.faults import cachediff
from tests.e2e.faults.scenarios import STATS, FaultEnv, bound_count
from tests.e2e.faults.toxiproxy import Proxy, Toxiproxy
from tests.e2e.helpers import Testbed, unique_name, wait_for
from tests.e2e.scheduler_proc import SchedulerProcess

SEED = int(os.environ.get("FAULTS_SEED", "1"))


@pytest.fixture
async def toxi(testbed: Testbed) -> AsyncIterator[Toxiproxy]:
    """A toxiproxy server for one test (built into the bed's cache on first use)."""
    t = Toxiproxy(Path(testbed.dir) / "logs" / f"{unique_name('toxiproxy')}.log", seed=SEED)
    await t.start()
    try:
        yield t
    finally:
        await t.stop()


async def proxied(env: FaultEnv, toxi: Toxiproxy, name: str, *, leader_elect: bool = True,
                  extra_args: Sequence[str] = ()) -> tuple[SchedulerProcess, Proxy]:
    """A ``py-scheduler run`` replica (``--v 4``, ``extra_args``) whose only way to the API server is a
    new proxy; returned once its informers synced (and, with ``leader_elect``, once it leads)."""
    up = urlsplit(env.testbed.server)
    proxy = await toxi.proxy(f"{up.hostname or '127.0.0.1'}:{up.port or 443}")
    logs = Path(env.testbed.dir) / "logs"
    kc = proxy.kubeconfig(Path(env.testbed.kubeconfig), logs / f"{unique_name('toxic')}.kubeconfig")
    sched = SchedulerProcess(kc, logs / f"{unique_name(name)}.log", lease_name=env.lease, verbosity=4,
                             leader_elect=leader_elect, extra_args=["--config", str(env.config_file()), *extra_args])
    sched.start()
    env.replicas.append(sched)
    if leader_elect:
        await sched.wait_leading()
    await sched.wait_log("informer caches synced")
    return sched, proxy


async def check_all(env: FaultEnv, *scheds: SchedulerProcess) -> cachediff.DiffResult:
    """The suite's invariants, then each replica's cache against a fresh LIST (clean, nothing
    persistent), its scheduling queue empty (every Pod of these scenarios ends bound: none may
    linger in backoff), and the replica still alive. Returns the last replica's result."""
    await env.check()
    token = await cachediff.debug_reader_token(env.api)
    res = cachediff.DiffResult()
    for sched in scheds:
        port = serving_port(sched)
        assert port is not None, sched.log()[-2000:]

        async def dump(port: int = port) -> dict[str, Any]:
            return await cachediff.fetch_dump(port, token)

        res = await cachediff.check_until_quiet(dump, env.api, timeout=30)
        assert res.clean and not res.persistent, (res.persistent, sorted(res.last)[:10])

        async def queue_empty(dump: Any = dump) -> dict[str, int] | None:  # none queued or in flight
            q: dict[str, int] = (await dump())["queue"]
            return q if not any(q.get(k) for k in ("active", "backoff", "unschedulable", "in_flight")) else None

        await wait_for(queue_empty, timeout=15, interval=0.2, what="the replica's scheduling queue empty")
        assert sched.alive(), sched.log()[-3000:]
    return res


async def gpu_cluster(env: FaultEnv) -> None:
    for _ in range(2):
        await env.node()
    for _ in range(2):
        await env.node(gpu=True)


async def burst_under_toxic(env: FaultEnv, toxi: Toxiproxy, name: str, type_: str, label: str, *,
                            gpu_share: float, gpu_budget: int,
                            **attrs: int) -> tuple[SchedulerProcess, Proxy, list[str], float]:
    """:func:`gpu_cluster`, a leading replica behind a proxy whose toxic ``type_`` (``attrs``) bites both
    ways (the fault ``label`` in the suite's stats), then a seeded burst (``gpu_share`` of GPU Pods, at
    most ``gpu_budget`` GPUs) waited bound. ``(replica, proxy, Pod names, seconds to bound them all)``."""
    await gpu_cluster(env)
    sched, proxy = await proxied(env, toxi, name)
    await proxy.add(type_, "downstream", **attrs)
    await proxy.add(type_, "upstream", **attrs)
    STATS.fault(label)
    start = time.monotonic()
    names = await env.create_all(env.burst_bodies(env.scale.burst, gpu_share=gpu_share, gpu_budget=gpu_budget),
                                 spread=1.0)
    await env.wait_bound(names, timeout=120)
    return sched, proxy, names, time.monotonic() - start


async def created_to_bound(env: FaultEnv, body: dict[str, Any], timeout: float) -> float:
    """Seconds from creating the Pod ``body`` to seeing it bound (at most ``timeout``)."""
    start = time.monotonic()
    name = await env.create(body)
    await env.wait_bound([name], timeout=timeout)
    return time.monotonic() - start


async def toxic_round(env: FaultEnv, sched: SchedulerProcess, proxy: Proxy, names: list[str], type_: str,
                      attrs: dict[str, int], label: str, *, pods: int, prefix: str, spread: float,
                      hit_what: str, resumed_what: str) -> tuple[float, float]:
    """One round of toxic ``type_`` (``attrs``) on the server-to-client direction while ``pods`` more
    Pods (``prefix``, created over ``spread`` s, appended to ``names``) make the watches carry
    something, until a watch failed (``hit_what``); then the toxic is removed and the replica binds again
    (or nothing of ``names`` is left to bind: ``resumed_what``). ``(seconds from the toxic to the watch
    failure, seconds from its removal to binding again)``."""
    before = len(sched.log())
    async with proxy.toxic(type_, "downstream", **attrs):
        cut = time.monotonic()
        STATS.fault(label)
        names.extend(await env.create_all(env.burst_bodies(pods, prefix=prefix), spread=spread))

        def hit() -> bool:
            return " watch failed (" in sched.log()[before:]

        await wait_for(hit, timeout=30, interval=0.02, what=hit_what)
        noticed = time.monotonic() - cut
    healed, healed_at = time.monotonic(), len(sched.log())

    async def resumed() -> bool:
        if "Successfully bound" in sched.log()[healed_at:]:
            return True
        pods_now = await env.pods_now(names)
        return all(p.spec.node_name for p in pods_now.values())  # nothing left to bind

    await wait_for(resumed, timeout=60, interval=0.02, what=resumed_what)
    return noticed, time.monotonic() - healed


async def test_latency_and_jitter_during_a_gpu_burst(env: FaultEnv, toxi: Toxiproxy) -> None:
    """200 ms +- 100 ms on every chunk both ways while a burst of CPU and GPU Pods arrives: every Pod
    is bound (slower, never twice), the Lease is never lost, the cache equals the API."""
    sched, proxy, names, took = await burst_under_toxic(env, toxi, "toxic-latency", "latency",
                                                        "latency 200 +- 100 ms each way", gpu_share=0.3,
                                                        gpu_budget=12, latency=200, jitter=100)
    # the toxic bites: a Pod's creation reaches the replica through the watch (>= 100 ms) and its
    # Binding goes back (>= 100 ms) before the API shows it bound
    probe_took = await created_to_bound(env, env.pod_body(unique_name("flt-probe")), timeout=30)
    assert probe_took >= 0.2, probe_took
    await check_all(env, sched)  # under the latency still: the watch delivers, only later
    await proxy.clear()
    assert "lost leadership" not in sched.log()
    print(f"latency 200+-100 ms each way: {len(names)} pods bound in {took:.1f} s "
          f"({bound_count(sched)} binds by the replica); one Pod alone: created to bound in {probe_took:.2f} s")


async def test_bandwidth_limit_during_a_burst(env: FaultEnv, toxi: Toxiproxy) -> None:
    """64 KB/s each way while a burst arrives (the watch events and the Bindings share it)."""
    sched, proxy, names, took = await burst_under_toxic(env, toxi, "toxic-bandwidth", "bandwidth",
                                                        "bandwidth 64 KB/s each way", gpu_share=0.2,
                                                        gpu_budget=8, rate=64)
    # the toxic bites: a Pod carrying 128 KB of annotations reaches the replica at 64 KB/s (its
    # watch event alone takes >= 2 s) before it can be bound
    probe_took = await created_to_bound(
        env, env.pod_body(unique_name("flt-big"), annotations={"e2e/padding": "x" * 128 * 1024}), timeout=60)
    assert probe_took >= 1.8, probe_took
    await check_all(env, sched)
    await proxy.clear()
    assert "lost leadership" not in sched.log()
    print(f"bandwidth 64 KB/s each way: {len(names)} pods bound in {took:.1f} s; a 128 KB Pod: created to "
          f"bound in {probe_took:.1f} s")


async def test_connection_resets_mid_burst(env: FaultEnv, toxi: Toxiproxy) -> None:
    """While a burst is being bound, every connection that carries anything towards the replica is
    reset (RST) - the watches and the requests in flight, new connections too - twice, each time
    until a watch failed (3 more Pods created under the toxic make sure the watches carry something):
    the watches resume from their resourceVersion, failed requests are retried, failed Bindings are
    forgotten and the Pods requeued; every Pod ends bound once."""
    await gpu_cluster(env)
    sched, proxy = await proxied(env, toxi, "toxic-reset", leader_elect=False)
    names = await env.create_all(env.burst_bodies(env.scale.burst, gpu_share=0.2, gpu_budget=8), spread=6.0)
    await wait_for(lambda: bound_count(sched) >= 3, timeout=60, interval=0.02, what="the replica binding")
    recovered: list[float] = []
    detected: list[float] = []
    for _ in range(2):
        noticed, healed = await toxic_round(env, sched, proxy, names, "reset_peer", {"timeout": 0},
                                            "connection resets (reset_peer)", pods=3, prefix="flt-reset",
                                            spread=0.0, hit_what="a watch reset",
                                            resumed_what="binding again after the resets")
        detected.append(noticed)
        recovered.append(healed)
    await env.wait_bound(names, timeout=120)
    await check_all(env, sched)
    text = sched.log()
    failed = len(re.findall(r"Failed to bind pod", text))
    retried = len(re.findall(r"retrying (?:POST|PATCH|PUT|GET|DELETE) ", text))
    watch_failures = len(re.findall(r" watch failed \(", text))
    print(f"resets: {len(names)} pods bound once; {watch_failures} watch failures, {retried} requests retried, "
          f"{failed} Bindings failed (forgotten, requeued); a watch reset {[round(d, 2) for d in detected]} s "
          f"after the toxic; binding again {[round(r, 2) for r in recovered]} s after each heal")


async def test_blackhole_then_cut_mid_stream_while_bindings_flow(env: FaultEnv, toxi: Toxiproxy) -> None:
    """Two faults on the server-to-client direction while Bindings flow (the other direction delayed
    1 s so that some Bindings are always in flight), each until a watch failed
    (5 Pods created under the toxic so that the watches carry something): ``timeout`` 2 s (every
    answer and watch event dropped, each connection, new ones too, closed 2 s after the toxic began on
    it: Bindings that reached the server lose their responses), then ``limit_data`` 8 KB (each
    connection cut with a FIN after 8 KB more from the server: mid TLS record, mid watch event or
    response). The watches resume, lost Binding responses end in 409 "already assigned" and the
    informer's update, every Pod bound once, the cache equals the API."""
    await gpu_cluster(env)
    sched, proxy = await proxied(env, toxi, "toxic-cut", leader_elect=False)
    await proxy.add("latency", "upstream", latency=1000)  # each Binding ~1 s in the proxy: some always in flight
    names = await env.create_all(env.burst_bodies(env.scale.burst, gpu_share=0.2, gpu_budget=8), spread=4.0)
    await wait_for(lambda: bound_count(sched) >= 3, timeout=60, interval=0.02, what="the replica binding")
    figures: list[str] = []
    for type_, attrs, label in (("timeout", {"timeout": 2000}, "blackhole (timeout 2 s)"),
                                ("limit_data", {"bytes": 8192}, "connections cut after 8 KB (limit_data)")):
        noticed, healed = await toxic_round(env, sched, proxy, names, type_, attrs, label, pods=5,
                                            prefix="flt-cut", spread=1.0, hit_what=f"a watch failing under {label}",
                                            resumed_what=f"binding again after {label}")
        figures.append(f"{label}: a watch failed {noticed:.2f} s after the toxic, binding again "
                       f"{healed:.2f} s after its removal")
    await proxy.clear()
    await env.wait_bound(names, timeout=120)
    await check_all(env, sched)
    text = sched.log()
    lost = len(re.findall(r"is already assigned to node", text))
    assert lost >= 1, "no Binding lost its response: the scenario did not test what it says"
    print(f"{'; '.join(figures)}; {len(names)} pods bound once, {lost} lost Binding responses (409 on the retry), "
          f"{len(re.findall(r'retrying (?:POST|PATCH|PUT|GET|DELETE) ', text))} requests retried")


@pytest.mark.parametrize("writes", ["--no-request-process", "--request-process"],
                         ids=["one-process", "request-process"])
async def test_lost_binding_response_binds_once(env: FaultEnv, toxi: Toxiproxy, writes: str) -> None:
    """The Binding reaches the API server and succeeds; its response never arrives (the connection
    is reset as the answer comes back). The replica sees a failed request, retries it (409: already
    assigned) or forgets the Pod: either way the Pod is bound exactly once, to the node of the first
    Binding, and the cache ends with it there (the watch's update wins), not elsewhere.

    How the response is lost at the right moment: the client-to-server direction is delayed 3 s, so
    once the replica started scheduling the Pod its Binding sits 3 s in the proxy; a ``reset_peer``
    toxic on the server-to-client direction is added meanwhile, and the Binding's answer (and the
    watch event of the Pod's new nodeName) resets their connections. With ``--request-process`` the
    Binding goes out from the writes' own process, once it said hello, on its own connection."""
    await gpu_cluster(env)
    sched, proxy = await proxied(env, toxi, "toxic-lostbind", leader_elect=False, extra_args=[writes])
    if writes == "--request-process":
        await sched.wait_log("API writes go out from process")
    # one Pod bound normally first: the path works (and the connection the Binding will take is open)
    warm = await env.create(env.pod_body(unique_name("flt-warm")))
    await env.wait_bound([warm], timeout=60)
    async with proxy.toxic("latency", "upstream", latency=3000):
        before = len(sched.log())
        name = await env.create(env.pod_body(unique_name("flt-lost"), cpu="100m", gpus=2,
                                             annotations={"gpu-scheduler/gpu-memory-gb": "40"}))
        await wait_for(lambda: f"Attempting to schedule pod pod=default/{name}" in sched.log()[before:],
                       timeout=30, interval=0.01, what="the replica scheduling the pod")
        async with proxy.toxic("reset_peer", "downstream", timeout=0):
            STATS.fault("lost Binding response")
            bound = await env.wait_bound([name], timeout=30)
            first_node = bound[name].spec.node_name
            bound_at = time.monotonic()

            def failed() -> bool:
                return f"/pods/{name}/binding" in sched.log()[before:]

            # the request failed on the client (a debug ``retrying POST .../binding`` line, or the
            # cycle's ``Failed to bind``): the response was lost, not delivered late
            await wait_for(lambda: failed() and ("retrying POST" in sched.log()[before:]
                                                 or f"Failed to bind pod pod=default/{name}" in sched.log()),
                           timeout=60, interval=0.05, what="the lost response noticed")
            noticed = time.monotonic() - bound_at
    assert "Successfully bound pod to node pod=default/" + name not in sched.log()[before:], \
        "the response was not lost"

    pods = await env.wait_bound([name], timeout=30)
    assert pods[name].spec.node_name == first_node
    res = await check_all(env, sched)
    # the cache holds the Pod bound on first_node, nowhere else (cachediff compared it with the LIST)
    held = [p for p in res.dump["cache"]["pods"].values() if p["pod"] == f"default/{name}"]
    assert [(p["node"], p["assumed"]) for p in held] == [(first_node, False)], held
    events = await env.core.list_namespaced_event("default", field_selector=f"involvedObject.name={name}")
    scheduled = [e for e in events.items if e.reason == "Scheduled"]
    assert len(scheduled) <= 1, [e.message for e in scheduled]
    tail = sched.log()[before:]
    lines = [ln for ln in tail.splitlines() if name in ln]
    final = (await env.pods_now([name]))[name]  # after the failure handling's status patch
    assert final.spec.node_name == first_node
    conds = {c.type: (c.status, c.reason) for c in (final.status.conditions or [])}
    print(f"lost Binding response: bound to {first_node}; noticed {noticed:.1f} s after; conditions {conds}; "
          f"replica log: {lines[-6:]}")


async def test_partition_by_a_disabled_proxy(env: FaultEnv, toxi: Toxiproxy) -> None:
    """The leader's proxy disabled mid-burst (every connection closed, new ones refused: a partition
    the client sees at once, unlike the silent one of ``test_network``), longer than the lease: the
    leader gives the Lease up, the standby (direct) takes over and binds the rest; once the proxy is
    enabled again the old leader's watches reconnect and its cache (a standby's, still kept) equals
    the API."""
    await gpu_cluster(env)
    leader, proxy = await proxied(env, toxi, "toxic-partition")
    standby = env.replica("toxic-standby")
    await standby.wait_log("informer caches synced")
    names = await env.create_all(env.burst_bodies(env.scale.burst, gpu_share=0.2, gpu_budget=8), spread=3.0)
    await wait_for(lambda: bound_count(leader) >= 3, timeout=60, interval=0.02, what="the leader binding")
    await proxy.disable()
    cut = time.monotonic()
    STATS.fault("partition (toxiproxy disabled)")
    await wait_for(lambda: "lost leadership" in leader.log(), timeout=60, interval=0.05,
                   what="the partitioned leader giving up")
    gave_up = time.monotonic() - cut
    await standby.wait_leading(timeout=60)
    took_over = time.monotonic() - cut
    STATS.failovers.append(took_over)
    lease_duration, renew_deadline, retry_period = env.scale.lease
    assert gave_up < retry_period + renew_deadline + 2.0, gave_up
    assert took_over >= lease_duration - retry_period, took_over
    await env.wait_bound(names, timeout=120)
    await proxy.enable()
    healed = time.monotonic()
    token = await cachediff.debug_reader_token(env.api)
    port = serving_port(leader)
    assert port is not None

    async def caught_up() -> bool:  # every Pod bound in the old leader's cache
        held = {p["pod"] for p in (await cachediff.fetch_dump(port, token))["cache"]["pods"].values()
                if not p["assumed"]}
        return {f"default/{n}" for n in names} <= held

    await wait_for(caught_up, timeout=60, interval=0.1, what="the old leader's cache catching up")
    caught = time.monotonic() - healed
    await check_all(env, leader, standby)  # the old leader (now a standby) equals the API too
    print(f"partition (proxy disabled): the leader gave up {gave_up:.1f} s after the cut, the standby led after "
          f"{took_over:.1f} s; the old leader's cache held every bound Pod {caught:.1f} s after the heal")
