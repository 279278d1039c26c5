"""Decision records: what the live scheduler saw and chose at every scheduling attempt.

``py-scheduler explain --pod`` recomputes a decision from the cluster as it is *now*; the question
users ask ("why did this replica land on the node that OOMed an hour ago?") comes later, after Pods
came and went. kube-scheduler answers it only with ``-v=10`` logs (``schedule_one.go``:
``prioritizeNodes`` logs every plugin's weighted score per node, ``Calculated node's final score``);
this module keeps the decision itself, in memory, on the leader.

Record (one per scheduling attempt, :class:`Decision`): Pod UID, ``namespace/name``, profile,
attempt number (``QueuedPodInfo.attempts``), wall-clock time and cycle duration, nodes in the
snapshot / evaluated / feasible, the Filter histogram (plugin, reason -> number of nodes), for the
top K nodes by total (default 5) and the selected node every Score plugin's normalized score
(0-100, before its weight), the weights and the total, the plugins whose PreScore skipped, the
selected node, the Pod annotations Reserve asked for (GPU indices), the DRA devices Reserve picked,
the nomination and victims of preemption, and the FailedScheduling message when nothing fit.

Cost (hot path, :meth:`DecisionLog.record`): no API call, no JSON, no dict per node; a handful of
small tuples per attempt, reduced from what the runtime computed with C-level calls only. This
module owns that speed-up and depends on ``framework/algorithm.py``'s ``ScheduleResult``:
``selected_index`` (selectHost's position of the chosen node, whose total is the highest: the top K
are its first K occurrences when it is tied K times, else one ``sorted`` of the totals),
``filtered`` (node -> reasons, absent nodes included: the histogram is ``list.count`` per distinct
key, kept raw and split/sorted only when read, :attr:`Decision.filters`), ``score_names`` /
``score_columns`` / ``total_values``. tests/unit/app/test_decisions_lazy.py checks that the record
serves exactly what the eager form served. JSON and HTML are built only when served.

Bound: a ring (``collections.deque(maxlen=capacity)``) of :data:`DEFAULT_CAPACITY` records, the
oldest dropped first; ``py_scheduler_decision_records_dropped_total`` counts the drops and
``py_scheduler_decision_records`` the records kept (see :class:`DecisionLogCollector`). A record
holds references to strings the scheduler keeps anyway (node, plugin, reason names) plus 0.6-0.8 KiB
of its own and the Pod's name and UID (docs/decisions.md has the measurement), so the default ring
is ~40 MiB.

Served by :mod:`py_scheduler.app.serving.decisions_http` on the metrics/health server: ``GET
/debug/decisions?pod=NS/NAME`` (JSON, newest first, keys as ``explain -o json`` where they mean the
same), ``GET /debug/decisions`` (the latest records), ``GET /debug/decisions/ui`` (an HTML page, no
JavaScript). A replica that is not leading answers 503: it schedules nothing, so it has nothing to tell.

Upstream: no counterpart keeps decisions; the numbers are those of ``pkg/scheduler/schedule_one.go``
(``findNodesThatFitPod``, ``prioritizeNodes``, ``selectHost``) and ``framework/types.go``
(``FitError``, ``Diagnosis``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from operator import itemgetter
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from py_scheduler.framework.algorithm import ScheduleResult
from py_scheduler.framework.types import PodInfo

__all__ = ["DEFAULT_CAPACITY", "DEFAULT_TOP_K", "Decision", "DecisionLog", "DecisionLogCollector"]

DEFAULT_CAPACITY = 50_000
"""Records kept: the last hour of a cluster making ~14 scheduling attempts per second, sustained
(a busy cluster: 50 000 Pod creations an hour), in ~40 MiB (0.6-0.8 KiB per record, measured with
tracemalloc at 1000 nodes, docs/decisions.md). ``--decisions-capacity`` sizes it."""
DEFAULT_TOP_K = 5
"""Nodes whose scores are kept besides the selected one, best total first."""

GPU_INDICES_SUFFIX = "gpu-indices"
"""The annotation GPUFilter's Reserve writes (``<prefix>gpu-indices``; the prefix is configurable)."""

RESULT_SCHEDULED = "scheduled"
RESULT_UNSCHEDULABLE = "unschedulable"
RESULT_ERROR = "error"


