"""Prometheus metrics of the live scheduler, named, labelled and bucketed like kube-scheduler's.

Upstream: ``pkg/scheduler/metrics/metrics.go`` (names under the ``scheduler`` subsystem, help texts
word for word, ``ExponentialBuckets(start, factor, count)`` boundaries, label names) and
``pkg/scheduler/metrics/metric_recorder.go`` (the framework's per-extension-point / per-plugin
observations). The GPU gauges (``py_scheduler_gpu_*``) are py-scheduler's own.

Everything registers on the dedicated :data:`REGISTRY` (not prometheus-client's global one) so tests
can read values with ``REGISTRY.get_sample_value(...)`` and ``/metrics`` shows only these metrics plus
the process / platform / GC collectors.

Note: prometheus-client appends ``_total`` to Counter names itself, so the Counters below are
declared without it and exposed with it (``scheduler_schedule_attempts_total``).
"""

from __future__ import annotations

import logging
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.gc_collector import GCCollector

from py_scheduler.framework.runtime import Observer

log = logging.getLogger("py_scheduler.metrics")

REGISTRY = CollectorRegistry(auto_describe=True)
"""The registry ``/metrics`` serves: every scheduler metric plus process, platform and GC metrics."""

ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)
GCCollector(registry=REGISTRY)


def exponential_buckets(start: float, factor: float, count: int) -> tuple[float, ...]:
    """``prometheus.ExponentialBuckets``: ``count`` upper bounds ``start * factor**i``.

    Raises:
        ValueError: ``count < 1``, ``start <= 0`` or ``factor <= 1`` (upstream panics).
    """
    if count < 1 or start <= 0 or factor <= 1:
        raise ValueError(f"exponential_buckets: bad arguments start={start} factor={factor} count={count}")
    return tuple(start * factor**i for i in range(count))


ATTEMPT_BUCKETS = exponential_buckets(0.001, 2, 15)
"""Upper bounds in seconds, 1 ms doubling to ~16.4 s: upstream's buckets of the scheduling attempt,
algorithm, Permit wait and pod group attempt/algorithm latencies (``ExponentialBuckets(0.001, 2, 15)``)."""

BATCH_BUCKETS = exponential_buckets(0.00001, 2, 12)
"""Upper bounds in seconds, 10 us doubling to ~20 ms: upstream's buckets of the OpportunisticBatching
latencies (``ExponentialBuckets(0.00001, 2, 12)``)."""

SCHEDULE_ATTEMPTS = Counter(
    "scheduler_schedule_attempts",
    "Number of attempts to schedule pods, by the result. 'unschedulable' means a pod could not be scheduled, "
    "while 'error' means an internal scheduler problem.",
    ["result", "profile"], registry=REGISTRY)
"""``scheduler_schedule_attempts_total{result,profile}``; result is ``scheduled``, ``unschedulable`` or ``error``."""

SCHEDULING_ATTEMPT_DURATION = Histogram(
    "scheduler_scheduling_attempt_duration_seconds",
    "Scheduling attempt latency in seconds (scheduling algorithm + binding)",
    ["result", "profile"], buckets=ATTEMPT_BUCKETS, registry=REGISTRY)
"""Seconds of one attempt (algorithm + binding), by result and profile."""

SCHEDULING_ALGORITHM_DURATION = Histogram(
    "scheduler_scheduling_algorithm_duration_seconds",
    "Scheduling algorithm latency in seconds",
    buckets=ATTEMPT_BUCKETS, registry=REGISTRY)
"""Seconds spent in ``Algorithm.schedule`` (Filter + Score), no labels."""

PENDING_PODS = Gauge(
    "scheduler_pending_pods",
    "Number of pending pods, by the queue type. 'active' means number of pods in activeQ; 'backoff' means number "
    "of pods in backoffQ; 'unschedulable' means number of pods in unschedulableEntities that the scheduler "
    "attempted to schedule and failed; 'gated' is the number of unschedulable pods that the scheduler never "
    "attempted to schedule because they are gated; 'incomplete' means number of pods in incompletePodGroupPods; "
    "'pending' means number of pods in pendingPodGroupPods.",
    ["queue"], registry=REGISTRY)
