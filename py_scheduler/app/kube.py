"""The one typed adapter between py-scheduler and the Kubernetes API (kubernetes_asyncio).

Everything the live process writes goes through :class:`Kube`: the Binding (``pods/binding`` with
``metadata.uid`` set, carrying the annotations Reserve plugins attach; the response body is read raw,
the generated client cannot decode it), ``pods/status`` patches (the PodScheduled condition, ``nominatedNodeName``),
``events.k8s.io/v1`` Events, Pod deletions (preemption victims), the Lease, and the authoritative
LISTs the informers reconcile with. Callers pass and receive plain JSON dicts.

Behaviour (as client-go's rest client + kube-scheduler's client settings):

- client-side rate limit: a token bucket of ``qps`` / ``burst`` (kube-scheduler: 50 / 100), and a
  second one of the same size for Events (kube-scheduler records events through its own client);
- retries with exponential backoff (0.2 s doubling, at most 5 s) on connection errors, timeouts,
  429 (``Retry-After`` honoured) and 5xx, up to ``retries`` extra attempts;
- other errors raise :class:`KubeError` (``NotFound`` for 404, ``Conflict`` for 409) carrying the
  HTTP status, the Status ``reason`` and ``message``.

Credentials come from a kubeconfig file or, without one, the in-cluster service account; tokens are
never logged. :meth:`Kube.connection_info` gives kopf the same endpoint and credentials.

Upstream: ``staging/src/k8s.io/client-go/rest`` (retry on 429/5xx with Retry-After,
``flowcontrol`` token bucket), ``pkg/scheduler/framework/plugins/defaultbinder/default_binder.go``
(the Binding), ``pkg/scheduler/util/utils.go`` (``PatchPodStatus``, ``DeletePod``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import orjson
from aiohttp.helpers import get_env_proxy_for_url
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config
from yarl import URL

from py_scheduler.framework.handle import APIConflict, APIError, APINotFound

log = logging.getLogger("py_scheduler.kube")


def _loads(data: bytes) -> Any:
    """Decode an API response with orjson (faster, and it shares dict-key strings across documents:
    ~25% less memory per cached Pod than ``json.loads``); anything orjson refuses goes to ``json``."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


Obj = dict[str, Any]

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON = "application/json"

DEFAULT_TIMEOUT = 30.0
"""Seconds one request may take before it counts as failed (and is retried)."""


class KubeError(APIError):
    """A failed API call: ``status`` (HTTP, 0 for a connection error), ``reason`` (the Status
    reason, e.g. ``NotFound``, ``Conflict``, ``AlreadyExists``), ``message``. A framework
    :class:`~py_scheduler.framework.handle.APIError`, so plugins handle it without knowing the client."""

    def __init__(self, status: int, reason: str, message: str, method: str = "", path: str = "") -> None:
        super().__init__(status, reason, message)
        self.method = method
        self.path = path
        self.args = (f"{method} {path}: {status} {reason}: {message}" if method else
                     f"{status} {reason}: {message}",)


class NotFound(KubeError, APINotFound):
    """404: the object (or API) does not exist."""


class Conflict(KubeError, APIConflict):
    """409: a conflict (stale resourceVersion, a Pod already bound, an object that already exists)."""


def _error_for(status: int, body: bytes, method: str, path: str) -> KubeError:
    reason, message = "", body.decode("utf-8", "replace")[:2000]
    try:
        doc = json.loads(body)
        if isinstance(doc, dict):
            reason = str(doc.get("reason") or "")
            message = str(doc.get("message") or message)
    except ValueError:
        pass
    cls = NotFound if status == 404 else Conflict if status == 409 else KubeError
    return cls(status, reason, message, method, path)


