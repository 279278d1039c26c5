"""A lean LIST+WATCH of one kind (the Pod stream) straight into the informers' object store.

Upstream: ``staging/src/k8s.io/client-go/tools/cache/reflector.go`` (``ListAndWatch``: a paged LIST,
then WATCH from the list's resourceVersion with ``allowWatchBookmarks`` and a ``timeoutSeconds``
jittered in [5 min, 10 min]; a BOOKMARK only moves the resourceVersion; a watch the server ends is
re-opened from the last resourceVersion; ``isExpiredError`` - ``410 Gone`` / reason ``Expired``,
"too old resource version" - leads to a full re-LIST; other failures back off and retry).

Why not kopf for Pods: kopf's per-event machinery (a worker task and queue per object, batching,
handler dispatch) cost ~0.45 ms of CPU per Pod event on the benchmark (two events per scheduled Pod,
~17% of the main thread), and its start-up listing was a second full copy of every Pod next to the
informers' reconciling LIST (bench/RESULTS.md, issue 9). Here an event costs one orjson decode, one
:meth:`ObjectStore.apply` and the handler; LIST pages are applied as they arrive and dropped.

Differences from client-go, on purpose: the first LIST is a consistent read (no ``resourceVersion=0``
from the watch cache: the scheduler starts from what etcd holds); a watch that fails with a
connection error is re-opened from the last resourceVersion after a backoff (0.5 s doubling to 10 s,
kopf's settings here) instead of re-listing at once - a 410 on that watch then leads to the re-list;
the store is the informers' :class:`ObjectStore` (deltas, tombstones), so a re-list is an
authoritative reconcile: what the LIST lacks and is not newer than it is deleted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, Protocol

from py_scheduler.app.kube import KubeError

if TYPE_CHECKING:
    from py_scheduler.app.informers import ObjectStore, WatchedKind

log = logging.getLogger("py_scheduler.reflector")

Obj = dict[str, Any]

MIN_WATCH_TIMEOUT = 300.0
"""Seconds: the shortest ``timeoutSeconds`` of a watch (reflector.go ``defaultMinWatchTimeout``);
each watch asks for a random value in [min, 2 * min]."""
BACKOFF_INITIAL = 0.5
BACKOFF_MAX = 10.0


class WatchSource(Protocol):
    """What the reflector needs from the API adapter (:class:`py_scheduler.app.kube.Kube`)."""

    def list_pages(self, path: str, *, field_selector: str | None = None, label_selector: str | None = None,
                   limit: int = 500, timeout: float = 120.0) -> AsyncIterator[tuple[list[Obj], str]]: ...

    def watch(self, path: str, query: dict[str, Any], *, read_timeout: float = 400.0,
              connect_timeout: float = 30.0) -> AsyncIterator[Obj]: ...


class ResourceExpired(Exception):
    """The watch's resourceVersion is gone from etcd's history (``410``): only a re-LIST helps."""


def is_expired(status: int, reason: str, message: str) -> bool:
    """``isExpiredError``: HTTP/Status code 410 or reason ``Expired``/``Gone`` (or, from servers
    that give neither, the message "too old resource version")."""
    return status == 410 or reason in ("Expired", "Gone") or "too old resource version" in message


DeltaHandler = Callable[["WatchedKind", "Obj | None", "Obj | None"], None]


class Reflector:
    """LIST then WATCH one kind into ``store``; every change goes to ``on_delta(wk, old, new)``.

    Args:
        kube: the adapter (:meth:`Kube.list_pages`, :meth:`Kube.watch`).
        wk: the kind (its ``list_path`` and ``field_selector`` are used for both requests).
        store: the informers' object store (shared with other writers: it orders by resourceVersion).
        on_delta: called for each delta, synchronously (exceptions are the handler's business).
        on_relist_start: called (with the reason) before a re-LIST after a watch gap, not before the
            first LIST; the informers pause scheduling.
        on_relist_end: called after that re-LIST with ``(changes, ok)``.
        min_watch_timeout: seconds, see :data:`MIN_WATCH_TIMEOUT`.
        page_limit: items per LIST page.

    Attributes:
        last_rv: the resourceVersion the next watch starts from ("" before the first LIST).
        listed: set once the first LIST has been applied (the kind's initial sync).
        lists, watches, events: counters (LISTs done, watches opened, watch events applied).
    """

    def __init__(self, kube: WatchSource, wk: WatchedKind, store: ObjectStore, on_delta: DeltaHandler, *,
                 on_relist_start: Callable[[str], None] | None = None,
                 on_relist_end: Callable[[int, bool], None] | None = None,
                 min_watch_timeout: float = MIN_WATCH_TIMEOUT, page_limit: int = 500,
                 backoff_initial: float = BACKOFF_INITIAL, backoff_max: float = BACKOFF_MAX,
                 rand: Callable[[], float] = random.random) -> None:
        self.kube = kube
        self.wk = wk
        self.store = store
        self.on_delta = on_delta
        self.on_relist_start = on_relist_start
        self.on_relist_end = on_relist_end
        self.min_watch_timeout = min_watch_timeout
        self.page_limit = page_limit
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self._rand = rand
        self.last_rv = ""
        self.listed = asyncio.Event()
        self.lists = 0
        self.watches = 0
        self.events = 0
        self._lock = asyncio.Lock()

    # -- LIST ----------------------------------------------------------------------------------------
    async def relist(self) -> int:
        """A paged LIST applied page by page to the store, then the deletions of what it lacked;
        returns the number of deltas (changes the watch had not delivered). Moves :attr:`last_rv` to
        the list's resourceVersion unless a running watch moved it meanwhile (a resync racing the
        watch). Items without object metadata are skipped (logged). One LIST at a time (a concurrent
        caller waits for its turn).

        Raises:
            KubeError: the LIST failed (the store keeps what was applied so far; nothing is deleted).
        """
        async with self._lock:
            wk = self.wk
            seen: set[str] = set()
            changes = 0
            list_rv = ""
            rv_before = self.last_rv
            async for items, rv in self.kube.list_pages(wk.list_path, field_selector=wk.field_selector,
                                                        limit=self.page_limit):
                list_rv = rv
                for obj in items:
                    if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
                        log.warning("%s list: ignoring an item without object metadata: %.200r", wk.kind, obj)
                        continue
                    seen.add(wk.key(obj))
                    delta = self.store.apply(wk, None, obj)
                    if delta is not None:
                        changes += 1
                        self.on_delta(wk, *delta)
                del items
            for old, new in self.store.sweep(wk, seen, list_rv):
                changes += 1
                self.on_delta(wk, old, new)
            self.lists += 1
            # A re-LIST racing a running watch (the informers' resync) must not move the watch's
            # resourceVersion back: the watch moved it while the LIST ran, it is the newer one.
            if list_rv and self.last_rv == rv_before:
                self.last_rv = list_rv
            return changes

    # -- WATCH ---------------------------------------------------------------------------------------
    def _watch_query(self) -> dict[str, Any]:
        lo = self.min_watch_timeout
        return {"resourceVersion": self.last_rv or None, "allowWatchBookmarks": True,
                "timeoutSeconds": int(lo + self._rand() * lo), "fieldSelector": self.wk.field_selector}

    async def watch_once(self) -> int:
        """One WATCH from :attr:`last_rv` until the server ends it; returns the events applied.

        Raises:
            ResourceExpired: 410 (refused, or an ERROR event in the stream).
            KubeError: any other failure (connection, timeout, an ERROR event with another code).
        """
        wk = self.wk
        query = self._watch_query()
        self.watches += 1
        n = 0
        stream = self.kube.watch(wk.list_path, query, read_timeout=query["timeoutSeconds"] + 60.0)
        try:
            async for event in stream:
                etype = event.get("type") if isinstance(event, dict) else None
                obj = event.get("object") if isinstance(event, dict) else None
                if not isinstance(obj, dict):
                    log.warning("%s watch: ignoring an event without an object: %.200r", wk.kind, event)
                    continue
                if etype == "ERROR":
                    code = obj.get("code")
                    status = code if isinstance(code, int) else 0
                    reason, message = str(obj.get("reason") or ""), str(obj.get("message") or "")
                    if is_expired(status, reason, message):
                        raise ResourceExpired(message or reason)
                    raise KubeError(status, reason or "WatchError", message, "WATCH", wk.list_path)
                meta = obj.get("metadata")
                if not isinstance(meta, dict):
                    # a stream that breaks here must not kill the reflector (the scheduler with it)
                    log.warning("%s watch: ignoring a %s event without object metadata: %.200r", wk.kind, etype,
                                event)
                    continue
                rv = str(meta.get("resourceVersion") or "")
                if etype == "BOOKMARK":
                    if rv:
                        self.last_rv = rv
                    continue
                if etype not in ("ADDED", "MODIFIED", "DELETED"):
                    log.warning("%s watch: ignoring an event of unknown type %r", wk.kind, etype)
                    continue
                n += 1
                self.events += 1
                delta = self.store.apply(wk, etype, obj)
                if rv:
                    self.last_rv = rv
                if delta is not None:
                    self.on_delta(wk, *delta)
        except KubeError as exc:
            if is_expired(exc.status, exc.reason, exc.message):
                raise ResourceExpired(exc.message or exc.reason) from exc
            raise
        finally:
            with contextlib.suppress(Exception):
                await stream.aclose()  # type: ignore[attr-defined]
        return n

    # -- the loop ------------------------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        """LIST, then WATCH and re-WATCH until ``stop`` is set (returns promptly then: the request in
        flight is cancelled). Never raises on API failures: they are logged and retried. Run again
        after a stop, it resumes watching from :attr:`last_rv` (no LIST unless that is gone: 410)."""
        task = asyncio.ensure_future(self._loop())
        waiter = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in (task, waiter):
                t.cancel()
            await asyncio.gather(task, waiter, return_exceptions=True)
        if task.done() and not task.cancelled() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]  # a bug, not an API failure: let the owner see it

    async def _backoff(self, delay: float) -> float:
        await asyncio.sleep(delay)
        return min(delay * 2, self.backoff_max)

    async def _loop(self) -> None:
        wk = self.wk
        delay = self.backoff_initial
        # run again after a stop: resume watching from last_rv (a 410 then re-lists)
        need_list, gap_reason = not self.listed.is_set(), ""
        while True:
            if need_list:
                if gap_reason and self.on_relist_start is not None:
                    self.on_relist_start(gap_reason)
                try:
                    changes = await self.relist()
                except KubeError as exc:
                    log.warning("%s %s failed: %s", "re-list of" if gap_reason else "initial list of", wk.kind, exc)
                    if gap_reason and self.on_relist_end is not None:
                        self.on_relist_end(0, False)
                    delay = await self._backoff(delay)
                    continue
                if gap_reason and self.on_relist_end is not None:
                    self.on_relist_end(changes, True)
                need_list, gap_reason = False, ""
                self.listed.set()
                delay = self.backoff_initial
            started = time.monotonic()
            try:
                n = await self.watch_once()
            except ResourceExpired as exc:
                log.info("%s watch from resourceVersion %s expired (%s): re-listing", wk.kind, self.last_rv, exc)
                need_list, gap_reason = True, f"410 Gone: {exc}"
                continue
            except KubeError as exc:
                log.info("%s watch failed (%s): re-watching from resourceVersion %s in %.1fs", wk.kind, exc,
                         self.last_rv, delay)
                delay = await self._backoff(delay)
                continue
            if n == 0 and time.monotonic() - started < 1.0:
                # reflector.go's VeryShortWatchError: a server closing watches at once must not spin us
                log.info("%s watch ended at once without an event; re-watching in %.1fs", wk.kind, delay)
                delay = await self._backoff(delay)
                continue
            log.debug("%s watch ended by the server after %d event(s); re-watching from %s", wk.kind, n,
                      self.last_rv)
            delay = self.backoff_initial