"""Pods per queue: ``active``, ``backoff``, ``unschedulable``, ``gated``."""

POD_SCHEDULING_SLI_DURATION = Histogram(
    "scheduler_pod_scheduling_sli_duration_seconds",
    "E2e latency for a pod being scheduled, from the time the pod enters the scheduling queue and might involve "
    "multiple scheduling attempts.",
    ["attempts"], buckets=exponential_buckets(0.01, 2, 20), registry=REGISTRY)
"""Seconds from first enqueue to successful scheduling; ``attempts`` is the attempt count as a string."""

POD_SCHEDULING_ATTEMPTS = Histogram(
    "scheduler_pod_scheduling_attempts",
    "Number of attempts to successfully schedule a pod.",
    buckets=exponential_buckets(1, 2, 5), registry=REGISTRY)
"""Attempts a Pod needed until it was scheduled."""

FRAMEWORK_EXTENSION_POINT_DURATION = Histogram(
    "scheduler_framework_extension_point_duration_seconds",
    "Latency for running all plugins of a specific extension point.",
    ["extension_point", "status", "profile"], buckets=exponential_buckets(0.0001, 2, 12), registry=REGISTRY)
"""Seconds for all plugins of one extension point (``PreFilter``, ``Filter``, ``Score``...)."""

PLUGIN_EXECUTION_DURATION = Histogram(
    "scheduler_plugin_execution_duration_seconds",
    "Duration for running a plugin at a specific extension point.",
    ["plugin", "extension_point", "status"], buckets=exponential_buckets(0.00001, 1.5, 20), registry=REGISTRY)
"""Seconds for one plugin at one extension point."""

PERMIT_WAIT_DURATION = Histogram(
    "scheduler_permit_wait_duration_seconds",
    "Duration of waiting on permit.",
    ["result"], buckets=ATTEMPT_BUCKETS, registry=REGISTRY)
"""Seconds a Pod waited in WaitOnPermit, by outcome (``Success``, ``Unschedulable``, ``Error``)."""

GOROUTINES = Gauge(
    "scheduler_goroutines",
    "Number of running goroutines split by the work they do such as binding.",
    ["operation"], registry=REGISTRY)
"""Running background tasks by operation; ``binding``: binding cycles in flight (upstream counts
goroutines, here asyncio tasks)."""

QUEUE_INCOMING_PODS = Counter(
    "scheduler_queue_incoming_pods",
    "Number of pods added to scheduling queues by event and queue type.",
    ["queue", "event"], registry=REGISTRY)
"""``scheduler_queue_incoming_pods_total{queue,event}``; queue ``active|backoff|unschedulable|gated``."""

CACHE_SIZE = Gauge(
    "scheduler_cache_size",
    "Number of nodes, pods, and assumed (bound) pods in the scheduler cache.",
    ["type"], registry=REGISTRY)
"""Objects in the cache; type ``nodes``, ``pods`` or ``assumed_pods``."""

UNSCHEDULABLE_PODS = Gauge(
    "scheduler_unschedulable_pods",
    "The number of unschedulable pods broken down by plugin name. A pod will increment the gauge for all plugins "
    "that caused it to not schedule and so this metric have meaning only when broken down by plugin.",
    ["plugin", "profile"], registry=REGISTRY)
"""Unschedulable Pods per rejecting plugin and profile."""

PREEMPTION_ATTEMPTS = Counter(
    "scheduler_preemption_attempts",
    "Total preemption attempts in the cluster till now",
    registry=REGISTRY)
"""``scheduler_preemption_attempts_total``."""

PREEMPTION_VICTIMS = Histogram(
    "scheduler_preemption_victims",
    "Number of selected preemption victims for preemption initiated by a single pod",
    buckets=exponential_buckets(1, 2, 7), registry=REGISTRY)
"""Victims chosen by one preemption."""

