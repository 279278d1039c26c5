"""Informers: one reflector per watched kind -> the informers' store -> scheduler cache and queue.

Upstream: ``pkg/scheduler/eventhandlers.go`` (``addAllEventHandlers``: bound Pods to the cache,
unbound Pods that name one of our profiles to the queue, Pods that become bound leave the queue,
Nodes to the cache; every change offered to the queue as a cluster event; assumed Pods deleted
while binding are released), ``pkg/scheduler/scheduler.go`` (the Pod informer excludes
``status.phase`` Succeeded/Failed with a field selector; managed fields are stripped) and
``client-go/tools/cache/shared_informer.go`` (``WaitForCacheSync``).

Every kind of :data:`py_scheduler.cache.kinds.KINDS` comes through a
:class:`~py_scheduler.app.reflector.Reflector` (paged LIST, WATCH with bookmarks, a re-LIST after ``410
Gone`` whose deletions of what vanished are delivered as delete events), through the one API client
(:class:`~py_scheduler.app.kube.Kube`). Start-up lists each kind once: the reflectors' first LISTs
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
import gc
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from py_scheduler.app.kube import Kube, KubeError
from py_scheduler.app.reflector import MIN_WATCH_TIMEOUT, Delta, ObjectStore, Reflector
from py_scheduler.cache.cache import Cache
from py_scheduler.cache.kinds import KINDS, KINDS_BY_NAME, POD_FIELD_SELECTOR, WatchedKind
from py_scheduler.framework import features
from py_scheduler.framework.events import (
    EVENT_ASSIGNED_POD_ADD,
    EVENT_ASSIGNED_POD_DELETE,
    EVENT_NODE_ADD,
    EVENT_NODE_DELETE,
    EVENT_UNSCHEDULED_POD_ADD,
    ActionType,
    ClusterEvent,
    node_scheduling_properties_change,
    pod_scheduling_properties_change,
)
from py_scheduler.framework.runtime import Framework
from py_scheduler.queue.scheduling_queue import PriorityQueue

__all__ = ["KINDS", "KINDS_BY_NAME", "POD_FIELD_SELECTOR", "Delta", "EventHandlers", "Informers", "ObjectStore",
           "WatchedKind"]

log = logging.getLogger("py_scheduler.informers")

Obj = dict[str, Any]

TERMINAL_PHASES = ("Succeeded", "Failed")

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
    collection before ``gc.freeze()`` in :mod:`py_scheduler.app.main` again (~1 s of CPU at that
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


def _uid(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


def _assigned(pod: Obj | None) -> bool:
    return bool(((pod or {}).get("spec") or {}).get("nodeName"))


def _terminal(pod: Obj | None) -> bool:
    return ((pod or {}).get("status") or {}).get("phase") in TERMINAL_PHASES


def _scheduler_name(pod: Obj) -> str:
    return str((pod.get("spec") or {}).get("schedulerName") or "default-scheduler")


def _priority(pod: Obj) -> int:
    p = (pod.get("spec") or {}).get("priority")
    return p if isinstance(p, int) and not isinstance(p, bool) else 0


class EventHandlers:
    """``eventhandlers.go``: route deltas to the cache, the queue and ClusterObjects.

    ``profiles``: the schedulerNames we are responsible for.
    """

    def __init__(self, cache: Cache, queue: PriorityQueue, profiles: Iterable[str]) -> None:
        self.cache = cache
        self.queue = queue
        self.profiles = set(profiles)
        # schedulerName -> Framework when given one (its waiting-Pods map: a deleted Pod waiting on
        # Permit is rejected there).
        self.frameworks: Mapping[str, Framework] = profiles if isinstance(profiles, Mapping) else {}

    def responsible(self, pod: Obj) -> bool:
        """``responsibleForPod``: the Pod names one of our profiles."""
        return _scheduler_name(pod) in self.profiles

    def on_delta(self, wk: WatchedKind, old: Obj | None, new: Obj | None) -> None:
        """Apply one delta; exceptions are logged (one bad object must not stop the stream).

        A delta whose two sides have different UIDs (an object deleted and recreated under the same
        name, its events seen out of order) is applied as a deletion followed by an addition.
        """
        if old is not None and new is not None and _uid(old) and _uid(new) and _uid(old) != _uid(new):
            self.on_delta(wk, old, None)
            self.on_delta(wk, None, new)
            return
        try:
            if wk.kind == "Pod":
                self._pod(old, new)
            elif wk.kind == "Node":
                self._node(old, new)
            else:
                self._other(wk, old, new)
        except Exception:
            obj = new if new is not None else old
            meta = (obj or {}).get("metadata") or {}
            log.exception("handling %s %s/%s failed", wk.kind, meta.get("namespace", ""), meta.get("name"))

    # -- nodes ---------------------------------------------------------------------------------------
    def _node(self, old: Obj | None, new: Obj | None) -> None:
        if new is not None and old is None:
            log.debug("Add event for node node=%s", (new.get("metadata") or {}).get("name"))
            self.cache.add_node(new)
            self.queue.move_all_to_active_or_backoff(EVENT_NODE_ADD, None, new)
        elif new is not None and old is not None:
            self.cache.update_node(old, new)
            for ev in node_scheduling_properties_change(new, old):
                self.queue.move_all_to_active_or_backoff(ev, old, new)
        elif old is not None:
            log.debug("Delete event for node node=%s", (old.get("metadata") or {}).get("name"))
            self.queue.move_all_to_active_or_backoff(EVENT_NODE_DELETE, old, None)
            self.cache.remove_node(old)

    # -- pods ----------------------------------------------------------------------------------------
    def _pod(self, old: Obj | None, new: Obj | None) -> None:
        if new is not None and _terminal(new):
            # A terminal Pod releases its resources (the field selector turns it into a deletion).
            if old is not None:
                self._pod_delete(old)
            elif _assigned(new):
                self.cache.remove_pod(new)
            return
        if old is None and new is not None:
            self._pod_add(new)
        elif old is not None and new is not None:
            self._pod_update(old, new)
        elif old is not None:
            self._pod_delete(old)

    def _pod_add(self, pod: Obj) -> None:
        if self.responsible(pod) and not _assigned(pod):
            log.debug("Add event for unscheduled pod pod=%s", _pod_ref(pod))
            self.queue.add(pod)
            if features.enabled(features.GENERIC_WORKLOAD):
                # upstream addPodToSchedulingQueue: a new member may complete a waiting gang.
                self.queue.move_all_to_active_or_backoff(EVENT_UNSCHEDULED_POD_ADD, None, pod)
        if _assigned(pod):
            log.debug("Add event for scheduled pod pod=%s", _pod_ref(pod))
            self.cache.add_pod(pod)
            self.queue.move_all_to_active_or_backoff(EVENT_ASSIGNED_POD_ADD, None, pod)

    def _pod_update(self, old: Obj, new: Obj) -> None:
        if _assigned(old):
            self.cache.update_pod(old, new)
            for ev in pod_scheduling_properties_change(new, old, False):
                self.queue.move_all_to_active_or_backoff(ev, old, new)
        elif _assigned(new):
            # The binding: add to the cache (confirms an assumed Pod) and leave the queue.
            self.cache.add_pod(new)
            self.queue.move_all_to_active_or_backoff(EVENT_ASSIGNED_POD_ADD, None, new)
            if self.responsible(old):
                self.queue.delete(old)
        elif self.responsible(old):
            self._update_in_queue(old, new)

    def _update_in_queue(self, old: Obj, new: Obj) -> None:
        if (old.get("metadata") or {}).get("resourceVersion") == (new.get("metadata") or {}).get("resourceVersion"):
            return
        if self.cache.is_assumed_pod(new):
            if (new.get("metadata") or {}).get("deletionTimestamp") and \
                    not (old.get("metadata") or {}).get("deletionTimestamp"):
                self._assumed_pod_deleted(new)
            return
        self.queue.update(old, new)
        old_nnn = (old.get("status") or {}).get("nominatedNodeName")
        if old_nnn and old_nnn != (new.get("status") or {}).get("nominatedNodeName"):
            prio = _priority(old)
            self.queue.move_all_to_active_or_backoff(EVENT_ASSIGNED_POD_DELETE, old, None,
                                                     lambda p: _priority(p) <= prio)

    def _pod_delete(self, pod: Obj) -> None:
        if _assigned(pod):
            log.debug("Delete event for scheduled pod pod=%s", _pod_ref(pod))
            self.cache.remove_pod(pod)
            self.queue.move_all_to_active_or_backoff(EVENT_ASSIGNED_POD_DELETE, pod, None)
            return
        if not self.responsible(pod):
            return
        log.debug("Delete event for unscheduled pod pod=%s", _pod_ref(pod))
        self.queue.delete(pod)
        if self.cache.is_assumed_pod(pod):
            self._assumed_pod_deleted(pod)
        elif (pod.get("status") or {}).get("nominatedNodeName"):
            prio = _priority(pod)
            self.queue.move_all_to_active_or_backoff(EVENT_ASSIGNED_POD_DELETE, pod, None,
                                                     lambda p: _priority(p) <= prio)

    def _assumed_pod_deleted(self, pod: Obj) -> None:
        """``handleAssumedPodDeletion``: a Pod waiting on Permit is rejected (its binding cycle then
        unreserves and forgets it); otherwise the assumed resources are released now and the bind
        will fail."""
        assumed = self.cache.get_pod(pod)
        if assumed is None:
            return
        fw = self.frameworks.get(_scheduler_name(pod))
        if fw is not None and fw.waiting_pods.reject(assumed.uid):
            return
        try:
            self.cache.remove_assumed_pod(assumed)
        except Exception:
            log.exception("Scheduler cache RemoveAssumedPod failed pod=%s", assumed.key)
        self.queue.move_all_to_active_or_backoff(EVENT_ASSIGNED_POD_DELETE, assumed.pod, None)

    # -- other kinds ---------------------------------------------------------------------------------
    def _other(self, wk: WatchedKind, old: Obj | None, new: Obj | None) -> None:
        objects = self.cache.objects
        if new is not None:
            objects.upsert(wk.kind, new)
        elif old is not None:
            objects.delete(wk.kind, old)
        if wk.event_resource is None:
            return
        action = ActionType.ADD if old is None else ActionType.DELETE if new is None else ActionType.UPDATE
        self.queue.move_all_to_active_or_backoff(ClusterEvent(wk.event_resource, action), old, new)


def _pod_ref(pod: Obj) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"




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
        reconciles: re-lists after the initial sync (gaps, the kinds they trigger, resyncs).
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
        self.reconciles = 0
        self.reflectors: dict[str, Reflector] = {
            wk.kind: Reflector(kube, wk, self.store, handlers.on_delta,
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
        self.reconciles += 1
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
        self.reconciles += 1
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
