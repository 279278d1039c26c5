"""OpportunisticBatching: reuse the previous cycle's ranked nodes for the next Pod with the same signature.

Upstream (kube-scheduler v1.37.2, feature gate ``OpportunisticBatching``, beta, on by default):

- ``pkg/scheduler/framework/runtime/batch.go``: :class:`OpportunisticBatch` (``GetNodeHint``,
  ``StoreScheduleResults``, ``batchStateCompatible``, ``refreshHintCandidates``,
  ``rescoreHintedNode``, ``resolveCachedCandidates``, ``maxBatchAge`` = 500 ms, the flush reasons);
- ``pkg/scheduler/framework/sorted_nodes.go``: :class:`SortedScoredNodes` (a max-heap on the total
  score, ties ordered by a per-node ``Randomizer``);
- ``pkg/scheduler/metrics/metrics.go``: the result / flush-reason label values below.

How it works: after a full cycle that placed a Pod with a signature (``Framework.sign_pod``), the
remaining feasible nodes are kept in a heap by total score. For the next Pod of the same profile --
the very next scheduling cycle, same signature, not nominated, at most 500 ms after the heap was
stored -- the node last chosen is re-filtered: if it still fits it is re-scored (PreScore over the
cached candidates plus that node, Score on that node alone, NormalizeScore over all of them, heapify);
if it no longer fits it is dropped. The best node of the heap is then the *hint*, which the cycle
evaluates like a nominated node (Filter on it alone); when it passes it is the Pod's node and no other
node is filtered or scored.

Ties: upstream leaves ``Randomizer`` at 0 unless extenders scored (``prioritizeNodes``), so equal
totals come out of the heap in heap order. py-scheduler gives each stored node a random
``Randomizer`` from the :class:`~py_scheduler.framework.algorithm.Algorithm`'s tie-break RNG, so ties stay
uniformly distributed (as the selection of the full cycle is) and seeded runs stay reproducible.

Deliberate difference: upstream computes the Pod's signature when the Pod enters the queue; here it
is computed lazily at the Pod's first scheduling attempt in a profile and memoized on
``PodInfo.parsed`` (a Pod update makes a new PodInfo, hence a new signature, as upstream's
``QueuedPodInfo.Update`` clears it).
"""

from __future__ import annotations

import heapq
import logging
import operator
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from py_scheduler.framework.errors import SchedulingError
from py_scheduler.framework.lister import SnapshotLister
from py_scheduler.framework.types import CycleState, NodeInfo, PodInfo, Status

log = logging.getLogger("py_scheduler.framework.batch")

MAX_BATCH_AGE = 0.5
"""``maxBatchAge``: a stored ranking older than this (seconds, by the batch's clock) is not used."""

PodSignature = str
"""A Pod's signature: canonical JSON of ``{signer name: fragment}`` (only compared for equality)."""

SignFragment = tuple[str, Any]
"""``fwk.SignFragment``: (signer name such as ``v1.Pod.Spec.Tolerations``, a JSON-able value)."""

# metrics.BatchAttempt* (label "result" of scheduler_batch_attempts_total)
ATTEMPT_NO_HINT = "no_hint"
ATTEMPT_HINT_USED = "hint_used"
ATTEMPT_HINT_NOT_USED = "hint_not_used"

# metrics.BatchFlush* (label "reason" of scheduler_batch_cache_flushed_total)
FLUSH_POD_FAILED = "pod_failed"
FLUSH_POD_SKIPPED = "pod_skipped"
FLUSH_POD_NOMINATED = "pod_nominated"
FLUSH_NODE_MISSING = "node_missing"
FLUSH_EMPTY_LIST = "empty_list"
FLUSH_EXPIRED = "expired"
FLUSH_POD_INCOMPATIBLE = "pod_incompatible"
FLUSH_POD_NOT_BATCHABLE = "pod_not_batchable"
FLUSH_FILTER_ERROR = "filter_error"
FLUSH_PRESCORE_ERROR = "prescore_error"
FLUSH_RESCORE_ERROR = "rescore_error"
FLUSH_NORMALIZE_ERROR = "normalize_error"