GPU_ALLOCATED = Gauge(
    "py_scheduler_gpu_allocated",
    "Number of GPUs allocated to pods by py-scheduler, per node and GPU model.",
    ["node", "model"], registry=REGISTRY)
"""GPUs (devices, not memory) in use per node and model (``nvidia.com/gpu.product``)."""

GPU_FREE = Gauge(
    "py_scheduler_gpu_free",
    "Number of GPUs not allocated to any pod, per node and GPU model.",
    ["node", "model"], registry=REGISTRY)
"""GPUs free per node and model."""


class Children:
    """``metric.labels(*values)`` memoized per label-value tuple: the per-Pod metric updates skip
    prometheus-client's label validation, locking and child lookup (~2.5% of the live process's CPU).
    The children are prometheus-client's own, so the exposed values are unchanged. Not for metrics
    whose children are ever ``remove``d or ``clear``ed (the GPU gauges): a memoized child would
    outlive its removal."""

    __slots__ = ("_children", "metric")

    def __init__(self, metric: Any) -> None:
        self.metric = metric
        self._children: dict[tuple[str, ...], Any] = {}

    def __call__(self, *values: str) -> Any:
        """The child for ``values`` (label values in the metric's label order)."""
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = self.metric.labels(*values)
        return child


def framework_observer(profile: str) -> Observer:
    """The runtime's :data:`~py_scheduler.framework.runtime.Observer` hook for one profile.

    Called as ``observer(extension_point, plugin, status, seconds)``: ``plugin == ""`` is the whole
    extension point (-> :data:`FRAMEWORK_EXTENSION_POINT_DURATION` with ``profile``), otherwise one
    plugin (-> :data:`PLUGIN_EXECUTION_DURATION`), like upstream's ``metricsRecorder``. Never raises:
    a metrics failure is logged, not allowed to break a scheduling cycle.
    """

    plugin_duration = Children(PLUGIN_EXECUTION_DURATION)
    point_duration = Children(FRAMEWORK_EXTENSION_POINT_DURATION)

    def observe(extension_point: str, plugin: str, status: str, seconds: float) -> None:
        try:
            if plugin:
                plugin_duration(plugin, extension_point, status).observe(seconds)
            else:
                point_duration(extension_point, status, profile).observe(seconds)
        except Exception:  # pragma: no cover - defensive; prometheus-client does not raise on valid labels
            log.exception("metrics observer failed for %s/%s", extension_point, plugin)

    return observe


# --- GPU gauges ---------------------------------------------------------------------------------------

UNKNOWN_MODEL = "unknown"
"""``model`` label of a GPU node whose product is not known (no ``nvidia.com/gpu.product`` label)."""


def gpu_inventory(snapshot: Any, keys: Any = None) -> list[tuple[str, str, int, int]]:
    """``(node, model, allocated, free)`` for every node of ``snapshot`` that offers GPUs.

    Reads the GPU plugins' own per-index accounting (``py_scheduler.plugins.gpu.accounting.derive_state``:
    annotated ``gpu-indices`` first, Pods bound by others allocated virtually), so the gauges agree with
    what GPUFilter sees. ``keys`` is a ``py_scheduler.plugins.gpu.model.GPUKeys`` (default prefix
    ``gpu-scheduler/``, resource ``nvidia.com/gpu``). Units: GPU devices. Nodes whose GPU labels are
    malformed are skipped, and so are nodes that declare no GPU at all (neither the resource in
    ``status.allocatable`` nor the ``nvidia.com/gpu.count`` label) without deriving their GPU state,
    so a large CPU-only cluster costs one dict lookup per node.
    """
    from py_scheduler.plugins.gpu.accounting import derive_state
    from py_scheduler.plugins.gpu.model import GFD_COUNT, GPUKeys

    k = keys if keys is not None else GPUKeys()
    rows: list[tuple[str, str, int, int]] = []
    for ni in snapshot.node_info_list:
        if k.resource_name not in ni.allocatable.scalar and GFD_COUNT not in ni.labels:
            continue  # total 0: derive_state would report no GPU
        st = derive_state(ni, k)
        if st.spec.error is not None or st.spec.total <= 0:
            continue
        free = len(st.free)
        rows.append((ni.name, st.spec.product or UNKNOWN_MODEL, st.spec.total - free, free))
    return rows