class RateLimiter:
    """A token bucket: ``qps`` tokens per second, at most ``burst`` stored (``qps <= 0``: unlimited)."""

    def __init__(self, qps: float, burst: int, now: Any = time.monotonic) -> None:
        self.qps = qps
        self.burst = max(int(burst), 1)
        self._tokens = float(self.burst)
        self._now = now
        self._last = now()
        self._lock = asyncio.Lock()

    def _refill(self) -> None:
        t = self._now()
        self._tokens = min(float(self.burst), self._tokens + (t - self._last) * self.qps)
        self._last = t

    async def acquire(self) -> None:
        """Wait for a token."""
        if self.qps <= 0:
            return
        async with self._lock:
            self._refill()
            if self._tokens < 1:
                await asyncio.sleep((1 - self._tokens) / self.qps)
                self._refill()
            self._tokens -= 1


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where and how to connect (paths to PEM files; the token is kept out of ``repr``)."""

    server: str
    ca_path: str | None
    cert_path: str | None
    key_path: str | None
    insecure: bool
    token: str | None = None
    tls_server_name: str | None = None

    def __repr__(self) -> str:
        return f"Endpoint(server={self.server!r}, token={'<set>' if self.token else None})"


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
    if hasattr(session, "_trust_env"):
        session._trust_env = False


def _q(s: str) -> str:
    return quote(s, safe="")


class Kube:
    """The API adapter. Build with :meth:`connect`; close with :meth:`close`.

    Args:
        api: a kubernetes_asyncio ApiClient (its Configuration holds the credentials).
        qps, burst: client-side rate limit.
        retries: extra attempts for retryable failures.
    """

    initial_backoff = 0.2
    """Seconds before the first retry (doubling, at most 5 s)."""

    def __init__(self, api: k8s_client.ApiClient, qps: float = 50.0, burst: int = 100, retries: int = 5) -> None:
        self.api = api
        self.limiter = RateLimiter(qps, burst)
        self.event_limiter = RateLimiter(qps, burst)
        self.retries = retries

    @classmethod
    async def connect(cls, kubeconfig: Path | str | None, qps: float = 50.0, burst: int = 100,
                      retries: int = 5) -> Kube:
        """Load credentials from ``kubeconfig`` (its current context) or in-cluster when None.

        Raises:
            kubernetes_asyncio.config.ConfigException: unusable kubeconfig / not in a cluster.
        """
        cfg = k8s_client.Configuration()
        if kubeconfig is not None:
            await k8s_config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
        else:
            k8s_config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        api = k8s_client.ApiClient(configuration=cfg)
        resolve_env_once(api)
        return cls(api, qps=qps, burst=burst, retries=retries)

    async def close(self) -> None:
        await self.api.close()

    def endpoint(self) -> Endpoint:
        """The server and credentials (for kopf's login handler)."""
        cfg = self.api.configuration
        token = (cfg.api_key or {}).get("BearerToken")
        if isinstance(token, str) and token.lower().startswith("bearer "):
            token = token[7:]
        return Endpoint(server=str(cfg.host), ca_path=cfg.ssl_ca_cert, cert_path=cfg.cert_file,
                        key_path=cfg.key_file, insecure=not cfg.verify_ssl,
                        token=token if isinstance(token, str) and token else None,
                        tls_server_name=getattr(cfg, "tls_server_name", None))

    async def fresh_endpoint(self) -> Endpoint:
        """:meth:`endpoint` after running the token refresh hook (in-cluster tokens rotate)."""
        cfg = self.api.configuration
        hook = getattr(cfg, "refresh_api_key_hook", None)
        if hook is not None:
            res = hook(cfg)
            if asyncio.iscoroutine(res):
                await res
        return self.endpoint()

    # -- the one request path ------------------------------------------------------------------------
    async def request(self, method: str, path: str, *, body: Any = None, query: Mapping[str, Any] | None = None,
                      content_type: str = JSON, retries: int | None = None,
                      timeout: float = DEFAULT_TIMEOUT, limiter: RateLimiter | None = None,
                      fence: Callable[[], None] | None = None) -> Any:
        """Send one API request and return the decoded JSON body (None for an empty body).

        ``fence`` (when given) is called right before each attempt is sent, after the rate limiter
        and any retry backoff: whatever it raises aborts the request unsent. Bindings use it so that
        a process frozen (SIGSTOP, a long GC pause) while waiting for a token or a retry never sends
        a write once its leader lease could have expired.

        Raises:
            NotFound, Conflict, KubeError: the final failure after retries; whatever ``fence`` raises.
        """
        attempts = (self.retries if retries is None else retries) + 1
        delay = self.initial_backoff
        last: KubeError | None = None
        q = [(k, str(v).lower() if isinstance(v, bool) else str(v)) for k, v in (query or {}).items()
             if v is not None]
        for attempt in range(attempts):
            await (limiter or self.limiter).acquire()
            if fence is not None:
                fence()
            retry_after: float | None = None
            try:
                resp = await self.api.call_api(
                    path, method, query_params=q, header_params={"Content-Type": content_type, "Accept": JSON},
                    body=body, auth_settings=["BearerToken"], _preload_content=False,
                    _request_timeout=aiohttp.ClientTimeout(total=timeout))
                try:
                    data = await resp.read()
                    status = resp.status
                    if status == 429:
                        ra = resp.headers.get("Retry-After")
                        retry_after = float(ra) if ra and ra.isdigit() else None
                finally:
                    resp.release()
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                last = KubeError(0, type(exc).__name__, str(exc) or type(exc).__name__, method, path)
            else:
                if 200 <= status < 300:
                    return _loads(data) if data else None
                err = _error_for(status, data, method, path)
                if status != 429 and status < 500:
                    raise err
                last = err
            if attempt + 1 < attempts:
                wait = retry_after if retry_after is not None else delay
                log.debug("retrying %s %s after %s (attempt %d/%d, in %.1fs)", method, path, last, attempt + 1,
                          attempts, wait)
                await asyncio.sleep(wait)
                delay = min(delay * 2, 5.0)
        assert last is not None
        raise last

    # -- reads ---------------------------------------------------------------------------------------
    async def list_objects(self, path: str, *, field_selector: str | None = None, label_selector: str | None = None,
                           limit: int = 500, timeout: float = 120.0) -> tuple[list[Obj], str]:
        """LIST a collection (``/api/v1/pods``, ``/apis/apps/v1/replicasets``) in pages
        (:meth:`list_pages`, collected); returns the items (with ``kind``/``apiVersion`` filled in;
        anything that is not an object is dropped) and the list's resourceVersion.

        Raises:
            KubeError: NotFound when the API does not exist on this cluster.
        """
        items: list[Obj] = []
        list_rv = ""
        async for page, page_rv in self.list_pages(path, field_selector=field_selector,
                                                   label_selector=label_selector, limit=limit, timeout=timeout):
            items.extend(it for it in page if isinstance(it, dict))
            list_rv = page_rv
        return items, list_rv

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
        under the same name; ``annotations`` (when any) ride in the Binding's metadata and the API
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
                           fence=fence)

    async def patch_pod_status(self, namespace: str, name: str, patch: Obj) -> Obj:
        """Strategic-merge-patch ``pods/status`` (``util.PatchPodStatus``: conditions merge by type).

        Raises:
            NotFound, KubeError.
        """
        pod: Obj = await self.request("PATCH", f"/api/v1/namespaces/{_q(namespace)}/pods/{_q(name)}/status",
                                      body=patch, content_type=STRATEGIC_MERGE_PATCH)
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
        ev: Obj = await self.request("POST", f"/apis/events.k8s.io/v1/namespaces/{_q(namespace)}/events",
                                     body=event, retries=2, limiter=self.event_limiter)
        return ev

    async def patch_event(self, namespace: str, name: str, patch: Obj) -> Obj:
        """Merge-patch an Event (its ``series``).

        Raises:
            NotFound, KubeError.
        """
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
            lease: Obj = await self.request("GET", self._lease_path(namespace, name), retries=0, timeout=timeout)
        except NotFound:
            return None
        return lease

    async def create_lease(self, namespace: str, lease: Obj, timeout: float = DEFAULT_TIMEOUT) -> Obj:
        """Create the Lease. Raises Conflict when it already exists."""
        out: Obj = await self.request("POST", self._lease_path(namespace), body=lease, retries=0, timeout=timeout)
        return out

    async def update_lease(self, namespace: str, name: str, lease: Obj, timeout: float = DEFAULT_TIMEOUT) -> Obj:
        """PUT the Lease; ``metadata.resourceVersion`` makes it optimistic. Raises Conflict when stale."""
        out: Obj = await self.request("PUT", self._lease_path(namespace, name), body=lease, retries=0,
                                      timeout=timeout)
        return out

    # -- streaming reads (the reflector, py_scheduler.app.reflector) ----------------------------------
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
                                                         "labelSelector": label_selector}, timeout=timeout)
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
            resp = await self.api.call_api(
                path, "GET", query_params=q, header_params={"Accept": JSON}, auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=aiohttp.ClientTimeout(total=None, connect=connect_timeout, sock_read=read_timeout))
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise KubeError(0, type(exc).__name__, str(exc) or type(exc).__name__, "WATCH", path) from exc
        done = False
        try:
            if not 200 <= resp.status < 300:
                raise _error_for(resp.status, await resp.read(), "WATCH", path)
            async for line in split_lines(resp.content.iter_any()):
                try:
                    event = _loads(line)
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


