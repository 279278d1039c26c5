"""The one typed adapter between py-scheduler and the Kubernetes API (kubernetes_asyncio).

Everything the live process writes goes through :class:`Kube`: the Binding (``pods/binding`` with
``metadata.uid`` set, carrying the annotations Reserve plugins attach; the response body is read raw,
the generated client cannot decode it), ``pods/status`` patches (the PodScheduled condition, ``nominatedNodeName``),
``events.k8s.io/v1`` Events, Pod deletions (preemption victims), the Lease, and the authoritative
LISTs the informers reconcile with. Callers pass and receive plain JSON dicts.

Behaviour (as client-go's rest client + kube-scheduler's client settings):

- client-side rate limit: a token bucket of ``qps`` / ``burst`` (kube-scheduler: 50 / 100) per
  client. Events and leader election each get a client of their own (:meth:`Kube.derive`: its own
  ``ApiClient``, so its own connection pool, and its own token bucket), as kube-scheduler builds an
  ``eventClient`` and ``resourcelock.NewFromKubeconfig`` builds a ``leader-election`` client: no
  backlog of Bindings can delay a Lease renewal past the renew deadline;
- retries only what client-go retries (``request.go`` ``isErrRetryableFunc``, ``with_retry.go``
  ``IsNextRetry`` / ``checkWait``): a 429 or 5xx carrying ``Retry-After`` (API Priority and Fairness'
  answer), whatever the method, waits exactly that many seconds and is retried up to
  ``throttle_retries`` (10) times; a GET (idempotent) is also retried after a connection error, a
  timeout, or a 429 / 5xx without ``Retry-After``, with exponential backoff (0.2 s doubling, at most
  5 s), up to ``retries`` extra attempts (client-go retries a GET after a reset or EOF only). Any
  other request is sent once when the connection fails: it may have reached the server, and an
  Event or a status patch sent twice is a duplicate. The Binding is the exception, as before: a
  resend is refused (409 ``already assigned``, the UID precondition), so a lost response is resent
  and ends in that 409, the binding cycle's existing path;
- other errors raise :class:`KubeError` (``NotFound`` for 404, ``Conflict`` for 409) carrying the
  HTTP status, the Status ``reason`` and ``message``.

Credentials come from a kubeconfig file or, without one, the in-cluster service account, through the
one login path of :mod:`py_scheduler.app.client.credentials` (a :class:`kopf.ConnectionInfo`, the record
kopf's ``@on.login`` handler returns); tokens are never logged.

Upstream: ``staging/src/k8s.io/client-go/rest`` (``with_retry.go``: retry on 429/5xx with
Retry-After; ``flowcontrol`` token bucket), ``cmd/kube-scheduler/app/options/options.go``
(``createClients``: a client and an ``eventClient``), ``client-go/tools/leaderelection/resourcelock/
interface.go`` (``NewFromKubeconfig``: a copy of the config, timeout ``renewDeadline / 2``, user agent
``leader-election``), ``pkg/scheduler/framework/plugins/defaultbinder/default_binder.go``
(the Binding), ``pkg/scheduler/util/utils.go`` (``PatchPodStatus``, ``DeletePod``).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

import aiohttp
import tenacity
from aiohttp.helpers import get_env_proxy_for_url
from kopf import ConnectionInfo
from kubernetes_asyncio import client as k8s_client
from yarl import URL

from py_scheduler.app.client import internals
from py_scheduler.app.client.credentials import Credentials, api_configuration, load_connection_info
from py_scheduler.app.client.ratelimit import RateLimiter as RateLimiter
from py_scheduler.app.client.wire import KubeError, NotFound, error_for, loads, split_lines
from py_scheduler.app.telemetry.metrics import RestClientMetrics
from py_scheduler.framework.objects import Obj

log = logging.getLogger("py_scheduler.kube")
METRICS = RestClientMetrics()
"""Where every request's ``rest_client_*`` metrics go (the request process records them for its parent)."""


MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON = "application/json"


DEFAULT_TIMEOUT = 30.0
"""Seconds one request may take before it counts as failed (and is retried)."""

THROTTLE_RETRIES = 10
"""Retries of a request the server answered with ``Retry-After`` (client-go's ``maxRetries``)."""

USER_AGENT = "py-scheduler"


