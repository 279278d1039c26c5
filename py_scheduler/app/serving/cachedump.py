"""The scheduler's view of the cluster, dumped for a differential check against the API server.

``GET /debug/cache`` on the metrics/health port (:func:`add_routes`; behind the same delegated
authentication and authorization as ``/metrics``: the reader needs ``get`` on that non-resource
URL) answers one JSON document, :meth:`CacheDump.dump`:

- ``informers``: kind -> ``{key: resourceVersion}`` of every object the informers' store holds, for
  every kind this replica watches (``kinds``: :data:`py_scheduler.cache.kinds.KINDS` without the
  kinds of feature gates that are off, e.g. PodGroup without GenericWorkload; a kind not watched is
  absent, not empty) (keys as :meth:`WatchedKind.key`: ``namespace/name`` or ``name``);
- ``cache``: what the scheduling cycles read - ``nodes``: the Nodes in the cache's node tree (a
  NodeInfo kept only for Pods still bound to a deleted Node is not listed), ``pods``: UID ->
  ``{"pod": "ns/name", "node": ..., "assumed": bool, "bindingFinished": bool}`` of every Pod the
  cache counts on a Node (bound, or assumed while its binding is in flight);
- ``queue``: the scheduling queue's lengths (``active``, ``backoff``, ``unschedulable``,
  ``gated``, ``in_flight``);
- ``process``: ``rss_bytes`` (resident set, from ``/proc/self/statm``), ``open_fds``
  (``/proc/self/fd``), ``asyncio_tasks`` (``asyncio.all_tasks()``), ``threads``; None where the
  platform has no ``/proc``;
- ``leader``, ``synced`` (informers listed once), ``consistent`` (no watch gap being reconciled),
  ``time`` (Unix seconds).

The checker that compares this with a fresh LIST of every kind, and its rule for changes in flight,
is ``tests/e2e/faults/cachediff.py`` (docs/faults.md, "Cache differential check").

Cost: one pass over the store and the cache, on request only; nothing on the scheduling path. A
standby replica answers too (its informers and cache run while it waits for the Lease).

Upstream: kube-scheduler has the same need and answers it with a signal: ``SIGUSR2`` makes
``pkg/scheduler/backend/cache/debugger`` (``CacheComparer.Compare``) compare the cache's Nodes and
Pods with the informers' listers and log the differences, and ``CacheDumper`` log the cache and the
queue. Here the dump is served instead, so that the comparison is made against the API server
itself (not only the informers) and from outside the process.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from aiohttp import web

from py_scheduler.cache.cache import Cache
from py_scheduler.cache.kinds import KINDS, WatchedKind

__all__ = ["PATH", "CacheDump", "add_routes", "process_stats"]

PATH = "/debug/cache"


class _Store(Protocol):
    def list_kind(self, kind: str) -> list[dict[str, Any]]: ...


class _Queue(Protocol):
    def lengths(self) -> dict[str, int]: ...


def _rv(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def process_stats() -> dict[str, int | None]:
    """``rss_bytes``, ``open_fds``, ``asyncio_tasks`` (of the running loop; None outside one) and
    ``threads`` of this process; None for what ``/proc`` cannot tell (not Linux)."""
    rss: int | None
    try:
        with open("/proc/self/statm") as f:
            rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        rss = None
    try:
        fds: int | None = len(os.listdir("/proc/self/fd"))
    except OSError:
        fds = None
    try:
        tasks: int | None = len(asyncio.all_tasks())
    except RuntimeError:  # no running event loop
        tasks = None
    return {"rss_bytes": rss, "open_fds": fds, "asyncio_tasks": tasks, "threads": threading.active_count()}


class CacheDump:
    """Builds the ``/debug/cache`` document (module docstring) from the live objects.

    Args:
        store: the informers' store (``list_kind(kind)`` -> the stored objects).
        cache: the scheduler cache.
        queue: the scheduling queue (``lengths()``).
        is_leader: whether this replica leads (informational).
        synced / consistent: the informers' events (:class:`py_scheduler.app.client.informers.Informers`).
        kinds: the kinds dumped (default every watched kind).
    """

    def __init__(self, store: _Store, cache: Cache, queue: _Queue, *, is_leader: Callable[[], bool],
                 synced: asyncio.Event | None = None, consistent: asyncio.Event | None = None,
                 kinds: Iterable[WatchedKind] = KINDS) -> None:
        self.store = store
        self.cache = cache
        self.queue = queue
        self.is_leader = is_leader
        self.synced = synced
        self.consistent = consistent
        self.kinds = tuple(kinds)

    def dump(self) -> dict[str, Any]:
        """The document (plain JSON types); never raises for odd objects (an object without a name
        is dumped under the key "")."""
        informers = {wk.kind: {wk.key(o): _rv(o) for o in self.store.list_kind(wk.kind)} for wk in self.kinds}
        pods = {pi.uid or pi.key: {"pod": pi.key, "node": pi.node_name, "assumed": assumed,
                                   "bindingFinished": finished}
                for pi, assumed, finished in self.cache.pod_states()}
        return {
            "time": time.time(),
            "leader": bool(self.is_leader()),
            "synced": self.synced.is_set() if self.synced is not None else None,
            "consistent": self.consistent.is_set() if self.consistent is not None else None,
            "informers": informers,
            "cache": {"nodes": sorted(self.cache.node_names()), "pods": pods},
            "queue": dict(self.queue.lengths()),
            "process": process_stats(),
        }


def add_routes(app: web.Application, dump: CacheDump) -> None:
    """Serve ``GET /debug/cache`` (JSON) on ``app``; call before the server starts."""

    async def handler(_request: web.Request) -> web.Response:
        return web.json_response(dump.dump())

    app.router.add_get(PATH, handler)