def rfc3339(t: float) -> str:
    """A POSIX time as RFC 3339 UTC with microseconds (``2026-01-02T03:04:05.000006Z``)."""
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Decision:
    """One scheduling attempt, compact (slots; tuples and shared strings).

    Attributes:
        uid, pod (``namespace/name``), profile: the Pod and the profile that scheduled it.
        attempt: ``QueuedPodInfo.attempts`` (1 for the first attempt).
        time: wall-clock seconds since the epoch at the end of the scheduling cycle.
        duration: seconds from pop to the end of the scheduling cycle (binding not included).
        result: ``scheduled`` (assumed; binding follows in the background), ``unschedulable`` or ``error``.
        nodes_total / nodes_evaluated / feasible: nodes in the snapshot, looked at, passing Filter.
        counts: the Filter / PreFilter rejections as the hot path counted them (:func:`filter_counts`:
            ``(reasons joined by NUL, nodes)``, unsorted); :attr:`filters` renders them when read.
        rejected_by: the plugins that rejected a node (or the Pod), sorted.
        plugins / weights: the Score plugins that ran (the order of each row of ``rows``) and their weights.
        skipped: Score plugins whose PreScore returned Skip.
        nodes / totals / rows: the kept nodes (top K by total and the selected one), best first, their
            weighted totals and their normalized scores, node after node, one per plugin (one flat
            ``bytes`` when every score fits in a byte, as they do after NormalizeScore; :meth:`row`).
        selected: the node chosen (None when nothing fit or the attempt failed).
        message: the FailedScheduling message (or the error) when not scheduled, else None.
        annotations: the Pod annotations Reserve asked for (GPU indices), or None.
        dra: DynamicResources' allocations (claim ``namespace/name`` -> AllocationResult JSON), or None.
        nominated / victims: preemption's nominated node and the victims' ``namespace/name``.
    """

    __slots__ = ("annotations", "attempt", "counts", "dra", "duration", "feasible", "message", "nodes",
                 "nodes_evaluated", "nodes_total", "nominated", "plugins", "pod", "profile", "rejected_by", "result",
                 "rows", "selected", "skipped", "time", "totals", "uid", "victims", "weights")

    uid: str
    pod: str
    profile: str
    attempt: int
    time: float
    duration: float
    result: str
    nodes_total: int
    nodes_evaluated: int
    feasible: int
    counts: tuple[tuple[str, int], ...]
    rejected_by: tuple[str, ...]
    plugins: tuple[str, ...]
    weights: Mapping[str, int]
    skipped: Sequence[str]
    nodes: tuple[str, ...]
    totals: tuple[int, ...]
    rows: Sequence[int]
    selected: str | None
    message: str | None
    annotations: Mapping[str, str] | None
    dra: Mapping[str, Any] | None
    nominated: str | None
    victims: tuple[str, ...]

    @property
    def filters(self) -> tuple[tuple[str, int], ...]:
        """``(reason, nodes)`` per distinct Filter / PreFilter reason, most nodes first then by reason
        (``render_histogram(filter_counts(result))``: counted as ``explain`` counts), rendered on read."""
        return render_histogram(self.counts)

    def to_json(self) -> dict[str, Any]:
        """The served JSON object. Keys shared with ``explain -o json`` mean the same there:
        ``pod``, ``profile``, ``nodes_evaluated``, ``scores`` (plugin -> node -> normalized score,
        for the kept nodes only), ``weights``, ``skipped``, ``totals`` (kept nodes), ``selected``,
        ``message``. Instead of explain's per-node ``filtered`` and ``feasible`` lists a record
        keeps ``filtered_histogram`` (reason -> nodes, the histogram of the FailedScheduling
        message), ``rejected_by`` (plugins) and ``feasible_count``."""
        scores: dict[str, dict[str, int]] = {p: {} for p in self.plugins}
        for i, node in enumerate(self.nodes):
            for p, sc in zip(self.plugins, self.row(i), strict=True):
                scores[p][node] = sc
        return {
            "pod": self.pod, "uid": self.uid, "profile": self.profile, "attempt": self.attempt,
            "time": rfc3339(self.time), "duration_seconds": round(self.duration, 6), "result": self.result,
            "nodes_total": self.nodes_total, "nodes_evaluated": self.nodes_evaluated,
            "feasible_count": self.feasible,
            "filtered_histogram": dict(self.filters), "rejected_by": list(self.rejected_by),
            "scores": scores, "weights": {p: self.weights.get(p, 0) for p in self.plugins},
            "skipped": list(self.skipped), "totals": dict(zip(self.nodes, self.totals, strict=True)),
            "ranked": list(self.nodes), "selected": self.selected, "message": self.message,
            "gpu_indices": self.gpu_indices(), "annotations": dict(self.annotations or {}),
            "dra_devices": self.dra_devices(), "nominated_node": self.nominated, "victims": list(self.victims),
            "recorded": True,
        }

    def row(self, i: int) -> Sequence[int]:
        """The normalized scores of ``nodes[i]``, aligned with ``plugins``."""
        n = len(self.plugins)
        return self.rows[i * n:(i + 1) * n]

    def gpu_indices(self) -> str | None:
        """The GPU indices Reserve picked (``"0,1"``), or None."""
        for k, v in (self.annotations or {}).items():
            if k.endswith(GPU_INDICES_SUFFIX):
                return v
        return None

    def dra_devices(self) -> list[dict[str, str]]:
        """One ``{claim, request, driver, pool, device}`` per device DynamicResources allocated."""
        out: list[dict[str, str]] = []
        for claim, alloc in (self.dra or {}).items():
            results = ((alloc or {}).get("devices") or {}).get("results") if isinstance(alloc, dict) else None
            for r in results or []:
                if isinstance(r, dict):
                    out.append({"claim": str(claim), **{k: str(r.get(k, "")) for k in
                                                        ("request", "driver", "pool", "device")}})
        return out


