"""Where this process's memory goes, for a leak hunt: ``GET /debug/memory`` (opt-in detail).

``GET`` only reads; the actions that change the process (``trace``, ``mark``, ``gc``) are taken
only by ``POST`` and only with ``--profiling`` (off by default, as kube-scheduler serves pprof only
with ``--profiling``): a ``GET`` naming one answers 400, a ``POST`` without the flag 405; the
reader needs ``post`` on the non-resource URL for them.

Served on the metrics/health port (:func:`add_routes`; behind the same delegated authentication and
authorization as ``/metrics``: the reader needs ``get`` on the non-resource URL ``/debug/memory``).
One JSON document, :meth:`MemoryDebug.report`:

- ``process``: RSS, open fds, asyncio tasks, threads (:func:`py_scheduler.app.serving.cachedump.process_stats`);
- ``gc``: ``counts`` (allocations since the last collection of each generation, ``gc.get_count()``),
  ``thresholds``, ``collections`` / ``collected`` / ``uncollectable`` per generation
  (``gc.get_stats()``), ``frozen`` (objects moved out of the collector's reach by ``gc.freeze()``
  after the initial sync). No count of the tracked objects: ``len(gc.get_objects())`` builds a list
  of every one of them (millions at 30000 Pods) per request; ``counts`` and ``frozen`` are O(1);
- ``tracemalloc``: None while Python's allocation tracing is off (the default: it costs CPU and
  memory on every allocation). ``?trace=N`` turns it on with N frames per traceback (``?trace=0``
  off; ``PYTHONTRACEMALLOC=N`` at start traces start-up too, which is slow: imports under tracing
  took over a minute on a loaded 2-core machine). Only blocks allocated since tracing began are
  seen, which is what a leak hunt wants. While on: ``traced_bytes`` / ``peak_bytes`` and ``top``: the
  ``top`` (query, default 25) allocation sites (``group`` = ``lineno``, ``filename`` or
  ``traceback``) by size difference from the *marked* snapshot (by size when none is marked):
  ``{"site": [frames...], "size": bytes, "size_diff": bytes, "count": n, "count_diff": n}``.
  ``?mark=1`` keeps this call's snapshot as the mark for the next calls (``marked_at``: Unix
  seconds of the mark); the kept snapshot itself takes memory (about 100 bytes per traced block)
  until the next mark.

``?gc=1`` runs a full collection first (``collected_now``: objects freed, ``collect_seconds``), so that what the
report shows is reachable, not garbage the collector has not reached yet: Go's
``/debug/pprof/heap?gc=1``, which kube-scheduler serves with ``--profiling`` (``net/http/pprof``
via ``k8s.io/apiserver/pkg/server/routes/profiling.go``), does the same.

Cost: nothing until requested; without tracing a request is O(1) (except ``?gc=1``); with tracing
on, it walks every traced block (a snapshot: tens of milliseconds at ~10^5 blocks). The soak reads it
every sample with ``bench/soak --tracemalloc N``, tracing from its mark on (docs/faults.md, "Soak").
"""

from __future__ import annotations

import gc
import time
import tracemalloc
from typing import Any

from aiohttp import web

from py_scheduler.app.serving.cachedump import process_stats

__all__ = ["PATH", "MemoryDebug", "add_routes"]

PATH = "/debug/memory"
GROUPS = ("lineno", "filename", "traceback")
_IGNORED = (tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, "<frozen importlib._bootstrap>"),
            tracemalloc.Filter(False, "<unknown>"))


class MemoryDebug:
    """The ``/debug/memory`` document (module docstring); keeps the marked tracemalloc snapshot."""

    def __init__(self) -> None:
        self._mark: tracemalloc.Snapshot | None = None
        self._marked_at: float | None = None

    def report(self, *, top: int = 25, group: str = "lineno", mark: bool = False, collect: bool = False,
               trace: int | None = None) -> dict[str, Any]:
        """The document; ``trace``: turn tracing on with that many frames (0: off, None: as is).
        Raises ValueError for a ``group`` not in :data:`GROUPS`, ``top`` < 0 or ``trace`` outside
        0-100."""
        if group not in GROUPS:
            raise ValueError(f"group must be one of {', '.join(GROUPS)}")
        if top < 0:
            raise ValueError("top must be >= 0")
        if trace is not None and not 0 <= trace <= 100:
            raise ValueError("trace must be 0 (off) to 100 frames")
        doc: dict[str, Any] = {"time": time.time()}
        if trace == 0 and tracemalloc.is_tracing():
            tracemalloc.stop()
            self._mark = self._marked_at = None
        elif trace and not tracemalloc.is_tracing():
            tracemalloc.start(trace)
        if collect:
            t0 = time.perf_counter()
            doc["collected_now"] = gc.collect()
            doc["collect_seconds"] = round(time.perf_counter() - t0, 4)
        stats = gc.get_stats()
        doc["process"] = process_stats()
        doc["gc"] = {"counts": list(gc.get_count()), "thresholds": list(gc.get_threshold()),
                     "collections": [s["collections"] for s in stats], "collected": [s["collected"] for s in stats],
                     "uncollectable": [s["uncollectable"] for s in stats], "frozen": gc.get_freeze_count()}
        doc["tracemalloc"] = self._traces(top, group, mark) if tracemalloc.is_tracing() else None
        return doc

    def _traces(self, top: int, group: str, mark: bool) -> dict[str, Any]:
        snap = tracemalloc.take_snapshot().filter_traces(_IGNORED)
        current, peak = tracemalloc.get_traced_memory()
        rows: list[dict[str, Any]] = []
        if self._mark is not None:
            for d in snap.compare_to(self._mark, group)[:top]:
                rows.append({"site": [str(f) for f in d.traceback], "size": d.size, "size_diff": d.size_diff,
                             "count": d.count, "count_diff": d.count_diff})
        else:
            for s in snap.statistics(group)[:top]:
                rows.append({"site": [str(f) for f in s.traceback], "size": s.size, "size_diff": None,
                             "count": s.count, "count_diff": None})
        out = {"traced_bytes": current, "peak_bytes": peak, "frames": tracemalloc.get_traceback_limit(),
               "group": group, "marked_at": self._marked_at, "top": rows}
        if mark:
            self._mark, self._marked_at = snap, time.time()
            out["marked_at"] = self._marked_at
        return out


ACTIONS = ("trace", "mark", "gc")
"""Query parameters that change the process: ``POST`` with ``--profiling`` only."""


def add_routes(app: web.Application, mem: MemoryDebug, *, profiling: bool = False) -> None:
    """Serve ``GET /debug/memory[?top=N][&group=G]`` (JSON) on ``app`` and, with ``profiling``, ``POST
    /debug/memory[?...][&mark=1][&gc=1][&trace=N]``; a bad query answers 400. Call before the server
    starts."""

    async def handler(request: web.Request) -> web.Response:
        q = request.query
        if request.method != "POST" and any(a in q for a in ACTIONS):
            return web.json_response({"error": f"{', '.join(a for a in ACTIONS if a in q)}: POST only, and only "
                                               "with --profiling"}, status=400)
        try:
            doc = mem.report(top=int(q.get("top", "25")), group=q.get("group", "lineno"),
                             mark=q.get("mark") in ("1", "true"), collect=q.get("gc") in ("1", "true"),
                             trace=int(q["trace"]) if "trace" in q else None)
        except ValueError as e:
            return web.json_response({"error": str(e)}, status=400)
        return web.json_response(doc)

    app.router.add_get(PATH, handler)
    if profiling:
        app.router.add_post(PATH, handler)
