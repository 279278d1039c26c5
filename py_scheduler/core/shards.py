"""Filter on more than one core: node-sharded Filter in worker processes (issue 32 item 3).

Upstream evaluates Filter on ``parallelism`` goroutines (16 by default): ``findNodesThatPassFilters``
in ``pkg/scheduler/schedule_one.go`` hands each node of the search to ``Parallelizer.Until``
(``pkg/scheduler/framework/parallelize/parallelism.go``). CPython 3.11 runs one thread's Python at a
time, so the cores here are worker processes, each holding a **replica** of the cycle's Snapshot.

The design, and what exactness rests on:

- The chunk the one-core search would evaluate (``Algorithm._find_nodes_that_pass_filters``) is split
  into ``parallelism`` contiguous parts: the cycle's thread filters the first, each worker one of the
  others, and the parts' statuses are joined in node order. Filter of one node reads the Pod, the
  NodeInfo and the CycleState after PreFilter, never another node's verdict, so the joined list is
  what :meth:`Framework.filter_chunk` gives for the whole chunk. The search around it (chunk sizes,
  the rotating start, the Diagnosis) is the one-core code, unchanged.
- A worker runs the profile's PreFilter itself, once per cycle, on its replica (the CycleState is not
  sent: plugin states hold references into the snapshot). PreFilter is a function of the Pod, the
  snapshot and the profile's configuration, so the replica's state equals the cycle's; the worker
  checks the plugins PreFilter left active against the cycle's and answers "diverged" otherwise (the
  chunk is then filtered on the cycle's thread, and the replica is sent whole next time).
- The replica follows the Snapshot by the contract every derived structure relies on
  (:meth:`Snapshot.node_changed` for each NodeInfo changed in place, a new ``node_info_list`` object
  when nodes come or go): :class:`_Changes` is such a structure and records the changed NodeInfos;
  they are sent, pickled, before the next sharded chunk and assigned in place in the replica (a fresh
  replica generation, so the worker's own derived structures refresh). The cluster objects are sent
  again whenever :attr:`ClusterObjects.version` moved. ``Snapshot.images`` is not sent: only
  ImageLocality reads it, at Score.
- Only plugins whose scheduling-cycle reads are the snapshot alone are sharded
  (:data:`SHARDABLE_FILTERS`); a cycle with another Filter plugin active (VolumeBinding's assumed
  volumes, DynamicResources' in-flight claims and the pod-group plugins keep state in the process),
  a pod group's placement, or a Pod too small to pay for the round trip is filtered on the cycle's
  thread.
- Cost model: a chunk is sharded when the cycle's thread would need at least ``threshold`` seconds
  for it, by its measured seconds per node (a running mean of its own chunks, trusted after
  ``warm_up`` of them). ``threshold`` starts at ``min_chunk_seconds`` (5 ms) and follows what
  sharding gave (:meth:`FilterShardPool._judge`). A worker costs about 1.3 ms per request beyond its
  nodes (its PreFilter, the pickles); on a uniform cluster Filter of 500 nodes takes about 0.1 ms,
  while required pod affinity that one zone in ten satisfies filters 5000 nodes per Pod, about
  8 ms (bench/RESULTS.md, "Filter on more cores"). The workers are spawned only after
  ``spawn_after`` chunks costly enough.
- Never a stall: workers start in the background and are used once they said they are ready; an
  answer later than ``timeout`` seconds, a dead worker or any worker error stops sharding for good
  (logged once) and the chunk is filtered on the cycle's thread. A plugin Error (``SchedulingError``)
  in a worker makes the cycle's thread filter the whole chunk, so the error raised is the one the
  one-core path raises first.

Checked against the one-core path by tests/unit/core/test_shards.py.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import multiprocessing
import multiprocessing.connection
import os
import pickle
import signal
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from py_scheduler.cache.cache import assign_node_info
from py_scheduler.cache.snapshot import ClusterObjects, Snapshot
from py_scheduler.framework.algorithm import PLACEMENT_STATE_KEY
from py_scheduler.framework.objects import Obj
from py_scheduler.framework.runtime import Framework, SchedulingError
from py_scheduler.framework.types import Code, CycleState, NodeInfo, PodInfo, Status, next_generation

log = logging.getLogger(__name__)

SHARDABLE_FILTERS = frozenset({
    "NodeUnschedulable", "NodeName", "TaintToleration", "NodeAffinity", "NodePorts", "NodeResourcesFit",
    "VolumeRestrictions", "NodeVolumeLimits", "VolumeZone", "PodTopologySpread", "InterPodAffinity",
    "NodeDeclaredFeatures", "GPUFilter",
})
"""Filter plugins whose PreFilter and Filter read only the Pod, ``state.snapshot`` (its NodeInfos and
cluster objects) and their own arguments: a replica of the snapshot gives them the cycle's verdicts."""

