"""``py-scheduler run``: wire config, API adapter, informers (the Pod reflector, kopf for the other
kinds), cache, queue, leader election,
the scheduling loop and the health/metrics server into one asyncio process.

Upstream: ``cmd/kube-scheduler/app/server.go`` (``Run``: start the informers, wait for the caches
to sync, then run leader election and, while leading, the scheduler; flags override the config
file) and ``pkg/scheduler/scheduler.go`` (one queue and one cache for all profiles).

Shutdown (SIGTERM/SIGINT): stop popping, let in-flight bindings finish (5 s at most), release the
Lease, stop kopf, exit 0. Exit codes: 0 after a clean shutdown, 1 for a bad configuration or
kubeconfig, or when the watch machinery (kopf, or the Pod reflector) dies.

kopf runs embedded: :func:`kopf.spawn_tasks` / :func:`kopf.run_tasks` with our registry and settings
(``py_scheduler.app.informers``). kopf installs SIGINT/SIGTERM handlers of its own; they are replaced
by ours right after, so a signal goes through our ordered shutdown. kopf cancels every task created
after it started when it stops; the process's long-lived tasks are therefore started before kopf,
and kopf is stopped last.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import kopf

from py_scheduler.app.binder import Binder
from py_scheduler.app.informers import KINDS, EventHandlers, Informers, ObjectStore
from py_scheduler.app.kube import Kube, KubeAPIClient
from py_scheduler.app.leader import AlwaysLeader, LeaderElector, new_identity
from py_scheduler.app.logging import setup_logging
from py_scheduler.app.loop import Housekeeping, QueueMetricsRecorder, SchedulingLoop
from py_scheduler.app.metrics import BatchMetricsRecorder, framework_observer
from py_scheduler.cache.cache import Cache
from py_scheduler.framework import config
from py_scheduler.framework.config import (
    ConfigError,
    SchedulerConfig,
    build_framework,
    load_config,
    missing_default_plugins,
)
from py_scheduler.framework.handle import Handle
from py_scheduler.framework.runtime import Algorithm, Framework
from py_scheduler.queue.scheduling_queue import PriorityQueue

log = logging.getLogger("py_scheduler.main")

SHUTDOWN_DRAIN_SECONDS = 5.0


def build_profiles(cfg: SchedulerConfig, handle: Handle | None = None) -> dict[str, Framework]:
    """schedulerName -> Framework, each with its own metrics observer; plugins get ``handle`` (whose
    ``client`` the live process sets once connected).

    Raises:
        ConfigError: duplicate schedulerName or any plugin/args error.
    """
    out: dict[str, Framework] = {}
    for p in cfg.profiles:
        if p.scheduler_name in out:
            raise ConfigError(f"profiles: duplicate schedulerName {p.scheduler_name!r}")
        fw = build_framework(p, cfg, framework_observer(p.scheduler_name), handle)
        if fw.batch is not None:
            fw.batch.recorder = BatchMetricsRecorder()
        out[p.scheduler_name] = fw
    return out


def run_scheduler(kubeconfig: Path | None, config: Path | None, leader_elect: bool | None, lease_name: str | None,
                  lease_namespace: str | None, metrics_bind_address: str, verbosity: int,
                  feature_gates: str = "") -> int:
    """Run the scheduler until SIGTERM/SIGINT; returns the process exit code.

    ``kubeconfig`` None: ``clientConnection.kubeconfig`` of the config file, else in-cluster.
    ``leader_elect`` / ``lease_name`` / ``lease_namespace`` override the file's ``leaderElection``
    when given. ``metrics_bind_address`` ``host:port`` serves /metrics, /healthz, /livez, /readyz
    (empty: no server). ``feature_gates`` is kube-scheduler's ``--feature-gates`` list
    (``OpportunisticBatching=false``; the only gate py-scheduler reads).
    """
    setup_logging(verbosity)
    try:
        apply_feature_gates(feature_gates)
    except ValueError as exc:
        log.error("invalid --feature-gates: %s", exc)
        return 1
    try:
        cfg = load_config(config) if config is not None else SchedulerConfig()
    except ConfigError as exc:
        log.error("invalid configuration: %s", exc)
        return 1
    le = cfg.leader_election
    if leader_elect is not None:
        le.leader_elect = leader_elect
    if lease_name:
        le.resource_name = lease_name
    if lease_namespace:
        le.resource_namespace = lease_namespace
    kc: Path | None = kubeconfig if kubeconfig is not None else (Path(cfg.kubeconfig) if cfg.kubeconfig else None)
    try:
        return _event_loop_run(_run(cfg, kc, metrics_bind_address))
    except KeyboardInterrupt:
        return 0


class StoreLister:
    """The Handle's ``objects`` (:class:`~py_scheduler.framework.handle.ObjectLister`) over the
    informers' store: the latest watched object of every kind, Pods included (non-terminal ones)."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.store.get(kind, f"{namespace}/{name}" if namespace else name)

    def list(self, kind: str) -> list[dict[str, Any]]:
        return self.store.list_kind(kind)


