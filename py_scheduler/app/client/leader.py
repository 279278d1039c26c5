"""Leader election on a ``coordination.k8s.io/v1`` Lease, with a fence for every bind.

Upstream: ``staging/src/k8s.io/client-go/tools/leaderelection/leaderelection.go``
(``tryAcquireOrRenew``: create the Lease or take it over once the holder's record has not changed
for ``leaseDurationSeconds`` of *our* clock; renew every ``retryPeriod``; leadership is lost when no
renewal succeeds within ``renewDeadline``; ``release`` empties ``holderIdentity`` and sets
``leaseDurationSeconds`` to 1 so a successor need not wait) and ``resourcelock/leaselock.go``
(the record <-> Lease spec mapping, optimistic concurrency on ``metadata.resourceVersion``).
Defaults are kube-scheduler's: lease 15 s, renew deadline 10 s, retry 2 s.

Fencing: :meth:`LeaderElector.is_leader_valid` is true only until ``renewDeadline`` after the start
of the last successful renewal (monotonic clock). Another replica can take the Lease over only
``leaseDuration`` after it last *observed* a change, which is later than that start; with the
defaults a replica that cannot renew stops binding at least 5 s before anyone else may start.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import random
import socket
import time
import uuid
from collections.abc import Callable

from py_scheduler.app.client.kube import Kube
from py_scheduler.app.client.wire import Conflict, KubeError
from py_scheduler.framework.objects import Obj

log = logging.getLogger("py_scheduler.leader")


JITTER_FACTOR = 1.2
"""client-go's ``JitterFactor`` for the acquire retry period."""


def new_identity() -> str:
    """``hostname_<uuid>``, as kube-scheduler's ``id := hostname + "_" + uuid``."""
    return f"{socket.gethostname()}_{uuid.uuid4()}"


def micro_time(t: dt.datetime | None = None) -> str:
    """A ``metav1.MicroTime`` string (RFC 3339 with microseconds, UTC)."""
    t = t or dt.datetime.now(dt.UTC)
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class AlwaysLeader:
    """Stand-in when leader election is disabled: always leading, never fenced."""

    identity: str

    def __init__(self, identity: str) -> None:
        self.identity = identity
        self.leading = asyncio.Event()
        self.leading.set()

    def is_leader(self) -> bool:
        return True

    def is_leader_valid(self) -> bool:
        return True

    def valid_until(self) -> float:
        return float("inf")

    async def run(self, stop: asyncio.Event) -> None:
        await stop.wait()

    async def release(self) -> None:
        return None


