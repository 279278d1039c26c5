"""The garbage collector is off while the informers' initial LISTs are applied (issue 21: ~1 s of
start-up CPU at 5000 nodes / 30000 Pods), on again once they are synced (with what they loaded
frozen when asked: the live process), on again after ``sync_gc_pause`` seconds when the sync does
not complete (nothing frozen), and left alone when someone else turned it off."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from typing import Any

import pytest

from py_scheduler.app.client.informers import KINDS, Informers
from py_scheduler.app.client.wire import KubeError
from tests.unit.app.fakes import FakeKube
from tests.unit.app.test_informers import handlers, node, pod
from tests.unit.app.test_reflector import wait_until


@pytest.fixture(autouse=True)
def gc_restored() -> Iterator[None]:
    # Start unfrozen: `py-scheduler` commands run in process by earlier tests (cli.main) freeze what
    # their imports made, and these tests count the permanent generation.
    gc.unfreeze()
    was = gc.isenabled()
    yield
    gc.unfreeze()
    if was:
        gc.enable()
    else:
        gc.disable()


def _kube() -> FakeKube:
    kube = FakeKube()
    for wk in KINDS:
        kube.lists[wk.list_path] = ([], "1")
    kube.lists["/api/v1/nodes"] = ([node("n1", 1)], "2")
    kube.lists["/api/v1/pods"] = ([pod(f"p{i}", 3 + i, node="n1") for i in range(5)], "9")
    return kube


async def _run_until_synced(inf: Informers) -> tuple[asyncio.Event, asyncio.Future[None]]:
    stop = asyncio.Event()
    task = asyncio.ensure_future(inf.run(stop))
    await asyncio.wait_for(inf.synced.wait(), timeout=5)
    return stop, task


async def test_gc_is_off_while_the_lists_are_applied_and_on_once_synced() -> None:
    gc.enable()
    h, cache, _ = handlers()
    seen: list[bool] = []
    on_delta = h.on_delta

    def recording(wk: Any, old: Any, new: Any) -> None:
        seen.append(gc.isenabled())
        on_delta(wk, old, new)

    h.on_delta = recording  # type: ignore[method-assign]
    inf = Informers(_kube(), h, resync_period=0)  # type: ignore[arg-type]
    stop, task = await _run_until_synced(inf)
    try:
        assert len(seen) == 6 and not any(seen)  # 1 Node + 5 Pods, all applied with the collector off
        assert gc.isenabled()
        assert cache.pod_count() == 5
        assert gc.get_freeze_count() == 0  # not asked to freeze
    finally:
        stop.set()
        await task


async def test_freeze_synced_moves_the_synced_objects_to_the_permanent_generation() -> None:
    gc.enable()
    gc.unfreeze()
    h, _, _ = handlers()
    inf = Informers(_kube(), h, resync_period=0, freeze_synced=True)  # type: ignore[arg-type]
    stop, task = await _run_until_synced(inf)
    try:
        assert gc.isenabled()
        frozen = gc.get_freeze_count()
        stored = inf.store.get("Pod", "default/p0")
        assert stored is not None
        assert frozen > 0 and gc.is_tracked(stored)
        assert not any(o is stored for o in gc.get_objects())  # in no collectable generation: frozen
        gc.collect()
        assert gc.get_freeze_count() == frozen  # a collection does not touch them
    finally:
        stop.set()
        await task


async def test_a_sync_that_does_not_complete_turns_the_gc_back_on_after_the_pause() -> None:
    gc.enable()
    h, _, _ = handlers()
    kube = _kube()

    async def failing(path: str, **_: Any) -> Any:
        raise KubeError(503, "ServiceUnavailable", "down", "GET", path)

    kube.list_objects = failing  # type: ignore[method-assign]
    inf = Informers(kube, h, resync_period=0, sync_gc_pause=0.2, freeze_synced=True)  # type: ignore[arg-type]
    stop = asyncio.Event()
    task = asyncio.ensure_future(inf.run(stop))
    try:
        await wait_until(lambda: len(kube.list_calls) >= 1)
        assert not gc.isenabled()
        await wait_until(gc.isenabled, timeout=5)
        assert not inf.synced.is_set()
        assert gc.get_freeze_count() == 0
    finally:
        stop.set()
        await task


@pytest.mark.parametrize("pause", [0.0, 120.0])
async def test_gc_left_alone_when_already_off_or_pause_is_zero(pause: float) -> None:
    already_off = pause > 0
    if already_off:
        gc.disable()
    else:
        gc.enable()
    h, _, _ = handlers()
    seen: list[bool] = []
    on_delta = h.on_delta
    h.on_delta = lambda wk, old, new: (seen.append(gc.isenabled()), on_delta(wk, old, new))  # type: ignore
    inf = Informers(_kube(), h, resync_period=0, sync_gc_pause=pause)  # type: ignore[arg-type]
    stop, task = await _run_until_synced(inf)
    try:
        assert seen and all(s is not already_off for s in seen)
        assert gc.isenabled() is not already_off
    finally:
        stop.set()
        await task
