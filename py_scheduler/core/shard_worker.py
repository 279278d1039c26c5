"""The worker side of node shards (py_scheduler/core/shards.py): the process that holds a replica of
the cycle's Snapshot, brings it up to date from what the pool sends (:func:`apply_sync`) and answers
Filter and Score requests over parts of the nodes (:func:`worker_main`), plus the compact form of
its Filter verdicts (:data:`Verdicts`). What exactness rests on is in shards.py's docstring; this
module follows upstream's ``Parallelizer.Until`` (``pkg/scheduler/framework/parallelize/parallelism.go``)
only in what each part computes.
"""

from __future__ import annotations

import multiprocessing.connection
import os
import pickle
import signal
import time
from collections.abc import Callable, Iterable
from typing import Any, cast

from py_scheduler.cache.cache import assign_node_info
from py_scheduler.cache.snapshot import ClusterObjects, Snapshot, add_image_states, remove_image_states
from py_scheduler.framework.objects import Obj
from py_scheduler.framework.runtime import Framework, SchedulingError
from py_scheduler.framework.types import (
    Code,
    CycleState,
    ImageStateSummary,
    NodeInfo,
    PodInfo,
    Status,
    next_generation,
)

GcTuning = tuple[Callable[[], None], Callable[[], None]]
"""A worker's garbage-collector tuning: (at start, after each whole replica); module-level functions."""

ReplicaFactory = Callable[[Any], Framework]
"""Builds the profile's Framework over a replica's object lister, in the worker (it must pickle:
``functools.partial(registry.replica_framework, profile, cfg)``)."""


class _ReplicaObjects:
    """The Handle's object lister over a replica's :class:`ClusterObjects` (binding-cycle reads only;
    the scheduling cycle reads ``state.snapshot.objects``)."""

    def __init__(self, objects: ClusterObjects) -> None:
        self.objects = objects

    def get(self, kind: str, namespace: str, name: str) -> Obj | None:
        return self.objects.get(kind, f"{namespace}/{name}" if namespace else name)

    def list(self, kind: str) -> Iterable[Obj]:
        return self.objects.list(kind)


def apply_sync(replica: Snapshot, sync: dict[str, Any]) -> None:
    """Bring the worker's ``replica`` up to the cycle's snapshot (what
    :meth:`py_scheduler.core.shards.NodeShardPool._sync` sent). The per-image summaries
    ImageLocality reads (``Snapshot.images``: an image's size and the nodes holding it) are the main
    side's: a whole replica takes the summaries its NodeInfos arrived
    with (one pickle keeps them shared); a changed node's images leave and re-enter the replica's
    summaries as the cache does it, and each summary it holds takes the size the main side's has
    (set there by whichever node created it, which the replica's own order cannot know)."""
    objects = sync.get("objects")
    if objects is not None:
        replica.objects.by_kind = objects
        replica.objects.version += 1
    nodes: list[NodeInfo] = sync.get("nodes") or []
    if sync.get("full"):
        images: dict[str, ImageStateSummary] = {}
        for ni in nodes:
            object.__setattr__(ni, "generation", next_generation())  # this process's generations only
            for name, summary in ni.image_states.items():
                images.setdefault(name, summary)
        replica.images = images
        replica.node_info_map = {ni.name: ni for ni in nodes}
        replica.node_info_list = nodes
        replica.invalidate_derived()
        replica.rebuild_lists()
        return
    images = cast(dict[str, ImageStateSummary], replica.images)
    lists = False
    for clone in nodes:
        existing = replica.node_info_map[clone.name]
        lists = lists or (bool(existing.pods_with_affinity) != bool(clone.pods_with_affinity)
                          or bool(existing.pods_with_required_anti_affinity)
                          != bool(clone.pods_with_required_anti_affinity)
                          or existing.pvc_ref_counts != clone.pvc_ref_counts)
        sent = clone.image_states
        remove_image_states(existing, images)
        assign_node_info(existing, clone)
        add_image_states(existing, images)
        for name, summary in existing.image_states.items():
            theirs = sent.get(name)
            if theirs is not None:
                summary.size = theirs.size
        replica.node_changed(existing)
    if lists:
        replica.rebuild_lists()