GcTuning = tuple[Callable[[], None], Callable[[], None]]
"""A worker's garbage-collector tuning: (at start, after each whole replica); module-level functions."""

_PROBE_EVERY = 50
"""While sharding does not pay, one in this many chunks costly enough for the floor is sharded anyway."""

_MAX_THRESHOLD = 1.0
"""Seconds: the most :meth:`FilterShardPool._judge` raises the cost a chunk must have to be sharded."""

ReplicaFactory = Callable[[Any], Framework]
"""Builds the profile's Framework over a replica's object lister, in the worker (it must pickle:
``functools.partial(registry.replica_framework, profile, cfg)``)."""


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


class _ReplicaObjects:
    """The Handle's object lister over a replica's :class:`ClusterObjects` (binding-cycle reads only;
    the scheduling cycle reads ``state.snapshot.objects``)."""

    def __init__(self, objects: ClusterObjects) -> None:
        self.objects = objects

    def get(self, kind: str, namespace: str, name: str) -> Obj | None:
        return self.objects.get(kind, f"{namespace}/{name}" if namespace else name)

    def list(self, kind: str) -> Iterable[Obj]:
        return self.objects.list(kind)


def _apply(replica: Snapshot, sync: dict[str, Any]) -> None:
    """Bring the worker's ``replica`` up to the cycle's snapshot (what :meth:`FilterShardPool._sync` sent)."""
    objects = sync.get("objects")
    if objects is not None:
        replica.objects.by_kind = objects
        replica.objects.version += 1
    nodes: list[NodeInfo] = sync.get("nodes") or []
    if sync.get("full"):
        for ni in nodes:
            object.__setattr__(ni, "generation", next_generation())  # this process's generations only
        replica.node_info_map = {ni.name: ni for ni in nodes}
        replica.node_info_list = nodes
        replica.invalidate_derived()
        replica.rebuild_lists()
        return
    lists = False
    for clone in nodes:
        existing = replica.node_info_map[clone.name]
        lists = lists or (bool(existing.pods_with_affinity) != bool(clone.pods_with_affinity)
                          or bool(existing.pods_with_required_anti_affinity)
                          != bool(clone.pods_with_required_anti_affinity)
                          or existing.pvc_ref_counts != clone.pvc_ref_counts)
        assign_node_info(existing, clone)
        replica.node_changed(existing)
    if lists:
        replica.rebuild_lists()


Verdicts = tuple[int, list[tuple[int, list[str], str]], list[int], list[int]] | None
"""A part's statuses as sent back: (nodes, distinct statuses as (code, reasons, plugin), positions of
the rejected nodes, index of each one's status); None when every node passed. Tuples of ints and
strings pickle several times faster than one Status object per rejected node."""


def _encode(got: list[Status | None] | None, n: int) -> Verdicts:
    if got is None:
        return None
    table: dict[tuple[int, tuple[str, ...], str], int] = {}
    distinct: list[tuple[int, list[str], str]] = []
    positions: list[int] = []
    which: list[int] = []
    last: Status | None = None
    k = 0
    for i, st in enumerate(got):
        if st is None:
            continue
        if st is not last:  # plugins return one Status object for runs of nodes
            key = (int(st.code), tuple(st.reasons), st.plugin)
            k = table.get(key, -1)
            if k < 0:
                k = table[key] = len(distinct)
                distinct.append((key[0], list(st.reasons), st.plugin))
            last = st
        positions.append(i)
        which.append(k)
    return n, distinct, positions, which


def _decode(v: Verdicts, n: int) -> list[Status | None]:
    if v is None:
        return [None] * n
    _, distinct, positions, which = v
    statuses = [Status(Code(c), reasons, plugin) for c, reasons, plugin in distinct]
    out: list[Status | None] = [None] * n
    for i, k in zip(positions, which, strict=True):
        out[i] = statuses[k]
    return out


