"""Filter and Score on more than one core: node-sharded evaluation in worker processes (issue 32 item 3).

Upstream evaluates Filter and Score on ``parallelism`` goroutines (16 by default):
``findNodesThatPassFilters`` in ``pkg/scheduler/schedule_one.go`` and ``RunScorePlugins`` in
``pkg/scheduler/framework/runtime/framework.go`` hand each node to ``Parallelizer.Until``
(``pkg/scheduler/framework/parallelize/parallelism.go``). CPython 3.11 runs one thread's Python at a
time, so the cores here are worker processes, each holding a **replica** of the cycle's Snapshot.

The design, and what exactness rests on:

- Filter: the chunk the one-core search would evaluate (``Algorithm._find_nodes_that_pass_filters``)
  is split into ``parallelism`` contiguous parts: the cycle's thread filters the first, each worker
  one of the others, and the parts' statuses are joined in node order. Filter of one node reads the
  Pod, the NodeInfo and the CycleState after PreFilter, never another node's verdict, so the joined
  list is what :meth:`Framework.filter_chunk` gives for the whole chunk. The search around it (chunk
  sizes, the rotating start, the Diagnosis) is the one-core code, unchanged.
- Score: the feasible nodes are split the same way for the raw scores (every Score plugin's, before
  NormalizeScore); the columns are joined in node order and normalized, range-checked and weighted
  on the cycle's thread (:meth:`Framework.score_columns`). The raw score of one node reads the Pod,
  the NodeInfo and the CycleState after PreScore, whose input is the whole feasible list: a worker
  receives the feasible nodes' names and replays PreScore over them once per cycle. Where a plugin
  fails anywhere, the columns are computed again on the cycle's thread, so the error raised is the
  one-core path's (which normalizes each plugin before the next one scores).
- A worker runs the profile's PreFilter itself, once per cycle, on its replica (the CycleState is not
  sent: plugin states hold references into the snapshot). PreFilter and PreScore are functions of
  the Pod, the snapshot (and the feasible list) and the profile's configuration, so the replica's
  state equals the cycle's; the worker checks the plugins they left active against the cycle's and
  answers "diverged" otherwise (the request is then evaluated on the cycle's thread, and the
  replica is sent whole next time).
- The replica follows the Snapshot by the contract every derived structure relies on
  (:meth:`Snapshot.node_changed` for each NodeInfo changed in place, a new ``node_info_list`` object
  when nodes come or go): :class:`_Changes` is such a structure and records the changed NodeInfos;
  they are sent, pickled, before the next sharded request and assigned in place in the replica (a
  fresh replica generation, so the worker's own derived structures refresh). The cluster objects are
  sent again whenever :attr:`ClusterObjects.version` moved. The per-image summaries ImageLocality
  reads are kept by the replica itself, from the nodes it receives (:func:`_apply`).
- Only plugins whose scheduling-cycle reads are the snapshot alone are sharded
  (:data:`SHARDABLE_FILTERS`, :data:`SHARDABLE_SCORES`); a cycle with another Filter plugin active
  (VolumeBinding's assumed volumes, DynamicResources' in-flight claims and the pod-group plugins
  keep state in the process), a pod group's placement, or a request too small to pay for the round
  trip is evaluated on the cycle's thread.
- Cost model (:class:`CostModel`, one for Filter, one for Score): a request is sharded when the
  cycle's thread would need at least ``threshold`` seconds for it, by its measured seconds per node
  (a running mean of its own requests, trusted after ``warm_up`` of them). ``threshold`` starts at
  ``min_chunk_seconds`` (5 ms) and follows what sharding gave (:meth:`CostModel.judge`). A worker
  costs about 1.3 ms per Filter request beyond its nodes (its PreFilter, the pickles; 3-9 ms per
  Score request, which replays PreScore over every feasible node); on a uniform cluster
  Filter of 500 nodes takes about 0.1 ms, while required pod affinity that one zone in ten satisfies
  filters 5000 nodes per Pod, about 8 ms (bench/RESULTS.md, "Filter on more cores"). Score sees at
  most the feasible nodes ``percentageOfNodesToScore`` lets the search find (500 of 5000 nodes by
  default, under 1.5 ms per cycle on every scheduler_perf workload), so it can pay only where that
  percentage is raised (100: every feasible node) and Score's per-node work is costly; on the
  measured workloads it never did (bench/RESULTS.md, "Score on more cores"). The workers are
  spawned only after ``spawn_after`` requests costly enough.
- Never a stall: workers start in the background and are used once they said they are ready; an
  answer later than ``timeout`` seconds, a dead worker or any worker error stops sharding for good
  (logged once; the workers are killed, not waited for) and the request is evaluated on the cycle's
  thread: the cycle waits at most ``timeout`` seconds, once. A plugin Error
  (``SchedulingError``) in a worker makes the cycle's thread evaluate the whole request, so the
  error raised is the one the one-core path raises first.

The worker process is py_scheduler/core/shard_worker.py. Checked against the one-core path by
tests/unit/core/test_shards.py.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import multiprocessing
import multiprocessing.connection
import os
import pickle
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from py_scheduler.cache.snapshot import ClusterObjects, Snapshot
from py_scheduler.core.shard_worker import GcTuning, ReplicaFactory, decode_verdicts, worker_main
from py_scheduler.framework.algorithm import PLACEMENT_STATE_KEY
from py_scheduler.framework.runtime import Framework
from py_scheduler.framework.types import (
    CycleState,
    NodeInfo,
    PodInfo,
    Status,
)

log = logging.getLogger(__name__)

SHARDABLE_FILTERS = frozenset({
    "NodeUnschedulable", "NodeName", "TaintToleration", "NodeAffinity", "NodePorts", "NodeResourcesFit",
    "VolumeRestrictions", "NodeVolumeLimits", "VolumeZone", "PodTopologySpread", "InterPodAffinity",
    "NodeDeclaredFeatures", "GPUFilter",
})
"""Filter plugins whose PreFilter and Filter read only the Pod, ``state.snapshot`` (its NodeInfos and
cluster objects) and their own arguments: a replica of the snapshot gives them the cycle's verdicts."""

