"""Informers: one reflector per watched kind -> the informers' store -> the scheduler's event handlers.

Upstream: ``pkg/scheduler/scheduler.go`` (the Pod informer excludes ``status.phase`` Succeeded/Failed
with a field selector; managed fields are stripped) and ``client-go/tools/cache/shared_informer.go``
(``WaitForCacheSync``); where the deltas go is :mod:`py_scheduler.app.scheduling.event_handlers`.

Every kind of :data:`py_scheduler.cache.kinds.KINDS` comes through a
:class:`~py_scheduler.app.client.reflector.Reflector` (paged LIST, WATCH with bookmarks, a re-LIST after ``410
Gone`` whose deletions of what vanished are delivered as delete events), through the one API client
(:class:`~py_scheduler.app.client.kube.Kube`). Start-up lists each kind once: the reflectors' first LISTs
are the initial sync, after which :attr:`Informers.synced` is set (``WaitForCacheSync``). There is
no second client, no second listing and no timing heuristic.

Consistency after a gap: when a reflector re-lists after ``410 Gone`` it says so
(``on_relist_start`` / ``on_relist_end``); :attr:`Informers.consistent` is cleared until that re-list
is applied and the other kinds not listed since the gap began (the reflector's ``blind_since``) have
been re-listed too (their watches broke at the same time, but may get their own 410 only later: a
Pod re-listed must not be bound to a Node deleted in the same gap that the Node reflector has not
noticed yet). The scheduling loop pauses while it is clear.
A full re-list of every kind also runs every ``resync_period`` as a safety net.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from py_scheduler.app.client.kube import Kube
from py_scheduler.app.client.reflector import MIN_WATCH_TIMEOUT, Delta, ObjectStore, Reflector
from py_scheduler.app.client.wire import KubeError
from py_scheduler.app.tuning import SYNC_GC_PAUSE_MAX, pause_gc
from py_scheduler.cache.kinds import KINDS, KINDS_BY_NAME, POD_FIELD_SELECTOR, WatchedKind
from py_scheduler.framework.memo import DeliveryGuard
from py_scheduler.framework.objects import Obj

if TYPE_CHECKING:  # the scheduling side imports the client side, not the other way
    from py_scheduler.app.scheduling.event_handlers import EventHandlers

__all__ = ["KINDS", "KINDS_BY_NAME", "POD_FIELD_SELECTOR", "Delta", "Informers", "ObjectStore", "WatchedKind"]

log = logging.getLogger("py_scheduler.informers")



class Informers:
    """The watch side of the live process: one :class:`Reflector` per kind, one store.

    Args:
        kube: the API adapter (LIST and WATCH).
        handlers: where deltas go.
        kinds: what to watch (default :data:`~py_scheduler.cache.kinds.KINDS`).
        resync_period: seconds between full re-lists of every kind (0: none; a safety net only).
        min_watch_timeout: the reflectors' shortest watch ``timeoutSeconds`` (jittered up to twice it).
        sync_gc_pause: seconds the garbage collector may stay off for the initial sync at most
            (:func:`pause_gc`; 0 keeps it on).
        freeze_synced: what the initial sync loaded goes to the permanent generation (``gc.freeze()``)
            when the collector is turned back on (the live process, which freezes its heap after the
            sync anyway); otherwise the collector is only turned back on.

    Attributes:
        store: the :class:`ObjectStore` (also the Pod lister of the scheduling loop).
        synced: set once every kind has been listed once (``WaitForCacheSync``).
        consistent: set after the initial sync; cleared while a re-list after a watch gap (``410
            Gone``) and the re-list of the other kinds it triggers run - the scheduling loop pauses then.
        reflectors: kind -> its :class:`Reflector`.
    """

    def __init__(self, kube: Kube, handlers: EventHandlers, kinds: Iterable[WatchedKind] = KINDS, *,
                 resync_period: float = 600.0, min_watch_timeout: float = MIN_WATCH_TIMEOUT,
                 sync_gc_pause: float = SYNC_GC_PAUSE_MAX, freeze_synced: bool = False) -> None:
        self.kube = kube
        self.sync_gc_pause = sync_gc_pause
        self.freeze_synced = freeze_synced
        self.handlers = handlers
        self.kinds = tuple(kinds)
        self.resync_period = resync_period
        self.store = ObjectStore()
        self.synced = asyncio.Event()
        self.consistent = asyncio.Event()
        self._wake = asyncio.Event()
        self.guard = DeliveryGuard.from_env()  # PY_SCHEDULER_DEBUG_IMMUTABLE_OBJECTS (docs/operations.md)
        on_delta = self.guard.wrap(handlers.on_delta) if self.guard is not None else handlers.on_delta
        self.reflectors: dict[str, Reflector] = {
            wk.kind: Reflector(kube, wk, self.store, on_delta,
                               on_relist_start=functools.partial(self._gap_start, wk.kind),
                               on_relist_end=functools.partial(self._gap_end, wk.kind),
                               min_watch_timeout=min_watch_timeout)
            for wk in self.kinds}
        self._reflector_tasks: dict[str, asyncio.Task[None]] = {}
        self._relisting: set[str] = set()
        self._others_due: set[str] = set()
        self._gap_since: float | None = None

    @property
    def unavailable(self) -> set[str]:
        """Optional kinds whose API this cluster does not serve (their last LIST answered 404)."""
        return {kind for kind, r in self.reflectors.items() if r.absent}

    def pod(self, namespace: str, name: str) -> Obj | None:
        """The informer's Pod (the lister of ``handleSchedulingFailure``)."""
        return self.store.get("Pod", f"{namespace}/{name}")

    # -- gaps ----------------------------------------------------------------------------------------
    def _gap_start(self, kind: str, reason: str) -> None:
        """A reflector re-lists after a watch gap: pause scheduling until it and the other kinds are
        re-listed."""
        if not self.synced.is_set():
            return
        if not self._relisting:
            log.info("re-listing %s (%s): scheduling paused until the caches are reconciled", kind, reason)
        began = self.reflectors[kind].blind_since
        self._gap_since = began if self._gap_since is None else min(self._gap_since, began)
        self._relisting.add(kind)
        self.consistent.clear()

    def _gap_end(self, kind: str, changes: int, ok: bool) -> None:
        """A reflector's re-list finished (``ok``) or failed (it retries; scheduling stays paused)."""
        if not ok or kind not in self._relisting:
            return
        if changes:
            log.info("reconciled %s: %d change(s) the watch had not delivered", kind, changes)
        self._relisting.discard(kind)
        self._others_due.add(kind)
        self._wake.set()

    # -- re-lists ------------------------------------------------------------------------------------
    async def reconcile(self, wk: WatchedKind) -> int:
        """Re-list ``wk`` through its reflector (pages applied as they arrive, then the deletions of
        what the LIST lacks); returns the number of deltas.

        Raises:
            KubeError: the LIST failed.
        """
        n = await self.reflectors[wk.kind].relist()
        if n and self.synced.is_set():
            log.info("reconciled %s: %d change(s) the watch had not delivered", wk.kind, n)
        return n

    async def _reconcile_kinds(self, kinds: Iterable[WatchedKind]) -> bool:
        """Re-list each kind in turn (best effort: a failure is logged); False when one failed."""
        ok = True
        for wk in kinds:
            try:
                await self.reconcile(wk)
            except KubeError as exc:
                ok = False
                log.warning("listing %s failed: %s", wk.kind, exc)
        return ok

    # -- running -------------------------------------------------------------------------------------
    def _check_reflectors(self) -> None:
        """Raise what a reflector task died of (a bug: API failures are retried inside)."""
        for kind, task in self._reflector_tasks.items():
            if task.done():
                exc = None if task.cancelled() else task.exception()
                raise RuntimeError(f"the {kind} reflector stopped unexpectedly: {exc!r}") from exc

    async def run(self, stop: asyncio.Event) -> None:
        """Start every reflector (their first LISTs are the initial sync), set :attr:`synced` once
        all have listed, then re-list the other kinds after a gap and every ``resync_period``.

        The reflectors run as sub-tasks and are stopped with this. Raises RuntimeError when a
        reflector dies of a bug."""
        try:
            await self._run(stop)
        finally:
            tasks = list(self._reflector_tasks.values())
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _run(self, stop: asyncio.Event) -> None:
        resume_gc = pause_gc(self.sync_gc_pause)  # the initial sync keeps what it allocates
        synced = False
        try:
            for kind, reflector in self.reflectors.items():
                task = asyncio.create_task(reflector.run(stop), name=f"{kind} reflector")
                task.add_done_callback(lambda _: self._wake.set())
                self._reflector_tasks[kind] = task
            while not stop.is_set() and not all(r.listed.is_set() for r in self.reflectors.values()):
                self._check_reflectors()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(_first(stop.wait(), self._wake.wait(),
                                                  *(r.listed.wait() for r in self.reflectors.values()
                                                    if not r.listed.is_set())), timeout=1.0)
                self._wake.clear()
            synced = not stop.is_set()
        finally:
            resume_gc(synced and self.freeze_synced)
        if stop.is_set():
            return
        self.consistent.set()
        self.synced.set()
        log.info("informer caches synced: %d objects", len(self.store))
        last_resync = time.monotonic()
        while not stop.is_set():
            timeout = (max(self.resync_period - (time.monotonic() - last_resync), 0.1)
                       if self.resync_period > 0 else 3600.0)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(_first(stop.wait(), self._wake.wait()), timeout=timeout)
            # Cleared after waking, not before waiting: a wake-up set while this loop was busy (a
            # reflector's re-list ending during a resync) is then seen by the next wait instead of
            # being lost, which left scheduling paused until the next resync.
            self._wake.clear()
            if stop.is_set():
                return
            self._check_reflectors()
            if self._others_due:
                # A reflector re-listed after a gap: the other watches broke too; re-list now every
                # kind not listed since the gap began (the re-listed kind's ``blind_since``): after an
                # API server restart every watch gets 410 in turn, and a kind whose own re-list, or
                # the previous round, came after the gap began is up to date - 19 kinds must not
                # re-list each other. Best effort: a kind failing to LIST must not keep scheduling
                # paused.
                due, self._others_due = self._others_due, set()
                since = self._gap_since if self._gap_since is not None else time.monotonic()
                if not self._relisting:
                    self._gap_since = None
                stale = [wk for wk in self.kinds if wk.kind not in due and wk.kind not in self._relisting
                         and self.reflectors[wk.kind].list_started < since]
                log.debug("%s re-listed; re-listing %s", ", ".join(sorted(due)), ", ".join(wk.kind for wk in stale))
                await self._reconcile_kinds(stale)
            if not self._relisting and not self.consistent.is_set():
                log.info("caches reconciled after the watch gap: scheduling resumed")
                self.consistent.set()
            now = time.monotonic()
            if self.resync_period > 0 and now - last_resync >= self.resync_period:
                last_resync = now
                await self._reconcile_kinds(self.kinds)


async def _first(*aws: Any) -> None:
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()