async def split_lines(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """Newline-delimited records from a byte stream (a watch body), of any length; blank lines are
    skipped and a last record without a newline is still yielded. A record split over many chunks is
    joined once (no quadratic re-concatenation)."""
    parts: list[bytes] = []
    async for chunk in chunks:
        start = 0
        while True:
            nl = chunk.find(b"\n", start)
            if nl < 0:
                if start < len(chunk):
                    parts.append(chunk[start:])
                break
            piece = chunk[start:nl]
            if parts:
                parts.append(piece)
                piece = b"".join(parts)
                parts = []
            if piece.strip():
                yield piece
            start = nl + 1
    if parts:
        piece = b"".join(parts)
        if piece.strip():
            yield piece


class Fenced(KubeError):
    """A write refused before it was sent: the fence said this replica may no longer write (its
    leader lease could have expired), or the Binding's target Node is gone. ``reason`` says which."""


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
    """

    def __init__(self, kube: Kube, fence: Callable[[], bool] | None = None,
                 node_exists: Callable[[str], bool] | None = None) -> None:
        self.kube = kube
        self.fence = fence
        self.node_exists = node_exists

    def _guard(self, node: str | None = None) -> Callable[[], None]:
        def check() -> None:
            if self.fence is not None and not self.fence():
                raise Fenced(0, "NotLeader", "leader election lease could have expired; not writing")
            if node is not None and self.node_exists is not None and not self.node_exists(node):
                raise Fenced(0, "NodeGone", f"node {node!r} was deleted before the Binding was sent")
        return check

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
