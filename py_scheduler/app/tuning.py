"""GC and start-up tuning: the one module that tunes Python's cyclic garbage collector.

Every process-wide ``gc`` setting is made here and called from here (tests/unit/test_module_names.py
fails on a ``gc.disable``/``enable``/``freeze``/``set_threshold`` anywhere else in the package):

- start-up: :func:`imports_start` / :func:`imports_done` (the CLI commands' imports, collector off,
  then frozen), :func:`pause_gc` (the informers' initial sync), :func:`freeze_heap_then` (after it);
- steady state: :data:`GC_THRESHOLDS` (:func:`set_thresholds`) and :class:`GcPacer` (a clock).

``py-scheduler run`` sets ``gc.set_threshold(50_000, 20, 100)`` (:data:`GC_THRESHOLDS`:
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
from collections.abc import Awaitable, Callable

__all__ = ["GC_THRESHOLDS", "SYNC_GC_PAUSE_MAX", "GcPacer", "freeze_heap_then", "imports_done",
           "imports_start", "pause_gc", "set_thresholds"]

log = logging.getLogger("py_scheduler.gc")


def imports_start() -> None:
    """Turn the collector off for a command's option parsing and imports (until :func:`imports_done`)."""
    gc.disable()


def imports_done() -> None:
    """A command's modules are imported: freeze what the imports made and turn the collector on.

    :func:`imports_start` (the console scripts' ``main``) turns Python's cyclic garbage collector off
    for the option parsing (typer imports pydantic) and the command's imports: importing the run path
    makes ~10^5 objects, all kept (modules, classes, functions, their dicts), which set off ~180
    collections (one full) that rescanned the growing heap for nothing, 0.075-0.1 s of CPU before
    ready (issue 21). Frozen (``gc.freeze``: the permanent generation), no later collection scans
    them either, as :func:`pause_gc` does for the initial sync's objects; without the freeze, the
    first collection after ``gc.enable`` scanned them all at once (~0.04 s).
    What this depends on: imports make little cyclic garbage, which a frozen heap keeps for good
    (the run path's: ~1900 objects, ~0.45 MiB, measured with ``gc.DEBUG_SAVEALL``)."""
    gc.freeze()
    gc.enable()


GC_THRESHOLDS = (50_000, 20, 100)
"""``gc.set_threshold`` for the live process. A scheduling cycle allocates thousands of short-lived
containers that reference counting frees; at Python's default (700, 10, 10) the collector ran so often
that it took 21% of the process's CPU on bench/throughput (4.8 of 22.6 s for 3000 Pods, 11 full
collections of ~0.24 s each); with these thresholds 0.9 s, CPU per Pod 7.0 -> 5.8 ms (bench/RESULTS.md).
They count allocations only: :class:`GcPacer` also collects on a clock, so
garbage in reference cycles does not wait hours for the older generations' passes (the soak's RSS
slope, docs/faults.md)."""


def set_thresholds() -> None:
    """The live process's :data:`GC_THRESHOLDS`."""
    gc.set_threshold(*GC_THRESHOLDS)


def freeze_collected() -> None:
    """Collect once, then move every object alive to the permanent generation (``gc.freeze()``): what
    a node shard worker does after it received a whole replica of the snapshot
    (py_scheduler/core/shards.py), as the live process does after its initial sync."""
    gc.collect()
    gc.freeze()


SYNC_GC_PAUSE_MAX = 120.0
"""Seconds: the longest the cyclic garbage collector stays off for the initial sync (see
:func:`pause_gc`)."""


def pause_gc(max_seconds: float) -> Callable[[bool], None]:
    """Turn Python's cyclic garbage collector off until the returned ``resume(freeze)`` is called, or
    for ``max_seconds`` at most (then the running event loop turns it back on); a no-op when it is
    already off (someone else owns it) or ``max_seconds`` is not positive. ``resume(True)`` first
    moves every object alive to the permanent generation (``gc.freeze()``), so that no collection
    ever scans them.

    Used for the informers' initial sync: the sync decodes and keeps ~50 containers per Pod (1.5
    million at 30000 Pods), every 50000 of which (``GC_THRESHOLDS``) set off a young collection
    that rescans the survivors of the last one, and the older generations' collections rescan the
    whole growing store; none of it is garbage, the store keeps it. With the collector simply
    turned back on, the first collection after the sync scans them all once more, and the full
    collection before ``gc.freeze()`` in :func:`freeze_heap_then` again (~1 s of CPU at that
    size on the loaded benchmark machine). At 5000 nodes / 30000 bound Pods fed in process
    (bench/RESULTS.md, optimisation log) the sync took ~3.7 s of CPU with the collector on.
    What this depends on: the sync makes almost no cyclic garbage (decoded JSON is acyclic and freed
    by reference counting; 125 unreachable objects were left after that sync), so freezing without
    a collection keeps nothing that matters; ``max_seconds`` bounds a sync that never completes (an
    unreachable API server) so the collector cannot stay off for the life of the process.
    """
    if not gc.isenabled() or max_seconds <= 0:
        return lambda freeze: None
    gc.disable()
    handle = asyncio.get_running_loop().call_later(max_seconds, gc.enable)

    def resume(freeze: bool) -> None:
        handle.cancel()
        if freeze and not gc.isenabled():  # not after the time limit: then objects were collected
            gc.freeze()
        gc.enable()

    return resume


async def freeze_heap_then(coro: Awaitable[None]) -> None:
    """``gc.freeze()`` the objects loaded by the initial sync (the informer stores, the cache), then
    await ``coro``: Python's full (generation 2) collections stop rescanning them, which otherwise
    showed as ~80 ms pauses in a cycle's p99 at 5000 nodes (bench/RESULTS.md)."""
    gc.collect()
    gc.freeze()
    await coro


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
