"""The one login path of the live process: a kubeconfig (or the in-cluster service account) becomes a
:class:`kopf.ConnectionInfo`, and the API adapter's client is built from that ConnectionInfo.

:func:`load_connection_info` reads the credentials the way kube-scheduler's ``--kubeconfig`` does
(kubernetes_asyncio's loaders: the current context of the file, or ``KUBERNETES_SERVICE_HOST`` /
``_PORT`` plus the service account's token and CA when no file is given) and maps them onto kopf's
connection record, as kopf's own ``login_via_async_client`` piggybacks on kubernetes_asyncio, but for
the file ``py-scheduler run`` was given rather than the library's default. kopf's ``@on.login``
handler (:mod:`py_scheduler.app.process.lifecycle`) returns it; :class:`Credentials` keeps the latest one, and
:func:`api_configuration` turns it into the ``kubernetes_asyncio`` Configuration behind
:class:`py_scheduler.app.client.kube.Kube`. There is no second way in.

Rotation: an in-cluster token is re-read from its file when its ConnectionInfo expires, one minute
after it was read (client-go's ``transport.NewCachedFileTokenSource`` period; kubernetes_asyncio's
``TOKEN_REFRESH_PERIOD``); an exec plugin's token when the plugin's ``expirationTimestamp`` passes.
The client asks :meth:`Credentials.current` before each request (its token refresh hook), which logs
in again once the record has expired; kopf's vault expires its copy at the same time and runs the
``@on.login`` handler again.

Upstream: ``staging/src/k8s.io/client-go/tools/clientcmd`` (kubeconfig), ``client-go/rest``
``InClusterConfig`` (the service account files), ``client-go/transport/token_source.go``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
import weakref
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import kopf
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config

log = logging.getLogger("py_scheduler.credentials")

IN_CLUSTER_TOKEN_LIFETIME = datetime.timedelta(minutes=1)
"""How long an in-cluster token read from its file is used before the file is read again."""

RELOGIN_RETRY = datetime.timedelta(seconds=10)
"""After a failed re-login, the old credentials are kept this long before the next attempt."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ClusterConnection(kopf.ConnectionInfo):
    """:class:`kopf.ConnectionInfo` plus the kubeconfig's ``tls-server-name`` (the name the API
    server's certificate is checked against when it differs from the host in ``server``), which kopf's
    record has no field for. kopf's vault stores and compares it as any ConnectionInfo; kopf's own
    client ignores the extra field."""

    tls_server_name: str | None = None


def _split_authorization(header: str | None) -> tuple[str | None, str | None]:
    """``"Bearer abc"`` -> ``("Bearer", "abc")``; ``"abc"`` -> ``(None, "abc")`` (RFC 7235 credentials)."""
    if not header:
        return None, None
    scheme, sep, token = header.partition(" ")
    return (scheme, token) if sep else (None, scheme)


async def load_connection_info(kubeconfig: Path | str | None) -> ClusterConnection:
    """Read the credentials: the current context of ``kubeconfig``, or in-cluster when None.

    Client certificates and CAs given inline (``*-data``) are written to temporary files by
    kubernetes_asyncio, so the record carries paths. ``expiration`` is set for credentials that
    rotate (in-cluster tokens, exec plugins that say when their token expires), else None.

    Raises:
        kubernetes_asyncio.config.ConfigException: an unusable kubeconfig, or not in a cluster.
        OSError, yaml.YAMLError: the file cannot be read or parsed.
    """
    cfg = k8s_client.Configuration()
    expiration: datetime.datetime | None = None
    if kubeconfig is not None:
        loader = await k8s_config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
        expiry = getattr(loader, "exec_plugin_expiry", None)
        if isinstance(expiry, datetime.datetime):
            expiration = expiry
    else:
        # No refresh hook of kubernetes_asyncio's own: the token is re-read through this function.
        k8s_config.load_incluster_config(client_configuration=cfg, try_refresh_token=False)  # type: ignore[no-untyped-call]
        expiration = datetime.datetime.now(datetime.UTC) + IN_CLUSTER_TOKEN_LIFETIME
    scheme, token = _split_authorization((cfg.api_key or {}).get("BearerToken"))
    return ClusterConnection(
        server=str(cfg.host),
        ca_path=cfg.ssl_ca_cert or None,
        insecure=not cfg.verify_ssl,
        username=cfg.username or None,
        password=cfg.password or None,
        scheme=scheme,
        token=token,
        certificate_path=cfg.cert_file or None,
        private_key_path=cfg.key_file or None,
        proxy_url=cfg.proxy or None,
        expiration=expiration,
        tls_server_name=getattr(cfg, "tls_server_name", None) or None,
    )


