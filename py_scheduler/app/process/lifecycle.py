"""The live process's runtime: kopf runs ``py-scheduler run`` as an operator with no resource handlers.

kopf is here what its authors built it to be for an operator's process (docs: Startup, Shutdown,
Authentication, Embedding): it owns the process's life cycle, and py-scheduler owns every watch.

- ``@kopf.on.startup`` (:func:`startup`): logs in through the one login path
  (:func:`py_scheduler.app.client.credentials.load_connection_info`), builds the API adapter
  (:class:`py_scheduler.app.client.kube.Kube`) from that :class:`kopf.ConnectionInfo`, and starts the
  scheduler's body (``serve``: the reflectors, queue, leader election, scheduling loop and the
  health/metrics server, :func:`py_scheduler.app.process.main._serve`) as a task. A bad kubeconfig fails the
  handler permanently, so the operator stops before any API call and the process exits 1, as kopf
  documents for failed startup handlers.
- ``@kopf.on.login`` (:func:`login`): hands kopf the very ConnectionInfo the adapter was built from;
  when kopf asks again (its copy expired or was refused with 401) it reads the credentials afresh,
  through the same function (after a backoff when refused, so that a wrong token leaves the process
  running and retrying as before instead of stopping it). kopf's own client uses them only for the
  API discovery below.
- ``@kopf.on.cleanup`` (:func:`cleanup`): sets the stop event and waits for the scheduler body's
  shutdown: no more pops, in-flight bindings drained (5 s at most), the Lease released, the reflectors
  stopped, the health server closed; then the client is closed.
- Signals: kopf's own SIGTERM / SIGINT handlers stop the operator (then clean-up runs); py-scheduler
  installs none. The ``stop`` event is kopf's ``stop_flag`` too: when the scheduler body ends by
  itself (a long-lived task died), the operator stops and the process exits 1.

Settings (:func:`operator_settings`): standalone (no peering objects, no CRDs), posting off (no
Events from kopf's loggers), scanning off (no LIST/WATCH of namespaces or CRDs), and API errors retried
without end (capped at 30 s), as the reflectors retry, so an API server that is down at start does not
stop the process. With no resource handlers kopf starts no watch and no LIST; what remains of its
own traffic is one API discovery at start (``GET /api``, ``/api/v1``, ``/apis`` and the versions of
``apiextensions.k8s.io`` and ``admissionregistration.k8s.io``), which every authenticated user may
read (``system:discovery``), so RBAC is unchanged.

No ``@kopf.on.probe`` and no kopf liveness endpoint: kopf's endpoint would be a second HTTP server on a
second port answering 200 while its reporter task runs, and kopf has no readiness notion; the
health server already answers ``/livez`` (the event loop answers) and ``/readyz`` (caches synced, a
leader's Lease still valid) next to ``/metrics``, which the Deployment's probes use. Feeding the
same facts into a second endpoint would only duplicate them.

Upstream: ``cmd/kube-scheduler/app/server.go`` (``Run``: start informers, wait for sync, leader
election; on shutdown release the Lease when ``ReleaseOnCancel``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import itertools
import logging
import warnings
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kopf

from py_scheduler.app.client.credentials import Credentials, expired, load_connection_info
from py_scheduler.app.client.internals import KOPF_AUTHENTICATOR
from py_scheduler.app.client.kube import Kube
from py_scheduler.app.process.request_process import RequestProcess

log = logging.getLogger("py_scheduler.operator")

Serve = Callable[[Kube, asyncio.Event], Coroutine[Any, Any, int]]
"""The scheduler's body: runs with the client until the event is set (or a component dies), shuts
down (drain, Lease release) and returns the exit code."""

KOPF_BACKOFFS = (1.0, 1.0, 2.0, 3.0, 5.0, 8.0, 13.0, 21.0)
"""kopf's default ``networking.error_backoffs`` (seconds), continued by :data:`KOPF_BACKOFF_CAP`."""
KOPF_BACKOFF_CAP = 30.0


