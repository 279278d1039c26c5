"""The one watch machinery: a LIST+WATCH of one kind into the informers' store (client-go's
reflector + indexer), used for every kind the scheduler reads (:data:`py_scheduler.cache.kinds.KINDS`).

Upstream: ``staging/src/k8s.io/client-go/tools/cache/reflector.go`` (``ListAndWatch``: a paged LIST,
then WATCH from the list's resourceVersion with ``allowWatchBookmarks`` and a ``timeoutSeconds``
jittered in [5 min, 10 min]; a BOOKMARK only moves the resourceVersion; a watch the server ends is
re-opened from the last resourceVersion; ``isExpiredError`` - ``410 Gone`` / reason ``Expired``,
"too old resource version" - leads to a full re-LIST; other failures back off and retry),
``tools/cache/delta_fifo.go`` (``Replace``: what a re-LIST lacks becomes a deletion) and
``tools/cache/shared_informer.go`` (``processDeltas``: an update carries the stored old object and the
new one).

Informer semantics, per event: ADDED / MODIFIED give ``(old, new)`` with ``old`` the object the store
held (None for an add), DELETED gives ``(old, None)``; a re-LIST gives the same deltas for what changed
while no watch ran, and ``(old, None)`` for every stored object the LIST lacks. Nothing is guessed
from timing: a re-LIST happens after a 410 (the reflector says so through ``on_relist_start`` /
``on_relist_end``) or when the informers ask for one.

Why our own and not kopf's watching: kopf's ``on.event`` gives the new object only, no re-list
signal and no deletions for what vanished during a gap (informer semantics need all three), and its
per-event machinery (a worker task and queue per object, handler dispatch) cost ~0.45 ms of CPU per
Pod event on the benchmark against ~0.17 ms here (bench/RESULTS.md, issue 9). Here an event costs one
orjson decode, one :meth:`ObjectStore.apply` and the handler; LIST pages are applied as they arrive
and dropped.

Differences from client-go, on purpose: the first LIST is a consistent read (no ``resourceVersion=0``
from the watch cache: the scheduler starts from what etcd holds); a watch that fails with a
connection error is re-opened from the last resourceVersion after a backoff (0.5 s doubling to 10 s)
instead of re-listing at once - a 410 on that watch then leads to the re-list; an ``optional`` kind
whose API is not served (LIST 404) counts as listed and empty, and is listed again every
``absent_retry`` seconds; the store orders by resourceVersion and remembers deletions for a while, so
a re-LIST the informers run while this kind's watch is still delivering (after another kind's gap)
can neither resurrect a deleted object nor move an object back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import time
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any, Protocol

from py_scheduler.app.client.wire import KubeError, NotFound
from py_scheduler.app.telemetry.metrics import WATCH_RESTARTS
from py_scheduler.cache.kinds import WatchedKind
from py_scheduler.framework.objects import Obj

log = logging.getLogger("py_scheduler.reflector")


MIN_WATCH_TIMEOUT = 300.0
"""Seconds: the shortest ``timeoutSeconds`` of a watch (reflector.go ``defaultMinWatchTimeout``);
each watch asks for a random value in [min, 2 * min]."""
WATCH_IDLE_TIMEOUT = 90.0
"""Seconds without a byte on a watch (not even a bookmark) after which it is taken for dead and
re-opened from the last resourceVersion (no re-list). kube-apiserver's watch cache sends every watcher
that allows bookmarks one at least every minute (``staging/src/k8s.io/apiserver/pkg/storage/cacher/cacher.go``
``defaultBookmarkFrequency``), so 90 s of silence is a connection that stays open but carries
nothing (a blackholed network path), which ``timeoutSeconds`` + 60 s (6-11 minutes) used to take to
notice. client-go notices it with HTTP/2 pings (``ReadIdleTimeout`` 30 s + ``PingTimeout`` 15 s,
``k8s.io/apimachinery/pkg/util/net/http.go``); the watches here are HTTP/1.1 streams without pings.
Environment ``PY_SCHEDULER_WATCH_IDLE_TIMEOUT_SECONDS`` overrides it (as client-go's
``HTTP2_READ_IDLE_TIMEOUT_SECONDS``; the e2e tests shorten it)."""
BACKOFF_INITIAL = 0.5
BACKOFF_MAX = 10.0
ABSENT_RETRY = 60.0
"""Seconds between LISTs of an optional kind whose API the cluster does not serve."""

Delta = tuple[Obj | None, Obj | None]


def watch_idle_timeout() -> float:
    """:data:`WATCH_IDLE_TIMEOUT`, or ``PY_SCHEDULER_WATCH_IDLE_TIMEOUT_SECONDS`` when it is a positive
    number (anything else is logged and ignored)."""
    raw = os.environ.get("PY_SCHEDULER_WATCH_IDLE_TIMEOUT_SECONDS", "")
    if not raw:
        return WATCH_IDLE_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    if not 0 < value < float("inf"):
        log.warning("PY_SCHEDULER_WATCH_IDLE_TIMEOUT_SECONDS=%r is not a positive number; using %g s", raw,
                    WATCH_IDLE_TIMEOUT)
        return WATCH_IDLE_TIMEOUT
    return value


def _rv(obj: Obj | None) -> int | None:
    raw = ((obj or {}).get("metadata") or {}).get("resourceVersion")
    try:
        return int(str(raw))
    except (TypeError, ValueError):
        return None


def _strip(obj: Obj) -> Obj:
    """Drop ``metadata.managedFields`` (upstream's informer transform) to save memory."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


TOMBSTONES_MAX = 50_000
"""Deletions an :class:`ObjectStore` remembers per kind at most (each ~0.2 KiB)."""


class ObjectStore:
    """The informers' store (client-go's ``Indexer``): the last object per kind and key, turning
    watch events and LIST items into ``(old, new)`` deltas.

    An event older than the stored object (resourceVersions of one resource are etcd revisions and
    compare as integers) changes nothing, and a deletion is remembered ``tombstone_ttl`` seconds, so a
    LIST taken before a deletion the watch already delivered cannot resurrect the object. One
    reflector writes a kind; its re-LIST may overlap its own watch only when the informers ask for
    one while the watch runs (after another kind's gap, or the periodic resync).

    Bound: a tombstone is the key and ``(resourceVersion, time)``, ~0.2 KiB; expired ones are pruned
    by every re-LIST and, whatever the re-LISTs, by the first burial at least ``tombstone_ttl / 4``
    after the previous pruning, so at most the deletions of the last ``1.25 * tombstone_ttl`` are kept
    (at 100 deletions a minute and the default 15 minutes: ~1900, ~0.4 MiB). Before, only re-LISTs
    pruned: with the informers' resync off (``resync_period=0``) and a watch that never broke, every
    deletion since start stayed. And at most ``tombstone_max`` per kind whatever the deletion rate
    (:data:`TOMBSTONES_MAX`, ~10 MiB; a burst past it forgets its oldest deletions first, which only
    narrows the window in which a stale LIST item is recognised as deleted).
    """

    def __init__(self, now: Callable[[], float] = time.monotonic, tombstone_ttl: float = 900.0,
                 tombstone_max: int | None = None) -> None:
        self._now = now
        self.tombstone_ttl = tombstone_ttl
        self.tombstone_max = TOMBSTONES_MAX if tombstone_max is None else tombstone_max
        self._objs: dict[str, dict[str, Obj]] = {}
        self._versions: dict[str, int] = {}
        self._tombs: dict[str, dict[str, tuple[int | None, float]]] = {}
        self._next_prune = now() + tombstone_ttl / 4

    def get(self, kind: str, key: str) -> Obj | None:
        return self._objs.get(kind, {}).get(key)

    def list_kind(self, kind: str) -> list[Obj]:
        """Every stored object of ``kind``."""
        return list(self._objs.get(kind, {}).values())

    def version(self, kind: str) -> int:
        """How many times an object of ``kind`` was stored or removed."""
        return self._versions.get(kind, 0)

    def _changed(self, kind: str) -> None:
        self._versions[kind] = self._versions.get(kind, 0) + 1

    def __len__(self) -> int:
        return sum(len(v) for v in self._objs.values())

    def tombstones(self) -> int:
        """Deletions remembered now (all kinds)."""
        return sum(len(v) for v in self._tombs.values())

    def _bury(self, kind: str, key: str, rv: int | None) -> None:
        now = self._now()
        tombs = self._tombs.setdefault(kind, {})
        tombs.pop(key, None)  # re-inserted: the dict's order stays the order of burial
        tombs[key] = (rv, now)
        if now >= self._next_prune:
            self.prune_tombstones()
        while len(tombs) > self.tombstone_max:
            del tombs[next(iter(tombs))]

    def apply(self, wk: WatchedKind, etype: str | None, obj: Obj) -> Delta | None:
        """Apply one event (``ADDED``/``MODIFIED``/``DELETED``, None for a listing); returns the
        delta, or None when it changes nothing (duplicate or stale)."""
        key = wk.key(obj)
        objs = self._objs.setdefault(wk.kind, {})
        cur = objs.get(key)
        rv = _rv(obj)
        if etype == "DELETED":
            if cur is None:
                self._bury(wk.kind, key, rv)
                return None
            cur_rv = _rv(cur)
            if rv is not None and cur_rv is not None and rv < cur_rv:
                return None
            del objs[key]
            self._changed(wk.kind)
            self._bury(wk.kind, key, rv)
            return cur, None
        if cur is not None:
            cur_rv = _rv(cur)
            if rv is not None and cur_rv is not None and rv <= cur_rv:
                return None
            if cur_rv is None and rv is None and cur == obj:
                return None
            objs[key] = _strip(obj)
            self._changed(wk.kind)
            return cur, obj
        tomb = self._tombs.get(wk.kind, {}).get(key)
        if tomb is not None and rv is not None and tomb[0] is not None and rv <= tomb[0]:
            return None
        self._tombs.get(wk.kind, {}).pop(key, None)
        objs[key] = _strip(obj)
        self._changed(wk.kind)
        return None, obj

    def reconcile(self, wk: WatchedKind, items: Iterable[Obj], list_rv: str) -> list[Delta]:
        """Apply an authoritative LIST taken at ``list_rv``: upsert what it has, delete what it lacks
        unless the stored object is newer than the LIST."""
        deltas: list[Delta] = []
        seen: set[str] = set()
        for obj in items:
            seen.add(wk.key(obj))
            d = self.apply(wk, None, obj)
            if d is not None:
                deltas.append(d)
        deltas.extend(self.sweep(wk, seen, list_rv))
        return deltas

    def sweep(self, wk: WatchedKind, seen: set[str], list_rv: str) -> list[Delta]:
        """The deletions of an authoritative LIST taken at ``list_rv`` whose items' keys are ``seen``
        (already applied, e.g. page by page): every stored object of ``wk`` not seen and not newer than
        the LIST is deleted and remembered (tombstone). Returns the ``(old, None)`` deltas."""
        deltas: list[Delta] = []
        try:
            lrv: int | None = int(list_rv)
        except ValueError:
            lrv = None
        objs = self._objs.setdefault(wk.kind, {})
        for key, cur in list(objs.items()):
            if key in seen:
                continue
            cur_rv = _rv(cur)
            if lrv is None or cur_rv is None or cur_rv <= lrv:
                del objs[key]
                self._changed(wk.kind)
                self._bury(wk.kind, key, lrv)
                deltas.append((cur, None))
        self.prune_tombstones()
        return deltas

    def prune_tombstones(self) -> None:
        """Forget the deletions older than ``tombstone_ttl``."""
        now = self._now()
        self._next_prune = now + self.tombstone_ttl / 4
        limit = now - self.tombstone_ttl
        for tombs in self._tombs.values():
            for key in [k for k, (_, t) in tombs.items() if t < limit]:
                del tombs[key]





class WatchSource(Protocol):
    """What the reflector needs from the API adapter (:class:`py_scheduler.app.client.kube.Kube`)."""

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
        absent_retry: seconds between LISTs of an ``optional`` kind the cluster does not serve.
        idle_timeout: seconds of silence after which a watch is re-opened (default
            :func:`watch_idle_timeout`).

    Attributes:
        last_rv: the resourceVersion the next watch starts from ("" before the first LIST).
        listed: set once the first LIST has been applied (the kind's initial sync); for an optional
            kind whose API is absent, once that was found out (the kind is then empty).
        absent: the last LIST of an optional kind answered 404 (the API is not served).
        lists, watches, events: counters (LISTs done, watches opened, watch events applied).
        list_started: ``time.monotonic()`` when the last complete LIST was sent (-inf before).
        blind_since: ``time.monotonic()`` since when changes may have been missed: the end of the last
            watch (closed by the server or broken), or this reflector's own last LIST when no watch
            ended since (a LIST the informers run beside a running watch does not count: the watch
            still resumes from where it was). After a 410 it is when the gap began.
    """

    def __init__(self, kube: WatchSource, wk: WatchedKind, store: ObjectStore, on_delta: DeltaHandler, *,
                 on_relist_start: Callable[[str], None] | None = None,
                 on_relist_end: Callable[[int, bool], None] | None = None,
                 min_watch_timeout: float = MIN_WATCH_TIMEOUT, page_limit: int = 500,
                 backoff_initial: float = BACKOFF_INITIAL, backoff_max: float = BACKOFF_MAX,
                 rand: Callable[[], float] = random.random, absent_retry: float = ABSENT_RETRY,
                 idle_timeout: float | None = None) -> None:
        self.kube = kube
        self.idle_timeout = idle_timeout if idle_timeout is not None else watch_idle_timeout()
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
        self.absent_retry = absent_retry
        self.absent = False
        self.last_rv = ""
        self.listed = asyncio.Event()
        self.lists = 0
        self.list_started = float("-inf")
        self.blind_since = float("-inf")
        self.watches = 0
        self.events = 0
        self._lock = asyncio.Lock()

    # -- LIST ----------------------------------------------------------------------------------------
    async def relist(self) -> int:
        """A paged LIST applied page by page to the store, then the deletions of what it lacked;
        returns the number of deltas (changes the watch had not delivered). Moves :attr:`last_rv` to
        the list's resourceVersion unless a running watch moved it meanwhile (a resync racing the
        watch). Items without object metadata are skipped (logged). One LIST at a time (a concurrent
        caller waits for its turn). An ``optional`` kind whose LIST answers 404 is empty: whatever the
        store held of it is deleted and :attr:`absent` is set.

        Raises:
            KubeError: the LIST failed (the store keeps what was applied so far; nothing is deleted).
        """
        async with self._lock:
            started = time.monotonic()
            wk = self.wk
            seen: set[str] = set()
            changes = 0
            list_rv = ""
            rv_before = self.last_rv
            try:
                async for items, rv in self.kube.list_pages(wk.list_path, field_selector=wk.field_selector,
                                                            limit=self.page_limit):
                    list_rv = rv
                    changes += self._apply_page(items, seen)
                    del items
            except NotFound:
                if not wk.optional:
                    raise
                if not self.absent:
                    log.info("%s (%s) is not served by this cluster; not watching it", wk.kind, wk.group_version)
                self.absent = True
                seen.clear()
                list_rv = ""
            else:
                self.absent = False
            for old, new in self.store.sweep(wk, seen, list_rv):
                changes += 1
                self.on_delta(wk, old, new)
            self.lists += 1
            self.list_started = started
            # A re-LIST racing a running watch (the informers' resync) must not move the watch's
            # resourceVersion back: the watch moved it while the LIST ran, it is the newer one.
            if list_rv and self.last_rv == rv_before:
                self.last_rv = list_rv
            return changes

    def _apply_page(self, items: Iterable[Any], seen: set[str]) -> int:
        """Apply one LIST page to the store (keys added to ``seen``); returns the deltas delivered."""
        wk = self.wk
        changes = 0
        for obj in items:
            if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
                log.warning("%s list: ignoring an item without object metadata: %.200r", wk.kind, obj)
                continue
            seen.add(wk.key(obj))
            delta = self.store.apply(wk, None, obj)
            if delta is not None:
                changes += 1
                self.on_delta(wk, *delta)
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
        # a silent connection is dead after the idle timeout (bookmarks come every minute), the
        # server's own end of the watch is never later than timeoutSeconds
        stream = self.kube.watch(wk.list_path, query,
                                 read_timeout=min(query["timeoutSeconds"] + 60.0, self.idle_timeout))
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
                        if n:  # a watch that was delivering: what it missed is unknown, up to now
                            self.blind_since = time.monotonic()
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
                self.blind_since = self.list_started  # the watch below starts from this LIST
                if gap_reason and self.on_relist_end is not None:
                    self.on_relist_end(changes, True)
                need_list, gap_reason = False, ""
                self.listed.set()
                delay = self.backoff_initial
                if self.absent:
                    await asyncio.sleep(self.absent_retry)  # nothing to watch; look again later
                    need_list = True
                    continue
            started = time.monotonic()
            try:
                n = await self.watch_once()
            except ResourceExpired as exc:
                log.info("%s watch from resourceVersion %s expired (%s): re-listing", wk.kind, self.last_rv, exc)
                WATCH_RESTARTS.labels(wk.kind, "expired").inc()
                need_list, gap_reason = True, f"410 Gone: {exc}"
                continue
            except KubeError as exc:
                self.blind_since = time.monotonic()
                log.info("%s watch failed (%s): re-watching from resourceVersion %s in %.1fs", wk.kind, exc,
                         self.last_rv, delay)
                WATCH_RESTARTS.labels(wk.kind, "error").inc()
                delay = await self._backoff(delay)
                continue
            self.blind_since = time.monotonic()
            if n == 0 and time.monotonic() - started < 1.0:
                # reflector.go's VeryShortWatchError: a server closing watches at once must not spin us
                log.info("%s watch ended at once without an event; re-watching in %.1fs", wk.kind, delay)
                WATCH_RESTARTS.labels(wk.kind, "short").inc()
                delay = await self._backoff(delay)
                continue
            log.debug("%s watch ended by the server after %d event(s); re-watching from %s", wk.kind, n,
                      self.last_rv)
            WATCH_RESTARTS.labels(wk.kind, "closed").inc()
            delay = self.backoff_initial