def retry_after_seconds(value: str | None) -> int | None:
    """The ``Retry-After`` header as whole seconds (client-go's ``retryAfterSeconds``: an integer
    >= 0; an HTTP date or anything else is ignored), capped at 60 s so a confused server cannot park
    a Binding for hours. None when absent or unusable."""
    if not value:
        return None
    try:
        seconds = int(value.strip())
    except ValueError:
        return None
    return min(seconds, 60) if seconds >= 0 else None


class _RetryPolicy:
    """One request's retries, for tenacity (client-go's ``withRetry`` and ``checkWait``): a 429 or
    5xx with ``Retry-After`` (API Priority and Fairness' 429, or a 5xx) waits exactly that long and
    spends the throttle budget, whatever the method; when ``resend`` (a GET, or a request whose
    resend the server refuses, as the Binding), a status 0 (connection error, timeout), 429 or 5xx
    without it spends the ordinary budget and waits ``initial_backoff`` doubling per such failure up
    to 5 s. Anything else (4xx, a write's connection error, the fence's own exception) is final."""

    def __init__(self, kube: Kube, method: str, path: str, budget: int, throttle_budget: int,
                 resend: bool) -> None:
        self.kube = kube
        self.method = method
        self.path = path
        self.budget = budget
        self.throttle_budget = throttle_budget
        self.resend = resend
        self.failures = 0
        self.throttles = 0
        self.delay = kube.initial_backoff
        self.last_wait = 0.0

    def retry(self, exc: BaseException) -> bool:
        if isinstance(exc, Fenced):  # refused before sending: asking again cannot change the answer soon
            return False
        if not isinstance(exc, KubeError) or not (exc.status == 0 or exc.status == 429 or exc.status >= 500):
            return False
        if exc.retry_after is None and not self.resend:
            return False
        if exc.retry_after is not None:
            self.kube.throttled += 1
            self.throttles += 1
            self.last_wait = exc.retry_after
        else:
            self.failures += 1
            self.last_wait = self.delay
            self.delay = min(self.delay * 2, MAX_BACKOFF)
        return True

    def stop(self, rs: tenacity.RetryCallState) -> bool:
        return self.failures > self.budget or self.throttles > self.throttle_budget

    def wait(self, rs: tenacity.RetryCallState) -> float:
        return self.last_wait

    def before_sleep(self, rs: tenacity.RetryCallState) -> None:
        exc = rs.outcome.exception() if rs.outcome is not None else None
        code = str(exc.status) if isinstance(exc, KubeError) and exc.status else "<error>"
        METRICS.retry(code, self.method, self.kube.host)
        if isinstance(exc, KubeError) and exc.retry_after is not None:
            log.debug("Got a Retry-After %ds response for %s %s (retries: %d%s)", exc.retry_after, self.method,
                      self.path, self.throttles, f", server-side throttling, FlowSchema UID {exc.flow_schema!r}"
                      if exc.status == 429 else "")
        else:
            log.debug("retrying %s %s after %s (attempt %d/%d, in %.1fs)", self.method, self.path, exc,
                      self.failures, self.budget + 1, self.last_wait)


MAX_BACKOFF = 5.0
"""Seconds: the longest wait between two ordinary retries of one request."""


async def _sleep(seconds: float) -> None:
    await asyncio.sleep(seconds)


def prepare_session(api: k8s_client.ApiClient) -> None:
    """What every ApiClient the scheduler process makes (:meth:`Kube.from_connection_info`,
    :meth:`Kube.derive`, the request process's) gets once, before its first request:
    :func:`resolve_env_once`, and a client certificate sent as client-go sends it
    (:func:`~py_scheduler.app.client.internals.send_certificate_file_only`). When that cannot be done
    for a client certificate, a warning says so (once per client): requests still work, at the API
    server's cost."""
    resolve_env_once(api)
    session = getattr(api.rest_client, "pool_manager", None)
    if (isinstance(session, aiohttp.ClientSession) and not internals.send_certificate_file_only(session)
            and getattr(api.configuration, "cert_file", None)):
        log.warning("cannot stop OpenSSL adding the trust store's CA to the client certificate (see "
                    "py_scheduler.app.client.internals.send_certificate_file_only): the API server checks "
                    "a longer chain on each request")


