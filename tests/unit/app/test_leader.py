"""LeaderElector against an in-memory Lease store with a fake monotonic clock: acquisition,
takeover only after the observed record is lease-duration old, renewal, the bind fence, release."""

from __future__ import annotations

import asyncio

import pytest

from py_scheduler.app.client.leader import AlwaysLeader, LeaderElector
from py_scheduler.app.client.wire import KubeError
from tests.unit.app.fakes import FakeKube


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def elector(kube: FakeKube, identity: str, clock: Clock) -> LeaderElector:
    return LeaderElector(kube, "kube-system", "py-scheduler", identity, now=clock)  # type: ignore[arg-type]


async def test_acquires_absent_lease_and_renews_keeping_acquire_time() -> None:
    kube, clock = FakeKube(), Clock()
    a = elector(kube, "a", clock)
    assert await a.try_acquire_or_renew()
    spec = kube.leases["kube-system/py-scheduler"]["spec"]
    assert spec["holderIdentity"] == "a" and spec["leaseDurationSeconds"] == 15 and spec["leaseTransitions"] == 0
    acquired = spec["acquireTime"]
    clock.t += 2
    assert await a.try_acquire_or_renew()
    spec2 = kube.leases["kube-system/py-scheduler"]["spec"]
    assert spec2["acquireTime"] == acquired and spec2["leaseTransitions"] == 0


async def test_other_holder_is_respected_until_observed_record_expires() -> None:
    kube, clock = FakeKube(), Clock()
    a, b = elector(kube, "a", clock), elector(kube, "b", clock)
    assert await a.try_acquire_or_renew()
    assert not await b.try_acquire_or_renew()
    clock.t += 14.9
    assert not await b.try_acquire_or_renew()
    # a renews: b observes a new record and restarts its count
    assert await a.try_acquire_or_renew()
    clock.t += 1
    assert not await b.try_acquire_or_renew()
    clock.t += 15.1
    assert await b.try_acquire_or_renew()
    spec = kube.leases["kube-system/py-scheduler"]["spec"]
    assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 1


async def test_losing_a_write_race_does_not_take_the_lease() -> None:
    kube, clock = FakeKube(), Clock()
    a = elector(kube, "a", clock)
    assert await a.try_acquire_or_renew()
    original = kube.update_lease

    async def racing_update(namespace: str, name: str, lease: dict, timeout: float = 0) -> dict:  # type: ignore[type-arg]
        # b renews between a's GET and PUT: a's resourceVersion is stale now
        cur = kube.leases[f"{namespace}/{name}"]
        cur["spec"]["holderIdentity"] = "b"
        cur["metadata"]["resourceVersion"] = "999"
        return await original(namespace, name, lease, timeout)

    kube.update_lease = racing_update  # type: ignore[method-assign]
    clock.t += 2
    assert not await a.try_acquire_or_renew()
    assert kube.leases["kube-system/py-scheduler"]["spec"]["holderIdentity"] == "b"


async def test_fence_closes_renew_deadline_after_last_successful_renewal_start() -> None:
    kube, clock = FakeKube(), Clock()
    a = elector(kube, "a", clock)
    assert await a.try_acquire_or_renew()
    a.leading.set()
    assert a.is_leader_valid()
    kube.lease_error = KubeError(0, "ClientConnectorError", "connection refused")
    clock.t += 5
    assert not await a.try_acquire_or_renew()
    assert a.is_leader_valid()
    clock.t += 4.99
    assert a.is_leader_valid()
    clock.t += 0.02
    assert not a.is_leader_valid()  # 10 s after the renewal began: stop binding
    # a peer could take over only 15 s after it last observed a change
    kube.lease_error = None
    b = elector(kube, "b", clock)
    assert not await b.try_acquire_or_renew()


async def test_the_fences_deadline_is_told_at_each_renewal_and_at_the_loss() -> None:
    """What the request process's child checks its writes against (LeaderElector.on_valid_until)."""
    kube = FakeKube()
    told: list[float] = []
    a = LeaderElector(kube, "kube-system", "l", "a", lease_duration=1.5, renew_deadline=1.0,  # type: ignore[arg-type]
                      retry_period=0.1)
    a.on_valid_until = told.append
    stop = asyncio.Event()
    task = asyncio.ensure_future(a.run(stop))
    try:
        await asyncio.wait_for(a.leading.wait(), timeout=5)
        async with asyncio.timeout(5):
            while len(told) < 3:  # acquired (not yet leading: -inf), leading, a renewal
                await asyncio.sleep(0.01)
        assert told[0] == float("-inf")  # acquired, not leading yet
        assert told[-1] == a.valid_until() and told[-1] > told[1] > float("-inf")  # leading, then renewed
        kube.lease_error = KubeError(503, "ServiceUnavailable", "down")
        await asyncio.wait_for(a.lost.wait(), timeout=5)
        assert told[-1] == float("-inf")  # not leading: every write refused
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=5)


async def test_release_empties_holder() -> None:
    kube, clock = FakeKube(), Clock()
    a = elector(kube, "a", clock)
    assert await a.try_acquire_or_renew()
    a.leading.set()
    await a.release()
    spec = kube.leases["kube-system/py-scheduler"]["spec"]
    assert spec["holderIdentity"] == "" and spec["leaseDurationSeconds"] == 1
    assert not a.is_leader()
    # nobody holds it: a successor takes it at once
    b = elector(kube, "b", clock)
    assert await b.try_acquire_or_renew()
    assert kube.leases["kube-system/py-scheduler"]["spec"]["holderIdentity"] == "b"


async def test_run_leads_then_loses_on_renew_failures() -> None:
    kube = FakeKube()
    lost: list[bool] = []
    a = LeaderElector(kube, "kube-system", "l", "a", lease_duration=1.5, renew_deadline=1.0,  # type: ignore[arg-type]
                      retry_period=0.1, on_stopped_leading=lambda: lost.append(True))
    stop = asyncio.Event()
    task = asyncio.ensure_future(a.run(stop))
    try:
        await asyncio.wait_for(a.leading.wait(), timeout=5)
        assert a.is_leader_valid()
        kube.lease_error = KubeError(503, "ServiceUnavailable", "down")
        await asyncio.wait_for(a.lost.wait(), timeout=5)
        assert not a.is_leader() and not a.is_leader_valid() and lost == [True]
        kube.lease_error = None
        await asyncio.wait_for(a.leading.wait(), timeout=5)  # same identity: re-acquires at once
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=5)


def test_validates_timing() -> None:
    with pytest.raises(ValueError):
        LeaderElector(FakeKube(), "ns", "n", "a", lease_duration=10, renew_deadline=10)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        LeaderElector(FakeKube(), "ns", "n", "a", renew_deadline=2, retry_period=2)  # type: ignore[arg-type]


def test_always_leader() -> None:
    al = AlwaysLeader("x")
    assert al.is_leader() and al.is_leader_valid() and al.leading.is_set()