_FIRST = itemgetter(0)
_SEP = "\x00"  # joins a status's reasons into one hashable key; never part of a reason


_FEW_KEYS = 8
"""Distinct reason keys up to which :func:`filter_counts` counts with ``list.count`` (C scans)."""


def filter_counts(res: ScheduleResult | None) -> tuple[tuple[str, int], ...]:
    """The hot-path half of a Decision's filter histogram: ``(key, nodes)`` per distinct list of reasons
    (a node's reasons joined by ``\\x00``), unsorted. No split, no sort.

    Reads ``ScheduleResult.filtered`` (node -> reasons), which the runtime builds in every cycle from
    the Diagnosis (``framework/algorithm.py``, ``Algorithm.schedule``: every rejected node's status
    reasons, plus the absent nodes' reasons after a PreFilter rejection or narrowing): the record
    depends on that map holding exactly those entries. Cost: one C-level pass joining each
    rejected node's reasons (a single reason is returned as is), then ``list.count`` per distinct key
    (a C scan; rejections have a handful of distinct reasons, usually one), ~20 ns per rejected node;
    ``Counter`` (~60 ns per node: a dict update each) only beyond :data:`_FEW_KEYS` keys."""
    filtered = res.filtered if res is not None else None
    if not filtered:
        return ()
    keys = list(map(_SEP.join, filtered.values()))
    if keys.count(first := keys[0]) == len(keys):
        return ((first, len(keys)),)
    distinct = set(keys)
    if len(distinct) <= _FEW_KEYS:
        return tuple((k, keys.count(k)) for k in distinct)
    return tuple(Counter(keys).items())


def render_histogram(counts: Iterable[tuple[str, int]]) -> tuple[tuple[str, int], ...]:
    """Read-time half of the filter histogram: split the keys of :func:`filter_counts` into
    reasons (a status with several reasons counts for each; no reason reads ``rejected``) and sort,
    most nodes first then by reason."""
    hist: dict[str, int] = {}
    for key, n in counts:
        for r in key.split(_SEP):
            hist[r or "rejected"] = hist.get(r or "rejected", 0) + n
    return tuple(sorted(hist.items(), key=lambda x: (-x[1], x[0])))


def rejecting_plugins(res: ScheduleResult | None) -> tuple[str, ...]:
    """The plugins that rejected a node or the Pod (``Diagnosis.UnschedulablePlugins`` and
    ``PendingPlugins``), sorted."""
    d = res.diagnosis if res is not None else None
    if d is None:
        return ()
    return tuple(sorted(d.unschedulable_plugins | d.pending_plugins))


