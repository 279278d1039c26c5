"""In-process scheduling-cycle benchmark: the time of one ``Algorithm.schedule`` on a ``Snapshot``.

No API server: the cluster is built with :func:`py_scheduler.cache.snapshot.Snapshot.from_objects` from
:mod:`bench.bench_lib.workloads` (N nodes, ``init`` Pods of the workload already bound), then
``warmup + cycles`` new Pods of the workload are scheduled one after the other exactly like the live
loop does it: ``Algorithm.schedule`` (timed: the "cycle"), then Reserve and an in-memory assume onto
the selected node (timed separately as "assume"), so each Pod sees the earlier ones.

Upstream counterpart: ``scheduler_perf``'s ``scheduler_framework_extension_point_duration_seconds``
and ``scheduling_algorithm_duration_seconds`` (``pkg/scheduler/metrics``), here measured with
``time.perf_counter`` around the call. Times are seconds internally, reported in milliseconds.
"""

from __future__ import annotations

import cProfile
import functools
import gc
import io
import math
import pstats
import random
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.bench_lib.workloads import (
    GPUS_PER_NODE,
    Workload,
    generated_claim,
    init_pods,
    iter_nodes,
    max_pods,
    pod_objects,
)
from py_scheduler.app.scheduling.decisions import DecisionLog
from py_scheduler.app.tuning import freeze_collected, set_thresholds
from py_scheduler.cache.snapshot import ClusterObjects, Snapshot
from py_scheduler.core.shards import NodeShardPool
from py_scheduler.framework.algorithm import Algorithm
from py_scheduler.framework.config import ProfileConfig, SchedulerConfig, build_framework
from py_scheduler.framework.types import PodInfo
from py_scheduler.plugins import registry
from py_scheduler.plugins.dynamic_resources import simulated_pre_bind

Obj = dict[str, Any]

PROFILE_NAME = "py-scheduler"


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (``p`` in 0..100) of ``values``; 0.0 for no values."""
    if not values:
        return 0.0
    s = sorted(values)
    k = max(0, min(len(s) - 1, math.ceil(p / 100.0 * len(s)) - 1))
    return s[k]


@dataclass(slots=True)
class CycleResult:
    """One run of :func:`run_cycles`; times in seconds.

    ``breakdown`` maps ``"<point>/<plugin>"`` (plugin ``*`` for the whole extension point) to the
    mean seconds per measured cycle (only with ``breakdown=True``).
    """

    workload: str
    nodes: int
    init_pods: int
    cycles: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    assume: list[float] = field(default_factory=list)
    record: list[float] = field(default_factory=list)
    """CPU seconds (``time.thread_time``) per Pod of keeping its decision record (``decisions=True``
    only); compare with ``cpu``: wall-clock times of a few microseconds are mostly the noise of a
    shared machine."""
    build_seconds: float = 0.0
    rss_kib: int = 0
    """Resident set size (``VmRSS``) of this process at the end of the run, the cluster still held."""
    sharded_chunks: int = 0
    """Filter chunks split over the shard workers (``parallelism`` > 1), warm-up included."""
    local_chunks: int = 0
    """Filter chunks the cycle's thread filtered alone (``parallelism`` > 1; warm-up included)."""
    sharded_scores: int = 0
    """Scores (raw scores of the feasible nodes) split over the shard workers, warm-up included."""
    local_scores: int = 0
    """Scores the cycle's thread computed alone (``parallelism`` > 1; warm-up included)."""
    settings: dict[str, Any] = field(default_factory=dict)
    """The run's parallelism, shard floor (ms) and percentageOfNodesToScore (None: adaptive)."""
    shard_costs: dict[str, dict[str, float]] = field(default_factory=dict)
    """Per point ("filter", "score"): the pool's cost model at the end (ms per 1000 nodes on the
    cycle's thread, a worker's fixed ms per request, the sharded / predicted ratio; -1: none yet)."""
    scheduled: int = 0
    unschedulable: int = 0
    evaluated: list[int] = field(default_factory=list)
    breakdown: dict[str, float] = field(default_factory=dict)
    profile_text: str = ""

    def summary(self) -> dict[str, Any]:
        """Milliseconds: median / p90 / p99 / mean cycle (wall clock), median cycle CPU time of the
        thread (``cpu_median_ms``: less disturbed by other processes on a shared machine), median
        assume; counts."""
        ms = [c * 1000 for c in self.cycles]
        cpu = [c * 1000 for c in self.cpu]
        return {
            "workload": self.workload, "nodes": self.nodes, "init_pods": self.init_pods, **self.settings,
            "cycles": len(ms), "scheduled": self.scheduled, "unschedulable": self.unschedulable,
            "median_ms": statistics.median(ms) if ms else 0.0, "p90_ms": percentile(ms, 90),
            "p99_ms": percentile(ms, 99), "mean_ms": statistics.fmean(ms) if ms else 0.0,
            "cpu_median_ms": statistics.median(cpu) if cpu else 0.0, "cpu_p99_ms": percentile(cpu, 99),
            "assume_median_ms": statistics.median(self.assume) * 1000 if self.assume else 0.0,
            "sharded_chunks": self.sharded_chunks, "local_chunks": self.local_chunks,
            "sharded_scores": self.sharded_scores, "local_scores": self.local_scores,
            "shard_costs": self.shard_costs,
            "record_median_ms": statistics.median(self.record) * 1000 if self.record else 0.0,
            "record_mean_ms": statistics.fmean(self.record) * 1000 if self.record else 0.0,
            "cpu_mean_ms": statistics.fmean(cpu) if cpu else 0.0,
            "nodes_evaluated_median": statistics.median(self.evaluated) if self.evaluated else 0,
            "build_s": self.build_seconds, "rss_mib": self.rss_kib / 1024,
        }