class _EndlessBackoffs:
    """kopf's backoffs between attempts of one request, then 30 s for ever (re-iterable: kopf
    iterates it afresh per request). kopf's default gives up after ~54 s, which would stop the
    operator when the API server is unreachable at start; the reflectors keep trying, so does kopf."""

    def __iter__(self) -> Iterator[float]:
        return itertools.chain(KOPF_BACKOFFS, itertools.repeat(KOPF_BACKOFF_CAP))


@dataclass
class Runtime:
    """kopf's ``memo``: what the handlers share. Built by :func:`run`."""

    kubeconfig: Path | None
    """``--kubeconfig`` (None: in-cluster)."""
    serve: Serve
    qps: float
    burst: int
    stop: asyncio.Event
    """The scheduler body's stop event and kopf's ``stop_flag``."""
    credentials: Credentials = field(init=False)
    request_process: RequestProcess | None = None
    """Where the client's writes go out once it is ready (``--request-process``), else None."""
    kube: Kube | None = None
    task: asyncio.Task[int] | None = None
    """The scheduler body (started by :func:`startup`)."""
    given_to_kopf: kopf.ConnectionInfo | None = None
    """The record kopf got last."""
    refusals: int = 0
    """kopf's re-logins before its record expired (the API server refused it)."""
    exit_code: int = 0

    def __post_init__(self) -> None:
        kubeconfig = self.kubeconfig
        self.credentials = Credentials(lambda: load_connection_info(kubeconfig))


def _runtime(memo: object) -> Runtime:
    if not isinstance(memo, Runtime):
        raise TypeError(f"kopf memo is {type(memo).__name__}, not the py-scheduler Runtime")
    return memo


async def startup(memo: object, **_: Any) -> None:
    """``@kopf.on.startup``: log in, build the client from the ConnectionInfo, start the scheduler.

    Raises:
        kopf.PermanentError: the credentials cannot be loaded (logged; exit code 1).
    """
    rt = _runtime(memo)
    try:
        info = await rt.credentials.login()
        rt.kube = Kube.from_connection_info(info, rt.credentials, qps=rt.qps, burst=rt.burst,
                                            request_process=rt.request_process)
    except Exception as exc:  # ConfigException, OSError, YAML errors: all mean "cannot connect"
        log.error("cannot load the client configuration (%s): %s", rt.kubeconfig or "in-cluster", exc)
        rt.exit_code = 1
        raise kopf.PermanentError(f"cannot load the client configuration: {exc}") from exc
    rt.task = asyncio.create_task(rt.serve(rt.kube, rt.stop), name="py-scheduler")
    # The body ends by itself only when something died: then the whole operator stops.
    rt.task.add_done_callback(lambda _t: rt.stop.set())


REFUSED_BACKOFF_CAP = 30.0
"""Seconds: the longest wait before kopf gets credentials again after the API server refused them."""
REFUSED_RECORD_LIFETIME = datetime.timedelta(hours=1)