class BatchRecorder(Protocol):
    """Where the batch metrics go (``py_scheduler.app.telemetry.metrics`` implements it; None: not recorded).

    ``attempt(profile, result)``: ``scheduler_batch_attempts_total``; ``flushed(profile, reason)``:
    ``scheduler_batch_cache_flushed_total``; ``rescore(profile, seconds)``:
    ``scheduler_batch_rescore_attempts_total`` + ``scheduler_batch_rescore_duration_seconds``;
    ``hint_duration(hinted, profile, seconds)``: ``scheduler_get_node_hint_duration_seconds``
    (``hinted`` is ``hint`` / ``no_hint``); ``store_duration(profile, seconds)``:
    ``scheduler_store_schedule_results_duration_seconds``.
    """

    def attempt(self, profile: str, result: str) -> None: ...

    def flushed(self, profile: str, reason: str) -> None: ...

    def rescore(self, profile: str, seconds: float) -> None: ...

    def hint_duration(self, hinted: str, profile: str, seconds: float) -> None: ...

    def store_duration(self, profile: str, seconds: float) -> None: ...


class BatchHandle(Protocol):
    """``batchHandle``: what :class:`OpportunisticBatch` needs of its profile (the ``Framework``)."""

    profile_name: str

    def run_filter(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> Status: ...

    def run_pre_score(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> None: ...

    def run_raw_score(self, state: CycleState, pod: PodInfo, node_info: NodeInfo) -> dict[str, int]: ...

    def normalize_scores(self, state: CycleState, pod: PodInfo, names: list[str],
                         raw: dict[str, list[int]]) -> list[int]: ...


class SortedScoredNodes:
    """``framework.SortedScoredNodes``: scored nodes popped best first (``NewSortedScoredNodes``).

    Columnar: ``names[i]`` has total score ``totals[i]`` (weighted, normalized) and, per Score plugin
    run in its cycle, the raw (pre-normalization) score ``raw[plugin][i]`` that a re-normalization
    needs. The heap orders by total (highest first), then by ``Randomizer`` (highest first), as
    upstream's ``nodeScoreHeap.Less``. Randomizers are drawn from ``rng`` when the heap is first used
    (never, for a ranking that is discarded), or given in ``randomizers``.
    """

    __slots__ = ("_heap", "_rng", "names", "randomizers", "raw", "totals")

    def __init__(self, names: list[str], totals: list[int], raw: dict[str, list[int]],
                 rng: random.Random | None = None, randomizers: list[int] | None = None) -> None:
        self.names = names
        self.totals = totals
        self.raw = raw
        self.randomizers = randomizers
        self._rng = rng
        self._heap: list[tuple[int, int, int]] | None = None

    def _ensure(self) -> list[tuple[int, int, int]]:
        h = self._heap
        if h is None:
            rnd = self.randomizers
            if rnd is None:
                if self._rng is not None:
                    bits = self._rng.getrandbits
                    rnd = [bits(62) for _ in self.names]
                else:
                    rnd = [0] * len(self.names)
                self.randomizers = rnd
            h = [(-t, -r, i) for i, (t, r) in enumerate(zip(self.totals, rnd, strict=True))]
            heapq.heapify(h)
            self._heap = h
        return h

    def __len__(self) -> int:
        return len(self.names) if self._heap is None else len(self._heap)

    def pop(self) -> str:
        """``Pop``: the name of the best remaining node (highest total, then highest Randomizer).

        Raises:
            IndexError: the heap is empty.
        """
        _, _, i = heapq.heappop(self._ensure())
        return self.names[i]

    def unordered(self) -> list[int]:
        """``UnorderedList``: the indices (into ``names`` / ``raw``) of the remaining nodes, in heap order."""
        return [i for _, _, i in self._ensure()]

    def remaining_names(self) -> list[str]:
        """Names of the remaining nodes in pop order (for tests and logs; does not consume the heap)."""
        return [self.names[i] for _, _, i in sorted(self._ensure())]


@dataclass(slots=True)
class _BatchState:
    signature: PodSignature
    sorted_nodes: SortedScoredNodes
    creation_time: float


@dataclass(slots=True)
class _SchedulingCycle:
    cycle_count: int = 0
    chosen_node: str = ""
    succeeded: bool = False


@dataclass
class OpportunisticBatch:
    """``OpportunisticBatch`` of one profile.

    ``clock`` (seconds, monotonic by default) dates stored rankings for :data:`MAX_BATCH_AGE`; inject
    a fake one in tests and a logical one for deterministic offline runs. ``recorder`` receives the
    batch metrics. ``batched_pods`` counts Pods placed on their hint.
    """

    handle: BatchHandle
    clock: Callable[[], float] = time.monotonic
    recorder: BatchRecorder | None = None
    generic_workload_enabled: bool = False
    state: _BatchState | None = None
    last_cycle: _SchedulingCycle = field(default_factory=_SchedulingCycle)
    batched_pods: int = 0

    # -- GetNodeHint ------------------------------------------------------------------------------
    def get_node_hint(self, pod: PodInfo, signature: PodSignature | None, state: CycleState, cycle_count: int,
                      snapshot: SnapshotLister, rng: random.Random | None = None) -> str:
        """``GetNodeHint``: the node the stored ranking proposes for ``pod``, or "" (no usable state).

        Called after PreFilter succeeded, with the cycle's ``state``; ``snapshot`` is the cycle's
        snapshot (upstream's ``SnapshotSharedLister``); ``rng`` draws the Randomizer of a re-scored
        node. A hint is popped from the ranking: the Pod must then be evaluated on it (Filter).
        Never raises for plugin errors: they flush the state (``filter_error``, ``prescore_error``...).
        """
        t0 = time.perf_counter()
        hint = ""
        try:
            if self._batch_state_compatible(pod, signature, cycle_count) and self._refresh_hint_candidates(
                    pod, cycle_count, state, snapshot, rng):
                assert self.state is not None
                hint = self.state.sorted_nodes.pop()
                log.debug("OpportunisticBatch provided node hint profile=%s pod=%s cycleCount=%d hint=%s "
                          "remainingNodes=%d", self.handle.profile_name, pod.key, cycle_count, hint,
                          len(self.state.sorted_nodes))
            return hint
        finally:
            rec = self.recorder
            if not hint and rec is not None:
                rec.attempt(self.handle.profile_name, ATTEMPT_NO_HINT)
            if rec is not None:
                rec.hint_duration("hint" if hint else "no_hint", self.handle.profile_name,
                                  time.perf_counter() - t0)

    # -- StoreScheduleResults ----------------------------------------------------------------------
    def store_schedule_results(self, signature: PodSignature | None, hinted_node: str, chosen_node: str,
                               other_nodes: SortedScoredNodes | None, cycle_count: int) -> None:
        """``StoreScheduleResults``: after a cycle chose ``chosen_node``. When that was the hint the
        current ranking is kept (minus the hint); otherwise ``other_nodes`` (the feasible nodes but
        the chosen one, ranked) becomes the ranking if the Pod has a signature and the list is not
        empty, else the state is dropped."""
        t0 = time.perf_counter()
        self.last_cycle = _SchedulingCycle(cycle_count, chosen_node, True)
        try:
            if hinted_node == chosen_node:
                if self.recorder is not None:
                    self.recorder.attempt(self.handle.profile_name, ATTEMPT_HINT_USED)
                self.batched_pods += 1
                return
            if hinted_node:
                if self.recorder is not None:
                    self.recorder.attempt(self.handle.profile_name, ATTEMPT_HINT_NOT_USED)
                log.debug("OpportunisticBatch hint not used profile=%s cycleCount=%d hint=%s chosen=%s",
                          self.handle.profile_name, cycle_count, hinted_node, chosen_node)
            if signature is not None and other_nodes is not None and len(other_nodes) > 0:
                self.state = _BatchState(signature, other_nodes, self.clock())
                return
            reason = FLUSH_POD_NOT_BATCHABLE
            if other_nodes is None or len(other_nodes) == 0:
                reason = FLUSH_EMPTY_LIST
            self._flush(cycle_count, reason)
            self.state = None
        finally:
            if self.recorder is not None:
                self.recorder.store_duration(self.handle.profile_name, time.perf_counter() - t0)

    # -- helpers ----------------------------------------------------------------------------------
    def _flush(self, cycle_count: int, reason: str) -> None:
        """``logUnusableState``: count the reason (the state itself is left alone, as upstream)."""
        if self.recorder is not None:
            self.recorder.flushed(self.handle.profile_name, reason)
        log.debug("OpportunisticBatch found unusable state profile=%s cycleCount=%d reason=%s",
                  self.handle.profile_name, cycle_count, reason)

    def state_empty(self) -> bool:
        """``stateEmpty``."""
        return self.state is None or len(self.state.sorted_nodes) == 0

    def _batch_state_compatible(self, pod: PodInfo, signature: PodSignature | None, cycle_count: int) -> bool:
        """``batchStateCompatible``: the stored ranking may serve this Pod."""
        if self.state_empty():
            return False
        assert self.state is not None
        last = self.last_cycle
        if cycle_count != last.cycle_count + 1 and (
                not self.generic_workload_enabled or cycle_count != last.cycle_count):
            self._flush(cycle_count, FLUSH_POD_SKIPPED)
            return False
        if not last.succeeded:
            self._flush(cycle_count, FLUSH_POD_FAILED)
            return False
        status = pod.pod.get("status")
        if isinstance(status, dict) and status.get("nominatedNodeName"):
            self._flush(cycle_count, FLUSH_POD_NOMINATED)
            return False
        if signature is None or signature != self.state.signature:
            self._flush(cycle_count, FLUSH_POD_INCOMPATIBLE)
            return False
        if self.clock() > self.state.creation_time + MAX_BATCH_AGE:
            self._flush(cycle_count, FLUSH_EXPIRED)
            return False
        return True

    def _refresh_hint_candidates(self, pod: PodInfo, cycle_count: int, state: CycleState, snapshot: SnapshotLister,
                                 rng: random.Random | None) -> bool:
        """``refreshHintCandidates``: the last chosen node, if it still passes Filter, is re-scored
        and competes again; if Filter rejects it, it is simply left out."""

        last = snapshot.node_info_map.get(self.last_cycle.chosen_node)
        if last is None:
            self._flush(cycle_count, FLUSH_NODE_MISSING)
            return False
        try:
            status = self.handle.run_filter(state, pod, last)
        except SchedulingError:
            self._flush(cycle_count, FLUSH_FILTER_ERROR)
            return False
        if status.is_success():
            return self._rescore_hinted_node(pod, state, cycle_count, last, snapshot, rng)
        if not status.is_rejected():
            self._flush(cycle_count, FLUSH_FILTER_ERROR)
            return False
        return True

    def _rescore_hinted_node(self, pod: PodInfo, state: CycleState, cycle_count: int, last: NodeInfo,
                             snapshot: SnapshotLister, rng: random.Random | None) -> bool:
        """``rescoreHintedNode``: PreScore over the cached candidates plus ``last`` (on a clone of the
        cycle state), Score ``last`` alone, NormalizeScore over all of them, rebuild the heap."""

        t0 = time.perf_counter()
        try:
            assert self.state is not None
            sn = self.state.sorted_nodes
            idx = sn.unordered()
            node_map = snapshot.node_info_map
            infos: list[NodeInfo] = []
            for i in idx:
                ni = node_map.get(sn.names[i])
                if ni is None:
                    self._flush(cycle_count, FLUSH_NODE_MISSING)
                    return False
                infos.append(ni)
            infos.append(last)
            rescore_state = state.clone()
            try:
                self.handle.run_pre_score(rescore_state, pod, infos)
            except SchedulingError:
                self._flush(cycle_count, FLUSH_PRESCORE_ERROR)
                return False
            try:
                fresh = self.handle.run_raw_score(rescore_state, pod, last)
            except SchedulingError:
                self._flush(cycle_count, FLUSH_RESCORE_ERROR)
                return False
            pick = operator.itemgetter(*idx) if len(idx) > 1 else (lambda c: (c[idx[0]],))
            names = list(pick(sn.names))
            names.append(last.name)
            raw: dict[str, list[int]] = {}
            for plugin, col in sn.raw.items():
                vals = list(pick(col))
                vals.append(fresh.get(plugin, 0))
                raw[plugin] = vals
            for plugin, sc in fresh.items():
                if plugin not in raw:
                    raw[plugin] = [0] * len(idx) + [sc]
            try:
                totals = self.handle.normalize_scores(rescore_state, pod, names, raw)
            except SchedulingError:
                self._flush(cycle_count, FLUSH_NORMALIZE_ERROR)
                return False
            randomizers = list(pick(sn.randomizers)) if sn.randomizers is not None else [0] * len(idx)
            randomizers.append(rng.getrandbits(62) if rng is not None else 0)
            self.state.sorted_nodes = SortedScoredNodes(names, totals, raw, randomizers=randomizers)
            return True
        finally:
            if self.recorder is not None:
                self.recorder.rescore(self.handle.profile_name, time.perf_counter() - t0)


def canonical_signature(scheduler_name: str, fragments: Sequence[SignFragment]) -> PodSignature:
    """``SignPod``'s marshalling: ``{"v1.Pod.Spec.SchedulerName": name, <fragment key>: value...}``
    as JSON with sorted keys (a later fragment with the same key overwrites an earlier one, as the
    upstream map does). Values that are not JSON types are rendered with ``str``."""
    import json

    sig: dict[str, Any] = {"v1.Pod.Spec.SchedulerName": scheduler_name}
    for k, v in fragments:
        sig[k] = v
    return json.dumps(sig, sort_keys=True, separators=(",", ":"), default=str)
