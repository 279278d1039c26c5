"""HTTP endpoints of the live scheduler: ``/metrics``, ``/healthz``, ``/livez``, ``/readyz``.

Upstream: ``cmd/kube-scheduler/app/server.go`` (``newHealthEndpointsAndMetricsHandler``: healthz,
livez and readyz on the secure port together with /metrics) and
``staging/src/k8s.io/apiserver/pkg/server/healthz`` (``ok`` body with 200; a failing check answers
500/503 with the check's name). py-scheduler serves plain HTTP on ``--metrics-bind-address``
(default ``0.0.0.0:10259``); put it behind a NetworkPolicy or a kube-rbac-proxy sidecar if the
metrics must not be readable inside the cluster.

- ``/healthz`` and ``/livez``: 200 ``ok`` as long as the event loop answers (a wedged loop makes the
  kubelet's probe time out, which is the liveness signal).
- ``/readyz``: 200 ``ok`` once ``is_ready()`` is true (informers synced / leader elected, the
  caller decides); 503 ``[-]ready failed`` before.
- ``/metrics``: :data:`py_scheduler.app.metrics.REGISTRY` in the Prometheus text format.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from py_scheduler.app.metrics import REGISTRY

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

    Raises (constructor): ValueError for a malformed ``bind_address``.
    """

    def __init__(self, bind_address: str, is_ready: Callable[[], bool]) -> None:
        self.host, self.port = parse_bind_address(bind_address)
        self._is_ready = is_ready
        self._runner: web.AppRunner | None = None
        self.app = web.Application()
        self.app.router.add_get("/metrics", self._metrics)
        self.app.router.add_get("/healthz", self._ok)
        self.app.router.add_get("/livez", self._ok)
        self.app.router.add_get("/readyz", self._readyz)

    async def start(self) -> None:
        """Bind and serve; afterwards :attr:`port` is the bound port.

        Raises:
            OSError: the address is in use or cannot be bound.
        """
        runner = web.AppRunner(self.app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port)
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
        log.info("serving /metrics, /healthz, /livez, /readyz on %s:%d", self.host, self.port)

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

    async def _metrics(self, _request: web.Request) -> web.Response:
        body = generate_latest(REGISTRY)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})
