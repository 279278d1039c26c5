"""``py-scheduler run``: wire config, API adapter, informers (one reflector per watched kind), cache,
queue, leader election, the scheduling loop and the health/metrics server into one asyncio process.

Upstream: ``cmd/kube-scheduler/app/server.go`` (``Run``: start the informers, wait for the caches
to sync, then run leader election and, while leading, the scheduler; flags override the config
file) and ``pkg/scheduler/scheduler.go`` (one queue and one cache for all profiles).

The process runs as a kopf operator with no resource handlers (:mod:`py_scheduler.app.process.lifecycle`):
kopf's login handler and start-up build the client and start :func:`_serve`; kopf handles the
signals. Shutdown (SIGTERM/SIGINT, kopf's clean-up): stop popping, let in-flight bindings finish
(5 s at most), release the Lease, stop the reflectors, exit 0. Exit codes: 0 after a clean shutdown,
1 for a bad configuration or kubeconfig, or when a long-lived task (the informers' reflectors
included) dies.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from py_scheduler.app.client.informers import Informers
from py_scheduler.app.client.kube import Kube, KubeAPIClient
from py_scheduler.app.client.leader import AlwaysLeader, LeaderElector, new_identity
from py_scheduler.app.client.lister import InformerLister
from py_scheduler.app.process import event_loop
from py_scheduler.app.process.lifecycle import run as run_operator
from py_scheduler.app.process.request_process import RequestProcess
from py_scheduler.app.scheduling.binder import Binder
from py_scheduler.app.scheduling.decisions import DEFAULT_CAPACITY, DEFAULT_TOP_K, DecisionLog
from py_scheduler.app.scheduling.decisions import register_metrics as register_decision_metrics
from py_scheduler.app.scheduling.event_handlers import EventHandlers
from py_scheduler.app.scheduling.loop import Housekeeping, QueueMetricsRecorder, SchedulingLoop
from py_scheduler.app.serving.cachedump import CacheDump
from py_scheduler.app.serving.cachedump import add_routes as add_cache_dump_routes
from py_scheduler.app.serving.decisions_http import add_routes as add_decision_routes
from py_scheduler.app.serving.memdebug import MemoryDebug
from py_scheduler.app.serving.memdebug import add_routes as add_memory_routes
from py_scheduler.app.telemetry.klog import setup_logging
from py_scheduler.app.telemetry.metrics import (
    DRA_DEVICES,
    IN_FLIGHT_EVENTS,
    LEADER_STATUS,
    PLUGIN_EVALUATIONS,
    REGISTRY,
    BatchMetricsRecorder,
    event_handling_observer,
    framework_observer,
    preemption_observer,
    register_workload_metrics,
)
from py_scheduler.app.tuning import GcPacer, freeze_collected, freeze_heap_then, set_thresholds
from py_scheduler.cache.cache import Cache
from py_scheduler.cache.kinds import KINDS
from py_scheduler.core.shards import NodeShardPool, machine_parallelism
from py_scheduler.framework.algorithm import Algorithm
from py_scheduler.framework.config import (
    ConfigError,
    SchedulerConfig,
    build_framework,
    load_config,
    missing_default_plugins,
)
from py_scheduler.framework.features import FeatureGates
from py_scheduler.framework.handle import Handle, LateClient, LateObjects, QueueActivator
from py_scheduler.framework.runtime import Framework
from py_scheduler.plugins import registry
from py_scheduler.queue.scheduling_queue import PriorityQueue

log = logging.getLogger("py_scheduler.main")

SHUTDOWN_DRAIN_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class ServingOptions:
    """How the metrics/health port is served (kube-scheduler's secure serving flags).

    ``plain_http``: plain HTTP without authentication (``--plain-http``; only by explicit choice).
    Otherwise HTTPS with ``tls_cert_file`` / ``tls_private_key_file`` (both or neither: a
    self-signed certificate made at start), at least ``tls_min_version`` (``--tls-min-version``),
    delegated authentication and authorization of every path except ``always_allow_paths``
    (``--authorization-always-allow-paths``); anonymous requests only with ``anonymous_auth``
    (``--anonymous-auth``); tokens for ``authentication_audiences`` only when given
    (``--authentication-audiences``). ``profiling``: ``/debug/memory``'s actions (``--profiling``).
    """

    plain_http: bool = False
    tls_cert_file: Path | None = None
    tls_private_key_file: Path | None = None
    always_allow_paths: Sequence[str] = ("/healthz", "/readyz", "/livez")
    anonymous_auth: bool = True
    authentication_audiences: Sequence[str] = ()
    tls_min_version: str = "VersionTLS12"
    profiling: bool = False


def build_profiles(cfg: SchedulerConfig, handle: Handle | None = None, parallelism: int = 1) -> dict[str, Framework]:
    """schedulerName -> Framework, each with its own metrics observer; plugins get a copy of ``handle``
    (its client, objects and activator are ports :func:`_serve` connects once). With ``parallelism``
    above 1 each profile filters costly chunks and scores costly feasible lists on that many cores
    (py_scheduler/core/shards.py).

    Raises:
        ConfigError: duplicate schedulerName or any plugin/args error.
    """
    out: dict[str, Framework] = {}
    for p in cfg.profiles:
        if p.scheduler_name in out:
            raise ConfigError(f"profiles: duplicate schedulerName {p.scheduler_name!r}")
        fw = build_framework(p, cfg, framework_observer(p.scheduler_name), handle, registry=registry)
        if fw.batch is not None:
            fw.batch.recorder = BatchMetricsRecorder()
        if parallelism > 1:  # Filter and Score on more cores: workers spawned once requests are costly
            fw.connect_shards(NodeShardPool(functools.partial(registry.replica_framework, p, cfg), parallelism,
                                            gc_tuning=(set_thresholds, freeze_collected)))
        out[p.scheduler_name] = fw
    return out


def run_scheduler(kubeconfig: Path | None, config: Path | None, leader_elect: bool | None, lease_name: str | None,
                  lease_namespace: str | None, metrics_bind_address: str, verbosity: int,
                  feature_gates: str = "", decisions_capacity: int = DEFAULT_CAPACITY,
                  decisions_top_k: int = DEFAULT_TOP_K, serving: ServingOptions | None = None,
                  request_process: bool | None = None) -> int:
    """Run the scheduler until SIGTERM/SIGINT; returns the process exit code.

    ``kubeconfig`` None: ``clientConnection.kubeconfig`` of the config file, else in-cluster.
    ``leader_elect`` / ``lease_name`` / ``lease_namespace`` override the file's ``leaderElection``
    when given. ``metrics_bind_address`` ``host:port`` serves /metrics, /healthz, /livez, /readyz
    (empty: no server). ``feature_gates`` is kube-scheduler's ``--feature-gates`` list
    (:mod:`py_scheduler.framework.features`, shared with ``explain`` and ``simulate``). ``decisions_capacity``
    records (0: none) of ``decisions_top_k`` nodes each are kept for ``/debug/decisions``
    (:mod:`py_scheduler.app.scheduling.decisions`). ``serving``: how that port is served
    (default: HTTPS with a self-signed certificate and delegated authn/authz). ``request_process``:
    the API writes go out from a process of their own (:mod:`py_scheduler.app.process.request_process`);
    None: when this process may use more than one CPU (:func:`~py_scheduler.core.shards.machine_parallelism`).
    """
    setup_logging(verbosity)
    from py_scheduler.app.serving.health import raise_nofile_limit  # lazy, as build_health_server's

    raise_nofile_limit()  # open connections must not take the descriptors our API connections need
    try:
        gates = FeatureGates.parse(feature_gates)
    except ValueError as exc:
        log.error("invalid --feature-gates: %s", exc)
        return 1
    try:
        cfg = load_config(config, registry=registry) if config is not None else SchedulerConfig()
    except ConfigError as exc:
        log.error("invalid configuration: %s", exc)
        return 1
    cfg.feature_gates = gates
    le = cfg.leader_election
    if leader_elect is not None:
        le.leader_elect = leader_elect
    if lease_name:
        le.resource_name = lease_name
    if lease_namespace:
        le.resource_namespace = lease_namespace
    if decisions_capacity < 0 or decisions_top_k < 0:
        log.error("invalid decision log size: --decisions-capacity and --decisions-top-k must be >= 0")
        return 1
    kc: Path | None = kubeconfig if kubeconfig is not None else (Path(cfg.kubeconfig) if cfg.kubeconfig else None)
    if kc is not None and not kc.is_file():
        # kubernetes_asyncio would log "Config not found" and then report a missing current-context.
        log.error("cannot load the client configuration (%s): no such file", kc)
        return 1
    if metrics_bind_address:
        from py_scheduler.app.serving.health import parse_bind_address  # lazy, as build_health_server's

        try:
            parse_bind_address(metrics_bind_address)
        except ValueError as exc:  # before logging in: a typo must not cost a login and a noisy shutdown
            log.error("invalid --metrics-bind-address: %s", exc)
            return 1
    if request_process is None:  # by default where the writes can have a core of their own
        request_process = machine_parallelism(cfg.parallelism) > 1
    # forked here, before any event loop or thread exists, from the imported and frozen modules
    writer = (RequestProcess(kc, qps=cfg.qps, burst=cfg.burst, verbosity=verbosity,
                             fork=threading.active_count() == 1) if request_process else None)
    try:
        return event_loop.run(_run(cfg, kc, metrics_bind_address, serving or ServingOptions(), decisions_capacity,
                                    decisions_top_k, writer))
    except KeyboardInterrupt:
        return 0


async def _run(cfg: SchedulerConfig, kubeconfig: Path | None, metrics_bind_address: str,
               serving: ServingOptions, decisions_capacity: int = DEFAULT_CAPACITY,
               decisions_top_k: int = DEFAULT_TOP_K, request_process: RequestProcess | None = None) -> int:
    set_thresholds()
    # The Handle is complete here: the client, the informers' objects and the queue (which exist only
    # once logged in / built from the profiles) are ports _serve connects once.
    ports = (LateClient(), LateObjects(), QueueActivator())
    handle = Handle(client=ports[0], objects=ports[1], activator=ports[2], events=None, feature_gates=cfg.feature_gates)
    try:
        frameworks = build_profiles(cfg, handle, machine_parallelism(cfg.parallelism))
    except ConfigError as exc:
        log.error("invalid configuration: %s", exc)
        return 1
    decisions = (DecisionLog(decisions_capacity, decisions_top_k) if decisions_capacity > 0 else None)

    async def serve(kube: Kube, stop: asyncio.Event) -> int:
        return await _serve(cfg, frameworks, kube, metrics_bind_address, serving, decisions, stop, ports=ports)

    # kopf runs the process: login, start-up (serve), signals, clean-up (py_scheduler.app.process.lifecycle).
    return await run_operator(kubeconfig, serve, qps=cfg.qps, burst=cfg.burst, request_process=request_process)


async def _serve(cfg: SchedulerConfig, frameworks: dict[str, Framework], kube: Kube, metrics_bind_address: str,
                 serving: ServingOptions, decisions: DecisionLog | None = None,
                 stop: asyncio.Event | None = None, *,
                 ports: tuple[LateClient, LateObjects, QueueActivator]) -> int:
    """The scheduler's body: start the components, run until ``stop`` is set (kopf's clean-up sets it
    on SIGTERM / SIGINT) or one of them dies, then shut down and return the exit code."""
    identity = new_identity()
    missing = missing_default_plugins(registry=registry)
    log.info("Starting py-scheduler identity=%s profiles=%s", identity, sorted(frameworks))
    if missing:
        log.warning("default plugins not implemented in this build (left out of the profiles): %s", missing)

    cache = Cache()
    queue = PriorityQueue(frameworks, pod_initial_backoff=cfg.pod_initial_backoff_seconds,
                          pod_max_backoff=cfg.pod_max_backoff_seconds, metrics=QueueMetricsRecorder())
    # PodGroups are watched only with GenericWorkload on, as kube-scheduler starts that informer only then
    # (and an RBAC without podgroups must not keep the caches from syncing).
    kinds = [k for k in KINDS if k.kind != "PodGroup" or cfg.feature_gates.generic_workload]
    # freeze_synced: the synced stores go to the permanent generation unscanned (freeze_heap_then
    # freezes the heap after the sync anyway; a full collection of it cost ~1 s at 30000 Pods)
    informers = Informers(kube, EventHandlers(cache, queue, frameworks, gang=cfg.feature_gates.generic_workload,
                                        observe=event_handling_observer()),
                          kinds, freeze_synced=True)
    client, objects, activator = ports
    activator.connect(queue)  # ``Handle.Activate``: GangScheduling's Permit wakes its group's members
    queue.pod_lister = informers.pod  # the nominator's podLister
    le = cfg.leader_election
    leader: LeaderElector | AlwaysLeader
    if le.leader_elect:
        # its own client (connection pool and rate limiter): no backlog of Bindings delays a renewal
        leader = LeaderElector(kube.derive("leader-election"), le.resource_namespace, le.resource_name, identity,
                               lease_duration=le.lease_duration_seconds, renew_deadline=le.renew_deadline_seconds,
                               retry_period=le.retry_period_seconds,
                               on_started_leading=lambda: log.info("became the leader: scheduling"),
                               on_stopped_leading=lambda: log.error("lost leadership: standing by"))
    else:
        leader = AlwaysLeader(identity)
    # leader_election_master_status (NoLeader / leader-change alerts) and the DRA device gauges, read at scrape time
    LEADER_STATUS.track(le.resource_name, leader.is_leader)
    DRA_DEVICES.track(informers.store.list_kind)
    PLUGIN_EVALUATIONS.track(frameworks.values())
    IN_FLIGHT_EVENTS.track(queue.in_flight_event_counts)
    for fw in frameworks.values():
        fw.preemption_observer = preemption_observer()
    if cfg.feature_gates.generic_workload:
        register_workload_metrics()
    # PreBind / Bind plugins write through this client (fenced by leadership, Bindings by the Node)
    # and read the informers' latest objects, through the ports every profile's Handle holds.
    client.connect(KubeAPIClient(kube, fence=leader.is_leader_valid, node_exists=cache.has_node,
                                 valid_until=leader.valid_until))
    if kube.process is not None and isinstance(leader, LeaderElector):
        leader.on_valid_until = kube.process.lease  # the writes' process follows every renewal
    objects.connect(InformerLister(informers.store))
    loop = SchedulingLoop(frameworks=frameworks, algorithm=Algorithm(cfg.percentage_of_nodes_to_score), cache=cache,
                          queue=queue, binder=Binder(kube, identity), leader=leader, pod_lister=informers.pod,
                          cache_consistent=informers.consistent, decisions=decisions)
    stop = stop if stop is not None else asyncio.Event()

    def ready() -> bool:
        return informers.synced.is_set() and (not leader.is_leader() or leader.is_leader_valid())

    health: Any = None
    if metrics_bind_address:
        try:
            health = build_health_server(metrics_bind_address, ready, kube, serving)
            if decisions is not None:  # /debug/decisions: routes added before the app is frozen by start()
                add_decision_routes(health.app, decisions, leader.is_leader_valid, health.auth)
                register_decision_metrics(decisions, REGISTRY)
            # /debug/cache: the informers' and the cache's view, for a differential check against a LIST
            add_cache_dump_routes(health.app, CacheDump(informers.store, cache, queue, is_leader=leader.is_leader,
                                                        synced=informers.synced, consistent=informers.consistent,
                                                        kinds=kinds))
            # /debug/memory: RSS, the collector's counters and (PYTHONTRACEMALLOC=N) allocation sites
            add_memory_routes(health.app, MemoryDebug(), profiling=serving.profiling)
            await health.start()
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
            log.error("cannot serve metrics/health on %r: %s", metrics_bind_address, exc)
            return 1

    async def after_sync(start: Callable[[], Awaitable[None]]) -> None:
        await informers.synced.wait()
        await start()  # created only now, so a cancellation before sync leaves no un-awaited coroutine

    ours = [
        asyncio.create_task(informers.run(stop), name="informers"),
        asyncio.create_task(queue.run(), name="queue flushes"),
        asyncio.create_task(Housekeeping(cache, queue, snapshot=loop.snapshot, frameworks=frameworks)
                            .run(stop, informers.synced), name="housekeeping"),
        asyncio.create_task(GcPacer().run(stop), name="gc pacer"),  # cycles freed on a clock too
        asyncio.create_task(loop.binder.run_series(stop), name="event series"),
        asyncio.create_task(after_sync(lambda: leader.run(stop)), name="leader election"),
        asyncio.create_task(after_sync(lambda: freeze_heap_then(loop.run(stop))), name="scheduling loop"),
    ]
    stop_waiter = asyncio.create_task(stop.wait(), name="stop")

    await asyncio.wait({stop_waiter, *ours}, return_when=asyncio.FIRST_COMPLETED)
    code = 0
    for t in ours:
        if t.done() and not stop.is_set():
            log.error("task %s stopped unexpectedly: %r", t.get_name(), _exc(t))
            code = 1
    stop.set()
    log.info("shutting down")
    queue.close()
    await loop.drain(SHUTDOWN_DRAIN_SECONDS)
    await leader.release()
    everything: list[asyncio.Task[Any]] = [*ours, stop_waiter]
    for t in everything:
        t.cancel()
    await asyncio.gather(*everything, return_exceptions=True)
    for fw in frameworks.values():
        if fw.shards is not None:
            fw.shards.close()
    if health is not None:
        await health.stop()
    log.info("stopped")
    return code


def build_health_server(bind_address: str, ready: Callable[[], bool], kube: Kube, serving: ServingOptions,
                        routes: Mapping[str, Callable[[Any], Awaitable[Any]]] | None = None) -> Any:
    """The (not yet started) :class:`py_scheduler.app.serving.health.HealthServer` ``serving`` asks for; the
    delegated reviews go through a client of their own (``kube.derive``). ``routes``: more GET
    paths -> aiohttp handlers (debug views); they get the same authentication and authorization as
    ``/metrics`` unless always allowed.

    Raises:
        ValueError: malformed bind address, or only one of the TLS files given.
        OSError, ssl.SSLError: a TLS file cannot be read or the pair does not match.
    """
    from py_scheduler.app.serving.health import HealthServer
    from py_scheduler.app.serving.secure import DelegatingAuth, server_ssl_context

    if serving.plain_http:
        log.warning("serving metrics and health over plain HTTP without authentication (--plain-http)")
        server = HealthServer(bind_address, ready)
    else:
        ctx = server_ssl_context(serving.tls_cert_file, serving.tls_private_key_file,
                                 min_version=serving.tls_min_version)
        auth = DelegatingAuth(kube.derive("auth-delegation"), always_allow_paths=serving.always_allow_paths,
                              anonymous=serving.anonymous_auth, audiences=serving.authentication_audiences)
        server = HealthServer(bind_address, ready, ssl_context=ctx, auth=auth)
    for path, handler in (routes or {}).items():
        server.add_get(path, handler)
    return server


def _exc(task: asyncio.Task[Any]) -> BaseException | None:
    if task.cancelled():
        return None
    return task.exception()