def _worker_main(conn: multiprocessing.connection.Connection, factory: ReplicaFactory,
                 gc_tuning: GcTuning | None) -> None:
    """A shard worker: build the profile over an empty replica, say "ready", then answer requests
    until the pipe closes or an empty message arrives. Request: pickled ``(sync, cycle, pod, active, names)``;
    answer: ``("ok", (verdicts, seconds))`` (:data:`Verdicts`, the seconds since the request arrived),
    ``("error", message)`` (a plugin Error) or ``("diverged", why)``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the scheduler, which closes the pipe
    if gc_tuning is not None:
        gc_tuning[0]()
    replica = Snapshot(ClusterObjects())
    fw = factory(_ReplicaObjects(replica.objects))
    try:
        conn.send(("ready", os.getpid()))
        _serve(conn, replica, fw, gc_tuning)
    except OSError:  # the scheduler stopped (a closed pipe): nothing to answer any more
        return


def _serve(conn: multiprocessing.connection.Connection, replica: Snapshot, fw: Framework,
           gc_tuning: GcTuning | None) -> None:
    """The worker's request loop (see :func:`_worker_main`)."""
    cycle = -1
    state = CycleState(replica)
    pod: PodInfo | None = None
    active: list[Any] = []
    while True:
        try:
            raw = conn.recv_bytes()
        except (EOFError, OSError):
            return
        if not raw:
            return
        t0 = time.perf_counter()
        sync, token, pod_obj, active_names, names = pickle.loads(raw)
        try:
            if sync is not None:
                _apply(replica, sync)
                if sync.get("full") and gc_tuning is not None:
                    gc_tuning[1]()  # the replica's nodes: never scanned again (as the live process's heap)
            if token != cycle:
                cycle = -1
                pod = PodInfo(pod_obj)
                state = CycleState(replica)
                _, s, _ = fw.run_pre_filter(state, pod, replica.node_info_list)
                active = [pl for pl in fw.filter_plugins if pl.name not in state.skip_filter]
                if not s.is_success() or [pl.name for pl in active] != active_names:
                    conn.send(("diverged", f"PreFilter: {s.message()!r}, active {[pl.name for pl in active]}"))
                    continue
                cycle = token
            assert pod is not None
            nodes = [replica.node_info_map[n] for n in names]
            try:
                got = fw.filter_chunk(active, state, pod, nodes) if nodes else None
            except SchedulingError as exc:
                conn.send(("error", str(exc)))
                continue
            verdicts = _encode(got, len(nodes))
            conn.send(("ok", (verdicts, time.perf_counter() - t0)))
        except Exception as exc:
            cycle = -1
            conn.send(("diverged", f"{type(exc).__name__}: {exc}"))


@dataclass
class _Worker:
    process: Any
    conn: multiprocessing.connection.Connection
    ready: bool = False


@dataclass
class ShardStats:
    """Counters of one :class:`FilterShardPool` (tests and bench read them)."""

    sharded_chunks: int = 0
    local_chunks: int = 0
    diverged: int = 0
    full_syncs: int = 0
    reasons: dict[str, int] = field(default_factory=dict)


