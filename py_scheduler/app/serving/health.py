"""HTTP endpoints of the live scheduler: ``/metrics``, ``/healthz``, ``/livez``, ``/readyz``.

Upstream: ``cmd/kube-scheduler/app/server.go`` (``newHealthEndpointsAndMetricsHandler``: healthz,
livez and readyz on the secure port together with /metrics) and
``staging/src/k8s.io/apiserver/pkg/server/healthz`` (``ok`` body with 200; a failing check answers
500/503 with the check's name). py-scheduler serves HTTPS on ``--metrics-bind-address`` (default
``0.0.0.0:10259``) with delegated authentication and authorization for every path but the health
checks (:mod:`py_scheduler.app.serving.secure`); plain HTTP without either only with ``--plain-http``.

Connection limits (:class:`ConnectionLimits`; aiohttp's defaults keep an idle connection 3630 s and
wait for a request's header without a deadline): a request's header must arrive within
``header_timeout`` (30 s, upstream's ``ReadHeaderTimeout`` of the secure server; the TLS handshake has
the same bound), an idle keep-alive connection is closed after ``keepalive_timeout`` (75 s, Go's
TCP keep-alive period and the order of upstream's idle timeouts), and at most ``max_connections``
(1024) are open at once: one more is closed as soon as it is accepted. A request line or header
field is at most 8190 bytes, at most 128 fields (aiohttp's ``max_line_size`` / ``max_field_size``
/ ``max_headers``, kept). The soft ``RLIMIT_NOFILE`` is raised to the hard limit at start
(:func:`raise_nofile_limit`, as Go's runtime does), so that open connections cannot take the
descriptors the scheduler's own API connections need.

Extending: :meth:`HealthServer.add_get` (before :meth:`HealthServer.start`) adds a route; it goes
through the same authentication and authorization as ``/metrics`` unless its path is one of the
always-allowed ones.

- ``/healthz`` and ``/livez``: 200 ``ok`` as long as the event loop answers (a wedged loop makes the
  kubelet's probe time out, which is the liveness signal).
- ``/readyz``: 200 ``ok`` once ``is_ready()`` is true (informers synced / leader elected, the
  caller decides); 503 ``[-]ready failed`` before.
- ``/metrics``: :data:`py_scheduler.app.telemetry.metrics.REGISTRY` through prometheus-client's own aiohttp
  handler (the Prometheus text format, or OpenMetrics when the scraper asks for it; gzip when
  accepted).
"""

from __future__ import annotations

import asyncio
import logging
import resource
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, cast

from aiohttp import web
from prometheus_client.aiohttp import make_aiohttp_handler

from py_scheduler.app.serving.secure import DelegatingAuth, security_headers
from py_scheduler.app.telemetry.metrics import REGISTRY

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

log = logging.getLogger("py_scheduler.health")


def raise_nofile_limit() -> tuple[int, int]:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit (Go's runtime does so at start, ``os``
    ``rlimit.go``; Python does not); returns the ``(soft, hard)`` in force after. A failure leaves
    the limit as it was (logged)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as exc:
            log.warning("cannot raise the open-file limit from %d to %d: %s", soft, hard, exc)
    return soft, hard


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """Bounds on the server's connections (module docstring): seconds a request's header may take
    to arrive (and a TLS handshake), seconds an idle keep-alive connection is kept, connections open
    at once."""

    header_timeout: float = 30.0
    keepalive_timeout: float = 75.0
    max_connections: int = 1024


class _Conn(asyncio.Protocol):
    """One accepted connection: aiohttp's request handler behind a header deadline and the
    connection count of :class:`_Conns`."""

    def __init__(self, conns: _Conns, inner: Any) -> None:
        self.conns, self.inner = conns, inner
        self.transport: asyncio.Transport | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.busy = False  # a request's header arrived; its handler runs

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        conn = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass asyncio's
        if len(self.conns.open) >= self.conns.limits.max_connections:
            self.conns.refused += 1
            conn.abort()
            return
        self.transport = conn
        self.conns.open[transport] = self
        self.arm()
        self.inner.connection_made(transport)

    def arm(self) -> None:
        """Start the header deadline (a new connection, or the first byte of the next request)."""
        if self.timer is None:
            self.timer = asyncio.get_running_loop().call_later(self.conns.limits.header_timeout, self._expire)

    def disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _expire(self) -> None:
        self.timer = None
        if self.transport is not None and not self.busy:
            self.conns.expired += 1
            self.transport.abort()

    def data_received(self, data: bytes) -> None:
        if not self.busy:
            self.arm()
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        result: bool | None = self.inner.eof_received()
        return result

    def connection_lost(self, exc: Exception | None) -> None:
        self.disarm()
        if self.transport is not None:
            self.conns.open.pop(self.transport, None)
            self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