class LeaderElector:
    """Acquire and keep the Lease ``namespace/name`` as ``identity``.

    Args:
        kube: the API adapter; in the live process a client of its own (``Kube.derive("leader-election")``:
            own connection pool and rate limiter, as upstream's ``resourcelock.NewFromKubeconfig``), so
            the scheduler's backlog of writes never delays a renewal past ``renew_deadline``
            (``tests/e2e/test_lease_starvation.py``).
        lease_duration, renew_deadline, retry_period: seconds (15, 10, 2 by default).
        on_started_leading / on_stopped_leading: optional callbacks (no arguments).
        now: monotonic clock (seconds).

    Attributes:
        leading: set while this replica holds the Lease.
        lost: set each time leadership is lost (cleared when it is acquired again).
    """

    def __init__(self, kube: Kube, namespace: str, name: str, identity: str, *, lease_duration: float = 15.0,
                 renew_deadline: float = 10.0, retry_period: float = 2.0,
                 on_started_leading: Callable[[], None] | None = None,
                 on_stopped_leading: Callable[[], None] | None = None,
                 now: Callable[[], float] = time.monotonic) -> None:
        if lease_duration <= renew_deadline:
            raise ValueError("leaseDuration must be greater than renewDeadline")
        if renew_deadline <= JITTER_FACTOR * retry_period:
            raise ValueError("renewDeadline must be greater than retryPeriod*JitterFactor")
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.on_started_leading = on_started_leading
        self.on_stopped_leading = on_stopped_leading
        self._now = now
        self.leading = asyncio.Event()
        self.lost = asyncio.Event()
        self._observed_spec: Obj | None = None
        self._observed_time = 0.0
        self._last_renew = float("-inf")
        self.on_valid_until: Callable[[float], None] | None = None
        """Told :meth:`valid_until` each time it changes (a renewal, leadership gained or lost): the
        request process's child checks its writes against the latest."""

    # -- state -------------------------------------------------------------------------------------
    def is_leader(self) -> bool:
        return self.leading.is_set()

    def is_leader_valid(self) -> bool:
        """True while leading and within ``renew_deadline`` of the last successful renewal's start."""
        return self.leading.is_set() and self._now() < self._last_renew + self.renew_deadline

    def valid_until(self) -> float:
        """The clock's time (``now``: ``CLOCK_MONOTONIC`` seconds) from which :meth:`is_leader_valid`
        is false unless the Lease is renewed first (-inf while not leading)."""
        return self._last_renew + self.renew_deadline if self.leading.is_set() else float("-inf")

    def holder(self) -> str:
        """The holder identity last observed ("" when none)."""
        return str((self._observed_spec or {}).get("holderIdentity") or "")

    # -- one attempt -------------------------------------------------------------------------------
    def _record(self, now_wall: dt.datetime, acquire: str | None, transitions: int) -> Obj:
        t = micro_time(now_wall)
        return {"holderIdentity": self.identity, "leaseDurationSeconds": round(self.lease_duration),
                "acquireTime": acquire or t, "renewTime": t, "leaseTransitions": transitions}

    async def try_acquire_or_renew(self, timeout: float | None = None) -> bool:
        """``tryAcquireOrRenew``: one attempt; True when we hold the Lease afterwards."""
        start = self._now()
        to = timeout if timeout is not None else max(self.retry_period, 1.0)
        now_wall = dt.datetime.now(dt.UTC)
        try:
            lease = await self.kube.get_lease(self.namespace, self.name, timeout=to)
            if lease is None:
                spec = self._record(now_wall, None, 0)
                body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                        "metadata": {"name": self.name, "namespace": self.namespace}, "spec": spec}
                created = await self.kube.create_lease(self.namespace, body, timeout=to)
                self._observe(created.get("spec") or spec, start)
                self._last_renew = start
                self._changed()
                return True
            old = lease.get("spec") or {}
            if old != self._observed_spec:
                self._observe(old, self._now())
            holder = str(old.get("holderIdentity") or "")
            duration = float(old.get("leaseDurationSeconds") or self.lease_duration)
            if holder and holder != self.identity and self._observed_time + duration > self._now():
                log.debug("lock is held by %s and has not yet expired", holder)
                return False
            if holder == self.identity:
                spec = self._record(now_wall, old.get("acquireTime"), int(old.get("leaseTransitions") or 0))
            else:
                spec = self._record(now_wall, None, int(old.get("leaseTransitions") or 0) + 1)
            body = dict(lease)
            body["spec"] = {**old, **spec}
            updated = await self.kube.update_lease(self.namespace, self.name, body, timeout=to)
            self._observe(updated.get("spec") or spec, start)
            self._last_renew = start
            self._changed()
            return True
        except Conflict as exc:
            log.debug("lease update conflict: %s", exc.message)
            return False
        except KubeError as exc:
            log.warning("error retrieving/updating resource lock %s/%s: %s", self.namespace, self.name, exc)
            return False

    def _changed(self) -> None:
        if self.on_valid_until is not None:
            self.on_valid_until(self.valid_until())

    def _observe(self, spec: Obj, at: float) -> None:
        self._observed_spec = dict(spec)
        self._observed_time = at

    # -- loops ---------------------------------------------------------------------------------------
    async def _acquire(self, stop: asyncio.Event) -> bool:
        log.info("attempting to acquire leader lease %s/%s...", self.namespace, self.name)
        while not stop.is_set():
            if await self.try_acquire_or_renew():
                log.info("successfully acquired lease %s/%s", self.namespace, self.name)
                return True
            wait = self.retry_period * (1 + random.random() * (JITTER_FACTOR - 1))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=wait)
        return False

    async def _renew(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self.retry_period)
            if stop.is_set():
                return
            deadline = self._now() + self.renew_deadline
            renewed = False
            while not stop.is_set() and self._now() < deadline:
                remaining = deadline - self._now()
                if await self.try_acquire_or_renew(timeout=max(min(remaining, self.retry_period * 2), 0.5)):
                    renewed = True
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=min(self.retry_period, max(remaining, 0.0)))
            if not renewed and not stop.is_set():
                log.error("failed to renew lease %s/%s: timed out waiting for the condition",
                          self.namespace, self.name)
                return

    async def run(self, stop: asyncio.Event) -> None:
        """Campaign, lead, and campaign again after a loss, until ``stop`` is set."""
        while not stop.is_set():
            if not await self._acquire(stop):
                return
            self.lost.clear()
            self.leading.set()
            self._changed()
            if self.on_started_leading is not None:
                self.on_started_leading()
            try:
                await self._renew(stop)
            finally:
                if not stop.is_set():
                    self.leading.clear()
                    self._changed()
                    self.lost.set()
                    log.error("leaderelection lost")
                    if self.on_stopped_leading is not None:
                        self.on_stopped_leading()

    async def release(self) -> None:
        """Give the Lease up (clean shutdown): empty holder, ``leaseDurationSeconds: 1``."""
        if not self.leading.is_set():
            return
        self.leading.clear()
        self._changed()
        try:
            lease = await self.kube.get_lease(self.namespace, self.name, timeout=2.0)
            if lease is None or str((lease.get("spec") or {}).get("holderIdentity") or "") != self.identity:
                return
            t = micro_time()
            old = lease.get("spec") or {}
            lease["spec"] = {**old, "holderIdentity": "", "leaseDurationSeconds": 1, "acquireTime": t,
                             "renewTime": t, "leaseTransitions": int(old.get("leaseTransitions") or 0)}
            await self.kube.update_lease(self.namespace, self.name, lease, timeout=2.0)
            log.info("released lease %s/%s", self.namespace, self.name)
        except KubeError as exc:
            log.warning("failed to release lease %s/%s: %s", self.namespace, self.name, exc)