FEATURE_GATES = ("OpportunisticBatching", "GenericWorkload", "TopologyAwareWorkloadScheduling")
"""The ``--feature-gates`` py-scheduler understands."""


def apply_feature_gates(spec: str) -> dict[str, bool]:
    """Parse ``--feature-gates`` (``Name=true|false,...``) and apply it process-wide
    (``OpportunisticBatching`` sets ``runtime.OPPORTUNISTIC_BATCHING_DEFAULT`` for the profiles built
    after; ``GenericWorkload`` / ``TopologyAwareWorkloadScheduling`` go to
    :func:`py_scheduler.framework.config.set_feature_gates`). Returns the gates given.

    Raises:
        ValueError: an entry without ``=``, a value other than true / false, or an unknown gate
            (``unrecognized feature gate: X``, as upstream).
    """
    from py_scheduler.framework import runtime

    gates: dict[str, bool] = {}
    for item in (x.strip() for x in spec.split(",")):
        if not item:
            continue
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or value.strip().lower() not in ("true", "false"):
            raise ValueError(f"missing bool value for {name}" if not sep else
                             f"invalid value of {name}={value.strip()}, err: must be true or false")
        if name not in FEATURE_GATES:
            raise ValueError(f"unrecognized feature gate: {name}")
        gates[name] = value.strip().lower() == "true"
    if "OpportunisticBatching" in gates:
        runtime.OPPORTUNISTIC_BATCHING_DEFAULT = gates["OpportunisticBatching"]
    config.set_feature_gates(gates)  # the workload gates: the default profile's plugins
    return gates


GC_THRESHOLDS = (50_000, 20, 100)
"""``gc.set_threshold`` for the live process. A scheduling cycle allocates thousands of short-lived
containers that reference counting frees; at Python's default (700, 10, 10) the collector ran so often
that it took 21% of the process's CPU on bench/throughput (4.8 of 22.6 s for 3000 Pods, 11 full
collections of ~0.24 s each); with these thresholds 0.9 s, CPU per Pod 7.0 -> 5.8 ms (bench/RESULTS.md)."""


async def _run(cfg: SchedulerConfig, kubeconfig: Path | None, metrics_bind_address: str) -> int:
    gc.set_threshold(*GC_THRESHOLDS)
    handle = Handle()
    try:
        frameworks = build_profiles(cfg, handle)
    except ConfigError as exc:
        log.error("invalid configuration: %s", exc)
        return 1
    try:
        kube = await Kube.connect(kubeconfig, qps=cfg.qps, burst=cfg.burst)
    except Exception as exc:  # ConfigException, OSError, YAML errors: all mean "cannot connect"
        log.error("cannot load the client configuration (%s): %s", kubeconfig or "in-cluster", exc)
        return 1
    try:
        return await _serve(cfg, frameworks, kube, metrics_bind_address, handle)
    finally:
        await kube.close()