def update_gpu_gauges(snapshot: Any, keys: Any = None) -> None:
    """Set :data:`GPU_ALLOCATED` / :data:`GPU_FREE` from :func:`gpu_inventory` for every GPU node of
    ``snapshot`` (a :class:`~py_scheduler.cache.snapshot.Snapshot`); series of nodes that left (or changed
    model) are removed. Call it after each scheduling cycle or on a timer; cost is one memoized lookup
    per node.

    Never raises: a failure is logged and the gauges keep their previous values.
    """
    try:
        rows = gpu_inventory(snapshot, keys)
    except Exception:
        log.exception("update_gpu_gauges: cannot read GPU state")
        return
    seen: set[tuple[str, str]] = set()
    for node, model, allocated, free in rows:
        GPU_ALLOCATED.labels(node, model).set(allocated)
        GPU_FREE.labels(node, model).set(free)
        seen.add((node, model))
    for gauge in (GPU_ALLOCATED, GPU_FREE):
        for labels in _label_sets(gauge):
            if labels not in seen:
                gauge.remove(*labels)


def _label_sets(gauge: Gauge) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for metric in gauge.collect():
        for s in metric.samples:
            out.append((s.labels["node"], s.labels["model"]))
    return out


# -- OpportunisticBatching (metrics.go: BatchAttemptStats, BatchCacheFlushed, BatchRescoreAttempts,
# BatchRescoreDuration, GetNodeHintDuration, StoreScheduleResultsDuration) --------------------------
BATCH_ATTEMPTS = Counter(
    "scheduler_batch_attempts", "Counts of results when we attempt to use batching.",
    ["profile", "result"], registry=REGISTRY)
"""``scheduler_batch_attempts_total{profile,result}``: ``no_hint``, ``hint_used``, ``hint_not_used``."""

BATCH_CACHE_FLUSHED = Counter(
    "scheduler_batch_cache_flushed", "Counts of cache flushes by reason.", ["profile", "reason"], registry=REGISTRY)
"""``scheduler_batch_cache_flushed_total{profile,reason}`` (reasons: ``py_scheduler.framework.batch.FLUSH_*``)."""

BATCH_RESCORE_ATTEMPTS = Counter(
    "scheduler_batch_rescore_attempts", "Counts of rescore attempts during opportunistic batching.",
    ["profile"], registry=REGISTRY)

BATCH_RESCORE_DURATION = Histogram(
    "scheduler_batch_rescore_duration_seconds", "Latency for rescoring a node during opportunistic batching.",
    ["profile"], buckets=BATCH_BUCKETS, registry=REGISTRY)

GET_NODE_HINT_DURATION = Histogram(
    "scheduler_get_node_hint_duration_seconds", "Latency for getting a node hint.",
    ["hinted", "profile"], buckets=BATCH_BUCKETS, registry=REGISTRY)

STORE_SCHEDULE_RESULTS_DURATION = Histogram(
    "scheduler_store_schedule_results_duration_seconds", "Latency for storing scheduling results.",
    ["profile"], buckets=BATCH_BUCKETS, registry=REGISTRY)


class BatchMetricsRecorder:
    """The :class:`py_scheduler.framework.batch.BatchRecorder` of the live process (set on each
    profile's ``fw.batch.recorder`` by ``py_scheduler.app.main``)."""

    def __init__(self) -> None:
        self._attempts = Children(BATCH_ATTEMPTS)
        self._flushed = Children(BATCH_CACHE_FLUSHED)
        self._rescores = Children(BATCH_RESCORE_ATTEMPTS)
        self._rescore_duration = Children(BATCH_RESCORE_DURATION)
        self._hint_duration = Children(GET_NODE_HINT_DURATION)
        self._store_duration = Children(STORE_SCHEDULE_RESULTS_DURATION)

    def attempt(self, profile: str, result: str) -> None:
        self._attempts(profile, result).inc()

    def flushed(self, profile: str, reason: str) -> None:
        self._flushed(profile, reason).inc()

    def rescore(self, profile: str, seconds: float) -> None:
        self._rescores(profile).inc()
        self._rescore_duration(profile).observe(seconds)

    def hint_duration(self, hinted: str, profile: str, seconds: float) -> None:
        self._hint_duration(hinted, profile).observe(seconds)

    def store_duration(self, profile: str, seconds: float) -> None:
        self._store_duration(profile).observe(seconds)


