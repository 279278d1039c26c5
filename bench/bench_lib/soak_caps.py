"""Run ``py-scheduler`` with its memory bounds lowered, and report how full each one is (issue 31, item 6).

A soak shows that memory plateaus only if the churn fills every bounded structure in its first half.
At the production caps that takes days for some of them (8192 GPU node names, 200 000 DRA selector
results, 50 000 tombstones). This launcher lowers each cap to a size a one-hour churn overflows
(:data:`LOWERED`), then runs the ordinary command line. The code that enforces each bound is the
production code: only the number changes. Each structure's memory at its real cap is its entry size
times that cap (docs/operations.md, "Memory bounds").

    python -m bench.bench_lib.soak_caps --report FILE [--every S] -- run --kubeconfig ... (py-scheduler's arguments)

Every ``--every`` seconds (default 30), a daemon thread writes ``FILE``:
``{"t": <unix time>, "bounds": {name: {"size": n, "cap": c, "peak": p, "resets": r}}}``. It finds
the instances through their constructors (weak references: the report keeps nothing alive).
``resets`` counts the times a structure was seen smaller than at the report before: one that clears
at its cap, or entries that expired. ``bench/bench_lib/soak.py`` (``--fill-bounds``) starts its
replicas through here and puts each file's last report into its samples.

Depends on the names below existing in py_scheduler. :func:`apply` raises ``AttributeError`` when
one is renamed, and ``tests/unit/bench/test_soak_caps.py`` checks that every name resolves.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from py_scheduler.app.client import reflector
from py_scheduler.app.scheduling import binder
from py_scheduler.app.scheduling.decisions import DecisionLog
from py_scheduler.app.serving import secure
from py_scheduler.framework import memo
from py_scheduler.framework.preemption import VictimsMemo
from py_scheduler.plugins.dynamic_resources import allocator, pools, selector_memo
from py_scheduler.plugins.gpu import accounting
from py_scheduler.plugins.gpu import filter as gpu_filter
from py_scheduler.queue import scheduling_queue

LOWERED: dict[str, int] = {
    "tombstones per kind": 1000,           # reflector.TOMBSTONES_MAX, 50 000
    "queue hint memos": 32,                 # scheduling_queue._MEMO_MAX, 4096 (its keys, (group, event)
                                            # pairs, are a finite set: ~50 seen in a soak)
    "event series": 256,                    # binder.EVENT_SERIES_MAX, 4096
    "review caches": 16,                    # secure.CACHE_SIZE, 4096 (and a 10 s TTL)
    "GPU node states": 64,                  # accounting.MEMO_CAPACITY, 8192
    "GPU request tokens": 64,               # gpu_filter._TOKENS_MAX, 4096
    "DRA selector results": 2000,           # SelectorMemo max_size, 200 000
    "DRA per-node views": 16,               # pools / allocator SLICE_VIEW_NODES_MAX, 20 000
    "preemption dry-run victims": 16,       # VictimsMemo max_entries, 65 536
    "PodInfo request parses": 256,          # memo.REQUESTS, 4096
    "queueing-hint PodInfos": 256,          # memo.HINT_POD_INFOS, 4096
    "PV node affinities": 64,               # memo.PV_NODE_AFFINITY, 50 000
    "CEL selectors": 32,                    # memo.CEL_SELECTORS, 256
    "DRA quantities": 64,                   # memo.QUANTITIES, 4096
}
"""Each bound's lowered cap (the production value in the comment). The decision ring's capacity is a
command-line flag (``--decisions-capacity``, default 50 000): the soak passes a lower one, and the
report shows it as ``decision ring`` with the capacity the process was given."""


_SHARED_MEMOS = (("REQUESTS", "PodInfo request parses"), ("HINT_POD_INFOS", "queueing-hint PodInfos"),
                 ("PV_NODE_AFFINITY", "PV node affinities"), ("CEL_SELECTORS", "CEL selectors"),
                 ("QUANTITIES", "DRA quantities"))
"""``framework/memo.py`` shared memos (attribute, name in :data:`LOWERED`)."""

_BOUNDED_TYPES: tuple[type, ...] = (reflector.ObjectStore, scheduling_queue.PriorityQueue, binder.Binder,
                                    secure._TTLCache, VictimsMemo, pools.SliceView, DecisionLog)
"""The classes whose instances :func:`track` records and :func:`sizes` reads."""


def apply(caps: dict[str, int] = LOWERED) -> None:
    """Lower every cap in :data:`LOWERED` in this process, before the scheduler builds anything.

    Module constants are read when a structure is created or filled; constructor defaults are
    replaced; the process-wide instances that already exist get the new cap directly.

    Raises:
        AttributeError: a name this relies on no longer exists in py_scheduler.
    """
    def setmod(mod: Any, name: str, value: int) -> None:
        getattr(mod, name)  # AttributeError when renamed
        setattr(mod, name, value)

    setmod(reflector, "TOMBSTONES_MAX", caps["tombstones per kind"])
    setmod(scheduling_queue, "_MEMO_MAX", caps["queue hint memos"])
    setmod(binder, "EVENT_SERIES_MAX", caps["event series"])
    setmod(secure, "CACHE_SIZE", caps["review caches"])
    setmod(accounting, "MEMO_CAPACITY", caps["GPU node states"])
    setmod(gpu_filter, "_TOKENS_MAX", caps["GPU request tokens"])
    selector_memo.SelectorMemo.__init__.__defaults__ = (caps["DRA selector results"],)
    selector_memo.SELECTOR_MEMO.max_size = caps["DRA selector results"]
    setmod(pools, "SLICE_VIEW_NODES_MAX", caps["DRA per-node views"])
    setmod(allocator, "SLICE_VIEW_NODES_MAX", caps["DRA per-node views"])
    VictimsMemo.__init__.__defaults__ = (caps["preemption dry-run victims"],)
    for name, key in _SHARED_MEMOS:
        getattr(memo, name).size = caps[key]


_TRACKED: dict[type, Any] = {}
"""type -> its live instances: a WeakSet, or a list for :class:`VictimsMemo` (no weak references;
one per DefaultPreemption plugin, living as long as the process)."""


def track() -> None:
    """Record every instance of the bounded types created from now on (their ``__init__`` wrapped).

    ``gc.get_objects()`` cannot find them: py-scheduler freezes its heap after the first sync, and
    frozen objects are not listed."""
    for cls in _BOUNDED_TYPES:
        if cls in _TRACKED:
            continue
        reg: Any = [] if cls is VictimsMemo else weakref.WeakSet()
        _TRACKED[cls] = reg
        init = vars(cls)["__init__"]

        def wrapped(self: Any, *a: Any, _init: Any = init, _reg: Any = reg, **kw: Any) -> None:
            _init(self, *a, **kw)
            (_reg.append if isinstance(_reg, list) else _reg.add)(self)

        setattr(cls, "__init__", wrapped)  # noqa: B010 (mypy refuses a method assignment on a plain type)


def _instances() -> dict[type, list[Any]]:
    return {cls: list(_TRACKED.get(cls, ())) for cls in _BOUNDED_TYPES}


def sizes(caps: dict[str, int] = LOWERED) -> dict[str, dict[str, int]]:
    """The size of every bounded structure now, with its cap: ``{name: {"size": n, "cap": c}}``.
    Several instances of one kind (two review caches, one queue per process) report their largest."""
    found = _instances()
    out: dict[str, dict[str, int]] = {}

    def put(name: str, size: int) -> None:
        entry = out.setdefault(name, {"size": 0, "cap": caps[name]})
        entry["size"] = max(entry["size"], size)

    for store in found[reflector.ObjectStore]:
        for kind_tombs in store._tombs.values():
            put("tombstones per kind", len(kind_tombs))
    for q in found[scheduling_queue.PriorityQueue]:
        put("queue hint memos", max(len(q._interest_memo), len(q._group_memo)))
    for b in found[binder.Binder]:
        put("event series", len(b._series))
    for c in found[secure._TTLCache]:
        put("review caches", len(c._d))
    put("GPU node states", len(accounting._memo))
    put("GPU request tokens", len(gpu_filter._TOKENS))
    put("DRA selector results", len(selector_memo.SELECTOR_MEMO))
    for v in found[pools.SliceView]:
        put("DRA per-node views", max(len(v._pools), len(v._ids), len(v.results)))
    for m in found[VictimsMemo]:
        put("preemption dry-run victims", len(m._entries))
    for name, key in _SHARED_MEMOS:
        put(key, len(getattr(memo, name)))
    for name in caps:
        out.setdefault(name, {"size": 0, "cap": caps[name]})
    for log in found[DecisionLog]:
        out["decision ring"] = {"size": len(log.records), "cap": log.capacity}
    return out


class Reporter:
    """Writes :func:`sizes` to ``path`` every ``every`` seconds (atomically: a temporary file renamed),
    with ``resets`` and ``peak`` kept per structure across reports."""

    def __init__(self, path: str, every: float, measure: Callable[[], dict[str, dict[str, int]]] = sizes) -> None:
        self.path, self.every, self.measure = path, every, measure
        self.peak: dict[str, int] = {}
        self.resets: dict[str, int] = {}
        self._last: dict[str, int] = {}

    def once(self) -> dict[str, Any]:
        """Measure, update peaks and resets, write the file; returns the document written."""
        now = self.measure()
        for name, e in now.items():
            if e["size"] < self._last.get(name, 0):
                self.resets[name] = self.resets.get(name, 0) + 1
            self._last[name] = e["size"]
            self.peak[name] = max(self.peak.get(name, 0), e["size"])
            e["peak"] = self.peak[name]
            e["resets"] = self.resets.get(name, 0)
        doc = {"t": time.time(), "bounds": now}
        tmp = f"{self.path}.tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f)
        os.replace(tmp, self.path)
        return doc

    def loop(self) -> None:
        while True:
            time.sleep(self.every)  # the report's pace, not synchronisation
            try:
                self.once()
            except Exception as exc:  # a failed report must never stop the scheduler
                print(f"soak_caps: report failed: {exc!r}", file=sys.stderr)


def main(argv: list[str] | None = None) -> None:
    """Parse ``--report FILE [--every S] -- <py-scheduler arguments>``, lower the caps, start the
    reporter and hand the rest of the command line to py-scheduler's own entry point."""
    args = sys.argv[1:] if argv is None else argv
    if "--" not in args:
        raise SystemExit("usage: python -m bench.bench_lib.soak_caps --report FILE [--every S] -- <py-scheduler args>")
    cut = args.index("--")
    p = argparse.ArgumentParser(prog="soak_caps")
    p.add_argument("--report", required=True)
    p.add_argument("--every", type=float, default=30.0)
    opts = p.parse_args(args[:cut])
    apply()
    track()
    reporter = Reporter(opts.report, opts.every)
    threading.Thread(target=reporter.loop, name="soak-caps-report", daemon=True).start()
    from py_scheduler import cli
    sys.argv = ["py-scheduler", *args[cut + 1:]]
    cli.main()


if __name__ == "__main__":
    main()