async def login(memo: object, **_: Any) -> kopf.ConnectionInfo:
    """``@kopf.on.login``: the ConnectionInfo the client was built from; a fresh one when kopf asks
    again (its copy expired, or the API server refused it with 401).

    A refused record is not a reason to stop the scheduler (its reflectors keep retrying, as
    client-go's do), but kopf stops the operator when a login hands back a record equal to one it saw
    refused. So after a refusal the credentials are read again after a backoff (1, 2, 4 ... 30 s:
    kopf's discovery then retries at that pace instead of in a tight loop) and, when they are
    unchanged, handed over with an expiration of their own (one hour) so that kopf takes them.

    Raises:
        whatever :func:`~py_scheduler.app.client.credentials.load_connection_info` raises (kopf retries).
    """
    rt = _runtime(memo)
    given = rt.given_to_kopf
    if given is None:  # the initial login: the record start-up built the client from
        rt.given_to_kopf = rt.credentials.info or await rt.credentials.login()
        return rt.given_to_kopf
    now = datetime.datetime.now(datetime.UTC)
    refused = not expired(given, now)  # kopf asks again before its copy expired: the server refused it
    if refused:
        rt.refusals += 1
        delay = min(2.0 ** (rt.refusals - 1), REFUSED_BACKOFF_CAP)
        log.warning("the API server refused the credentials (401 to kopf's discovery); reading them again in %gs",
                    delay)
        await _sleep(delay)
    fresh = await rt.credentials.login()
    if refused:  # a record of its own, never equal to one kopf saw refused
        now = datetime.datetime.now(datetime.UTC)
        until = now + REFUSED_RECORD_LIFETIME
        if fresh.expiration is not None:
            exp = fresh.expiration if fresh.expiration.tzinfo else fresh.expiration.replace(tzinfo=datetime.UTC)
            until = min(until, exp)
        fresh = dataclasses.replace(fresh, expiration=until if until != given.expiration else until
                                    - datetime.timedelta(microseconds=1))
    rt.given_to_kopf = fresh
    return fresh


_sleep = asyncio.sleep


async def cleanup(memo: object, **_: Any) -> None:
    """``@kopf.on.cleanup``: stop the scheduler and wait for its shutdown (bindings drained, Lease
    released), then close the client. Never raises: the exit code records a failure."""
    rt = _runtime(memo)
    rt.stop.set()
    if rt.task is not None:
        await asyncio.wait({rt.task})
        if rt.task.cancelled() or rt.task.exception() is not None:
            log.error("py-scheduler stopped with %r", None if rt.task.cancelled() else rt.task.exception())
            rt.exit_code = 1
        else:
            rt.exit_code = max(rt.exit_code, rt.task.result())
    if rt.kube is not None:
        await rt.kube.close()


def operator_registry() -> kopf.OperatorRegistry:
    """A registry of its own (not kopf's global one) with the three activity handlers."""
    registry = kopf.OperatorRegistry()
    kopf.on.startup(registry=registry, id="py-scheduler", errors=kopf.ErrorsMode.PERMANENT)(startup)
    kopf.on.login(registry=registry, id="py-scheduler", backoff=5.0)(login)
    kopf.on.cleanup(registry=registry, id="py-scheduler", errors=kopf.ErrorsMode.PERMANENT)(cleanup)
    return registry


def operator_settings() -> kopf.OperatorSettings:
    """kopf's settings for a process with no resource handlers (see the module docstring)."""
    settings = kopf.OperatorSettings()
    settings.peering.standalone = True
    settings.posting.enabled = False
    settings.scanning.disabled = True
    settings.networking.error_backoffs = _EndlessBackoffs()
    return settings


async def run(kubeconfig: Path | None, serve: Serve, *, qps: float = 50.0, burst: int = 100,
              request_process: RequestProcess | None = None) -> int:
    """Run ``serve`` under kopf until SIGTERM / SIGINT or until it ends; returns the exit code
    (0 after a clean shutdown, 1 when the credentials cannot be loaded, the scheduler body failed, or
    kopf itself stopped with an error)."""
    rt = Runtime(kubeconfig=kubeconfig, serve=serve, qps=qps, burst=burst, stop=asyncio.Event(),
                 request_process=request_process)
    # When start-up fails, kopf cancels its credentials task before it ever ran; Python then warns
    # that its coroutine was never awaited (noise next to the real error, which is logged).
    warnings.filterwarnings("ignore", message=f"coroutine '{KOPF_AUTHENTICATOR}' was never awaited",
                            category=RuntimeWarning)
    try:
        await kopf.operator(registry=operator_registry(), settings=operator_settings(), memo=rt,
                            stop_flag=rt.stop, clusterwide=True, standalone=True)
    except Exception as exc:  # kopf re-raises what failed its root tasks (a failed startup included)
        if rt.exit_code == 0:
            log.error("the operator runtime (kopf) stopped with an error: %r", exc)
        return 1
    return rt.exit_code