def resolve_env_once(api: k8s_client.ApiClient) -> None:
    """Resolve the proxy environment once instead of on every request.

    kubernetes_asyncio creates its aiohttp session with ``trust_env=True``, so aiohttp reads
    ``~/.netrc`` (in a thread) and the proxy variables for *every* request: measured on the test bed,
    0.67 ms of CPU per API call against 0.26 ms without (``bench/RESULTS.md``), with two writes per
    scheduled Pod. Here the proxy for the API server (``HTTPS_PROXY`` / ``HTTP_PROXY`` /
    ``NO_PROXY``, credentials kept) is looked up once and given to the REST client, and the session
    stops consulting the environment. A ``proxy-url`` from the kubeconfig wins, as in client-go; the
    API server's credentials come from the kubeconfig, never from ``.netrc`` (client-go ignores it).
    """
    rest = api.rest_client
    session = getattr(rest, "pool_manager", None)
    if not isinstance(session, aiohttp.ClientSession):
        return
    if not getattr(rest, "proxy", None):
        try:
            proxy, auth = get_env_proxy_for_url(URL(str(api.configuration.host)))
        except LookupError:
            pass
        else:
            if auth is not None:
                proxy = proxy.with_user(auth.login).with_password(auth.password)
            rest.proxy = str(proxy)
    internals.no_trust_env(session)


def _api_client(cfg: k8s_client.Configuration, like: k8s_client.ApiClient,
                user_agent: str | None = None) -> k8s_client.ApiClient:
    """A new ApiClient (its own aiohttp session, bound to the running loop) for ``cfg``, with
    ``like``'s user agent unless ``user_agent`` is given and its proxy."""
    api = k8s_client.ApiClient(configuration=cfg)
    api.user_agent = user_agent or str(like.user_agent)
    prepare_session(api)
    rest_proxy = getattr(like.rest_client, "proxy", None)
    if rest_proxy and hasattr(api.rest_client, "proxy"):
        api.rest_client.proxy = rest_proxy
    return api


def _q(s: str) -> str:
    return quote(s, safe="")


