"""A clock for Python's cyclic garbage collector, next to its allocation-count thresholds.

``py-scheduler run`` sets ``gc.set_threshold(50_000, 20, 100)`` (:data:`py_scheduler.app.main.GC_THRESHOLDS`:
at Python's default the collector took 21% of the CPU on bench/throughput) and ``gc.freeze()``s the
initial sync. The thresholds count *net* allocations of container objects (allocations minus
deallocations): most of a scheduling cycle's garbage is freed by reference counting and never
counts, so at a steady few Pods a second the young generation reached 50 000 only every 2-3
minutes, the middle one (20 young passes) about once an hour and the oldest (100 middle passes)
practically never. Garbage in reference cycles waits for those passes: in the soak
(docs/faults.md, "Soak") every API call left such a cycle (tenacity's retry state with the call's
closure, aiohttp's request payload), a full collection after 10 minutes freed 7 672 objects
(1.1 MiB traced) on the leader, 2 400 on a standby; what was still alive at a young pass was
promoted and waited an hour, what reached the oldest generation was kept for ever.

:class:`GcPacer` adds a time floor: a collection of the young and middle generations every
``young_seconds`` (default 60) and a full one every ``full_seconds`` (default 600), whatever the
allocation counts. The frozen start-up heap is not scanned (``gc.freeze``), so a full collection
walks only what was created since the sync (tens of milliseconds in the soak; the counters are
``/debug/memory``'s). Go's collector, kube-scheduler's, is paced by heap growth (``GOGC``) and by a
forced collection at least every 2 minutes (``forcegcperiod`` in ``runtime/proc.go``); this is
the same idea for a collector that only counts allocations.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from collections.abc import Callable

__all__ = ["GcPacer"]

log = logging.getLogger("py_scheduler.gc")


class GcPacer:
    """Collects on a clock (module docstring).

    Args:
        young_seconds: seconds between ``gc.collect(1)`` (young and middle generations); 0: never.
        full_seconds: seconds between ``gc.collect(2)``; 0: never.
        now: monotonic clock.
        collect: ``gc.collect`` (tests).
    """

    def __init__(self, young_seconds: float = 60.0, full_seconds: float = 600.0,
                 now: Callable[[], float] = time.monotonic, collect: Callable[[int], int] = gc.collect) -> None:
        self.young_seconds = young_seconds
        self.full_seconds = full_seconds
        self._now = now
        self._collect = collect
        start = now()
        self._next_young = start + young_seconds
        self._next_full = start + full_seconds
        self.collected = 0
        """Objects freed by this pacer's collections since start."""

    def tick(self) -> int | None:
        """Collect if a period is due: the generation collected (1 or 2), None when nothing was due.
        A full collection also restarts the young period (it collected the young generations too)."""
        now = self._now()
        gen: int | None = None
        if self.full_seconds > 0 and now >= self._next_full:
            gen = 2
        elif self.young_seconds > 0 and now >= self._next_young:
            gen = 1
        if gen is None:
            return None
        t0 = time.perf_counter()
        freed = self._collect(gen)
        self.collected += freed
        log.debug("gc generation %d: %d objects freed in %.1f ms", gen, freed, (time.perf_counter() - t0) * 1e3)
        if gen == 2:
            self._next_full = now + self.full_seconds
        self._next_young = now + self.young_seconds
        return gen

    async def run(self, stop: asyncio.Event, period: float = 1.0) -> None:
        """:meth:`tick` every ``period`` seconds until ``stop`` is set."""
        while not stop.is_set():
            self.tick()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=period)