class _Breakdown:
    """Framework observer summing seconds per (extension point, plugin) while ``active``."""

    def __init__(self) -> None:
        self.active = False
        self.sums: dict[str, float] = defaultdict(float)

    def __call__(self, point: str, plugin: str, code: str, seconds: float) -> None:
        if self.active:
            self.sums[f"{point}/{plugin or '*'}"] += seconds


def build_cluster(workload: Workload, n_nodes: int, n_init: int) -> tuple[Snapshot, int]:
    """(snapshot with ``n_init`` bound Pods of the workload, number actually placed).

    Nodes and Pods are generated one at a time into the snapshot (at 15000 nodes / 150000 Pods the
    JSON dicts are not held in a list beside the snapshot's own copies)."""
    placed = 0
    objects = ClusterObjects()
    if workload.node_object is not None:
        for i in range(n_nodes):
            add_object(objects, workload.node_object(i))
    for _, obj in workload.setup:  # PriorityClasses, StorageClasses
        add_object(objects, obj)

    def counted() -> Iterator[Obj]:
        nonlocal placed
        for pod in init_pods(workload, n_nodes, max_pods(workload, n_nodes, n_init)):
            for obj in pod_objects(workload, placed, pod["metadata"]["namespace"], n_nodes):
                add_object(objects, obj)
            placed += 1
            yield pod

    return Snapshot.from_objects(iter_nodes(n_nodes), counted(), objects), placed


def add_object(objects: ClusterObjects, obj: Obj) -> None:
    """Put ``obj`` (a PVC, PV, CSINode...) into the snapshot's cluster objects, as the informers would."""
    objects.upsert(obj["kind"], obj)