async def _serve(cfg: SchedulerConfig, frameworks: dict[str, Framework], kube: Kube, metrics_bind_address: str,
                 handle: Handle | None = None) -> int:
    identity = new_identity()
    missing = missing_default_plugins()
    log.info("Starting py-scheduler identity=%s profiles=%s", identity, sorted(frameworks))
    if missing:
        log.warning("default plugins not implemented in this build (left out of the profiles): %s", missing)

    cache = Cache()
    queue = PriorityQueue(frameworks, pod_initial_backoff=cfg.pod_initial_backoff_seconds,
                          pod_max_backoff=cfg.pod_max_backoff_seconds, metrics=QueueMetricsRecorder())
    # PodGroups are watched only with GenericWorkload on, as kube-scheduler starts that informer only then
    # (and an RBAC without podgroups must not keep the caches from syncing).
    kinds = [k for k in KINDS if k.kind != "PodGroup" or config.feature_gates.get("GenericWorkload")]
    informers = Informers(kube, EventHandlers(cache, queue, frameworks), kinds)
    for fw in frameworks.values():
        # ``Handle.Activate`` for plugins (GangScheduling's Permit wakes its group's unscheduled members).
        setattr(fw, "activate", queue.activate)  # noqa: B010
    queue.pod_lister = informers.pod  # the nominator's podLister
    le = cfg.leader_election
    leader: LeaderElector | AlwaysLeader
    if le.leader_elect:
        leader = LeaderElector(kube, le.resource_namespace, le.resource_name, identity,
                               lease_duration=le.lease_duration_seconds, renew_deadline=le.renew_deadline_seconds,
                               retry_period=le.retry_period_seconds,
                               on_started_leading=lambda: log.info("became the leader: scheduling"),
                               on_stopped_leading=lambda: log.error("lost leadership: standing by"))
    else:
        leader = AlwaysLeader(identity)
    if handle is not None:
        handle.objects = StoreLister(informers.store)
        # PreBind / Bind plugins write through this client: fenced by leadership, Bindings by the Node.
        handle.client = KubeAPIClient(kube, fence=leader.is_leader_valid, node_exists=cache.has_node)
    loop = SchedulingLoop(frameworks=frameworks, algorithm=Algorithm(cfg.percentage_of_nodes_to_score), cache=cache,
                          queue=queue, binder=Binder(kube, identity), leader=leader, pod_lister=informers.pod,
                          cache_consistent=informers.consistent)
    stop = asyncio.Event()

    def ready() -> bool:
        return informers.synced.is_set() and (not leader.is_leader() or leader.is_leader_valid())

    health: Any = None
    if metrics_bind_address:
        from py_scheduler.app.health import HealthServer

        try:
            health = HealthServer(metrics_bind_address, ready)
            await health.start()
        except (OSError, ValueError) as exc:
            log.error("cannot serve metrics/health on %r: %s", metrics_bind_address, exc)
            return 1

    async def after_sync(start: Callable[[], Awaitable[None]]) -> None:
        await informers.synced.wait()
        await start()  # created only now, so a cancellation before sync leaves no un-awaited coroutine

    ours = [
        asyncio.create_task(informers.run(stop), name="informers"),
        asyncio.create_task(queue.run(), name="queue flushes"),
        asyncio.create_task(Housekeeping(cache, queue, snapshot=loop.snapshot).run(stop), name="housekeeping"),
        asyncio.create_task(after_sync(lambda: leader.run(stop)), name="leader election"),
        asyncio.create_task(after_sync(lambda: _freeze_heap_then(loop.run(stop))), name="scheduling loop"),
    ]
    # Created before the snapshot of existing tasks: kopf cancels tasks it does not know as its own
    # leftovers, and a cancelled stop_waiter would end the wait below with exit status 0.
    stop_waiter = asyncio.create_task(stop.wait(), name="stop")
    existing = asyncio.all_tasks()
    kopf_stop = asyncio.Event()
    kopf_tasks = await kopf.spawn_tasks(registry=informers.build_registry(), settings=informers.build_settings(),
                                        clusterwide=True, standalone=True, stop_flag=kopf_stop)
    running = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            running.add_signal_handler(sig, _on_signal, sig, stop)
    kopf_runner = asyncio.create_task(kopf.run_tasks(kopf_tasks, ignored=existing), name="kopf")

    await asyncio.wait({stop_waiter, kopf_runner, *ours}, return_when=asyncio.FIRST_COMPLETED)
    code = 0
    if kopf_runner.done() and not stop.is_set():
        log.error("the watch machinery (kopf) stopped unexpectedly: %r", _exc(kopf_runner))
        code = 1
    for t in ours:
        if t.done() and not stop.is_set():
            log.error("task %s stopped unexpectedly: %r", t.get_name(), _exc(t))
            code = 1
    stop.set()
    log.info("shutting down")
    queue.close()
    await loop.drain(SHUTDOWN_DRAIN_SECONDS)
    await leader.release()
    kopf_stop.set()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(asyncio.shield(kopf_runner), timeout=10)
    everything: list[asyncio.Task[Any]] = [*ours, stop_waiter, kopf_runner]
    for t in everything:
        t.cancel()
    await asyncio.gather(*ours, stop_waiter, kopf_runner, return_exceptions=True)
    if health is not None:
        await health.stop()
    log.info("stopped")
    return code


async def _freeze_heap_then(coro: Awaitable[None]) -> None:
    """``gc.freeze()`` the objects loaded by the initial sync (the informer stores, the cache), then
    await ``coro``: Python's full (generation 2) collections stop rescanning them, which otherwise
    showed as ~80 ms pauses in a cycle's p99 at 5000 nodes (bench/RESULTS.md)."""
    gc.collect()
    gc.freeze()
    await coro


def _event_loop_run(coro: Coroutine[Any, Any, int]) -> int:
    """Run ``coro`` on uvloop when it is installed (a faster event loop and TLS: ~8% less CPU per
    scheduled Pod on the bench, bench/RESULTS.md), else on asyncio's default loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    result: int = uvloop.run(coro)
    return result


def _on_signal(sig: signal.Signals, stop: asyncio.Event) -> None:
    log.info("received %s", sig.name)
    stop.set()


def _exc(task: asyncio.Task[Any]) -> BaseException | None:
    if task.cancelled():
        return None
    return task.exception()
