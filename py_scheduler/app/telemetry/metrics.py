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

import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.gc_collector import GCCollector

from py_scheduler.framework.interfaces import GPUInventoryReporter
from py_scheduler.framework.runtime import Observer

log = logging.getLogger("py_scheduler.metrics")

disable_created_metrics()  # type: ignore[no-untyped-call]  # public API, unannotated in 0.26
"""No ``<name>_created`` series beside each counter and histogram: kube-scheduler (client_golang's text
format) serves none, and each would be one more series per child in every scrape."""

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

PREEMPTION_GOROUTINES_EXECUTION = Counter(
    "scheduler_preemption_goroutines_execution",
    "Number of preemption goroutines executed.",
    ["result"], registry=REGISTRY)
"""``scheduler_preemption_goroutines_execution_total{result}``: asynchronous preemptions finished, by result
``success`` / ``error`` (``SchedulerAsyncPreemption``, on by default; executor.go ``prepareCandidateAsync``).
Its twin ``preemption_goroutines_duration_seconds`` is deprecated in 1.37.0 and hidden, so not served."""

POD_SCHEDULED_AFTER_FLUSH = Counter(
    "scheduler_pod_scheduled_after_flush",
    "Number of pods that were successfully scheduled after being flushed from unschedulableEntities due to "
    "timeout. This metric helps detect potential queueing hint misconfigurations or event handling issues.",
    registry=REGISTRY)
"""``scheduler_pod_scheduled_after_flush_total``: Pods bound after the 5-minute flush moved them
(schedule_one.go, ``WasFlushedFromUnschedulable``)."""

EVENT_HANDLING_DURATION = Histogram(
    "scheduler_event_handling_duration_seconds",
    "Event handling latency in seconds.",
    ["event"], buckets=exponential_buckets(0.0001, 2, 12), registry=REGISTRY)
"""Seconds one informer event took to reach the cache and the queue, by cluster event label
(``NodeAdd``, ``AssignedPodUpdate``, ``UpdateNodeTaint``...; eventhandlers.go)."""

QUEUED_ENTITIES = Gauge(
    "scheduler_queued_entities",
    "Number of queued scheduling entities ('pod' or 'podgroup'; 'pod' stands for individual pods that are not "
    "members of any podgroup) by the queue type. 'active' means number of entities in activeQ; 'backoff' means "
    "number of entities in backoffQ; 'unschedulable' means number of entities in unschedulableEntities that the "
    "scheduler attempted to schedule and failed; 'gated' is the number of unschedulable entities that the "
    "scheduler never attempted to schedule because they are gated.",
    ["queue", "type"], registry=REGISTRY)
"""Entities per queue and type. py-scheduler queues every Pod on its own (a gang's members too, see
docs/architecture.md), so it reports ``type="pod"``: exact while GenericWorkload is off."""

QUEUE_INCOMING_ENTITIES = Counter(
    "scheduler_queue_incoming_entities",
    "Number of scheduling entities added to scheduling queues by event, queue type, and entity type. Entity "
    "types are either 'pod' (for individual pods that are not members of any podgroup) or 'podgroup'.",
    ["queue", "event", "type"], registry=REGISTRY)
"""``scheduler_queue_incoming_entities_total{queue,event,type}``: as ``queue_incoming_pods`` with ``type="pod"``."""


class PluginEvaluations:
    """``scheduler_plugin_evaluation_total{plugin,extension_point,profile}`` (BETA upstream; framework.go
    ``setInstrumentedPlugins``): how often each plugin ran at PreFilter, Filter (once per node),
    PreScore and Score (once per node). Counted by each profile's Framework in plain ints
    (:attr:`py_scheduler.framework.runtime.Framework.evaluations`) and read at scrape time, so the
    cycle pays no prometheus-client call. No sample until :meth:`track` is called."""

    def __init__(self) -> None:
        self._frameworks: list[Any] = []

    def track(self, frameworks: Iterable[Any]) -> None:
        """Report these profiles' counts (Frameworks; replaces what was tracked before)."""
        self._frameworks = list(frameworks)

    def collect(self) -> Iterator[CounterMetricFamily]:
        c = CounterMetricFamily(
            "scheduler_plugin_evaluation",
            "Number of attempts to schedule pods by each plugin and the extension point (available only in "
            "PreFilter, Filter, PreScore, and Score).",
            labels=["plugin", "extension_point", "profile"])
        for fw in self._frameworks:
            for point, counts in fw.evaluations.items():
                for plugin, n in counts.items():
                    if n:
                        c.add_metric([plugin, point, fw.profile_name], n)
        yield c