class Kube:
    """The API adapter. Build with :meth:`connect`; close with :meth:`close`.

    Args:
        api: a kubernetes_asyncio ApiClient (its Configuration holds the credentials).
        qps, burst: client-side rate limit.
        retries: extra attempts for retryable failures.
        process: None, or the request process (:class:`RequestSender`) that sends every request but
            the LISTs once it is ready; :meth:`watch` stays on the caller's loop.
        purpose: this client's name there (``scheduler`` or ``events``).
    """

    initial_backoff = 0.2
    """Seconds before the first retry (doubling, at most 5 s)."""
    retry_sleep: Callable[[float], Awaitable[None]] = staticmethod(_sleep)
    """How a retry waits (tests record the waits)."""

    def __init__(self, api: k8s_client.ApiClient, qps: float = 50.0, burst: int = 100, retries: int = 5,
                 throttle_retries: int = THROTTLE_RETRIES, process: RequestSender | None = None,
                 purpose: str = "scheduler") -> None:
        self.api = api
        self.process = process
        """Where :meth:`request` sends requests once it is ready (``--request-process``), else None."""
        self.purpose = purpose
        """Which of the request process's clients sends this client's requests (``scheduler``, ``events``)."""
        self.qps = qps
        self.burst = burst
        self.limiter = RateLimiter(qps, burst)
        self.event_limiter = RateLimiter(qps, burst)
        self.retries = retries
        self.throttle_retries = throttle_retries
        self.throttled = 0
        """Responses with ``Retry-After`` (429 from API Priority and Fairness, or a 5xx) seen so far."""
        self.host = str(URL(str(getattr(getattr(api, "configuration", None), "host", "") or "")).authority or "")
        """``host:port`` of the API server (the ``host`` label of the ``rest_client_*`` metrics)."""
        self.event_client: Kube | None = None
        """Where Events go when set (:meth:`connect` sets a client made by :meth:`derive`); else through
        this client's connection pool with :attr:`event_limiter`."""
        self._derived: list[Kube] = []

    @classmethod
    async def connect(cls, kubeconfig: Path | str | None, qps: float = 50.0, burst: int = 100,
                      retries: int = 5) -> Kube:
        """Log in from ``kubeconfig`` (its current context) or in-cluster when None, through the one
        login path (:func:`py_scheduler.app.client.credentials.load_connection_info`), and build the client
        from that ConnectionInfo (:meth:`from_connection_info`; rotating tokens are re-read).

        Raises:
            kubernetes_asyncio.config.ConfigException: unusable kubeconfig / not in a cluster.
        """
        creds = Credentials(lambda: load_connection_info(kubeconfig))
        return cls.from_connection_info(await creds.login(), creds, qps=qps, burst=burst, retries=retries)

    @classmethod
    def from_connection_info(cls, info: ConnectionInfo, credentials: Credentials | None = None, qps: float = 50.0,
                             burst: int = 100, retries: int = 5,
                             request_process: RequestSender | None = None) -> Kube:
        """The adapter for the server and credentials of ``info`` (kopf's connection record, as the
        ``@on.login`` handler returns it); with ``credentials``, every request first takes the latest
        token from it (:func:`py_scheduler.app.client.credentials.api_configuration`). With
        ``request_process``, this client's and its Event client's requests go out from that process
        once it is ready (started here, on the running loop; closed by :meth:`close`).

        Raises:
            ValueError: ``info`` carries certificates as data rather than paths.
        """
        api = k8s_client.ApiClient(configuration=api_configuration(info, credentials))
        api.user_agent = f"{USER_AGENT}/scheduler"
        prepare_session(api)
        kube = cls(api, qps=qps, burst=burst, retries=retries, process=request_process)
        kube.event_client = kube.derive("events", process=request_process)
        if request_process is not None:
            request_process.start()  # the writes go out from it as soon as it says hello
        return kube

    def derive(self, purpose: str, *, qps: float | None = None, burst: int | None = None,
               retries: int | None = None, process: RequestSender | None = None) -> Kube:
        """A client for one purpose (``leader-election``, ``events``, ``auth-delegation``): the same
        server and credentials (a copy of the Configuration, so a rotated in-cluster token is re-read
        by both), its own ``ApiClient`` (its own aiohttp connection pool: requests queued on this
        client's connections cannot delay it), its own token bucket (``qps`` / ``burst`` default to
        this client's), user agent ``py-scheduler/<purpose>``; its requests go out from ``process``
        when given (see :class:`Kube`). Closed by :meth:`close` of this client.

        Upstream: ``restclient.AddUserAgent`` + ``clientset.NewForConfig`` on a copy of the config
        (``cmd/kube-scheduler/app/options/options.go`` ``createClients``,
        ``resourcelock.NewFromKubeconfig``).
        """
        cfg = copy.deepcopy(self.api.configuration)
        user_agent = f"{USER_AGENT}/{purpose}"
        api = _api_client(cfg, self.api, user_agent)
        out = Kube(api, qps=self.qps if qps is None else qps, burst=self.burst if burst is None else burst,
                   retries=self.retries if retries is None else retries, throttle_retries=self.throttle_retries,
                   process=process, purpose=purpose)
        self._derived.append(out)
        return out

    async def close(self) -> None:
        for k in self._derived:
            await k.close()
        self._derived.clear()
        if self.process is not None and self.purpose == "scheduler":
            await self.process.close()
        await self.api.close()

    # -- the one request path ------------------------------------------------------------------------
    async def request(self, method: str, path: str, *, body: Any = None, query: Mapping[str, Any] | None = None,
                      content_type: str = JSON, retries: int | None = None,
                      throttle_retries: int | None = None, timeout: float = DEFAULT_TIMEOUT,
                      limiter: RateLimiter | None = None,
                      fence: Callable[[], None] | None = None, resend: bool | None = None,
                      local: bool = False, low_priority: bool = False) -> Any:
        """Send one API request and return the decoded JSON body (None for an empty body).

        ``fence`` (when given) is called right before each attempt is sent, after the rate limiter
        and any retry backoff: whatever it raises aborts the request unsent. Bindings use it so that
        a process frozen (SIGSTOP, a long GC pause) while waiting for a token or a retry never sends
        a write once its leader lease could have expired. ``retries`` / ``throttle_retries`` override
        the client's budgets for this request (the Lease calls use 0 for both: the elector retries
        on its own clock). ``resend``: whether a connection error or a 429 / 5xx without
        ``Retry-After`` may be retried (default: only for GET, as client-go; see the module docstring).
        ``local``: sent from this process even when this client has a :attr:`process` (the LISTs
        the informers page through: their pages are decoded for the cache here, and would cross
        the socket twice). ``low_priority``: the limiter serves it after every other request
        (:meth:`RateLimiter.acquire`).

        Raises:
            NotFound, Conflict, KubeError: the final failure after retries; whatever ``fence`` raises.
        """
        if self.process is not None and self.process.ready and not local:  # started by from_connection_info
            try:
                return await self.process.send(
                    self.purpose, method, path,
                    {"body": body, "query": query, "content_type": content_type, "retries": retries,
                     "throttle_retries": throttle_retries, "timeout": timeout, "resend": resend,
                     "low_priority": low_priority},
                    fence, limiter is self.event_limiter)
            except RequestProcessGone as exc:
                if not exc.unsent and not (method == "GET" if resend is None else resend):  # as a lost connection
                    raise KubeError(0, "RequestProcessGone", str(exc), method, path) from exc
        budget = self.retries if retries is None else retries
        throttle_budget = self.throttle_retries if throttle_retries is None else throttle_retries
        q = [(k, str(v).lower() if isinstance(v, bool) else str(v)) for k, v in (query or {}).items()
             if v is not None]

        async def attempt() -> Any:
            waited = time.monotonic()
            bucket = limiter or self.limiter
            await (bucket.acquire(low=True) if low_priority else bucket.acquire())
            METRICS.rate_limited(method, self.host, time.monotonic() - waited)
            if fence is not None:
                fence()
            code = "<error>"
            retry_after: int | None = None
            flow_schema = ""
            try:
                resp = await internals.call_api(
                    self.api, path, method, query=q,
                    headers={"Content-Type": content_type, "Accept": JSON},
                    body=body, timeout=aiohttp.ClientTimeout(total=timeout))
                try:
                    data = await resp.read()
                    status = resp.status
                    code = str(status)
                    if status == 429 or status >= 500:
                        retry_after = retry_after_seconds(resp.headers.get("Retry-After"))
                        flow_schema = str(resp.headers.get("X-Kubernetes-PF-FlowSchema-UID") or "")
                finally:
                    resp.release()
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                METRICS.request(code, method, self.host)
                raise KubeError(0, type(exc).__name__, str(exc) or type(exc).__name__, method, path) from exc
            METRICS.request(code, method, self.host)
            if 200 <= status < 300:
                return loads(data) if data else None
            err = error_for(status, data, method, path)
            err.retry_after = float(retry_after) if retry_after is not None else None
            err.flow_schema = flow_schema
            raise err

        # The first try goes out directly: tenacity's bookkeeping costs 40-85 us a request (bench/
        # requests), two requests per scheduled Pod, and almost every request succeeds at once. A
        # failed first try is handed to tenacity as its first attempt's outcome, so the policy sees
        # the same failures in the same order as when tenacity made every try.
        try:
            return await attempt()
        except Exception as exc:
            first_failure: Exception | None = exc
        policy = _RetryPolicy(self, method, path, budget, throttle_budget,
                              method == "GET" if resend is None else resend)
        retrying = tenacity.AsyncRetrying(retry=tenacity.retry_if_exception(policy.retry), stop=policy.stop,
                                          wait=policy.wait, before_sleep=policy.before_sleep, reraise=True,
                                          sleep=self.retry_sleep)

        async def tries() -> Any:
            nonlocal first_failure
            if first_failure is not None:
                failed, first_failure = first_failure, None
                try:
                    raise failed
                finally:
                    del failed  # no exception -> traceback -> frame -> exception cycle
            return await attempt()

        return await retrying(tries)

    # -- reads ---------------------------------------------------------------------------------------
    async def get_pod(self, namespace: str, name: str) -> Obj | None:
        """The Pod, or None when it does not exist."""
        try:
            pod: Obj = await self.request("GET", f"/api/v1/namespaces/{_q(namespace)}/pods/{_q(name)}")
        except NotFound:
            return None
        return pod

    # -- pod writes ----------------------------------------------------------------------------------
    async def bind(self, namespace: str, name: str, uid: str, node: str,
                   annotations: Mapping[str, str] | None = None, fence: Callable[[], None] | None = None) -> None:
        """POST ``pods/binding`` (``DefaultBinder``): ``metadata.uid`` guards against a Pod recreated
        under the same name; resent after a lost response (the resend is refused with 409, see the
        module docstring); ``annotations`` (when any) ride in the Binding's metadata and the API
        server copies them onto the Pod together with ``spec.nodeName``, so a refused Binding leaves
        none behind. ``fence``: see :meth:`request`.

        Raises:
            Conflict: already bound (or the UID differs); NotFound: the Pod is gone; KubeError;
            whatever ``fence`` raises.
        """
        meta: Obj = {"name": name, "namespace": namespace, "uid": uid}
        if annotations:
            meta["annotations"] = dict(annotations)
        body = {"apiVersion": "v1", "kind": "Binding", "metadata": meta,
                "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
        await self.request("POST", f"/api/v1/namespaces/{_q(namespace)}/pods/{_q(name)}/binding", body=body,
                           fence=fence, resend=True)

    async def patch_pod_status(self, namespace: str, name: str, patch: Obj, low_priority: bool = False) -> Obj:
        """Strategic-merge-patch ``pods/status`` (``util.PatchPodStatus``: conditions merge by type);
        ``low_priority``: see :meth:`request`.

        Raises:
            NotFound, KubeError.
        """
        pod: Obj = await self.request("PATCH", f"/api/v1/namespaces/{_q(namespace)}/pods/{_q(name)}/status",
                                      body=patch, content_type=STRATEGIC_MERGE_PATCH, low_priority=low_priority)
        return pod

    async def delete_pod(self, namespace: str, name: str, uid: str | None = None,
                         grace_period_seconds: int | None = None) -> None:
        """DELETE a Pod (preemption victims), preconditioned on ``uid``; a missing Pod is fine.

        Raises:
            Conflict (UID precondition failed), KubeError.
        """
        body: Obj = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if uid:
            body["preconditions"] = {"uid": uid}
        if grace_period_seconds is not None:
            body["gracePeriodSeconds"] = grace_period_seconds
        try:
            await self.request("DELETE", f"/api/v1/namespaces/{_q(namespace)}/pods/{_q(name)}", body=body)
        except NotFound:
            return

    # -- events --------------------------------------------------------------------------------------
    async def create_event(self, namespace: str, event: Obj) -> Obj:
        """Create an ``events.k8s.io/v1`` Event.

        Raises:
            KubeError.
        """
        if self.event_client is not None:
            return await self.event_client.create_event(namespace, event)
        ev: Obj = await self.request("POST", f"/apis/events.k8s.io/v1/namespaces/{_q(namespace)}/events",
                                     body=event, retries=2, limiter=self.event_limiter)
        return ev

    async def patch_event(self, namespace: str, name: str, patch: Obj) -> Obj:
        """Merge-patch an Event (its ``series``).

        Raises:
            NotFound, KubeError.
        """
        if self.event_client is not None:
            return await self.event_client.patch_event(namespace, name, patch)
        ev: Obj = await self.request("PATCH", f"/apis/events.k8s.io/v1/namespaces/{_q(namespace)}/events/{_q(name)}",
                                     body=patch, content_type=MERGE_PATCH, retries=2, limiter=self.event_limiter)
        return ev

    # -- leases --------------------------------------------------------------------------------------
    def _lease_path(self, namespace: str, name: str | None = None) -> str:
        base = f"/apis/coordination.k8s.io/v1/namespaces/{_q(namespace)}/leases"
        return base if name is None else f"{base}/{_q(name)}"

    async def get_lease(self, namespace: str, name: str, timeout: float = DEFAULT_TIMEOUT) -> Obj | None:
        """The Lease or None (no retries: the elector has its own retry period)."""
        try:
            lease: Obj = await self.request("GET", self._lease_path(namespace, name), retries=0, throttle_retries=0,
                                      timeout=timeout)
        except NotFound:
            return None
        return lease

    async def create_lease(self, namespace: str, lease: Obj, timeout: float = DEFAULT_TIMEOUT) -> Obj:
        """Create the Lease. Raises Conflict when it already exists."""
        out: Obj = await self.request("POST", self._lease_path(namespace), body=lease, retries=0, throttle_retries=0,
                                      timeout=timeout)
        return out

    async def update_lease(self, namespace: str, name: str, lease: Obj, timeout: float = DEFAULT_TIMEOUT) -> Obj:
        """PUT the Lease; ``metadata.resourceVersion`` makes it optimistic. Raises Conflict when stale."""
        out: Obj = await self.request("PUT", self._lease_path(namespace, name), body=lease, retries=0,
                                      throttle_retries=0, timeout=timeout)
        return out

    # -- streaming reads (the reflector, py_scheduler.app.client.reflector) ----------------------------------
    async def list_pages(self, path: str, *, field_selector: str | None = None, label_selector: str | None = None,
                         limit: int = 500, timeout: float = 120.0) -> AsyncIterator[tuple[list[Obj], str]]:
        """LIST a collection page by page: yields each page's items (``kind``/``apiVersion`` filled
        in) with the list's resourceVersion, so a caller can apply a page and drop it before the next
        one arrives (no second copy of a 30000-Pod list next to the store). A paged LIST is one
        consistent snapshot: every page carries the resourceVersion of the first.

        Upstream: ``client-go/tools/pager`` as used by ``tools/cache/reflector.go`` (``list``).

        Raises:
            KubeError: NotFound when the API does not exist on this cluster; a ``410`` when a continue
            token expired (the caller starts over).
        """
        cont: str | None = None
        rv = ""
        while True:
            doc = await self.request("GET", path, query={"limit": limit, "continue": cont,
                                                         "fieldSelector": field_selector,
                                                         "labelSelector": label_selector}, timeout=timeout,
                                    local=True)
            kind = str(doc.get("kind") or "")
            api_version = str(doc.get("apiVersion") or "")
            item_kind = kind[:-4] if kind.endswith("List") else kind
            items: list[Obj] = doc.get("items") or []
            if not isinstance(items, list):
                raise KubeError(0, "DecodeError", f"LIST items is not a list: {str(items)[:200]}", "GET", path)
            for it in items:
                if isinstance(it, dict):  # anything else is the caller's to skip
                    it.setdefault("kind", item_kind)
                    it.setdefault("apiVersion", api_version)
            meta = doc.get("metadata") or {}
            rv = rv or str(meta.get("resourceVersion") or "")
            cont = meta.get("continue") or None
            del doc
            yield items, rv
            if not cont:
                return

    async def watch(self, path: str, query: Mapping[str, Any], *, read_timeout: float = 400.0,
                    connect_timeout: float = DEFAULT_TIMEOUT) -> AsyncIterator[Obj]:
        """One WATCH request (``?watch=true`` plus ``query``: ``resourceVersion``,
        ``allowWatchBookmarks``, ``timeoutSeconds``, ``fieldSelector``...): yields each event
        (``{"type": ADDED|MODIFIED|DELETED|BOOKMARK|ERROR, "object": {...}}``) decoded with orjson as
        its line arrives; returns when the server ends the stream (its ``timeoutSeconds``).

        Same server, TLS and credentials as :meth:`request` (the kubernetes_asyncio ApiClient, whose
        auth settings run the token refresh hook), one token of the client-side rate limit (client-go
        throttles watches too), no retries: the caller (the reflector) decides how to resume. Lines of
        any length are accepted (aiohttp's ``readline`` refuses lines over 128 KiB; a Pod can be larger).
        ``read_timeout`` seconds without a byte (the server sends bookmarks about once a minute) count
        as a broken connection.

        Raises:
            KubeError: the HTTP status of a refused watch (``410`` for a too old resourceVersion), or
            status 0 for a connection error, a timeout, or a line that is not JSON.
        """
        await self.limiter.acquire()
        q = [("watch", "true")] + [(k, str(v).lower() if isinstance(v, bool) else str(v))
                                   for k, v in query.items() if v is not None]
        try:
            resp = await internals.call_api(
                self.api, path, "GET", query=q, headers={"Accept": JSON},
                timeout=aiohttp.ClientTimeout(total=None, connect=connect_timeout, sock_read=read_timeout))
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise KubeError(0, type(exc).__name__, str(exc) or type(exc).__name__, "WATCH", path) from exc
        done = False
        try:
            if not 200 <= resp.status < 300:
                raise error_for(resp.status, await resp.read(), "WATCH", path)
            async for line in split_lines(resp.content.iter_any()):
                try:
                    event = loads(line)
                except ValueError as exc:
                    raise KubeError(0, "DecodeError", f"watch event is not JSON: {line[:200]!r}", "WATCH",
                                    path) from exc
                yield event
            done = True
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise KubeError(0, type(exc).__name__, str(exc) or type(exc).__name__, "WATCH", path) from exc
        finally:
            if done:
                resp.release()
            else:
                resp.close()  # mid-stream (stopped, broken, refused): the connection cannot be reused


class Fenced(KubeError):
    """A write refused before it was sent: the fence said this replica may no longer write (its
    leader lease could have expired), or the Binding's target Node is gone. ``reason`` says which."""


class RequestProcessGone(Exception):
    """The request process ended (or was not ready) before it answered: the request may or may not
    have been sent, unless ``unsent``."""

    def __init__(self, message: str, *, unsent: bool = False) -> None:
        super().__init__(message)
        self.unsent = unsent

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled with ``unsent`` (the child refuses requests with it while it stops)."""
        return (self.__class__, (str(self),), {"unsent": self.unsent})


class RequestSender(Protocol):
    """Where :meth:`Kube.request` hands its requests when ``--request-process`` is on: implemented
    by :class:`py_scheduler.app.process.request_process.RequestProcess`."""

    ready: bool
    """Whether :meth:`send` may be used now."""

    def start(self) -> None:
        """Start it (once); :attr:`ready` is set when it can send."""

    async def send(self, purpose: str, method: str, path: str, options: dict[str, Any],
                   fence: Callable[[], None] | None, event_limiter: bool) -> Any:
        """The decoded answer of ``method path`` sent by its client for ``purpose``; raises the
        request's KubeError, what ``fence`` raises, or :class:`RequestProcessGone`."""

    async def close(self) -> None:
        """Stop it; later requests go out from the caller."""

    def lease(self, until: float) -> None:
        """The leader fence's deadline changed (``CLOCK_MONOTONIC`` seconds; -inf: not leading)."""


class WriteFence:
    """:class:`KubeAPIClient`'s fence for one write: called right before each attempt, it raises
    :class:`Fenced` when the leader fence says no or (for a Binding to ``node``) the Node is gone."""

    def __init__(self, client: KubeAPIClient, node: str | None = None) -> None:
        self.client = client
        self.node = node

    def __call__(self) -> None:
        c, node = self.client, self.node
        if c.fence is not None and not c.fence():
            raise self.not_leader()
        if node is not None and c.node_exists is not None and not c.node_exists(node):
            raise Fenced(0, "NodeGone", f"node {node!r} was deleted before the Binding was sent")

    def not_leader(self) -> Fenced:
        """The refusal when the leader fence says no."""
        return Fenced(0, "NotLeader", "leader election lease could have expired; "
                                      f"{'not binding' if self.node is not None else 'not writing'}")

    def until(self) -> float:
        """The ``CLOCK_MONOTONIC`` time after which the leader fence refuses (inf: no deadline known)."""
        return float("inf") if self.client.valid_until is None else self.client.valid_until()


class KubeAPIClient:
    """:class:`~py_scheduler.framework.handle.APIClient` over :class:`Kube`: what PreBind and Bind
    plugins write through the Handle.

    Every write is fenced: ``fence()`` (leadership still valid) is asked right before each attempt
    goes on the wire (after the rate limiter and any retry backoff), and a Binding also asks
    ``node_exists(node)`` (the API accepts a Binding to a deleted Node; upstream then relies on
    PodGC), so a process frozen past its Lease, or a Binding that waited past its Node's deletion,
    sends nothing. A refused fence raises :class:`Fenced` (an ``APIError`` with status 0 and reason
    ``NotLeader`` / ``NodeGone``).

    Args:
        kube: the API adapter.
        fence: None or a callable, False when this replica must not write.
        node_exists: None or ``node name -> bool`` (the informers' view).
        valid_until: None or the ``CLOCK_MONOTONIC`` time (seconds) until which ``fence`` holds
            (:meth:`~py_scheduler.app.client.leader.LeaderElector.valid_until`): what the request
            process checks before each attempt, in place of ``fence``.
    """

    def __init__(self, kube: Kube, fence: Callable[[], bool] | None = None,
                 node_exists: Callable[[str], bool] | None = None,
                 valid_until: Callable[[], float] | None = None) -> None:
        self.kube = kube
        self.fence = fence
        self.node_exists = node_exists
        self.valid_until = valid_until

    def _guard(self, node: str | None = None) -> WriteFence:
        return WriteFence(self, node)

    async def get(self, path: str) -> Obj | None:
        try:
            out: Obj = await self.kube.request("GET", path)
        except NotFound:
            return None
        return out

    async def create(self, path: str, obj: Obj) -> Obj:
        guard = self._guard()
        guard()
        out: Obj = await self.kube.request("POST", path, body=obj, fence=guard)
        return out

    async def update(self, path: str, obj: Obj) -> Obj:
        guard = self._guard()
        guard()
        out: Obj = await self.kube.request("PUT", path, body=obj, fence=guard)
        return out

    async def patch(self, path: str, patch: Obj, content_type: str = MERGE_PATCH) -> Obj:
        guard = self._guard()
        guard()
        out: Obj = await self.kube.request("PATCH", path, body=patch, content_type=content_type, fence=guard)
        return out

    async def delete(self, path: str, uid: str | None = None) -> None:
        guard = self._guard()
        guard()
        body: Obj = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if uid:
            body["preconditions"] = {"uid": uid}
        await self.kube.request("DELETE", path, body=body, fence=guard)

    async def bind(self, namespace: str, name: str, uid: str, node_name: str,
                   annotations: Mapping[str, str] | None = None) -> None:
        guard = self._guard(node_name)
        guard()
        await self.kube.bind(namespace, name, uid, node_name, annotations, fence=guard)