def top_nodes(res: ScheduleResult, k: int) -> tuple[tuple[str, ...], tuple[int, ...], Sequence[int]]:
    """The best ``k`` scored nodes by total (ties: evaluation order) plus the selected node when it
    is not among them: (names, totals, their normalized scores node after node in score-column order,
    one flat ``bytes`` when they fit, else a tuple).
    Nothing when the cycle did not score (a single feasible node, a batch hint)."""
    names, totals, cols = res.score_names, res.total_values, res.score_columns
    n = len(totals)
    if n == 0:
        return (), (), ()
    idx: list[int] = []
    sel = res.selected
    i_sel = res.selected_index  # selectHost's choice: the highest total (ScheduleResult, algorithm.py)
    if not (0 <= i_sel < n and names[i_sel] == sel):
        i_sel = -1
    if k > 0 and i_sel >= 0:
        # Totals tie a lot (every node of a homogeneous pool): when the selected node's total, the
        # highest, occurs K times, the K best are its first K occurrences, found by ``list.index``
        # (C scans that stop early), without touching every total.
        top, start = totals[i_sel], 0
        try:
            for _ in range(k):
                i = totals.index(top, start)
                idx.append(i)
                start = i + 1
        except ValueError:  # fewer than K ties at the top: sort below
            idx.clear()
    if k > 0 and not idx:
        # C-level work only (this runs in every cycle): one sort of the totals gives the K best
        # values (a sort of ints compares them without the generic protocol: cheaper than one
        # ``max`` or ``list.count`` pass); each is then located with ``list.index`` (a C scan), best
        # first, ties in evaluation order. Much cheaper than ``heapq.nlargest`` with a key or any
        # per-node Python comparison. The selected node's position comes from selectHost.
        best = sorted(totals)[-k:]
        for v in sorted(set(best), reverse=True):
            start = 0
            for _ in range(best.count(v)):
                i = totals.index(v, start)
                idx.append(i)
                start = i + 1
    if sel is not None and (i_sel not in idx if i_sel >= 0 else all(names[i] != sel for i in idx)):
        if i_sel < 0:
            with contextlib.suppress(ValueError):  # a selected node is always scored; be safe anyway
                i_sel = names.index(sel)
        if i_sel >= 0:
            idx.append(i_sel)
    flat = [c[i] for i in idx for _, c in cols]
    rows: Sequence[int]
    try:
        rows = bytes(flat)  # one object per record, not one per node
    except (TypeError, ValueError):
        rows = tuple(flat)
    return tuple(map(names.__getitem__, idx)), tuple(map(totals.__getitem__, idx)), rows