class InFlightEvents:
    """``scheduler_inflight_events{event}``: the cluster events the queue holds for the Pods in flight
    (whose attempt may need them), by label, and the in-flight Pods as ``PodPopped`` (upstream's
    ``InFlightEvents``, recorded asynchronously there). Read at scrape time from :meth:`track`'s
    ``counts``; a label seen once stays, at 0, as upstream's gauge child does."""

    def __init__(self) -> None:
        self._counts: Callable[[], dict[str, int]] | None = None
        self._seen: set[str] = set()

    def track(self, counts: Callable[[], dict[str, int]]) -> None:
        """Report ``counts()`` (the queue's ``in_flight_event_counts``)."""
        self._counts = counts

    def collect(self) -> Iterator[GaugeMetricFamily]:
        g = GaugeMetricFamily("scheduler_inflight_events",
                              "Number of events currently tracked in the scheduling queue.", labels=["event"])
        now = self._counts() if self._counts is not None else {}
        self._seen.update(now)
        for label in sorted(self._seen):
            g.add_metric([label], now.get(label, 0))
        yield g


# -- workload preemption (registered only with GenericWorkload on, as upstream's Register does) -----------
WORKLOAD_PREEMPTION_ATTEMPTS = Counter(
    "scheduler_workload_preemption_attempts",
    "Total preemption attempts initiated by workload (including pod groups) in the cluster till now.",
    ["result"], registry=None)
"""``scheduler_workload_preemption_attempts_total{result}``: one per PodGroupPostFilter run, by its
status code (default_preemption.go ``PodGroupPostFilter``)."""
WORKLOAD_PREEMPTION_VICTIMS = Histogram(
    "scheduler_workload_preemption_victims",
    "Number of pod preemption victims caused by workload preemption.",
    buckets=exponential_buckets(1, 2, 11), registry=None)
"""Victims of one pod group's preemption (executor.go ``observeVictims``)."""
PREEMPTION_WORKLOAD_DISRUPTIONS = Histogram(
    "scheduler_preemption_workload_disruptions",
    "Number of workload preemption units being preempted. A single preemption unit can be all pods in a pod "
    "group (in case of DisruptionMode=all), or a single pod (in case of DisruptionMode=single).",
    ["preemptor"], buckets=exponential_buckets(1, 2, 11), registry=None)
"""Pod groups (disruptionMode ``all``) among one preemption's victims, when any; preemptor ``pod``/``podgroup``."""
PREEMPTION_EVALUATION_DURATION = Histogram(
    "scheduler_preemption_evaluation_duration_seconds",
    "Duration in seconds for identifying the target preemption victims.",
    ["preemptor", "result"], buckets=exponential_buckets(0.001, 2, 16), registry=None)
"""Seconds of one preemption dry run (PostFilter / PodGroupPostFilter), by preemptor and status code."""
PREEMPTION_EXECUTION_DURATION = Histogram(
    "scheduler_preemption_execution_duration_seconds",
    "Duration in seconds for preempting the target preemption victims. With async preemption enabled, "
    "preemption execution does not block the scheduling of other pods.",
    ["preemptor", "result"], buckets=exponential_buckets(0.001, 2, 16), registry=None)
"""Seconds the evictions of one preemption took, by preemptor and ``success`` / ``error``."""
PREEMPTION_PDB_VIOLATIONS = Counter(
    "scheduler_preemption_pdb_violations",
    "Total number of pod disruption budget violations caused by preemption.",
    ["preemptor"], registry=None)
"""``scheduler_preemption_pdb_violations_total{preemptor}``: victims whose eviction violates a PDB."""
WORKLOAD_METRICS = (WORKLOAD_PREEMPTION_ATTEMPTS, WORKLOAD_PREEMPTION_VICTIMS, PREEMPTION_WORKLOAD_DISRUPTIONS,
                    PREEMPTION_EVALUATION_DURATION, PREEMPTION_EXECUTION_DURATION, PREEMPTION_PDB_VIOLATIONS)


def register_workload_metrics() -> None:
    """Register :data:`WORKLOAD_METRICS` on :data:`REGISTRY` (once; later calls do nothing): the
    process calls it when GenericWorkload is on (metrics.go ``Register``). Unregistered, they count
    but are not served."""
    for metric in WORKLOAD_METRICS:
        with contextlib.suppress(ValueError):  # already registered
            REGISTRY.register(metric)

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