def expired(info: kopf.ConnectionInfo, now: datetime.datetime) -> bool:
    """Whether ``info`` has expired at ``now`` (a naive ``expiration`` is UTC, as kopf reads it)."""
    exp = info.expiration
    if exp is None:
        return False
    if exp.tzinfo is None:  # kopf's rule: a naive expiration is UTC
        exp = exp.replace(tzinfo=datetime.UTC)
    return now >= exp


class Credentials:
    """The latest :class:`kopf.ConnectionInfo` of the one login path.

    Args:
        login: reads the credentials afresh (:func:`load_connection_info` bound to the kubeconfig).

    Both kopf's ``@on.login`` handler and the API client go through :meth:`login`; the client's token
    refresh hook calls :meth:`current` before every request, which costs one clock read unless the
    record has expired.
    """

    def __init__(self, login: Callable[[], Awaitable[kopf.ConnectionInfo]]) -> None:
        self._login = login
        self._info: kopf.ConnectionInfo | None = None
        self._locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = weakref.WeakKeyDictionary()
        """One lock per event loop (an asyncio lock belongs to one loop; tests run several); two
        loops may each log in once, which is harmless."""

    @property
    def info(self) -> kopf.ConnectionInfo | None:
        """The latest record (None before the first :meth:`login`)."""
        return self._info

    async def login(self) -> kopf.ConnectionInfo:
        """Read the credentials afresh and keep them.

        Raises:
            whatever ``login`` raises (the previous record is kept).
        """
        info = await self._login()
        self._info = info
        return info

    async def current(self) -> kopf.ConnectionInfo:
        """The latest record; logged in again first when it has expired. A failed re-login keeps
        the old record (the API server decides whether it still works) for :data:`RELOGIN_RETRY`,
        logging a warning.

        Raises:
            RuntimeError: :meth:`login` never succeeded.
        """
        info = self._info
        if info is None:
            raise RuntimeError("no credentials yet: login() has not succeeded")
        if not expired(info, datetime.datetime.now(datetime.UTC)):
            return info
        lock = self._locks.setdefault(asyncio.get_running_loop(), asyncio.Lock())
        async with lock:
            info = self._info
            assert info is not None
            now = datetime.datetime.now(datetime.UTC)
            if not expired(info, now):  # another request logged in meanwhile
                return info
            try:
                return await self.login()
            except Exception as exc:
                log.warning("cannot refresh the client credentials, keeping the old ones for %ss: %s",
                            int(RELOGIN_RETRY.total_seconds()), exc)
                self._info = dataclasses.replace(info, expiration=now + RELOGIN_RETRY)
                return self._info


def api_configuration(info: kopf.ConnectionInfo, credentials: Credentials | None = None) -> k8s_client.Configuration:
    """The kubernetes_asyncio Configuration for ``info``: server, CA, client certificate, the
    ``Authorization`` header (bearer token, or whatever scheme the record names), proxy and TLS
    server name. With ``credentials``, a token refresh hook keeps the header at
    ``credentials.current()`` (so a rotated token reaches every later request).

    Raises:
        ValueError: the record carries a CA, certificate or key as data rather than a path
            (:func:`load_connection_info` never does: kubernetes_asyncio writes them to files).
    """
    if info.ca_data or info.certificate_data or info.private_key_data:
        raise ValueError("ConnectionInfo with inline CA / certificate / key data: paths expected")
    cfg = k8s_client.Configuration(host=info.server)
    cfg.ssl_ca_cert = str(info.ca_path) if info.ca_path else None
    cfg.cert_file = str(info.certificate_path) if info.certificate_path else None
    cfg.key_file = str(info.private_key_path) if info.private_key_path else None
    cfg.verify_ssl = not info.insecure
    cfg.proxy = info.proxy_url
    cfg.username = info.username or ""
    cfg.password = info.password or ""
    cfg.tls_server_name = getattr(info, "tls_server_name", None)
    header = _authorization(info)
    if header:
        cfg.api_key["BearerToken"] = header
    if credentials is not None:
        async def refresh(c: Any) -> None:
            fresh = await credentials.current()
            value = _authorization(fresh)
            if value and c.api_key.get("BearerToken") != value:
                c.api_key["BearerToken"] = value

        cfg.refresh_api_key_hook = refresh
    return cfg


def _authorization(info: kopf.ConnectionInfo) -> str | None:
    """The ``Authorization`` value for a token (``Bearer`` unless the record names a scheme)."""
    if not info.token:
        return None
    return f"{info.scheme or 'Bearer'} {info.token}"