SHARDABLE_SCORES = frozenset({
    "TaintToleration", "NodeAffinity", "NodeResourcesFit", "VolumeBinding", "PodTopologySpread",
    "InterPodAffinity", "DynamicResources", "NodeResourcesBalancedAllocation", "ImageLocality", "GPUScore",
})
"""Score plugins whose PreScore and Score read only the Pod, ``state.snapshot`` (NodeInfos, cluster
objects, per-image summaries) and what their own PreFilter wrote, once every Filter plugin active in
the cycle is in :data:`SHARDABLE_FILTERS`: VolumeBinding and DynamicResources then skipped Filter
(the Pod has no volume claim, no resource claim), so their Score reads only the state the worker's
replayed PreFilter wrote, and GPUScore has no claim's devices to read."""

_T = TypeVar("_T")

_PROBE_EVERY = 50
"""While sharding does not pay, one in this many requests costly enough for the floor is sharded anyway."""

_MAX_THRESHOLD = 1.0
"""Seconds: the most :meth:`CostModel.judge` raises the cost a request must have to be sharded."""

def _running_mean(old: float | None, new: float) -> float:
    """The cost model's running means: a fifth of the newest sample (the sample itself when none yet)."""
    return new if old is None else 0.8 * old + 0.2 * new


def machine_parallelism(configured: int, cgroup: Path = Path("/sys/fs/cgroup")) -> int:
    """``parallelism`` as used: the configured value (upstream's default 16) capped by the CPUs this
    process may run on: its CPU affinity (``os.sched_getaffinity``, what ``taskset`` sets) and its
    container's CPU limit (cgroup v2 ``cpu.max``, or v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``,
    rounded up), so a Pod limited to 2 CPUs on a 64-core node gets 2."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        cpus = os.cpu_count() or 1
    quota = cgroup_cpu_limit(cgroup)
    if quota is not None:
        cpus = min(cpus, quota)
    return max(1, min(configured, cpus))


def cgroup_cpu_limit(root: Path) -> int | None:
    """The container's CPU limit in whole CPUs (rounded up), None when unlimited or unreadable."""
    try:
        quota_s, period_s = (root / "cpu.max").read_text().split()[:2]
        if quota_s == "max":
            return None
        quota, period = int(quota_s), int(period_s)
    except (OSError, ValueError):
        try:
            quota = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
            period = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        except (OSError, ValueError):
            return None
    if quota <= 0 or period <= 0:
        return None
    return max(1, -(-quota // period))


class _Changes:
    """The NodeInfos of one node list changed since they were last sent (a derived structure of the
    Snapshot: :meth:`Snapshot.node_changed` calls :meth:`refresh`). ``full``: send the whole list."""

    __slots__ = ("changed", "full", "n", "source")

    def __init__(self, nodes: list[NodeInfo]) -> None:
        self.source = nodes
        self.n = len(nodes)
        self.changed: dict[str, NodeInfo] = {}
        self.full = True

    def fresh_for(self, nodes: list[NodeInfo]) -> bool:
        return nodes is self.source and len(nodes) == self.n

    def refresh(self, ni: NodeInfo) -> bool:
        self.changed[ni.name] = ni
        return True


@dataclass
class _Worker:
    process: Any
    conn: multiprocessing.connection.Connection
    ready: bool = False


@dataclass
class ShardStats:
    """Counters of one :class:`NodeShardPool` (tests and bench read them). ``reasons``: why a Filter
    chunk or (keys starting with "score ") a Score was computed on the cycle's thread."""

    sharded_chunks: int = 0
    local_chunks: int = 0
    sharded_scores: int = 0
    local_scores: int = 0
    diverged: int = 0
    full_syncs: int = 0
    reasons: dict[str, int] = field(default_factory=dict)


@dataclass
class CostModel:
    """When sharding one extension point pays (Filter's chunks, Score's feasible nodes): the cycle's
    thread's seconds per node, a worker's fixed seconds per request, and a threshold that follows
    what sharding gave (:meth:`judge`). Predicted one-core seconds of ``n`` nodes:
    ``seconds_per_node * n``.

    Attributes:
        floor: seconds; below this a request is never sharded (``min_chunk_seconds``).
        threshold: seconds the cycle's thread must be predicted to need for a request to be sharded
            (adapted, never under ``floor``).
        ratio: running mean of sharded seconds over predicted one-core seconds (None before any).
    """

    floor: float
    threshold: float
    seconds_per_node: float = 0.0
    worker_fixed: float = 0.0
    ratio: float | None = None
    local_samples: int = 0
    sharded_samples: int = 0
    below: int = 0

    def why_not(self, n: int, warm_up: int) -> str:
        """"" when ``n`` nodes are worth sharding; else "cheap" (under the floor, or before
        ``warm_up`` timed requests) or "not paying" (under the threshold; one in
        :data:`_PROBE_EVERY` such requests is sharded anyway, to measure again)."""
        cost = self.seconds_per_node * n
        if self.local_samples < warm_up or cost < self.floor:
            return "cheap"
        if cost < self.threshold:
            self.below += 1
            if self.below % _PROBE_EVERY:
                return "not paying"
        return ""

    def learn(self, seconds: float, n: int) -> None:
        """The cycle's thread took ``seconds`` for ``n`` nodes."""
        if n:
            self.local_samples += 1
            self.seconds_per_node = _running_mean(self.seconds_per_node or None, seconds / n)

    def learn_worker(self, seconds: float, n: int) -> None:
        """A worker answered ``n`` nodes ``seconds`` after their request arrived."""
        fixed = max(0.0, seconds - self.seconds_per_node * n)
        self.worker_fixed = _running_mean(self.worker_fixed or None, fixed)

    def judge(self, seconds: float, predicted: float) -> None:
        """The cost model, corrected by what sharding gave. ``ratio`` is a running mean of a sharded
        request's seconds over those the cycle's thread alone was predicted to need. While it is 1 or
        more (sharding does not pay), each sharded request raises the threshold by half (up to
        :data:`_MAX_THRESHOLD`); while it is under 0.85 each lowers it by a fifth, never under
        ``floor``. On a machine whose other cores are busy (the API server's, in the benchmarks) the
        workers answer late and sharding backs off; every :data:`_PROBE_EVERY`-th request costly
        enough for the floor is sharded anyway, so the model sees when sharding pays again."""
        r = seconds / predicted if predicted > 0 else 1.0
        self.ratio = _running_mean(self.ratio, r)
        if self.ratio >= 1.0:
            self.threshold = min(self.threshold * 1.5, _MAX_THRESHOLD)
        elif self.ratio < 0.85:
            self.threshold = max(self.threshold * 0.8, self.floor)

    def split(self, n: int, parts: int, min_part: int) -> list[tuple[int, int]]:
        """``parts`` contiguous [start, end) ranges of ``n`` nodes, the first (the cycle's thread's)
        larger by the nodes it evaluates while a worker spends its fixed cost (unpickling, its
        PreFilter, the answer), so that all finish together: with per-node seconds r and a worker's
        fixed seconds F, each worker gets w = (n - F / r) / parts nodes and the cycle's thread the
        rest."""
        r = self.seconds_per_node
        extra = int(self.worker_fixed / r) if r > 0 else 0
        w = max(0, (n - extra) // parts)
        if w < min_part:
            w = max(min_part, n // parts)
        first = n - w * (parts - 1)
        return [(0, first)] + [(first + k * w, first + (k + 1) * w) for k in range(parts - 1)]


class NodeShardPool:
    """One profile's node shards: ``parallelism - 1`` worker processes beside the cycle's thread that
    filter parts of a chunk and score parts of the feasible nodes
    (:class:`~py_scheduler.framework.interfaces.NodeShards`).

    Args:
        factory: builds the profile in a worker (pickled into it).
        parallelism: parts per sharded request, the cycle's thread included (>= 2 to start workers).
        min_chunk_seconds: shard a Filter chunk or a Score only when the cycle's thread would take at
            least this long for it by its measured seconds per node (0: always, once the workers are
            ready); the floor of each :class:`CostModel`'s threshold.
        timeout: seconds to wait for a worker's answer before sharding stops for good.
        min_part: fewest nodes per part (smaller requests use fewer parts).
        gc_tuning: (at start, after each whole replica) called in each worker: the live process's
            ``(set_thresholds, freeze_collected)`` from py_scheduler/app/tuning.py, the one module that
            tunes the collector (None: Python's defaults).
        start: spawn the workers now; by default they are spawned once ``spawn_after`` requests were
            worth sharding (a profile whose cycles stay cheap never has a worker process, nor its
            replica's memory; nor does one slow cycle of a cold start).
        warm_up: requests the cycle's thread evaluates before its seconds per node are trusted, and
            sharded ones before their gain is judged (the first ones after a start, or in a new
            worker, build columns and indexes); one that carried a whole replica is never judged.
    """

    def __init__(self, factory: ReplicaFactory, parallelism: int, *, min_chunk_seconds: float = 0.005,
                 timeout: float = 10.0, min_part: int = 50,
                 gc_tuning: GcTuning | None = None, start: bool = False, spawn_after: int = 20,
                 warm_up: int = 10) -> None:
        self.parallelism = parallelism
        self.timeout = timeout
        self.min_part = max(1, min_part)
        self.stats = ShardStats()
        self.broken = ""
        self.filter_cost = CostModel(min_chunk_seconds, min_chunk_seconds)
        self.score_cost = CostModel(min_chunk_seconds, min_chunk_seconds)
        self.spawn_after = spawn_after
        self.warm_up = warm_up
        self._key = functools.partial(_Changes)  # this pool's derived-structure key
        self._synced: Snapshot | None = None
        self._objects_version = -1
        self._objects: ClusterObjects | None = None
        self._costly = 0
        self._last_state: CycleState | None = None
        self._cycle = 0
        self._started = False
        self._announced = False
        self._workers: list[_Worker] = []
        self._factory = factory
        self._gc_tuning = gc_tuning
        if start:
            self._start()

    def _start(self) -> None:
        """Spawn the workers (once; they import and build the profile in the background)."""
        if self._started or self.parallelism < 2:
            return
        self._started = True
        ctx = multiprocessing.get_context("spawn")  # never fork a process holding an event loop's threads
        for _ in range(self.parallelism - 1):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=worker_main, args=(child, self._factory, self._gc_tuning), daemon=True,
                               name="py-scheduler-node-shard")
            proc.start()
            child.close()
            self._workers.append(_Worker(proc, parent))

    # -- NodeShards ---------------------------------------------------------------------------------
    def filter_chunk(self, fw: Framework, active: Sequence[Any], state: CycleState, pod: PodInfo,
                     nodes: list[NodeInfo]) -> list[Status | None] | None:
        """``fw.filter_chunk(active, state, pod, nodes)``, its parts filtered by the ready workers when
        that pays (see the module docstring); same result, same error."""
        cost = self.filter_cost
        names = [pl.name for pl in active]
        why, ready, bounds = self._plan(cost, state, names, None, len(nodes))
        if why:
            self.stats.reasons[why] = self.stats.reasons.get(why, 0) + 1
            return self._local_filter(fw, active, state, pod, nodes)
        predicted = cost.seconds_per_node * len(nodes)
        started = time.perf_counter()
        mine = nodes[:bounds[0][1]]
        got = self._exchange(
            cost, state, ready, len(mine), lambda: fw.filter_chunk(active, state, pod, mine),
            lambda sync: [(sync, self._cycle, pod.pod, names, [ni.name for ni in nodes[lo:hi]], None)
                          for lo, hi in bounds[1:]])
        if got is None:
            return self._local_filter(fw, active, state, pod, nodes)
        sync, first, answers = got
        parts = self._payloads(answers, bounds, pod, cost, sync)
        if parts == "error":  # the cycle's thread raises the error the one-core path raises first
            return fw.filter_chunk(active, state, pod, nodes)
        if isinstance(parts, str):
            return self._local_filter(fw, active, state, pod, nodes)
        out: list[Status | None] = list(first) if first is not None else [None] * len(mine)
        for verdicts, (lo, hi) in zip(parts, bounds[1:], strict=True):
            part = decode_verdicts(verdicts, hi - lo)
            fw.count_filtered(active, part)
            out.extend(part)
        self.stats.sharded_chunks += 1
        self._judge(cost, sync, time.perf_counter() - started, predicted)
        return None if all(s is None for s in out) else out

    def score_raw(self, fw: Framework, active: Sequence[Any], state: CycleState, pod: PodInfo,
                  nodes: list[NodeInfo], names: list[str]) -> list[Sequence[int]] | None:
        """``fw.raw_score_columns(active, state, pod, nodes)``, its parts scored by the ready workers
        when that pays (see the module docstring); None where a plugin failed (on either side) or its
        batch form returned the wrong length: the caller then scores on its own thread and raises
        the one-core path's error."""
        cost = self.score_cost
        filters = [pl.name for pl in fw.filter_plugins if pl.name not in state.skip_filter]
        scores = [pl.name for pl in active]
        why, ready, bounds = self._plan(cost, state, filters, scores, len(nodes))
        if why:
            self.stats.reasons["score " + why] = self.stats.reasons.get("score " + why, 0) + 1
            return self._local_score(fw, active, state, pod, nodes)
        predicted = cost.seconds_per_node * len(nodes)
        started = time.perf_counter()
        mine = nodes[:bounds[0][1]]
        try:
            got = self._exchange(
                cost, state, ready, len(mine), lambda: fw.raw_score_columns(active, state, pod, mine),
                lambda sync: [(sync, self._cycle, pod.pod, filters, [], (names, scores, lo, hi))
                              for lo, hi in bounds[1:]])
        except Exception:  # a plugin's Error, or a bug: the caller scores again and raises what it raises
            return None
        if got is None:
            return self._local_score(fw, active, state, pod, nodes)
        sync, first, answers = got
        parts = self._payloads(answers, bounds, pod, cost, sync)
        if parts == "error":
            return None
        if isinstance(parts, str):
            return self._local_score(fw, active, state, pod, nodes)
        out = [list(col) for col in first]
        for cols in parts:
            for col, part in zip(out, cols, strict=True):
                col.extend(part)
        self.stats.sharded_scores += 1
        self._judge(cost, sync, time.perf_counter() - started, predicted)
        return list(out)

    def _exchange(self, cost: CostModel, state: CycleState, ready: list[_Worker], mine: int,
                  compute: Callable[[], _T], requests: Callable[[dict[str, Any] | None], list[tuple[Any, ...]]],
                  ) -> tuple[dict[str, Any] | None, _T, list[tuple[str, Any]]] | None:
        """Send each ready worker its request (``requests`` builds them around this cycle's sync),
        compute the cycle thread's own part (``mine`` nodes) meanwhile, then read the answers:
        (the sync, the own part, the answers in worker order). None when a worker could not be
        reached or did not answer (sharding is then stopped). An exception from ``compute`` is
        raised after the answers were read, so the pipes stay in step."""
        sync = self._sync(state)
        sent = self._send(ready, requests(sync))
        if sent is None:
            return None
        t0 = time.perf_counter()
        try:
            first = compute()
        except BaseException:  # KeyboardInterrupt included: the next request must not read these answers
            self._collect(sent)
            raise
        cost.learn(time.perf_counter() - t0, mine)
        answers = self._collect(sent)
        return None if answers is None else (sync, first, answers)

    def _payloads(self, answers: list[tuple[str, Any]], bounds: list[tuple[int, int]], pod: PodInfo,
                  cost: CostModel, sync: dict[str, Any] | None) -> list[Any] | str:
        """The workers' answers in part order, each worker's seconds learned (unless a whole replica
        was sent); "error" when one met a plugin Error, "diverged" when one's replica did not match
        the cycle (counted; the replica is sent whole next time)."""
        out: list[Any] = []
        for (kind, got), (lo, hi) in zip(answers, bounds[1:], strict=True):
            if kind == "error":  # a plugin Error there: if the cycle's thread meets none, the replica
                self._synced = None  # drifted, so it is sent whole next time
                return "error"
            if kind != "ok":
                self._diverged(pod, got)
                return "diverged"
            payload, seconds = got
            if sync is None or not sync.get("full"):
                cost.learn_worker(seconds, hi - lo)
            out.append(payload)
        return out

    # -- planning ----------------------------------------------------------------------------------
    def _plan(self, cost: CostModel, state: CycleState, filters: list[str], scores: list[str] | None,
              n: int) -> tuple[str, list[_Worker], list[tuple[int, int]]]:
        """(why not, "" to shard; the ready workers; each part's [start, end) of the ``n`` nodes, the
        cycle thread's first and one per worker, empty ones included: every replica gets every
        sync). Advances the cycle token when ``state`` is a new cycle's."""
        why = self._unshardable(state, filters, scores) or cost.why_not(n, self.warm_up)
        if not why and not self._started:
            self._costly += 1  # the workers are spawned only after enough costly requests, not one cold one
            why = "starting" if self._costly < self.spawn_after else ""
        if why:
            return why, [], []
        ready = self._ready_workers()
        parts = min(len(ready) + 1, n // self.min_part)
        if parts < 2:
            return ("small" if ready else "starting"), [], []
        bounds = cost.split(n, parts, self.min_part)
        bounds += [(n, n)] * (len(ready) + 1 - len(bounds))
        if state is not self._last_state:
            self._last_state = state
            self._cycle += 1
        return "", ready, bounds

    def _unshardable(self, state: CycleState, filters: list[str], scores: list[str] | None) -> str:
        if self.broken or self.parallelism < 2:
            return "broken" if self.broken else "parallelism 1"
        if not isinstance(state.snapshot, Snapshot):
            return "not a Snapshot"
        if PLACEMENT_STATE_KEY in state.data:
            return "placement"
        for name in filters:
            if name not in SHARDABLE_FILTERS:
                return name
        for name in scores or ():
            if name not in SHARDABLE_SCORES:
                return name
        return ""

    def _judge(self, cost: CostModel, sync: dict[str, Any] | None, seconds: float, predicted: float) -> None:
        if sync is None or not sync.get("full"):  # a whole replica's transfer is paid once, not per request
            cost.sharded_samples += 1
            if cost.sharded_samples > self.warm_up:  # the workers' first requests build their indexes
                cost.judge(seconds, predicted)

    def _diverged(self, pod: PodInfo, why: object) -> None:
        self.stats.diverged += 1
        self._synced = None  # the replica is sent whole next time
        log.warning("Node shard diverged, evaluating on the cycle's thread pod=%s why=%s", pod.key, why)

    def _local_filter(self, fw: Framework, active: Sequence[Any], state: CycleState, pod: PodInfo,
                      nodes: list[NodeInfo]) -> list[Status | None] | None:
        self.stats.local_chunks += 1
        t0 = time.perf_counter()
        got = fw.filter_chunk(active, state, pod, nodes)
        self.filter_cost.learn(time.perf_counter() - t0, len(nodes))
        return got

    def _local_score(self, fw: Framework, active: Sequence[Any], state: CycleState, pod: PodInfo,
                     nodes: list[NodeInfo]) -> list[Sequence[int]] | None:
        self.stats.local_scores += 1
        t0 = time.perf_counter()
        try:
            got = fw.raw_score_columns(active, state, pod, nodes)
        except Exception:
            return None  # the caller scores again and raises what the one-core path raises
        self.score_cost.learn(time.perf_counter() - t0, len(nodes))
        return got

    def _sync(self, state: CycleState) -> dict[str, Any] | None:
        snap = state.snapshot
        assert isinstance(snap, Snapshot)
        changes = snap.derived(self._key)
        out: dict[str, Any] = {}
        if snap is not self._synced or changes.full:
            self.stats.full_syncs += 1
            out["full"] = True
            out["nodes"] = snap.node_info_list
            self._synced = snap
            self._objects_version = -1
            changes.full = False
        elif changes.changed:
            out["nodes"] = list(changes.changed.values())
        changes.changed.clear()
        if snap.objects is not self._objects or snap.objects.version != self._objects_version:
            out["objects"] = snap.objects.by_kind
            self._objects = snap.objects
            self._objects_version = snap.objects.version
        return out or None

    # -- workers -----------------------------------------------------------------------------------
    def wait_ready(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for every worker to say it is ready (a worker imports and
        builds the profile first: about a second). True when all are; False with no workers."""
        self._start()
        deadline = time.monotonic() + timeout
        while not self._ready_workers():
            if self.broken or not self._workers:
                return False
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            multiprocessing.connection.wait([w.conn for w in self._workers if not w.ready], min(left, 0.5))
        return True

    def _ready_workers(self) -> list[_Worker]:
        if not self._started:
            self._start()
        if self.broken or not self._workers:
            return []
        for w in self._workers:
            if not w.ready:
                try:
                    if w.conn.poll(0):
                        w.ready = w.conn.recv()[0] == "ready"
                except (EOFError, OSError) as exc:
                    self._break(f"a worker failed to start: {exc!r}")
                    return []
        ready = [w for w in self._workers if w.ready]
        if len(ready) < len(self._workers):
            return []  # every replica gets every sync
        if not self._announced:
            self._announced = True
            log.info("Node shards ready workers=%d pids=%s", len(ready), [w.process.pid for w in ready])
        return ready

    def _send(self, ready: list[_Worker], requests: list[tuple[Any, ...]]) -> list[_Worker] | None:
        """Send each ready worker its request (pickled); None when that failed (sharding is then
        stopped, and the answers of those already sent were read)."""
        sent: list[_Worker] = []
        try:
            for w, request in zip(ready, requests, strict=True):
                w.conn.send_bytes(pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL))
                sent.append(w)
        except Exception as exc:  # a closed pipe, or something in the snapshot that does not pickle
            self._break(f"sending to a worker failed: {exc!r}")
            self._collect(sent)  # read the abandoned answers: the pipes stay in step
            return None
        return sent

    def _collect(self, sent: list[_Worker]) -> list[tuple[str, Any]] | None:
        out: list[tuple[str, Any]] = []
        deadline = time.monotonic() + self.timeout
        for w in sent:
            try:
                if not w.conn.poll(max(0.0, deadline - time.monotonic())):
                    self._break(f"a worker did not answer in {self.timeout} s")
                    return None
                out.append(w.conn.recv())
            except (EOFError, OSError) as exc:
                self._break(f"a worker died: {exc!r}")
                return None
        return out

    def _break(self, why: str) -> None:
        if not self.broken:
            log.error("Node shards stopped, every node is filtered and scored on the cycle's thread from now: %s",
                      why)
        self.broken = why
        self.close(wait=0.0)  # a worker that did not answer is not waited for again

    def close(self, wait: float = 2.0) -> None:
        """Stop the workers (idempotent): ask each to exit and give them ``wait`` seconds in all, then
        kill what is left."""
        workers, self._workers = self._workers, []
        if workers:
            st = self.stats
            log.info("Node shards stopped chunks_sharded=%d chunks_local=%d scores_sharded=%d scores_local=%d "
                     "diverged=%d full_syncs=%d local_by_reason=%s", st.sharded_chunks, st.local_chunks,
                     st.sharded_scores, st.local_scores, st.diverged, st.full_syncs, st.reasons)
        for w in workers:
            with contextlib.suppress(OSError, ValueError):
                w.conn.send_bytes(b"")
            w.conn.close()
        deadline = time.monotonic() + wait
        for w in workers:
            w.process.join(timeout=max(0.0, deadline - time.monotonic()))
            if w.process.is_alive():  # a worker stuck in a plugin, or the pool broke
                w.process.kill()
                w.process.join(timeout=1.0)