# -- the API client (client-go's rest_client_* metrics, kube-scheduler exposes them too) ----------------
# Upstream: staging/src/k8s.io/component-base/metrics/prometheus/restclient/metrics.go (names, labels,
# buckets). Recorded by py_scheduler.app.kube.Kube.request for every client (scheduler, leader election,
# events, auth delegation): a 429 from API Priority and Fairness shows as code="429" and as a retry.
_REST_BUCKETS = (0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)
REST_CLIENT_REQUESTS = Counter(
    "rest_client_requests", "Number of HTTP requests, partitioned by status code, method, and host.",
    ["code", "method", "host"], registry=REGISTRY)
REST_CLIENT_REQUEST_RETRIES = Counter(
    "rest_client_request_retries", "Number of request retries, partitioned by status code, verb, and host.",
    ["code", "verb", "host"], registry=REGISTRY)
REST_CLIENT_RATE_LIMITER_DURATION = Histogram(
    "rest_client_rate_limiter_duration_seconds", "Client side rate limiter latency in seconds. Broken down by "
    "verb, and host.", ["verb", "host"], buckets=_REST_BUCKETS, registry=REGISTRY)


class RestClientMetrics:
    """What :class:`py_scheduler.app.kube.Kube` records per request (memoized children)."""

    def __init__(self) -> None:
        self._requests = Children(REST_CLIENT_REQUESTS)
        self._retries = Children(REST_CLIENT_REQUEST_RETRIES)
        self._limiter = Children(REST_CLIENT_RATE_LIMITER_DURATION)

    def request(self, code: str, method: str, host: str) -> None:
        """One attempt answered ``code`` (``<error>`` when no HTTP answer came)."""
        self._requests(code, method, host).inc()

    def retry(self, code: str, verb: str, host: str) -> None:
        self._retries(code, verb, host).inc()

    def rate_limited(self, verb: str, host: str, seconds: float) -> None:
        self._limiter(verb, host).observe(seconds)


# -- pod group scheduling (GenericWorkload; upstream metrics.go podGroupScheduleAttempts,
# podGroupSchedulingLatency, PodGroupSchedulingAlgorithmLatency; profile_metrics.go PodGroupScheduled...) --
PODGROUP_SCHEDULE_ATTEMPTS = Counter(
    "scheduler_podgroup_schedule_attempts",
    "Number of attempts to schedule pod group, by the result. 'unschedulable' means a pod group could not be "
    "scheduled, while 'error' means an internal scheduler problem.",
    ["result", "profile"], registry=REGISTRY)
"""``scheduler_podgroup_schedule_attempts_total{result,profile}``: one per pod group cycle; result
``scheduled``, ``unschedulable`` or ``error``."""

PODGROUP_SCHEDULING_ATTEMPT_DURATION = Histogram(
    "scheduler_podgroup_scheduling_attempt_duration_seconds",
    "Pod group scheduling attempt latency in seconds",
    ["result", "profile"], buckets=ATTEMPT_BUCKETS, registry=REGISTRY)
"""Seconds of one pod group cycle (algorithm + submitting its result), by result and profile."""

PODGROUP_SCHEDULING_ALGORITHM_DURATION = Histogram(
    "scheduler_podgroup_scheduling_algorithm_duration_seconds",
    "Pod group scheduling algorithm latency in seconds",
    buckets=ATTEMPT_BUCKETS, registry=REGISTRY)
"""Seconds spent in the pod group algorithm (every member's Filter + Score, assume, revert)."""
