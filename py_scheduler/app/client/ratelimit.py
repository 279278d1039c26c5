"""The client's token bucket (client-go ``util/flowcontrol``'s ``tokenBucketRateLimiter`` over
golang.org/x/time/rate), with a lane for writes that may wait behind all others.

Upstream: ``staging/src/k8s.io/client-go/util/flowcontrol/throttle.go`` (``Wait`` -> ``Reserve``).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

__all__ = ["RateLimiter"]


class RateLimiter:
    """A token bucket: ``qps`` tokens per second, at most ``burst`` stored (``qps <= 0``: unlimited).

    Each :meth:`acquire` takes its token at once, borrowing against the refill when the bucket is
    empty, and then sleeps until that token would have been there (golang.org/x/time/rate's
    ``Reserve``, which client-go's ``tokenBucketRateLimiter.Wait`` uses): callers are served in the
    order they asked, at ``qps``.
    """

    def __init__(self, qps: float, burst: int, now: Any = time.monotonic) -> None:
        self.qps = qps
        self.burst = max(int(burst), 1)
        self._tokens = float(self.burst)
        self._now = now
        self._last = now()
        self._low = asyncio.Lock()

    def _refill(self) -> None:
        t = self._now()
        self._tokens = min(float(self.burst), self._tokens + (t - self._last) * self.qps)
        self._last = t

    def reserve(self) -> float:
        """Take a token; the seconds until it is due (0 when the bucket had one)."""
        self._refill()
        self._tokens -= 1
        return -self._tokens / self.qps if self._tokens < 0 else 0.0

    async def acquire(self, low: bool = False) -> None:
        """Wait for a token. A caller cancelled while waiting gives its token back (``Reservation.Cancel``
        in client-go's ``Wait``), so callers that give up (a review past its timeout) do not push
        the others further back.

        ``low``: a write that may wait behind every other (the PodScheduled condition of a failed
        attempt): it never borrows against the refill but waits, one at a time in the order they
        asked, until the bucket holds a token no other caller has reserved -- so a Binding asking
        meanwhile goes first (upstream's asynchronous API dispatcher ranks a Binding above a status
        patch; its synchronous default lets at most one failure's write stand before a Binding)."""
        if self.qps <= 0:
            return
        if low:
            async with self._low:
                while True:
                    self._refill()
                    if self._tokens >= 1:
                        self._tokens -= 1
                        return
                    await asyncio.sleep((1 - self._tokens) / self.qps)
        wait = self.reserve()
        if wait > 0:
            try:
                await asyncio.sleep(wait)
            except asyncio.CancelledError:
                self._refill()
                self._tokens = min(float(self.burst), self._tokens + 1)
                raise
