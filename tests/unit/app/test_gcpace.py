"""The GC pacer: under ``py-scheduler run``'s thresholds, garbage in a reference cycle that reached the
oldest generation is not collected by allocation counts within any time a test (or a day of a
quiet cluster) takes; the pacer's clock frees it."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator

import pytest

from py_scheduler.app.tuning import GC_THRESHOLDS, GcPacer


class _Conn:
    """Stands for a closed TLS connection: protocol and transport referring to each other."""

    def __init__(self) -> None:
        self.peer: _Conn | None = None
        self.buffer = bytearray(14 * 1024)


def _old_cycle() -> weakref.ref[_Conn]:
    a, b = _Conn(), _Conn()
    a.peer, b.peer = b, a
    gc.collect()  # alive now: promoted to the oldest generation, as a long-lived connection is
    return weakref.ref(a)  # a and b die on return; only a collection of the oldest generation frees them


@pytest.fixture
def run_thresholds() -> Iterator[None]:
    before = gc.get_threshold()
    gc.set_threshold(*GC_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*before)


def test_old_cycles_wait_for_a_full_pass_and_the_pacer_brings_it(run_thresholds: None) -> None:
    clock = [0.0]
    pacer = GcPacer(young_seconds=60, full_seconds=600, now=lambda: clock[0])
    ref = _old_cycle()
    for _ in range(20_000):  # the scheduler's kind of garbage: freed by reference counting, no pass
        _ = [{"k": 1}]
    assert ref() is not None, "collected without the pacer: the premise of the pacer does not hold"
    assert pacer.tick() is None  # nothing due yet
    clock[0] = 60.0
    assert pacer.tick() == 1  # young and middle generations: not enough for an old cycle
    assert ref() is not None
    clock[0] = 600.0
    assert pacer.tick() == 2
    assert ref() is None
    assert pacer.collected >= 2


def test_young_period_restarts_after_a_full_pass() -> None:
    clock, calls = [0.0], []
    pacer = GcPacer(young_seconds=60, full_seconds=600, now=lambda: clock[0],
                    collect=lambda gen: calls.append(gen) or 0)
    for t in range(0, 1201, 30):
        clock[0] = float(t)
        pacer.tick()
    # young at 60, 120, ..., 540; full at 600; young at 660, ..., 1140; full at 1200
    assert calls == [1] * 9 + [2] + [1] * 9 + [2]
    off = GcPacer(young_seconds=0, full_seconds=0, now=lambda: clock[0], collect=lambda gen: calls.append(gen) or 0)
    clock[0] = 1e9
    assert off.tick() is None


async def test_run_ticks_until_stopped() -> None:
    calls: list[int] = []
    pacer = GcPacer(young_seconds=0.001, full_seconds=0, collect=lambda gen: calls.append(gen) or 0)
    stop = asyncio.Event()
    task = asyncio.create_task(pacer.run(stop, period=0.001))

    async def until_ticked() -> None:
        while len(calls) < 3:
            await asyncio.sleep(0.001)  # polling the condition, bounded by wait_for below

    await asyncio.wait_for(until_ticked(), timeout=5)
    stop.set()
    await asyncio.wait_for(task, timeout=5)
    assert set(calls) == {1}