class _Conns:
    """The open connections of one server and the middleware that marks a request's header as
    arrived (the handler runs: the header deadline stops until the response is written)."""

    def __init__(self, limits: ConnectionLimits) -> None:
        self.limits = limits
        self.open: dict[asyncio.BaseTransport, _Conn] = {}
        self.refused = self.expired = 0

    def middleware(self) -> Any:
        @web.middleware
        async def header_arrived(request: web.Request, handler: Handler) -> web.StreamResponse:
            conn = self.open.get(request.transport) if request.transport is not None else None
            if conn is None:
                return await handler(request)
            conn.busy = True
            conn.disarm()
            try:
                return await handler(request)
            finally:
                conn.busy = False  # the next request's first byte starts the deadline again

        return header_arrived


def parse_bind_address(bind_address: str) -> tuple[str, int]:
    """Split ``host:port`` (``[::1]:10259`` for IPv6; ``:10259`` binds every interface).

    Raises:
        ValueError: no port, a non-numeric port, or a port outside 0..65535 (0 = pick a free port).
    """
    host, sep, port_s = bind_address.rpartition(":")
    if not sep:
        raise ValueError(f"bind address {bind_address!r}: want host:port")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        port = int(port_s)
    except ValueError:
        raise ValueError(f"bind address {bind_address!r}: port {port_s!r} is not a number") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"bind address {bind_address!r}: port {port} out of range 0..65535")
    return host or "0.0.0.0", port


class HealthServer:
    """An aiohttp server for the health and metrics endpoints.

    Args:
        bind_address: ``host:port``; port 0 picks a free port, exposed as :attr:`port` after
            :meth:`start`.
        is_ready: called on every ``/readyz`` request; must be cheap and must not raise (an
            exception counts as not ready).
        ssl_context: serve HTTPS with it (:func:`py_scheduler.app.serving.secure.server_ssl_context`);
            None serves plain HTTP.
        auth: delegated authentication and authorization of every request whose path it does not
            always allow; None serves everything to anyone (only with ``--plain-http``).
        limits: the connection bounds (:class:`ConnectionLimits`).

    Raises (constructor): ValueError for a malformed ``bind_address``.
    """

    def __init__(self, bind_address: str, is_ready: Callable[[], bool], *,
                 ssl_context: ssl.SSLContext | None = None, auth: DelegatingAuth | None = None,
                 limits: ConnectionLimits | None = None) -> None:
        self.host, self.port = parse_bind_address(bind_address)
        self._is_ready = is_ready
        self._runner: web.AppRunner | None = None
        self._server: asyncio.AbstractServer | None = None
        self.ssl_context = ssl_context
        self.auth = auth
        self.conns = _Conns(limits or ConnectionLimits())
        middlewares = [self.conns.middleware(), security_headers]
        self.app = web.Application(middlewares=[*middlewares, auth.middleware()] if auth is not None else middlewares)
        self.paths: list[str] = []
        self.add_get("/metrics", make_aiohttp_handler(REGISTRY))
        self.add_get("/healthz", self._ok)
        self.add_get("/livez", self._ok)
        self.add_get("/readyz", self._readyz)

    @property
    def scheme(self) -> str:
        return "https" if self.ssl_context is not None else "http"

    def add_get(self, path: str, handler: Handler) -> None:
        """Serve ``GET path`` (and HEAD) with ``handler``; call before :meth:`start`. Unless ``path``
        is always allowed, only users the API server authorizes to ``get`` it reach ``handler``."""
        self.app.router.add_get(path, handler)
        self.paths.append(path)

    async def start(self) -> None:
        """Bind and serve; afterwards :attr:`port` is the bound port.

        Raises:
            OSError: the address is in use or cannot be bound.
        """
        limits = self.conns.limits
        runner = web.AppRunner(self.app, access_log=None, keepalive_timeout=limits.keepalive_timeout)
        await runner.setup()
        handler = runner.server
        assert handler is not None
        try:  # aiohttp's TCPSite, with each connection behind the limits (_Conn)
            self._server = await asyncio.get_running_loop().create_server(
                lambda: _Conn(self.conns, handler()), self.host, self.port, ssl=self.ssl_context,
                ssl_handshake_timeout=limits.header_timeout if self.ssl_context is not None else None,
                reuse_address=True, backlog=min(limits.max_connections, 4096))  # Go listens with somaxconn
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        sockets = list(self._server.sockets or ())
        if sockets:
            self.port = int(sockets[0].getsockname()[1])
        mode = ("https, delegated authentication and authorization" if self.auth is not None
                else f"{self.scheme}, no authentication")
        extra = [p for p in self.paths if p not in ("/metrics", "/healthz", "/livez", "/readyz")]
        # the first part of this line is stable: tests and tools read the port from it
        log.info("serving /metrics, /healthz, /livez, /readyz on %s:%d (%s)%s", self.host, self.port, mode,
                 f" and {', '.join(extra)}" if extra else "")

    async def stop(self) -> None:
        """Stop serving (idempotent)."""
        if self._server is not None:
            self._server.close()
            self._server = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _ok(self, _request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _readyz(self, _request: web.Request) -> web.Response:
        try:
            ready = bool(self._is_ready())
        except Exception:
            log.exception("readiness check raised")
            ready = False
        if ready:
            return web.Response(text="ok")
        return web.Response(status=503, text="[-]ready failed: reason withheld\nreadyz check failed\n")