def event_handling_observer() -> Callable[[str, float], None]:
    """The event handlers' ``observe(event label, seconds)`` on :data:`EVENT_HANDLING_DURATION`
    (children memoized: it runs on every informer event)."""
    children = Children(EVENT_HANDLING_DURATION)

    def observe(label: str, seconds: float) -> None:
        children(label).observe(seconds)

    return observe


def preemption_observer() -> Callable[[str, str, float], None]:
    """A profile's :attr:`~py_scheduler.framework.runtime.Framework.preemption_observer`: each preemption
    dry run on :data:`PREEMPTION_EVALUATION_DURATION` (preemption.go ``evaluate``,
    podgrouppreemption.go), a pod group's also on :data:`WORKLOAD_PREEMPTION_ATTEMPTS`
    (default_preemption.go ``PodGroupPostFilter``). Both are served only with GenericWorkload on."""
    evaluation = Children(PREEMPTION_EVALUATION_DURATION)
    attempts = Children(WORKLOAD_PREEMPTION_ATTEMPTS)

    def observe(preemptor: str, code: str, seconds: float) -> None:
        evaluation(preemptor, code).observe(seconds)
        if preemptor == "podgroup":
            attempts(code).inc()

    return observe


# --- GPU gauges ---------------------------------------------------------------------------------------

def update_gpu_gauges(snapshot: Any, reporters: Iterable[GPUInventoryReporter]) -> None:
    """Set :data:`GPU_ALLOCATED` / :data:`GPU_FREE` for every GPU node of ``snapshot`` (a
    :class:`~py_scheduler.cache.snapshot.Snapshot`) from the profiles' GPU plugins
    (``reporters``: the :class:`GPUInventoryReporter` protocol); series of nodes that left (or changed
    model) are removed. Call it after each scheduling cycle or on a timer; cost is one memoized lookup
    per node.

    Never raises: a failure is logged and the gauges keep their previous values.
    """
    try:
        rows = {(node, model): (allocated, free) for r in reporters
                for node, model, allocated, free in r.gpu_inventory(snapshot)}
    except Exception:
        log.exception("update_gpu_gauges: cannot read GPU state")
        return
    last = _GPU_SERIES
    for (node, model), values in rows.items():
        if last.get((node, model)) != values:
            GPU_ALLOCATED.labels(node, model).set(values[0])
            GPU_FREE.labels(node, model).set(values[1])
    for labels in last.keys() - rows.keys():
        for gauge in (GPU_ALLOCATED, GPU_FREE):
            with contextlib.suppress(KeyError):  # already gone (a registry cleared by a test)
                gauge.remove(*labels)
    last.clear()
    last.update(rows)


_GPU_SERIES: dict[tuple[str, str], tuple[int, int]] = {}
"""The (node, model) series :func:`update_gpu_gauges` set last and their (allocated, free) values, so
each tick sets only the series that changed (two ``labels`` lookups per GPU node and second were
2.4 % of the cycle thread in a drain at 500 GPU nodes) and removes the ones that left without collecting
every sample of both gauges."""


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
    profile's ``fw.batch.recorder`` by ``py_scheduler.app.process.main``)."""

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
# buckets). Recorded by py_scheduler.app.client.kube.Kube.request for every client (scheduler, leader election,
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
    """What :class:`py_scheduler.app.client.kube.Kube` records per request (memoized children)."""

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


# -- watches, leadership and DRA devices (for the alerts and the dashboard of deploy/monitoring/) --------
WATCH_RESTARTS = Counter(
    "py_scheduler_watch_restarts",
    "Watches the informers re-opened, by kind and reason: 'closed' the server ended it (timeout), 'short' it "
    "ended at once without an event, 'error' it failed, 'expired' its resourceVersion was gone (410, re-list).",
    ["kind", "reason"], registry=REGISTRY)
"""``py_scheduler_watch_restarts_total{kind,reason}`` (``app.client.reflector``); only ``closed`` is routine."""