def run_cycles(workload: Workload, n_nodes: int, *, cycles: int = 200, warmup: int = 20,
               n_init: int | None = None, seed: int = 1, breakdown: bool = False,
               profiler: str = "", namespace: str = "bench", gc_freeze: bool = False,
               batching: bool = False, decisions: bool = False, parallelism: int = 1,
               shard_min_seconds: float = 0.005, percentage: int | None = None) -> CycleResult:
    """Schedule ``warmup + cycles`` Pods of ``workload`` on a fresh ``n_nodes`` cluster; time the last
    ``cycles``.

    ``gc_freeze``: ``gc.freeze()`` the cluster once built and use the live process's GC thresholds,
    as ``py-scheduler run`` does (without them Python's full collections of the growing heap show in
    the p99).
    ``n_init`` bound Pods first (default: ``workload.default_init``, mostly one per node; for the GPU
    workload at most half of what the GPUs can hold). ``profiler``: ``""``, ``"cprofile"`` or
    ``"pyinstrument"`` (profiles the measured cycles only; the text report lands in ``profile_text``).
    ``batching``: OpportunisticBatching as the live loop runs it (``cycle=`` advancing by one per
    Pod); the profile then uses PodTopologySpread ``defaultingType: List`` without default
    constraints, since the default System spreading makes every Pod unsignable (as upstream). Without
    it, ``cycle`` is not passed and no Pod batches.
    ``parallelism``: Filter and Score on that many cores (py_scheduler/core/shards.py: ``parallelism -
    1`` worker processes; a Filter chunk or a Score sharded when the cycle's thread would take
    ``shard_min_seconds`` for it); the workers are started and ready before the first Pod. ``cpu`` is
    then the cycle thread's CPU only. ``percentage``: the profile's ``percentageOfNodesToScore``
    (None: the adaptive default; 100 scores every feasible node).
    ``decisions``: after each Pod, keep its decision record as the live loop does
    (``DecisionLog.record``, py_scheduler/app/scheduling/decisions.py), timed separately (``record``).

    Raises:
        ImportError: ``profiler="pyinstrument"`` and pyinstrument is not installed
            (``pip install -e '.[bench]'``).
    """
    t0 = time.perf_counter()
    n_init = workload.default_init(n_nodes) if n_init is None else n_init
    if workload.gpus:  # keep half of the GPU capacity free for the measured Pods
        n_init = min(n_init, max_pods(workload, n_nodes, n_init + n_nodes * GPUS_PER_NODE) // 2)
    snap, placed = build_cluster(workload, n_nodes, n_init)
    obs = _Breakdown()
    plugin_config = {"PodTopologySpread": {"defaultingType": "List"}} if batching else {}
    profile = ProfileConfig(scheduler_name=PROFILE_NAME, plugin_config=plugin_config,
                            percentage_of_nodes_to_score=percentage)
    fw = build_framework(profile, observer=obs if breakdown else None, registry=registry)
    pool: NodeShardPool | None = None
    if parallelism > 1:
        pool = NodeShardPool(functools.partial(registry.replica_framework, profile,
                                               SchedulerConfig(profiles=[profile])),
                             parallelism, min_chunk_seconds=shard_min_seconds,
                             gc_tuning=(set_thresholds, freeze_collected))
        if not pool.wait_ready(120.0):
            raise RuntimeError(f"Node shard workers did not start: {pool.broken}")
        fw.connect_shards(pool)
    algo = Algorithm(rng=random.Random(seed))
    decision_log = DecisionLog() if decisions else None
    res = CycleResult(workload.name, n_nodes, placed, build_seconds=time.perf_counter() - t0,
                      settings={"parallelism": parallelism, "shard_min_ms": shard_min_seconds * 1000,
                                "percentage_of_nodes_to_score": percentage})
    total = max_pods(workload, n_nodes, placed + warmup + cycles) - placed
    pods = [workload.pod(placed + k, namespace, PROFILE_NAME, f"uid-{namespace}-{placed + k}")
            for k in range(max(0, total))]
    for k in range(max(0, total)):
        for obj in pod_objects(workload, placed + k, namespace, n_nodes):
            add_object(snap.objects, obj)
    claims = workload.namespace_objects is not None  # claims from a template (the DRA workload)
    if claims:
        assert workload.namespace_objects is not None
        for obj in workload.namespace_objects(namespace):
            add_object(snap.objects, obj)
        for raw in pods:  # the resourceclaim controller's claims, before the Pods are scheduled
            add_object(snap.objects, generated_claim(raw))

    stop_profile: Callable[[], str] = lambda: ""  # noqa: E731
    gc.collect()
    thresholds = gc.get_threshold()
    if gc_freeze:
        from py_scheduler.app.tuning import GC_THRESHOLDS

        gc.freeze()
        gc.set_threshold(*GC_THRESHOLDS)
    for k, raw in enumerate(pods):
        measured = k >= warmup
        if measured and k == warmup:
            obs.active = breakdown
            stop_profile = _start_profiler(profiler)
        pi = PodInfo(raw)
        u0 = time.thread_time()
        c0 = time.perf_counter()
        result = algo.schedule(fw, snap, pi, cycle=k + 1 if batching else None)
        c1 = time.perf_counter()
        u1 = time.thread_time()
        node = result.selected
        if node is not None:
            state = result.state
            assert state is not None
            st = fw.run_reserve(state, pi, node)
            if st.is_success() and claims:
                simulated_pre_bind(state, pi)  # PreBind's claim write: later Pods see the device taken
            if st.is_success():
                assumed = pi
                if state.pod_annotations:
                    pod = dict(raw)
                    meta = dict(raw["metadata"])
                    meta["annotations"] = {**(meta.get("annotations") or {}), **state.pod_annotations}
                    pod["metadata"] = meta
                    assumed = pi.derive(pod)
                snap.assume(assumed, node)
        c2 = time.perf_counter()
        if decision_log is not None:
            r0 = time.thread_time()
            decision_log.record(pi, PROFILE_NAME, 1, "scheduled" if node is not None else "unschedulable",
                                duration=c2 - c0, res=result, nodes_total=len(snap.node_info_list),
                                message=result.message, annotations=state.pod_annotations if node is not None else None)
            if measured:
                res.record.append(time.thread_time() - r0)
        if measured:
            res.cycles.append(c1 - c0)
            res.cpu.append(u1 - u0)
            res.assume.append(c2 - c1)
            res.evaluated.append(result.nodes_evaluated)
            if node is None:
                res.unschedulable += 1
            else:
                res.scheduled += 1
    obs.active = False
    if pool is not None:
        res.sharded_chunks, res.local_chunks = pool.stats.sharded_chunks, pool.stats.local_chunks
        res.sharded_scores, res.local_scores = pool.stats.sharded_scores, pool.stats.local_scores
        res.shard_costs = {point: {"ms_per_1000_nodes": cost.seconds_per_node * 1e6,
                                   "worker_fixed_ms": cost.worker_fixed * 1000,
                                   "ratio": cost.ratio if cost.ratio is not None else -1.0}
                           for point, cost in (("filter", pool.filter_cost), ("score", pool.score_cost))}
        pool.close()
    res.profile_text = stop_profile()
    res.rss_kib = vm_rss_kib()
    if gc_freeze:
        gc.unfreeze()
        gc.set_threshold(*thresholds)
    if breakdown and res.cycles:
        res.breakdown = {k: v / len(res.cycles) for k, v in sorted(obs.sums.items())}
    return res


def vm_rss_kib() -> int:
    """This process's resident set size (``VmRSS`` of ``/proc/self/status``) in KiB; 0 if unreadable."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _start_profiler(kind: str) -> Callable[[], str]:
    """Start a profiler; the returned function stops it and returns its text report."""
    if kind == "cprofile":
        prof = cProfile.Profile()
        prof.enable()

        def stop_cprofile() -> str:
            prof.disable()
            out = io.StringIO()
            stats = pstats.Stats(prof, stream=out)
            stats.sort_stats("cumulative").print_stats(35)
            stats.sort_stats("tottime").print_stats(25)
            return out.getvalue()

        return stop_cprofile
    if kind == "pyinstrument":
        from pyinstrument import Profiler

        pyi = Profiler(interval=0.0005)
        pyi.start()

        def stop_pyinstrument() -> str:
            pyi.stop()
            text: str = pyi.output_text(unicode=False, color=False, show_all=False)
            return text

        return stop_pyinstrument
    return lambda: ""