class FilterShardPool:
    """One profile's Filter shards: ``parallelism - 1`` worker processes beside the cycle's thread
    (:class:`~py_scheduler.framework.interfaces.FilterShards`).

    Args:
        factory: builds the profile in a worker (pickled into it).
        parallelism: parts per sharded chunk, the cycle's thread included (>= 2 to start workers).
        min_chunk_seconds: shard a chunk only when the cycle's thread would take at least this long
            for it by its measured seconds per node (0: always, once the workers are ready); the
            floor of :attr:`threshold`, which rises where sharding does not pay (:meth:`_judge`).
        timeout: seconds to wait for a worker's answer before sharding stops for good.
        min_part: fewest nodes per part (smaller chunks use fewer parts).
        gc_tuning: (at start, after each whole replica) called in each worker: the live process's
            ``(set_thresholds, freeze_collected)`` from py_scheduler/app/tuning.py, the one module that
            tunes the collector (None: Python's defaults).
        start: spawn the workers now; by default they are spawned once ``spawn_after`` chunks were
            worth sharding (a profile whose chunks stay cheap never has a worker process, nor its
            replica's memory; nor does one slow chunk of a cold start).
        warm_up: chunks the cycle's thread filters before its seconds per node are trusted, and sharded
            chunks before their gain is judged (the first ones after a start, or in a new worker, build
            columns and indexes); a chunk that carried a whole replica is never judged.
    """

    def __init__(self, factory: ReplicaFactory, parallelism: int, *, min_chunk_seconds: float = 0.005,
                 timeout: float = 10.0, min_part: int = 50,
                 gc_tuning: GcTuning | None = None, start: bool = False, spawn_after: int = 20,
                 warm_up: int = 10) -> None:
        self.parallelism = parallelism
        self.min_chunk_seconds = min_chunk_seconds
        self.timeout = timeout
        self.min_part = max(1, min_part)
        self.stats = ShardStats()
        self.broken = ""
        self._key = functools.partial(_Changes)  # this pool's derived-structure key
        self._synced: Snapshot | None = None
        self._objects_version = -1
        self._objects: ClusterObjects | None = None
        self._seconds_per_node = 0.0
        self._local_samples = 0
        self._sharded_samples = 0
        self._below = 0
        self.ratio: float | None = None
        """Running mean of sharded seconds over predicted one-core seconds (None before any)."""
        self._costly = 0
        self.threshold = min_chunk_seconds
        """Seconds the cycle's thread must be predicted to need for a chunk to be sharded (adapted)."""
        self.spawn_after = spawn_after
        self.warm_up = warm_up
        self._worker_fixed = 0.0  # a worker's seconds per request beyond its nodes' Filter (running mean)
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
            proc = ctx.Process(target=_worker_main, args=(child, self._factory, self._gc_tuning), daemon=True,
                               name="py-scheduler-filter-shard")
            proc.start()
            child.close()
            self._workers.append(_Worker(proc, parent))

    # -- FilterShards -------------------------------------------------------------------------------
    def filter_chunk(self, fw: Framework, active: Sequence[Any], state: CycleState, pod: PodInfo,
                     nodes: list[NodeInfo]) -> list[Status | None] | None:
        """``fw.filter_chunk(active, state, pod, nodes)``, its parts filtered by the ready workers when
        that pays (see the module docstring); same result, same error."""
        why = self._unshardable(active, state, len(nodes))
        parts = 0
        if not why and not self._started:
            self._costly += 1  # the workers are spawned only after enough costly chunks, not one cold one
            why = "starting" if self._costly < self.spawn_after else ""
        if not why:
            ready = self._ready_workers()
            parts = min(len(ready) + 1, len(nodes) // self.min_part)
            why = "" if parts >= 2 else "small" if ready else "starting"
        if why:
            self.stats.reasons[why] = self.stats.reasons.get(why, 0) + 1
            return self._local(fw, active, state, pod, nodes)
        snap = state.snapshot
        assert isinstance(snap, Snapshot)
        if state is not self._last_state:
            self._last_state = state
            self._cycle += 1
        predicted = self._seconds_per_node * len(nodes)
        started = time.perf_counter()
        pieces = self._split(nodes, parts)
        sync = self._sync(snap)
        names = [pl.name for pl in active]
        sent: list[_Worker] = []
        try:
            for k, w in enumerate(ready):
                piece = pieces[k + 1] if k + 1 < len(pieces) else []
                w.conn.send_bytes(pickle.dumps((sync, self._cycle, pod.pod, names, [ni.name for ni in piece]),
                                               protocol=pickle.HIGHEST_PROTOCOL))
                sent.append(w)
        except Exception as exc:  # a closed pipe, or something in the snapshot that does not pickle
            self._break(f"sending to a worker failed: {exc!r}")
            self._collect(sent)  # read the abandoned answers: the pipes stay in step
            return self._local(fw, active, state, pod, nodes)
        t0 = time.perf_counter()
        try:
            first = fw.filter_chunk(active, state, pod, pieces[0])
        except SchedulingError:
            self._collect(sent)  # read the abandoned answers: the pipes stay in step
            raise
        self._learn(time.perf_counter() - t0, len(pieces[0]))
        answers = self._collect(sent)
        if answers is None:
            return self._local(fw, active, state, pod, nodes)
        out: list[Status | None] = list(first) if first is not None else [None] * len(pieces[0])
        rest = pieces[1:] + [[]] * (len(answers) + 1 - len(pieces))  # a worker with no part still answers
        for (kind, got), piece in zip(answers, rest, strict=True):
            if kind == "error":  # the cycle's thread raises the error the one-core path raises first
                return fw.filter_chunk(active, state, pod, nodes)
            if kind != "ok":
                self.stats.diverged += 1
                self._synced = None  # the replica is sent whole next time
                log.warning("Filter shard diverged, filtering on the cycle's thread pod=%s why=%s", pod.key, got)
                return self._local(fw, active, state, pod, nodes)
            verdicts, seconds = got
            out.extend(_decode(verdicts, len(piece)))
            if sync is None or not sync.get("full"):
                self._learn_worker(seconds, len(piece))
        self.stats.sharded_chunks += 1
        if sync is None or not sync.get("full"):  # a whole replica's transfer is paid once, not per chunk
            self._sharded_samples += 1
            if self._sharded_samples > self.warm_up:  # the workers' first chunks build their indexes
                self._judge(time.perf_counter() - started, predicted)
        return None if all(s is None for s in out) else out

    # -- parts -------------------------------------------------------------------------------------
    def _split(self, nodes: list[NodeInfo], parts: int) -> list[list[NodeInfo]]:
        """``parts`` contiguous pieces, the first (the cycle's thread's) larger by the nodes it filters
        while a worker spends its fixed cost (unpickling, its PreFilter, the answer), so that all
        finish together: with per-node seconds r and a worker's fixed seconds F, each worker gets
        w = (n - F / r) / parts nodes and the cycle's thread the rest."""
        n = len(nodes)
        r = self._seconds_per_node
        extra = int(self._worker_fixed / r) if r > 0 else 0
        w = max(0, (n - extra) // parts)
        if w < self.min_part:
            w = max(self.min_part, n // parts)
        first = n - w * (parts - 1)
        pieces = [nodes[:first]]
        for k in range(parts - 1):
            pieces.append(nodes[first + k * w:first + (k + 1) * w])
        return pieces

    def _unshardable(self, active: Sequence[Any], state: CycleState, n: int) -> str:
        if self.broken or self.parallelism < 2:
            return "broken" if self.broken else "parallelism 1"
        if not isinstance(state.snapshot, Snapshot):
            return "not a Snapshot"
        if PLACEMENT_STATE_KEY in state.data:
            return "placement"
        for pl in active:
            if pl.name not in SHARDABLE_FILTERS:
                return str(pl.name)
        cost = self._seconds_per_node * n
        if self._local_samples < self.warm_up or cost < self.min_chunk_seconds:
            return "cheap"
        if cost < self.threshold:
            self._below += 1
            if self._below % _PROBE_EVERY:
                return "not paying"
        return ""

    def _judge(self, seconds: float, predicted: float) -> None:
        """The cost model, corrected by what sharding gave. ``ratio`` is a running mean of a sharded
        chunk's seconds over those the cycle's thread alone was predicted to need. While it is 1 or
        more (sharding does not pay), each sharded chunk raises the cost a chunk must have to be
        sharded by half (up to :data:`_MAX_THRESHOLD`); while it is under 0.85 each lowers it by a
        fifth, never under ``min_chunk_seconds``. On a machine whose other cores are busy (the API
        server's, in the benchmarks) the workers answer late and sharding backs off; every
        :data:`_PROBE_EVERY`-th chunk costly enough for the floor is sharded anyway, so the model
        sees when sharding pays again."""
        r = seconds / predicted if predicted > 0 else 1.0
        self.ratio = _running_mean(self.ratio, r)
        if self.ratio >= 1.0:
            self.threshold = min(self.threshold * 1.5, _MAX_THRESHOLD)
        elif self.ratio < 0.85:
            self.threshold = max(self.threshold * 0.8, self.min_chunk_seconds)

    def _local(self, fw: Framework, active: Sequence[Any], state: CycleState, pod: PodInfo,
               nodes: list[NodeInfo]) -> list[Status | None] | None:
        self.stats.local_chunks += 1
        t0 = time.perf_counter()
        got = fw.filter_chunk(active, state, pod, nodes)
        self._learn(time.perf_counter() - t0, len(nodes))
        return got

    def _learn(self, seconds: float, n: int) -> None:
        if n:
            self._local_samples += 1
            per = seconds / n
            self._seconds_per_node = _running_mean(self._seconds_per_node or None, per)

    def _learn_worker(self, seconds: float, n: int) -> None:
        fixed = max(0.0, seconds - self._seconds_per_node * n)
        self._worker_fixed = _running_mean(self._worker_fixed or None, fixed)

    def _sync(self, snap: Snapshot) -> dict[str, Any] | None:
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
            log.info("Filter shards ready workers=%d pids=%s", len(ready), [w.process.pid for w in ready])
        return ready

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
            log.error("Filter shards stopped, every node is filtered on the cycle's thread from now: %s", why)
        self.broken = why
        self.close()

    def close(self) -> None:
        """Stop the workers (idempotent)."""
        workers, self._workers = self._workers, []
        if workers:
            st = self.stats
            log.info("Filter shards stopped chunks_sharded=%d chunks_local=%d diverged=%d full_syncs=%d "
                     "local_by_reason=%s", st.sharded_chunks, st.local_chunks, st.diverged, st.full_syncs, st.reasons)
        for w in workers:
            with contextlib.suppress(OSError, ValueError):
                w.conn.send_bytes(b"")
            w.conn.close()
        for w in workers:
            w.process.join(timeout=2)
            if w.process.is_alive():  # pragma: no cover - a worker stuck in a plugin
                w.process.kill()
