"""HTTP endpoints of the live scheduler: ``/metrics``, ``/healthz``, ``/livez``, ``/readyz``.

Upstream: ``cmd/kube-scheduler/app/server.go`` (``newHealthEndpointsAndMetricsHandler``: healthz,
livez and readyz on the secure port together with /metrics) and
``staging/src/k8s.io/apiserver/pkg/server/healthz`` (``ok`` body with 200; a failing check answers
500/503 with the check's name). py-scheduler serves HTTPS on ``--metrics-bind-address`` (default
``0.0.0.0:10259``) with delegated authentication and authorization for every path but the health
checks (:mod:`py_scheduler.app.secure`); plain HTTP without either only with ``--plain-http``.

Extending: :meth:`HealthServer.add_get` (before :meth:`HealthServer.start`) adds a route; it goes
through the same authentication and authorization as ``/metrics`` unless its path is one of the
always-allowed ones.

- ``/healthz`` and ``/livez``: 200 ``ok`` as long as the event loop answers (a wedged loop makes the
  kubelet's probe time out, which is the liveness signal).
- ``/readyz``: 200 ``ok`` once ``is_ready()`` is true (informers synced / leader elected, the
  caller decides); 503 ``[-]ready failed`` before.
- ``/metrics``: :data:`py_scheduler.app.metrics.REGISTRY` through prometheus-client's own aiohttp
  handler (the Prometheus text format, or OpenMetrics when the scraper asks for it; gzip when
  accepted).
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Awaitable, Callable

from aiohttp import web
from prometheus_client.aiohttp import make_aiohttp_handler

from py_scheduler.app.metrics import REGISTRY
from py_scheduler.app.secure import DelegatingAuth

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

log = logging.getLogger("py_scheduler.health")


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
        ssl_context: serve HTTPS with it (:func:`py_scheduler.app.secure.server_ssl_context`);
            None serves plain HTTP.
        auth: delegated authentication and authorization of every request whose path it does not
            always allow; None serves everything to anyone (only with ``--plain-http``).

    Raises (constructor): ValueError for a malformed ``bind_address``.
    """

    def __init__(self, bind_address: str, is_ready: Callable[[], bool], *,
                 ssl_context: ssl.SSLContext | None = None, auth: DelegatingAuth | None = None) -> None:
        self.host, self.port = parse_bind_address(bind_address)
        self._is_ready = is_ready
        self._runner: web.AppRunner | None = None
        self.ssl_context = ssl_context
        self.auth = auth
        self.app = web.Application(middlewares=[auth.middleware()] if auth is not None else [])
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
        runner = web.AppRunner(self.app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port, ssl_context=self.ssl_context)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        server = site._server
        sockets = getattr(server, "sockets", None) or []
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