class LeaderStatus:
    """``leader_election_master_status{name}``: client-go's leader election gauge (kube-scheduler exposes
    it), 1 while this replica holds the Lease ``name``, 0 while it stands by (upstream:
    staging/src/k8s.io/client-go/tools/leaderelection/metrics.go). Read at scrape time from
    :meth:`track`'s ``is_leader``; no sample until something is tracked."""

    def __init__(self) -> None:
        self._tracked: tuple[str, Callable[[], bool]] | None = None

    def track(self, name: str, is_leader: Callable[[], bool]) -> None:
        """Report ``is_leader()`` for the Lease ``name`` (replaces what was tracked before)."""
        self._tracked = (name, is_leader)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        g = GaugeMetricFamily(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates "
            "master. 'name' is the string used to identify the lease. Please make sure to group by name.",
            labels=["name"])
        if self._tracked is not None:
            name, is_leader = self._tracked
            g.add_metric([name], 1.0 if is_leader() else 0.0)
        yield g


def dra_device_counts(slices: Iterable[Any], claims: Iterable[Any]) -> dict[str, tuple[int, int]]:
    """``driver -> (devices published, devices allocated)`` from ResourceSlices and ResourceClaims (plain dicts).

    A pool counts only in its newest generation (``spec.pool.generation``, as the DRA allocator reads it:
    staging/src/k8s.io/dynamic-resource-allocation/structured/pools.go); allocated devices are the
    ``status.allocation.devices.results`` of the claims. Malformed objects are skipped, never raised on.
    """
    newest: dict[tuple[str, str], int] = {}
    usable: list[tuple[str, str, int, int]] = []
    for s in slices:
        spec = s.get("spec") if isinstance(s, dict) else None
        if not isinstance(spec, dict) or not isinstance(spec.get("pool"), dict):
            continue
        driver, pool = str(spec.get("driver", "")), str(spec["pool"].get("name", ""))
        gen = spec["pool"].get("generation", 0)
        devices = spec.get("devices") or []
        if not isinstance(gen, int) or not isinstance(devices, list):
            continue
        newest[(driver, pool)] = max(gen, newest.get((driver, pool), gen))
        usable.append((driver, pool, gen, len(devices)))
    out: dict[str, list[int]] = {}
    for driver, pool, gen, n in usable:
        if gen == newest[(driver, pool)]:
            out.setdefault(driver, [0, 0])[0] += n
    for c in claims:
        status = c.get("status") if isinstance(c, dict) else None
        alloc = status.get("allocation") if isinstance(status, dict) else None
        devices = alloc.get("devices") if isinstance(alloc, dict) else None
        results = devices.get("results") if isinstance(devices, dict) else None
        for r in results if isinstance(results, list) else ():
            if isinstance(r, dict) and r.get("driver"):
                out.setdefault(str(r["driver"]), [0, 0])[1] += 1
    return {d: (p, a) for d, (p, a) in out.items()}


class DRADevices:
    """``py_scheduler_dra_devices{driver}`` and ``py_scheduler_dra_devices_allocated{driver}``: DRA devices
    the ResourceSlices publish and the ResourceClaims hold, counted at scrape time from the informers' store
    (:func:`dra_device_counts`; O(slices + claims) per scrape). No sample until :meth:`track` is called."""

    def __init__(self) -> None:
        self._list_kind: Callable[[str], Iterable[Any]] | None = None

    def track(self, list_kind: Callable[[str], Iterable[Any]]) -> None:
        """Count from ``list_kind("ResourceSlice")`` / ``list_kind("ResourceClaim")`` (the informers' store)."""
        self._list_kind = list_kind

    def collect(self) -> Iterator[GaugeMetricFamily]:
        published = GaugeMetricFamily("py_scheduler_dra_devices",
                                      "DRA devices published in ResourceSlices (newest pool generation), per driver.",
                                      labels=["driver"])
        allocated = GaugeMetricFamily("py_scheduler_dra_devices_allocated",
                                      "DRA devices allocated to ResourceClaims, per driver.", labels=["driver"])
        if self._list_kind is not None:
            try:
                counts = dra_device_counts(self._list_kind("ResourceSlice"), self._list_kind("ResourceClaim"))
            except Exception:  # a scrape must never fail on the store's content
                log.exception("DRA device gauges: cannot read the store")
                counts = {}
            for driver, (p, a) in sorted(counts.items()):
                published.add_metric([driver], p)
                allocated.add_metric([driver], a)
        yield published
        yield allocated


LEADER_STATUS = LeaderStatus()
DRA_DEVICES = DRADevices()
PLUGIN_EVALUATIONS = PluginEvaluations()
IN_FLIGHT_EVENTS = InFlightEvents()
REGISTRY.register(LEADER_STATUS)
REGISTRY.register(DRA_DEVICES)
REGISTRY.register(PLUGIN_EVALUATIONS)
REGISTRY.register(IN_FLIGHT_EVENTS)