class DecisionLog:
    """The ring of :class:`Decision` records (newest last).

    Args:
        capacity: records kept (>= 1); the oldest is dropped when full.
        top_k: nodes kept per record besides the selected one (>= 0).
        clock: wall clock (seconds since the epoch), for tests.

    Raises (constructor): ValueError for a capacity < 1 or a negative top_k.
    """

    def __init__(self, capacity: int = DEFAULT_CAPACITY, top_k: int = DEFAULT_TOP_K,
                 clock: Callable[[], float] = time.time) -> None:
        if capacity < 1:
            raise ValueError(f"decision log capacity must be >= 1, not {capacity}")
        if top_k < 0:
            raise ValueError(f"decision log top K must be >= 0, not {top_k}")
        self.capacity = capacity
        self.top_k = top_k
        self.clock = clock
        self.records: deque[Decision] = deque(maxlen=capacity)
        self.recorded = 0
        # Tuples of plugin names repeat from record to record: one shared copy of each (a handful
        # per profile), so a record does not pay ~100 B for each of them.
        self._interned: dict[tuple[str, ...], tuple[str, ...]] = {}
        self._weights: Mapping[str, int] = {}

    @property
    def dropped(self) -> int:
        """Records dropped to stay within ``capacity`` since start."""
        return self.recorded - len(self.records)

    def record(self, pod: PodInfo, profile: str, attempt: int, result: str, *, duration: float = 0.0,
               res: ScheduleResult | None = None, nodes_total: int = 0, message: str | None = None,
               annotations: Mapping[str, str] | None = None, dra: Mapping[str, Any] | None = None) -> Decision:
        """Append the record of one attempt (the hot path: no JSON, no copies of per-node data).

        ``res`` is the cycle's :class:`ScheduleResult` (None when the attempt failed before the
        algorithm ran, e.g. a parse error); ``nodes_total`` the snapshot's node count. A failure
        after a node was selected (Reserve, assume) keeps that node in ``selected`` only when
        ``result`` is ``scheduled``; otherwise it is recorded with its scores and ``selected`` None.
        """
        d = Decision()
        d.uid = pod.uid
        d.pod = pod.key
        d.profile = profile
        d.attempt = attempt
        d.time = self.clock()
        d.duration = duration
        d.result = result
        d.nodes_total = nodes_total
        d.message = message
        d.annotations = annotations or None
        d.dra = dra or None
        if res is None:
            d.nodes_evaluated = d.feasible = 0
            d.counts = d.rejected_by = d.plugins = d.nodes = d.totals = d.rows = d.victims = ()
            d.weights = {}
            d.skipped = ()
            d.selected = d.nominated = None
        else:
            d.nodes_evaluated = res.nodes_evaluated
            d.feasible = len(res.feasible)
            d.counts = filter_counts(res)
            intern = self._interned
            rejected = rejecting_plugins(res)
            d.rejected_by = intern.setdefault(rejected, rejected)
            plugins = tuple(map(_FIRST, res.score_columns))
            d.plugins = intern.setdefault(plugins, plugins)
            skipped = tuple(res.skipped)
            d.skipped = intern.setdefault(skipped, skipped)
            weights = res.weights  # a copy per cycle: keep one shared dict per distinct set of weights
            if weights != self._weights:
                self._weights = weights
            d.weights = self._weights
            d.nodes, d.totals, d.rows = top_nodes(res, self.top_k)
            d.selected = res.selected if result == RESULT_SCHEDULED else None
            pf = res.post_filter
            d.nominated = (pf.nominated_node_name or None) if pf is not None else None
            d.victims = tuple(v.key for v in pf.victims) if pf is not None and pf.victims else ()
        self.records.append(d)
        self.recorded += 1
        return d

    def find(self, pod: str, uid: str | None = None) -> list[Decision]:
        """Records of ``pod`` (``namespace/name``; ``NAME`` means ``default/NAME``), newest first;
        only those of ``uid`` when given. A scan of the ring (debug endpoint only)."""
        key = pod if "/" in pod else f"default/{pod}"
        return [d for d in reversed(self.records) if d.pod == key and (uid is None or d.uid == uid)]

    def latest(self, limit: int) -> list[Decision]:
        """The newest ``limit`` records, newest first."""
        out: list[Decision] = []
        for d in reversed(self.records):
            if len(out) >= limit:
                break
            out.append(d)
        return out

    def stats(self) -> dict[str, Any]:
        """Capacity, records kept, dropped, and the oldest record's time (RFC 3339, or None)."""
        return {"capacity": self.capacity, "kept": len(self.records), "dropped": self.dropped,
                "top_k": self.top_k, "oldest": rfc3339(self.records[0].time) if self.records else None}


class DecisionLogCollector(Collector):
    """Prometheus collector read at scrape time (nothing on the hot path):
    ``py_scheduler_decision_records_dropped_total`` (counter) and ``py_scheduler_decision_records``
    (gauge, records kept), ``py_scheduler_decision_records_oldest_age_seconds`` (gauge, age of the
    oldest record kept: how far back the ring reaches)."""

    def __init__(self, log: DecisionLog) -> None:
        self.log = log

    def collect(self) -> Iterable[Any]:
        dropped = CounterMetricFamily("py_scheduler_decision_records_dropped",
                                      "Decision records dropped from the ring to stay within its capacity.")
        dropped.add_metric([], self.log.dropped)
        kept = GaugeMetricFamily("py_scheduler_decision_records", "Decision records kept in the ring.")
        kept.add_metric([], len(self.log.records))
        age = GaugeMetricFamily("py_scheduler_decision_records_oldest_age_seconds",
                                "Age of the oldest decision record kept (how far back /debug/decisions reaches).")
        records = self.log.records
        age.add_metric([], max(self.log.clock() - records[0].time, 0.0) if records else 0.0)
        return [dropped, kept, age]

    def describe(self) -> Iterable[Any]:
        return []


def register_metrics(log: DecisionLog, registry: CollectorRegistry) -> DecisionLogCollector:
    """Register the ring's metrics on ``registry`` (once per process)."""
    c = DecisionLogCollector(log)
    registry.register(c)
    return c