Verdicts = tuple[int, list[tuple[int, list[str], str]], list[int], list[int]] | None
"""A part's statuses as sent back: (nodes, distinct statuses as (code, reasons, plugin), positions of
the rejected nodes, index of each one's status); None when every node passed. Tuples of ints and
strings pickle several times faster than one Status object per rejected node."""


def encode_verdicts(got: list[Status | None] | None, n: int) -> Verdicts:
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


def decode_verdicts(v: Verdicts, n: int) -> list[Status | None]:
    if v is None:
        return [None] * n
    _, distinct, positions, which = v
    statuses = [Status(Code(c), reasons, plugin) for c, reasons, plugin in distinct]
    out: list[Status | None] = [None] * n
    for i, k in zip(positions, which, strict=True):
        out[i] = statuses[k]
    return out


def worker_main(conn: multiprocessing.connection.Connection, factory: ReplicaFactory,
                 gc_tuning: GcTuning | None) -> None:
    """A shard worker: build the profile over an empty replica, say "ready", then answer requests
    until the pipe closes or an empty message arrives. Request: pickled ``(sync, cycle, pod, active
    filters, names, score)``: Filter of the nodes ``names`` when ``score`` is None, else the raw scores
    of a part of the feasible nodes, ``score = (feasible names, active scorers, start, end)``.
    Answer: ``("ok", (verdicts, seconds))`` (:data:`Verdicts`) or ``("ok", (columns, seconds))`` (one
    list of raw scores per active scorer), the seconds since the request arrived;
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
    """The worker's request loop (see :func:`_worker_main`). A request's PreFilter (and, for a Score
    part, PreScore over the whole feasible list) runs once per cycle token."""
    cycle = -1
    scored = False
    state = CycleState(replica)
    pod: PodInfo | None = None
    active: list[Any] = []
    scorers: list[Any] = []
    feasible_nodes: list[NodeInfo] = []
    while True:
        try:
            raw = conn.recv_bytes()
        except (EOFError, OSError):
            return
        if not raw:
            return
        t0 = time.perf_counter()
        sync, token, pod_obj, active_names, names, score = pickle.loads(raw)
        try:
            if sync is not None:
                apply_sync(replica, sync)
                if sync.get("full") and gc_tuning is not None:
                    gc_tuning[1]()  # the replica's nodes: never scanned again (as the live process's heap)
            if token != cycle:
                cycle = -1
                scored = False
                pod = PodInfo(pod_obj)
                state = CycleState(replica)
                _, s, _ = fw.run_pre_filter(state, pod, replica.node_info_list)
                active = [pl for pl in fw.filter_plugins if pl.name not in state.skip_filter]
                if not s.is_success() or [pl.name for pl in active] != active_names:
                    conn.send(("diverged", f"PreFilter: {s.message()!r}, active {[pl.name for pl in active]}"))
                    continue
                cycle = token
            assert pod is not None
            if score is not None:
                feasible, score_names, lo, hi = score
                if not scored:
                    feasible_nodes = [replica.node_info_map[n] for n in feasible]
                    fw.run_pre_score(state, pod, feasible_nodes)
                    scorers = [pl for pl in fw.score_plugins if pl.name not in state.skip_score]
                    if [pl.name for pl in scorers] != score_names:
                        cycle = -1
                        conn.send(("diverged", f"PreScore: active {[pl.name for pl in scorers]}"))
                        continue
                    scored = True
                nodes = feasible_nodes[lo:hi]  # the cycle's list, looked up once by PreScore
                try:
                    cols = [list(c) for c in fw.raw_score_columns(scorers, state, pod, nodes)]
                except SchedulingError as exc:
                    conn.send(("error", str(exc)))
                    continue
                conn.send(("ok", (cols, time.perf_counter() - t0)))
                continue
            nodes = [replica.node_info_map[n] for n in names]
            try:
                got = fw.filter_chunk(active, state, pod, nodes) if nodes else None
            except SchedulingError as exc:
                conn.send(("error", str(exc)))
                continue
            verdicts = encode_verdicts(got, len(nodes))
            conn.send(("ok", (verdicts, time.perf_counter() - t0)))
        except Exception as exc:
            cycle = -1
            conn.send(("diverged", f"{type(exc).__name__}: {exc}"))
